"""``n_jobs`` for every attnkit estimator: the kernels' thread count during the estimator's own calls.

:class:`NJobsMixin` wraps the methods of :data:`THREADED_METHODS` that a subclass defines, once, when the
class is created (as scikit-learn's ``set_output`` wraps ``transform``), so no method repeats the thread
handling and a method added later cannot forget it. :func:`map_batches` spends those threads on inference
batches.
"""

import functools
import numbers
from concurrent.futures import ThreadPoolExecutor

from attnkit._config import get_num_threads, num_threads, resolve_n_jobs
from attnkit._validation import Interval, validate_params

__all__ = ["N_JOBS_CONSTRAINTS", "NJobsMixin", "THREADED_METHODS", "map_batches"]

# The public methods that run kernels; those a class inherits from scikit-learn's mixins (fit_transform,
# ClassifierMixin.score) call these.
THREADED_METHODS = ("fit", "partial_fit", "fit_transform", "predict", "predict_proba", "predict_log_proba",
                    "decision_function", "transform", "score", "sequence_log_proba", "attention_maps")

N_JOBS_CONSTRAINTS = [None, Interval(numbers.Integral, 1, None, closed="left"),
                      Interval(numbers.Integral, None, -1, closed="right")]


class NJobsMixin:
    """Runs the kernels on ``n_jobs`` threads (:func:`attnkit._config.resolve_n_jobs`) during each call of a
    threaded method, restoring the count of before afterwards, also on an exception; ``n_jobs=None`` leaves
    the count alone. The subclass has an ``n_jobs`` parameter."""

    n_jobs: int | None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in THREADED_METHODS:
            if name in cls.__dict__:
                setattr(cls, name, _on_n_jobs_threads(cls.__dict__[name]))

    def _n_threads(self):
        """The thread count ``n_jobs`` asks for, or None; a bad ``n_jobs`` raises, naming it."""
        validate_params({"n_jobs": self.n_jobs}, {"n_jobs": N_JOBS_CONSTRAINTS}, caller=type(self).__name__)
        return resolve_n_jobs(self.n_jobs)


def _on_n_jobs_threads(method):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        # The warning after fork points at the user's call: num_threads's generator, contextlib, here, the user.
        with num_threads(self._n_threads(), stacklevel=5):
            return method(self, *args, **kwargs)

    return wrapper


def map_batches(fn, batches, *, cost):
    """Call ``fn(batch)`` for every one of ``batches``, spending the kernels' threads on whole batches.

    With T > 1 kernel threads, T Python threads take the batches, costliest (``cost(batch)``) first and each
    the next when free, while the kernels run at one thread each (they release the GIL) -- when the batches
    share out evenly: the busiest thread gets at most :data:`BALANCE` times an equal share. Otherwise the
    batches run in turn, each op on all T threads. Why: an inference batch's products (hundreds of rows)
    run as fast per core on one thread as on two, while an op split over two threads pays for waking the
    other and leaves it idle through the Python between ops. On 2 cores, embedding SST-2 test with MiniLM
    went from 283-323 to 343-347 texts/s, the classifier's predict_proba from 7,200-8,100 to 9,000-9,500
    texts/s. The kernels are deterministic in the thread count, so the results are the same bits either way.
    """
    batches = list(batches)
    threads = get_num_threads()
    order = sorted(batches, key=cost, reverse=True) if threads > 1 else batches
    if threads < 2 or not _even(order, cost, threads):
        for batch in batches:
            fn(batch)
        return
    with num_threads(1), ThreadPoolExecutor(threads, thread_name_prefix="attnkit-batch") as pool:
        for _ in pool.map(fn, order):  # re-raises a worker's exception
            pass


# The busiest thread's share of the work, over an equal share, up to which batches go to threads: one op
# on two threads ran at 0.82-0.88 of two batches at once (MiniLM, the classifier's encoder; 2 cores).
BALANCE = 1.1


def _even(order, cost, threads):
    """Whether ``threads`` workers taking the batches of ``order`` in turn end within BALANCE of each other."""
    loads = [0.0] * threads
    for batch in order:
        loads[loads.index(min(loads))] += cost(batch)
    return len(order) >= threads and max(loads) <= BALANCE * sum(loads) / threads
