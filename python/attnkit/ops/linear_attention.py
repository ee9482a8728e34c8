"""Kernelized linear attention, batch and step by step."""

# Annotations stay unevaluated: feature_maps imports this package (its kernels live in
# ops.random_features), so when it is imported first its names do not exist yet here.
from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from attnkit import _core
from attnkit._validation import check_bool, check_ndim, check_real, float_array
from attnkit.ops import feature_maps
from attnkit.ops._layout import batch_shape, check_qkv, describe_shapes, unbroadcast
from attnkit.ops.masking import check_key_lengths, check_mask

__all__ = ["LinearAttentionContext", "LinearAttentionState", "linear_attention", "linear_attention_backward"]


def _quiet_non_finite() -> np.errstate:
    """NaN/inf inputs propagate (DESIGN.md) without NumPy's RuntimeWarnings (-W error makes them raise)."""
    return np.errstate(invalid="ignore", over="ignore")


def linear_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *,
                     feature_map: str | feature_maps.FeatureMap = "elu", causal: bool = False,
                     mask: ArrayLike | None = None, key_lengths: ArrayLike | None = None, eps: float = 1e-6,
                     return_state: bool = False, return_context: bool = False) -> np.ndarray | tuple[Any, ...]:
    """Kernelized linear attention: O(N) time and memory in the sequence length.

    ``out_i = phi(q_i)^T S / (phi(q_i)^T Z)`` with ``S = sum_j phi(k_j) v_j^T`` and
    ``Z = sum_j phi(k_j)`` over the keys query i may see (Katharopoulos et al., 2020), computed in C++
    by chunks of keys summed into float64, so the error does not grow with N. The features of the
    built-in maps (elu, relu, polynomial of degree <= 2, random Fourier, FAVOR+) are computed there
    too, a chunk of rows at a time and for real keys only; other maps (subclasses included) hand
    over features computed by their NumPy methods. With ``causal=True`` the sums run over ``j <= i``
    (prefix sums ``S_i``, ``Z_i``).

    Parameters
    ----------
    q, k, v : array-like of shape (..., Nq, d), (..., Nk, d), (..., Nk, dv)
        As in :func:`scaled_dot_product_attention` (leading dims broadcast).
    feature_map : {"elu", "relu", "polynomial"} or FeatureMap, default="elu"
        The map phi (see :mod:`attnkit.feature_maps`), e.g. ``PositiveRandomFeatureMap(...)`` for
        Performer attention.
    causal : bool, default=False
        Query i sees keys j <= i. Needs Nq == Nk (decode step by step with
        :class:`LinearAttentionState`).
    mask : array-like of bool, broadcastable to (..., 1, Nk), optional
        Key-padding mask, True = may attend. A mask that differs between queries cannot be expressed
        through the shared sums and is refused.
    key_lengths : array-like of int, optional
        Keys ``j >= length`` are padding (shape: a leading prefix of the batch dims).
    eps : float, default=1e-6
        Relative denominator guard, in [0, 1): a query whose normaliser ``den_i = phi(q_i)^T Z`` is
        ``<= eps * |phi(q_i)|^T |Z|`` (absolute values taken per feature) gets zeros instead of a
        division by ~0. Relative, because the output does not depend on the scale of phi but
        ``den_i`` does (FAVOR+ features of long keys give an exact ``den_i`` ~ 1e-9). For
        non-negative features (elu, relu, FAVOR+) only ``den_i = 0`` (no key seen, or all features
        zero) gives zeros; with features of both signs (random Fourier features) also an estimate
        that cancelled to rounding noise or came out negative. A NaN normaliser stays NaN, and so does an
        infinite one (float32 features whose products overflow, ``|q|, |k|`` near 1e19: use float64 there).
    return_state : bool, default=False
        With ``causal=True``, also return the :class:`LinearAttentionState` after the last row, to
        continue step by step.
    return_context : bool, default=False
        Also return a :class:`LinearAttentionContext`, whose ``backward(dout)`` gives the gradients
        from the features and sums computed here (a training step's backward), without checking the
        inputs or computing them again.

    Returns
    -------
    out : ndarray of shape (..., Nq, dv)
    state : LinearAttentionState
        Only with ``return_state=True``.
    context : LinearAttentionContext
        Only with ``return_context=True`` (last).
    """
    if check_bool(return_state, "return_state") and not check_bool(causal, "causal"):
        raise ValueError("return_state=True needs causal=True")
    return_context = check_bool(return_context, "return_context")
    p = _Problem(q, k, v, feature_map, causal, mask, key_lengths, eps)
    forward = _Forward(p, return_state)
    result: tuple[Any, ...] = (forward.out,)
    if forward.state is not None:
        result += (forward.state,)
    if return_context:
        result += (LinearAttentionContext(p, forward),)
    return result if len(result) > 1 else forward.out


def linear_attention_backward(dout: ArrayLike, q: ArrayLike, k: ArrayLike, v: ArrayLike, *,
                              feature_map: str | feature_maps.FeatureMap = "elu", causal: bool = False,
                              mask: ArrayLike | None = None, key_lengths: ArrayLike | None = None,
                              eps: float = 1e-6) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of :func:`linear_attention` with respect to q, k and v.

    With ``den_i = phi(q_i).Z`` and ``out_i = phi(q_i)^T S / den_i``: ``dnum_i = dout_i / den_i``,
    ``dden_i = -dout_i.out_i / den_i`` (both 0 for rows the forward's ``eps`` guard zeroed), then
    ``dphi(q_i) = S dnum_i + Z dden_i``, ``dS = sum_i phi(q_i) dnum_i^T``, ``dZ = sum_i phi(q_i) dden_i``,
    ``dphi(k_j) = dS v_j + dZ``, ``dv_j = dS^T phi(k_j)``; the causal form sums over i >= j only (in C++,
    linear in N). The feature map's own backward takes dphi to dq and dk.

    Parameters
    ----------
    dout : array-like of shape (..., Nq, dv)
        Gradient of the loss with respect to the output.
    q, k, v, feature_map, causal, mask, key_lengths, eps :
        The forward's arguments (for random feature maps, the same instance).

    Returns
    -------
    dq, dk, dv : ndarrays shaped like q, k, v
        Summed over the dims along which an input was broadcast; zero at padded keys.
    """
    p = _Problem(q, k, v, feature_map, causal, mask, key_lengths, eps)
    dout = _checked_dout(dout, p)
    return _backward(p, _Forward(p), dout)


class LinearAttentionContext:
    """What :func:`linear_attention` checked and computed, kept for the backward.

    Returned by ``linear_attention(..., return_context=True)``. It holds the validated problem (the
    broadcast inputs, the padding keep-mask, the feature map and eps) and what the forward computed:
    the output and, when not causal, the sums ``S`` and ``Z`` (the features of the built-in maps are
    recomputed by the kernels, those of other maps kept). :meth:`backward` starts from those, so a
    training step neither checks its inputs nor computes the sums twice.

    It refers to the forward's arrays, the output included: do not use it after any of them was
    modified in place, or after a random feature map was redrawn.
    """

    def __init__(self, problem: _Problem, forward: _Forward) -> None:
        self._problem, self._forward = problem, forward

    def backward(self, dout: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Gradients with respect to q, k and v: those of :func:`linear_attention_backward` with the
        forward's arguments, bit for bit.

        Parameters
        ----------
        dout : array-like of shape (..., Nq, dv)
            Gradient of the loss with respect to the forward's output.

        Returns
        -------
        dq, dk, dv : ndarrays shaped like q, k, v
            Summed over the dims along which an input was broadcast; zero at padded keys.
        """
        return _backward(self._problem, self._forward, _checked_dout(dout, self._problem))


def _checked_dout(dout, p):
    shape_out = p.batch + (p.nq, p.v.shape[-1])
    try:
        return np.broadcast_to(float_array(dout, "dout"), shape_out).astype(p.dtype, copy=False)
    except ValueError:
        raise ValueError(f"dout must have shape {shape_out}, got {np.shape(dout)}") from None


def _backward(p, forward, dout):
    """dq, dk, dv of a checked problem from its forward's results (the kernels skip padded keys: zero
    gradients there)."""
    rows_q, rows_k, rows_v = forward.rows
    rows_dq, rows_dk, rows_dv = (np.empty_like(r) for r in forward.rows)
    dout_rows = np.ascontiguousarray(dout).reshape(forward.out_rows.shape)
    if p.causal:
        _core.causal_linear_attention_backward(rows_q, rows_k, rows_v, forward.keep_rows, forward.out_rows,
                                               forward.features, p.eps, forward.row_map, dout_rows, rows_dq,
                                               rows_dk, rows_dv)
    else:
        _core.linear_attention_backward(rows_q, rows_k, rows_v, forward.keep_rows, forward.out_rows, forward.s,
                                        forward.z, forward.features, p.eps, forward.row_map, dout_rows, rows_dq,
                                        rows_dk, rows_dv)
    dphi_q, dphi_k, dv = (g.reshape(p.batch + g.shape[1:]) for g in (rows_dq, rows_dk, rows_dv))
    if forward.features != _FEATURES_PRECOMPUTED:  # the kernel took dphi through phi's derivative
        return _unbroadcast_grads(p, dphi_q, dphi_k, dv)
    dk = p.fm.keys_backward(p.k, dphi_k)
    if p.keep is not None:  # where, not multiply: the map's backward at a padded NaN key gives 0 * NaN
        dk = np.where(p.keep[..., None], dk, 0)
    return _unbroadcast_grads(p, p.fm.queries_backward(p.q, dphi_q), dk, dv)


def _unbroadcast_grads(p, dq, dk, dv):
    """The gradients in the problem's dtype, summed over the dims along which each input was broadcast."""
    dq, dk, dv = (unbroadcast(g.astype(p.dtype, copy=False), shape)
                  for g, shape in ((dq, p.shapes[0]), (dk, p.shapes[1]), (dv, p.shapes[2])))
    return dq, dk, dv


class _Problem:
    """A validated linear-attention problem: broadcast inputs and the padding keep-mask (the kernels
    compute the built-in maps' features themselves, and skip padded keys)."""

    def __init__(self, q, k, v, feature_map, causal, mask, key_lengths, eps):
        q, k, v, dtype = check_qkv(q, k, v)
        causal = check_bool(causal, "causal")
        self.shapes = (q.shape, k.shape, v.shape)
        nq, nk = q.shape[-2], k.shape[-2]
        self.fm = feature_maps.resolve_feature_map(feature_map)
        self.eps = _check_eps(eps)
        if mask is not None:
            mask = check_mask(mask, nq, nk, describe_shapes(q=q, k=k))
            if mask.shape[-2] != 1 and nq != 1:
                raise ValueError(
                    "linear attention takes key-padding masks only, broadcastable to (..., 1, Nk): "
                    f"got mask shape {mask.shape}; use scaled_dot_product_attention for other masks"
                )
        if causal and nq != nk:
            raise ValueError(f"causal linear attention needs Nq == Nk, got q {q.shape} and k {k.shape}; "
                             "decode step by step with LinearAttentionState")
        batch = batch_shape(q=q, k=k, v=v, mask=mask)
        keep = None
        if key_lengths is not None:
            inputs = describe_shapes(q=q, k=k, v=v, mask=mask)
            lengths = check_key_lengths(key_lengths, batch, nk, inputs).reshape(batch + (1,))
            keep = np.arange(nk) < lengths
        if mask is not None:
            per_key = np.broadcast_to(mask[..., 0, :], batch + (nk,))
            keep = per_key if keep is None else keep & per_key
        self.q, self.k, self.v = (_broadcast(a, batch, dtype) for a in (q, k, v))
        self.keep = keep
        self.dtype, self.batch, self.nq, self.causal = dtype, batch, nq, causal


class _Forward:
    """The forward's results the backward starts from: the kernels' flat (batch, n, width) ``rows`` of
    q, k, v (of phi(q), phi(k), v for maps the kernels do not apply themselves), ``row_map``, the parameters
    of the row maps they apply (see ``_row_map`` in attnkit.feature_maps), the keep-mask rows and
    the output; non-causal, also the sums ``s`` = S (batch, D, dv) and ``z`` = Z (batch, D); causal and
    asked for, the state after the last row."""

    def __init__(self, p, with_state=False):
        self.state = None
        self.features = _kernel_features(p.fm, p.q.shape[-1])
        q, k = (p.q, p.k) if self.features != _FEATURES_PRECOMPUTED else (p.fm.queries(p.q), p.fm.keys(p.k))
        flat, big_d, dv = math.prod(p.batch), q.shape[-1], p.v.shape[-1]
        self.row_map = None
        if self.features in _ROW_MAPS:
            self.row_map = p.fm._row_map(q.shape[-1], p.dtype)
            big_d = p.fm.n_features_out(q.shape[-1])
        self.rows = tuple(np.ascontiguousarray(a).reshape(flat, a.shape[-2], a.shape[-1]) for a in (q, k, p.v))
        self.keep_rows = None
        if p.keep is not None:
            self.keep_rows = np.ascontiguousarray(p.keep).reshape(flat, k.shape[-2]).view(np.uint8)
        self.out_rows: Any = np.empty((flat, p.nq, dv), p.dtype)
        rows_q, rows_k, rows_v = self.rows
        if p.causal:
            s = z = None
            if with_state:
                s, z = np.empty((flat, big_d, dv)), np.empty((flat, big_d))
            _core.causal_linear_attention(rows_q, rows_k, rows_v, self.keep_rows, self.out_rows, self.features, p.eps,
                                          self.row_map, s, z)
            if s is not None and z is not None:
                self.state = LinearAttentionState(p.fm, eps=p.eps, s=s.reshape(p.batch + (big_d, dv)),
                                                  z=z.reshape(p.batch + (big_d,)))
        else:
            self.s, self.z = np.empty((flat, big_d, dv), p.dtype), np.empty((flat, big_d), p.dtype)
            _core.linear_attention(rows_q, rows_k, rows_v, self.keep_rows, self.out_rows, self.s, self.z,
                                   self.features, p.eps, self.row_map)
        self.out = self.out_rows.reshape(p.batch + (p.nq, dv))


def _broadcast(a, batch, dtype):
    """``a`` broadcast to the batch dims ``batch`` in ``dtype`` (itself when it already is: 3 us a call)."""
    if a.shape[:-2] == batch and a.dtype == dtype:
        return a
    return np.broadcast_to(a, batch + a.shape[-2:]).astype(dtype, copy=False)


_FEATURES_PRECOMPUTED = 0
_ROW_MAPS = (3, 4)  # projected (random features), polynomial: the map's _row_map gives its parameters


def _kernel_features(fm, d):
    """The code (LinearFeatures in attnkit/linear_attention.h) of a map the kernels apply
    itself; for others it takes features computed here. Exact types: a subclass may change the map.
    Random maps for d >= 1 only (for d = 0 the map's own checks name the error); polynomials of
    degree <= 2."""
    fms = feature_maps  # attributes read here, not at import: the two modules import each other
    if type(fm) in (fms.PositiveRandomFeatureMap, fms.RandomFourierFeatureMap) and d >= 1:
        return 3
    if type(fm) is fms.PolynomialFeatureMap and fm.degree <= 2:
        return 4
    return {fms.EluFeatureMap: 1, fms.ReluFeatureMap: 2}.get(type(fm), _FEATURES_PRECOMPUTED)


def _check_eps(eps):
    eps = check_real(eps, "eps")
    if not 0 <= eps < 1:  # |den| <= mag always, so eps >= 1 would zero every row
        raise ValueError(f"eps must be in [0, 1) (it is relative to |phi(q)|^T |Z|), got {eps}")
    return eps


def _zeroed(den, mag, eps):
    """Rows the guard zeroes: ``den <= eps * mag`` with ``mag = |phi(q)|^T |Z|`` (as the C++ kernels).
    False for a NaN den, which then propagates."""
    return den <= eps * mag


def _normalise(num, den, mag, eps):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(_zeroed(den, mag, eps), 0, num / den).astype(num.dtype, copy=False)


class LinearAttentionState:
    """The running sums of linear attention, for decoding one position at a time.

    ``step(q_t, k_t, v_t)`` adds ``phi(k_t) v_t^T`` to ``S`` and ``phi(k_t)`` to ``Z`` (in float64) and
    returns ``phi(q_t)^T S / (phi(q_t)^T Z)``: row t of ``linear_attention(..., causal=True)`` with the
    same feature map. :meth:`from_keys` holds the sums over a fixed set of keys instead (a decoder's
    cross-attention over its encoder's output) and :meth:`attend` queries them without adding a key.
    O(D * dv) per query, whatever the number of keys.

    Parameters
    ----------
    feature_map : str or FeatureMap, default="elu"
        Must be the map (the same instance, for random maps) used for the earlier positions.
    eps : float, default=1e-6
        Relative denominator guard, as in :func:`linear_attention`: zeros where
        ``phi(q)^T Z <= eps * |phi(q)|^T |Z|``.
    s, z : ndarray, optional
        Initial sums (..., D, dv) and (..., D), e.g. from ``linear_attention(..., return_state=True)``.
    """

    def __init__(self, feature_map: str | feature_maps.FeatureMap = "elu", *, eps: float = 1e-6,
                 s: ArrayLike | None = None, z: ArrayLike | None = None) -> None:
        self.feature_map = feature_maps.resolve_feature_map(feature_map)
        self.eps = _check_eps(eps)
        if (s is None) != (z is None):
            raise ValueError("s and z must be given together")
        self.s = self.z = None
        if s is not None:
            s, z = float_array(s, "s"), float_array(z, "z")
            if s.ndim < 2 or z.shape != s.shape[:-1]:
                raise ValueError(f"s must have shape (..., D, dv) and z (..., D) with the same leading dims, got s "
                                 f"{s.shape} and z {z.shape}")
            self.s, self.z = np.array(s, dtype=np.float64), np.array(z, dtype=np.float64)

    @classmethod
    def from_keys(cls, k: ArrayLike, v: ArrayLike, *, feature_map: str | feature_maps.FeatureMap = "elu",
                  key_lengths: ArrayLike | None = None, eps: float = 1e-6) -> LinearAttentionState:
        """The sums over every key of ``k`` (..., Nk, d) and ``v`` (..., Nk, dv), padded keys left out.

        :meth:`attend` then gives, for each new query, the row of the non-causal
        ``linear_attention(q, k, v, key_lengths=key_lengths)``; the keys' features are computed once.

        Parameters
        ----------
        k, v : array-like of shape (..., Nk, d) and (..., Nk, dv)
            Keys and values (leading dims broadcast).
        feature_map, eps :
            As in :func:`linear_attention`.
        key_lengths : array-like of int, optional
            Keys ``j >= length`` are padding (shape: a leading prefix of the batch dims).

        Returns
        -------
        LinearAttentionState
            With sums of shape (..., D, dv) and (..., D).
        """
        k, v = float_array(k, "k"), float_array(v, "v")
        check_ndim(k, "k", 2, "(..., Nk, d)")
        k, _, v, dtype = check_qkv(k, k, v)
        state = cls(feature_map, eps=eps)
        batch, nk = batch_shape(k=k, v=v), k.shape[-2]
        phi_k = state.feature_map.keys(k.astype(dtype, copy=False)).astype(np.float64)
        phi_k = np.broadcast_to(phi_k, batch + phi_k.shape[-2:])
        v = np.broadcast_to(v.astype(np.float64), batch + v.shape[-2:])
        if key_lengths is not None:  # where, not multiply: a NaN at a padded key must not leak as 0 * NaN
            lengths = check_key_lengths(key_lengths, batch, nk, describe_shapes(k=k, v=v))
            keep = np.arange(nk) < lengths.reshape(batch + (1,))
            phi_k = np.where(keep[..., None], phi_k, 0)
            v = np.where(keep[..., None], v, 0)
        state.s = np.swapaxes(phi_k, -1, -2) @ v
        state.z = phi_k.sum(axis=-2)
        return state

    def step(self, q: ArrayLike, k: ArrayLike, v: ArrayLike) -> np.ndarray:
        """Attend with query ``q`` (..., d) over every position so far plus (``k`` (..., d), ``v`` (..., dv)).

        Returns an array of shape (..., dv) in the inputs' dtype.
        """
        q, k, v = (float_array(a, name) for a, name in ((q, "q"), (k, "k"), (v, "v")))
        for a, name, what in ((q, "q", "(..., d)"), (k, "k", "(..., d)"), (v, "v", "(..., dv)")):
            check_ndim(a, name, 1, what)
        q, k, v, dtype = check_qkv(q[..., None, :], k[..., None, :], v[..., None, :])
        batch_shape(q=q, k=k, v=v)  # a named error, not NumPy's, when the batch dims do not broadcast
        fm = self.feature_map
        phi_k = fm.keys(k).astype(np.float64)[..., 0, :]
        v = v.astype(np.float64)[..., 0, :]
        with _quiet_non_finite():  # 0 * inf: NaN in the sums, as in the causal op, without a warning
            update = phi_k[..., :, None] * v[..., None, :]
        phi_k = np.broadcast_to(phi_k, update.shape[:-1])  # z keeps the batch shape of s (v may have more dims)
        if self.s is None or self.z is None:
            self.s, self.z = np.zeros_like(update), np.zeros_like(phi_k)
        if self.s.shape != update.shape or self.z.shape != phi_k.shape:
            raise ValueError(f"this state holds sums of shape {self.s.shape}; the step's k and v give phi(k) v^T "
                             f"of shape {update.shape} (batch shape or widths changed)")
        with _quiet_non_finite():
            self.s += update
            self.z += phi_k
        return self._attend(q[..., 0, :], dtype)

    def attend(self, q: ArrayLike) -> np.ndarray:
        """Attend with query ``q`` (..., d) over the positions so far, adding none.

        Returns an array of shape (..., dv) in the dtype of ``q``.
        """
        q = float_array(q, "q")
        if self.s is None or self.z is None:
            raise ValueError("this state holds no keys yet: call step() or build it with from_keys()")
        if q.ndim < 1 or q.shape[:-1] != self.z.shape[:-1]:
            raise ValueError(f"q must have shape (..., d) with batch dims {self.z.shape[:-1]}, got {q.shape}")
        return self._attend(q, q.dtype)

    def _attend(self, q, dtype):
        s, z = self.s, self.z
        assert s is not None and z is not None, "callers check that the state holds keys"
        phi_q = self.feature_map.queries(q[..., None, :]).astype(np.float64)[..., 0, :]
        if phi_q.shape[-1] != z.shape[-1]:
            raise ValueError(f"q of width {q.shape[-1]} gives {phi_q.shape[-1]} features, but this state holds sums "
                             f"over {z.shape[-1]} features (s {s.shape}, z {z.shape})")
        # A batched matrix-vector product and multiply-sums: ~2x and ~6x faster than einsum here.
        with _quiet_non_finite():
            num = (phi_q[..., None, :] @ s)[..., 0, :]
            den = np.sum(phi_q * z, axis=-1, keepdims=True)
            mag = np.sum(np.abs(phi_q) * np.abs(z), axis=-1, keepdims=True)
        return _normalise(num, den, mag, self.eps).astype(dtype)
