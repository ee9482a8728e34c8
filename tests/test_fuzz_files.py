"""Fuzzing the readers of files with files that lie: every kind of file attnkit reads, with one size in its
description multiplied by 10^k.

A file is untrusted input. Whatever number its description holds, reading it must end within a second and
100 MB (measured: time, and the peak of traced allocations, NumPy's included) in one of two ways: the estimator
or checkpoint, or a ValueError that names the file. A loaded estimator must then answer a short call or
refuse it with a clear error, within a second too. Kinds: the estimator files of every estimator (text,
token ids, Performer, a fine-tuned checkpoint, Seq2Seq, an embedder), attnkit 0.1.0's files
(tests/fixtures), and a checkpoint's config.json and sentence-transformers files.
"""

import json
import os
import time
import tracemalloc

import numpy as np
import pytest

import attnkit
from attnkit import Seq2SeqTransformer, TransformerClassifier, TransformerEmbedder
from attnkit.io import serialize
from hostile import no_hang  # noqa: F401 (an autouse fixture)

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
SECONDS, PEAK_BYTES = 1.0, 100 * 2**20
FACTORS = (1, 12)  # sizes multiplied by 10 (plausible) and 10^12 (absurd)
TEXTS = ["a good film", "not a good film", "awful", "great fun", "dull and long", "not bad"] * 4
LABELS = [1, 0, 0, 1, 0, 1] * 4
TINY = dict(d_model=8, n_heads=2, d_ff=16, max_iter=1, early_stopping=False, random_state=0)


def _int_leaves(value, path=()):
    """Paths to every int (not bool) in a JSON tree; of a list's items, only the first's (a vocabulary of ids
    or a curve holds many numbers of one meaning)."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [path]
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in _int_leaves(item, path + (key,))]
    if isinstance(value, list) and value:
        return _int_leaves(value[0], path + (0,))
    return []


def _multiplied(tree, path, factor):
    """A copy of ``tree`` with the int at ``path`` multiplied by ``factor``."""
    tree = json.loads(json.dumps(tree))
    node = tree
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] *= factor
    return tree


def _bounded(call, what):
    """``call()``'s result, or the ValueError/TypeError it raised, checking it took < 1 s and < 100 MB."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        result = call()
    except (ValueError, TypeError) as error:
        result = error
    finally:
        seconds, peak = time.perf_counter() - start, tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert seconds < SECONDS and peak < PEAK_BYTES, f"{what}: {seconds:.2f} s, {peak / 2**20:.0f} MB"
    return result


def _use(estimator):
    """A short call on a loaded estimator."""
    if isinstance(estimator, Seq2SeqTransformer):
        return estimator.predict(["ab"], max_length=16)  # (longer: legitimately slower; the lengths are checked)
    if estimator._input["kind"] == "ids":
        return estimator.predict(np.array([[5, 6, 7, 0]]))
    return estimator.transform(["a good film", ""]) if isinstance(estimator, TransformerEmbedder) else \
        estimator.predict_proba(["a good film", ""])


def _estimator_files(folder):
    from tiny_bert import write_tiny_bert

    checkpoint = write_tiny_bert(folder / "tiny-bert")
    ids = np.array([[5, 6, 7, 0], [8, 9, 0, 0], [5, 9, 7, 6]] * 4)
    models = {
        "classifier": TransformerClassifier(**TINY).fit(TEXTS, LABELS),
        "classifier-ids-performer": TransformerClassifier(**TINY, attention="performer", positional="learned")
        .fit(ids, [0, 1, 1] * 4),
        "classifier-relative-online": TransformerClassifier(**{**TINY, "positional": "relative"})
        .partial_fit(TEXTS, LABELS, classes=[0, 1]),
        "classifier-pretrained": TransformerClassifier(pretrained=checkpoint, max_iter=1, early_stopping=False,
                                                       random_state=0).fit(TEXTS, LABELS),
        "seq2seq": Seq2SeqTransformer(d_model=8, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=16, max_iter=1,
                                      random_state=0).fit(["ab", "cd", "ef"], ["AB", "CD", "EF"]),
        "embedder": TransformerEmbedder(checkpoint).fit(),
    }
    files = {}
    for name, model in models.items():
        model.save(folder / f"{name}.npz")
        files[name] = serialize.load(folder / f"{name}.npz")
    for name in ("classifier-0.1.0", "classifier-ids-performer-0.1.0", "seq2seq-0.1.0"):
        files[name] = serialize.load(os.path.join(FIXTURES, f"{name}.npz"))
    return files


@pytest.fixture(scope="module")
def estimator_files(tmp_path_factory):
    pytest.importorskip("tokenizers")
    pytest.importorskip("safetensors")
    return _estimator_files(tmp_path_factory.mktemp("files"))


KINDS = ["classifier", "classifier-ids-performer", "classifier-relative-online", "classifier-pretrained", "seq2seq",
         "embedder", "classifier-0.1.0", "classifier-ids-performer-0.1.0", "seq2seq-0.1.0"]


@pytest.mark.filterwarnings("ignore:this classifier was saved by attnkit 0.1.0")  # its Performer features
@pytest.mark.parametrize("kind", KINDS)
def test_an_estimator_file_that_lies_about_a_size(estimator_files, kind, tmp_path):
    groups, config = estimator_files[kind]
    lying = tmp_path / f"{kind}.npz"
    for path in _int_leaves(config):  # every number of the description, one at a time
        for k in FACTORS:
            serialize.save(lying, groups, _multiplied(config, path, 10**k))
            loaded = _bounded(lambda: attnkit.load(lying), f"{path} x 10^{k}")
            if isinstance(loaded, Exception):
                assert isinstance(loaded, ValueError) and str(loaded).startswith(str(lying)), (path, k, repr(loaded))
            else:
                _bounded(lambda loaded=loaded: _use(loaded), f"using the file with {path} x 10^{k}")


CHECKPOINT_FILES = ("config.json", "sentence_bert_config.json", "1_Pooling/config.json")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    pytest.importorskip("tokenizers")
    pytest.importorskip("safetensors")
    from tiny_bert import write_tiny_bert

    return write_tiny_bert(tmp_path_factory.mktemp("checkpoint") / "tiny-bert")


@pytest.mark.parametrize("name", CHECKPOINT_FILES)
def test_a_checkpoint_that_lies_about_a_size(checkpoint, name, tmp_path):
    import shutil

    tree = json.loads((checkpoint / name).read_text())
    lying = tmp_path / "tiny-bert"
    shutil.copytree(checkpoint, lying)
    for path in _int_leaves(tree):
        for k in FACTORS:
            (lying / name).write_text(json.dumps(_multiplied(tree, path, 10**k)))
            for read in (lambda: attnkit.pretrained.load_checkpoint(lying), lambda: TransformerEmbedder(lying).fit()):
                loaded = _bounded(read, f"{name}: {path} x 10^{k}")
                if isinstance(loaded, Exception):
                    assert isinstance(loaded, ValueError) and str(loaded).startswith(str(lying)), repr(loaded)
                elif isinstance(loaded, TransformerEmbedder):
                    _bounded(lambda loaded=loaded: _use(loaded), f"using {name}: {path} x 10^{k}")
