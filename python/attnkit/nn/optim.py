"""AdamW, gradient clipping by global norm, and warm-up + decay learning-rate schedules.

The optimiser reads ``(name, param, grad)`` triples, as yielded by
:meth:`attnkit.nn.Module.named_parameters`, and updates ``param`` in place. Its whole state (the
step count and both moment estimates) is a flat dict of arrays, so a checkpoint written with
:mod:`attnkit.io.serialize` resumes training bit for bit.
"""

import math
import numbers
import re
from typing import Any

import numpy as np

from attnkit import ops
from attnkit._validation import check_bool, check_int, check_real
from attnkit.nn.module import Module

__all__ = ["AdamW", "WarmupSchedule", "clip_coefficient", "clip_grad_norm", "default_decay"]


def _named(params):
    """``params`` (a Module or an iterable of ``(name, param, grad)``) as a list of triples."""
    if isinstance(params, Module):
        return list(params.named_parameters())
    triples = list(params)
    for item in triples:
        if not (isinstance(item, tuple) and len(item) == 3 and isinstance(item[0], str)):
            raise TypeError(f"params must be a Module or (name, param, grad) triples, got an item {item!r:.80}")
    return triples


def default_decay(name, param):
    """Whether AdamW's default applies weight decay to a parameter: matrices yes, vectors no.

    Weight matrices of linear layers and embedding / position tables (``ndim >= 2``) are decayed;
    biases and LayerNorm gains and offsets (``ndim <= 1``) are not. This is the rule of GPT-2 and
    nanoGPT: shrinking a LayerNorm gain or a bias towards zero is not a sensible prior.

    Parameters
    ----------
    name : str
        Dotted parameter name (unused by this rule; custom predicates may use it).
    param : ndarray
        The parameter.

    Returns
    -------
    bool
    """
    return param.ndim >= 2


class WarmupSchedule:
    """Learning-rate multiplier: a linear warm-up, then a constant, linear or cosine decay.

    For the update number ``t = 1, 2, ...`` (the step count AdamW is about to reach)::

        t <= warmup_steps:   t / warmup_steps
        then, with p = (t - warmup_steps) / (total_steps - warmup_steps) clipped to [0, 1],
        "linear":            1 - (1 - min_multiplier) p
        "cosine":            min_multiplier + (1 - min_multiplier) (1 + cos(pi p)) / 2
        "constant":          1

    So the first update uses ``1 / warmup_steps`` (never 0, which would waste it), update
    ``warmup_steps`` uses the full rate, and updates from ``total_steps`` on use ``min_multiplier``.

    Parameters
    ----------
    warmup_steps : int, default=0
        Length of the linear warm-up, >= 0.
    total_steps : int, optional
        Update number at which the decay ends; required (and > ``warmup_steps``) unless
        ``decay="constant"``.
    decay : {"cosine", "linear", "constant"}, default="cosine"
        Shape after the warm-up.
    min_multiplier : float, default=0.0
        Final multiplier of the decay, in [0, 1].

    Examples
    --------
    >>> from attnkit.nn import WarmupSchedule
    >>> schedule = WarmupSchedule(warmup_steps=2, total_steps=4, decay="linear")
    >>> [schedule(t) for t in range(1, 6)]
    [0.5, 1.0, 0.5, 0.0, 0.0]
    """

    _DECAYS = ("cosine", "linear", "constant")

    def __init__(self, *, warmup_steps=0, total_steps=None, decay="cosine", min_multiplier=0.0):
        self.warmup_steps = check_int(warmup_steps, "warmup_steps", minimum=0)
        if decay not in self._DECAYS:
            raise ValueError(f"decay must be one of {self._DECAYS}, got {decay!r}")
        self.decay = decay
        if decay == "constant":
            self.total_steps = None if total_steps is None else check_int(total_steps, "total_steps", minimum=0)
        else:
            if total_steps is None:
                raise ValueError(f'total_steps is required with decay="{decay}"')
            self.total_steps = check_int(total_steps, "total_steps", minimum=self.warmup_steps + 1)
        self.min_multiplier = check_real(min_multiplier, "min_multiplier")
        if not 0.0 <= self.min_multiplier <= 1.0:
            raise ValueError(f"min_multiplier must be in [0, 1], got {self.min_multiplier}")

    def __call__(self, step):
        """Multiplier for update number ``step`` (int or array of ints); a float for an int."""
        t = np.asarray(step, dtype=np.float64)
        rise = t / self.warmup_steps if self.warmup_steps else np.ones_like(t)
        if self.decay == "constant" or self.total_steps is None:  # (total_steps is set unless constant)
            after = np.ones_like(t)
        else:
            p = np.clip((t - self.warmup_steps) / (self.total_steps - self.warmup_steps), 0.0, 1.0)
            shape = 1.0 - p if self.decay == "linear" else 0.5 * (1.0 + np.cos(np.pi * p))
            after = self.min_multiplier + (1.0 - self.min_multiplier) * shape
        out = np.where(t <= self.warmup_steps, rise, after)
        return float(out) if out.ndim == 0 else out

    def __repr__(self):
        return (f"WarmupSchedule(warmup_steps={self.warmup_steps}, total_steps={self.total_steps}, "
                f"decay={self.decay!r}, min_multiplier={self.min_multiplier})")


def clip_grad_norm(params, max_norm, *, error_if_nonfinite=True):
    """Scale all gradients in place so that their global L2 norm is at most ``max_norm``.

    The norm is taken over every gradient together, ``sqrt(sum_p ||grad_p||^2)``, accumulated in
    float64 (a float32 sum of squares overflows for gradients near 1e19). When it exceeds
    ``max_norm`` every gradient is multiplied by ``max_norm / norm``, so directions are kept.

    Parameters
    ----------
    params : Module or iterable of (name, param, grad)
        The gradients to clip, e.g. ``model`` or ``model.named_parameters()``.
    max_norm : float
        Largest allowed norm, > 0; ``inf`` only measures.
    error_if_nonfinite : bool, default=True
        If the norm is NaN or inf: raise ``FloatingPointError`` naming the parameters with
        non-finite gradients. If False, leave the gradients unchanged and return the non-finite
        norm, so the caller can skip this update.

    Returns
    -------
    float
        The global norm before clipping.

    Raises
    ------
    FloatingPointError
        If the norm is not finite and ``error_if_nonfinite`` is True.
    """
    triples = _named(params)
    total, coef = clip_coefficient(triples, max_norm, error_if_nonfinite=error_if_nonfinite)
    if coef != 1.0:
        for _, _, grad in triples:
            grad *= coef
    return total


def clip_coefficient(params, max_norm, *, error_if_nonfinite=True):
    """The global gradient norm and the factor :func:`clip_grad_norm` would scale the gradients by, without scaling.

    ``AdamW.step(grad_scale=factor)`` then gives the bits of ``clip_grad_norm`` followed by ``step()``, with one
    pass fewer over the gradients (the training loops of the estimators use it).

    Parameters
    ----------
    params, max_norm, error_if_nonfinite
        As in :func:`clip_grad_norm`.

    Returns
    -------
    norm : float
        ``sqrt(sum_p ||grad_p||^2)``, accumulated in float64.
    factor : float
        ``max_norm / norm`` when the norm exceeds ``max_norm``, else 1.0 (also for a non-finite norm that is
        not an error).
    """
    if isinstance(max_norm, (bool, np.bool_)) or not isinstance(max_norm, numbers.Real) or not float(max_norm) > 0:
        raise ValueError(f"max_norm must be a positive number (inf allowed), got {max_norm!r}")
    triples = _named(params)
    grads = [grad for _, _, grad in triples]
    if grads and all(isinstance(g, np.ndarray) and g.dtype == grads[0].dtype for g in grads) and \
            grads[0].dtype in (np.float32, np.float64):
        squares = ops.sum_of_squares_many(grads)  # one call for a model's gradients: the bits of a call each
    else:
        squares = [ops.sum_of_squares(grad) for grad in grads]
    total = math.sqrt(sum(squares))
    if not math.isfinite(total):
        if error_if_nonfinite:
            bad = [name for name, _, grad in triples if not np.isfinite(grad).all()]
            raise FloatingPointError(f"the gradient norm is {total}: non-finite gradients in {bad}")
        return total, 1.0
    return total, float(max_norm) / total if total > max_norm else 1.0


def _kernel_layout(arrays):
    """The arrays as C-contiguous views for :func:`attnkit.ops.adamw_update`, or None if they cannot be.

    Module parameters are float32 or float64 and C- or Fortran-ordered (their moments follow their
    layout); transposing all four alike keeps the update elementwise. Triples given by hand may be
    strided views or other dtypes: those are updated through contiguous copies (:meth:`AdamW.step`).
    """
    if not all(isinstance(a, np.ndarray) for a in arrays):
        return None
    dtype = arrays[0].dtype
    if dtype not in (np.float32, np.float64) or any(a.dtype != dtype for a in arrays):
        return None
    if all(a.flags.c_contiguous for a in arrays):
        return arrays
    if all(a.flags.f_contiguous for a in arrays):
        return tuple(a.T for a in arrays)
    return None


def _named_items(message, names):
    """A many-tensor op's message with each ``list[i]`` followed by parameter i's name."""
    return re.sub(r"\w+\[(\d+)\]", lambda m: f"{m[0]} ({names[int(m[1])]!r})", message)


class AdamW:
    """Adam with decoupled weight decay (Loshchilov & Hutter, 2019), with bias correction.

    For update ``t`` with rate ``lr_t = lr * schedule(t)``, each parameter ``p`` with gradient ``g``::

        p <- p (1 - lr_t weight_decay)          (only where the decay predicate holds)
        m <- beta1 m + (1 - beta1) g
        v <- beta2 v + (1 - beta2) g^2
        p <- p - lr_t / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

    the same arithmetic as ``torch.optim.AdamW``: the decay is scaled by the scheduled rate.

    Parameters
    ----------
    params : Module or iterable of (name, param, grad)
        What to optimise. A Module is re-read at every step (so its gradient arrays may be
        replaced); triples are read once.
    lr : float, default=1e-3
        Peak learning rate, > 0.
    betas : (float, float), default=(0.9, 0.999)
        Decay rates of the first and second moment estimates, each in [0, 1).
    eps : float, default=1e-8
        Added to the denominator, > 0.
    weight_decay : float, default=0.01
        Decoupled weight decay coefficient, >= 0.
    decay : callable (name, param) -> bool, optional
        Which parameters are decayed; default :func:`default_decay` (matrices and tables, not
        biases or LayerNorm parameters).
    schedule : callable step -> float, optional
        Learning-rate multiplier for update number ``step`` (1, 2, ...), e.g. a
        :class:`WarmupSchedule`; default a constant 1.

    Attributes
    ----------
    step_count : int
        Updates taken so far.
    last_lr : float or None
        Rate used by the latest update.
    decayed : frozenset of str
        Names of the parameters that receive weight decay.

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit.nn import AdamW
    >>> p, g = np.array([1.0, -1.0]), np.array([0.5, -2.0])
    >>> opt = AdamW([("p", p, g)], lr=0.1, weight_decay=0.0)
    >>> opt.step()
    >>> p.round(6).tolist()  # the first step moves each entry by lr * sign(g)
    [0.9, -0.9]
    """

    def __init__(self, params, lr=1e-3, *, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, decay=None,
                 schedule=None):
        self._module = params if isinstance(params, Module) else None
        triples = _named(params)
        self._triples = None if self._module is not None else triples
        self.lr = check_real(lr, "lr", positive=True)
        if len(betas) != 2 or not all(0.0 <= check_real(b, "betas") < 1.0 for b in betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
        self.betas = (float(betas[0]), float(betas[1]))
        self.eps = check_real(eps, "eps", positive=True)
        self.weight_decay = check_real(weight_decay, "weight_decay")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        decay = default_decay if decay is None else decay
        self.schedule = schedule
        self.step_count = 0
        self.last_lr = None
        names = [name for name, _, _ in triples]
        if len(set(names)) != len(names):
            raise ValueError(f"parameter names must be unique, got {names}")
        self.decayed = frozenset(name for name, param, _ in triples if decay(name, param))
        self._exp_avg = {name: np.zeros_like(param) for name, param, _ in triples}
        self._exp_avg_sq = {name: np.zeros_like(param) for name, param, _ in triples}
        self._layout: tuple[Any, Any] = (None, None)  # the (param, grad) pairs and their grouping: see _grouped

    def _parameters(self):
        if self._module is None:
            return self._triples
        triples = list(self._module.named_parameters())
        shapes = {name: param.shape for name, param, _ in triples}
        expected = {name: m.shape for name, m in self._exp_avg.items()}
        if shapes != expected:
            raise ValueError(f"the parameters changed since the optimiser was built: expected {expected}, got {shapes}")
        return triples

    def lr_at(self, step):
        """Learning rate of update number ``step`` (1-based)."""
        return self.lr * (1.0 if self.schedule is None else float(self.schedule(step)))

    def step(self, *, grad_scale=1.0, zero_grad=False):
        """Take one update with the current gradients (which are left unchanged unless ``zero_grad``).

        Parameters
        ----------
        grad_scale : float, default=1.0
            Update with ``grad * grad_scale`` (e.g. the factor of :func:`clip_coefficient`): the bits of
            :func:`clip_grad_norm`'s in-place scaling followed by ``step()``, without that pass over the gradients.
        zero_grad : bool, default=False
            Set every gradient to zero as it is read (:meth:`zero_grad` folded into the update's pass).

        Raises
        ------
        ValueError
            If an array of one parameter (its value or gradient) shares memory with any other array being updated
            (the parameters' updates run at once, :func:`attnkit.ops.adamw_update_many`); the error names both
            parameters. The parameters of one dtype are all checked before any of them is updated, and before the
            triples given by hand (updated through copies, last).
        """
        grad_scale = check_real(grad_scale, "grad_scale", positive=True)
        zero_grad = check_bool(zero_grad, "zero_grad")
        self.step_count += 1
        t = self.step_count
        lr = self.last_lr = self.lr_at(t)
        beta1, beta2 = self.betas
        step_size = lr / (1.0 - beta1**t)
        denom_scale = 1.0 / math.sqrt(1.0 - beta2**t)
        shrink = 1.0 - lr * self.weight_decay
        hyper = {"step_size": step_size, "beta1": beta1, "beta2": beta2, "denom_scale": denom_scale, "eps": self.eps}
        by_dtype, by_hand = self._grouped(self._parameters())
        for *lists, names in by_dtype:
            factors = [shrink if self.weight_decay and name in self.decayed else 1.0 for name in names]
            try:
                ops.adamw_update_many(*lists, **hyper, shrinks=factors, grad_scale=grad_scale, zero_grad=zero_grad)
            except ValueError as error:  # "grads[3] ..." -> "grads[3] ('decoder.layer0.norm.beta') ..."
                raise ValueError(_named_items(str(error), names)) from None
        # Triples given by hand (strided views, float16, mixed dtypes): the kernel on contiguous copies in the
        # parameter's float type (float32 at least), written back; the oracle is never a training path. The gradient
        # is scaled in its own dtype first, as clip_grad_norm's in-place product rounds it.
        for name, (param, grad, exp_avg, exp_avg_sq) in by_hand:
            factor = shrink if self.weight_decay and name in self.decayed else 1.0
            dtype = param.dtype if param.dtype in (np.float32, np.float64) else np.float32
            scaled = grad if grad_scale == 1.0 else np.multiply(grad, grad_scale)
            copies = tuple(np.ascontiguousarray(a, dtype=dtype) for a in (param, scaled, exp_avg, exp_avg_sq))
            ops.adamw_update(*copies, **hyper, shrink=factor)
            for target, copy in zip((param, exp_avg, exp_avg_sq), copies[:1] + copies[2:]):
                target[...] = copy
            if zero_grad:
                grad[...] = 0

    def _grouped(self, triples):
        """The parameters as the update takes them: per dtype, the four arrays' lists in the kernel's layout and
        the names (one kernel call per dtype, not one per parameter); and (name, arrays) of those updated through
        copies. Kept while the same parameter and gradient arrays come back: regrouping 68 tensors took a third of
        a small model's update outside the kernel."""
        pairs, (last_pairs, grouped) = [(param, grad) for _, param, grad in triples], self._layout
        if last_pairs is not None and len(pairs) == len(last_pairs) and \
                all(p is q and g is h for (p, g), (q, h) in zip(pairs, last_pairs)):
            return grouped
        by_dtype: dict[np.dtype, tuple[list, list, list, list, list]] = {}
        by_hand = []
        for name, param, grad in triples:
            arrays = (param, grad, self._exp_avg[name], self._exp_avg_sq[name])
            in_kernel_layout = _kernel_layout(arrays)
            if in_kernel_layout is None:
                by_hand.append((name, arrays))
                continue
            group = by_dtype.setdefault(param.dtype, ([], [], [], [], []))
            for target, value in zip(group, (*in_kernel_layout, name)):
                target.append(value)
        grouped = (list(by_dtype.values()), by_hand)
        self._layout = (pairs, grouped)  # holding the arrays: an identity compared later is never a reused id
        return grouped

    def zero_grad(self):
        """Set every gradient to zero, in place."""
        for _, _, grad in self._parameters():
            grad.fill(0)

    def state_dict(self):
        """The optimiser state as a flat dict of arrays (copies).

        Returns
        -------
        dict of str -> ndarray
            ``"step"`` (0-d int64), ``"exp_avg.<name>"`` and ``"exp_avg_sq.<name>"`` per parameter.
            Hyperparameters are not included: they are the constructor's arguments.
        """
        state = {"step": np.array(self.step_count, dtype=np.int64)}
        state.update({f"exp_avg.{name}": m.copy() for name, m in self._exp_avg.items()})
        state.update({f"exp_avg_sq.{name}": v.copy() for name, v in self._exp_avg_sq.items()})
        return state

    def load_state_dict(self, state):
        """Restore a state from :meth:`state_dict`; names and shapes must match exactly.

        Returns
        -------
        self
        """
        own = self.state_dict()
        missing, extra = sorted(set(own) - set(state)), sorted(set(state) - set(own))
        if missing or extra:
            raise ValueError(f"optimiser state does not match: missing {missing}, unexpected {extra}")
        for key, value in own.items():
            new = np.asarray(state[key])
            if new.shape != value.shape:
                raise ValueError(f"optimiser state {key!r}: expected shape {value.shape}, got {new.shape}")
        step = np.asarray(state["step"])
        if step.dtype.kind not in "iu" or step < 0:
            raise ValueError(f"optimiser state 'step' must be a non-negative integer, got {step!r}")
        self.step_count = int(step)
        self.last_lr = self.lr_at(self.step_count) if self.step_count else None
        for name in self._exp_avg:
            self._exp_avg[name][...] = state[f"exp_avg.{name}"]
            self._exp_avg_sq[name][...] = state[f"exp_avg_sq.{name}"]
        return self
