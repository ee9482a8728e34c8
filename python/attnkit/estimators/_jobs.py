"""``n_jobs`` for every attnkit estimator: the kernels' thread count during the estimator's own calls.

:class:`NJobsMixin` wraps the methods of :data:`THREADED_METHODS` that a subclass defines, once, when the
class is created (as scikit-learn's ``set_output`` wraps ``transform``), so no method repeats the thread
handling and a method added later cannot forget it.
"""

import functools
import numbers

from attnkit._config import num_threads, resolve_n_jobs
from attnkit._validation import Interval, validate_params

__all__ = ["N_JOBS_CONSTRAINTS", "NJobsMixin", "THREADED_METHODS"]

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
