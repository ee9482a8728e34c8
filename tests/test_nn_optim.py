"""nn.optim: AdamW by hand and against a plain reference, weight-decay rules, clipping, schedules,
and checkpoints that resume bit for bit."""

import io
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from attnkit.io import serialize
from attnkit.nn import AdamW, Module, WarmupSchedule, clip_coefficient, clip_grad_norm, default_decay


class Gain(Module):
    def __init__(self, width):
        super().__init__()
        self.add_param("gain", np.ones(width))
        self.add_param("offset", np.zeros(width))


class Toy(Module):
    """Parameters shaped like a tiny model's: a matrix, a bias, a nested LayerNorm-like child."""

    def __init__(self, rng):
        super().__init__()
        self.add_param("weight", rng.standard_normal((3, 2)))
        self.add_param("bias", rng.standard_normal(2))
        self.add_child("norm", Gain(2))
        self.add_child("embed", Module()).add_param("table", rng.standard_normal((4, 2)))


def fill_grads(model):
    """Gradients of a fixed, non-quadratic loss: each depends on the current parameters."""
    for _, param, grad in model.named_parameters():
        grad[...] = np.sin(3 * param) + param - 0.5


def reference_adamw(params, grads, *, lr, betas, eps, weight_decay, decayed, schedule):
    """AdamW as written in Loshchilov & Hutter (Algorithm 2), with torch's lr-scaled decay, in float64."""
    beta1, beta2 = betas
    params = {name: p.astype(np.float64) for name, p in params.items()}
    m = {name: np.zeros_like(p) for name, p in params.items()}
    v = {name: np.zeros_like(p) for name, p in params.items()}
    for t, step_grads in enumerate(grads, start=1):
        lr_t = lr * schedule(t)
        for name, g in step_grads.items():
            m[name] = beta1 * m[name] + (1 - beta1) * g
            v[name] = beta2 * v[name] + (1 - beta2) * g * g
            m_hat = m[name] / (1 - beta1**t)
            v_hat = v[name] / (1 - beta2**t)
            decay = weight_decay * params[name] if name in decayed else 0.0
            params[name] = params[name] - lr_t * (m_hat / (np.sqrt(v_hat) + eps) + decay)
    return params


# -- AdamW -------------------------------------------------------------------------------------


def test_first_step_by_hand():
    p, g = np.array([1.0, -1.0, 2.0]), np.array([0.5, -2.0, 0.0])
    opt = AdamW([("p", p.reshape(1, 3), g.reshape(1, 3))], lr=0.1, weight_decay=0.1, eps=1e-8)
    opt.step()
    # m_hat = g and v_hat = g^2 after one step, so the update is lr * g / (|g| + eps).
    expected = np.array([1.0, -1.0, 2.0]) * (1 - 0.1 * 0.1) - 0.1 * np.array([0.5 / (0.5 + 1e-8), -2 / (2 + 1e-8), 0])
    assert_allclose(p, expected, rtol=1e-15)
    assert opt.step_count == 1 and opt.last_lr == 0.1


def test_constant_gradient_moves_lr_per_step():
    # With a constant gradient the bias-corrected moments are exactly g and g^2 at every step.
    p, g = np.zeros(3), np.array([3.0, -0.25, 1e-3])
    opt = AdamW([("p", p, g)], lr=0.01, eps=1e-30, weight_decay=0.0)
    for _ in range(5):
        opt.step()
    assert_allclose(p, -0.05 * np.sign(g), rtol=1e-12)


@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 30), weight_decay=st.sampled_from([0.0, 0.01, 0.3]),
       betas=st.sampled_from([(0.9, 0.999), (0.8, 0.95), (0.0, 0.5)]), warmup=st.integers(0, 5))
def test_matches_reference(seed, steps, weight_decay, betas, warmup):
    rng = np.random.default_rng(seed)
    model = Toy(rng).astype(np.float64)
    initial = model.state_dict()
    grads = [{name: rng.standard_normal(p.shape) for name, p, _ in model.named_parameters()} for _ in range(steps)]
    schedule = WarmupSchedule(warmup_steps=warmup, total_steps=warmup + 20)
    opt = AdamW(model, lr=0.05, betas=betas, eps=1e-8, weight_decay=weight_decay, schedule=schedule)
    for step_grads in grads:
        for name, _, grad in model.named_parameters():
            grad[...] = step_grads[name]
        opt.step()
    expected = reference_adamw(initial, grads, lr=0.05, betas=betas, eps=1e-8, weight_decay=weight_decay,
                               decayed=opt.decayed, schedule=schedule)
    for name, value in model.state_dict().items():
        assert_allclose(value, expected[name], rtol=1e-12, atol=1e-14, err_msg=name)
    assert opt.last_lr == 0.05 * schedule(steps)



class Scalar(Module):
    """A 0-d parameter (a learned temperature, say) beside an ordinary one."""

    def __init__(self):
        super().__init__()
        self.add_param("temperature", 2.0, dtype=np.float64)
        self.add_param("weight", [[1.0, -1.0]], dtype=np.float64)


def test_a_0d_parameter_takes_steps():
    model = Scalar()
    opt = AdamW(model, lr=0.1, weight_decay=0.5, decay=lambda name, p: True)
    model.grads["temperature"][...] = 0.25
    model.grads["weight"][...] = [[0.5, 0.0]]
    opt.step()
    # One step: p (1 - lr wd) - lr g / (|g| + eps), as m_hat = g and v_hat = g^2.
    temperature = model.params["temperature"]
    assert temperature.shape == () and temperature.dtype == np.float64
    assert_allclose(temperature, 2.0 * (1 - 0.1 * 0.5) - 0.1 * 0.25 / (0.25 + 1e-8), rtol=1e-15)
    grads = [{"temperature": np.array(0.25), "weight": np.array([[0.5, 0.0]])}]
    for g in (-1.0, 3.0):
        model.grads["temperature"][...] = g
        grads.append({"temperature": np.array(g), "weight": np.array([[0.5, 0.0]])})
        opt.step()
    expected = reference_adamw({"temperature": np.array(2.0), "weight": np.array([[1.0, -1.0]])}, grads, lr=0.1,
                               betas=(0.9, 0.999), eps=1e-8, weight_decay=0.5, decayed=opt.decayed,
                               schedule=lambda t: 1.0)
    for name, value in model.state_dict().items():
        assert_allclose(value, expected[name], rtol=1e-13, err_msg=name)
    assert opt.state_dict()["exp_avg.temperature"].shape == ()

def strided_twin(a):
    """A copy of ``a`` that is a non-contiguous view (every other element of a larger buffer)."""
    buffer = np.zeros(a.shape + (2,), dtype=a.dtype)
    buffer[..., 0] = a
    return buffer[..., 0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("order", ["C", "F"])
def test_kernel_and_numpy_paths_agree_bit_for_bit(kernel_threads, dtype, order):
    # A Module's contiguous arrays take the fused kernel in place; strided triples go through contiguous copies.
    rng = np.random.default_rng(kernel_threads)
    model = Toy(rng).astype(dtype)
    big = model.add_param("big", rng.standard_normal((300, 200)).T if order == "F" else rng.standard_normal((200, 300)),
                          dtype=dtype)
    assert big.flags.f_contiguous if order == "F" else big.flags.c_contiguous
    twins = [(name, strided_twin(p), strided_twin(g)) for name, p, g in model.named_parameters()]
    fast = AdamW(model, lr=0.05, weight_decay=0.1)
    slow = AdamW(twins, lr=0.05, weight_decay=0.1)
    for _ in range(3):
        for (_, _, grad), (_, _, twin) in zip(model.named_parameters(), twins):
            grad[...] = rng.standard_normal(grad.shape)
            twin[...] = grad
        fast.step()
        slow.step()
    for (name, param, _), (_, twin, _) in zip(model.named_parameters(), twins):
        assert_array_equal(np.ascontiguousarray(param).view(np.uint8), np.ascontiguousarray(twin).view(np.uint8),
                           err_msg=name)
    for key, value in fast.state_dict().items():
        assert_array_equal(value, slow.state_dict()[key], err_msg=key)


def test_float16_and_mixed_dtype_triples_still_step():
    p, g = np.array([1.0, -1.0], dtype=np.float16), np.array([0.5, -2.0], dtype=np.float16)
    AdamW([("p", p, g)], lr=0.1, weight_decay=0.0).step()
    assert p.dtype == np.float16 and p.tolist() == [0.89990234375, -0.89990234375]
    p, g = np.array([1.0, -1.0], dtype=np.float32), np.array([0.5, -2.0], dtype=np.float64)
    AdamW([("p", p, g)], lr=0.1, weight_decay=0.0).step()
    assert_allclose(p, [0.9, -0.9], rtol=1e-6)


def test_float32_parameters_stay_float32():
    model = Toy(np.random.default_rng(0))
    fill_grads(model)
    opt = AdamW(model, lr=1e-2)
    opt.step()
    assert all(p.dtype == np.float32 for _, p, _ in model.named_parameters())
    assert all(a.dtype == np.float32 for key, a in opt.state_dict().items() if key != "step")


def test_default_decay_excludes_vectors():
    model = Toy(np.random.default_rng(0))
    opt = AdamW(model)
    assert opt.decayed == {"weight", "embed.table"}
    assert not default_decay("bias", np.zeros(3)) and default_decay("w", np.zeros((2, 2)))
    # With zero gradients the Adam term is 0: decayed parameters shrink by (1 - lr wd), the rest stay.
    before = model.state_dict()
    AdamW(model, lr=0.1, weight_decay=0.5).step()
    after = model.state_dict()
    for name in before:
        factor = 1 - 0.1 * 0.5 if name in opt.decayed else 1.0
        assert_array_equal(after[name], before[name] * np.float32(factor), err_msg=name)


def test_custom_decay_predicate_by_name():
    opt = AdamW(Toy(np.random.default_rng(0)), decay=lambda name, p: p.ndim >= 2 and not name.startswith("embed."))
    assert opt.decayed == {"weight"}


def test_a_module_of_two_dtypes_steps_as_one_update_per_parameter():
    # One kernel call per dtype group: the same bits as each parameter's own update.
    rng = np.random.default_rng(3)
    model = Toy(rng)
    model.add_param("wide", rng.standard_normal((5, 3)), dtype=np.float64)
    fill_grads(model)
    twins = [(name, p.copy(), g.copy()) for name, p, g in model.named_parameters()]
    AdamW(model, lr=0.05, weight_decay=0.1).step(grad_scale=0.5)
    by_hand = AdamW(twins, lr=0.05, weight_decay=0.1, decay=lambda name, p: name in {"weight", "embed.table", "wide"})
    for name, param, grad in twins:  # one parameter at a time
        by_hand._triples = [(name, param, grad)]
        by_hand.step_count = 0
        by_hand.step(grad_scale=0.5)
    for (name, param, _), (_, twin, _) in zip(model.named_parameters(), twins):
        assert param.dtype == twin.dtype
        assert_array_equal(param.view(np.uint8), twin.view(np.uint8), err_msg=name)


def test_a_gradient_that_shares_another_parameters_memory_is_refused_by_name():
    # The parameters' updates run at once: a gradient that is another parameter would race with its update.
    model = Toy(np.random.default_rng(0))
    fill_grads(model)
    before = model.state_dict()
    model.grads["bias"] = model.norm.params["gain"]
    with pytest.raises(ValueError, match=r"\('bias'\).*\('norm.gain'\)|\('norm.gain'\).*\('bias'\)"):
        AdamW(model, lr=0.1).step()
    for name, value in model.state_dict().items():
        assert_array_equal(value, before[name], err_msg=name)  # nothing was updated


def test_module_is_reread_at_each_step():
    model = Toy(np.random.default_rng(0))
    opt = AdamW(model, lr=0.1)
    model.grads["bias"] = np.ones(2, dtype=np.float32)  # a layer may rebind its gradient arrays
    before = model.params["bias"].copy()
    opt.step()
    assert_allclose(model.params["bias"], before - 0.1, rtol=1e-6)
    model.add_param("extra", np.zeros(3))
    with pytest.raises(ValueError, match="parameters changed"):
        opt.step()


def test_arrays_rebound_between_steps_are_the_ones_updated():
    # The update keeps its grouping of the arrays while the same ones come back: a gradient or a parameter bound
    # anew must still be read and written, exactly as by an optimiser that never saw the old ones.
    kept, rebound = Toy(np.random.default_rng(0)), Toy(np.random.default_rng(0))
    opt_kept, opt_rebound = AdamW(kept, lr=0.1), AdamW(rebound, lr=0.1)
    for step in range(4):
        for model in (kept, rebound):
            fill_grads(model)
        if step >= 2:  # the same values, in new arrays (a layer that rebinds its gradient, or a parameter)
            rebound.grads["bias"] = rebound.grads["bias"].copy()
            rebound.params["bias"] = rebound.params["bias"].copy()
        opt_kept.step()
        opt_rebound.step()
        for name, value in kept.state_dict().items():
            assert_array_equal(rebound.state_dict()[name], value, err_msg=f"step {step}: {name}")


def test_zero_grad():
    model = Toy(np.random.default_rng(0))
    fill_grads(model)
    AdamW(model).zero_grad()
    assert not any(g.any() for _, _, g in model.named_parameters())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": 0.0}, "lr"),
        ({"betas": (0.9, 1.0)}, "betas"),
        ({"betas": (0.9,)}, "betas"),
        ({"eps": -1.0}, "eps"),
        ({"weight_decay": -0.1}, "weight_decay"),
    ],
)
def test_adamw_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AdamW(Toy(np.random.default_rng(0)), **kwargs)


def test_duplicate_names_and_bad_items_are_refused():
    p = np.zeros(2)
    with pytest.raises(ValueError, match="unique"):
        AdamW([("p", p, p), ("p", p, p)])
    with pytest.raises(TypeError, match="triples"):
        AdamW([p])


# -- checkpoints -------------------------------------------------------------------------------


def train(model, opt, steps):
    for _ in range(steps):
        opt.zero_grad()
        fill_grads(model)
        clip_grad_norm(model, 1.0)
        opt.step()


def make(seed):
    model = Toy(np.random.default_rng(seed))
    schedule = WarmupSchedule(warmup_steps=3, total_steps=20, decay="cosine", min_multiplier=0.1)
    return model, AdamW(model, lr=0.05, weight_decay=0.1, schedule=schedule)


def test_state_round_trip_resumes_bit_identically():
    model, opt = make(0)
    train(model, opt, 7)
    buffer = io.BytesIO()
    serialize.save(buffer, {"model": model.state_dict(), "optimizer": opt.state_dict()})
    train(model, opt, 8)

    buffer.seek(0)
    states, _ = serialize.load(buffer)
    resumed, resumed_opt = make(1)  # different initial weights, all overwritten
    resumed.load_state_dict(states["model"])
    resumed_opt.load_state_dict(states["optimizer"])
    assert resumed_opt.step_count == 7 and resumed_opt.last_lr == opt.lr_at(7)
    train(resumed, resumed_opt, 8)
    for name, value in model.state_dict().items():
        assert_array_equal(resumed.state_dict()[name], value, err_msg=name)
    for key, value in opt.state_dict().items():
        assert_array_equal(resumed_opt.state_dict()[key], value, err_msg=key)


def test_state_dict_contents_and_mismatches():
    model, opt = make(0)
    state = opt.state_dict()
    assert sorted(state) == sorted(["step"] + [f"{kind}.{name}" for kind in ("exp_avg", "exp_avg_sq")
                                               for name in ("weight", "bias", "norm.gain", "norm.offset",
                                                            "embed.table")])
    assert state["step"].shape == () and state["step"].dtype == np.int64
    with pytest.raises(ValueError, match=r"missing \['step'\]"):
        opt.load_state_dict({k: v for k, v in state.items() if k != "step"})
    with pytest.raises(ValueError, match="exp_avg.bias.*shape"):
        opt.load_state_dict({**state, "exp_avg.bias": np.zeros(3)})
    with pytest.raises(ValueError, match="non-negative integer"):
        opt.load_state_dict({**state, "step": np.array(2.0)})


# -- clipping ----------------------------------------------------------------------------------


@given(seed=st.integers(0, 2**32 - 1), max_norm=st.sampled_from([1e-3, 0.5, 1.0, 10.0, 1e3]))
def test_clip_grad_norm(seed, max_norm):
    model = Toy(np.random.default_rng(seed))
    fill_grads(model)
    grads = {name: g.copy() for name, _, g in model.named_parameters()}
    norm = math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads.values()))
    assert clip_grad_norm(model.named_parameters(), max_norm) == pytest.approx(norm, rel=1e-12)
    after = math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for _, _, g in model.named_parameters()))
    if norm > max_norm:
        assert after == pytest.approx(max_norm, rel=1e-6)
        for name, _, g in model.named_parameters():  # the direction is kept
            assert_allclose(g, grads[name] * np.float32(max_norm / norm), rtol=1e-6, err_msg=name)
    else:
        for name, _, g in model.named_parameters():
            assert_array_equal(g, grads[name])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("max_norm", [1e-3, 1.0, 1e3])
def test_step_with_the_clip_factor_and_zero_grad_equals_clip_step_zero(dtype, max_norm):
    # The estimators' loop: clip_coefficient, then step(grad_scale=, zero_grad=True), bit for bit the
    # clip_grad_norm, step(), zero_grad() sequence, on the kernel path (a Module) and on the copies path (strided).
    rng = np.random.default_rng(7)
    models = [Toy(np.random.default_rng(1)).astype(dtype) for _ in range(2)]
    twins = [(name, strided_twin(p), strided_twin(g)) for name, p, g in models[1].named_parameters()]
    for params in (models[1], twins):
        fused, plain = AdamW(models[0], lr=0.05, weight_decay=0.1), AdamW(params, lr=0.05, weight_decay=0.1)
        for _ in range(4):
            grads = [rng.standard_normal(g.shape) for _, _, g in models[0].named_parameters()]
            for (_, _, a), (_, _, b), g in zip(models[0].named_parameters(), plain._parameters(), grads):
                a[...], b[...] = g, g
            norm, factor = clip_coefficient(models[0], max_norm)
            assert norm == clip_grad_norm(plain._parameters(), max_norm)
            assert factor == (max_norm / norm if norm > max_norm else 1.0)
            fused.step(grad_scale=factor, zero_grad=True)
            plain.step()
            for _, _, grad in plain._parameters():
                grad[...] = 0
            for (name, a, ga), (_, b, gb) in zip(models[0].named_parameters(), plain._parameters()):
                assert_array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8),
                                   err_msg=name)
                assert not ga.any() and not gb.any()
        models = [Toy(np.random.default_rng(1)).astype(dtype) for _ in range(2)]


def test_clip_coefficient_leaves_gradients_alone_and_reports_non_finite():
    model = Toy(np.random.default_rng(0))
    fill_grads(model)
    before = [g.copy() for _, _, g in model.named_parameters()]
    norm, factor = clip_coefficient(model, 0.5)
    assert factor == 0.5 / norm < 1
    for (_, _, g), old in zip(model.named_parameters(), before):
        assert_array_equal(g, old)
    assert clip_coefficient(model, np.inf) == (norm, 1.0)
    model.grads["bias"][0] = np.nan
    with pytest.raises(FloatingPointError, match=r"non-finite gradients in \['bias'\]"):
        clip_coefficient(model, 1.0)
    bad_norm, factor = clip_coefficient(model, 1.0, error_if_nonfinite=False)
    assert math.isnan(bad_norm) and factor == 1.0
    with pytest.raises(ValueError, match="max_norm must be a positive number"):
        clip_coefficient(model, 0)


def test_step_refuses_bad_grad_scale_and_zero_grad():
    opt = AdamW(Toy(np.random.default_rng(0)))
    with pytest.raises(ValueError, match="grad_scale"):
        opt.step(grad_scale=0.0)
    with pytest.raises(TypeError, match="zero_grad must be a bool"):
        opt.step(zero_grad=1)
    assert opt.step_count == 0


def test_clip_grad_norm_does_not_overflow_in_float32():
    g = np.full(4, 1e20, dtype=np.float32)
    assert clip_grad_norm([("g", g.copy(), g)], 1.0) == pytest.approx(2e20, rel=1e-6)
    assert_allclose(g, 0.5, rtol=1e-6)


def test_clip_grad_norm_infinite_max_only_measures():
    g = np.array([3.0, 4.0])
    assert clip_grad_norm([("g", g, g)], math.inf) == 5.0
    assert_array_equal(g, [3.0, 4.0])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_clip_grad_norm_non_finite(bad):
    model = Toy(np.random.default_rng(0))
    fill_grads(model)
    model.norm.grads["gain"][1] = bad
    with pytest.raises(FloatingPointError, match=r"non-finite gradients in \['norm.gain'\]"):
        clip_grad_norm(model, 1.0)
    before = {name: g.copy() for name, _, g in model.named_parameters()}
    norm = clip_grad_norm(model, 1.0, error_if_nonfinite=False)
    assert not math.isfinite(norm)
    for name, _, g in model.named_parameters():  # left as they were, for the caller to skip the step
        assert_array_equal(g, before[name])


@pytest.mark.parametrize("max_norm", [0.0, -1.0, np.nan, True, "1"])
def test_clip_grad_norm_rejects_bad_max_norm(max_norm):
    with pytest.raises(ValueError, match="max_norm"):
        clip_grad_norm([], max_norm)


# -- schedules ---------------------------------------------------------------------------------


def test_warmup_rises_linearly_to_one():
    schedule = WarmupSchedule(warmup_steps=4, total_steps=10)
    assert [schedule(t) for t in range(1, 5)] == [0.25, 0.5, 0.75, 1.0]
    assert schedule(0) == 0.0


@pytest.mark.parametrize("min_multiplier", [0.0, 0.1])
def test_cosine_shape_and_end_value(min_multiplier):
    schedule = WarmupSchedule(warmup_steps=2, total_steps=12, decay="cosine", min_multiplier=min_multiplier)
    assert schedule(2) == 1.0
    assert schedule(7) == pytest.approx((1 + min_multiplier) / 2, rel=1e-12)  # halfway
    assert schedule(12) == pytest.approx(min_multiplier, abs=1e-15)
    assert schedule(13) == schedule(1000) == min_multiplier
    values = schedule(np.arange(2, 13))
    assert (np.diff(values) < 0).all()
    # Cosine is symmetric about the halfway point: f(mid - s) + f(mid + s) = 1 + min.
    assert_allclose(values + values[::-1], 1 + min_multiplier, rtol=1e-12)


def test_linear_decay_and_constant():
    linear = WarmupSchedule(warmup_steps=0, total_steps=4, decay="linear", min_multiplier=0.2)
    assert_allclose(linear(np.arange(1, 7)), [0.8, 0.6, 0.4, 0.2, 0.2, 0.2], rtol=1e-12)
    constant = WarmupSchedule(warmup_steps=3, decay="constant")
    assert_array_equal(constant(np.arange(1, 7)), [1 / 3, 2 / 3, 1, 1, 1, 1])
    assert WarmupSchedule(decay="constant")(1) == 1.0


def test_schedule_is_vectorised_and_scalar_gives_float():
    schedule = WarmupSchedule(warmup_steps=5, total_steps=50)
    steps = np.arange(0, 60)
    assert_array_equal(schedule(steps), [schedule(int(t)) for t in steps])
    assert type(schedule(3)) is float
    assert "warmup_steps=5" in repr(schedule)


def test_adamw_uses_the_schedule():
    p, g = np.zeros(1), np.ones(1)
    opt = AdamW([("p", p, g)], lr=0.1, schedule=WarmupSchedule(warmup_steps=2, total_steps=4, decay="linear"))
    rates = []
    for _ in range(5):
        opt.step()
        rates.append(opt.last_lr)
    assert_allclose(rates, [0.05, 0.1, 0.05, 0.0, 0.0], rtol=1e-15)
    assert_allclose(p, -sum(rates) * np.ones(1), rtol=1e-7)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"decay": "step"}, ValueError, "decay must be one of"),
        ({"warmup_steps": 3}, ValueError, "total_steps is required"),
        ({"warmup_steps": 3, "total_steps": 3}, ValueError, "total_steps must be >= 4"),
        ({"warmup_steps": -1, "decay": "constant"}, ValueError, "warmup_steps"),
        ({"total_steps": 5, "min_multiplier": 1.5}, ValueError, "min_multiplier"),
        ({"total_steps": 5.0}, TypeError, "total_steps"),
    ],
)
def test_schedule_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        WarmupSchedule(**kwargs)
