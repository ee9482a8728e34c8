"""ops.decoding_plan: a plan's steps against a float64 NumPy step built from attnkit.reference (every ISA, 1 and
2 kernel threads; float32 and block-quantised weights, LayerNorm/RMSNorm, every activation, rotary positions,
grouped-query attention, biases or none), its key/value writes, the bits of one thread from a team of threads
(plans large enough to run a step as one parallel region), and its argument errors."""

import numpy as np
import pytest

from attnkit import ops, reference

D, HEADS, KV_HEADS, FF = 64, 4, 2, 64
DH = D // HEADS


def _weight(rng, n_in, n_out, kind):
    w = (rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)
    return w if kind is None else ops.quantize_blocks(w, kind)


def _layer(rng, *, norm, activation, bias, kind, d=D, heads=HEADS, kv_heads=KV_HEADS, ff=FF):
    dh = d // heads

    def vec(n, scale=0.1, offset=0.0):
        return (offset + scale * rng.standard_normal(n)).astype(np.float32)

    def b(n):
        return vec(n) if bias else None

    def norm_params():
        return vec(d, offset=1.0), (vec(d) if norm == "layer" else None)

    hidden = 2 * ff if activation == "swiglu" else ff
    return ops.DecodingPlanLayer(norm_params(), norm_params(), _weight(rng, d, heads * dh, kind), b(heads * dh),
                                 _weight(rng, d, kv_heads * dh, kind), b(kv_heads * dh),
                                 _weight(rng, d, kv_heads * dh, kind), b(kv_heads * dh),
                                 _weight(rng, heads * dh, d, kind), b(d), _weight(rng, d, hidden, kind), b(hidden),
                                 _weight(rng, ff, d, kind), b(d))


def _product(x, w, bias):
    if isinstance(w, ops.BlockQuantizedMatrix):
        return reference.block_quantized_matmul(x, w, bias=bias)
    y = x @ w.astype(np.float64)
    return y if bias is None else y + bias


def _norm(x, params, eps):
    gamma, beta = params
    return reference.rms_norm(x, gamma, eps) if beta is None else reference.layer_norm(x, gamma, beta, eps)


def _reference_step(layers, final, x, position, keys, values, *, eps, activation, rotary_base, heads=HEADS,
                    kv_heads=KV_HEADS):
    """The stack's output for x (B, D) at ``position`` in float64; keys and values (B, Hkv, >= position + 1, dh)
    get the new position's entries."""
    x = x.astype(np.float64)
    batch = x.shape[0]
    dh = x.shape[1] // heads
    for layer, k_buf, v_buf in zip(layers, keys, values):
        n = _norm(x, layer.norm1, eps)
        q = _product(n, layer.wq, layer.bq).reshape(batch, heads, 1, dh)
        k = _product(n, layer.wk, layer.bk).reshape(batch, kv_heads, 1, dh)
        v = _product(n, layer.wv, layer.bv).reshape(batch, kv_heads, 1, dh)
        if rotary_base is not None:
            q = reference.rotary_positions(q, start=position, base=rotary_base)
            k = reference.rotary_positions(k, start=position, base=rotary_base)
        k_buf[:, :, position] = k[:, :, 0]
        v_buf[:, :, position] = v[:, :, 0]
        group = heads // kv_heads
        keys_seen = np.repeat(k_buf[:, :, : position + 1].astype(np.float64), group, axis=1)
        values_seen = np.repeat(v_buf[:, :, : position + 1].astype(np.float64), group, axis=1)
        attended = reference.scaled_dot_product_attention(q, keys_seen, values_seen)
        x = x + _product(attended.reshape(batch, heads * dh), layer.wo, layer.bo)
        h = _product(_norm(x, layer.norm2, eps), layer.w1, layer.b1)
        if activation == "swiglu":
            gate, up = np.split(h, 2, axis=-1)
            a = gate / (1.0 + np.exp(-gate)) * up
        elif activation == "relu":
            a = np.maximum(h, 0.0)
        else:
            a = reference.gelu(h, approximate="tanh" if activation == "gelu_tanh" else "none")
        x = x + _product(a, layer.w2, layer.b2)
    return _norm(x, final, eps)


CASES = [("layer", "gelu_tanh", True, None, None), ("layer", "gelu", True, None, None),
         ("rms", "relu", False, None, None), ("rms", "swiglu", False, None, 100.0),
         ("rms", "swiglu", False, "q4_1", 1e5), ("layer", "gelu_tanh", True, "q8_0", 1e4)]


@pytest.mark.parametrize(("norm", "activation", "bias", "kind", "rotary_base"), CASES)
@pytest.mark.parametrize("batch", [1, 3])
def test_steps_equal_the_reference(isa, kernel_threads, norm, activation, bias, kind, rotary_base, batch):
    rng = np.random.default_rng(0)
    layers = [_layer(rng, norm=norm, activation=activation, bias=bias, kind=kind) for _ in range(2)]
    final = (np.ones(D, np.float32), np.zeros(D, np.float32) if norm == "layer" else None)
    eps = 1e-5
    plan = ops.DecodingPlan(layers, final, n_heads=HEADS, n_kv_heads=KV_HEADS, norm=norm, eps=eps,
                            activation=activation, rotary_base=rotary_base)
    assert (plan.d_model, plan.d_head, plan.d_ff, plan.n_layers) == (D, DH, FF, 2)
    capacity = 8
    keys = [np.zeros((batch, KV_HEADS, capacity, DH), np.float32) for _ in layers]
    values = [np.zeros_like(k) for k in keys]
    ref_keys, ref_values = [k.copy() for k in keys], [v.copy() for v in values]
    for position in range(6):
        x = rng.standard_normal((batch, D)).astype(np.float32)
        out = plan.step(x, position, keys, values)
        expected = _reference_step(layers, final, x, position, ref_keys, ref_values, eps=eps, activation=activation,
                                   rotary_base=rotary_base)
        assert out.dtype == np.float32 and out.shape == (batch, D)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
        for got, want in zip(keys + values, ref_keys + ref_values):
            np.testing.assert_allclose(got[:, :, : position + 1], want[:, :, : position + 1], rtol=1e-5, atol=1e-5)
        for k in keys:  # nothing beyond the new position is written
            assert not k[:, :, position + 1 :].any()


@pytest.mark.parametrize(("norm", "activation", "bias", "kind", "rotary_base"), CASES)
def test_rows_at_their_own_positions_equal_the_reference(isa, kernel_threads, norm, activation, bias, kind,
                                                         rotary_base):
    """A batch whose rows are at different positions (prompts of different lengths decoded together): each row
    is turned at, written at and attends up to its own position."""
    rng = np.random.default_rng(3)
    layers = [_layer(rng, norm=norm, activation=activation, bias=bias, kind=kind) for _ in range(2)]
    final = (np.ones(D, np.float32), np.zeros(D, np.float32) if norm == "layer" else None)
    plan = ops.DecodingPlan(layers, final, n_heads=HEADS, n_kv_heads=KV_HEADS, norm=norm, eps=1e-5,
                            activation=activation, rotary_base=rotary_base)
    lengths = np.array([2, 0, 5, 2])  # positions filled before (two rows alike, one empty)
    keys = [rng.standard_normal((4, KV_HEADS, 9, DH)).astype(np.float32) for _ in layers]
    values = [rng.standard_normal(k.shape).astype(np.float32) for k in keys]
    ref_keys, ref_values = [k.copy() for k in keys], [v.copy() for v in values]
    for step in range(3):
        positions = lengths + step
        x = rng.standard_normal((4, D)).astype(np.float32)
        out = plan.step(x, positions, keys, values)
        for b, position in enumerate(positions):
            expected = _reference_step(layers, final, x[b : b + 1], position, [k[b : b + 1] for k in ref_keys],
                                       [v[b : b + 1] for v in ref_values], eps=1e-5, activation=activation,
                                       rotary_base=rotary_base)
            np.testing.assert_allclose(out[b : b + 1], expected, rtol=1e-4, atol=1e-4)
        for got, want in zip(keys + values, ref_keys + ref_values):  # written at each row's position, only there
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("heads", "kv_heads", "dh"), [(6, 2, 24), (2, 1, 136), (3, 3, 8)])
def test_attention_over_many_positions_and_head_widths(isa, kernel_threads, heads, kv_heads, dh):
    """Rows at up to 45 positions (past the kernel's blocks of 32 keys and its vector widths) with head widths
    that are not a multiple of the vector width, or wider than its accumulators (136 > 8 x 16 lanes), and
    groups of 3, 2 and 1 query heads per key/value head."""
    rng = np.random.default_rng(11)
    d = heads * dh
    layers = [_layer(rng, norm="rms", activation="swiglu", bias=False, kind=None, d=d, heads=heads,
                     kv_heads=kv_heads, ff=32)]
    final = (np.ones(d, np.float32), None)
    plan = ops.DecodingPlan(layers, final, n_heads=heads, n_kv_heads=kv_heads, norm="rms", eps=1e-5,
                            activation="swiglu", rotary_base=1e4)
    lengths = np.array([44, 0, 31, 32, 17])
    keys = [rng.standard_normal((5, kv_heads, 46, dh)).astype(np.float32)]
    values = [rng.standard_normal(keys[0].shape).astype(np.float32)]
    ref_keys, ref_values = [keys[0].copy()], [values[0].copy()]
    for step in range(2):
        positions = lengths + step
        x = rng.standard_normal((5, d)).astype(np.float32)
        out = plan.step(x, positions, keys, values)
        for b, position in enumerate(positions):
            expected = _reference_step(layers, final, x[b : b + 1], position, [ref_keys[0][b : b + 1]],
                                       [ref_values[0][b : b + 1]], eps=1e-5, activation="swiglu", rotary_base=1e4,
                                       heads=heads, kv_heads=kv_heads)
            np.testing.assert_allclose(out[b : b + 1], expected, rtol=1e-4, atol=1e-4)


# A plan past the size where a step runs as one parallel region of threads (src/thread_team.h):
# 9.4-12.6 MB of float32 weights a step, 1.5-3.3 MB in blocks.
BIG_D, BIG_HEADS, BIG_KV_HEADS, BIG_FF = 512, 8, 4, 1536


def _big_plan(rng, *, norm, activation, bias, kind, int8=False):
    layers = [_layer(rng, norm=norm, activation=activation, bias=bias, kind=kind, d=BIG_D, heads=BIG_HEADS,
                     kv_heads=BIG_KV_HEADS, ff=BIG_FF) for _ in range(2)]
    if int8:
        layers = [layer._replace(**{f: getattr(layer, f).with_activations("int8")
                                    for f in ("wq", "wk", "wv", "wo", "w1", "w2")}) for layer in layers]
    final = (np.ones(BIG_D, np.float32), np.zeros(BIG_D, np.float32) if norm == "layer" else None)
    return ops.DecodingPlan(layers, final, n_heads=BIG_HEADS, n_kv_heads=BIG_KV_HEADS, norm=norm, eps=1e-5,
                            activation=activation, rotary_base=1e4)


def _run_big(plan, xs):
    keys = [np.zeros((xs.shape[1], BIG_KV_HEADS, 8, BIG_D // BIG_HEADS), np.float32) for _ in range(plan.n_layers)]
    values = [np.zeros_like(k) for k in keys]
    return [plan.step(x, position, keys, values) for position, x in enumerate(xs)] + keys + values


@pytest.mark.parametrize(("norm", "activation", "bias", "kind", "int8"),
                         [("layer", "gelu_tanh", True, None, False), ("rms", "swiglu", False, None, False),
                          ("rms", "swiglu", False, "q4_1", False), ("rms", "swiglu", False, "q4_1", True),
                          ("layer", "relu", True, "q8_0", True), ("layer", "gelu", True, "q8_0", False)])
@pytest.mark.parametrize("batch", [1, 5])
def test_a_team_of_threads_gives_one_threads_bits(isa, norm, activation, bias, kind, int8, batch):
    """With 2 and 3 threads (more than some machines' cores, and shares of unequal size), a step's outputs and
    cache writes have the bits of one thread, at every position."""
    import attnkit

    rng = np.random.default_rng(5)
    plan = _big_plan(rng, norm=norm, activation=activation, bias=bias, kind=kind, int8=int8)
    xs = rng.standard_normal((5, batch, BIG_D)).astype(np.float32)
    before = attnkit.get_num_threads()
    try:
        attnkit.set_num_threads(1)
        alone = _run_big(plan, xs)
        for threads in (2, 3):
            attnkit.set_num_threads(threads)
            for got, want in zip(_run_big(plan, xs), alone):
                np.testing.assert_array_equal(got, want)
    finally:
        attnkit.set_num_threads(before)
    assert np.isfinite(alone[4]).all() and alone[4].std() > 0.5


@pytest.mark.parametrize(("kind", "int8"), [(None, False), ("q4_1", False), ("q4_1", True), ("q8_0", False),
                                           ("q8_0", True)])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_row_gets_the_bits_it_gets_alone(isa, kind, int8, threads):
    """A row of a batch at mixed positions has the output and cache entries of the same row stepped alone (what
    lets a server decode prompts of different lengths together and answer each as if alone)."""
    import attnkit

    rng = np.random.default_rng(6)
    plan = _big_plan(rng, norm="rms", activation="swiglu", bias=False, kind=kind, int8=int8)
    positions = np.array([3, 0, 3, 6, 1])
    shape = (5, BIG_KV_HEADS, 8, BIG_D // BIG_HEADS)
    keys = [rng.standard_normal(shape).astype(np.float32) for _ in range(plan.n_layers)]
    values = [rng.standard_normal(shape).astype(np.float32) for _ in range(plan.n_layers)]
    x = rng.standard_normal((5, BIG_D)).astype(np.float32)
    before = attnkit.get_num_threads()
    try:
        attnkit.set_num_threads(threads)
        alone = []  # each row's output and cache buffers, stepped alone
        for b in range(5):
            row_keys, row_values = [k[b : b + 1].copy() for k in keys], [v[b : b + 1].copy() for v in values]
            alone.append([plan.step(x[b : b + 1], int(positions[b]), row_keys, row_values)] + row_keys + row_values)
        out = plan.step(x, positions, keys, values)
    finally:
        attnkit.set_num_threads(before)
    for b in range(5):
        np.testing.assert_array_equal(out[b : b + 1], alone[b][0])
        for got, want in zip(keys + values, alone[b][1:]):
            np.testing.assert_array_equal(got[b : b + 1], want)


@pytest.mark.parametrize(("kind", "int8"), [(None, False), ("q4_1", False), ("q4_1", True), ("q8_0", True)])
def test_a_plan_of_packed_weights_steps_many_rows_with_each_rows_bits(isa, kind, int8):
    """Int8 inputs from packed blocks (plan.packed): past the 32 rows where float32 inputs' products change their
    last bits, each of 40 rows at mixed positions still has its output alone."""
    rng = np.random.default_rng(7)
    plan = _big_plan(rng, norm="rms", activation="swiglu", bias=False, kind=kind, int8=int8)
    assert plan.packed == int8
    positions = rng.integers(0, 6, 40)
    shape = (40, BIG_KV_HEADS, 8, BIG_D // BIG_HEADS)
    keys = [rng.standard_normal(shape).astype(np.float32) for _ in range(plan.n_layers)]
    values = [rng.standard_normal(shape).astype(np.float32) for _ in range(plan.n_layers)]
    x = rng.standard_normal((40, BIG_D)).astype(np.float32)
    alone = [plan.step(x[b : b + 1], int(positions[b]), [k[b : b + 1].copy() for k in keys],
                       [v[b : b + 1].copy() for v in values]) for b in range(40)]
    out = plan.step(x, positions, keys, values)
    if int8:
        np.testing.assert_array_equal(out, np.concatenate(alone))
    else:  # the GEMM's rounding: close, not the same bits
        np.testing.assert_allclose(out, np.concatenate(alone), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("kind", "int8"), [(None, False), ("q4_1", False), ("q4_1", True), ("q8_0", False)])
@pytest.mark.parametrize("threads", [1, 2])
def test_rows_of_one_sequence_read_a_prompt_with_the_bits_of_steps(isa, kind, int8, threads):
    """Rows mapped to cache sequences (``sequences``) at consecutive positions read prompts in one step, after
    what a sequence holds already: each row gets the output and cache entries of stepping its tokens one at a
    time (what lets generation read short prompts, and decode beside them, in one plan step)."""
    import attnkit

    rng = np.random.default_rng(7)
    plan = _big_plan(rng, norm="rms", activation="swiglu", bias=False, kind=kind, int8=int8)
    shape = (3, BIG_KV_HEADS, 12, BIG_D // BIG_HEADS)
    keys = [rng.standard_normal(shape).astype(np.float32) for _ in range(plan.n_layers)]
    values = [rng.standard_normal(shape).astype(np.float32) for _ in range(plan.n_layers)]
    # sequence 0: a prompt of 4 from empty; 1: one token after 5 held; 2: 3 tokens after 2, rows interleaved
    sequences = np.array([0, 2, 0, 1, 2, 0, 2, 0])
    positions = np.array([0, 2, 1, 5, 3, 2, 4, 3])
    x = rng.standard_normal((8, BIG_D)).astype(np.float32)
    steps_keys, steps_values = [k.copy() for k in keys], [v.copy() for v in values]
    before = attnkit.get_num_threads()
    try:
        attnkit.set_num_threads(threads)
        by_steps = np.empty((8, BIG_D), np.float32)
        for b in np.lexsort((positions, sequences)):  # each sequence's tokens in order, one step each
            s = sequences[b]
            row_keys, row_values = [k[s : s + 1] for k in steps_keys], [v[s : s + 1] for v in steps_values]
            by_steps[b] = plan.step(x[b : b + 1], int(positions[b]), row_keys, row_values)[0]
        out = plan.step(x, positions, keys, values, sequences=sequences)
    finally:
        attnkit.set_num_threads(before)
    np.testing.assert_array_equal(out, by_steps)
    for got, want in zip(keys + values, steps_keys + steps_values):
        np.testing.assert_array_equal(got, want)


def test_teams_of_several_python_threads_at_once():
    """Two plans stepped by four Python threads at once, each step a team of 2 kernel threads: more threads than
    cores, so members wait asleep and plans fall back to one thread; no hang, and the bits of serial calls."""
    from concurrent.futures import ThreadPoolExecutor

    import attnkit

    rng = np.random.default_rng(6)
    plans = [_big_plan(rng, norm="rms", activation="swiglu", bias=False, kind=kind) for kind in ("q4_1", None)]
    inputs = [rng.standard_normal((6, 1 + i % 2, BIG_D)).astype(np.float32) for i in range(8)]
    before = attnkit.get_num_threads()
    try:
        attnkit.set_num_threads(2)
        alone = [_run_big(plans[i % 2], x) for i, x in enumerate(inputs)]
        with ThreadPoolExecutor(4) as pool:
            together = list(pool.map(lambda i: _run_big(plans[i % 2], inputs[i]), range(len(inputs))))
    finally:
        attnkit.set_num_threads(before)
    for a, b in zip(alone, together):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_errors():
    rng = np.random.default_rng(1)
    layer = _layer(rng, norm="rms", activation="swiglu", bias=False, kind=None)
    final = (np.ones(D, np.float32), None)
    kw = dict(n_heads=HEADS, n_kv_heads=KV_HEADS, norm="rms", eps=1e-6, activation="swiglu")
    with pytest.raises(ValueError, match="float32"):
        ops.DecodingPlan([layer._replace(wq=layer.wq.astype(np.float64))], final, **kw)
    with pytest.raises(ValueError, match="wk"):
        ops.DecodingPlan([layer._replace(wk=layer.wk[:, :-2])], final, **kw)
    with pytest.raises(ValueError, match="activation"):
        ops.DecodingPlan([layer], final, **kw | dict(activation="tanh"))
    with pytest.raises(ValueError, match="beta"):
        ops.DecodingPlan([layer], (final[0], np.zeros(D, np.float32)), **kw)
    with pytest.raises(ValueError, match="at least one"):
        ops.DecodingPlan([], final, **kw)
    plan = ops.DecodingPlan([layer], final, **kw)
    x = np.zeros((2, D), np.float32)
    keys, values = [np.zeros((2, KV_HEADS, 4, DH), np.float32)], [np.zeros((2, KV_HEADS, 4, DH), np.float32)]
    with pytest.raises(ValueError, match="room at every position"):
        plan.step(x, 4, keys, values)
    with pytest.raises(ValueError, match="room at every position"):
        plan.step(x, np.array([0, 4]), keys, values)
    with pytest.raises(ValueError, match=">= 0"):
        plan.step(x, np.array([1, -1]), keys, values)
    with pytest.raises(ValueError, match="one position per row"):
        plan.step(x, np.array([1, 1, 1]), keys, values)
    with pytest.raises(ValueError, match="integer array"):
        plan.step(x, np.array([1.0, 1.0]), keys, values)
    with pytest.raises(ValueError, match="keys and values must be"):
        plan.step(x[:1], 0, keys, values)
    with pytest.raises(ValueError, match="one buffer per layer"):
        plan.step(x, 0, keys * 2, values)
    with pytest.raises(ValueError, match="x must be float32"):
        plan.step(x.astype(np.float64), 0, keys, values)
    with pytest.raises(ValueError, match="cache rows in"):
        plan.step(x, 0, keys, values, sequences=np.array([0, 2]))
    with pytest.raises(ValueError, match="cache rows in"):
        plan.step(x, 0, keys, values, sequences=np.array([-1, 0]))
    with pytest.raises(ValueError, match="one \\(sequence, position\\)"):
        plan.step(x, 1, keys, values, sequences=np.array([1, 1]))
    with pytest.raises(ValueError, match="one cache row per row"):
        plan.step(x, 0, keys, values, sequences=np.array([0, 1, 1]))
    with pytest.raises(ValueError, match="sequences must be an int or a 1-D integer array"):
        plan.step(x, 0, keys, values, sequences=np.array([0.0, 1.0]))
    one_row = [k[:1] for k in keys], [v[:1] for v in values]  # a prompt's two rows into a one-row cache
    plan.step(x, np.array([0, 1]), *one_row, sequences=np.array([0, 0]))


def test_threads_stepping_one_plan_get_their_own_results():
    """One plan shared by several caches (beam search's reorder keeps it), stepped from several threads at once:
    each call reads its own buffers, and the plan's workspace serves one step at a time."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(2)
    layers = [_layer(rng, norm="rms", activation="swiglu", bias=False, kind=None) for _ in range(2)]
    final = (np.ones(D, np.float32), None)
    plan = ops.DecodingPlan(layers, final, n_heads=HEADS, n_kv_heads=KV_HEADS, norm="rms", eps=1e-6,
                            activation="swiglu", rotary_base=1e4)
    inputs = [rng.standard_normal((6, 1 + i % 3, D)).astype(np.float32) for i in range(8)]

    def run(x):
        keys = [np.zeros((x.shape[1], KV_HEADS, 8, DH), np.float32) for _ in layers]
        values = [np.zeros_like(k) for k in keys]
        return [plan.step(x[t], t, keys, values) for t in range(x.shape[0])]

    alone = [run(x) for x in inputs]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(run, inputs))
    for a, b in zip(alone, together):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
