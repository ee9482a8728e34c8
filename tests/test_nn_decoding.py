"""decoding: greedy, beam search and sampling on tiny models with known scores; the logit processors'
properties; per-input stopping and seeding; cached generation equals uncached."""

import doctest

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from attnkit import nn
from attnkit.nn import decoding
from attnkit.nn.decoding import (
    DecoderModel,
    apply_temperature,
    check_generation_params,
    generate,
    input_generators,
    top_k_filter,
    top_p_filter,
)

EOS, BOS = 0, 2


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


class PrefixModel:
    """Next-token logits that are a fixed random function of (input, prefix): a tiny model whose
    every score is known, with no structure a search could exploit.

    ``eos_bias[i]`` is added to the end token's logit for input i; ``calls`` records the rows of each step.
    """

    def __init__(self, n_inputs, vocab=3, seed=0, scale=2.0, eos_bias=None):
        self.n_inputs, self.vocab, self.seed, self.scale = n_inputs, vocab, seed, scale
        self.eos_bias = np.zeros(n_inputs) if eos_bias is None else np.asarray(eos_bias, float)
        self.calls = []

    def logits(self, key):
        rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=key))
        out = self.scale * rng.standard_normal(self.vocab)
        out[EOS] += self.eos_bias[key[0]]
        return out

    def start(self):
        return [(i,) for i in range(self.n_inputs)]

    def step(self, tokens, state):
        state = [key + (int(t),) for key, t in zip(state, tokens)]
        self.calls.append(len(state))
        return np.stack([self.logits(key) for key in state]), state

    def reorder(self, state, indices):
        return [state[i] for i in indices]


def repeats_ngram(seq, n):
    grams = [tuple(seq[i : i + n]) for i in range(len(seq) - n + 1)]
    return len(grams) != len(set(grams))


def exhaustive(model, i, *, max_length, min_length=0, length_penalty=1.0, no_repeat_ngram_size=0):
    """Every sequence the rules allow for input i, as (score, tokens, finished), best first."""
    found = []

    def walk(prefix, total):
        logp = log_softmax(model.logits((i, BOS) + prefix))
        moved = False
        for token in range(model.vocab):
            if token == EOS and len(prefix) < min_length:
                continue
            seq = prefix + (token,)
            if token != EOS and no_repeat_ngram_size and repeats_ngram(seq, no_repeat_ngram_size):
                continue
            moved = True
            s = total + logp[token]
            if token == EOS:
                found.append((s / len(seq) ** length_penalty, prefix, True))
            elif len(seq) == max_length:
                found.append((s / len(seq) ** length_penalty, seq, False))
            else:
                walk(seq, s)
        if not moved:
            found.append((total / max(len(prefix), 1) ** length_penalty, prefix, False))

    walk((), 0.0)
    return sorted(found, key=lambda f: -f[0])


def tokens(hyps):
    return [[h.tokens.tolist() for h in per_input] for per_input in hyps]


RULES = [dict(), dict(length_penalty=0.0), dict(length_penalty=2.0), dict(length_penalty=-0.5),
         dict(min_length=2), dict(no_repeat_ngram_size=1, min_length=3), dict(no_repeat_ngram_size=2)]


@pytest.mark.parametrize("rules", RULES)
def test_beam_search_finds_the_exhaustive_best(rules):
    # With more beams than there are prefixes, beam search is exhaustive: its ranking must be the
    # exhaustive ranking of every sequence by log_prob / own_length ** length_penalty.
    model = PrefixModel(3, vocab=3, seed=1)
    hyps = generate(model, 3, bos_id=BOS, eos_id=EOS, strategy="beam", num_beams=81, max_length=4,
                    num_return_sequences=5, **rules)
    for i in range(3):
        best = exhaustive(model, i, max_length=4, **rules)[:5]
        assert [h.tokens.tolist() for h in hyps[i]] == [list(seq) for _, seq, _ in best]
        np.testing.assert_allclose([h.score for h in hyps[i]], [score for score, _, _ in best], rtol=1e-12)
        assert [h.finished for h in hyps[i]] == [finished for _, _, finished in best]


def test_beam_search_beats_greedy_where_greedy_is_short_sighted():
    # Hand-set: the first step prefers "a" (0.5) to "b" (0.4); after "a" everything is flat, after "b"
    # the end is nearly certain. Greedy takes "a"; two beams find "b <eos>" (0.36 > 0.5 / 3).
    a, b = 1, 2

    class Table:
        def start(self):
            return [()]

        def step(self, toks, state):
            state = [s + (int(t),) for s, t in zip(state, toks)]
            table = {1: [0.1, 0.5, 0.4], 2: {a: [1 / 3] * 3, b: [0.9, 0.05, 0.05]}}
            rows = []
            for s in state:
                probs = table[1] if len(s) == 1 else table[2].get(s[1], [1 / 3] * 3)
                rows.append(np.log(probs))
            return np.array(rows), state

        def reorder(self, state, indices):
            return [state[i] for i in indices]

    greedy = generate(Table(), 1, bos_id=BOS, eos_id=EOS, max_length=2, length_penalty=0.0)[0][0]
    beam = generate(Table(), 1, bos_id=BOS, eos_id=EOS, strategy="beam", num_beams=2, max_length=2,
                    length_penalty=0.0)[0][0]
    assert greedy.tokens.tolist()[0] == a
    assert beam.tokens.tolist() == [b] and beam.finished
    assert beam.log_prob == pytest.approx(np.log(0.4 * 0.9))


@pytest.mark.parametrize("rules", RULES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_equals_beam_search_with_one_beam(rules, seed):
    model = PrefixModel(4, vocab=4, seed=seed, scale=1.5)
    greedy = generate(model, 4, bos_id=BOS, eos_id=EOS, max_length=7, **rules)
    beam = generate(model, 4, bos_id=BOS, eos_id=EOS, strategy="beam", num_beams=1, max_length=7, **rules)
    assert all(len(g) == 1 for g in greedy)
    for g, b in zip(greedy, beam):
        assert g[0].tokens.tolist() == b[0].tokens.tolist() and g[0].finished == b[0].finished
        assert g[0].log_prob == pytest.approx(b[0].log_prob, rel=1e-12)
        assert g[0].score == pytest.approx(b[0].score, rel=1e-12)


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_each_input_stops_on_its_own_and_leaves_the_batch(strategy):
    # Input 0 ends at once (a huge end-token bias), input 1 runs long: input 0's result is the one it
    # gets alone, and the model steps fewer rows once it is done.
    bias = [50.0, -50.0]
    options = dict(bos_id=BOS, eos_id=EOS, strategy=strategy, max_length=6, num_beams=3, random_state=0)
    model, first = PrefixModel(2, vocab=5, seed=4, eos_bias=bias), PrefixModel(1, vocab=5, seed=4, eos_bias=bias[:1])
    both, alone = generate(model, 2, **options), generate(first, 1, **options)
    assert tokens(both)[0] == tokens(alone)[0] and tokens(alone)[0][0] == []
    assert both[0][0].score == pytest.approx(alone[0][0].score, rel=1e-12)
    rows = 3 if strategy == "beam" else 1
    steps_alone = len(first.calls)  # beam search needs a few steps to collect its 3 hypotheses
    assert steps_alone < 6 and len(both[1][0].tokens) == 6
    assert model.calls == [2 * rows] * steps_alone + [rows] * (6 - steps_alone)


def test_length_penalty_uses_each_hypothesis_own_length():
    model = PrefixModel(2, vocab=4, seed=5, eos_bias=[1.0, -1.0])
    for penalty in (0.0, 1.0, 2.0):
        options = dict(bos_id=BOS, eos_id=EOS, strategy="beam", num_beams=4, max_length=8, length_penalty=penalty,
                       num_return_sequences=4)
        hyps = generate(model, 2, **options)
        lengths = {len(h.tokens) + h.finished for per_input in hyps for h in per_input}
        assert len(lengths) > 2  # hypotheses of different lengths in one batch
        # each input's hypotheses are those it gets alone, where no other input pads the batch
        assert tokens(hyps) == tokens(generate(PrefixModel(1, 4, 5, eos_bias=[1.0]), 1, **options)) + \
            tokens(generate(Shifted(model, 1), 1, **options))
        for h in (h for per_input in hyps for h in per_input):
            own = len(h.tokens) + h.finished
            assert h.score == pytest.approx(h.log_prob / own**penalty, rel=1e-12)
        for i, per_input in enumerate(hyps):
            for h in per_input:
                assert h.log_prob == pytest.approx(sequence_log_prob(model, i, h), rel=1e-12)


def sequence_log_prob(model, i, h):
    seq = h.tokens.tolist() + [EOS] * h.finished
    return sum(log_softmax(model.logits((i, BOS) + tuple(seq[:t])))[seq[t]] for t in range(len(seq)))


@pytest.mark.parametrize("strategy", ["greedy", "sample"])
def test_temperature_zero_is_greedy(strategy):
    model = PrefixModel(5, vocab=6, seed=6)
    greedy = generate(model, 5, bos_id=BOS, eos_id=EOS, max_length=6)
    cold = generate(model, 5, bos_id=BOS, eos_id=EOS, strategy=strategy, temperature=0.0, max_length=6,
                    top_p=0.5, random_state=3)
    assert tokens(cold) == tokens(greedy)


def test_top_k_one_is_greedy():
    model = PrefixModel(5, vocab=6, seed=7)
    greedy = generate(model, 5, bos_id=BOS, eos_id=EOS, max_length=6)
    for temperature in (0.5, 1.0, 3.0):
        sampled = generate(model, 5, bos_id=BOS, eos_id=EOS, strategy="sample", top_k=1, temperature=temperature,
                           max_length=6, random_state=1)
        assert tokens(sampled) == tokens(greedy)


def test_sampling_is_reproducible_and_independent_of_the_batch():
    model = PrefixModel(6, vocab=5, seed=8, scale=0.5)
    options = dict(bos_id=BOS, eos_id=EOS, strategy="sample", max_length=8, num_return_sequences=3)
    first = generate(model, 6, random_state=42, **options)
    assert tokens(first) == tokens(generate(model, 6, random_state=42, **options))
    assert tokens(first) != tokens(generate(model, 6, random_state=43, **options))
    # the first four inputs alone, with an int seed: the same samples
    assert tokens(generate(PrefixModel(4, vocab=5, seed=8, scale=0.5), 4, random_state=42, **options)) == \
        tokens(first)[:4]
    # inputs 3..5 as a chunk of their own, with their slice of the per-input generators
    chunk = Shifted(model, 3)
    generators = input_generators(42, 6)[3:]
    assert tokens(generate(chunk, 3, random_state=generators, **options)) == tokens(first)[3:]
    assert len({tuple(s) for per_input in tokens(first) for s in per_input}) > 6  # samples do differ


class Shifted(PrefixModel):
    """Inputs ``offset..`` of a PrefixModel."""

    def __init__(self, model, offset):
        super().__init__(model.n_inputs - offset, model.vocab, model.seed, model.scale, model.eos_bias[offset:])
        self.offset, self.parent = offset, model

    def logits(self, key):
        return self.parent.logits((key[0] + self.offset,) + key[1:])


@pytest.mark.parametrize(("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.5, 0, 1.0), (2.0, 3, 1.0),
                                                             (1.0, 0, 0.7)])
def test_samples_follow_the_processed_distribution(temperature, top_k, top_p):
    n = 4000
    logits = np.array([0.0, 1.0, -0.5, 2.0, 0.3])

    class Fixed:
        def start(self):
            return None

        def step(self, toks, state):
            return np.tile(logits, (toks.size, 1)), state

        def reorder(self, state, indices):
            return state

    hyps = generate(Fixed(), n, bos_id=1, eos_id=0, strategy="sample", max_length=1, temperature=temperature,
                    top_k=top_k, top_p=top_p, random_state=0)
    drawn = np.array([h[0].tokens[0] if h[0].tokens.size else 0 for h in hyps])
    expected = np.exp(log_softmax(top_p_filter(top_k_filter(apply_temperature(logits, temperature), top_k), top_p)))
    counts = np.bincount(drawn, minlength=5)
    sigma = np.sqrt(n * expected * (1 - expected))
    assert np.all(np.abs(counts - n * expected) <= 4 * sigma + 1e-9)


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_min_length_blocks_the_end_token(strategy):
    model = PrefixModel(3, vocab=4, seed=9, eos_bias=[20.0] * 3)
    hyps = generate(model, 3, bos_id=BOS, eos_id=EOS, strategy=strategy, min_length=3, max_length=10,
                    random_state=0)
    assert all(len(h.tokens) == 3 and h.finished for per_input in hyps for h in per_input)


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_no_repeat_ngram_size(strategy, n):
    model = PrefixModel(4, vocab=4, seed=10, scale=3.0, eos_bias=[-10.0] * 4)
    plain = generate(model, 4, bos_id=BOS, eos_id=EOS, strategy=strategy, max_length=12, random_state=0)
    assert any(repeats_ngram(h.tokens.tolist(), n) for per_input in plain for h in per_input)
    hyps = generate(model, 4, bos_id=BOS, eos_id=EOS, strategy=strategy, max_length=12, no_repeat_ngram_size=n,
                    random_state=0)
    assert not any(repeats_ngram(h.tokens.tolist(), n) for per_input in hyps for h in per_input)


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_suppressed_tokens_are_never_generated(strategy):
    model = PrefixModel(4, vocab=5, seed=0, scale=3.0, eos_bias=[-5.0] * 4)
    plain = generate(model, 4, bos_id=BOS, eos_id=EOS, strategy=strategy, max_length=12, random_state=0)
    assert any(np.isin(h.tokens, [3, 4]).any() for per_input in plain for h in per_input)
    hyps = generate(model, 4, bos_id=BOS, eos_id=EOS, strategy=strategy, max_length=12, random_state=0,
                    suppress_tokens=[3, 4])
    assert not any(np.isin(h.tokens, [3, 4]).any() for per_input in hyps for h in per_input)
    with pytest.raises(ValueError, match="suppress_tokens must not hold eos_id"):
        generate(model, 4, bos_id=BOS, eos_id=EOS, suppress_tokens=[EOS])
    with pytest.raises(ValueError, match=r"suppress_tokens must be ids in \[0, 5\)"):
        generate(model, 4, bos_id=BOS, eos_id=EOS, suppress_tokens=[7])


def test_a_sequence_with_every_token_blocked_ends_unfinished():
    # Three tokens besides the end token, none may repeat, and the end token is blocked for 5 steps.
    model = PrefixModel(2, vocab=4, seed=11)
    for strategy in ("greedy", "beam"):
        hyps = generate(model, 2, bos_id=BOS, eos_id=EOS, strategy=strategy, no_repeat_ngram_size=1, min_length=5,
                        max_length=8)
        assert all(sorted(h.tokens.tolist()) == [1, 2, 3] and not h.finished for p in hyps for h in p)


class TinyTranslator(nn.Module):
    """Embedding + sinusoidal positions + Decoder + output layer, over a random memory."""

    def __init__(self, vocab, d, rng, attention):
        super().__init__()
        self.add_child("embed", nn.Embedding(vocab, d, rng, init_std=1.0))
        self.add_child("positions", nn.SinusoidalPositions(d))
        self.add_child("decoder", nn.Decoder(2, d, 2, 2 * d, rng, attention=attention, n_features=16,
                                             relative_positions=2 if attention == "softmax" else None))
        self.add_child("out", nn.Linear(d, vocab, rng))

    def embed(self, ids, offset):
        return self.children["positions"].forward(self.children["embed"].forward(ids)[0], offset=offset)[0]

    def decoding_model(self, memory, lengths, cached):
        return DecoderModel(self.children["decoder"], memory, lengths, embed=self.embed, cached=cached,
                            project=lambda h: self.children["out"].forward(h)[0], capacity=4)


@pytest.mark.parametrize("attention", ["softmax", "linear", "performer"])
@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_cached_generation_equals_uncached(attention, strategy):
    rng = np.random.default_rng(12)
    model = TinyTranslator(9, 8, rng, attention).astype(np.float64)
    memory, lengths = rng.standard_normal((3, 5, 8)), np.array([5, 2, 4])
    options = dict(bos_id=1, eos_id=0, strategy=strategy, max_length=9, num_beams=3, num_return_sequences=1,
                   random_state=0)
    cached = generate(model.decoding_model(memory, lengths, True), 3, **options)
    uncached = generate(model.decoding_model(memory, lengths, False), 3, **options)
    assert tokens(cached) == tokens(uncached)
    np.testing.assert_allclose([h.score for p in cached for h in p], [h.score for p in uncached for h in p],
                               rtol=1e-10)


# ------------------------------------------------------------------------------------ logit processors

logit_rows = hnp.arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(1, 12)),
                        elements=st.floats(-20, 20, allow_nan=False).map(lambda x: round(x, 1)))


def entropy(logits):
    p = np.exp(log_softmax(logits))
    return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0), axis=-1)


@given(logits=logit_rows, t=st.floats(0.05, 20))
def test_temperature_divides_the_logit_differences(logits, t):
    scaled = apply_temperature(logits, t)
    logp = log_softmax(scaled)
    # log p_i - log p_j = (l_i - l_j) / T: the order of the tokens is kept
    np.testing.assert_allclose(logp - logp[..., :1], (logits - logits[..., :1]) / t, atol=1e-9)
    np.testing.assert_array_equal(apply_temperature(logits, 1.0), logits)


@given(logits=logit_rows, t1=st.floats(0.05, 10), t2=st.floats(0.05, 10))
def test_higher_temperature_never_lowers_the_entropy(logits, t1, t2):
    low, high = sorted((t1, t2))
    assert np.all(entropy(apply_temperature(logits, low)) <= entropy(apply_temperature(logits, high)) + 1e-9)


@given(logits=logit_rows)
def test_temperature_zero_keeps_only_the_first_best_token(logits):
    out = apply_temperature(logits, 0.0)
    best = np.argmax(logits, axis=-1)
    assert np.all(np.isfinite(out).sum(axis=-1) == 1)
    np.testing.assert_array_equal(np.argmax(out, axis=-1), best)


@given(logits=logit_rows, k=st.integers(0, 14))
def test_top_k_keeps_exactly_the_k_best(logits, k):
    out = top_k_filter(logits, k)
    kept = np.isfinite(out)
    v = logits.shape[-1]
    assert np.all(kept.sum(axis=-1) == (v if k == 0 else min(k, v)))
    np.testing.assert_array_equal(out[kept], logits[kept])
    for row, keep in zip(logits, kept):
        if not keep.all():
            assert row[keep].min() >= row[~keep].max()
    if k == 1:
        np.testing.assert_array_equal(np.argmax(out, axis=-1), np.argmax(logits, axis=-1))


@given(logits=logit_rows, p=st.floats(0.01, 1.0))
def test_top_p_keeps_the_smallest_set_of_best_tokens_with_mass_p(logits, p):
    out = top_p_filter(logits, p)
    kept = np.isfinite(out)
    probs = np.exp(log_softmax(logits))
    np.testing.assert_array_equal(out[kept], logits[kept])  # the kept tokens keep their relative odds
    for row, keep, prob in zip(logits, kept, probs):
        assert keep.any()
        if not keep.all():
            assert row[keep].min() >= row[~keep].max()
        assert prob[keep].sum() >= p - 1e-9 or keep.all()
        # minimal: without its least likely token the kept set has less than p
        assert prob[keep].sum() - prob[keep].min() < p + 1e-9
    if p == 1.0:
        np.testing.assert_array_equal(out, logits)


@given(logits=logit_rows, p=st.floats(0.01, 1.0))
def test_top_p_filter_ignores_blocked_tokens(logits, p):
    assume(logits.shape[-1] > 1)
    blocked = logits.copy()
    blocked[..., 0] = -np.inf
    out = top_p_filter(blocked, p)
    assert np.all(out[..., 0] == -np.inf) and np.all(np.isfinite(out).sum(axis=-1) >= 1)


# ---------------------------------------------------------------------------------------------- errors

GOOD = dict(bos_id=BOS, eos_id=EOS)


@pytest.mark.parametrize(("name", "value"), [
    ("top_p", 0.0), ("top_p", 1.5), ("num_beams", 0), ("temperature", -1.0), ("temperature", float("inf")),
    ("top_k", -1), ("max_length", 0), ("min_length", -1), ("no_repeat_ngram_size", -2),
    ("num_return_sequences", 0), ("strategy", "nucleus"), ("length_penalty", float("nan")),
])
def test_invalid_parameters_name_the_parameter(name, value):
    with pytest.raises(ValueError, match=name):
        generate(PrefixModel(1), 1, **GOOD, **{name: value})



def test_check_generation_params_names_the_caller_and_takes_good_values():
    check_generation_params({"strategy": "beam", "num_beams": 4, "top_p": 1.0, "temperature": 0.0}, "predict")
    with pytest.raises(ValueError, match=r"The 'top_p' parameter of predict must be a float in the range \(0, 1\]"):
        check_generation_params({"top_p": 0.0}, "predict")
    with pytest.raises(TypeError, match=r"The 'temperature' parameter of predict must be a float in the range \[0"):
        check_generation_params({"temperature": float("inf")}, "predict")

def test_inconsistent_parameters():
    with pytest.raises(ValueError, match="num_return_sequences"):
        generate(PrefixModel(1), 1, **GOOD, strategy="beam", num_beams=2, num_return_sequences=3)
    with pytest.raises(ValueError, match="num_return_sequences must be 1 for greedy"):
        generate(PrefixModel(1), 1, **GOOD, num_return_sequences=2)
    with pytest.raises(ValueError, match="min_length"):
        generate(PrefixModel(1), 1, **GOOD, min_length=5, max_length=4)
    with pytest.raises(ValueError, match="eos_id"):
        generate(PrefixModel(1), 1, bos_id=1, eos_id=3)
    with pytest.raises(ValueError, match="random_state given as a list"):
        generate(PrefixModel(2), 2, **GOOD, strategy="sample", random_state=input_generators(0, 3))
    with pytest.raises(ValueError, match="'random_state' parameter of input_generators must be an int >= 0"):
        input_generators(-1, 2)


def test_a_model_with_the_wrong_output_is_named():
    class Bad(PrefixModel):
        def step(self, toks, state):
            return np.zeros((len(toks) + 1, 3)), state

    with pytest.raises(ValueError, match=r"model.step must return float scores of shape \(rows=1, V\)"):
        generate(Bad(1), 1, **GOOD)


def test_docstring_examples_run():
    result = doctest.testmod(decoding)
    assert result.attempted > 0 and result.failed == 0


# -------------------------------------------------------------------- min-p, repetition penalty, stop, stream
@given(logits=logit_rows, p=st.floats(0.0, 0.99))
def test_min_p_keeps_the_tokens_at_least_p_times_as_likely_as_the_best(logits, p):
    kept = np.isfinite(decoding.min_p_filter(logits, p))
    probs = np.exp(log_softmax(logits))
    np.testing.assert_array_equal(kept[probs >= p * probs.max(axis=-1, keepdims=True) * (1 + 1e-9)], True)
    np.testing.assert_array_equal(kept[probs < p * probs.max(axis=-1, keepdims=True) * (1 - 1e-9)], False)
    assert kept.any(axis=-1).all()


def test_repetition_penalty_multiplies_the_log_probabilities_of_seen_tokens():
    model = PrefixModel(1, vocab=5, seed=3)
    plain = generate(model, 1, bos_id=BOS, eos_id=EOS, max_length=1, strategy="greedy")[0][0]
    best = int(plain.tokens[0]) if plain.tokens.size else EOS
    assume_token = best if best != EOS else 1
    # With the best token in the context and a huge penalty, greedy search picks another one.
    other = generate(PrefixModel(1, vocab=5, seed=3), 1, bos_id=BOS, eos_id=EOS, max_length=1,
                     repetition_penalty=1e6, context=[[assume_token]])[0][0]
    assert other.tokens.size == 0 or int(other.tokens[0]) != assume_token
    same = generate(PrefixModel(1, vocab=5, seed=3), 1, bos_id=BOS, eos_id=EOS, max_length=1,
                    repetition_penalty=1.0, context=[[assume_token]])[0][0]
    assert tokens([[same]]) == tokens([[plain]])


def test_stop_ends_a_sequence_where_the_callback_says():
    model = PrefixModel(2, vocab=6, seed=1, eos_bias=[-50, -50])
    full = generate(model, 2, bos_id=BOS, eos_id=EOS, max_length=8)
    stopped = generate(PrefixModel(2, vocab=6, seed=1, eos_bias=[-50, -50]), 2, bos_id=BOS, eos_id=EOS,
                       max_length=8, stop=lambda i, toks: i == 0 and toks.size == 3)
    assert list(stopped[0][0].tokens) == list(full[0][0].tokens[:3]) and not stopped[0][0].finished
    assert list(stopped[1][0].tokens) == list(full[1][0].tokens)
    with pytest.raises(ValueError, match="not to strategy='beam'"):
        generate(model, 2, bos_id=BOS, eos_id=EOS, strategy="beam", stop=lambda i, t: False)


@pytest.mark.parametrize("params", [dict(), dict(strategy="sample", random_state=7, top_k=3, min_p=0.05),
                                    dict(no_repeat_ngram_size=2, repetition_penalty=1.5, context=[1, 3])])
def test_stream_yields_the_tokens_of_generate(params):
    gen_params = {**params, "context": [params["context"]]} if "context" in params else params
    expected = generate(PrefixModel(1, vocab=6, seed=2), 1, bos_id=BOS, eos_id=EOS, max_length=10, **gen_params)
    streamed = list(decoding.stream(PrefixModel(1, vocab=6, seed=2), bos_id=BOS, eos_id=EOS, max_length=10, **params))
    assert streamed == list(expected[0][0].tokens)


def test_stream_refuses_beam_search_and_bad_values():
    with pytest.raises(ValueError, match="cannot stream"):
        list(decoding.stream(PrefixModel(1), bos_id=BOS, eos_id=EOS, strategy="beam"))
    with pytest.raises(ValueError, match="'min_p'"):
        list(decoding.stream(PrefixModel(1), bos_id=BOS, eos_id=EOS, min_p=2.0))


# ------------------------------------------------------------------------------------------ shared steps


class Joining(PrefixModel):
    """PrefixModel read from contexts ``[i, BOS]`` (input i, its start token), with states that join."""

    def read(self, contexts):
        state = [tuple(int(t) for t in c) for c in contexts]
        self.calls.append(len(state))
        return state, np.stack([self.logits(key) for key in state])

    @staticmethod
    def join(states):
        return [key for state in states for key in state]


class Alone(PrefixModel):
    """PrefixModel's input ``i`` alone (one row), for generate()."""

    def __init__(self, i, **kw):
        super().__init__(i + 1, **kw)
        self.i = i

    def start(self):
        return [(self.i,)]


PARAMS = [dict(), dict(max_length=3), dict(min_length=4), dict(no_repeat_ngram_size=2),
          dict(repetition_penalty=2.0), dict(strategy="sample", random_state=5),
          dict(strategy="sample", random_state=6, num_return_sequences=3, top_k=4, temperature=0.7),
          dict(strategy="sample", random_state=7, top_p=0.8, min_p=0.05)]


def test_sequences_joining_and_leaving_shared_steps_get_what_they_get_alone():
    """Eight sequences of different parameters start at different steps (some in one step), end at different
    steps, one is removed half way, one stops at a stop rule: each gets generate()'s hypotheses for its input
    alone, and the rows of each step are the sequences decoding then."""
    kw = dict(vocab=6, seed=3, scale=1.5, eos_bias=np.full(8, -1.0))
    model = Joining(8, **kw)
    steps = decoding.SharedSteps(model, eos_id=EOS, bos_id=BOS, suppress_tokens=[1])
    starts = {0: [0, 1, 2], 2: [3], 3: [4, 5], 6: [6, 7]}
    stop = lambda tokens: tokens.size >= 2 and tokens[-1] == tokens[-2]  # noqa: E731
    got: dict = {}
    for t in range(40):
        for i in starts.get(t, []):
            extra = dict(stop=stop) if i == 2 else {}
            steps.add(i, [i, BOS], **({"max_length": 12} | PARAMS[i] | extra))
        if t == 5:
            steps.remove(4)
        for key, token, hypothesis in steps.step():
            assert key[0] != 4 or t < 5
            if hypothesis is not None:
                got[key] = hypothesis
                assert token is None or token == hypothesis.tokens[-1]
        if not steps and t > 6:
            break
    assert len(steps) == 0 and max(model.calls) >= 4
    for i in set(range(8)) - {4}:
        extra = dict(stop=lambda _, tokens: stop(tokens)) if i == 2 else {}
        alone = generate(Alone(i, **kw), 1, bos_id=BOS, eos_id=EOS, suppress_tokens=[1], context=[np.array([i, BOS])],
                         **({"max_length": 12} | PARAMS[i] | extra))[0]
        for j, want in enumerate(alone):
            have = got[(i, j)]
            np.testing.assert_array_equal(have.tokens, want.tokens)
            assert (have.log_prob, have.score, have.finished) == (want.log_prob, want.score, want.finished)


def test_shared_steps_errors():
    steps = decoding.SharedSteps(Joining(1), eos_id=EOS)
    with pytest.raises(ValueError, match="beam"):
        steps.add(0, [0, BOS], strategy="beam")
    with pytest.raises(ValueError, match="greedy"):
        steps.add(0, [0, BOS], num_return_sequences=2)
    with pytest.raises(ValueError, match="min_length"):
        steps.add(0, [0, BOS], min_length=5, max_length=3)
    with pytest.raises(ValueError, match="temperature"):
        steps.add(0, [0, BOS], strategy="sample", temperature=-1)
    with pytest.raises(ValueError, match="eos_id"):
        decoding.SharedSteps(Joining(1), eos_id=EOS, suppress_tokens=[EOS])
    assert steps.step() == [] and len(steps) == 0
