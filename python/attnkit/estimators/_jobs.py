"""The wrappers of the estimators' public methods, and ``n_jobs``: the kernels' thread count during an
estimator's own calls.

A public method that runs kernels is marked where it is defined: ``@threaded`` (the calling thread's kernel
count is the estimator's ``n_jobs`` during the call, restored after) or ``@fit_context`` for the fits, which
also check every parameter against ``_parameter_constraints`` first (scikit-learn's ``_fit_context``
pattern: one check, before any work, not one per fit method). The count is the calling thread's own, so
threads calling at once with different ``n_jobs`` never change each other's. :func:`map_batches` spends
those threads on inference batches.
"""

import functools
import numbers
import threading
from concurrent.futures import ThreadPoolExecutor, wait

from attnkit._config import MAX_THREADS, get_num_threads, num_threads, resolve_n_jobs
from attnkit._validation import Interval, validate_params

__all__ = ["N_JOBS_CONSTRAINTS", "fit_context", "map_batches", "threaded", "threaded_iterator"]

N_JOBS_CONSTRAINTS = [None, Interval(numbers.Integral, 1, MAX_THREADS, closed="both"),
                      Interval(numbers.Integral, -MAX_THREADS, -1, closed="both")]


def threaded(method):
    """Mark ``method`` (of an estimator with an ``n_jobs`` parameter) as running kernels: during each call the
    calling thread's kernels run on ``n_jobs`` threads (:func:`attnkit._config.resolve_n_jobs`; None leaves
    the count alone), restored afterwards, also on an exception. A bad ``n_jobs`` raises, naming it."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        validate_params({"n_jobs": self.n_jobs}, {"n_jobs": N_JOBS_CONSTRAINTS}, caller=type(self).__name__)
        # The warning after fork points at the user's call: num_threads's generator, contextlib, here, the user.
        with num_threads(resolve_n_jobs(self.n_jobs), stacklevel=5):
            return method(self, *args, **kwargs)

    wrapper.__attnkit_threaded__ = True  # type: ignore[attr-defined]
    return wrapper


def threaded_iterator(method):
    """:func:`threaded`, for a method that returns an iterator (a stream of generated text): the call itself (its
    checks) and then each ``next`` run with ``n_jobs`` kernel threads, the count restored between items, so
    that the caller's own work between items runs with its own count."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        validate_params({"n_jobs": self.n_jobs}, {"n_jobs": N_JOBS_CONSTRAINTS}, caller=type(self).__name__)
        with num_threads(resolve_n_jobs(self.n_jobs), stacklevel=5):
            iterator = iter(method(self, *args, **kwargs))
        return _threaded_items(iterator, self.n_jobs)

    wrapper.__attnkit_threaded__ = True  # type: ignore[attr-defined]
    return wrapper


def _threaded_items(iterator, n_jobs):
    while True:
        with num_threads(resolve_n_jobs(n_jobs), stacklevel=5):
            try:
                item = next(iterator)
            except StopIteration:
                return
        yield item


def fit_context(method):
    """:func:`threaded`, for a fit: every parameter is checked against the class's ``_parameter_constraints``
    first, before any work (errors name the parameter, in scikit-learn's words)."""

    @functools.wraps(method)
    def validated(self, *args, **kwargs):
        validate_params(self.get_params(deep=False), self._parameter_constraints, caller=type(self).__name__)
        return method(self, *args, **kwargs)

    return threaded(validated)


def map_batches(fn, batches, *, cost):
    """Call ``fn(batch)`` for every one of ``batches``, spending the kernels' threads on whole batches.

    With T > 1 kernel threads, T Python threads take the batches, costliest (``cost(batch)``) first and each
    the next when free, while the kernels run at one thread each (they release the GIL) -- when the batches
    share out evenly (the busiest thread gets at most :data:`BALANCE` times an equal share) and each share
    costs at least :data:`MIN_SHARE` (tokens). Otherwise the batches run in turn, each op on all T threads.
    Why: an inference batch's products (hundreds of rows) run as fast per core on one thread as on two, while
    an op split over two threads pays for waking the other and leaves it idle through the Python between ops.
    On 2 cores, embedding SST-2 test with MiniLM went from 283-323 to 343-347 texts/s, the classifier's
    predict_proba from 7,200-8,100 to 9,000-9,500 texts/s. The kernels are deterministic in the thread count,
    so the results are the same bits either way.
    """
    batches = list(batches)
    threads = get_num_threads()
    order = sorted(batches, key=cost, reverse=True) if threads > 1 else batches
    # A batch that maps batches of its own with more threads (never done here) would wait for the workers it holds.
    if threads < 2 or not _even(order, cost, threads) or getattr(_WORKER, "busy", False):
        for batch in batches:
            fn(batch)
        return

    def on_one_thread(batch):
        _WORKER.busy = True
        try:
            with num_threads(1):  # the worker's own count: each op on the worker's thread alone
                fn(batch)
        finally:
            _WORKER.busy = False

    futures = [_pool(threads).submit(on_one_thread, batch) for batch in order]
    try:
        for future in futures:
            future.result()  # re-raises a worker's exception
    finally:  # after an error or an interrupt: the batches not started are dropped, those running finish
        for future in futures:
            future.cancel()
        wait(futures)


_POOLS: dict[int, ThreadPoolExecutor] = {}  # a forked child never uses its parent's: its kernels run on one thread
_WORKER = threading.local()  # busy: this thread is a pool worker running a batch


def _pool(threads):
    """The worker threads of :func:`map_batches` at ``threads`` threads, kept between calls: starting them
    took ~0.4 ms a call (1% of embedding 32 sentences with MiniLM on 2 cores, a server's batch). Callers on
    several threads share them, in turn."""
    pool = _POOLS.get(threads)
    if pool is None:  # two first callers at once: one pool is kept (an unused one never starts a thread)
        pool = _POOLS.setdefault(threads, ThreadPoolExecutor(threads, thread_name_prefix="attnkit-batch"))
    return pool


# The busiest thread's share of the work, over an equal share, up to which batches go to threads: one op
# on two threads ran at 0.82-0.88 of two batches at once (MiniLM, the classifier's encoder; 2 cores).
BALANCE = 1.1


# The least work (cost, in tokens) a thread's share may hold for batches to go to threads: below, the Python
# between the ops dominates, two Python threads queue for the GIL, and each reads every weight matrix itself
# (a call of a few texts is bound by those reads). MiniLM on 2 cores, SST-2 sentences: 4 texts (83 tokens)
# split 19.4 ms against 11.7 ms as one batch on both threads (Zen 3); 8 (~200 tokens) 19.2 against 20.5 on
# Zen 3, 27 against 21-23 on a Sapphire Rapids Xeon; 16 (~400 tokens) even on the Xeon.
MIN_SHARE = 128


def worth_threads(total_cost, threads):
    """Whether ``total_cost`` tokens of work are worth taking by ``threads`` Python threads (MIN_SHARE each)."""
    return threads > 1 and total_cost >= MIN_SHARE * threads


def _even(order, cost, threads):
    """Whether ``threads`` workers taking the batches of ``order`` in turn end within BALANCE of each other, each
    with at least MIN_SHARE."""
    loads = [0.0] * threads
    for batch in order:
        loads[loads.index(min(loads))] += cost(batch)
    return (len(order) >= threads and worth_threads(sum(loads), threads)
            and max(loads) <= BALANCE * sum(loads) / threads)
