"""attnkit.estimators._jobs: on every estimator, n_jobs is the kernels' thread count during each of its calls,
the count of before comes back after the call, also when it raises, and the parameter travels with the
estimator (get_params, clone, pickle, save and load). map_batches spends the threads on whole inference
batches when they share out evenly, with the same results bit for bit."""

import pickle
import threading

import numpy as np
import pytest
from sklearn.base import clone

import attnkit
from attnkit import (
    CausalLanguageModel,
    MaskedLanguageModel,
    RandomFourierFeatures,
    Seq2SeqTransformer,
    TransformerClassifier,
    TransformerEmbedder,
    _core,
)
from attnkit._config import num_threads, resolve_n_jobs
from attnkit.datasets import make_case_pairs, make_negation_sentences
from attnkit.estimators import embedder, random_features
from attnkit.estimators._jobs import BALANCE, MIN_SHARE, map_batches

pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")
from tiny_bert import write_tiny_bert  # noqa: E402 -- needs the two packages above

# What the estimators' calls reach: kernels, and for the fits that run none (an embedder reads a checkpoint,
# random features draw frequencies), the function that does their work.
PROBES = [(_core, name) for name in ("matmul", "random_features", "projected_random_features")] + [
    (embedder, "load_checkpoint"), (random_features, "gaussian_rows")]


def _classifier(tmp_path):
    X, y = make_negation_sentences(40, random_state=0)
    estimator = TransformerClassifier(d_model=8, n_heads=2, d_ff=16, n_layers=1, max_iter=1, early_stopping=False,
                                      random_state=0)
    calls = {"fit": lambda e: e.fit(X, y), "partial_fit": lambda e: e.partial_fit(X, y),
             "predict": lambda e: e.predict(X), "predict_proba": lambda e: e.predict_proba(X),
             "predict_log_proba": lambda e: e.predict_log_proba(X),
             "decision_function": lambda e: e.decision_function(X), "transform": lambda e: e.transform(X),
             "fit_transform": lambda e: e.fit_transform(X, y), "score": lambda e: e.score(X, y),
             "attention_maps": lambda e: e.attention_maps(X[:2])}
    return estimator, (X, y), calls


def _seq2seq(tmp_path):
    X, y = make_case_pairs(20, random_state=0)
    estimator = Seq2SeqTransformer(d_model=8, n_heads=2, d_ff=16, encoder_layers=1, decoder_layers=1, max_iter=1,
                                   max_target_len=8, early_stopping=False, random_state=0)
    calls = {"fit": lambda e: e.fit(X, y), "partial_fit": lambda e: e.partial_fit(X, y),
             "predict": lambda e: e.predict(X), "score": lambda e: e.score(X, y),
             "sequence_log_proba": lambda e: e.sequence_log_proba(X, y),
             "attention_maps": lambda e: e.attention_maps(X[:2])}
    return estimator, (X, y), calls


def _embedder(tmp_path):
    # Of uneven lengths, so that transform runs its two texts in turn, each op on n_jobs threads (texts that
    # share out evenly run one per thread, each op on one: test_embedder_on_batches_at_once_...).
    texts = ["the film was good and the plot was fun", "bad"]
    estimator = TransformerEmbedder(str(write_tiny_bert(tmp_path / "tiny-bert")))
    calls = {"fit": lambda e: e.fit(texts), "transform": lambda e: e.transform(texts),
             "fit_transform": lambda e: e.fit_transform(texts), "attention_maps": lambda e: e.attention_maps(texts)}
    return estimator, (texts, None), calls


def _random_features(tmp_path):
    X = np.random.default_rng(0).standard_normal((20, 3))
    calls = {"fit": lambda e: e.fit(X), "transform": lambda e: e.transform(X),
             "fit_transform": lambda e: e.fit_transform(X)}
    return RandomFourierFeatures(n_components=8, kind="positive", random_state=0), (X, None), calls


ESTIMATORS = {"classifier": _classifier, "seq2seq": _seq2seq, "embedder": _embedder,
              "random_features": _random_features}


@pytest.fixture(params=list(ESTIMATORS))
def case(request, tmp_path):
    estimator, data, calls = ESTIMATORS[request.param](tmp_path)
    return estimator, data, calls


@pytest.fixture
def threads_seen(monkeypatch):
    """The kernels' thread count at each call of a probe, while the test runs."""
    seen = []
    for module, name in PROBES:
        probe = getattr(module, name)

        def spy(*args, _probe=probe, **kwargs):
            seen.append(attnkit.get_num_threads())
            return _probe(*args, **kwargs)

        monkeypatch.setattr(module, name, spy)
    return seen


@pytest.fixture
def one_thread():
    with num_threads(1):
        yield


def _prepared(estimator, data, calls, method, n_jobs):
    """``estimator`` with ``n_jobs``, fitted unless ``method`` fits; partial_fit's first call gives classes."""
    estimator = clone(estimator).set_params(n_jobs=n_jobs)
    if method == "partial_fit" and isinstance(estimator, TransformerClassifier):
        estimator.partial_fit(*data, classes=[0, 1])
    elif not method.startswith("fit"):
        calls["fit"](estimator)
    return estimator


@pytest.mark.parametrize("n_jobs", [2, -1])
def test_each_call_runs_on_n_jobs_threads_and_restores_the_count(case, threads_seen, one_thread, n_jobs):
    estimator, data, calls = case
    for method, call in calls.items():
        model = _prepared(estimator, data, calls, method, n_jobs)
        threads_seen.clear()
        call(model)
        assert threads_seen and set(threads_seen) == {resolve_n_jobs(n_jobs)}, method
        assert attnkit.get_num_threads() == 1, method


def test_n_jobs_none_leaves_the_count_alone(case, threads_seen, one_thread):
    estimator, data, calls = case
    for method, call in calls.items():
        model = _prepared(estimator, data, calls, method, None)
        threads_seen.clear()
        call(model)
        assert threads_seen and set(threads_seen) == {1}, method


def test_the_count_is_restored_when_a_call_raises(case, one_thread, monkeypatch):
    estimator, data, calls = case
    for method, call in calls.items():
        model = _prepared(estimator, data, calls, method, 2)

        def failing(*args, **kwargs):
            assert attnkit.get_num_threads() == 2
            raise RuntimeError("kernel failed")

        with monkeypatch.context() as patch:
            for module, name in PROBES:
                patch.setattr(module, name, failing)
            with pytest.raises(RuntimeError, match="kernel failed"):
                call(model)
        assert attnkit.get_num_threads() == 1, method


@pytest.mark.parametrize(("n_jobs", "error"), [(0, ValueError), (True, TypeError), (1.5, TypeError),
                                               ("2", TypeError), (np.float64(2.0), TypeError), (1025, ValueError),
                                               (-1025, ValueError)])
def test_bad_n_jobs_is_refused_by_name_before_any_work(case, one_thread, n_jobs, error):
    estimator, data, calls = case
    with pytest.raises(error, match=rf"'n_jobs' parameter of {type(estimator).__name__} must be None, an int in "
                                    r"the range \[1, 1024\] or an int in the range \[-1024, -1\]"):
        calls["fit"](clone(estimator).set_params(n_jobs=n_jobs))
    assert attnkit.get_num_threads() == 1


def test_n_jobs_travels_with_the_estimator(case, tmp_path):
    estimator, _, calls = case
    model = clone(estimator).set_params(n_jobs=2)
    assert model.get_params()["n_jobs"] == 2 and clone(model).n_jobs == 2 and type(estimator)().n_jobs is None
    calls["fit"](model)
    assert pickle.loads(pickle.dumps(model)).n_jobs == 2
    if hasattr(model, "save"):
        model.save(tmp_path / "model.npz")
        assert attnkit.load(tmp_path / "model.npz").n_jobs == 2


def test_every_public_method_that_runs_kernels_is_threaded():
    """A method is threaded where it is defined (@threaded, @fit_context): every public method of every
    estimator is marked, or one of these, which never reach a kernel, or one of scikit-learn's mixins that
    only call marked methods (fit_transform: fit, transform; score: predict)."""
    no_kernels = {"get_params", "set_params", "save", "get_feature_names_out", "set_output", "get_metadata_routing"}
    calls_marked = {"fit_transform", "score"}
    for cls in (TransformerClassifier, Seq2SeqTransformer, TransformerEmbedder, RandomFourierFeatures,
                CausalLanguageModel, MaskedLanguageModel):
        public = {name for name in dir(cls) if not name.startswith("_") and callable(getattr(cls, name))
                  and not name.startswith("set_") or name in {"set_params", "set_output"}}
        for name in public - no_kernels:
            method = getattr(cls, name)
            owner = next(base for base in cls.__mro__ if name in base.__dict__)
            if owner.__module__.startswith("sklearn"):
                assert name in calls_marked, (cls.__name__, name)
            else:
                assert getattr(method, "__attnkit_threaded__", False), (cls.__name__, name)


# ------------------------------------------------------------------------------------------ map_batches
def _calls(batches, cost, threads):
    """(batch, thread name, kernel threads) of each call map_batches makes at ``threads`` threads."""
    seen, lock = [], threading.Lock()

    def fn(batch):
        with lock:
            seen.append((batch, threading.current_thread().name, attnkit.get_num_threads()))

    with num_threads(threads):
        map_batches(fn, batches, cost=cost)
        assert attnkit.get_num_threads() == threads
    return seen


def test_map_batches_gives_even_batches_to_threads_with_one_kernel_thread_each():
    seen = _calls(range(8), lambda b: MIN_SHARE / 4, 2)  # 2 x MIN_SHARE in all: worth two threads
    assert sorted(b for b, _, _ in seen) == list(range(8))
    assert {name.startswith("attnkit-batch") for _, name, _ in seen} == {True}
    assert {n for _, _, n in seen} == {1}


def test_map_batches_takes_the_costliest_batch_first():
    seen = _calls([1, 5, 3, 2, 4, 6], lambda b: b * MIN_SHARE, 2)
    assert sorted(b for b, _, _ in seen) == [1, 2, 3, 4, 5, 6]
    first = {}  # each worker's first batch (by name: the order of ``seen`` across workers is the scheduler's)
    for batch, name, _ in seen:
        first.setdefault(name, batch)
    assert set(first.values()) <= {5, 6} and 6 in first.values()


@pytest.mark.parametrize(("batches", "cost", "threads"), [
    ([0], lambda b: 1e3, 2),                        # fewer batches than threads
    ([0, 1, 2], lambda b: 1e3, 2),                  # 2 + 1: the busiest over 1.5 equal shares
    ([0, 1, 2, 3], lambda b: 1e4 if b == 0 else 1e3, 2),  # one batch outweighs the rest
    (list(range(8)), lambda b: 1e3, 1),             # one thread
    ([], lambda b: 1e3, 2),
    (list(range(8)), lambda b: MIN_SHARE / 4 - 1, 2),  # even, but too little work for two Python threads
])
def test_map_batches_runs_uneven_or_few_batches_in_turn_on_every_thread(batches, cost, threads):
    seen = _calls(batches, cost, threads)
    assert [b for b, _, _ in seen] == list(batches)  # in the given order, in the calling thread
    assert {name for _, name, _ in seen} <= {threading.current_thread().name}
    assert {n for _, _, n in seen} <= {threads}


def test_map_batches_balance_bound():
    # 5 equal batches on 2 threads: 3 / 2.5 = 1.2 > BALANCE; 6 share evenly.
    assert BALANCE < 1.2
    assert {n for _, _, n in _calls(range(5), lambda b: 1e3, 2)} == {2}
    assert {n for _, _, n in _calls(range(6), lambda b: 1e3, 2)} == {1}


def test_map_batches_reraises_a_workers_error_and_restores_the_count():
    def fn(batch):
        if batch == 3:
            raise RuntimeError("batch 3 failed")

    with num_threads(2):
        with pytest.raises(RuntimeError, match="batch 3 failed"):
            map_batches(fn, range(8), cost=lambda b: 1.0)
        assert attnkit.get_num_threads() == 2


@pytest.fixture
def batch_threads(monkeypatch):
    """Names of the threads that ran matmul kernels, while the test runs."""
    names = set()
    matmul = _core.matmul

    def spy(*args, **kwargs):
        names.add(threading.current_thread().name)
        return matmul(*args, **kwargs)

    monkeypatch.setattr(_core, "matmul", spy)
    return names


@pytest.mark.parametrize("attention", ["softmax", "linear"])
def test_classifier_inference_on_batches_at_once_equals_one_thread_bit_for_bit(attention, monkeypatch,
                                                                               batch_threads):
    X, y = make_negation_sentences(120, random_state=0)
    model = TransformerClassifier(d_model=16, n_heads=2, d_ff=32, n_layers=2, max_iter=1, attention=attention,
                                  early_stopping=False, random_state=0).fit(X, y)
    monkeypatch.setattr(TransformerClassifier, "_batch_tokens", 64)  # a dozen batches
    expected = model.set_params(n_jobs=1).predict_proba(X)
    batch_threads.clear()
    got = model.set_params(n_jobs=2).predict_proba(X)
    assert any(name.startswith("attnkit-batch") for name in batch_threads)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(model.transform(X), model.set_params(n_jobs=1).transform(X))


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_embedder_on_batches_at_once_equals_one_thread_bit_for_bit(tmp_path, dtype, batch_threads):
    texts = [" ".join(["good", "bad", "film", "plot"][: 1 + i % 4] * (1 + i % 3)) for i in range(40)]
    model = TransformerEmbedder(str(write_tiny_bert(tmp_path / "tiny-bert")), batch_size=4,
                                inference_dtype=dtype).fit()
    expected = model.set_params(n_jobs=1).transform(texts)
    batch_threads.clear()
    got = model.set_params(n_jobs=2).transform(texts)
    if dtype == "float32":
        assert any(name.startswith("attnkit-batch") for name in batch_threads)
    np.testing.assert_array_equal(got, expected)
    # A call of at most one batch (a server's few requests), of lengths that halve unevenly by count, with
    # MIN_SHARE tokens a thread: cut into two batches of equal tokens, one per thread, with the same bits.
    long = [" ".join(["good", "bad", "film", "plot"] * 4)] * 15 + texts[:1]  # 15 x 18 tokens (max_len 20), and 3
    model.set_params(batch_size=16)
    batch_threads.clear()
    np.testing.assert_array_equal(model.set_params(n_jobs=2).transform(long),
                                  model.set_params(n_jobs=1).transform(long))
    if dtype == "float32":
        assert sum(name.startswith("attnkit-batch") for name in batch_threads) >= 1
    # Fewer tokens: one batch, each op on both threads of the caller (Python threads' GIL would cost more).
    few = texts[:3] + [texts[11] + " " + texts[10]]
    batch_threads.clear()
    np.testing.assert_array_equal(model.set_params(n_jobs=2).transform(few),
                                  model.set_params(n_jobs=1).transform(few))
    assert not any(name.startswith("attnkit-batch") for name in batch_threads)


def test_map_batches_keeps_its_workers_between_calls_and_a_batch_that_maps_batches_runs_them_in_turn():
    # The same two thread objects both times. Each of the first two batches waits for the other, so both
    # workers take one: with batches this quick, one worker could otherwise take all eight (CI saw it).
    def workers():
        barrier, seen = threading.Barrier(2, timeout=30), set()

        def fn(batch):
            if batch < 2:
                barrier.wait()
            seen.add(threading.current_thread())

        with num_threads(2):
            map_batches(fn, range(8), cost=lambda b: MIN_SHARE / 4)
        return seen

    outer = workers()
    assert len(outer) == 2 and workers() == outer
    inner, lock = [], threading.Lock()

    def fn(batch):  # each batch maps batches of its own on 2 threads: in turn, on its worker (no deadlock)
        with num_threads(2):
            seen = _calls(range(4), lambda b: MIN_SHARE, 2)
        with lock:
            inner.append((threading.current_thread().name, seen))

    with num_threads(2):
        map_batches(fn, range(4), cost=lambda b: MIN_SHARE)
    assert len(inner) == 4
    for name, seen in inner:
        assert [b for b, _, _ in seen] == list(range(4)) and {n for _, n, _ in seen} == {name}


def test_a_fit_gives_the_same_model_on_one_thread_and_on_several():
    # 32 windows of 64 tokens, 128 wide: every elementwise and row-wise pass is large enough for threads
    # (the layer norms' parameter gradients summed partials per thread, and differed, before)
    text = " ".join(f"the {w} was {'not ' * (i % 2)}good" for i, w in enumerate(["film", "plot", "cast"] * 60))
    models = [CausalLanguageModel(tokenizer="char", context_length=64, d_model=128, n_heads=4, n_layers=1,
                                  batch_size=32, max_iter=2, early_stopping=False, random_state=0,
                                  n_jobs=n).fit([text]) for n in (1, 2, 3)]
    weights = [dict((name, p.copy()) for name, p, _ in m._network().named_parameters()) for m in models]
    for other in weights[1:]:
        assert all(np.array_equal(weights[0][name], other[name]) for name in weights[0])
