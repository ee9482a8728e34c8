"""Threads: kernels release the GIL, and ops and estimators give the same answers when several Python
threads call them at once as when one thread calls them in turn; the estimators leave the user's BLAS
alone; fit on one thread while another predicts with a fitted clone."""

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from sklearn.base import clone
from threadpoolctl import threadpool_info

import attnkit
from attnkit import RandomFourierFeatures, Seq2SeqTransformer, TransformerClassifier
from attnkit.datasets import make_case_pairs, make_negation_sentences

ROUNDS = 6  # calls per thread: enough overlap for a shared scratch buffer or state to show


def _concurrently(calls):
    """Run every zero-argument callable ROUNDS times on its own thread, all threads released
    together; returns each callable's results."""
    barrier = threading.Barrier(len(calls))

    def run(call):
        barrier.wait()
        return [call() for _ in range(ROUNDS)]

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


def _assert_same_as_serial(calls):
    serial = [call() for call in calls]
    for expected, results in zip(serial, _concurrently(calls)):
        for result in results:
            np.testing.assert_array_equal(result, expected)


def test_ops_from_several_threads_match_serial_calls(kernel_threads):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((4, 2, 48, 16), dtype=np.float32) for _ in range(3))
    lengths = np.array([48, 30, 7, 1])
    x = rng.standard_normal((300, 16), dtype=np.float32)
    w = rng.standard_normal((16, 64), dtype=np.float32)
    calls = [
        lambda: attnkit.scaled_dot_product_attention(q, k, v, key_lengths=lengths, causal=True),
        lambda: attnkit.linear_attention(q, k, v, causal=True),
        lambda: attnkit.ops.random_fourier_features(x, w, kind="sincos"),
        lambda: attnkit.softmax(q, axis=-1),
    ]
    _assert_same_as_serial(calls + calls)


@pytest.fixture(scope="module")
def fitted():
    texts, labels = make_negation_sentences(300, random_state=0)
    clf = TransformerClassifier(d_model=16, n_heads=2, d_ff=32, n_layers=1, max_iter=2, early_stopping=False,
                                random_state=0).fit(texts, labels)
    sources, targets = make_case_pairs(80, random_state=0)
    s2s = Seq2SeqTransformer(d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1, max_iter=1,
                             early_stopping=False, random_state=0).fit(sources, targets)
    X = np.random.default_rng(0).standard_normal((200, 8))
    rff = RandomFourierFeatures(64, random_state=0).fit(X)
    X_wide = np.random.default_rng(1).standard_normal((300, 200)).astype(np.float32)  # projected by a GEMM
    rff_wide = RandomFourierFeatures(256, random_state=0).fit(X_wide)
    return {"clf": clf, "texts": texts, "labels": labels, "s2s": s2s, "sources": sources, "targets": targets,
            "rff": rff, "X": X, "rff_wide": rff_wide, "X_wide": X_wide}


def test_estimator_predict_from_several_threads_matches_serial_calls(fitted, kernel_threads):
    clf, s2s, rff = fitted["clf"], fitted["s2s"], fitted["rff"]
    texts, sources = fitted["texts"][:64], fitted["sources"][:8]
    calls = [
        lambda: clf.predict_proba(texts),
        lambda: clf.transform(texts),
        lambda: np.array(s2s.predict(sources, max_length=12)),
        lambda: rff.transform(fitted["X"]),
    ]
    _assert_same_as_serial(calls + calls)


SERVING_THREADS, SERVING_ROUNDS = 8, 20


def _serving_calls(fitted):
    clf, s2s, rff = fitted["clf"], fitted["s2s"], fitted["rff"]
    texts, sources = fitted["texts"][:32], fitted["sources"][:6]
    return {
        "classifier.predict": lambda: clf.predict(texts),
        "classifier.predict_proba": lambda: clf.predict_proba(texts),
        "classifier.transform": lambda: clf.transform(texts),
        "seq2seq.predict": lambda: np.array(s2s.predict(sources, max_length=10)),
        "seq2seq.sequence_log_proba": lambda: s2s.sequence_log_proba(sources, fitted["targets"][:6]),
        "random_features.transform": lambda: rff.transform(fitted["X"]),
        "random_features.transform (wide)": lambda: fitted["rff_wide"].transform(fitted["X_wide"]),
    }


def test_serving_from_8_threads_equals_serial_bit_for_bit(fitted, kernel_threads):
    """Every estimator's predict / predict_proba / transform, from 8 threads at once, 20 rounds each in a
    different order per thread, gives exactly the serial arrays (0.1.0's process-wide one-thread-BLAS switch
    raced: a thread leaving it gave two BLAS threads back to the others mid-product, ~1e-7 apart)."""
    calls = _serving_calls(fitted)
    serial = {name: call() for name, call in calls.items()}
    barrier = threading.Barrier(SERVING_THREADS)

    def serve(seed):
        order = random.Random(seed)
        barrier.wait()
        results = []
        for _ in range(SERVING_ROUNDS):
            name = order.choice(list(calls))
            results.append((name, calls[name]()))
        return results

    with ThreadPoolExecutor(SERVING_THREADS) as pool:
        for results in pool.map(serve, range(SERVING_THREADS)):
            for name, result in results:
                np.testing.assert_array_equal(result, serial[name], err_msg=name)


def test_a_concurrent_predict_leaves_the_users_blas_alone(fitted):
    """The estimators never change NumPy's BLAS thread count, which is process-wide: a user thread reading
    it while others predict and fit always sees its own setting."""
    def blas_threads():
        return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]

    before, seen, stop = blas_threads(), [], threading.Event()
    clf = fitted["clf"]

    def watch():
        while not stop.is_set():
            seen.append(blas_threads())

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        while len(seen) < 50:  # the watcher samples throughout the calls
            clf.predict_proba(fitted["texts"])
            fitted["s2s"].predict(fitted["sources"][:8], max_length=10)
            clone(clf).fit(fitted["texts"][:100], fitted["labels"][:100])
    finally:
        stop.set()
        watcher.join()
    assert seen and all(threads == before for threads in seen) and blas_threads() == before


def test_fit_on_one_thread_while_another_predicts_with_a_clone(fitted):
    clf, texts = fitted["clf"], fitted["texts"]
    expected = clf.predict_proba(texts)
    refit = clone(clf).set_params(random_state=1)
    stop = threading.Event()
    seen = []

    def predict_until_fit_ends():
        while not stop.is_set():
            seen.append(clf.predict_proba(texts))

    reader = threading.Thread(target=predict_until_fit_ends)
    reader.start()
    try:
        refit.fit(texts, make_negation_sentences(300, random_state=0)[1])
    finally:
        stop.set()
        reader.join()
    assert seen, "the predicting thread never ran"
    for result in seen:
        np.testing.assert_array_equal(result, expected)
    assert refit.n_iter_ == 2 and not np.array_equal(refit.predict_proba(texts), expected)
