"""attnkit.plotting: attention heat maps (skipped without matplotlib) and the message when it is missing."""

import doctest
import sys

import numpy as np
import pytest

from attnkit import plotting
from attnkit.plotting import plot_attention

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _maps(layers=2, heads=3, n=4):
    weights = np.random.default_rng(0).random((layers, heads, n, n))
    return {"tokens": ["<cls>", "not", "very", "good"][:n], "weights": weights / weights.sum(-1, keepdims=True)}


def test_docstring_example_runs():
    assert doctest.testmod(plotting).failed == 0


def test_one_map_per_head_with_token_labels():
    fig = plot_attention(_maps())
    maps = [ax for ax in fig.axes if ax.get_images()]
    assert len(maps) == 3 and len(fig.axes) == 4  # and the colour bar
    assert [t.get_text() for t in maps[0].get_xticklabels()] == ["<cls>", "not", "very", "good"]
    assert [ax.get_title() for ax in maps] == ["head 0", "head 1", "head 2"]
    np.testing.assert_array_equal(maps[1].get_images()[0].get_array(), _maps()["weights"][-1, 1])


def test_layer_and_head_selection_and_annotation():
    fig = plot_attention(_maps(), layer=0, head=-1, annotate=True)
    ax = next(ax for ax in fig.axes if ax.get_images())
    np.testing.assert_array_equal(ax.get_images()[0].get_array(), _maps()["weights"][0, 2])
    assert ax.get_title() == "head -1" and len(ax.texts) == 16


def test_draws_into_a_given_axes():
    fig, ax = plt.subplots()
    assert plot_attention(np.eye(3), ["a", "b", "c"], ax=ax) is fig
    assert ax.get_images()
    with pytest.raises(ValueError, match="ax can hold one map; give head="):
        plot_attention(_maps(), ax=ax)


def test_arrays_without_tokens_get_positions():
    fig = plot_attention(np.eye(2)[None])
    ax = next(ax for ax in fig.axes if ax.get_images())
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "1"]


def test_attention_maps_of_a_classifier_plot():
    from attnkit import TransformerClassifier

    clf = TransformerClassifier(d_model=8, n_heads=2, d_ff=16, max_iter=1, early_stopping=False, random_state=0)
    clf.fit(["good", "not good"], [1, 0])
    fig = plot_attention(clf.attention_maps(["not good"])[0])
    assert len([ax for ax in fig.axes if ax.get_images()]) == 2


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [((np.ones((2, 3)), ["a", "b"]), {}, r"a map of 2 x 3 needs \(row labels, column labels\)"),
     ((np.ones(3),), {}, "must have shape"),
     ((_maps(),), {"layer": 2}, r"layer must be in \[-2, 2\)"), ((_maps(),), {"head": 3}, r"head must be in \[-3, 3\)"),
     ((np.eye(2), ["a"]), {}, "tokens has 1 labels for 2 rows"), (({"tokens": []},), {}, "a dict with 'weights'"),
     ((np.ones((2, 3)), (["a", "b"], ["c"])), {}, "tokens has 1 labels for 3 columns"),
     (({"source_tokens": [], "target_tokens": [], "cross": []},), {"part": "both"}, "part must be one of")],
)
def test_errors(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        plot_attention(*args, **kwargs)


def test_missing_matplotlib_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r'needs matplotlib.*pip install "attnkit\[plot\]"'):
        plot_attention(np.eye(2))


def test_rectangular_maps_take_row_and_column_labels():
    fig = plot_attention(np.full((2, 3), 1 / 3), (["x", "y"], ["a", "b", "c"]))
    axis = fig.axes[0]
    assert [t.get_text() for t in axis.get_yticklabels()] == ["x", "y"]
    assert [t.get_text() for t in axis.get_xticklabels()] == ["a", "b", "c"]


def test_seq2seq_attention_maps_plot_every_part():
    from attnkit import Seq2SeqTransformer

    X = ["ab", "ba", "abc", "cab"] * 5
    model = Seq2SeqTransformer(d_model=8, n_heads=2, encoder_layers=1, decoder_layers=1, max_iter=1,
                               early_stopping=False, random_state=0).fit(X, [x.upper() for x in X])
    maps = model.attention_maps(["abc"], ["ABC"])[0]
    cross = plot_attention(maps, head=0)  # rows: "A", "B", "C", "<eos>"; columns: "a", "b", "c", "<eos>"
    assert [t.get_text() for t in cross.axes[0].get_yticklabels()] == ["A", "B", "C", "<eos>"]
    assert [t.get_text() for t in cross.axes[0].get_xticklabels()] == ["a", "b", "c", "<eos>"]
    assert len(plot_attention(maps, part="encoder").axes) == 3  # two heads and a colour bar
    decoder = plot_attention(maps, part="decoder", head=1)
    assert [t.get_text() for t in decoder.axes[0].get_xticklabels()] == ["A", "B", "C", "<eos>"]
