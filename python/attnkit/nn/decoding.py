"""Generation from any autoregressive model: greedy search, beam search and sampling.

:func:`generate` knows nothing of transformers. It drives a *decoding model*, any object with three
methods (the :class:`DecodingModel` protocol)::

    start() -> state                          # the state of every input, row i for input i
    step(tokens, state) -> (scores, state)    # tokens (R,) int64: each row's previous token;
                                              # scores (R, V): next-token logits or log-probabilities
    reorder(state, indices) -> state          # row i of the new state is row indices[i] of the old

``generate`` repeats, drops and permutes rows with ``reorder`` (several samples or beams per input,
inputs that are finished), so ``state`` may be anything the model can index by rows, e.g. a
:class:`attnkit.nn.DecoderCache`. Scores are normalised here with a log-softmax, so logits will do.
:class:`DecoderModel` is that protocol for an encoder-decoder: an embedding function, an
:class:`attnkit.nn.Decoder` with its key/value cache, and an output projection. :class:`SharedSteps` runs
greedy search and sampling of sequences that join and leave one batch between steps (continuous batching, a
server's loop), for a model that can also ``read`` contexts and ``join`` states.

The logit processors are small pure functions, usable on their own: :func:`apply_temperature`,
:func:`top_k_filter`, :func:`top_p_filter`, :func:`min_p_filter`. Each takes and returns an array of shape
(..., V) in which a token that may not be drawn is ``-inf``.

Choices that differ from some other libraries, each on purpose:

- ``temperature=0`` is greedy decoding (the limit of ``softmax(logits / T)``), not an error;
- beam search finishes each input on its own, and an input that is finished leaves the batch (its
  rows are dropped from the state, so the model does no more work for it);
- the length penalty divides each hypothesis's log-probability by *its own* length, never by the
  length of the longest sequence in the batch;
- sampling draws each input's tokens from a generator of its own, a function of ``random_state`` and
  the input's index only, so an input's samples do not depend on what else is in the batch (pass a
  list of generators from :func:`input_generators` to decode a long list of inputs in chunks).
"""

import numbers
from typing import Any, NamedTuple, Protocol

import numpy as np

from attnkit import ops
from attnkit._validation import Interval, Options, check_int, validate_params

__all__ = [
    "DecoderModel",
    "DecodingModel",
    "Hypothesis",
    "SharedSteps",
    "apply_temperature",
    "check_generation_params",
    "generate",
    "input_generators",
    "min_p_filter",
    "stream",
    "top_k_filter",
    "top_p_filter",
]

STRATEGIES = ("greedy", "beam", "sample")

# The parameters of generate() (and of estimators' predict that pass them on), checked together.
GENERATION_CONSTRAINTS = {
    "strategy": [Options(str, set(STRATEGIES))],
    "max_length": [Interval(numbers.Integral, 1, None, closed="left")],
    "min_length": [Interval(numbers.Integral, 0, None, closed="left")],
    "num_beams": [Interval(numbers.Integral, 1, None, closed="left")],
    "length_penalty": [Interval(numbers.Real, None, None, closed="neither")],
    "no_repeat_ngram_size": [Interval(numbers.Integral, 0, None, closed="left")],
    "temperature": [Interval(numbers.Real, 0, None, closed="left")],
    "top_k": [Interval(numbers.Integral, 0, None, closed="left")],
    "top_p": [Interval(numbers.Real, 0, 1, closed="right")],
    "min_p": [Interval(numbers.Real, 0, 1, closed="left")],
    "repetition_penalty": [Interval(numbers.Real, 0, None, closed="neither")],
    "num_return_sequences": [Interval(numbers.Integral, 1, None, closed="left")],
}


def check_generation_params(params, caller):
    """Check generation parameters against :data:`GENERATION_CONSTRAINTS`, as :func:`generate` does.

    For callers that pass them on to :func:`generate` later (an estimator's ``predict``), so a bad
    value is reported before any work, under the caller's name.

    Parameters
    ----------
    params : dict of str to object
        Some of the parameters of :func:`generate` (``strategy``, ``num_beams``, ``top_p``, ...).
    caller : str
        Who takes the parameters, for the message.

    Raises
    ------
    InvalidParameterError
        A ValueError and a TypeError, for the first value outside its constraints (NaN and inf are
        outside every interval).
    """
    validate_params(params, {name: GENERATION_CONSTRAINTS[name] for name in params}, caller=caller)


class DecodingModel(Protocol):
    """What :func:`generate` needs from a model (see the module docstring)."""

    def start(self):
        """The initial state, one row per input."""

    def step(self, tokens, state):
        """Next-token scores (R, V) for each row given its previous token (R,); the state after it."""

    def reorder(self, state, indices):
        """The state whose row i is row ``indices[i]`` of ``state``."""


class Hypothesis(NamedTuple):
    """One generated sequence.

    Attributes
    ----------
    tokens : ndarray of int64
        The generated token ids, without the start token and without the end token.
    log_prob : float
        Sum of the model's log-probabilities of the tokens, the end token included when ``finished``
        (the model's own distribution: before temperature, top-k or top-p).
    score : float
        ``log_prob / length ** length_penalty``, length counting the end token when ``finished``:
        what beam search ranks by.
    finished : bool
        Whether the sequence ended with the end token (rather than reaching ``max_length``, or a
        point where every token was blocked).
    """

    tokens: np.ndarray
    log_prob: float
    score: float
    finished: bool


class DecoderModel:
    """A :class:`DecodingModel` over an encoder-decoder's decoder: embed, decode, project to logits.

    Parameters
    ----------
    decoder : attnkit.nn.Decoder
        Or any object with ``forward(x, memory=, memory_lengths=)`` and, for ``cached=True``,
        ``start(memory, memory_lengths, capacity=)`` / ``step(x, cache)`` / ``reorder(cache, indices)``.
    memory : ndarray of shape (B, M, d_memory)
        The encoder's output for the B inputs.
    memory_lengths : array of int (B,), optional
        Real length of each memory row.
    embed : callable
        ``embed(ids, offset) -> x``: token ids (R, n) at positions ``offset .. offset + n - 1`` to the
        decoder's inputs (R, n, d_model) (embedding, scaling, positional encodings, as in training).
    project : callable
        ``project(h) -> logits``: decoder outputs (R, d_model) to next-token logits (R, V).
    cached : bool, default=True
        Decode with the decoder's key/value cache (one position per step). False recomputes the
        decoder over the whole prefix at every step, O(T^2): a baseline for tests and benchmarks.
    capacity : int, default=64
        Positions the cache holds before it grows (the maximum length avoids any regrowth).
    """

    def __init__(self, decoder, memory, memory_lengths=None, *, embed, project, cached=True, capacity=64):
        self.decoder, self.memory, self.embed, self.project = decoder, np.asarray(memory), embed, project
        self.memory_lengths = None if memory_lengths is None else np.asarray(memory_lengths)
        self.cached, self.capacity = bool(cached), check_int(capacity, "capacity", minimum=1)

    def start(self):
        if self.cached:
            return self.decoder.start(self.memory, self.memory_lengths, capacity=self.capacity)
        return np.empty((self.memory.shape[0], 0), np.int64), np.arange(self.memory.shape[0])

    def step(self, tokens, state):
        tokens = np.asarray(tokens)[:, None]
        if self.cached:
            out, state = self.decoder.step(self.embed(tokens, state.length), state)
            return self.project(out[:, 0]), state
        prefix, rows = state
        prefix = np.concatenate([prefix, tokens], axis=1)
        lengths = None if self.memory_lengths is None else self.memory_lengths[rows]
        out = self.decoder.forward(self.embed(prefix, 0), memory=self.memory[rows], memory_lengths=lengths)[0]
        return self.project(out[:, -1]), (prefix, rows)

    def reorder(self, state, indices):
        if self.cached:
            return self.decoder.reorder(state, indices)
        prefix, rows = state
        return prefix[indices], rows[indices]


# ------------------------------------------------------------------------------------------ processors


def apply_temperature(logits, temperature):
    """Divide logits by ``temperature``: ``softmax(logits / T)`` is flatter for T > 1, sharper for T < 1.

    Parameters
    ----------
    logits : array-like of shape (..., V)
        Logits or log-probabilities; ``-inf`` marks a blocked token.
    temperature : float >= 0
        ``T = 0`` keeps only the most likely token of each row (the first of ties), the limit of
        ``softmax(logits / T)`` as T -> 0: sampling becomes greedy decoding.

    Returns
    -------
    ndarray of float64, the shape of ``logits``
    """
    logits = np.asarray(logits, dtype=np.float64)
    check_generation_params({"temperature": temperature}, "apply_temperature")
    if temperature > 0:
        return logits / temperature
    best = np.argmax(logits, axis=-1)[..., None]
    out = np.full_like(logits, -np.inf)
    np.put_along_axis(out, best, np.take_along_axis(logits, best, axis=-1), axis=-1)
    return out


def top_k_filter(logits, k):
    """Keep the ``k`` largest logits of each row and set the others to ``-inf``.

    Exactly ``min(k, V)`` tokens are kept: of tokens tied at the k-th largest value, the lower ids,
    so ``top_k_filter(logits, 1)`` keeps the greedy token. ``k = 0`` keeps every token.

    Parameters
    ----------
    logits : array-like of shape (..., V)
    k : int >= 0

    Returns
    -------
    ndarray of float64, the shape of ``logits``

    Examples
    --------
    >>> from attnkit.nn.decoding import top_k_filter
    >>> top_k_filter([1.0, 3.0, 2.0, 3.0], 2).tolist()  # the two largest
    [-inf, 3.0, -inf, 3.0]
    """
    logits = np.array(logits, dtype=np.float64)
    check_generation_params({"top_k": k}, "top_k_filter")
    if k == 0 or k >= logits.shape[-1]:
        return logits
    kth = -np.partition(-logits, k - 1, axis=-1)[..., k - 1 : k]
    above = logits > kth
    tied = logits == kth
    room = k - above.sum(axis=-1, keepdims=True)
    keep = above | (tied & (np.cumsum(tied, axis=-1) <= room))
    logits[~keep] = -np.inf
    return logits


def top_p_filter(logits, p):
    """Nucleus filtering: keep the most likely tokens whose probabilities first sum to at least ``p``.

    With the tokens of a row sorted by probability (``softmax(logits)``, ties by lower id), a token
    is kept when the tokens before it sum to less than ``p``: the smallest such set, never empty.
    ``p = 1`` keeps every token.

    Parameters
    ----------
    logits : array-like of shape (..., V)
    p : float in (0, 1]

    Returns
    -------
    ndarray of float64, the shape of ``logits``

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit.nn.decoding import top_p_filter
    >>> top_p_filter(np.log([0.2, 0.5, 0.3]), 0.7).round(3).tolist()  # 0.5 + 0.3 >= 0.7
    [-inf, -0.693, -1.204]
    """
    logits = np.array(logits, dtype=np.float64)
    check_generation_params({"top_p": p}, "top_p_filter")
    if p == 1:
        return logits
    order = np.argsort(-logits, axis=-1, kind="stable")
    probs = np.take_along_axis(ops.softmax(logits, axis=-1), order, axis=-1)
    before = np.cumsum(probs, axis=-1) - probs
    drop = np.zeros(logits.shape, bool)
    np.put_along_axis(drop, order, before >= p, axis=-1)
    logits[drop] = -np.inf
    return logits


def min_p_filter(logits, p):
    """Keep the tokens whose probability is at least ``p`` times the most likely token's (Nguyen et al. 2024,
    "min-p sampling"): a cut that follows the model's confidence. ``p = 0`` keeps every token.

    Parameters
    ----------
    logits : array-like of shape (..., V)
    p : float in [0, 1)

    Returns
    -------
    ndarray of float64, the shape of ``logits``

    Examples
    --------
    >>> import numpy as np
    >>> from attnkit.nn.decoding import min_p_filter
    >>> min_p_filter(np.log([0.5, 0.3, 0.2]), 0.5).round(3).tolist()  # 0.2 < 0.5 * 0.5
    [-0.693, -1.204, -inf]
    """
    logits = np.array(logits, dtype=np.float64)
    check_generation_params({"min_p": p}, "min_p_filter")
    if p == 0:
        return logits
    # p(token) >= p * p(best)  <=>  logit >= best logit + log(p)
    logits[logits < logits.max(axis=-1, keepdims=True) + np.log(p)] = -np.inf
    return logits


def _penalise_repeats(allowed, history, context, penalty):
    """Multiply by ``penalty`` the log-probability of every token already in a row's text: its context
    (``context[r]``, the prompt) and its generated ``history`` (R, t). Log-probabilities are negative, so a
    penalty > 1 makes a repeat less likely (CTRL's rule, Keskar et al. 2019, on normalised scores)."""
    if penalty == 1:
        return
    seen = np.zeros(allowed.shape, bool)
    for r, tokens in enumerate(context):
        seen[r, tokens] = True
    if history.size:
        seen[np.repeat(np.arange(history.shape[0]), history.shape[1]), history.reshape(-1)] = True
    allowed[seen] *= penalty


def _block_repeated_ngrams(logp, history, n):
    """Set to -inf each token that would repeat an n-gram already in its row of ``history`` (R, t)."""
    t = history.shape[1]
    if n == 0 or t < n:
        return
    windows = np.lib.stride_tricks.sliding_window_view(history, n, axis=1)  # (R, t - n + 1, n)
    match = np.all(windows[:, :, :-1] == history[:, None, t - n + 1 :], axis=-1)
    rows, starts = np.nonzero(match)
    logp[rows, windows[rows, starts, -1]] = -np.inf


def _top_indices(scores, k):
    """Column indices of the k largest entries of each row, largest first, ties by lower index."""
    n = scores.shape[1]
    if k < n:
        kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1 : k]
        keep = scores >= kth
        if np.all(keep.sum(axis=1) == k):  # no ties across the boundary: sort only the k kept
            cols = np.nonzero(keep)[1].reshape(-1, k)
            order = np.argsort(-np.take_along_axis(scores, cols, axis=1), axis=1, kind="stable")
            return np.take_along_axis(cols, order, axis=1)
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


# ---------------------------------------------------------------------------------------------- seeds


def input_generators(random_state, n_inputs):
    """One random generator per input, each a function of ``random_state`` and the input's index only.

    Parameters
    ----------
    random_state : None, int, numpy Generator or RandomState
        An int gives the same generators on every run; a generator is drawn from once.
    n_inputs : int

    Returns
    -------
    list of numpy.random.Generator
        Element i is seeded by ``SeedSequence(seed, spawn_key=(i,))``, so that the generators of a
        list's first inputs do not depend on its length: slices of one call's list serve the chunks
        of a long input list.
    """
    n_inputs = check_int(n_inputs, "n_inputs", minimum=0)
    validate_params({"random_state": random_state}, {"random_state": ["random_state"]},
                    caller="input_generators")
    if random_state is None:
        seed = np.random.SeedSequence().entropy
    elif isinstance(random_state, np.random.Generator):
        seed = int(random_state.integers(2**63))
    elif isinstance(random_state, np.random.RandomState):
        seed = int(random_state.randint(2**63, dtype=np.int64))
    else:
        seed = int(random_state)  # >= 0: checked above
    return [np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(i,))) for i in range(n_inputs)]


def _row_generators(random_state, n_inputs, per_input):
    if isinstance(random_state, (list, tuple)):
        if len(random_state) != n_inputs or not all(isinstance(g, np.random.Generator) for g in random_state):
            raise ValueError(f"random_state given as a list must hold one numpy Generator per input "
                             f"({n_inputs}), got {len(random_state)} items")
        generators = list(random_state)
    else:
        generators = input_generators(random_state, n_inputs)
    if per_input == 1:
        return generators
    return [np.random.default_rng(int(g.integers(2**63))) for g in generators for _ in range(per_input)]


# ------------------------------------------------------------------------------------------- generate


def generate(model, n_inputs, *, bos_id, eos_id, strategy="greedy", max_length=64, min_length=0, num_beams=4,
             length_penalty=1.0, no_repeat_ngram_size=0, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
             repetition_penalty=1.0, num_return_sequences=1, random_state=None, suppress_tokens=(), context=None,
             stop=None):
    """Generate token sequences from a decoding model, batched over its inputs.

    Parameters
    ----------
    model : DecodingModel
        ``start()``, ``step(tokens, state)`` and ``reorder(state, indices)`` (see the module docstring).
    n_inputs : int
        Rows of ``model.start()``'s state.
    bos_id, eos_id : int
        The start token (fed first) and the end token (ends a sequence).
    strategy : {"greedy", "beam", "sample"}, default="greedy"
        The most likely token at each step; beam search over ``num_beams`` hypotheses per input; or a
        draw from the (temperature, top-k, top-p) processed distribution.
    max_length : int, default=64
        Most tokens generated per sequence, the end token included.
    min_length : int, default=0
        The end token is blocked until this many tokens have been generated.
    num_beams : int, default=4
        Beam width (beam search only).
    length_penalty : float, default=1.0
        Beam search ranks ``log_prob / length ** length_penalty``: > 0 favours longer sequences, 0 ranks
        by log-probability alone. Every strategy reports this score.
    no_repeat_ngram_size : int, default=0
        If > 0, no n-gram of this size occurs twice in a sequence.
    temperature : float, default=1.0
        Sampling only: ``softmax(logits / temperature)``; 0 is greedy.
    top_k : int, default=0
        Sampling only: draw from the ``top_k`` most likely tokens (0: all).
    top_p : float in (0, 1], default=1.0
        Sampling only: draw from the smallest set of most likely tokens of total probability >= top_p.
    min_p : float in [0, 1), default=0.0
        Sampling only: draw from the tokens at least ``min_p`` times as likely as the most likely one.
    repetition_penalty : float > 0, default=1.0
        Every strategy: the log-probability of each token already in the text (``context`` and the generated
        tokens) is multiplied by this; > 1 discourages repeats.
    num_return_sequences : int, default=1
        Sequences per input: the best ones of beam search (<= num_beams) or independent samples;
        greedy search has one.
    random_state : None, int, Generator, RandomState, or list of Generators
        Sampling only. A list holds one generator per input (see :func:`input_generators`).
    suppress_tokens : sequence of int, default=()
        Ids never generated, by any strategy: tokens a model was never trained to write (padding, a
        start token, ``<unk>`` when no training target held it), which an undertrained model may still
        rank first.
    context : sequence of arrays of int, optional
        Per input, the tokens before the generated ones (a prompt), which ``repetition_penalty`` also counts.
    stop : callable (input, tokens) -> bool, optional
        Greedy search and sampling: called after each step with an input's index and the tokens generated so
        far (an int64 array); True ends that sequence there, unfinished (e.g. a stop string was written).

    Returns
    -------
    list of list of Hypothesis
        Element i holds input i's ``num_return_sequences`` sequences: beam search's best first, samples
        in the order drawn.

    Notes
    -----
    Beam search keeps, per input and step, the ``num_beams`` best continuations that do not end;
    a continuation that ends is kept as a hypothesis when it ranks among the ``num_beams`` best
    candidates of the step (so ``num_beams=1`` is greedy search). An input stops when it has
    ``num_beams`` hypotheses and the best live continuation, scored at the current length, ranks no
    higher than the worst of them (HuggingFace's default rule; with ``length_penalty > 0`` a longer
    continuation could in principle still overtake it), or at ``max_length``, where the live
    continuations join the hypotheses unfinished.
    """
    params = dict(strategy=strategy, max_length=max_length, min_length=min_length, num_beams=num_beams,
                  length_penalty=length_penalty, no_repeat_ngram_size=no_repeat_ngram_size,
                  temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                  repetition_penalty=repetition_penalty, num_return_sequences=num_return_sequences)
    check_generation_params(params, "generate")
    n_inputs = check_int(n_inputs, "n_inputs", minimum=1)
    bos_id, eos_id = check_int(bos_id, "bos_id", minimum=0), check_int(eos_id, "eos_id", minimum=0)
    if min_length > max_length:
        raise ValueError(f"min_length ({min_length}) must be <= max_length ({max_length})")
    if strategy == "beam" and num_return_sequences > num_beams:
        raise ValueError(f"num_return_sequences ({num_return_sequences}) must be <= num_beams ({num_beams}): "
                         "beam search keeps num_beams hypotheses")
    if strategy == "greedy" and num_return_sequences != 1:
        raise ValueError(f"num_return_sequences must be 1 for greedy search (it has one answer), got "
                         f"{num_return_sequences}; use strategy='beam' or 'sample'")
    if stop is not None and strategy == "beam":
        raise ValueError("stop applies to greedy search and sampling, not to strategy='beam'")
    run = _Run(model, n_inputs, bos_id, eos_id, params, suppress_tokens, context, stop)
    if strategy == "beam":
        return run.beam()
    rngs = _row_generators(random_state, n_inputs, num_return_sequences) if strategy == "sample" else None
    return run.greedy_or_sample(rngs)


def stream(model, *, bos_id, eos_id, strategy="greedy", max_length=64, min_length=0, no_repeat_ngram_size=0,
           temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0, random_state=None,
           suppress_tokens=(), context=None):
    """Generate one sequence token by token, yielding each token id as it is chosen: what a chat window shows.

    The same choices as :func:`generate` for one input (``model.start()`` holds one row) with greedy search or
    sampling, the same parameters, and the same tokens for the same ``random_state``; the end token is not
    yielded. Beam search cannot stream: its best sequence is known only at the end.

    Yields
    ------
    int
    """
    params = dict(strategy=strategy, max_length=max_length, min_length=min_length, num_beams=1, length_penalty=1.0,
                  no_repeat_ngram_size=no_repeat_ngram_size, temperature=temperature, top_k=top_k, top_p=top_p,
                  min_p=min_p, repetition_penalty=repetition_penalty, num_return_sequences=1)
    check_generation_params(params, "stream")
    if strategy == "beam":
        raise ValueError("strategy='beam' cannot stream (its best sequence is known only at the end); use "
                         "'greedy' or 'sample'")
    if min_length > max_length:
        raise ValueError(f"min_length ({min_length}) must be <= max_length ({max_length})")
    run = _Run(model, 1, check_int(bos_id, "bos_id", minimum=0), check_int(eos_id, "eos_id", minimum=0), params,
               suppress_tokens, None if context is None else [context])
    rngs = _row_generators(random_state, 1, 1) if strategy == "sample" else None
    state, tokens = model.start(), np.array([run.bos_id], np.int64)
    history = np.empty((1, 0), np.int64)
    for t in range(max_length):
        _, allowed, state = run.log_probs(tokens, state, history[:, :t], np.zeros(1, np.intp))
        blocked = np.all(allowed == -np.inf, axis=1)
        choice = np.argmax(allowed, axis=1) if rngs is None else _sample(allowed, blocked, rngs, params)
        if blocked[0] or choice[0] == run.eos_id:
            return
        history = _room_for(history, t)
        history[:, t] = choice
        yield int(choice[0])
        tokens = choice


class _Run:
    """One call of generate: the model, the token ids and the parameters."""

    def __init__(self, model, n_inputs, bos_id, eos_id, params, suppress, context=None, stop=None):
        self.model, self.n_inputs, self.bos_id, self.eos_id = model, n_inputs, bos_id, eos_id
        self.suppress = np.asarray(suppress, dtype=np.int64).reshape(-1)
        if np.isin(eos_id, self.suppress):
            raise ValueError(f"suppress_tokens must not hold eos_id ({eos_id}): every sequence must be able to end")
        if context is not None and len(context) != n_inputs:
            raise ValueError(f"context must hold one token array per input ({n_inputs}), got {len(context)}")
        self.context = None if context is None else [np.asarray(c, dtype=np.int64).reshape(-1) for c in context]
        self.p, self.stop = params, stop
        self._log_probs = _LogProbs(bos_id, eos_id, self.suppress)

    def log_probs(self, tokens, state, history, inputs):
        """The model's step, normalised; and the same with blocked tokens at -inf (suppressed, min_length,
        n-grams, penalised repeats): a copy where any is blocked or penalised, else the same array."""
        scores, state = self.model.step(tokens, state)
        logp = self._log_probs(scores, tokens.shape[0])
        allowed = _blockable(logp, self.p, self.suppress, history.shape[1])
        if history.shape[1] < self.p["min_length"]:
            allowed[:, self.eos_id] = -np.inf
        context = [np.empty(0, np.int64)] * len(inputs) if self.context is None else [self.context[i] for i in inputs]
        _penalise_repeats(allowed, history, context, self.p["repetition_penalty"])
        _block_repeated_ngrams(allowed, history, self.p["no_repeat_ngram_size"])
        return logp, allowed, state

    def hypothesis(self, tokens, log_prob, finished):
        length = max(tokens.size + finished, 1)
        return Hypothesis(tokens, float(log_prob), float(log_prob / length ** self.p["length_penalty"]),
                          bool(finished))

    # -- greedy search and sampling: independent rows --------------------------------------------------
    def greedy_or_sample(self, rngs):
        per_input, max_length = self.p["num_return_sequences"], self.p["max_length"]
        state = self.model.start()
        if per_input > 1:
            state = self.model.reorder(state, np.repeat(np.arange(self.n_inputs), per_input))
        rows = np.arange(self.n_inputs * per_input)  # the (input, sample) each live row decodes
        history = np.empty((rows.size, 0), np.int64)
        log_prob = np.zeros(rows.size)
        tokens = np.full(rows.size, self.bos_id, np.int64)
        results = [None] * rows.size
        for t in range(max_length):
            logp, allowed, state = self.log_probs(tokens, state, history[:, :t], rows // per_input)
            blocked = np.all(allowed == -np.inf, axis=1)
            if rngs is None:
                choice = np.argmax(allowed, axis=1)
            else:
                choice = _sample(allowed, blocked, [rngs[r] for r in rows], self.p)
            log_prob += np.where(blocked, 0.0, logp[np.arange(rows.size), choice])
            history = _room_for(history, t)
            history[:, t] = choice
            ended = blocked | (choice == self.eos_id) | (t + 1 == max_length)
            if self.stop is not None:
                ended |= [not e and bool(self.stop(r // per_input, h[: t + 1]))
                          for r, h, e in zip(rows, history, ended)]
            for i in np.flatnonzero(ended):
                finished = not blocked[i] and choice[i] == self.eos_id
                length = t + 1 - (blocked[i] or finished)
                results[rows[i]] = self.hypothesis(history[i, :length].copy(), log_prob[i], finished)
            if ended.all():
                break
            if ended.any():
                keep = np.flatnonzero(~ended)
                state = self.model.reorder(state, keep)
                rows, history, log_prob, choice = rows[keep], history[keep], log_prob[keep], choice[keep]
            tokens = choice
        return [results[i * per_input : (i + 1) * per_input] for i in range(self.n_inputs)]

    # -- beam search --------------------------------------------------------------------------------------
    def beam(self):
        k, max_length, eos = self.p["num_beams"], self.p["max_length"], self.eos_id
        inputs = np.arange(self.n_inputs)  # the input each group of k rows decodes
        state = self.model.reorder(self.model.start(), np.repeat(inputs, k))
        sums = np.full((inputs.size, k), -np.inf)
        sums[:, 0] = 0.0  # one live beam per input at first: the others are copies
        history = np.empty((inputs.size * k, 0), np.int64)
        tokens = np.full(inputs.size * k, self.bos_id, np.int64)
        pools: list[list[Any]] = [[] for _ in range(self.n_inputs)]
        for t in range(max_length):
            _, allowed, state = self.log_probs(tokens, state, history[:, :t], np.repeat(inputs, k))
            vocab = allowed.shape[1]
            stuck = np.all(allowed == -np.inf, axis=1).reshape(inputs.size, k) & (sums > -np.inf)
            candidates = (sums.reshape(-1, 1) + allowed).reshape(inputs.size, k * vocab)
            top = _top_indices(candidates, min(2 * k, k * vocab))
            sources = np.zeros((inputs.size, k), np.intp)
            next_tokens = np.full((inputs.size, k), eos, np.int64)
            next_sums = np.full((inputs.size, k), -np.inf)
            done = np.zeros(inputs.size, bool)
            for a in range(inputs.size):
                pool, live = pools[inputs[a]], 0
                for beam in np.flatnonzero(stuck[a]):  # every token blocked: the beam ends here, unfinished
                    pool.append(self.hypothesis(history[a * k + beam, :t].copy(), sums[a, beam], False))
                for rank, c in enumerate(top[a]):
                    score = candidates[a, c]
                    if score == -np.inf:
                        break
                    beam, token = divmod(int(c), vocab)
                    if token == eos:
                        if rank < k:
                            pool.append(self.hypothesis(history[a * k + beam, :t].copy(), score, True))
                    elif live < k:
                        sources[a, live], next_tokens[a, live], next_sums[a, live] = beam, token, score
                        live += 1
                if t + 1 == max_length:  # the live beams join the hypotheses, unfinished
                    for j in range(live):
                        seq = np.append(history[a * k + sources[a, j], :t], next_tokens[a, j])
                        pool.append(self.hypothesis(seq, next_sums[a, j], False))
                self.keep_best(pool)
                done[a] = live == 0 or t + 1 == max_length
                if not done[a] and len(pool) == k:
                    best_live = next_sums[a, 0] / (t + 1) ** self.p["length_penalty"]
                    done[a] = best_live <= pool[-1].score
            if done.all():
                break
            keep = np.flatnonzero(~done)
            rows = (keep[:, None] * k + sources[keep]).reshape(-1)
            state = self.model.reorder(state, rows)
            history = _room_for(history[rows], t)
            history[:, t] = next_tokens[keep].reshape(-1)
            tokens, sums, inputs = history[:, t].copy(), next_sums[keep], inputs[keep]
        return [pool[: self.p["num_return_sequences"]] for pool in pools]

    def keep_best(self, pool):
        """Sort ``pool`` best first and keep num_beams (an earlier hypothesis wins a tie: the sort is
        stable). Once per input and step: inserting each hypothesis in order cost O(num_beams) apiece,
        which made a huge num_beams run for hours."""
        pool.sort(key=lambda hypothesis: -hypothesis.score)
        del pool[self.p["num_beams"] :]


def _blockable(logp, params, suppress, t):
    """``logp`` with the suppressed tokens at -inf, a copy for the step at position ``t`` to block or penalise
    more in: or ``logp`` itself where that step changes nothing (greedy search and sampling without
    ``min_length`` left, penalties, n-gram blocking or suppressed tokens read it as it is)."""
    if not (suppress.size or t < params["min_length"] or params["repetition_penalty"] != 1.0
            or params["no_repeat_ngram_size"]):
        return logp
    allowed = logp.copy()
    allowed[:, suppress] = -np.inf
    return allowed


class _LogProbs:
    """A model's steps' scores (rows, V) as float64 log-probabilities, checked; ``best``: each row's argmax of
    them. Every step's are written into buffers kept across steps and grown as needed: a result is read within its
    step (the next overwrites it)."""

    def __init__(self, bos_id, eos_id, suppress):
        self.bos_id, self.eos_id, self.suppress = bos_id, eos_id, suppress
        self._buffer, self._best = np.empty(0), np.empty(0, np.int64)
        self.best = self._best

    def __call__(self, scores, rows):
        scores = np.asarray(scores)
        if scores.ndim != 2 or scores.shape[0] != rows or scores.dtype.kind != "f":
            raise ValueError(f"model.step must return float scores of shape (rows={rows}, V), got "
                             f"{scores.dtype} {scores.shape}")
        if self.eos_id >= scores.shape[1] or self.bos_id >= scores.shape[1]:
            raise ValueError(f"bos_id ({self.bos_id}) and eos_id ({self.eos_id}) must be < V, the model's "
                             f"vocabulary size ({scores.shape[1]})")
        top = scores.max(initial=-np.inf)  # NaN where any score is
        if np.isnan(top) or top == np.inf:
            raise ValueError("model.step returned NaN scores (or +inf): the model's weights or inputs are not finite")
        suppress = self.suppress
        if suppress.size and not (0 <= suppress.min() and suppress.max() < scores.shape[1]):
            raise ValueError(f"suppress_tokens must be ids in [0, {scores.shape[1]}) (the model's vocabulary size)")
        if self._buffer.size < scores.size:
            self._buffer = np.empty(2 * scores.size)
        logp = self._buffer[: scores.size].reshape(scores.shape)
        # Into the kept buffer: the new pages of a vocabulary-wide batch (6 MB a step of 16 rows of 49,152) cost
        # more than its exps. float32 scores are widened there row by row, float64 ones copied first.
        if scores.dtype != np.float32:
            np.copyto(logp, scores)
            scores = logp
        if self._best.size < rows:
            self._best = np.empty(2 * rows, np.int64)
        self.best = self._best[:rows]
        return ops.log_softmax(scores, out=logp, argmax=self.best)


# ------------------------------------------------------------------------------------ shared steps


class _Sequence:
    """One sequence of :class:`SharedSteps`: its context, parameters, generator and what it wrote so far."""

    def __init__(self, key, context, params, rng, stop):
        self.key, self.context, self.params, self.rng, self.stop = key, context, params, rng, stop
        self.history: list[int] = []
        self.log_prob = 0.0
        self.removed = False


class SharedSteps:
    """Greedy search and sampling of sequences that join and leave one batch between steps (continuous
    batching: a server's generation loop). Each sequence gets the tokens :func:`generate` (and :func:`stream`)
    give its context alone, with the same parameters and ``random_state``: its rows never see the others.

    Parameters
    ----------
    model
        A decoding model that reads contexts and joins states: ``read(contexts) -> (state, scores)`` (a
        prefill of the token arrays ``contexts``, one row each, and their next-token scores),
        ``join(states) -> state`` (rows of each state in turn), ``step(tokens, state) -> (scores, state)`` and
        ``reorder(state, indices) -> state`` as in :class:`DecodingModel`. A context holds the start token.
        Optionally ``step_and_read(tokens, state, contexts) -> (scores, state) or None``: a step of the state's
        rows and a read of ``contexts`` in one call (their rows after the state's), or None where it cannot.
    eos_id : int
        The end token.
    bos_id : int, default=0
        Checked against the vocabulary as :func:`generate` checks it (contexts hold it already).
    suppress_tokens : sequence of int
        Ids never written.
    """

    def __init__(self, model, *, eos_id, bos_id=0, suppress_tokens=()):
        self.model, self.eos_id, self.bos_id = model, check_int(eos_id, "eos_id", minimum=0), bos_id
        self.suppress = np.asarray(suppress_tokens, dtype=np.int64).reshape(-1)
        if np.isin(self.eos_id, self.suppress):
            raise ValueError(f"suppress_tokens must not hold eos_id ({eos_id}): every sequence must be able to end")
        self._rows: list[_Sequence] = []  # decoding, in the state's row order
        self._waiting: list[_Sequence] = []  # added, read at the next step
        self._state: Any = None
        self._tokens = np.empty(0, np.int64)  # each row's last token, fed at the next step
        self._log_probs = _LogProbs(bos_id, self.eos_id, self.suppress)

    def __len__(self):
        """Sequences decoding or waiting to start."""
        return len(self._rows) + len(self._waiting)

    def add(self, key, context, *, strategy="greedy", max_length=64, min_length=0, no_repeat_ngram_size=0,
            temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0, num_return_sequences=1,
            random_state=None, stop=None):
        """Start ``num_return_sequences`` sequences continuing ``context`` (token ids) at the next :meth:`step`,
        keyed ``(key, 0)``, ``(key, 1)``, ...: what :func:`generate` gives for this one input with these
        parameters (greedy search or sampling; ``stop(tokens)`` ends a sequence as generate's ``stop`` does)."""
        params = dict(strategy=strategy, max_length=max_length, min_length=min_length, num_beams=1,
                      length_penalty=1.0, no_repeat_ngram_size=no_repeat_ngram_size, temperature=temperature,
                      top_k=top_k, top_p=top_p, min_p=min_p, repetition_penalty=repetition_penalty,
                      num_return_sequences=num_return_sequences)
        check_generation_params(params, "SharedSteps.add")
        if strategy == "beam":
            raise ValueError("SharedSteps decodes greedy search and sampling; beam search runs in generate()")
        if strategy == "greedy" and num_return_sequences != 1:
            raise ValueError(f"num_return_sequences must be 1 for greedy search, got {num_return_sequences}")
        if min_length > max_length:
            raise ValueError(f"min_length ({min_length}) must be <= max_length ({max_length})")
        context = np.asarray(context, dtype=np.int64).reshape(-1)
        rngs = (_row_generators(random_state, 1, num_return_sequences) if strategy == "sample"
                else [None] * num_return_sequences)
        self._waiting += [_Sequence((key, j), context, params, rng, stop) for j, rng in enumerate(rngs)]

    def remove(self, key):
        """Stop the sequences of ``key`` (a client went away): they leave at the next step, unanswered."""
        for seq in self._rows + self._waiting:
            if seq.key[0] == key:
                seq.removed = True

    def step(self):
        """Read the sequences added since the last step, and write one token of every sequence.

        Returns
        -------
        list of (key, token, hypothesis)
            For each sequence this step: its key ``(key, j)``; the token written (None when it ended without
            writing one: the end token, or every token blocked); and once it ended its :class:`Hypothesis`
            (as :func:`generate` returns it), else None. Ended sequences leave the batch.
        """
        self._drop([i for i, seq in enumerate(self._rows) if seq.removed])
        self._waiting = [seq for seq in self._waiting if not seq.removed]
        states, scores = [], []
        together = getattr(self.model, "step_and_read", None)
        if self._rows and self._waiting and together is not None:
            both = together(self._tokens, self._state, [seq.context for seq in self._waiting])
            if both is not None:  # the rows' step and the new contexts' read in one call
                states.append(both[1])
                scores.append(np.asarray(both[0]))
                self._rows += self._waiting
                self._waiting = []
        if self._rows and not states:
            rows_scores, state = self.model.step(self._tokens, self._state)
            states.append(state)
            scores.append(np.asarray(rows_scores))
        if self._waiting:
            state, rows_scores = self.model.read([seq.context for seq in self._waiting])
            states.append(state)
            scores.append(np.asarray(rows_scores))
            self._rows += self._waiting
            self._waiting = []
        if not states:
            return []
        self._state = states[0] if len(states) == 1 else self.model.join(states)
        logp = self._log_probs(scores[0] if len(scores) == 1 else np.concatenate(scores), len(self._rows))
        events, ended, tokens = [], [], np.empty(len(self._rows), np.int64)
        for i, seq in enumerate(self._rows):
            choice, blocked = self._choose(seq, logp[i : i + 1], int(self._log_probs.best[i]))
            seq.log_prob += 0.0 if blocked else float(logp[i, choice])
            seq.history.append(choice)
            t = len(seq.history)
            done = blocked or choice == self.eos_id or t == seq.params["max_length"]
            if not done and seq.stop is not None:
                done = bool(seq.stop(np.asarray(seq.history, np.int64)))
            written = None if blocked or choice == self.eos_id else choice
            hypothesis = None
            if done:
                finished = not blocked and choice == self.eos_id
                length = t - (blocked or finished)
                hypothesis = Hypothesis(np.asarray(seq.history[:length], np.int64), seq.log_prob,
                                        seq.log_prob / max(length + finished, 1), finished)
                ended.append(i)
            events.append((seq.key, written, hypothesis))
            tokens[i] = choice
        self._tokens = tokens
        self._drop(ended)
        return events

    def _choose(self, seq, logp, best):
        """This step's token of ``seq`` from its row of log-probabilities (1, V) and their argmax ``best``, and
        whether every token was blocked: the rules of generate's greedy search and sampling, for one row."""
        p, t = seq.params, len(seq.history)
        allowed = _blockable(logp, p, self.suppress, t)
        if allowed is not logp:  # something to block or penalise (else the row and its argmax are read as they are)
            history = np.asarray(seq.history, np.int64)[None, :]
            if t < p["min_length"]:
                allowed[:, self.eos_id] = -np.inf
            _penalise_repeats(allowed, history, [seq.context], p["repetition_penalty"])
            _block_repeated_ngrams(allowed, history, p["no_repeat_ngram_size"])
            best = int(np.argmax(allowed[0]))
        blocked = bool(allowed[0, best] == -np.inf)  # the best token blocked: every token is
        if seq.rng is None:
            return best, blocked
        return int(_sample(allowed, np.array([blocked]), [seq.rng], p)[0]), blocked

    def _drop(self, rows):
        """Rows ``rows`` leave the batch (its state and last tokens)."""
        if not rows:
            return
        keep = np.setdiff1d(np.arange(len(self._rows)), rows)
        self._rows = [self._rows[i] for i in keep]
        self._tokens = self._tokens[keep]
        self._state = self.model.reorder(self._state, keep) if keep.size else None


def _room_for(history, t):
    """``history`` (rows, capacity) with a column ``t``: doubled when full, never allocated for max_length up
    front (a max_length of 10^12 is an upper bound, not a size)."""
    if t < history.shape[1]:
        return history
    grown = np.empty((history.shape[0], max(2 * history.shape[1], 64)), np.int64)
    grown[:, :t] = history[:, :t]
    return grown


def _sample(allowed, blocked, rngs, p):
    """One token per row from the processed distribution; every row draws from its own generator."""
    logits = np.where(blocked[:, None], 0.0, allowed)  # a blocked row's draw is discarded
    logits = top_p_filter(top_k_filter(apply_temperature(logits, p["temperature"]), p["top_k"]), p["top_p"])
    logits = min_p_filter(logits, p["min_p"])
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    cdf = np.cumsum(probs, axis=1)
    u = np.array([g.random() for g in rngs]) * cdf[:, -1]
    # The first token whose cumulative mass exceeds u: it has non-zero probability, since u < total.
    return np.argmax(cdf > u[:, None], axis=1)
