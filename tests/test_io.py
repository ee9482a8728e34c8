"""attnkit.io: save/load without pickle, bit-exact round trips, refusals, atomic writes."""

import doctest
import json
import os
import pickle

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

import attnkit
from attnkit import TransformerClassifier, io
from attnkit.io import from_json, serialize, to_json

SMALL = dict(d_model=16, n_heads=2, d_ff=32, n_layers=1, max_iter=2, random_state=0)
TEXTS = ["good film", "bad film", "not good", "not bad at all", "great", "awful"] * 20
LABELS = ["pos", "neg", "neg", "pos", "pos", "neg"] * 20


@pytest.fixture(scope="module")
def fitted():
    return TransformerClassifier(**SMALL, class_weight={"pos": 2.0, "neg": 1.0}, mlm_epochs=1).fit(TEXTS, LABELS)


@pytest.fixture(scope="module")
def online():
    """A classifier trained by partial_fit: its file holds optimiser moments too."""
    return TransformerClassifier(**SMALL).partial_fit(TEXTS, LABELS, classes=["neg", "pos"])


def _same_fitted_state(a, b):
    assert a.get_params() == b.get_params()
    assert np.array_equal(a.classes_, b.classes_) and a.classes_.dtype == b.classes_.dtype
    assert a.vocabulary_ == b.vocabulary_
    for name in ("n_iter_", "loss_curve_", "validation_loss_curve_", "validation_scores_", "best_validation_score_",
                 "best_epoch_", "mlm_loss_curve_"):
        assert getattr(a, name) == getattr(b, name), name
    assert a._weights.keys() == b._weights.keys()
    for name in a._weights:
        assert a._weights[name].dtype == b._weights[name].dtype
        assert np.array_equal(a._weights[name], b._weights[name]), name


def test_docstring_example_runs():
    assert doctest.testmod(io).failed == 0


def test_round_trip_is_bit_exact(fitted, tmp_path):
    path = tmp_path / "model.npz"
    fitted.save(path)
    restored = attnkit.load(path)
    _same_fitted_state(fitted, restored)
    probe = ["a good film", "not good at all", "zzz", ""]
    assert np.array_equal(restored.predict_proba(probe), fitted.predict_proba(probe))
    assert np.array_equal(restored.transform(probe), fitted.transform(probe))
    assert restored.class_weight == {"pos": 2.0, "neg": 1.0}
    assert sorted(os.listdir(tmp_path)) == ["model.npz"]  # the exact name, no temporary left behind


def test_round_trip_of_token_ids_with_int_labels_and_class_weight(tmp_path):
    X = np.random.default_rng(0).integers(0, 9, size=(120, 6))
    y = np.arange(120) % 3
    clf = TransformerClassifier(**SMALL, class_weight={0: 1.0, 2: 3.0}, padding_id=0).fit(X, y)
    io.save(clf, tmp_path / "ids.npz")
    restored = io.load(tmp_path / "ids.npz")
    _same_fitted_state(clf, restored)
    assert restored.n_features_in_ == 6 and restored.class_weight == {0: 1.0, 2: 3.0}
    assert np.array_equal(restored.predict_proba(X), clf.predict_proba(X))
    with pytest.raises(ValueError, match="X has 5 features"):
        restored.predict(X[:, :5])


def test_partial_fit_resumes_identically_after_loading(tmp_path):
    clf = TransformerClassifier(**SMALL).partial_fit(TEXTS, LABELS, classes=["neg", "pos"])
    clf.save(tmp_path / "m.npz")
    restored = attnkit.load(tmp_path / "m.npz")
    clf.partial_fit(TEXTS, LABELS)
    restored.partial_fit(TEXTS, LABELS)
    _same_fitted_state(clf, restored)


def test_random_state_objects_are_saved_as_none(tmp_path):
    clf = TransformerClassifier(**{**SMALL, "random_state": np.random.default_rng(0)}).fit(TEXTS, LABELS)
    clf.save(tmp_path / "m.npz")
    assert attnkit.load(tmp_path / "m.npz").random_state is None


def test_an_attention_map_survives_the_round_trip(fitted, tmp_path):
    fitted.save(tmp_path / "m.npz")
    before, after = fitted.attention_maps(["not good"]), attnkit.load(tmp_path / "m.npz").attention_maps(["not good"])
    assert before[0]["tokens"] == after[0]["tokens"]
    assert np.array_equal(before[0]["weights"], after[0]["weights"])


def test_save_refuses_what_it_cannot_load(tmp_path):
    with pytest.raises(NotFittedError):
        io.save(TransformerClassifier(), tmp_path / "m.npz")
    supported = (r"\[.CausalLanguageModel., .MaskedLanguageModel., .Seq2SeqTransformer., .TransformerClassifier., "
                 r".TransformerEmbedder.\]")
    with pytest.raises(TypeError, match=rf"save supports {supported}, got .*RandomFourierFeatures"):
        io.save(attnkit.RandomFourierFeatures().fit([[0.0]]), tmp_path / "m.npz")
    assert not os.listdir(tmp_path)


def _rewrite(path, change):
    """Rewrite a saved file's config (and arrays) through serialize, as a tamperer could."""
    states, config = serialize.load(path)
    change(states, config)
    serialize.save(path, states, config)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda s, c: c.update(format="other"), "is not an attnkit estimator file"),
        (lambda s, c: c.update(version=3), "format version 3 is newer than this attnkit reads"),
        (lambda s, c: c.update(estimator="os.system"),
         r"unknown estimator 'os.system'.*loads "
         r"\[.CausalLanguageModel., .MaskedLanguageModel., .Seq2SeqTransformer., 'TransformerClassifier', "
         r"'TransformerEmbedder'\]"),
        (lambda s, c: s["weights"].pop(next(iter(s["weights"]))), "state dict does not match the model: missing"),
        (lambda s, c: s["weights"].update(extra=np.zeros(3)), "unexpected \\['extra'\\]"),
        (lambda s, c: s["weights"].update({k: np.zeros((2, 2)) for k in list(s["weights"])[:1]}),
         "expected a float array of shape"),
        (lambda s, c: c["fitted"]["vocabulary"].extend(f"word{i}" for i in range(50)),
         r"its vocabulary holds \d+ tokens, more than its network's vocab_size"),
        (lambda s, c: c["fitted"].update(classes=["a", "b", "c"]), "names 3 classes for a network of n_classes=2"),
    ],
    ids=["format", "version", "estimator", "missing-array", "extra-array", "wrong-shape", "vocabulary", "classes"],
)
def test_load_refuses_files_it_did_not_write(fitted, tmp_path, change, match):
    path = tmp_path / "m.npz"
    fitted.save(path)
    _rewrite(path, change)
    with pytest.raises(ValueError, match=match):
        attnkit.load(path)


def _network(config):
    return config["fitted"]["network"]


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda s, c: _network(c).update(n_layers=100_000_000),
         r"the network config says n_layers=100000000, but there are only \d+ weight arrays"),
        (lambda s, c: _network(c).update(vocab_size=10**10),
         r"the weights do not match the network config: parameter 'embedding.tokens.weight': expected a float "
         r"array of shape \(10000000000, 16\)"),
        (lambda s, c: _network(c).update(d_model=10**9, n_heads=10**9 // 2),
         r"the weights do not match the network config: parameter '.*': expected a float array of shape .*1000000000"),
        (lambda s, c: c["params"].update(n_estimators=3),
         r"the file gives TransformerClassifier parameters it does not have: \['n_estimators'\]"),
        (lambda s, c: c["params"].update(max_len=-1),
         r"The 'max_len' parameter of TransformerClassifier \(as the file gives it\) must be"),
        (lambda s, c: c["fitted"].pop("network"),
         r"the TransformerClassifier's fitted state lacks the entry 'network'"),
        (lambda s, c: c["fitted"].update(network_seed="x"), r"invalid literal for int\(\) with base 10: 'x'"),
        (lambda s, c: c.pop("fitted"), r"the file has no 'fitted' entry \(a JSON object\)"),
        (lambda s, c: c["fitted"].update(training=[1, 2]), r"is not a valid TransformerClassifier file"),
        (lambda s, c: s["weights"].update({k: np.full_like(v, np.nan) for k, v in list(s["weights"].items())[:1]}),
         r"array weights/embedding.tokens.weight holds non-finite values \(NaN or inf\)"),
        (lambda s, c: s["optimizer"].update({k: v * np.inf for k, v in list(s["optimizer"].items())[:1]}),
         r"array optimizer/\S+ holds non-finite values"),
    ],
    ids=["n_layers-1e8", "vocab_size-1e10", "d_model-1e9", "unknown-param", "bad-param", "no-network", "seed-type",
         "no-fitted", "training-type", "nan-weight", "inf-moment"],
)
def test_a_hostile_file_is_refused_at_once_naming_the_file_and_the_field(online, tmp_path, change, match):
    # A lying config used to hang (10^8 layers) or raise NumPy's MemoryError 14 frames deep (10^10 tokens): the
    # network is now built around the file's arrays, so a lie is refused by a shape check, in milliseconds.
    import time
    import tracemalloc

    path = tmp_path / "m.npz"
    online.save(path)
    _rewrite(path, change)
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(ValueError, match=match) as error:
            attnkit.load(path)
        seconds, peak = time.perf_counter() - start, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(error.value).startswith(str(path))
    assert seconds < 1.0 and peak < 100 * 2**20, (seconds, peak)


def test_load_refuses_other_files_and_never_unpickles(tmp_path):
    np.savez(tmp_path / "plain.npz", a=np.zeros(2))
    with pytest.raises(ValueError, match="not an attnkit checkpoint"):
        attnkit.load(tmp_path / "plain.npz")
    np.savez(tmp_path / "objects.npz", **{serialize.META_KEY: np.array([{"a": 1}], dtype=object)})
    with pytest.raises(ValueError, match="allow_pickle=False"):
        attnkit.load(tmp_path / "objects.npz")


@pytest.mark.parametrize("damage", ["empty", "truncated-start", "truncated-end", "flipped-bytes"])
def test_load_refuses_damaged_files(fitted, tmp_path, damage):
    path = tmp_path / "m.npz"
    fitted.save(path)
    data = bytearray(path.read_bytes())
    if damage == "empty":
        data = b""
    elif damage == "truncated-start":
        data = data[:100]
    elif damage == "truncated-end":
        data = data[:-10]
    else:  # inside the weights: NumPy alone would read the changed numbers without complaint
        middle = len(data) // 2
        data[middle:middle + 16] = bytes(b ^ 0xFF for b in data[middle:middle + 16])
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="not a complete .npz archive|is damaged: entry .* fails its CRC-32"):
        attnkit.load(path)


class _RunsCode:
    """Unpickling this creates a marker directory: what a malicious model file would do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_a_tampered_file_cannot_run_code(fitted, tmp_path):
    marker = tmp_path / "code-ran"
    path = tmp_path / "m.npz"
    fitted.save(path)
    with np.load(path) as npz:
        arrays = {key: npz[key] for key in npz.files}
    payload = np.empty(1, dtype=object)
    payload[0] = _RunsCode(marker)
    for key in (serialize.META_KEY, next(k for k in arrays if k != serialize.META_KEY)):
        tampered = dict(arrays, **{key: payload})
        np.savez(path, **tampered)
        with pytest.raises(ValueError, match="allow_pickle=False"):
            attnkit.load(path)
        assert not marker.exists()
    pickle.loads(pickle.dumps(payload[0]))  # the payload is live: unpickled, it does create the marker
    assert marker.exists()


def test_a_failed_save_leaves_the_old_file_intact(fitted, tmp_path, monkeypatch):
    path = tmp_path / "m.npz"
    fitted.save(path)
    before = path.read_bytes()

    def broken_save(file, *args, **kwargs):
        file.write(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(serialize, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        fitted.save(path)
    assert path.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["m.npz"]


def test_load_reads_file_objects(fitted, tmp_path):
    fitted.save(tmp_path / "m.npz")
    with open(tmp_path / "m.npz", "rb") as file:
        restored = attnkit.load(file)
    assert np.array_equal(restored.predict_proba(["good"]), fitted.predict_proba(["good"]))


def test_save_writes_file_objects(fitted, tmp_path):
    from io import BytesIO

    buffer = BytesIO()
    io.save(fitted, buffer)
    assert buffer.getvalue() == (fitted.save(tmp_path / "m.npz") or (tmp_path / "m.npz").read_bytes())
    buffer.seek(0)
    assert np.array_equal(attnkit.load(buffer).predict_proba(["good"]), fitted.predict_proba(["good"]))


@pytest.mark.parametrize(
    "value",
    [{"a": 1, "b": [1, 2.5, None]}, {1: "x", (2, 3): "y"}, (1, "a"), np.array(["neg", "pos"]), np.array([3, 1]),
     np.array([True, False]), np.array(["a", "b"], dtype=object), {"__tuple__": 1}, np.float32(1.5)],
    ids=["plain", "int-keys", "tuple", "str-array", "int-array", "bool-array", "object-array", "dunder-key", "scalar"],
)
def test_json_encoding_round_trips(value):
    back = from_json(json.loads(json.dumps(to_json(value))))
    if isinstance(value, np.ndarray):
        assert back.dtype == value.dtype and np.array_equal(back, value)
    else:
        assert back == value


def test_json_decoding_refuses_odd_dtypes():
    with pytest.raises(ValueError, match="array dtype .* is not allowed"):
        from_json({"__array__": [1], "dtype": "<M8[s]"})


# ------------------------------------------------------------------------- files of attnkit 0.1.0

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


@pytest.fixture(scope="module")
def legacy():
    """What attnkit 0.1.0 predicted for the models it saved in tests/fixtures (see its README)."""
    with open(os.path.join(FIXTURES, "legacy-0.1.0.json"), encoding="utf-8") as file:
        return json.load(file)


def test_a_classifier_saved_by_0_1_0_loads_and_predicts_as_it_did(legacy, tmp_path):
    expected = legacy["classifier"]
    clf = attnkit.load(os.path.join(FIXTURES, "classifier-0.1.0.npz"))
    assert clf.features == "pooled"  # what its transform gave, before the parameter existed
    # The products now run on attnkit's own kernels, not OpenBLAS: float32 rounding may differ in the last bits.
    np.testing.assert_allclose(clf.predict_proba(expected["X"]), expected["predict_proba"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(clf.transform(expected["X"]), expected["transform"], rtol=1e-4, atol=1e-5)
    for name in ("n_iter_", "loss_curve_", "validation_scores_", "best_validation_score_"):
        assert getattr(clf, name) == expected[name], name
    clf.save(tmp_path / "again.npz")  # written in today's format, read back the same
    np.testing.assert_array_equal(attnkit.load(tmp_path / "again.npz").predict_proba(expected["X"]),
                                  clf.predict_proba(expected["X"]))


def test_a_seq2seq_saved_by_0_1_0_loads_and_predicts_as_it_did(legacy, tmp_path):
    expected = legacy["seq2seq"]
    model = attnkit.load(os.path.join(FIXTURES, "seq2seq-0.1.0.npz"))
    assert list(model.predict(expected["X"], max_length=20)) == expected["predict"]
    np.testing.assert_allclose(model.sequence_log_proba(expected["X"], expected["y"]), expected["predict_log_proba"],
                               rtol=1e-5)
    assert model.n_iter_ == expected["n_iter_"] and model.loss_curve_ == expected["loss_curve_"]
    assert model.validation_scores_ == expected["validation_scores_"]
    # 0.1.0 reported the highest score; it is now the kept epoch's (here the lowest validation loss).
    kept = 1 + int(np.argmin(model.validation_loss_curve_))
    assert model.best_validation_score_ == model.validation_scores_[kept - 1]
    model.save(tmp_path / "again.npz")
    assert list(attnkit.load(tmp_path / "again.npz").predict(expected["X"], max_length=20)) == expected["predict"]


def test_a_performer_classifier_of_0_1_0_loads_as_0_1_0_loaded_it_and_says_so(legacy):
    """0.1.0 saved no seed for Performer's random features, so its own load drew other ones; the file is
    read the same way, with a warning that says what was lost."""
    expected = legacy["classifier_ids"]
    with pytest.warns(UserWarning, match="did not keep the seed of its Performer random features"):
        clf = attnkit.load(os.path.join(FIXTURES, "classifier-ids-performer-0.1.0.npz"))
    np.testing.assert_allclose(clf.predict_proba(np.array(expected["X"])), expected["predict_proba_after_load"],
                               rtol=1e-5, atol=1e-6)


def test_save_names_the_users_path_and_honours_the_umask(fitted, tmp_path):
    with pytest.raises(IsADirectoryError, match=rf"path '{tmp_path}' is a directory; give the file to write, such as "
                                                rf"'{tmp_path}/model.npz'"):
        fitted.save(tmp_path)
    missing = tmp_path / "no" / "such" / "m.npz"
    with pytest.raises(FileNotFoundError, match=rf"cannot save to '{missing}': the folder '{missing.parent}' does not "
                                                "exist"):
        fitted.save(missing)
    old = os.umask(0o022)
    try:
        fitted.save(tmp_path / "m.npz")
        np.savez(tmp_path / "numpy.npz", a=np.zeros(1))
    finally:
        os.umask(old)
    # np.savez's permissions (0644 here), so that a service running as another user can read the model
    assert (tmp_path / "m.npz").stat().st_mode & 0o777 == (tmp_path / "numpy.npz").stat().st_mode & 0o777 == 0o644
    assert sorted(os.listdir(tmp_path)) == ["m.npz", "numpy.npz"]


def test_a_file_never_carries_a_path_a_later_call_writes_to(tmp_path):
    clf = TransformerClassifier(**SMALL, early_stopping=False, checkpoint_path=tmp_path / "run.npz").fit(TEXTS, LABELS)
    clf.save(tmp_path / "m.npz")
    _, config = serialize.load(tmp_path / "m.npz")
    assert config["params"]["checkpoint_path"] is None
    # a file written before this rule (or by hand) still does not choose where fit writes
    _rewrite(tmp_path / "m.npz", lambda s, c: c["params"].update(checkpoint_path=str(tmp_path / "elsewhere.npz")))
    loaded = attnkit.load(tmp_path / "m.npz")
    assert loaded.checkpoint_path is None
    loaded.set_params(warm_start=True, max_iter=1).fit(TEXTS, LABELS)
    assert not (tmp_path / "elsewhere.npz").exists()


@pytest.mark.parametrize("path", [None, 3, ["m.npz"]])
def test_load_takes_a_path_or_a_file_object(path):
    with pytest.raises(TypeError, match="path must be a str, os.PathLike or a binary file object, got"):
        attnkit.load(path)


def test_load_refuses_entries_that_lie_about_their_size(fitted, tmp_path):
    import zipfile

    path = tmp_path / "m.npz"
    fitted.save(path)
    with zipfile.ZipFile(path) as archive:
        entries = {info.filename: archive.read(info) for info in archive.infolist()}
    name = next(n for n in entries if n.startswith("weights/"))
    # an .npy header that claims 10^12 rows for the few bytes the entry holds (NumPy would allocate them first)
    header = entries[name][10:10 + int.from_bytes(entries[name][8:10], "little")].decode("latin1")
    shape = header[header.index("(") + 1:header.index(")")]
    entries[name] = entries[name].replace(shape.encode(), b"1000000000000" + shape.encode()[len(shape.split(",")[0]):])
    with zipfile.ZipFile(path, "w") as archive:
        for entry, data in entries.items():
            archive.writestr(entry, data)
    with pytest.raises(ValueError, match=rf"{path}: entry '{name}' declares a float32 array of shape \(1000000000000"):
        attnkit.load(path)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("__attnkit__.npy", b"\x93NUMPY\x01\x00" + (2**16 - 1).to_bytes(2, "little") + b" " * 70000)
    with pytest.raises(ValueError, match="has a malformed .npy header|is not a .npy array"):
        attnkit.load(path)


def test_load_refuses_a_description_nested_too_deep(fitted, tmp_path):
    path = tmp_path / "m.npz"
    fitted.save(path)
    with np.load(path) as npz:
        arrays = {key: npz[key] for key in npz.files}
    arrays[serialize.META_KEY] = np.array("[" * 100_000 + "]" * 100_000)
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match="entry is not valid JSON"):
        attnkit.load(path)
