"""attnkit.pretrained.rules: rename (and transpose), split a fused tensor, permute rows; checked on small
arrays, each against the layout it stands for."""

import numpy as np
import pytest

from attnkit.pretrained.rotary_rows import half_to_interleaved, interleaved_to_half
from attnkit.pretrained.rules import PermuteRows, Rename, Split


def _arange(*shape):
    return np.arange(np.prod(shape), dtype=np.float64).reshape(shape)


def test_rename_keeps_or_transposes_as_contiguous_float32():
    value = _arange(2, 3).astype(np.float16)
    assert Rename("a", (2, 3)).targets == ("a",)
    kept, = Rename("a", (2, 3)).apply(value).values()
    turned = Rename("b", (2, 3), transpose=True).apply(value)["b"]
    np.testing.assert_array_equal(kept, value)
    np.testing.assert_array_equal(turned, value.T)
    assert all(w.dtype == np.float32 and w.flags.c_contiguous for w in (kept, turned))


def test_split_cuts_gpt2s_fused_qkv_into_three():
    # GPT-2's Conv1D is x @ W with W (in, out): c_attn.weight (d, 3d) is [Wq | Wk | Wv] side by side.
    d, rng = 4, np.random.default_rng(0)
    wq, wk, wv = (rng.standard_normal((d, d)) for _ in range(3))
    bq, bk, bv = (rng.standard_normal(d) for _ in range(3))
    weight = Split(("wq", "wk", "wv"), (d, 3 * d), axis=1).apply(np.concatenate([wq, wk, wv], axis=1))
    bias = Split(("bq", "bk", "bv"), (3 * d,), axis=0).apply(np.concatenate([bq, bk, bv]))
    for name, expected in {"wq": wq, "wk": wk, "wv": wv}.items():
        np.testing.assert_array_equal(weight[name], expected.astype(np.float32))
        assert weight[name].flags.c_contiguous
    x = rng.standard_normal((2, d))
    fused = x @ np.concatenate([wq, wk, wv], axis=1) + np.concatenate([bq, bk, bv])
    for i, short in enumerate("qkv"):  # each part computes its third of the fused projection
        np.testing.assert_allclose(x @ weight[f"w{short}"] + bias[f"b{short}"], fused[:, i * d:(i + 1) * d],
                                   rtol=1e-6, atol=1e-6)


def test_split_of_an_out_in_weight_transposes_each_part():
    value = _arange(6, 2)  # (3 * out, in), as a fused Hugging Face Linear stores it
    parts = Split(("q", "k", "v"), (6, 2), axis=0, transpose=True).apply(value)
    np.testing.assert_array_equal(parts["k"], value[2:4].T)
    assert parts["k"].flags.c_contiguous


@pytest.mark.parametrize(("targets", "shape", "axis"), [(("q", "k", "v"), (4, 10), 1), (("q",), (4, 4), 0),
                                                       (("q", "q"), (4, 4), 0), (("q", "k"), (4, 4), 2)])
def test_a_split_that_cannot_be_made_is_refused(targets, shape, axis):
    with pytest.raises(ValueError, match="Split"):
        Split(targets, shape, axis=axis)


def test_permute_rows_reorders_then_transposes():
    value = _arange(4, 3)
    rows = np.array([2, 0, 3, 1])
    np.testing.assert_array_equal(PermuteRows("w", (4, 3), rows).apply(value)["w"], value[rows])
    np.testing.assert_array_equal(PermuteRows("w", (4, 3), rows, transpose=True).apply(value)["w"], value[rows].T)
    for bad in ([0, 1, 2], [0, 0, 1, 2], [1, 2, 3, 4]):
        with pytest.raises(ValueError, match=r"needs a permutation of its \(4,\) rows"):
            PermuteRows("w", (4, 3), np.array(bad))


@pytest.mark.parametrize(("n_heads", "head_dim"), [(1, 2), (1, 8), (3, 4), (4, 16)])
def test_the_rotary_permutations_are_inverses(n_heads, head_dim):
    to_half, to_interleaved = interleaved_to_half(n_heads, head_dim), half_to_interleaved(n_heads, head_dim)
    identity = np.arange(n_heads * head_dim)
    np.testing.assert_array_equal(to_half[to_interleaved], identity)
    np.testing.assert_array_equal(to_interleaved[to_half], identity)
    np.testing.assert_array_equal(np.argsort(to_half), to_interleaved)
    value = _arange(n_heads * head_dim, 3)
    np.testing.assert_array_equal(value[to_interleaved][to_half], value)


@pytest.mark.parametrize(("n_heads", "head_dim"), [(1, 8), (3, 4), (2, 6)])
def test_the_rotary_permutations_move_pairs_between_the_layouts(n_heads, head_dim):
    x = _arange(n_heads * head_dim)
    half = head_dim // 2
    y = x[interleaved_to_half(n_heads, head_dim)]
    for h in range(n_heads):
        xs, ys = x[h * head_dim:(h + 1) * head_dim], y[h * head_dim:(h + 1) * head_dim]
        for i in range(half):
            assert (ys[i], ys[i + half]) == (xs[2 * i], xs[2 * i + 1])  # rows stay within their head
    # llama.cpp's convert_hf_to_gguf.py, LlamaModel.permute: rotate-half (Hugging Face) -> interleaved (GGUF).
    weight = _arange(n_heads * head_dim, 5)
    llama_cpp = weight.reshape(n_heads, 2, half, 5).swapaxes(1, 2).reshape(weight.shape)
    np.testing.assert_array_equal(weight[half_to_interleaved(n_heads, head_dim)], llama_cpp)
    np.testing.assert_array_equal(llama_cpp[interleaved_to_half(n_heads, head_dim)], weight)


def _rotate(x, position, pairs):
    """Rotary positions on one head's features: pair ``(a, b)`` of ``pairs`` turned by ``position * theta_i``."""
    out = x.copy()
    for i, (a, b) in enumerate(pairs):
        angle = position * 10000.0 ** (-2 * i / len(x))
        out[a], out[b] = x[a] * np.cos(angle) - x[b] * np.sin(angle), x[a] * np.sin(angle) + x[b] * np.cos(angle)
    return out


def test_rotating_interleaved_pairs_equals_rotating_halves_of_the_permuted_rows():
    # What the permutation is for: a GGUF's Q row order under interleaved rotary gives, once permuted,
    # the same rotated features as the rotate-half layout (so the same attention scores).
    head_dim, rng = 8, np.random.default_rng(1)
    half = head_dim // 2
    x = rng.standard_normal(head_dim)
    rows = interleaved_to_half(1, head_dim)
    interleaved = _rotate(x, 5, [(2 * i, 2 * i + 1) for i in range(half)])
    halves = _rotate(x[rows], 5, [(i, i + half) for i in range(half)])
    np.testing.assert_allclose(halves, interleaved[rows], rtol=1e-12, atol=1e-12)


def test_rotary_rows_of_heads_rotary_positions_cannot_turn_are_refused():
    for n_heads, head_dim in ((0, 4), (2, 3), (2, 0)):
        with pytest.raises(ValueError, match="even head_dim"):
            interleaved_to_half(n_heads, head_dim)
        with pytest.raises(ValueError, match="even head_dim"):
            half_to_interleaved(n_heads, head_dim)
