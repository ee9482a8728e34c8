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


def plot_attention(attention, tokens=None, *, part="cross", layer=-1, head=None, ax=None, cmap="viridis",
                   annotate=False):
    """Draw attention weights as heat maps: row i is where token i looks.

    Parameters
    ----------
    attention : dict or ndarray
        One item of :meth:`TransformerClassifier.attention_maps` (a dict with ``"weights"`` of
        shape (n_layers, n_heads, n, n) and ``"tokens"``), one item of
        :meth:`Seq2SeqTransformer.attention_maps` (see ``part``), or an array of shape (r, c),
        (n_heads, r, c) or (n_layers, n_heads, r, c).
    tokens : sequence of str, or a pair of them, optional
        Labels of the positions (default: those of the dict, else 0, 1, ...): one sequence for a
        square map, or (row labels, column labels).
    part : {"cross", "encoder", "decoder"}, default="cross"
        For a Seq2SeqTransformer map: cross-attention (rows: target tokens, columns: source tokens),
        encoder or decoder self-attention.
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
    weights, (row_tokens, column_tokens) = _select(attention, tokens, part, layer, head)
    n_maps, (rows, columns) = weights.shape[0], weights.shape[-2:]
    if ax is not None and n_maps != 1:
        raise ValueError(f"ax can hold one map; give head= to pick one of the {n_maps} heads")
    if ax is None:
        width, height = max(3.0, 0.35 * columns + 1.5), max(3.0, 0.35 * rows + 1.5)
        fig, axes = plt.subplots(1, n_maps, figsize=(width * n_maps, height), squeeze=False)
        axes = list(axes[0])
    else:
        fig, axes = ax.figure, [ax]
    image = None
    for i, (axis, grid) in enumerate(zip(axes, weights)):
        image = axis.imshow(grid, cmap=cmap, vmin=0.0, vmax=1.0)
        axis.set_xticks(range(columns), labels=column_tokens, rotation=90)
        axis.set_yticks(range(rows), labels=row_tokens)
        axis.set_xlabel("attends to")
        if n_maps > 1 or head is not None:
            axis.set_title(f"head {head if head is not None else i}")
        if annotate:
            for (r, c), value in np.ndenumerate(grid):
                axis.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=7,
                          color="white" if value < 0.5 else "black")
    fig.colorbar(image, ax=axes, shrink=0.8)
    return fig


# Seq2SeqTransformer.attention_maps parts: the tokens of the rows and of the columns.
_SEQ2SEQ_PARTS = {"cross": ("target_tokens", "source_tokens"), "encoder": ("source_tokens", "source_tokens"),
                  "decoder": ("target_tokens", "target_tokens")}


def _select(attention, tokens, part, layer, head):
    """The (n_maps, r, c) weights to draw and their (row, column) labels."""
    if isinstance(attention, dict) and "source_tokens" in attention:
        if part not in _SEQ2SEQ_PARTS:
            raise ValueError(f"part must be one of {sorted(_SEQ2SEQ_PARTS)}, got {part!r}")
        weights = np.stack(attention[part])
        if tokens is None:
            tokens = tuple(attention[key] for key in _SEQ2SEQ_PARTS[part])
    elif isinstance(attention, dict):
        if "weights" not in attention:
            raise ValueError("attention must be an item of attention_maps (a dict with 'weights' and 'tokens') "
                             "or an array")
        weights = np.asarray(attention["weights"])
        tokens = attention.get("tokens") if tokens is None else tokens
    else:
        weights = np.asarray(attention)
    if weights.ndim not in (2, 3, 4):
        raise ValueError(f"attention weights must have shape (r, c), (heads, r, c) or (layers, heads, r, c), "
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
    rows, columns = weights.shape[-2:]
    if tokens is None:
        labels = (range(rows), range(columns))
    elif isinstance(tokens, tuple) and len(tokens) == 2 and not isinstance(tokens[0], str):
        labels = tokens
    elif rows == columns:
        labels = (tokens, tokens)
    else:
        raise ValueError(f"a map of {rows} x {columns} needs (row labels, column labels), got one sequence")
    names = tuple([str(t) for t in axis] for axis in labels)
    for name, axis, n in (("rows", names[0], rows), ("columns", names[1], columns)):
        if len(axis) != n:
            raise ValueError(f"tokens has {len(axis)} labels for {n} {name}")
    return weights, names
