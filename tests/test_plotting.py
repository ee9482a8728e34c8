"""attnkit.plotting: attention grids and learning curves (skipped without matplotlib), their layout (no
tick label or title overlaps another once drawn) and the message when matplotlib is missing.

Every figure a test draws is also saved as a PNG under the test's tmp_path, to look at:
``pytest tests/test_plotting.py --basetemp=/tmp/plots``."""

import doctest
import sys
import warnings

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier

from attnkit import plotting
from attnkit.plotting import plot_attention, plot_learning_curve

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402

SENTENCE = "the movie was not very good but the actors were great .".split()


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _maps(layers=2, heads=3, n=4, tokens=("<cls>", "not", "very", "good")):
    weights = np.random.default_rng(0).random((layers, heads, n, n))
    return {"tokens": list(tokens)[:n], "weights": weights / weights.sum(-1, keepdims=True)}


def _images(fig):
    return [ax for ax in fig.axes if ax.get_images()]


def _texts(labels):
    return [t.get_text() for t in labels]


def _assert_no_overlaps(fig, path):
    """Save ``fig`` to ``path``, then check that no two visible tick labels or titles overlap."""
    fig.savefig(path, dpi=72)
    fig.canvas.draw()
    texts = [t for ax in fig.axes for axis in (ax.xaxis, ax.yaxis) if axis.get_visible()
             for t in axis.get_ticklabels() if t.get_text()]
    texts += [ax.title for ax in fig.axes if ax.get_title()]
    boxes = np.array([t.get_window_extent().extents for t in texts])  # x0, y0, x1, y1 in pixels
    boxes += [0.5, 0.5, -0.5, -0.5]  # touching is fine
    clash = ((boxes[:, None, 0] < boxes[None, :, 2]) & (boxes[None, :, 0] < boxes[:, None, 2])
             & (boxes[:, None, 1] < boxes[None, :, 3]) & (boxes[None, :, 1] < boxes[:, None, 3]))
    np.fill_diagonal(clash, False)
    pairs = [(texts[i].get_text(), texts[j].get_text()) for i, j in zip(*np.nonzero(np.triu(clash)))]
    assert not pairs, f"overlapping labels: {pairs[:5]}"
    assert path.stat().st_size > 1000


def test_docstring_examples_run():
    assert doctest.testmod(plotting).failed == 0


# ------------------------------------------------------------------------------------ attention grid
def test_one_map_per_head_of_the_last_layer_by_default():
    fig = plot_attention(_maps())
    maps = _images(fig)
    assert len(maps) == 3 and len(fig.axes) == 4  # and the colour bar
    assert _texts(maps[0].get_xticklabels()) == ["<cls>", "not", "very", "good"]
    assert [ax.get_title() for ax in maps] == ["layer 1, head 0", "layer 1, head 1", "layer 1, head 2"]
    np.testing.assert_array_equal(maps[1].get_images()[0].get_array(), _maps()["weights"][-1, 1])


def test_layer_and_head_selection_and_annotation():
    fig = plot_attention(_maps(), layer=0, head=-1, annotate=True)
    ax = _images(fig)[0]
    np.testing.assert_array_equal(ax.get_images()[0].get_array(), _maps()["weights"][0, 2])
    assert ax.get_title() == "layer 0, head 2" and len(ax.texts) == 16  # negative indices shown from 0


def test_annotating_more_numbers_than_can_be_read_warns():
    weights = np.full((65, 65), 1 / 65)  # 4,225 numbers: past the 4,096 that stay readable
    with pytest.warns(UserWarning, match=r"annotate=True writes 4,225 numbers \(1 maps of 65 x 65\)"):
        fig = plot_attention(weights, annotate=True)
    assert len(_images(fig)[0].texts) == 4225  # still drawn: the user asked for them
    plt.close(fig)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plt.close(plot_attention(np.full((64, 64), 1 / 64), annotate=True))


@pytest.mark.parametrize("layer", ["all", None])
def test_every_layer_and_head_as_a_labelled_grid(layer, tmp_path):
    maps = _maps(layers=2, heads=4, n=12, tokens=SENTENCE)
    fig = plot_attention(maps, layer=layer)
    axes = _images(fig)
    assert len(axes) == 8 and len(fig.axes) == 9  # one colour bar for all
    assert [ax.get_title() for ax in axes] == [f"layer {i}, head {j}" for i in range(2) for j in range(4)]
    for k, ax in enumerate(axes):
        i, j = divmod(k, 4)
        np.testing.assert_array_equal(ax.get_images()[0].get_array(), maps["weights"][i, j])
        assert _texts(ax.get_xticklabels()) == (SENTENCE if i == 1 else [])  # labels on the bottom row only
        assert _texts(ax.get_yticklabels()) == (SENTENCE if j == 0 else [])  # and on the left column only
        assert all(t.get_rotation() == 90 for t in ax.get_xticklabels())
    assert fig.get_layout_engine() is not None and fig.get_size_inches()[0] > fig.get_size_inches()[1]
    _assert_no_overlaps(fig, tmp_path / "grid_2x4.png")


def test_a_large_grid_shrinks_its_labels_and_still_does_not_overlap(tmp_path):
    tokens = ["[CLS]", *"a man is playing a guitar on the stage while people dance".split(), "[SEP]"]
    big = plot_attention(_maps(layers=6, heads=12, n=14, tokens=tokens), layer="all")
    axes = _images(big)
    assert len(axes) == 72 and axes[-1].get_title() == "layer 5, head 11"
    small = plot_attention(_maps(layers=1, heads=2, n=4))
    assert axes[0].get_yticklabels()[0].get_fontsize() < _images(small)[0].get_yticklabels()[0].get_fontsize()
    _assert_no_overlaps(big, tmp_path / "grid_6x12.png")


@pytest.mark.parametrize(("heads", "grid"), [(12, (3, 4)), (4, (2, 2)), (7, (2, 4)), (2, (1, 2)), (1, (1, 1))])
def test_one_layers_heads_wrap_into_a_near_square_grid(heads, grid, tmp_path):
    tokens = ["[CLS]", *"a man is playing a guitar on the stage while people dance".split(), "[SEP]"]
    maps = _maps(layers=6, heads=heads, n=14, tokens=tokens)
    fig = plot_attention(maps, layer=2)
    axes = _images(fig)
    assert [ax.get_subplotspec().get_gridspec().get_geometry() for ax in axes] == [grid] * heads
    assert [ax.get_title() for ax in axes] == [f"layer 2, head {j}" for j in range(heads)]
    for j, ax in enumerate(axes):  # read row by row; a gap at the end of the last row has no axes
        row, column = divmod(j, grid[1])
        assert (ax.get_subplotspec().rowspan.start, ax.get_subplotspec().colspan.start) == (row, column)
        np.testing.assert_array_equal(ax.get_images()[0].get_array(), maps["weights"][2, j])
        assert _texts(ax.get_xticklabels()) == (tokens if row == grid[0] - 1 else [])
        assert _texts(ax.get_yticklabels()) == (tokens if column == 0 else [])
    assert min(t.get_fontsize() for ax in axes for t in ax.get_xticklabels() + ax.get_yticklabels()) >= 7
    assert len(fig.axes) == heads + 1  # and the colour bar
    _assert_no_overlaps(fig, tmp_path / f"heads_{heads}.png")


def test_a_grid_of_every_layer_grows_rather_than_shrink_labels_below_7_points(tmp_path):
    tokens = ["[CLS]", *"a man in a red shirt is playing an old guitar on the stage while people dance".split(),
              "[SEP]"]
    fig = plot_attention(_maps(layers=6, heads=12, n=19, tokens=tokens), layer="all")
    axes = _images(fig)
    assert axes[0].get_subplotspec().get_gridspec().get_geometry() == (6, 12)  # a row per layer, as before
    assert _texts(axes[-1].get_xticklabels()) == tokens and _texts(axes[-12].get_yticklabels()) == tokens
    assert min(t.get_fontsize() for ax in axes for t in ax.get_xticklabels() + ax.get_yticklabels()) >= 7
    assert fig.get_size_inches()[0] > plotting.GRID_INCHES[0]
    _assert_no_overlaps(fig, tmp_path / "grid_6x12_long.png")


def test_too_many_tokens_are_labelled_every_k_th(tmp_path):
    tokens = [f"word{i}" for i in range(120)]
    fig = plot_attention(_maps(layers=1, heads=2, n=120, tokens=tokens))
    labels = _texts(_images(fig)[0].get_yticklabels())
    step = tokens.index(labels[1])
    assert step > 1 and labels == tokens[::step]
    _assert_no_overlaps(fig, tmp_path / "long.png")


def test_colour_scales():
    maps = _maps(layers=1, heads=2, n=6, tokens="abcdef")
    weights = maps["weights"][0]
    fixed = _images(plot_attention(maps))[0].get_images()[0]
    assert (fixed.norm.vmin, fixed.norm.vmax) == (0, 1)
    shared = _images(plot_attention(maps, scale="shared"))[0].get_images()[0]
    assert shared.norm.vmax == pytest.approx(weights.max())
    per_map = plot_attention(maps, scale="map")
    for ax, grid in zip(_images(per_map), weights):
        np.testing.assert_allclose(ax.get_images()[0].get_array(), grid / grid.max())
    assert per_map.axes[-1].get_ylabel() == "weight / the map's largest weight"
    annotated = _images(plot_attention(maps, head=0, scale="map", annotate=True))[0]
    assert annotated.texts[1].get_text() == f"{weights[0, 0, 1]:.2f}"  # the weight, not its scaled colour
    log = _images(plot_attention(np.eye(4)[None], scale="log"))[0].get_images()[0]
    # The bottom of the scale: a decade below 1 / 4 columns, floored to a power of ten.
    assert isinstance(log.norm, LogNorm) and log.norm.vmin == 1e-2 and log.get_array().min() == 1e-2


def test_draws_into_a_given_axes():
    fig, ax = plt.subplots()
    assert plot_attention(np.eye(3), ["a", "b", "c"], ax=ax) is fig
    assert ax.get_images() and ax.get_title() == "" and ax.get_xlabel() == "attends to"
    assert plot_attention(_maps(), ["a", "b", "c", "d"], layer=0, head=1, ax=plt.subplots()[1]).axes[0].get_title() \
        == "layer 0, head 1"
    with pytest.raises(ValueError, match="ax can hold one map, got 1 layers x 3 heads; give layer= and head="):
        plot_attention(_maps(), ax=ax)


def test_arrays_without_tokens_get_positions_and_blank_tokens_a_visible_space():
    fig = plot_attention(np.eye(2)[None])
    ax = _images(fig)[0]
    assert _texts(ax.get_yticklabels()) == ["0", "1"] and ax.get_title() == "head 0"
    blank = plot_attention(np.eye(3), ["a", " ", "b"])
    assert _texts(blank.axes[0].get_xticklabels()) == ["a", "\u2423", "b"]


def test_attention_maps_of_a_classifier_plot(classifier, tmp_path):
    maps = classifier.attention_maps(["it was not very good and very bad"])[0]
    fig = plot_attention(maps, layer="all")
    assert len(_images(fig)) == 8 and _texts(_images(fig)[4].get_yticklabels()) == maps["tokens"]
    _assert_no_overlaps(fig, tmp_path / "classifier.png")


def test_attention_maps_of_an_embedder_plot(tmp_path):
    pytest.importorskip("tokenizers")
    pytest.importorskip("safetensors")
    from attnkit import TransformerEmbedder
    from tiny_bert import CONFIG, write_tiny_bert

    embedder = TransformerEmbedder(write_tiny_bert(tmp_path / "tiny-bert")).fit()
    maps = embedder.attention_maps(["the acting was not very good, but the plot was fun"])[0]
    fig = plot_attention(maps, layer=None)
    layers, heads = CONFIG["num_hidden_layers"], CONFIG["num_attention_heads"]
    assert len(_images(fig)) == layers * heads
    assert _texts(_images(fig)[-1].get_xticklabels())[:3] == ["[CLS]", "the", "acting"]
    _assert_no_overlaps(fig, tmp_path / "embedder.png")


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [((np.ones((2, 3)), ["a", "b"]), {}, r"a map of 2 x 3 needs \(row labels, column labels\)"),
     ((np.ones(3),), {}, "must have shape"),
     ((_maps(),), {"layer": 2}, r"layer must be in \[-2, 2\)"), ((_maps(),), {"head": 3}, r"head must be in \[-3, 3\)"),
     ((_maps(),), {"layer": "last"}, r"layer must be an int, 'all' or None, got 'last'"),
     ((_maps(),), {"head": "all"}, r"head must be an int or None, got 'all'"),
     ((_maps(),), {"head": True}, r"head must be an int or None, got True"),
     ((_maps(),), {"scale": "auto"}, r"scale must be one of \['fixed', 'shared', 'map', 'log'\], got 'auto'"),
     ((np.full((2, 2), np.nan),), {}, "attention weights must be finite"),
     ((np.full((2, 2), "0.5"),), {}, "attention weights must be numbers, got an array of dtype <U3"),
     ((np.ones((1, 0, 0)),), {}, r"must not be empty, got shape \(1, 0, 0\)"),
     ((np.eye(2), ["a"]), {}, "tokens has 1 labels for 2 rows"), (({"tokens": []},), {}, "a dict with 'weights'"),
     ((np.ones((2, 3)), (["a", "b"], ["c"])), {}, "tokens has 1 labels for 3 columns"),
     (({"source_tokens": [], "target_tokens": [], "cross": []},), {"part": "both"}, "part must be one of")],
)
def test_errors(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        plot_attention(*args, **kwargs)


def test_tokens_may_be_numbers_or_a_generator():
    # a pair of ints read as (row labels, column labels) ("'int' object is not iterable"); a generator was used up
    # by the rows ("tokens has 0 labels for 2 columns")
    fig = plot_attention(np.eye(2), tokens=(5, 6))
    assert _texts(_images(fig)[0].get_xticklabels()) == ["5", "6"]
    fig = plot_attention(np.eye(2), tokens=(t for t in "ab"))
    assert _texts(_images(fig)[0].get_yticklabels()) == ["a", "b"]


def test_missing_matplotlib_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r'needs matplotlib.*pip install "attnkit\[plot\]"'):
        plot_attention(np.eye(2))
    with pytest.raises(ImportError, match=r'needs matplotlib.*pip install "attnkit\[plot\]"'):
        plot_learning_curve(LogisticRegression())


def test_rectangular_maps_take_row_and_column_labels():
    fig = plot_attention(np.full((2, 3), 1 / 3), (["x", "y"], ["a", "b", "c"]))
    axis = fig.axes[0]
    assert _texts(axis.get_yticklabels()) == ["x", "y"]
    assert _texts(axis.get_xticklabels()) == ["a", "b", "c"]


def test_seq2seq_attention_maps_plot_every_part(tmp_path):
    from attnkit import Seq2SeqTransformer

    X = ["ab", "ba", "abc", "c ab"] * 5
    model = Seq2SeqTransformer(d_model=8, n_heads=2, encoder_layers=1, decoder_layers=2, max_iter=1,
                               early_stopping=False, random_state=0).fit(X, [x.upper() for x in X])
    maps = model.attention_maps(["abc ab"], ["ABC"])[0]
    source, target = ["a", "b", "c", "\u2423", "a", "b", "<eos>"], ["A", "B", "C", "<eos>"]
    cross = plot_attention(maps, head=0)  # rows: the target tokens, columns: the source tokens
    assert _texts(cross.axes[0].get_yticklabels()) == target and _texts(cross.axes[0].get_xticklabels()) == source
    grid = plot_attention(maps, layer="all")  # 2 decoder layers x 2 heads of 4 x 7 maps
    axes = _images(grid)
    assert [ax.get_title() for ax in axes] == ["layer 0, head 0", "layer 0, head 1", "layer 1, head 0",
                                               "layer 1, head 1"]
    assert axes[0].get_images()[0].get_array().shape == (4, 7) and _texts(axes[2].get_xticklabels()) == source
    _assert_no_overlaps(grid, tmp_path / "cross.png")
    assert len(plot_attention(maps, part="encoder").axes) == 3  # two heads and a colour bar
    decoder = plot_attention(maps, part="decoder", head=1)
    assert _texts(decoder.axes[0].get_xticklabels()) == target


# ----------------------------------------------------------------------------------- learning curve
@pytest.fixture(scope="module")
def classifier():
    from attnkit import TransformerClassifier
    from attnkit.datasets import make_negation_sentences

    X, y = make_negation_sentences(60, random_state=0)
    return TransformerClassifier(d_model=16, n_layers=2, n_heads=4, d_ff=32, max_iter=4, n_iter_no_change=4,
                                 validation_fraction=0.25, random_state=0).fit(X, y)


def _lines(fig):
    return {line.get_label(): line for ax in fig.axes for line in ax.get_lines()}


def test_learning_curve_of_a_fit_with_validation(classifier, tmp_path):
    fig = plot_learning_curve(classifier)
    ax, twin = fig.axes
    lines = _lines(fig)
    kept = f"kept weights (epoch {classifier.best_epoch_})"
    assert set(lines) == {"training loss", "validation loss", "validation accuracy", kept}
    np.testing.assert_array_equal(lines["training loss"].get_xdata(), [1, 2, 3, 4])
    np.testing.assert_array_equal(lines["training loss"].get_ydata(), classifier.loss_curve_)
    np.testing.assert_array_equal(lines["validation loss"].get_ydata(), classifier.validation_loss_curve_)
    np.testing.assert_array_equal(lines["validation accuracy"].get_ydata(), classifier.validation_scores_)
    assert list(lines[kept].get_xdata()) == [classifier.best_epoch_] * 2
    assert (ax.get_xlabel(), ax.get_ylabel(), twin.get_ylabel()) == ("epoch", "loss", "validation accuracy")
    assert _texts(ax.get_legend().get_texts()) == ["training loss", "validation loss", "validation accuracy", kept]
    _assert_no_overlaps(fig, tmp_path / "learning_curve.png")


def test_learning_curve_without_validation_and_after_partial_fit(tmp_path):
    from attnkit import TransformerClassifier

    X, y = ["good", "not good", "bad", "not bad"] * 4, [1, 0, 0, 1] * 4
    clf = TransformerClassifier(d_model=8, n_heads=2, d_ff=16, max_iter=3, early_stopping=False, random_state=0)
    fig = plot_learning_curve(clf.fit(X, y))
    assert len(fig.axes) == 1 and list(_lines(fig)) == ["training loss"]  # no score, no kept-epoch marker
    online = TransformerClassifier(d_model=8, n_heads=2, d_ff=16, random_state=0)
    for _ in range(3):
        online.partial_fit(X, y, classes=[0, 1])
    assert list(_lines(plot_learning_curve(online))["training loss"].get_xdata()) == [1, 2, 3]
    with pytest.warns(UserWarning, match="on 4 validation sample"):  # a plotting test: the data stays tiny
        clf.set_params(early_stopping=True, validation_fraction=0.25).fit(X, y)
    clf.partial_fit(X, y)
    with pytest.warns(UserWarning, match="validated on 3 of its 4 epochs .* drawn at epochs 1 to 3"):
        fig = plot_learning_curve(clf)
    lines = _lines(fig)
    assert list(lines["validation loss"].get_xdata()) == [1, 2, 3] and "kept weights (epoch 4)" in lines
    _assert_no_overlaps(fig, tmp_path / "partial_fit.png")


@pytest.mark.parametrize("epochs", [1, 2, 4, 30])
def test_learning_curve_ticks_whole_epochs(epochs):
    from attnkit import TransformerClassifier

    X, y = ["good", "not good", "bad", "not bad"] * 2, [1, 0, 0, 1] * 2
    clf = TransformerClassifier(d_model=8, n_heads=2, d_ff=16, max_iter=epochs, tol=0.0, n_iter_no_change=epochs,
                                early_stopping=False, random_state=0).fit(X, y)
    assert len(clf.loss_curve_) == epochs
    fig = plot_learning_curve(clf)
    fig.canvas.draw()
    ax = fig.axes[0]
    low, high = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if low <= t <= high]
    assert ticks and all(t == int(t) for t in ticks), ticks


def test_learning_curve_of_a_seq2seq_names_its_score_and_draws_into_a_given_axes():
    from attnkit import Seq2SeqTransformer

    X = ["ab", "ba", "abc", "cab"] * 3
    model = Seq2SeqTransformer(d_model=8, n_heads=2, encoder_layers=1, decoder_layers=1, max_iter=2,
                               early_stopping=True, validation_fraction=0.25, random_state=0)
    with pytest.warns(UserWarning, match="on 3 validation sample"):
        model.fit(X, [x.upper() for x in X])
    fig, ax = plt.subplots()
    assert plot_learning_curve(model, ax=ax) is fig
    assert fig.axes[1].get_ylabel() == "validation token accuracy"


def test_learning_curve_errors(tmp_path):
    from attnkit import TransformerClassifier

    with pytest.raises(NotFittedError):
        plot_learning_curve(TransformerClassifier())
    with pytest.raises(TypeError, match="LogisticRegression has no training history"):
        plot_learning_curve(LogisticRegression().fit([[0.0], [1.0]], [0, 1]))
    with pytest.raises(TypeError):
        plot_learning_curve("not an estimator")



def _mlp():
    """scikit-learn's MLPClassifier after three epochs: an estimator with a loss_curve_ of its own."""
    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return MLPClassifier(max_iter=3, random_state=0).fit([[0.0], [1.0]] * 4, [0, 1] * 4)


@pytest.mark.parametrize(("history", "match"), [
    ({"loss_curve_": []}, "loss_curve_ is empty: there is no epoch to draw"),
    ({"loss_curve_": [1.0, "a"]}, "loss_curve_ must be a sequence of numbers, one per epoch"),
    ({"loss_curve_": [[1.0, 0.5]]}, "loss_curve_ must be a sequence of numbers"),
    ({"loss_curve_": [1.0, 0.5], "validation_loss_curve_": [1.0, 0.9, 0.8]},
     "validation_loss_curve_ has 3 epochs, more than loss_curve_'s 2"),
    ({"loss_curve_": [1.0], "validation_scores_": [0.5, "b"]}, "validation_scores_ must be a sequence of numbers"),
])
def test_learning_curve_refuses_histories_it_cannot_draw(history, match):
    # Hand-made histories (any estimator with loss_curve_ is drawn) reached matplotlib's own errors, or were drawn
    # as categories (a string among the losses) or as nothing (an empty curve).
    model = _mlp()
    for name, value in history.items():
        setattr(model, name, value)
    with pytest.raises(ValueError, match=match):
        plot_learning_curve(model)


def test_learning_curve_reads_array_histories():
    model = _mlp()
    model.loss_curve_ = np.array(model.loss_curve_)
    fig = plot_learning_curve(model)
    assert fig.axes[0].get_lines()[0].get_ydata().tolist() == model.loss_curve_.tolist()
