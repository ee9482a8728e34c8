"""The two row layouts of a rotary attention's Q and K weights, and the permutations between them.

Rotary positions turn pairs of a head's features. Meta's original Llama and GGUF files pair neighbours,
``(x[2i], x[2i + 1])`` ("interleaved"); Hugging Face's Llama pairs a half with the other half,
``(x[i], x[i + head_dim / 2])`` ("rotate-half"). llama.cpp's ``convert_hf_to_gguf.py`` permutes the rows of
``q_proj`` and ``k_proj`` from the second layout to the first; reading a GGUF into a rotate-half network
takes the inverse. Each function returns ``rows`` such that ``weight[rows]`` is in the other layout (the
rows of every head move within that head).
"""

import numpy as np

__all__ = ["half_to_interleaved", "interleaved_to_half"]


def _check(n_heads, head_dim):
    if n_heads < 1 or head_dim < 2 or head_dim % 2:
        raise ValueError(f"rotary rows need n_heads >= 1 and an even head_dim >= 2, got {n_heads} and {head_dim}")


def interleaved_to_half(n_heads, head_dim):
    """Rows that take interleaved pairs to the rotate-half layout.

    Parameters
    ----------
    n_heads : int
        Heads whose rows the weight stacks (the KV heads for K under grouped-query attention).
    head_dim : int
        Features per head, even.

    Returns
    -------
    rows : ndarray of shape (n_heads * head_dim,)
        ``y = x[rows]`` has ``(y[i], y[i + head_dim / 2]) == (x[2i], x[2i + 1])`` in every head.
    """
    _check(n_heads, head_dim)
    within = np.concatenate([np.arange(0, head_dim, 2), np.arange(1, head_dim, 2)])
    return (np.arange(n_heads)[:, None] * head_dim + within).ravel()


def half_to_interleaved(n_heads, head_dim):
    """Rows that take the rotate-half layout to interleaved pairs: the inverse of :func:`interleaved_to_half`.

    Returns
    -------
    rows : ndarray of shape (n_heads * head_dim,)
        ``y = x[rows]`` has ``(y[2i], y[2i + 1]) == (x[i], x[i + head_dim / 2])`` in every head (what
        llama.cpp's converter writes).
    """
    _check(n_heads, head_dim)
    half = head_dim // 2
    within = np.stack([np.arange(half), np.arange(half) + half], axis=1).ravel()
    return (np.arange(n_heads)[:, None] * head_dim + within).ravel()
