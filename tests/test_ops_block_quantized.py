"""ops.block_quantized_matmul and BlockQuantizedMatrix against the NumPy reference on every ISA: the
block formats decoded bit for bit (and as the gguf package decodes the real SmolLM2 file), the product
within float32 rounding, the same bits on 1 and 2 threads, NaN kept to its row, and the refusals."""

import doctest
import importlib
import importlib.util

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import attnkit
from attnkit import _core, ops, reference
from attnkit.ops.block_quantized import BLOCK_BYTES
from attnkit.testing.gguf import SMOLLM2_ABSENT, smollm2_file
from int8_variants import int8_variant, int8_variants

KINDS = sorted(BLOCK_BYTES)


@pytest.fixture
def threads():
    """Set attnkit's thread count inside a test; the previous count is restored afterwards."""
    previous = attnkit.get_num_threads()
    yield attnkit.set_num_threads
    attnkit.set_num_threads(previous)


def _weight(seed, n_in, n_out, scale=1.0):
    rng = np.random.default_rng(seed)
    # Columns of different scales and offsets, so that q4_1's m and both d's vary between blocks.
    return (scale * rng.standard_normal((n_in, n_out)) * rng.uniform(0.1, 3, n_out) + rng.normal(0, 1, n_out))


def _tolerance(x, w, bias=None):
    """1e-5 of sum |x| |W| (+ |bias|): float32 accumulation over n_in products, with room."""
    mag = np.abs(np.asarray(x, np.float64)) @ np.abs(reference.dequantize_blocks(w.kind, w.blocks, w.shape[0]))
    return 1e-5 * (mag + (0.0 if bias is None else np.abs(np.asarray(bias, np.float64)))) + 1e-30


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_error_is_within_half_a_step(kind):
    w = _weight(0, 256, 40)
    q = ops.quantize_blocks(w, kind)
    assert q.shape == (256, 40) and q.blocks.shape == (40, 256 // 32 * BLOCK_BYTES[kind])
    assert not q.blocks.flags.writeable and q.nbytes == q.blocks.nbytes
    back = q.dequantize()
    assert back.dtype == np.float32 and back.shape == (256, 40)
    blocks = w.T.reshape(40, 8, 32)
    if kind == "q8_0":
        step = np.abs(blocks).max(axis=-1) / 127
    else:
        step = (blocks.max(axis=-1) - blocks.min(axis=-1)) / 15
    # Half a step, plus the float16 rounding of d (times up to 127 or 15 steps) and of m.
    bound = step * (0.5 + 2.0**-11 * (127 if kind == "q8_0" else 15)) + (np.abs(blocks).max(axis=-1) * 2.0**-11)
    err = np.abs(back.astype(np.float64) - w).T.reshape(40, 8, 32).max(axis=-1)
    assert np.all(err <= bound * 1.0001 + 1e-7)


@pytest.mark.parametrize("kind", KINDS)
def test_constant_and_zero_blocks(kind):
    w = np.zeros((64, 3))
    w[:32, 1] = 0.75
    w[32:, 2] = -2.5
    back = ops.quantize_blocks(w, kind).dequantize()
    if kind == "q4_1":  # d = 0 and m = the value, exact in float16
        assert_array_equal(back, w.astype(np.float32))
    else:  # q = +-127 and d = |value| / 127, rounded to float16
        assert_array_equal(back == 0, w == 0)
        assert np.all(np.abs(back - w) <= 2.0**-11 * np.abs(w))


@given(kind=st.sampled_from(KINDS), blocks_per_row=st.integers(1, 20), n_out=st.integers(1, 40),
       seed=st.integers(0, 2**32 - 1))
def test_dequantize_and_rows_decode_bit_for_bit(isa, kind, blocks_per_row, n_out, seed):
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (n_out, blocks_per_row * BLOCK_BYTES[kind]), dtype=np.uint8)
    # Random float16 scales: keep them finite (exponent bits not all ones) but cover subnormals and signs.
    per_block = raw.reshape(n_out, blocks_per_row, BLOCK_BYTES[kind])
    for off in (0, 2) if kind == "q4_1" else (0,):
        per_block[..., off + 1] &= rng.choice(np.array([0x7B, 0x83, 0xFB], np.uint8), per_block.shape[:2])
    w = ops.BlockQuantizedMatrix.from_blocks(kind, raw, blocks_per_row * 32)
    expected = reference.dequantize_blocks(kind, raw, blocks_per_row * 32)
    assert_array_equal(w.dequantize(), expected)
    ids = rng.integers(0, n_out, (2, 5))
    rows = w.rows(ids)
    assert rows.shape == (2, 5, blocks_per_row * 32) and rows.dtype == np.float32
    assert_array_equal(rows, expected.T[ids])


def _layouts(x):
    """x (m, n) as a C array, a transposed view and a strided slice, each with the same values."""
    wide = np.zeros((x.shape[0], 2 * x.shape[1]), np.float32)
    wide[:, ::2] = x
    return {"C": x, "T view": np.asfortranarray(x), "strided": wide[:, ::2]}


@given(kind=st.sampled_from(KINDS), m=st.integers(1, 70), blocks_per_row=st.integers(1, 64),
       n_out=st.integers(1, 50), layout=st.sampled_from(("C", "T view", "strided")),
       with_bias=st.booleans(), with_out=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_matches_reference(isa, kind, m, blocks_per_row, n_out, layout, with_bias, with_out, seed):
    n_in = 32 * blocks_per_row
    rng = np.random.default_rng(seed)
    w = ops.quantize_blocks(_weight(seed, n_in, n_out), kind)
    x = _layouts(rng.standard_normal((m, n_in)).astype(np.float32))[layout]
    before = x.copy()
    bias = rng.standard_normal(n_out).astype(np.float32) if with_bias else None
    out = np.full((m, n_out), np.nan, np.float32) if with_out else None
    y = ops.block_quantized_matmul(x, w, bias=bias, out=out)
    if with_out:
        assert y is out
    expected = reference.block_quantized_matmul(x, w, bias=bias)
    assert y.dtype == np.float32 and y.shape == (m, n_out)
    assert np.all(np.abs(y - expected) <= _tolerance(x, w, bias))
    assert_array_equal(x, before)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("m", [5, 6, 7, 8, 9, 12, 13, 16, 17, 23, 24, 25, 31, 32, 33])
@pytest.mark.parametrize(("n_in", "n_out"), [(96, 70), (32, 1), (320, 13)])
def test_a_batched_decoding_step_gives_each_row_the_bits_it_has_alone(isa, kind, m, n_in, n_out):
    # Up to 32 rows (a step of batched decoding) run in tiles over dequantised groups of stored rows: sequences
    # decoded together get exactly what they get alone (1 row), so batching never changes a generation. Past
    # 32, the GEMM's rows are within the tolerance. Stored rows past the groups (n_out = 70, 1, 13) and
    # strips of every size are covered.
    w = ops.quantize_blocks(_weight(4, n_in, n_out), kind)
    x = np.random.default_rng(5).standard_normal((m, n_in)).astype(np.float32)
    together = ops.block_quantized_matmul(x, w)
    alone = np.concatenate([ops.block_quantized_matmul(x[i:i + 1], w) for i in range(m)])
    if m <= 32:
        assert_array_equal(together, alone)
    else:
        assert np.all(np.abs(together - alone) <= _tolerance(x, w))


@pytest.mark.parametrize("kind", KINDS)
def test_leading_dims_and_float16(kind):
    w = ops.quantize_blocks(_weight(1, 64, 7), kind)
    x = np.random.default_rng(2).standard_normal((2, 3, 64)).astype(np.float16)
    y = ops.block_quantized_matmul(x, w)
    assert y.shape == (2, 3, 7)
    flat = ops.block_quantized_matmul(x.reshape(6, 64).astype(np.float32), w)
    assert_array_equal(y.reshape(6, 7), flat)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("m", [1, 2, 4, 5, 64])
def test_bit_identical_for_1_and_2_threads(isa, threads, kind, m):
    # Large enough that both paths use two threads: > 1 MB of blocks, and > 2^24 multiply-adds.
    n_in, n_out = 576, 2048
    w = ops.quantize_blocks(_weight(3, n_in, n_out), kind)
    x = np.random.default_rng(4).standard_normal((m, n_in)).astype(np.float32)
    threads(1)
    expected = ops.block_quantized_matmul(x, w)
    rows = w.rows(np.arange(0, n_out, 3))
    threads(2)
    assert_array_equal(ops.block_quantized_matmul(x, w), expected)
    assert_array_equal(w.rows(np.arange(0, n_out, 3)), rows)
    assert np.all(np.abs(expected - reference.block_quantized_matmul(x, w)) <= _tolerance(x, w))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n_out", [513, 576, 1100])
def test_many_rows_over_several_panels(isa, kind, n_out):
    # More than 512 stored rows: the GEMM path (more rows of X than the strips take) cuts them into equal panels
    # (576 = 288 + 288).
    w = ops.quantize_blocks(_weight(9, 96, n_out), kind)
    x = np.random.default_rng(10).standard_normal((40, 96)).astype(np.float32)
    bias = np.linspace(-1, 1, n_out, dtype=np.float32)
    y = ops.block_quantized_matmul(x, w, bias=bias)
    assert np.all(np.abs(y - reference.block_quantized_matmul(x, w, bias=bias)) <= _tolerance(x, w, bias))


@pytest.mark.parametrize("kind", KINDS)
def test_rows_are_the_same_bits_on_every_isa(kind):
    w = ops.quantize_blocks(_weight(5, 320, 30), kind)
    previous = _core.get_isa()
    try:
        results = {}
        for isa in _core.available_isas():
            _core.set_isa(isa)
            results[isa] = w.dequantize()
    finally:
        _core.set_isa(previous)
    for isa, r in results.items():
        assert_array_equal(r, results[_core.available_isas()[0]], err_msg=isa)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("m", [1, 3, 9])
def test_nan_and_inf_stay_in_their_row(isa, kind, m):
    w = ops.quantize_blocks(_weight(6, 96, 11), kind)
    x = np.random.default_rng(7).standard_normal((m, 96)).astype(np.float32)
    x[0, 40] = np.nan
    x[m - 1, 5] = np.inf if m > 1 else np.nan
    y = ops.block_quantized_matmul(x, w)
    assert np.all(np.isnan(y[0]))
    assert not np.any(np.isfinite(y[m - 1]))
    assert np.all(np.isfinite(y[1:m - 1]))


# ---- int8 activations: llama.cpp's arithmetic. The codes of x are the reference's bit for bit (a code off by
# one would move a product by 1/127 of a block's largest term, far beyond the float32 tolerance below).

def _int8_tolerance(x, w, bias=None):
    """float32 accumulation of the exact products of the codes: 1e-5 of sum |x| |W| (codes * e within 1/254 of
    |x|), with room."""
    return 1.01 * _tolerance(x, w, bias) + 1e-37


@given(kind=st.sampled_from(KINDS), m=st.integers(1, 11), blocks_per_row=st.integers(1, 40),
       n_out=st.integers(1, 30), layout=st.sampled_from(("C", "T view", "strided")), with_bias=st.booleans(),
       scale=st.sampled_from((1e-30, 1e-3, 1.0, 1e4)), seed=st.integers(0, 2**32 - 1))
def test_int8_activations_match_the_reference(isa, kind, m, blocks_per_row, n_out, layout, with_bias, scale, seed):
    n_in = 32 * blocks_per_row
    rng = np.random.default_rng(seed)
    w = ops.quantize_blocks(_weight(seed, n_in, n_out), kind).with_activations("int8")
    x = rng.standard_normal((m, n_in)).astype(np.float32) * np.float32(scale)
    x[:, :32] *= rng.integers(0, 2)  # sometimes a block of zeros
    # Ties: values that land exactly on k + 1/2 codes (amax 127 makes the codes x itself).
    x[0, -32:] = rng.integers(-254, 255, 32) / np.float32(2)
    x[0, -1] = 127
    bias = rng.standard_normal(n_out).astype(np.float32) if with_bias else None
    y = ops.block_quantized_matmul(_layouts(x)[layout], w, bias=bias)
    assert y.dtype == np.float32
    assert np.all(np.abs(y - reference.block_quantized_matmul(x, w, bias=bias)) <= _int8_tolerance(x, w, bias))


@pytest.mark.parametrize("kind", KINDS)
def test_int8_activations_are_close_to_float32(kind):
    # Each block of x rounded to 1/254 of its largest value: the product stays within 0.2% of sum |x| |W|.
    w = ops.quantize_blocks(_weight(11, 576, 64), kind)
    x = np.random.default_rng(12).standard_normal((3, 576)).astype(np.float32)
    exact = reference.block_quantized_matmul(x, w)
    y = ops.block_quantized_matmul(x, w.with_activations("int8"))
    err = np.abs(y - exact) / (np.abs(x) @ np.abs(w.dequantize()))
    assert 0 < err.max() < 2e-3


def test_int8_codes_round_ties_to_even():
    x = np.zeros((1, 32), np.float32)
    x[0, :4] = [127.0, -127.0, 0.5, 1.5]  # amax 127: the codes are x itself, ties to even
    codes, scales = reference.block_quantized.quantize_activations(x)
    assert codes[0, 0, :4].tolist() == [127, -127, 0, 2] and scales[0, 0] == 1.0
    w = ops.quantize_blocks(np.eye(32)[:, :4] * 15, "q4_1").with_activations("int8")  # d = 1, m = 0: W = 15 I
    assert ops.block_quantized_matmul(x, w).tolist() == [[15 * 127.0, -15 * 127.0, 0.0, 15 * 2.0]]


@pytest.mark.parametrize("kind", KINDS)
def test_int8_activations_give_each_row_its_bits_at_any_row_count(isa, kind):
    # Packed blocks: every row the same operations whatever rows are beside it (a prompt read with others, a
    # sequence decoded in a shared step), through the tiles of MR rows and every remainder, and past 32 rows.
    w = ops.quantize_blocks(_weight(8, 160, 53), kind).with_activations("int8")
    x = np.random.default_rng(9).standard_normal((41, 160)).astype(np.float32)
    alone = np.concatenate([ops.block_quantized_matmul(x[i : i + 1], w) for i in range(41)])
    for m in (2, 3, 7, 8, 9, 16, 17, 33, 41):
        assert_array_equal(ops.block_quantized_matmul(x[:m], w), alone[:m], err_msg=f"m = {m}")


@pytest.mark.parametrize("kind", KINDS)
def test_int8_activations_pack_the_blocks_in_groups_of_16_columns(kind):
    w = ops.quantize_blocks(_weight(10, 64, 20), kind)
    assert w.packed is None
    packed = w.with_activations("int8").packed
    per_block = {"q4_1": 320, "q8_0": 608}[kind]
    assert packed.dtype == np.uint8 and packed.shape == (2 * 2 * per_block,) and not packed.flags.writeable
    # The first group's first block: quad q of column c at bytes 64 q + 4 c, then the 16 columns' d.
    raw = w.blocks.reshape(20, 2, -1)
    first = 4 if kind == "q4_1" else 2
    for q, c in [(0, 0), (1, 5), (3, 15)]:
        at = 64 * q + 4 * c
        assert packed[at : at + 4].tolist() == raw[c, 0, first + 4 * q : first + 4 * q + 4].tolist()
    d_at = 64 * (4 if kind == "q4_1" else 8)
    assert packed[d_at + 2 * 7 : d_at + 2 * 7 + 2].tolist() == raw[7, 0, 0:2].tolist()
    if kind == "q8_0":  # then -128 times the sum of each column's values, as int32
        sums = packed[d_at + 32 : d_at + 96].view("<i4")
        assert sums.tolist() == (-128 * raw[:16, 0, 2:].view(np.int8).astype(np.int64).sum(axis=1)).tolist()
    # The last group holds columns 16..19, then 12 columns of zeros (here the first quad's bytes 16..63).
    last = packed[2 * per_block :].reshape(2, per_block)
    assert last[:, :16].any() and not last[:, 16:64].any()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("m", [1, 4, 5, 64])
def test_int8_activations_same_bits_for_1_and_2_threads(isa, threads, kind, m):
    n_in, n_out = 576, 2048
    w = ops.quantize_blocks(_weight(3, n_in, n_out), kind).with_activations("int8")
    x = np.random.default_rng(4).standard_normal((m, n_in)).astype(np.float32)
    threads(1)
    expected = ops.block_quantized_matmul(x, w)
    threads(2)
    assert_array_equal(ops.block_quantized_matmul(x, w), expected)
    assert np.all(np.abs(expected - reference.block_quantized_matmul(x, w)) <= _int8_tolerance(x, w))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("m", [1, 5])
def test_int8_activations_same_bits_on_avx2_avx512_and_vnni(kind, m):
    # All run the same 256-bit lanes (a block is 32 bytes); VNNI sums each lane's four products in one
    # vpdpbusd where the others take pmaddubsw then pmaddwd, exactly either way. Baseline rounds a * b + c twice.
    variants = [v for v in int8_variants() if v[0] != "baseline"]
    if len(variants) < 2:
        pytest.skip(f"needs two of AVX2, AVX-512 and VNNI to compare; this machine has {_core.available_isas()}")
    w = ops.quantize_blocks(_weight(5, 320, 30), kind).with_activations("int8")
    x = np.random.default_rng(6).standard_normal((m, 320)).astype(np.float32)
    results = {}
    for isa, vnni in variants:
        with int8_variant(isa, vnni):
            results[isa, vnni] = ops.block_quantized_matmul(x, w)
    for variant, r in results.items():
        assert_array_equal(r, results[variants[0]], err_msg=str(variant))


@pytest.mark.parametrize("m", [1, 16])
def test_int8_q8_0_extreme_codes_are_exact_on_every_variant(m):
    # The largest products the int8 kernels meet: q8_0 codes -128 and 127 (a GGUF file may hold -128; quantize_blocks
    # never makes it) against activation codes -127 and 127, in every pairing of signs. Without VNNI, pmaddubsw
    # sums two such products into an s16: 2 x 128 x 127 = 32512 must not saturate. d = 1 and x in {-127, 127}
    # (each block's largest is 127: the codes are x) make every product an exact integer.
    n_in, n_out = 64, 32
    rng = np.random.default_rng(13)
    codes = rng.choice(np.array([-128, 127, -127, 0], np.int8), (n_out, n_in), p=[0.4, 0.3, 0.2, 0.1])
    codes[0], codes[1] = -128, 127  # whole columns of the largest magnitudes
    blocks = np.zeros((n_out, n_in // 32, 34), np.uint8)
    blocks[:, :, :2] = np.frombuffer(np.float16(1).tobytes(), np.uint8)
    blocks[:, :, 2:] = codes.reshape(n_out, n_in // 32, 32).view(np.uint8)
    w = ops.BlockQuantizedMatrix("q8_0", blocks.reshape(n_out, -1), (n_in, n_out)).with_activations("int8")
    x = rng.choice(np.array([-127, 127], np.float32), (m, n_in))
    x[0] = 127 * np.sign(codes[0] + 0.5)  # row 0: the sign of column 0's codes, all products +128 x 127
    exact = (x.astype(np.int64) @ codes.T.astype(np.int64)).astype(np.float32)  # |sum| < 2^24: exact in float32
    for isa, vnni in int8_variants():
        with int8_variant(isa, vnni):
            assert_array_equal(ops.block_quantized_matmul(x, w), exact, err_msg=f"{isa}, vnni={vnni}")


@pytest.mark.parametrize("kind", KINDS)
def test_int8_activations_nan_and_inf_reach_their_row_only(isa, kind):
    w = ops.quantize_blocks(_weight(6, 96, 11), kind).with_activations("int8")
    x = np.random.default_rng(7).standard_normal((3, 96)).astype(np.float32)
    x[0, 40], x[2, 5] = np.nan, -np.inf
    y = ops.block_quantized_matmul(x, w)
    assert np.all(np.isnan(y[0])) and np.all(np.isnan(y[2])) and np.all(np.isfinite(y[1]))


def test_with_activations_shares_the_blocks_and_checks_its_argument():
    w = ops.quantize_blocks(np.ones((64, 3)), "q8_0")
    v = w.with_activations("int8")
    assert v.blocks is w.blocks and v.activations == "int8" and w.activations == "float32"
    with pytest.raises(ValueError, match=r"activations must be one of \['float32', 'int8'\], got 'int4'"):
        w.with_activations("int4")


def test_zero_sizes():
    w = ops.quantize_blocks(np.zeros((32, 0)), "q4_1")
    assert ops.block_quantized_matmul(np.ones((3, 32), np.float32), w).shape == (3, 0)
    w = ops.quantize_blocks(np.ones((64, 5)), "q8_0")
    assert ops.block_quantized_matmul(np.ones((0, 64), np.float32), w).shape == (0, 5)
    assert w.rows([]).shape == (0, 64)
    empty = ops.BlockQuantizedMatrix.from_blocks("q8_0", np.zeros((4, 0), np.uint8), 0)
    assert_array_equal(ops.block_quantized_matmul(np.ones((2, 0), np.float32), empty, bias=np.arange(4.0)),
                       np.tile(np.arange(4, dtype=np.float32), (2, 1)))


def test_refusals():
    good = np.zeros((3, 40), np.uint8)
    with pytest.raises(ValueError, match=r"kind must be one of \['q4_1', 'q8_0'\], got 'q4_0'"):
        ops.BlockQuantizedMatrix.from_blocks("q4_0", good, 64)
    with pytest.raises(TypeError, match="dtype uint8, got int8"):
        ops.BlockQuantizedMatrix.from_blocks("q4_1", good.view(np.int8), 64)
    with pytest.raises(TypeError, match="numpy array"):
        ops.BlockQuantizedMatrix.from_blocks("q4_1", good.tolist(), 64)
    with pytest.raises(ValueError, match="2-D"):
        ops.BlockQuantizedMatrix.from_blocks("q4_1", good.ravel(), 64)
    with pytest.raises(ValueError, match="40 bytes per row for q4_1 with n_in = 64.*got 34"):
        ops.BlockQuantizedMatrix.from_blocks("q4_1", np.zeros((3, 34), np.uint8), 64)
    with pytest.raises(ValueError, match="multiple of 32"):
        ops.BlockQuantizedMatrix.from_blocks("q4_1", good, 48)
    with pytest.raises(ValueError, match="C-contiguous"):
        ops.BlockQuantizedMatrix.from_blocks("q4_1", np.zeros((3, 80), np.uint8)[:, ::2], 64)
    with pytest.raises(ValueError, match="multiple of 32 rows"):
        ops.quantize_blocks(np.ones((40, 2)), "q8_0")
    with pytest.raises(ValueError, match="finite"):
        ops.quantize_blocks(np.full((32, 2), np.nan), "q8_0")
    with pytest.raises(ValueError, match="kind must be one of"):
        ops.quantize_blocks(np.ones((32, 2)), "f16")
    w = ops.BlockQuantizedMatrix.from_blocks("q4_1", good, 64)
    with pytest.raises(ValueError, match=r"x must have shape \(..., n_in\) with n_in = 64.*got \(2, 63\)"):
        ops.block_quantized_matmul(np.ones((2, 63), np.float32), w)
    with pytest.raises(TypeError, match="x must be float32"):
        ops.block_quantized_matmul(np.ones((2, 64)), w)
    with pytest.raises(TypeError, match="float32 or float64"):
        ops.block_quantized_matmul(np.ones((2, 64), np.int32), w)
    with pytest.raises(ValueError, match=r"bias must have shape \(n_out,\) = \(3,\)"):
        ops.block_quantized_matmul(np.ones((2, 64), np.float32), w, bias=np.ones(4))
    with pytest.raises(ValueError, match="out must have shape"):
        ops.block_quantized_matmul(np.ones((2, 64), np.float32), w, out=np.empty((2, 4), np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        ops.block_quantized_matmul(np.ones((2, 64), np.float32), w, out=np.empty((3, 2), np.float32).T)
    with pytest.raises(TypeError, match="BlockQuantizedMatrix"):
        ops.block_quantized_matmul(np.ones((2, 64), np.float32), np.ones((64, 3)))
    with pytest.raises(ValueError, match=r"ids must be in \[0, 3\)"):
        w.rows([0, 3])
    with pytest.raises(ValueError, match=r"ids must be in \[0, 3\)"):
        w.rows([-1])
    with pytest.raises(TypeError, match="ids must be integers"):
        w.rows([0.5])


def test_blocks_are_used_in_place_never_copied(tmp_path):
    w = ops.quantize_blocks(_weight(8, 64, 6), "q4_1")
    path = tmp_path / "blocks.bin"
    w.blocks.tofile(path)
    mapped = np.memmap(path, dtype=np.uint8, mode="r", shape=w.blocks.shape)
    m = ops.BlockQuantizedMatrix.from_blocks("q4_1", mapped, 64)
    assert np.shares_memory(m.blocks, mapped)
    x = np.ones((1, 64), np.float32)
    assert_array_equal(ops.block_quantized_matmul(x, m), ops.block_quantized_matmul(x, w))
    writable = np.array(w.blocks)
    view = ops.BlockQuantizedMatrix.from_blocks("q4_1", writable, 64)
    assert np.shares_memory(view.blocks, writable) and not view.blocks.flags.writeable and writable.flags.writeable


def _smollm2_file():
    return smollm2_file() or pytest.skip(SMOLLM2_ABSENT)


@pytest.mark.parametrize("name", ["blk.0.attn_q.weight", "blk.3.ffn_down.weight", "token_embd.weight"])
def test_smollm2_tensors_dequantise_as_gguf_does(name):
    gguf = pytest.importorskip("gguf", reason="the gguf package reads the SmolLM2 file")
    reader = gguf.GGUFReader(_smollm2_file())
    tensor = next(t for t in reader.tensors if t.name == name)
    kind = tensor.tensor_type.name.lower()
    n_in, n_out = (int(s) for s in tensor.shape)
    w = ops.BlockQuantizedMatrix.from_blocks(kind, tensor.data, n_in)
    assert np.shares_memory(w.blocks, tensor.data) and w.shape == (n_in, n_out)
    expected = gguf.quants.dequantize(tensor.data, tensor.tensor_type)  # (n_out, n_in)
    ids = np.arange(n_out) if n_out <= 4096 else np.random.default_rng(0).integers(0, n_out, 4096)
    assert_array_equal(w.rows(ids), expected[ids])
    x = np.random.default_rng(1).standard_normal((2, n_in)).astype(np.float32)
    if n_out <= 4096:
        assert np.all(np.abs(ops.block_quantized_matmul(x, w) - x.astype(np.float64) @ expected.T.astype(np.float64))
                      <= _tolerance(x, w))


def test_docstring_examples():
    module = importlib.import_module("attnkit.ops.block_quantized")
    failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert failures == 0


@pytest.mark.parametrize("kind", ["q8_0", "q4_1"])
@pytest.mark.parametrize("m", [1, 3, 40])
def test_out_may_be_x_or_overlap_it(isa, kind, m):
    rng = np.random.default_rng(5)
    w = ops.quantize_blocks(rng.standard_normal((64, 64)).astype(np.float32), kind)
    x = rng.standard_normal((m + 1, 64)).astype(np.float32)
    bias = rng.standard_normal(64).astype(np.float32)
    want = ops.block_quantized_matmul(x[:m].copy(), w)
    same = x[:m].copy()
    assert ops.block_quantized_matmul(same, w, out=same) is same  # in place: read from a copy first
    assert_array_equal(same, want)
    shifted = x.copy()
    assert_array_equal(ops.block_quantized_matmul(shifted[:m], w, out=shifted[1:]), want)
    with_bias = ops.block_quantized_matmul(x[:m].copy(), w, bias=bias)
    room = np.zeros((m, 64), np.float32)
    room[0] = bias  # the bias is out's first row
    assert_array_equal(ops.block_quantized_matmul(x[:m], w, bias=room[0], out=room), with_bias)


def test_a_matrix_built_directly_is_checked_when_built():
    # It was accepted, then failed inside a product with a message about an out never passed.
    w = ops.quantize_blocks(np.ones((64, 8), np.float32), "q8_0")
    cases = [(("q9", w.blocks, (64, 8)), ValueError, "kind must be one of"),
             (("q8_0", w.blocks, (-1, 0)), ValueError, r"shape must be \(n_in, n_out\)"),
             (("q8_0", w.blocks, (64, 9)), ValueError, "one row per output column, n_out = 9, got 8"),
             (("q8_0", w.blocks, (32, 8)), ValueError, "34 bytes per row"),
             (("q8_0", w.blocks.astype(np.float32), (64, 8)), TypeError, "dtype uint8"),
             (("q8_0", w.blocks[:, ::-1], (64, 8)), ValueError, "C-contiguous")]
    for args, error, match in cases:
        with pytest.raises(error, match=match):
            ops.BlockQuantizedMatrix(*args)
    assert ops.BlockQuantizedMatrix("q8_0", w.blocks, (64, 8)).shape == (64, 8)
