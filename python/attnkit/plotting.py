"""Plots of what a model learnt: attention maps (matplotlib, an optional dependency).

Install it with ``pip install "attnkit[plot]"``; attnkit itself never imports matplotlib.
"""

import numpy as np

__all__ = ["plot_attention"]


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("attnkit.plotting needs matplotlib, which is not installed: "
                          'pip install "attnkit[plot]" (or pip install matplotlib)') from exc
    return plt


def plot_attention(attention, tokens=None, *, layer=-1, head=None, ax=None, cmap="viridis", annotate=False):
    """Draw attention weights as heat maps: row i is where token i looks.

    Parameters
    ----------
    attention : dict or ndarray
        One item of :meth:`TransformerClassifier.attention_maps` (a dict with ``"weights"`` of
        shape (n_layers, n_heads, n, n) and ``"tokens"``), or an array of shape (n, n),
        (n_heads, n, n) or (n_layers, n_heads, n, n).
    tokens : sequence of str, optional
        Labels of the n positions (default: those of the dict, else 0, 1, ...).
    layer : int, default=-1
        Which layer of a 4-D array or dict to draw (negative counts from the last).
    head : int, optional
        Which head; None draws every head of the layer side by side.
    ax : matplotlib Axes, optional
        Where to draw a single map (one head, or a 2-D array); by default a new figure.
    cmap : str, default="viridis"
        Colour map; weights are drawn on a fixed 0-1 scale, so maps compare.
    annotate : bool, default=False
        Write each weight in its cell (readable for short sentences).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ImportError
        If matplotlib is not installed (naming the ``plot`` extra).
    ValueError
        For arrays of another shape, a layer or head out of range, tokens of the wrong length, or
        ``ax`` with several heads.

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit.plotting import plot_attention
    >>> weights = np.full((2, 3, 3), 1 / 3)  # 2 heads over 3 tokens
    >>> fig = plot_attention(weights, ["<cls>", "not", "good"])
    >>> len(fig.axes)  # two maps and a colour bar
    3
    """
    plt = _pyplot()
    weights, tokens = _select(attention, tokens, layer, head)
    n_maps, n = weights.shape[0], weights.shape[-1]
    if ax is not None and n_maps != 1:
        raise ValueError(f"ax can hold one map; give head= to pick one of the {n_maps} heads")
    if ax is None:
        size = max(3.0, 0.35 * n + 1.5)
        fig, axes = plt.subplots(1, n_maps, figsize=(size * n_maps, size), squeeze=False)
        axes = list(axes[0])
    else:
        fig, axes = ax.figure, [ax]
    image = None
    for i, (axis, grid) in enumerate(zip(axes, weights)):
        image = axis.imshow(grid, cmap=cmap, vmin=0.0, vmax=1.0)
        axis.set_xticks(range(n), labels=tokens, rotation=90)
        axis.set_yticks(range(n), labels=tokens)
        axis.set_xlabel("attends to")
        if n_maps > 1 or head is not None:
            axis.set_title(f"head {head if head is not None else i}")
        if annotate:
            for (r, c), value in np.ndenumerate(grid):
                axis.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=7,
                          color="white" if value < 0.5 else "black")
    fig.colorbar(image, ax=axes, shrink=0.8)
    return fig


def _select(attention, tokens, layer, head):
    """The (n_maps, n, n) weights to draw and their labels."""
    if isinstance(attention, dict):
        if "weights" not in attention:
            raise ValueError("attention must be an item of attention_maps (a dict with 'weights' and 'tokens') "
                             "or an array")
        weights = np.asarray(attention["weights"])
        tokens = attention.get("tokens") if tokens is None else tokens
    else:
        weights = np.asarray(attention)
    if weights.ndim not in (2, 3, 4) or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"attention weights must have shape (n, n), (heads, n, n) or (layers, heads, n, n), "
                         f"got {weights.shape}")
    if weights.ndim == 4:
        if not -weights.shape[0] <= layer < weights.shape[0]:
            raise ValueError(f"layer must be in [-{weights.shape[0]}, {weights.shape[0]}), got {layer}")
        weights = weights[layer]
    if weights.ndim == 2:
        weights = weights[None]
    if head is not None:
        if not -weights.shape[0] <= head < weights.shape[0]:
            raise ValueError(f"head must be in [-{weights.shape[0]}, {weights.shape[0]}), got {head}")
        weights = weights[head : head + 1] if head >= 0 else weights[[head]]
    n = weights.shape[-1]
    tokens = [str(t) for t in (range(n) if tokens is None else tokens)]
    if len(tokens) != n:
        raise ValueError(f"tokens has {len(tokens)} labels for {n} positions")
    return weights, tokens
