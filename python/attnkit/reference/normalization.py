"""Reference layer and RMS normalisation, forward and backward."""

import numpy as np

from attnkit.reference._common import result_dtype

__all__ = ["layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward"]


def layer_norm(x, gamma=None, beta=None, eps=1e-5, return_stats=False):
    r"""Layer normalisation over the last axis.

    .. math:: \mu = \frac{1}{n}\sum_j x_j, \quad \sigma^2 = \frac{1}{n}\sum_j (x_j - \mu)^2, \quad
              y = \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} \gamma + \beta

    Parameters
    ----------
    x : array_like of float, shape (..., n)
    gamma, beta : array_like of float, shape (n,), optional
        Scale (default 1) and shift (default 0).
    eps : float, default=1e-5
    return_stats : bool, default=False
        Also return :math:`\mu` and ``rstd`` :math:`= 1 / \sqrt{\sigma^2 + \epsilon}`, shape (...).

    Returns
    -------
    y : ndarray of shape (..., n)
    mean, rstd : ndarray of shape (...), only with ``return_stats``
    """
    x = np.asarray(x)
    arrays = {"x": x, **{n: np.asarray(a) for n, a in (("gamma", gamma), ("beta", beta)) if a is not None}}
    dtype = result_dtype(**arrays)
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x64 - mean) ** 2).mean(axis=-1, keepdims=True) + eps)
    y = (x64 - mean) * rstd
    if gamma is not None:
        y = y * np.asarray(gamma, dtype=np.float64)
    if beta is not None:
        y = y + np.asarray(beta, dtype=np.float64)
    if not return_stats:
        return y.astype(dtype)
    return y.astype(dtype), mean[..., 0].astype(dtype), rstd[..., 0].astype(dtype)


def layer_norm_backward(dy, x, gamma, mean, rstd):
    r"""Gradients of :func:`layer_norm` with respect to ``x``, ``gamma`` and ``beta``.

    With :math:`\hat x = (x - \mu)\,r` (:math:`r` = ``rstd``) and :math:`g = dy\,\gamma`, the
    Jacobian of :math:`\hat x` gives

    .. math:: dx = r\,\big(g - \overline{g} - \hat x\,\overline{g \hat x}\big), \quad
              d\gamma = \sum_{\text{rows}} dy\,\hat x, \quad d\beta = \sum_{\text{rows}} dy

    where the bars are means over the last axis.

    Parameters
    ----------
    dy, x : array_like of float, shape (..., n)
    gamma : array_like of float, shape (n,), or None (for 1)
    mean, rstd : array_like of float, shape (...)

    Returns
    -------
    dx : ndarray of shape (..., n)
    dgamma, dbeta : ndarray of shape (n,)
    """
    dy, x, mean, rstd = (np.asarray(a) for a in (dy, x, mean, rstd))
    arrays = {"dy": dy, "x": x, "mean": mean, "rstd": rstd}
    if gamma is not None:
        arrays["gamma"] = np.asarray(gamma)
    dtype = result_dtype(**arrays)
    dy64 = dy.astype(np.float64)
    r = rstd.astype(np.float64)[..., None]
    xhat = (x.astype(np.float64) - mean.astype(np.float64)[..., None]) * r
    g = dy64 if gamma is None else dy64 * np.asarray(gamma, dtype=np.float64)
    dx = r * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    n = x.shape[-1]
    dgamma = (dy64 * xhat).reshape(-1, n).sum(axis=0)
    dbeta = dy64.reshape(-1, n).sum(axis=0)
    return dx.astype(dtype), dgamma.astype(dtype), dbeta.astype(dtype)


def rms_norm(x, gamma=None, eps=1e-6, return_stats=False):
    r"""RMS normalisation over the last axis: scale only, no centring, no shift.

    .. math:: r = \Big(\frac{1}{n}\sum_j x_j^2 + \epsilon\Big)^{-1/2}, \quad y = x\,r\,\gamma

    Parameters
    ----------
    x : array_like of float, shape (..., n)
    gamma : array_like of float, shape (n,), optional
        Scale (default 1).
    eps : float, default=1e-6
    return_stats : bool, default=False
        Also return ``rstd`` :math:`= r`, shape (...).

    Returns
    -------
    y : ndarray of shape (..., n)
    rstd : ndarray of shape (...), only with ``return_stats``
    """
    x = np.asarray(x)
    arrays = {"x": x} if gamma is None else {"x": x, "gamma": np.asarray(gamma)}
    dtype = result_dtype(**arrays)
    x64 = x.astype(np.float64)
    rstd = 1.0 / np.sqrt((x64 * x64).mean(axis=-1, keepdims=True) + eps)
    y = x64 * rstd
    if gamma is not None:
        y = y * np.asarray(gamma, dtype=np.float64)
    return (y.astype(dtype), rstd[..., 0].astype(dtype)) if return_stats else y.astype(dtype)


def rms_norm_backward(dy, x, gamma, rstd):
    r"""Gradients of :func:`rms_norm` with respect to ``x`` and ``gamma``.

    With :math:`\hat x = x\,r` and :math:`g = dy\,\gamma`, as for layer normalisation without the
    mean's term:

    .. math:: dx = r\,\big(g - \hat x\,\overline{g \hat x}\big), \quad
              d\gamma = \sum_{\text{rows}} dy\,\hat x

    Parameters
    ----------
    dy, x : array_like of float, shape (..., n)
    gamma : array_like of float, shape (n,), or None (for 1)
    rstd : array_like of float, shape (...)

    Returns
    -------
    dx : ndarray of shape (..., n)
    dgamma : ndarray of shape (n,)
    """
    dy, x, rstd = (np.asarray(a) for a in (dy, x, rstd))
    arrays = {"dy": dy, "x": x, "rstd": rstd}
    if gamma is not None:
        arrays["gamma"] = np.asarray(gamma)
    dtype = result_dtype(**arrays)
    dy64 = dy.astype(np.float64)
    r = rstd.astype(np.float64)[..., None]
    xhat = x.astype(np.float64) * r
    g = dy64 if gamma is None else dy64 * np.asarray(gamma, dtype=np.float64)
    dx = r * (g - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    dgamma = (dy64 * xhat).reshape(-1, x.shape[-1]).sum(axis=0)
    return dx.astype(dtype), dgamma.astype(dtype)
