"""nn.causal_lm: the language model's gradients against finite differences (tied and untied, every attention
and positional kind, padding, a window), causality, cached decoding against the full forward (with a window,
relative positions and reorder), weight tying, argument errors, and a tiny model that learns."""

import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit import nn, ops
from attnkit.nn import causal_lm
from attnkit.nn.attention import hard_attention, set_hard_attention
from attnkit.testing import check_grad

ATTENTIONS = [("softmax", None), ("softmax", 2), ("linear", None), ("performer", None)]  # (attention, window)
POSITIONALS = ["learned", "sinusoidal", "relative", "rotary", None]
# Every (attention, window, positional) a model takes: relative and rotary positions act on logits (softmax only).
CASES = [(attention, window, positional) for attention, window in ATTENTIONS for positional in POSITIONALS
         if positional not in ("relative", "rotary") or attention == "softmax"]
# A Llama-family model's options: rotary positions, grouped-query attention, SwiGLU, RMS norms, no biases.
LLAMA = dict(positional="rotary", n_heads=4, n_kv_heads=2, activation="swiglu", norm="rms", bias=False, d_ff=12,
             rotary_base=100.0)
VOCAB = 13


def _model(rng, **options):
    options = {"d_model": 8, "n_heads": 2, "n_layers": 2, "max_len": 12} | options
    return nn.CausalLM(VOCAB, rng, **options).astype(np.float64)


def test_docstring_example_runs():
    assert doctest.testmod(causal_lm).failed == 0


def _generators(module):
    found = [v for v in vars(module).values() if isinstance(v, np.random.Generator)]
    for child in module.children.values():
        found += _generators(child)
    return found


@settings(max_examples=24)
@given(seed=st.integers(0, 2**32 - 1), case=st.sampled_from(CASES), tie_weights=st.booleans(),
       norm=st.sampled_from(["layer", "rms"]), n=st.integers(1, 6), padded=st.booleans())
def test_gradients(seed, case, tie_weights, norm, n, padded):
    rng = np.random.default_rng(seed)
    attention, window, positional = case
    model = _model(rng, dropout=0.2, attention=attention, window=window, positional=positional, norm=norm,
                   tie_weights=tie_weights, relative_distance=2)
    ids = rng.integers(0, VOCAB, size=(2, n))
    lengths = rng.integers(1, n + 1, size=2) if padded else None
    generators = _generators(model)
    states = [g.bit_generator.state for g in generators]

    def forward():  # the same dropout masks at every evaluation
        for g, state in zip(generators, states):
            g.bit_generator.state = state
        return model.forward(ids, True, lengths=lengths)

    logits, cache = forward()
    w = rng.standard_normal(logits.shape)
    model.zero_grad()
    assert model.backward(w, cache) is None
    params = {name: p for name, p, _ in model.named_parameters()}
    analytic = {name: g.copy() for name, _, g in model.named_parameters()}
    check_grad(lambda **_: float(np.sum(forward()[0] * w)), params, analytic, rtol=1e-5, atol=1e-8, max_entries=3,
               rng=seed)


def test_tied_gradient_sums_the_input_and_output_uses():
    rng = np.random.default_rng(1)
    model = _model(rng)
    ids = np.array([[3, 5, 3, 7]])
    logits, cache = model.forward(ids, True)
    w = rng.standard_normal(logits.shape)
    model.zero_grad()
    model.backward(w, cache)
    table_grad = model.embedding.tokens.grads["weight"]
    h = cache.output
    np.testing.assert_allclose(table_grad[[0, 12]], (w.reshape(-1, VOCAB).T @ h.reshape(-1, 8))[[0, 12]],
                               rtol=1e-12)  # ids 0 and 12 are not in the input: their rows have only the output use
    assert np.abs(table_grad[3] - (w.reshape(-1, VOCAB).T @ h.reshape(-1, 8))[3]).max() > 1e-6


@pytest.mark.parametrize(("attention", "window", "positional"), CASES)
def test_logits_at_t_ignore_ids_after_t(attention, window, positional):
    rng = np.random.default_rng(2)
    model = _model(rng, attention=attention, window=window, positional=positional)
    ids = rng.integers(0, VOCAB, size=(2, 8))
    logits = model.forward(ids)[0]
    for t in range(7):
        changed = ids.copy()
        changed[:, t + 1:] = (changed[:, t + 1:] + rng.integers(1, VOCAB, size=changed[:, t + 1:].shape)) % VOCAB
        after = model.forward(changed)[0]
        np.testing.assert_allclose(after[:, : t + 1], logits[:, : t + 1], rtol=1e-12, atol=1e-13)
        assert np.abs(after[:, t + 1] - logits[:, t + 1]).max() > 1e-6


@pytest.mark.parametrize(("attention", "window", "positional"), CASES)
def test_padding_leaves_the_real_positions_alone(attention, window, positional):
    rng = np.random.default_rng(3)
    model = _model(rng, attention=attention, window=window, positional=positional)
    ids = rng.integers(0, VOCAB, size=(2, 6))
    logits = model.forward(ids, lengths=np.array([6, 3]))[0]
    np.testing.assert_allclose(logits[1, :3], model.forward(ids[1:, :3])[0][0], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(logits[0], model.forward(ids[:1])[0][0], rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("tie_weights", [True, False])
@pytest.mark.parametrize(("attention", "window", "positional"),
                         CASES + [("softmax", 0, positional) for positional in POSITIONALS])
def test_cached_steps_equal_the_full_forward(attention, window, positional, tie_weights):
    rng = np.random.default_rng(4)
    model = _model(rng, attention=attention, window=window, positional=positional, tie_weights=tie_weights,
                   relative_distance=3)
    ids = rng.integers(0, VOCAB, size=(3, 10))
    full = model.forward(ids)[0]
    cache = model.start(3, capacity=2)  # the key/value buffers grow (up to window + 1 with a window)
    steps = []
    for t in range(10):
        assert cache.length == t
        steps.append(model.step(ids[:, t], cache))
        assert steps[-1].shape == (3, VOCAB)
    np.testing.assert_allclose(np.stack(steps, axis=1), full, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize(("attention", "window", "positional"), CASES)
def test_reordered_cache_continues_the_selected_rows(attention, window, positional):
    rng = np.random.default_rng(5)
    model = _model(rng, attention=attention, window=window, positional=positional)
    ids = rng.integers(0, VOCAB, size=(3, 8))
    cache = model.start(3)
    for t in range(3):
        model.step(ids[:, t], cache)
    for indices in (np.array([2, 0, 0, 1, 2]), np.array([1, 3])):  # repeat and permute, then drop rows
        cache = model.reorder(cache, indices)
        ids = ids[indices]
        assert cache.batch_size == indices.size and cache.length == 3
    steps = [model.step(ids[:, t], cache) for t in range(3, 8)]
    np.testing.assert_allclose(np.stack(steps, axis=1), model.forward(ids)[0][:, 3:], rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("window", [0, 2])
def test_a_window_drops_the_far_past(window):
    rng = np.random.default_rng(6)
    model = _model(rng, window=window)
    ids = rng.integers(0, VOCAB, size=(2, 12))
    logits = model.forward(ids)[0]
    changed = ids.copy()
    changed[:, :4] = (changed[:, :4] + 1) % VOCAB
    first_blind = 4 + 2 * window  # two layers, each reading window positions back
    np.testing.assert_array_equal(model.forward(changed)[0][:, first_blind:], logits[:, first_blind:])
    assert np.abs(model.forward(changed)[0][:, first_blind - 1] - logits[:, first_blind - 1]).max() > 1e-6


@pytest.mark.parametrize("positional", ["learned", "relative"])
def test_attention_weights_are_causal_distributions(positional):
    rng = np.random.default_rng(7)
    model = _model(rng, positional=positional, n_heads=4)
    ids = rng.integers(0, VOCAB, size=(2, 5))
    weights = model.attention_weights(ids)
    assert len(weights) == 2 and all(w.shape == (2, 4, 5, 5) for w in weights)
    for w in weights:
        np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-12)
        assert np.all(np.triu(w, k=1) == 0) and np.all(np.diagonal(w, axis1=-2, axis2=-1) > 0)
    padded = model.attention_weights(ids, lengths=np.array([5, 2]))
    assert np.all(padded[0][1, :, :, 2:] == 0)
    with pytest.raises(ValueError, match="attention='softmax'"):
        _model(rng, attention="linear").attention_weights(ids)


def test_tied_weights_share_one_table():
    rng = np.random.default_rng(8)
    tied = _model(rng)
    names = [name for name, _, _ in tied.named_parameters()]
    tables = [name for name, p, _ in tied.named_parameters() if p.shape == (VOCAB, 8)]
    assert tables == ["embedding.tokens.weight"] and tied.output is None
    assert not any(name.startswith("output.") for name in names)
    ids = np.array([[1, 2, 3, 4]])  # row 9 of the table is not an input: only the output reads it
    before = tied.forward(ids)[0]
    tied.embedding.tokens.params["weight"][9] += rng.standard_normal(8)  # not a constant: LayerNorm's h sums to 0
    after = tied.forward(ids)[0]
    assert np.abs(after[..., 9] - before[..., 9]).min() > 1e-6
    np.testing.assert_array_equal(np.delete(after, 9, axis=-1), np.delete(before, 9, axis=-1))

    untied = _model(np.random.default_rng(8), tie_weights=False)
    assert isinstance(untied.output, nn.Linear)
    assert [name for name, _, _ in untied.named_parameters()] == names + ["output.weight", "output.bias"]
    assert untied.n_parameters() == tied.n_parameters() + 8 * VOCAB + VOCAB
    before = untied.forward(ids)[0]
    untied.embedding.tokens.params["weight"][9] += rng.standard_normal(8)
    np.testing.assert_array_equal(untied.forward(ids)[0], before)


def test_astype_and_defaults():
    model = nn.CausalLM(20, 0)
    assert model.dtype == np.float32 and len(model.decoder.layers) == 4
    assert model.embedding.positions.params["weight"].shape == (256, 128)
    assert model.decoder.layer0.feed_forward.sublayer.linear1.params["weight"].shape == (128, 512)  # d_ff = 4 d_model
    logits32 = model.forward(np.array([[1, 2, 3]]))[0]
    assert logits32.dtype == np.float32 and logits32.shape == (1, 3, 20)
    model.astype(np.float64)
    assert all(p.dtype == np.float64 and g.dtype == np.float64 for _, p, g in model.named_parameters())
    logits64 = model.forward(np.array([[1, 2, 3]]))[0]
    assert logits64.dtype == np.float64
    np.testing.assert_allclose(logits64, logits32, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("tie_weights", [True, False])
def test_state_dict_round_trip(tie_weights):
    model = _model(np.random.default_rng(10), tie_weights=tie_weights)
    other = _model(np.random.default_rng(11), tie_weights=tie_weights)
    ids = np.array([[4, 8, 2, 3, 10]])
    assert not np.allclose(other.forward(ids)[0], model.forward(ids)[0])
    other.load_state_dict(model.state_dict())
    np.testing.assert_array_equal(other.forward(ids)[0], model.forward(ids)[0])


def test_errors():
    rng = np.random.default_rng(9)
    with pytest.raises(ValueError, match="vocab_size must be >= 1"):
        nn.CausalLM(0, rng)
    with pytest.raises(TypeError, match="vocab_size must be an integer"):
        nn.CausalLM(10.0, rng)
    with pytest.raises(ValueError, match=r"d_model \(10\) must be divisible by n_heads \(4\)"):
        nn.CausalLM(10, rng, d_model=10, n_heads=4)
    with pytest.raises(ValueError, match="window needs attention='softmax'"):
        nn.CausalLM(10, rng, d_model=8, attention="linear", window=2)
    with pytest.raises(ValueError, match="positional='relative' needs attention='softmax'"):
        nn.CausalLM(10, rng, d_model=8, attention="performer", positional="relative")
    with pytest.raises(ValueError, match="positional must be one of"):
        nn.CausalLM(10, rng, positional="alibi")
    with pytest.raises(ValueError, match="positional='rotary' needs attention='softmax'"):
        nn.CausalLM(10, rng, d_model=8, attention="linear", positional="rotary")
    with pytest.raises(ValueError, match=r"dropout: the drop probability p must be in \[0, 1\), got 1.5"):
        nn.CausalLM(10, rng, dropout=1.5)
    with pytest.raises(TypeError, match="dropout must be a real number"):
        nn.CausalLM(10, rng, dropout="0.1")
    with pytest.raises(TypeError, match="tie_weights must be a bool"):
        nn.CausalLM(10, rng, tie_weights="yes")
    with pytest.raises(ValueError, match="max_len must be >= 1"):
        nn.CausalLM(10, rng, max_len=0)
    with pytest.raises(ValueError, match="relative_distance must be >= 1"):
        nn.CausalLM(10, rng, positional="relative", relative_distance=0)
    with pytest.raises(ValueError, match="n_layers must be >= 1"):
        nn.CausalLM(10, rng, n_layers=0)
    model = _model(rng, max_len=4)
    with pytest.raises(ValueError, match="exceed max_len=4"):
        model.forward(np.zeros((1, 5), dtype=int))
    cache = model.start(1)
    for _ in range(4):
        model.step(np.array([1]), cache)
    with pytest.raises(ValueError, match="exceed max_len=4"):
        model.step(np.array([1]), cache)
    _model(rng, max_len=4, positional="sinusoidal").forward(np.zeros((1, 5), dtype=int))  # no table to outgrow
    with pytest.raises(ValueError, match=r"ids must be in \[0, 13\)"):
        model.forward(np.array([[1, 13]]))
    with pytest.raises(ValueError, match=r"ids must be in \[0, 13\)"):
        model.forward(np.array([[-1, 2]]))
    with pytest.raises(TypeError, match="ids must be an integer array"):
        model.forward(np.array([[1.0, 2.0]]))
    with pytest.raises(ValueError, match=r"ids must have shape \(B, N\)"):
        model.forward(np.array([1, 2]))
    with pytest.raises(ValueError, match=r"ids must have shape \(batch_size=2,\)"):
        model.step(np.array([1, 2, 3]), model.start(2))
    with pytest.raises(ValueError, match=r"ids must have shape \(B,\)"):
        model.step(np.array([[1], [2]]), model.start(2))


def test_tiny_language_model_learns_a_repeating_sequence():
    """A 1-layer model on windows of the period-5 sequence 3 1 4 1 5 3 1 4 1 5 ...: after a 1 the next token
    is 4 or 5 depending on the token before, so attention must read the past."""
    rng = np.random.default_rng(0)
    period, length = np.array([3, 1, 4, 1, 5]), 12
    stream = np.tile(period, 8)
    model = nn.CausalLM(6, rng, d_model=32, n_heads=2, n_layers=1, max_len=length)
    optimiser = nn.AdamW(model, lr=1e-2, weight_decay=0.0)
    loss_fn = nn.CrossEntropyLoss()

    def batch(size):
        starts = rng.integers(0, period.size, size=size)
        return np.stack([stream[s : s + length + 1] for s in starts])

    losses = []
    for _ in range(200):
        ids = batch(16)
        logits, cache = model.forward(ids[:, :-1], True)
        loss, dlogits = loss_fn.forward(logits, ids[:, 1:], training=True)
        losses.append(float(loss))
        model.zero_grad()
        model.backward(loss_fn.backward(1.0, dlogits), cache)
        optimiser.step()
    ids = batch(64)
    logits = model.forward(ids[:, :-1])[0]
    # Position 0's target is ambiguous after a lone 1; every later one follows from the two tokens before.
    final = float(loss_fn.forward(logits[:, 1:], ids[:, 2:])[0])
    assert losses[0] > 1.0 and final < 0.05, (losses[0], final)
    assert np.array_equal(logits[:, 1:].argmax(-1), ids[:, 2:])


@pytest.mark.parametrize(("attention", "window", "positional"),
                         CASES + [("softmax", 0, positional) for positional in POSITIONALS])
@given(cuts=st.lists(st.integers(1, 4), min_size=1, max_size=3))  # within max_len=12
@settings(max_examples=15, deadline=None)
def test_prefill_of_any_split_equals_the_full_forward(attention, window, positional, cuts):
    """A prompt read in pieces of any sizes (one causal call each, or position by position for a window or
    linear attention) gives the logits of the full forward at the end of each piece."""
    rng = np.random.default_rng(5)
    model = _model(rng, attention=attention, window=window, positional=positional, relative_distance=3)
    n = sum(cuts)
    ids = rng.integers(0, VOCAB, size=(2, n))
    full = model.forward(ids)[0]
    cache, end = model.start(2, capacity=1), 0
    for size in cuts:
        logits = model.prefill(ids[:, end : end + size], cache)
        end += size
        assert cache.length == end
        np.testing.assert_allclose(logits, full[:, end - 1], rtol=1e-11, atol=1e-12)


def test_prefill_errors():
    model = _model(np.random.default_rng(0))
    cache = model.start(2)
    with pytest.raises(ValueError, match="ids must have shape"):
        model.prefill(np.zeros((3, 2), int), cache)
    with pytest.raises(ValueError, match=r"ids must have shape \(B, N\)"):
        model.prefill(np.zeros(2, int), cache)


@settings(max_examples=10)
@given(seed=st.integers(0, 2**32 - 1), tie_weights=st.booleans(), n=st.integers(1, 6))
def test_llama_options_gradients_and_decoding(seed, tie_weights, n):
    rng = np.random.default_rng(seed)
    model = _model(rng, tie_weights=tie_weights, **LLAMA)
    assert not any(name.endswith(("bq", "bk", "bv", "bo", "bias")) for name, _, _ in model.named_parameters())
    ids = rng.integers(0, VOCAB, size=(2, n))
    logits, cache = model.forward(ids, True)
    w = rng.standard_normal(logits.shape)
    model.zero_grad()
    model.backward(w, cache)
    params = {name: p for name, p, _ in model.named_parameters()}
    analytic = {name: g.copy() for name, _, g in model.named_parameters()}
    check_grad(lambda **_: float(np.sum(model.forward(ids, True)[0] * w)), params, analytic, rtol=1e-5, atol=1e-8,
               max_entries=3, rng=seed)
    state = model.start(2, capacity=1)
    steps = [model.prefill(ids[:, :1], state)] + [model.step(ids[:, t], state) for t in range(1, n)]
    np.testing.assert_allclose(np.stack(steps, axis=1), logits, rtol=1e-11, atol=1e-12)


# -- one-token steps through the C++ decoding plan ---------------------------------------------------------------
# float32 models whose blocks the plan runs: GPT-2-style (learned, sinusoidal or no positions, LayerNorm or RMSNorm,
# every activation, biases) and Llama-style (rotary, grouped-query, SwiGLU, no biases), float32 or block-quantised.
LLAMA_32 = dict(positional="rotary", n_kv_heads=2, activation="swiglu", norm="rms", bias=False, d_ff=64,
                rotary_base=1e4)
PLAN_MODELS = {"gpt": ({}, None), "gpt-sinusoidal-rms-relu": (dict(positional="sinusoidal", norm="rms",
                                                                   activation="relu"), None),
               "gpt-no-positions-gelu-untied": (dict(positional=None, activation="gelu", tie_weights=False), None),
               "llama": (LLAMA_32, None), "llama-q4_1": (LLAMA_32, "q4_1"), "llama-q8_0": (LLAMA_32, "q8_0")}


def _plan_model(name):
    options, kind = PLAN_MODELS[name]
    model = nn.CausalLM(VOCAB, np.random.default_rng(3), **{"d_model": 64, "n_heads": 4, "n_layers": 2,
                                                            "max_len": 40} | options)
    if kind is not None:  # every block's products on GGML blocks (dims are multiples of 32)
        for layer in model.decoder.layers:
            for module in (layer.self_attention.sublayer, layer.feed_forward.sublayer.linear1,
                           layer.feed_forward.sublayer.linear2):
                for name, value in module.params.items():
                    if value.ndim == 2:
                        module.params[name] = ops.quantize_blocks(value, kind)
    return model


def _counted(cache):
    """The cache, with its plan's steps counted in ``cache.plan.calls``."""
    plan, step = cache.plan, cache.plan.step
    plan.calls = 0

    def counting(*args, **kwargs):
        plan.calls += 1
        return step(*args, **kwargs)

    plan.step = counting
    return cache


@pytest.mark.parametrize("name", list(PLAN_MODELS))
@pytest.mark.parametrize("batch", [1, 3])
def test_plan_steps_equal_the_op_by_op_steps_and_the_forward(name, batch):
    model = _plan_model(name)
    rng = np.random.default_rng(4)
    ids = rng.integers(0, VOCAB, size=(batch, 24))
    full = model.forward(ids)[0]
    planned = _counted(model.start(batch, capacity=2))  # a prompt of 5, then regrowth to 10 and 20 while stepping
    python = model.start(batch, capacity=2)
    python.plan = None
    for cache in (planned, python):
        np.testing.assert_allclose(model.prefill(ids[:, :5], cache), full[:, 4], rtol=1e-5, atol=1e-5)
    for t in range(5, 14):
        got, want = model.step(ids[:, t], planned), model.step(ids[:, t], python)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got, full[:, t], rtol=1e-5, atol=1e-5)
    assert planned.plan.calls == 10 and planned.length == python.length == 14  # the prompt read in one plan step
    # beam search: rows repeated, dropped, reordered (the batch grows from 1 to 2), then the steps continue
    indices = np.array([0, 0]) if batch == 1 else np.array([2, 0, 0, 1])
    planned, python = model.reorder(planned, indices), model.reorder(python, indices)
    assert python.plan is None
    rows = ids[indices]
    for t in range(14, 24):
        got, want = model.step(rows[:, t], planned), model.step(rows[:, t], python)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, model.forward(rows)[0][:, -1], rtol=1e-5, atol=1e-5)
    assert planned.plan.calls == 20


@pytest.mark.parametrize("options", [dict(window=2), dict(positional="relative"), dict(attention="linear"),
                                     dict(attention="performer"), "float64", "hard"], ids=str)
def test_plan_falls_back_to_the_op_by_op_steps(options):
    model = nn.CausalLM(VOCAB, np.random.default_rng(5), d_model=8, n_heads=2, n_layers=2, max_len=12,
                        **(options if isinstance(options, dict) else {}))
    if options == "float64":
        model.astype(np.float64)
    if options == "hard":
        set_hard_attention(model, True)
    ids = np.random.default_rng(6).integers(0, VOCAB, size=(2, 6))
    cache = model.start(2, capacity=2)
    assert cache.plan is None
    steps = [model.step(ids[:, t], cache) for t in range(6)]
    if options != "hard":
        np.testing.assert_allclose(np.stack(steps, axis=1), model.forward(ids)[0], rtol=1e-5, atol=1e-5)


def test_hard_attention_switched_on_after_start_steps_op_by_op():
    model = _plan_model("gpt")
    ids = np.random.default_rng(7).integers(0, VOCAB, size=(2, 8))
    planned, python = _counted(model.start(2)), model.start(2)
    python.plan = None
    for t in range(3):
        np.testing.assert_allclose(model.step(ids[:, t], planned), model.step(ids[:, t], python), rtol=1e-5, atol=1e-5)
    with hard_attention(model):
        for t in range(3, 8):
            np.testing.assert_allclose(model.step(ids[:, t], planned), model.step(ids[:, t], python), rtol=1e-5,
                                       atol=1e-5)
    assert planned.plan.calls == 3


def test_a_post_ln_decoder_has_no_plan():
    decoder = nn.CausalDecoder(2, 8, 2, 16, np.random.default_rng(0), norm_first=False)
    assert decoder.decoding_plan() is None and decoder.start(1).plan is None


@pytest.mark.parametrize("name", list(PLAN_MODELS))
def test_prompts_of_different_lengths_step_together_as_alone(name):
    """Prompts of lengths 3, 7 and 3, each prefilled alone, joined into one cache (rows at their own positions)
    and stepped together: each row's logits have the bits of its own steps alone, through a reorder (beam search),
    a regrowth of the buffers and absolute positions (learned, sinusoidal) read per row."""
    model = _plan_model(name)
    assert model.steps_mixed_positions()
    rng = np.random.default_rng(8)
    prompts = [rng.integers(0, VOCAB, size=n) for n in (3, 7, 3)]
    steps = rng.integers(0, VOCAB, size=(3, 12))

    def alone(prompt, tokens):
        cache = model.start(1, capacity=4)
        out = [model.prefill(prompt[None], cache)]
        return out + [model.step(tokens[t : t + 1], cache) for t in range(tokens.size)]

    expected = [alone(p, steps[b]) for b, p in enumerate(prompts)]
    caches = [model.start(1, capacity=4), model.start(1, capacity=4), model.start(1, capacity=4)]
    first = [model.prefill(p[None], c) for p, c in zip(prompts, caches)]
    joined = _counted(nn.DecoderCache.join(caches))
    assert joined.lengths.tolist() == [3, 7, 3]
    for b in range(3):
        np.testing.assert_array_equal(first[b], expected[b][0])
    for t in range(6):
        logits = model.step(steps[:, t], joined)
        for b in range(3):
            np.testing.assert_array_equal(logits[b : b + 1], expected[b][t + 1])
    order = np.array([1, 2])  # drop a row and swap the rest; the row at 13 positions goes on from there
    joined = model.reorder(joined, order)
    for t in range(6, 12):
        logits = model.step(steps[order, t], joined)
        for i, b in enumerate(order):
            np.testing.assert_array_equal(logits[i : i + 1], expected[b][t + 1])
    assert joined.plan.calls == 12 and joined.lengths.tolist() == [19, 15]


def test_mixed_positions_need_a_plan():
    model = nn.CausalLM(VOCAB, np.random.default_rng(5), d_model=8, n_heads=2, n_layers=2, max_len=12, window=2)
    assert not model.steps_mixed_positions()
    plain = _plan_model("gpt")
    caches = [plain.start(1), plain.start(1)]
    for n, cache in zip((2, 4), caches):
        plain.prefill(np.ones((1, n), np.int64), cache)
    joined = nn.DecoderCache.join(caches)
    with hard_attention(plain), pytest.raises(ValueError, match="different positions"):
        plain.step(np.ones(2, np.int64), joined)  # hard attention steps op by op, which needs one length
    with pytest.raises(ValueError, match="decoder-only"):
        nn.DecoderCache.join([nn.DecoderCache([(caches[0].layers[0], nn.CrossAttentionCache(np.zeros((1, 2, 1, 4)),
                                                                                           np.zeros((1, 2, 1, 4))))])])


@pytest.mark.parametrize("name", ["gpt", "gpt-sinusoidal-rms-relu", "llama", "llama-q4_1"])
def test_a_padded_prefill_reads_prompts_of_different_lengths_as_alone(name):
    """Prompts of lengths 2, 6 and 4, right-padded and read in one prefill with their lengths: each row's logits
    and its next steps have the bits of the prompt read alone (12 rows through the plan, whose rows do not
    depend on the rows beside them)."""
    model = _plan_model(name)
    rng = np.random.default_rng(9)
    prompts = [rng.integers(0, VOCAB, size=n) for n in (2, 6, 4)]
    steps = rng.integers(0, VOCAB, size=(3, 5))
    padded = np.zeros((3, 6), np.int64)
    for i, p in enumerate(prompts):
        padded[i, : p.size] = p
    cache = model.start(3, capacity=4)
    got = [model.prefill(padded, cache, lengths=np.array([2, 6, 4]))]
    assert cache.lengths.tolist() == [2, 6, 4]
    got += [model.step(steps[:, t], cache) for t in range(5)]
    for b, p in enumerate(prompts):
        alone = model.start(1, capacity=4)
        want = [model.prefill(p[None], alone)] + [model.step(steps[b, t : t + 1], alone) for t in range(5)]
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g[b : b + 1], w)


@pytest.mark.parametrize("name", list(PLAN_MODELS))
def test_a_short_prompt_is_read_with_the_bits_of_its_steps(name):
    """Prompts of up to PLAN_READ_ROWS tokens in all (padding aside) are read as rows of one plan step, after what
    the cache holds: each prompt's logits and cache have the bits of stepping its tokens one by one. Longer, the
    op-by-op path's one causal call per layer: the forward's logits to float32 rounding."""
    model = _plan_model(name)
    rng = np.random.default_rng(10)
    ids = rng.integers(0, VOCAB, size=(2, 16))
    cache = model.start(2, capacity=4)
    first = model.prefill(ids[:, :9], cache)  # 18 rows
    second = model.prefill(ids[:, 9:16], cache)  # 14 more, after 9 held
    stepped = model.start(2, capacity=4)
    steps = [model.step(ids[:, t], stepped) for t in range(16)]
    np.testing.assert_array_equal(first, steps[8])
    np.testing.assert_array_equal(second, steps[15])
    for got, want in zip(cache.layers, stepped.layers):
        for a, b in zip(got.keys_values(), want.keys_values()):
            np.testing.assert_array_equal(a, b)
    assert cache.lengths.tolist() == [16, 16]
    long_ids = rng.integers(0, VOCAB, size=(1, nn.transformer.PLAN_READ_ROWS + 4))
    np.testing.assert_allclose(model.prefill(long_ids, model.start(1)), model.forward(long_ids)[0][:, -1],
                               rtol=1e-5, atol=1e-5)


def test_padded_prefill_errors():
    model = _plan_model("gpt")
    ids = np.ones((2, 3), np.int64)
    cache = model.start(2)
    with pytest.raises(ValueError, match="one length in"):
        model.prefill(ids, cache, lengths=np.array([0, 3]))
    with pytest.raises(ValueError, match="one length in"):
        model.prefill(ids, cache, lengths=np.array([2, 4]))
    with pytest.raises(ValueError, match="one length in"):
        model.prefill(ids, cache, lengths=np.array([2]))
    model.prefill(ids, cache)
    with pytest.raises(ValueError, match="empty cache"):
        model.prefill(ids, cache, lengths=np.array([2, 3]))
    windowed = nn.CausalLM(VOCAB, np.random.default_rng(5), d_model=8, n_heads=2, n_layers=2, max_len=12, window=2)
    with pytest.raises(ValueError, match="empty cache"):
        windowed.prefill(ids, windowed.start(2), lengths=np.array([2, 3]))
