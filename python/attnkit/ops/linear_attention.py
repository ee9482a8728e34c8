"""Kernelized linear attention, batch and step by step."""

import math

import numpy as np

from attnkit import _core
from attnkit._validation import check_real
from attnkit.feature_maps import resolve_feature_map
from attnkit.masking import check_key_lengths, check_mask
from attnkit.ops._layout import batch_shape, check_qkv

__all__ = ["LinearAttentionState", "linear_attention"]


def linear_attention(q, k, v, *, feature_map="elu", causal=False, mask=None, key_lengths=None, eps=1e-6,
                     return_state=False):
    """Kernelized linear attention: O(N) time and memory in the sequence length.

    ``out_i = phi(q_i)^T S / (phi(q_i)^T Z)`` with ``S = sum_j phi(k_j) v_j^T`` and
    ``Z = sum_j phi(k_j)`` over the keys query i may see (Katharopoulos et al., 2020). With
    ``causal=True`` the sums run over ``j <= i`` (prefix sums ``S_i``, ``Z_i``, computed by chunks in
    C++ with the running state in float64, so the error does not grow with N).

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
        Denominator guard: a query whose normaliser ``phi(q_i)^T Z`` is <= eps (it sees no key, or a
        random-feature estimate came out non-positive) gets zeros instead of a division by ~0. A NaN
        normaliser stays NaN.
    return_state : bool, default=False
        With ``causal=True``, also return the :class:`LinearAttentionState` after the last row, to
        continue step by step.

    Returns
    -------
    out : ndarray of shape (..., Nq, dv)
    state : LinearAttentionState
        Only with ``return_state=True``.
    """
    q, k, v, dtype = check_qkv(q, k, v)
    nq, nk = q.shape[-2], k.shape[-2]
    fm = resolve_feature_map(feature_map)
    eps = check_real(eps, "eps")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if mask is not None:
        mask = check_mask(mask, nq, nk)
        if mask.shape[-2] != 1 and nq != 1:
            raise ValueError(
                "linear attention takes key-padding masks only, broadcastable to (..., 1, Nk): "
                f"got mask shape {mask.shape}; use scaled_dot_product_attention for other masks"
            )
    if causal and nq != nk:
        raise ValueError(f"causal linear attention needs Nq == Nk, got q {q.shape} and k {k.shape}; "
                         "decode step by step with LinearAttentionState")
    if return_state and not causal:
        raise ValueError("return_state=True needs causal=True")
    batch = batch_shape(q=q, k=k, v=v, mask=mask)
    keep = None
    if key_lengths is not None:
        lengths = check_key_lengths(key_lengths, batch, nk).reshape(batch + (1,))
        keep = np.arange(nk) < lengths
    if mask is not None:
        per_key = np.broadcast_to(mask[..., 0, :], batch + (nk,))
        keep = per_key if keep is None else keep & per_key
    phi_q = fm.queries(np.broadcast_to(q, batch + q.shape[-2:]).astype(dtype, copy=False))
    phi_k = fm.keys(np.broadcast_to(k, batch + k.shape[-2:]).astype(dtype, copy=False))
    v = np.broadcast_to(v, batch + v.shape[-2:]).astype(dtype, copy=False)
    if keep is not None:  # where, not multiply: a NaN at a padded key must not leak as 0 * NaN
        phi_k = np.where(keep[..., None], phi_k, 0)
        v = np.where(keep[..., None], v, 0)
    if causal:
        return _causal_linear(phi_q, phi_k, v, fm, eps, return_state)
    s = np.swapaxes(phi_k, -1, -2) @ v
    z = phi_k.sum(axis=-2)
    return _normalise(phi_q @ s, phi_q @ z[..., None], eps)


def _normalise(num, den, eps):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den <= eps, 0, num / den).astype(num.dtype, copy=False)


def _causal_linear(phi_q, phi_k, v, fm, eps, return_state):
    batch, (n, big_d), dv = phi_q.shape[:-2], phi_q.shape[-2:], v.shape[-1]
    flat = math.prod(batch)
    out = np.empty((flat, n, dv), phi_q.dtype)
    s = np.empty((flat, big_d, dv)) if return_state else None
    z = np.empty((flat, big_d)) if return_state else None
    _core.causal_linear_attention(
        *(np.ascontiguousarray(a).reshape(flat, n, -1) for a in (phi_q, phi_k, v)), out, eps, s, z)
    out = out.reshape(batch + (n, dv))
    if not return_state:
        return out
    return out, LinearAttentionState(fm, eps=eps, s=s.reshape(batch + (big_d, dv)), z=z.reshape(batch + (big_d,)))


class LinearAttentionState:
    """The running sums of causal linear attention, for decoding one position at a time.

    ``step(q_t, k_t, v_t)`` adds ``phi(k_t) v_t^T`` to ``S`` and ``phi(k_t)`` to ``Z`` (in float64) and
    returns ``phi(q_t)^T S / (phi(q_t)^T Z)``: row t of ``linear_attention(..., causal=True)`` with the
    same feature map. O(D * dv) per step, whatever the length so far.

    Parameters
    ----------
    feature_map : str or FeatureMap, default="elu"
        Must be the map (the same instance, for random maps) used for the earlier positions.
    eps : float, default=1e-6
        Denominator guard, as in :func:`linear_attention`.
    s, z : ndarray, optional
        Initial sums (..., D, dv) and (..., D), e.g. from ``linear_attention(..., return_state=True)``.
    """

    def __init__(self, feature_map="elu", *, eps=1e-6, s=None, z=None):
        self.feature_map = resolve_feature_map(feature_map)
        self.eps = check_real(eps, "eps")
        if (s is None) != (z is None):
            raise ValueError("s and z must be given together")
        self.s = None if s is None else np.array(s, dtype=np.float64)
        self.z = None if z is None else np.array(z, dtype=np.float64)

    def step(self, q, k, v):
        """Attend with query ``q`` (..., d) over every position so far plus (``k`` (..., d), ``v`` (..., dv)).

        Returns an array of shape (..., dv) in the inputs' dtype.
        """
        q, k, v, dtype = check_qkv(*(np.asarray(a)[..., None, :] for a in (q, k, v)))
        fm = self.feature_map
        phi_q = fm.queries(q).astype(np.float64)[..., 0, :]
        phi_k = fm.keys(k).astype(np.float64)[..., 0, :]
        v = v.astype(np.float64)[..., 0, :]
        update = phi_k[..., :, None] * v[..., None, :]
        if self.s is None:
            self.s, self.z = np.zeros_like(update), np.zeros_like(phi_k)
        if self.s.shape != update.shape:
            raise ValueError(f"this state holds sums of shape {self.s.shape}; the step's phi(k) v^T has "
                             f"shape {update.shape} (batch shape or widths changed)")
        self.s += update
        self.z += phi_k
        num = np.einsum("...D,...Dv->...v", phi_q, self.s)
        den = np.einsum("...D,...D->...", phi_q, self.z)[..., None]
        return _normalise(num, den, self.eps).astype(dtype)
