"""Plots of what a model learnt: attention maps and learning curves (matplotlib, an optional dependency).

Install it with ``pip install "attnkit[plot]"``; attnkit itself never imports matplotlib.
"""

import math
import numbers
import warnings

import numpy as np
from sklearn.utils.validation import check_is_fitted

__all__ = ["plot_attention", "plot_learning_curve"]

# Sizes of the attention grid, in inches and points. A map gets about CELL_PER_TOKEN inches per token,
# within [MIN_CELL, MAX_CELL], shrunk so the grid fits GRID_INCHES, but never below MIN_CELL nor below
# the size at which every token's label fits at LABEL_SIZES[0]: a larger grid makes a larger figure.
CELL_PER_TOKEN = 0.22
MIN_CELL, MAX_CELL = 1.3, 4.5
GRID_INCHES = (22.0, 14.0)
# Token labels are LABEL_SIZES points (the largest that fits), one every LINE_SPACING x size points;
# when even the smallest does not fit, only every k-th token is labelled.
LABEL_SIZES = (7.0, 10.0)
LINE_SPACING = 1.25
CHAR_WIDTH = 0.62  # a character's width as a share of the font size (a rough average, for margins)

VISIBLE_SPACE = "\u2423"  # the label of a blank token (a space of a character tokenizer)

_SCALES = ("fixed", "shared", "map", "log")


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("attnkit.plotting needs matplotlib, which is not installed: "
                          'pip install "attnkit[plot]" (or pip install matplotlib)') from exc
    return plt


def plot_attention(attention, tokens=None, *, part="cross", layer=-1, head=None, ax=None, cmap="viridis",
                   scale="fixed", annotate=False):
    """Draw attention weights as heat maps: row i is where token i looks; a grid of layers x heads.

    One layer's heads are wrapped into a near-square grid (12 heads: 3 rows of 4), read in rows.

    Parameters
    ----------
    attention : dict or ndarray
        One item of :meth:`TransformerClassifier.attention_maps` or
        :meth:`TransformerEmbedder.attention_maps` (a dict with ``"weights"`` of shape
        (n_layers, n_heads, n, n) and ``"tokens"``), one item of :meth:`Seq2SeqTransformer.attention_maps`
        (see ``part``), or an array of shape (r, c), (n_heads, r, c) or (n_layers, n_heads, r, c).
    tokens : sequence of str, or a pair of them, optional
        Labels of the positions (default: those of the dict, else 0, 1, ...): one sequence for a
        square map, or (row labels, column labels).
    part : {"cross", "encoder", "decoder"}, default="cross"
        For a Seq2SeqTransformer map: cross-attention (rows: target tokens, columns: source tokens),
        encoder or decoder self-attention.
    layer : int, "all" or None, default=-1
        Which layer of a 4-D array or dict to draw (negative counts from the last); "all" or None:
        every layer, one row of the grid each.
    head : int or None, default=None
        Which head of a 3-D or 4-D array or dict to draw; None: every head, one column each when
        several layers are drawn, else in a grid of ``isqrt(n_heads)`` rows (at least as many columns).
    ax : matplotlib Axes, optional
        Where to draw a single map (one layer and one head, or a 2-D array); by default a new figure
        sized for the grid and its labels.
    cmap : str, default="viridis"
        Colour map.
    scale : {"fixed", "shared", "map", "log"}, default="fixed"
        Colours of the weights: "fixed" from 0 to 1, so maps compare across figures; "shared" from 0
        to the largest weight drawn, so maps of the figure compare; "map" each map from 0 to its own
        largest weight (the structure of diffuse heads shows, but colours no longer compare between
        maps); "log" a logarithmic scale up to 1 (small weights show; smaller ones than the bottom of
        the colour bar take its colour).
    annotate : bool, default=False
        Write each weight in its cell (readable for short sentences; the weight itself, whatever
        ``scale``). Past 4,096 numbers in all, a UserWarning says that they cannot be read.

    Returns
    -------
    matplotlib.figure.Figure
        With one colour bar for all its maps. Each map is titled by its indices, "layer L, head H",
        0-based as ``layer`` and ``head`` take them (negative indices are shown counted from 0);
        tokens label the left column and the bottom row of the grid, rotated, in a font of 7 to 10
        points that shrinks with their number, every k-th only when even 7 points would not fit (in
        ``ax``, or a map of 4.5 inches). The figure grows with the grid rather than shrink them further.

    Raises
    ------
    ImportError
        If matplotlib is not installed (naming the ``plot`` extra).
    ValueError
        For arrays of another shape or with NaN or infinite weights, a layer or head out of range,
        tokens of the wrong length, an unknown ``part`` or ``scale``, or ``ax`` with several maps.

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit.plotting import plot_attention
    >>> weights = np.full((2, 3, 3, 3), 1 / 3)  # 2 layers of 3 heads over 3 tokens
    >>> fig = plot_attention(weights, ["<cls>", "not", "good"], layer="all")
    >>> len(fig.axes)  # six maps and a colour bar
    7
    >>> fig.axes[5].get_title()
    'layer 1, head 2'
    >>> fig = plot_attention(np.full((12, 3, 3), 1 / 3))  # one layer's 12 heads
    >>> fig.axes[0].get_subplotspec().get_gridspec().get_geometry()
    (3, 4)
    """
    plt = _pyplot()
    if scale not in _SCALES:
        raise ValueError(f"scale must be one of {list(_SCALES)}, got {scale!r}")
    weights, titles, (row_tokens, column_tokens) = _select(attention, tokens, part, layer, head)
    n_layers, n_heads, rows, columns = weights.shape
    if ax is not None and n_layers * n_heads != 1:
        raise ValueError(f"ax can hold one map, got {n_layers} layers x {n_heads} heads; give layer= and head= "
                         "to pick one")
    if annotate and weights.size > MAX_ANNOTATED:
        warnings.warn(f"annotate=True writes {weights.size:,} numbers ({n_layers * n_heads} maps of {rows} x "
                      f"{columns}): at that size they cannot be read and take long to draw (300 x 300: ~10 s); "
                      "annotate a short sentence, or one head's map", UserWarning, stacklevel=2)
    drawn, norm, colour_label = _colour_scale(weights, scale)
    # The maps one after another, layer by layer, as the grid reads them row by row.
    maps, shades = weights.reshape(-1, rows, columns), drawn.reshape(-1, rows, columns)
    if ax is None:
        grid = _grid_shape(n_layers, n_heads)
        fig, axes, cell = _grid_figure(plt, grid, len(maps), (rows, columns), (row_tokens, column_tokens), titles)
    else:
        grid, fig, axes = (1, 1), ax.figure, [ax]
        box = ax.get_position()
        cell = (box.width * fig.get_figwidth(), box.height * fig.get_figheight())
    x_size, x_step = _label_style(cell[0], columns)
    y_size, y_step = _label_style(cell[1], rows)
    image = None
    for k, axis in enumerate(axes):
        image = axis.imshow(shades[k], cmap=cmap, norm=norm, aspect="equal" if ax is not None else "auto",
                            interpolation="nearest")
        axis.set_xticks(range(0, columns, x_step), labels=column_tokens[::x_step], rotation=90, fontsize=x_size)
        axis.set_yticks(range(0, rows, y_step), labels=row_tokens[::y_step], fontsize=y_size)
        axis.tick_params(labelbottom=k // grid[1] == grid[0] - 1, labelleft=k % grid[1] == 0, length=2)
        if titles[k]:
            axis.set_title(titles[k], fontsize=_title_size(cell[0], titles))
        if annotate:
            _annotate(axis, maps[k], norm(shades[k]), cell)
    if ax is not None:
        ax.set_xlabel("attends to")
    else:
        fig.supxlabel("attends to", fontsize=10)
    # A bar about a quarter of an inch wide, however large the grid.
    width, height = fig.get_size_inches()
    fig.colorbar(image, ax=axes, label=colour_label, fraction=min(0.15, 0.4 / width),
                 aspect=max(20.0, 3.5 * height), shrink=1.0 if grid[0] > 1 else 0.9)
    return fig


def _grid_shape(n_layers, n_heads):
    """(rows, columns) of the grid: a row per layer, or one layer's heads in isqrt(n_heads) rows."""
    if n_layers > 1:
        return n_layers, n_heads
    # Wider than tall, as screens and pages are, with any gaps at the end of the last row:
    # 12 heads -> 3 x 4, 8 -> 2 x 4, 3 -> 1 x 3, 2 -> 1 x 2.
    n_rows = math.isqrt(n_heads)
    return n_rows, math.ceil(n_heads / n_rows)


def _grid_figure(plt, grid, n_maps, shape, tokens, titles):
    """A constrained-layout figure of a (rows, columns) ``grid`` whose first n_maps cells hold maps of
    ``shape`` (rows, columns of tokens) labelled by ``tokens``: the figure, the n_maps axes row by row,
    and the size (inches) of one map."""
    (n_rows, n_cols), (rows, columns), (row_tokens, column_tokens) = grid, shape, tokens
    width, height = _map_inches(columns), _map_inches(rows)
    shrink = min(1.0, GRID_INCHES[0] / (n_cols * width), GRID_INCHES[1] / (n_rows * height))
    cell = (max(width * shrink, _readable_inches(columns, width)), max(height * shrink, _readable_inches(rows, height)))
    # Room for the labels of the outer maps, the titles and the colour bar.
    x_size, y_size = _label_style(cell[0], columns)[0], _label_style(cell[1], rows)[0]
    left = CHAR_WIDTH * y_size * max(map(len, row_tokens), default=1) / 72 + 0.3
    bottom = CHAR_WIDTH * x_size * max(map(len, column_tokens), default=1) / 72 + 0.5
    title = 2 * _title_size(cell[0], titles) / 72 if titles[0] else 0.05
    figsize = (n_cols * (cell[0] + 0.1) + left + 1.0, n_rows * (cell[1] + title + 0.1) + bottom + 0.2)
    fig = plt.figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(n_rows, n_cols, squeeze=False).ravel()
    for axis in axes[n_maps:]:
        axis.remove()
    return fig, list(axes[:n_maps]), cell


def _map_inches(n):
    """A map's side (inches) over n tokens before the grid shrinks it: CELL_PER_TOKEN each, within
    [MIN_CELL, MAX_CELL]."""
    return min(max(CELL_PER_TOKEN * n, MIN_CELL), MAX_CELL)


def _readable_inches(n, side):
    """The least (inches) a map's unshrunk ``side`` over n tokens may shrink to: room for every label at
    LABEL_SIZES[0] points, up to ``side`` (past it every k-th token is labelled), and at least MIN_CELL."""
    return max(min(n * LABEL_SIZES[0] * LINE_SPACING / 72, side), MIN_CELL)


def _label_style(inches, n):
    """Font size (points) of the labels of n positions along ``inches``, and the step between labelled
    positions (1: all)."""
    pitch = 72 * inches / n
    size = min(max(pitch / LINE_SPACING, LABEL_SIZES[0]), LABEL_SIZES[1])
    return size, max(1, math.ceil(size * LINE_SPACING / pitch))


def _title_size(width, titles):
    """The largest font size up to 10 points at which the longest title fits a map ``width`` inches wide."""
    longest = max(map(len, titles), default=1)
    return min(10.0, max(5.0, 72 * width / (CHAR_WIDTH * longest + 1)))


MAX_ANNOTATED = 4096  # numbers written by annotate=True before plot_attention warns (64 x 64 tokens)


def _annotate(axis, grid, shade, cell):
    """Each weight of ``grid`` in its cell, in a colour readable on its ``shade`` (0-1)."""
    rows, columns = grid.shape
    size = max(2.0, min(7.0, 0.3 * 72 * min(cell[0] / columns, cell[1] / rows)))
    for (r, c), value in np.ndenumerate(grid):
        axis.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=size,
                  color="white" if shade[r, c] < 0.5 else "black")


def _colour_scale(weights, scale):
    """The weights to draw, their matplotlib norm and the colour bar's label, for ``scale``."""
    from matplotlib.colors import LogNorm, Normalize

    if scale == "fixed":
        return weights, Normalize(0.0, 1.0), "attention weight"
    if scale == "shared":
        top = float(weights.max())
        return weights, Normalize(0.0, top if top > 0 else 1.0), "attention weight"
    if scale == "map":
        top = weights.max(axis=(-2, -1), keepdims=True)
        return weights / np.where(top > 0, top, 1.0), Normalize(0.0, 1.0), "weight / the map's largest weight"
    # One decade below a uniform row's weight (1 / columns), so diffuse heads keep their contrast.
    bottom = 10.0 ** math.floor(math.log10(0.1 / weights.shape[-1]))
    return np.clip(weights, bottom, 1.0), LogNorm(bottom, 1.0), "attention weight (log scale)"


# Seq2SeqTransformer.attention_maps parts: the tokens of the rows and of the columns.
_SEQ2SEQ_PARTS = {"cross": ("target_tokens", "source_tokens"), "encoder": ("source_tokens", "source_tokens"),
                  "decoder": ("target_tokens", "target_tokens")}


def _select(attention, tokens, part, layer, head):
    """The (n_layers, n_heads, r, c) weights to draw, their titles (one per map, layer by layer) and their
    (row, column) labels."""
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
    if weights.size == 0:
        raise ValueError(f"attention weights must not be empty, got shape {weights.shape}")
    if weights.dtype.kind not in "biuf":
        raise ValueError(f"attention weights must be numbers, got an array of dtype {weights.dtype}")
    if not np.isfinite(weights).all():
        raise ValueError("attention weights must be finite, got NaN or infinite values")
    ndim = weights.ndim
    weights = np.expand_dims(weights, tuple(range(4 - ndim))).astype(float, copy=False)
    # Only the axes the input has are selected and titled: a 3-D array has heads but no layers.
    layers = _indices("layer", layer, weights.shape[0]) if ndim == 4 else None
    heads = _indices("head", head, weights.shape[1]) if ndim >= 3 else None
    weights = weights[np.ix_(layers or [0], heads or [0])]
    titles = [", ".join(name for name in (None if layers is None else f"layer {i}",
                                          None if heads is None else f"head {j}") if name)
              for i in layers or [0] for j in heads or [0]]
    return weights, titles, _labels(tokens, *weights.shape[-2:])


def _indices(name, value, n):
    """The non-negative indices ``value`` picks among n: one, or all for None (or "all" for a layer)."""
    if value is None or (name == "layer" and isinstance(value, str) and value == "all"):
        return list(range(n))
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        expected = "an int, 'all' or None" if name == "layer" else "an int or None"
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    if not -n <= value < n:
        raise ValueError(f"{name} must be in [-{n}, {n}), got {value}")
    return [int(value) % n]


def _labels(tokens, rows, columns):
    """(row labels, column labels) as lists of str, checked against the map's shape."""
    if tokens is not None and not isinstance(tokens, (list, tuple, np.ndarray)):
        tokens = list(tokens)  # a generator read once, not once per axis
    if tokens is None:
        labels = (range(rows), range(columns))
    elif isinstance(tokens, tuple) and len(tokens) == 2 and not isinstance(tokens[0], str) and all(
            isinstance(axis, (list, tuple, np.ndarray, range)) for axis in tokens):
        labels = tokens
    elif rows == columns:
        labels = (tokens, tokens)
    else:
        raise ValueError(f"a map of {rows} x {columns} needs (row labels, column labels), got one sequence")
    names = tuple([str(t) if str(t).strip() else VISIBLE_SPACE for t in axis] for axis in labels)
    for name, axis, n in (("rows", names[0], rows), ("columns", names[1], columns)):
        if len(axis) != n:
            raise ValueError(f"tokens has {len(axis)} labels for {n} {name}")
    return names


def _history(estimator, name, value=None):
    """``estimator.name`` (or ``value``) as a 1-D float array (empty when absent), naming it when it is not one."""
    value = getattr(estimator, name, None) if value is None else value
    if value is None:
        return np.empty(0)
    try:
        curve = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        curve = None
    if curve is None or curve.ndim != 1:
        raise ValueError(f"{type(estimator).__name__}.{name} must be a sequence of numbers, one per epoch, got "
                         f"{value!r:.80}")
    return curve


def plot_learning_curve(estimator, ax=None):
    """Draw an estimator's training history: loss per epoch, validation loss and score, the kept epoch.

    Parameters
    ----------
    estimator : fitted TransformerClassifier or Seq2SeqTransformer
        Or any fitted estimator with ``loss_curve_`` (and optionally ``validation_loss_curve_``,
        ``validation_scores_`` and ``best_epoch_``), e.g. scikit-learn's MLPClassifier.
    ax : matplotlib Axes, optional
        Where to draw the losses (the score goes on a twin y-axis); by default a new figure.

    Returns
    -------
    matplotlib.figure.Figure
        Epochs (1-based, over all ``warm_start`` fits and ``partial_fit`` calls) on the x-axis; the
        training loss and the validation loss on the left y-axis; the validation score (named as the
        estimator's verbose lines name it, e.g. "validation accuracy") on the right one; with
        validation, a dashed vertical line at ``best_epoch_``, the epoch whose weights the estimator
        holds. Without validation only the training loss is drawn (the kept epoch is then the last).

    Raises
    ------
    ImportError
        If matplotlib is not installed (naming the ``plot`` extra).
    sklearn.exceptions.NotFittedError
        If ``estimator`` is not fitted.
    TypeError
        If ``estimator`` is not an estimator, or has no training history (``loss_curve_``), as
        :class:`attnkit.TransformerEmbedder`, which does not train.
    ValueError
        If its history has no epoch, a curve is not a sequence of numbers, or a validation curve is longer
        than the training loss.

    Warns
    -----
    UserWarning
        When the validation curves are shorter than the training loss (``partial_fit`` calls or
        ``warm_start`` fits without validation after a fit with it): they are drawn at the first
        epochs, which is right for ``partial_fit`` after ``fit`` (the history does not record which
        epochs were validated).

    Examples
    --------
    >>> from attnkit import TransformerClassifier
    >>> from attnkit.plotting import plot_learning_curve
    >>> texts, labels = ["good", "not good", "bad", "not bad"] * 10, [1, 0, 0, 1] * 10
    >>> clf = TransformerClassifier(d_model=16, n_heads=2, d_ff=32, max_iter=3, validation_fraction=0.25,
    ...                             random_state=0).fit(texts, labels)
    >>> fig = plot_learning_curve(clf)
    >>> fig.axes[1].get_ylabel()
    'validation accuracy'
    """
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    check_is_fitted(estimator)
    losses = getattr(estimator, "loss_curve_", None)
    if losses is None:
        raise TypeError(f"plot_learning_curve needs an estimator that trains epoch by epoch (with loss_curve_); "
                        f"{type(estimator).__name__} has no training history")
    losses = _history(estimator, "loss_curve_", losses)
    if not len(losses):
        raise ValueError(f"{type(estimator).__name__}.loss_curve_ is empty: there is no epoch to draw")
    validation_losses = _history(estimator, "validation_loss_curve_")
    scores = _history(estimator, "validation_scores_")
    for name, curve in (("validation_loss_curve_", validation_losses), ("validation_scores_", scores)):
        if len(curve) > len(losses):
            raise ValueError(f"{type(estimator).__name__}.{name} has {len(curve)} epochs, more than loss_curve_'s "
                             f"{len(losses)}")
    n_validated = max(len(validation_losses), len(scores))
    if 0 < n_validated < len(losses):
        warnings.warn(f"{type(estimator).__name__} was validated on {n_validated} of its {len(losses)} epochs "
                      f"(later calls trained without validation); its validation curves are drawn at epochs 1 "
                      f"to {n_validated}", UserWarning, stacklevel=2)
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
    else:
        fig = ax.figure
    epochs = np.arange(1, len(losses) + 1)
    ax.plot(epochs, losses, marker="o", markersize=3, label="training loss")
    if len(validation_losses):
        ax.plot(epochs[:len(validation_losses)], validation_losses, marker="o", markersize=3,
                label="validation loss")
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss")
    # Whole epochs, whatever locator a given ax had, even with a single epoch in view: with fewer
    # integers in view than min_n_ticks (by default 2), MaxNLocator falls back to fractional ticks.
    ax.xaxis.set_major_locator(MaxNLocator(nbins="auto", integer=True, min_n_ticks=1))
    handles = ax.get_lines()
    if len(scores):
        score_name = "validation " + getattr(estimator, "_score_name", "score")
        twin = ax.twinx()
        twin.plot(epochs[:len(scores)], scores, marker="s", markersize=3, color="C2", label=score_name)
        twin.set_ylabel(score_name)
        handles = [*handles, *twin.get_lines()]
    kept = getattr(estimator, "best_epoch_", None)
    if n_validated and kept is not None:
        handles.append(ax.axvline(kept, color="0.4", linestyle="--", linewidth=1,
                                  label=f"kept weights (epoch {kept})"))
    # Above the axes, where it hides no curve of either y-axis.
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.01), ncol=2, fontsize=9, frameon=False)
    return fig
