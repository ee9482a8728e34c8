"""Seq2SeqTransformer: an encoder-decoder transformer from strings to strings (or token ids to token ids), as
a scikit-learn estimator."""

import numbers
import os
from typing import Any

import numpy as np
from sklearn.utils.validation import check_is_fitted

from attnkit import ops
from attnkit._validation import Interval, Options
from attnkit._warnings import warn
from attnkit.estimators._jobs import fit_context, threaded
from attnkit.estimators._token_input import IDS, text_tokenizer
from attnkit.estimators._trainable import Samples, TrainableEstimator, validation_pair
from attnkit.io import register_estimator, to_json
from attnkit.nn import CrossEntropyLoss, decoding
from attnkit.nn.encoder_decoder import EncoderDecoder
from attnkit.nn.positional import MAX_POSITIONS
from attnkit.text import SubwordTokenizer, Texts, Tokenizer, Vocabulary, pad_sequences

__all__ = ["Seq2SeqTransformer"]

# Positions the decoder's cache holds before it grows: most targets fit; max_length is only an upper bound.
CACHE_CAPACITY = 256

RELATIVE_WINDOW = 16  # clipping distance of positional="relative"


@register_estimator
class Seq2SeqTransformer(TrainableEstimator):
    """Sequence-to-sequence transformer trained on pairs of strings: rewriting, transliteration,
    translation, grapheme-to-phoneme, short summaries.

    Source and target texts are split into characters or words (:class:`attnkit.text.Tokenizer`),
    mapped to ids through vocabularies learnt in ``fit`` and fed to a pre-LayerNorm encoder-decoder
    transformer (:class:`attnkit.nn.EncoderDecoder`) trained with teacher forcing, padding masks, a
    causal decoder mask and label-smoothed cross-entropy. :meth:`predict` generates with greedy
    search, beam search or sampling (:func:`attnkit.decoding.generate`), one decoder step per token
    thanks to the decoder's key/value cache. Sequences already split into tokens can be given as
    arrays of token ids instead of strings (see ``padding_id``).

    Parameters
    ----------
    tokenizer : {"char", "word", "bpe", "unigram"}, default="char"
        Character tokens suit rewriting, transliteration and spelling tasks and small data; word
        tokens (punctuation and contractions split) suit translation and summaries. ``"bpe"`` and
        ``"unigram"`` learn subword pieces from each side's training texts
        (:class:`attnkit.text.SubwordTokenizer`, needs the ``pretrained`` extra), which spell any word and
        detokenize exactly.
    lowercase : bool, default=False
        Lowercase sources and targets (case is often what the task is about, so off by default).
    max_source_features, max_target_features : int, optional
        Keep only the most frequent tokens of each side (others become ``<unk>``); for subword
        tokenizers, the number of pieces each side learns (8000 when None, fewer on small data).
    min_df : int or float, default=1
        Drop tokens found in fewer training texts (a count, or a fraction of the texts). Word and character
        tokens only: a subword tokenizer's pieces spell every text exactly, and dropping rare ones would turn
        them into ``<unk>`` in the targets, so ``tokenizer="bpe"`` or ``"unigram"`` needs ``min_df=1`` (size
        their vocabularies with ``max_source_features`` / ``max_target_features``).
    handle_unknown : {"unk", "error"}, default="unk"
        A source token outside the vocabulary (a character never seen in training) becomes ``<unk>``,
        or raises a ValueError naming the text and the tokens.
    max_source_len, max_target_len : int, default=128
        Longest source (tokens, an end token included) and target; longer texts are truncated in
        training and prediction, and generation stops after ``max_target_len`` tokens.
    padding_id : int, default=0
        For token-id input only: the id that marks padding in ``X`` (and in a 2-D ``y``); these
        entries are removed from each row, and pad the rows :meth:`predict` returns.
    d_model : int, default=64
        Width of the encoder and the decoder, unless given separately below.
    encoder_d_model, decoder_d_model : int, optional
        Widths of the two stacks when they differ (the cross-attention projects between them).
    n_heads : int, default=4
    encoder_layers, decoder_layers : int, default=2
    d_ff : int, optional
        Feed-forward width (default 4 x each stack's width).
    dropout : float, default=0.1
    attention : {"softmax", "linear", "performer"}, default="softmax"
        Every attention of the model: exact softmax, linear (elu+1; causal prefix sums in the decoder,
        a running state while generating) or Performer's positive random features.
    positional : {"sinusoidal", "learned", "relative", None}, default="sinusoidal"
        Absolute encodings added to the embeddings, relative-position biases in the self-attentions,
        or none (an ablation: the model then sees its inputs as bags of tokens).
    label_smoothing : float in [0, 1), default=0.1
    batch_size : int, default=32
        Pairs per update.
    learning_rate : float, default=3e-3
        Peak AdamW learning rate (linear warm-up over the first 5% of the updates, then linear decay).
    weight_decay : float, default=0.01
    max_iter : int, default=50
        Epochs: the learning rate decays to 0 at the last, which is what makes exact outputs (a model
        keeps its last weights unless ``early_stopping``).
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the pairs (or use ``validation_data`` given to :meth:`fit`),
        stop when their loss has not improved for ``n_iter_no_change`` epochs and keep the best
        weights. Off by default: the validation loss bottoms out while the learning rate is still high
        and exact match still improving (the case task stopped after 21-28 of 50 epochs at 92.6-98.6%
        exact match on new pairs; the whole schedule reached 99.6-100%, 3 seeds each), so it fits
        ``max_iter`` epochs unless told to stop. ``validation_data`` is still scored after each epoch.
    validation_fraction : float, default=0.1
    n_iter_no_change : int, default=5
    tol : float, default=1e-4
    warm_start : bool, default=False
        Continue training the fitted model (same vocabularies) instead of starting anew.
    checkpoint_path : str, os.PathLike or None, default=None
        If set, ``fit`` saves the estimator there (:meth:`save`, atomically) every
        ``checkpoint_every`` epochs, with that epoch's weights and history. To resume, load it
        (:func:`attnkit.load`), ``set_params(warm_start=True)`` and ``fit`` again: training
        continues from those weights for up to ``max_iter`` more epochs, ``n_iter_`` counting on.
        The file does not keep the path: give it again to the loaded estimator to keep checkpointing.
    checkpoint_every : int, default=1
        Epochs between checkpoints.
    random_state : int, RandomState instance, Generator or None, default=None
        Weights, dropout, shuffling and the validation split.
    n_jobs : int or None, default=None
        Threads of attnkit's kernels during this estimator's calls (fit, partial_fit, predict, score, ...):
        None leaves the current count (:func:`attnkit.set_num_threads`, ``OMP_NUM_THREADS``), -1 takes
        every CPU, -2 all but one; the count of before is restored when the call returns. The count is
        the calling thread's own: threads calling at once with different ``n_jobs`` each get theirs, and
        the process's count (:func:`attnkit.set_num_threads`) and other libraries' threads (NumPy's BLAS)
        are left alone.
    verbose : int, default=0
        1: one line per epoch (loss, validation loss and token accuracy, tokens/s, time).

    Attributes
    ----------
    tokenizer_ : attnkit.text.Tokenizer or None
        The tokenizer of text input (None for token-id input).
    source_vocabulary_, target_vocabulary_ : attnkit.text.Vocabulary
        For token-id input, the tokens are the ids.
    model_ : attnkit.nn.EncoderDecoder
        The trained network (read-only).
    n_iter_ : int
        Epochs run (over all ``warm_start`` fits).
    loss_curve_ : list of float
        Mean training loss of each epoch (label-smoothed token cross-entropy), over all fits.
    validation_loss_curve_ : list of float
        Validation token cross-entropy (teacher forced, no smoothing) after each epoch (empty without
        validation).
    validation_scores_ : list of float
        Validation next-token accuracy (teacher forced) after each epoch (empty without validation).
    best_validation_score_ : float or None
        Validation next-token accuracy of the kept epoch: the epoch whose weights the model holds
        (the one of lowest validation loss under early stopping, else the last); None without
        validation.
    best_epoch_ : int or None
        The kept epoch (1-based, counted over all fits, as ``loss_curve_``): the one of lowest validation
        loss under early stopping or after Ctrl-C, else the last; None when Ctrl-C came before the first
        epoch ended. :func:`attnkit.plotting.plot_learning_curve` marks it.
    n_features_in_ : int
        Number of columns of token-id input seen in ``fit`` (not defined for text input).

    Notes
    -----
    The defaults were chosen on rewriting tasks of generated pairs of short strings, scored by exact
    match on 500 new ones. Case conversion with a ``<U>``/``<L>`` tag
    (:func:`attnkit.datasets.make_case_pairs`), 2,000 training pairs: 99.6%, 99.8% and 100% over 3
    seeds, about 100 s each on one shared core (``benchmarks/eval_seq2seq.py --tasks defaults``); the
    same task over 300 CMUdict words: 100% on 2 seeds; with 1,000 pairs only 96.4-97.6% (and 97.0-99.4%
    with ``max_iter=100``: the data, not the schedule, is short). With the former default of early
    stopping, 3,000 pairs of date normalisation ("April 25, 1969" -> "1969-04-25") and of reversal of
    3-12 letters reached 98.2% and 96.0%. To scale up (translation, summaries, thousands of words of
    vocabulary), use ``tokenizer="word"`` or ``"bpe"``, ``d_model=256``,
    ``encoder_layers=decoder_layers=3``, ``batch_size=64``, fewer epochs over more data and
    ``early_stopping=True``; time grows about linearly with the number of target tokens and the width
    squared.

    Examples
    --------
    >>> from attnkit import Seq2SeqTransformer
    >>> words = ["cat", "dog", "bird", "fish", "cow", "hen", "owl", "bee", "ant", "elk"]
    >>> X = [a + " " + b for a in words for b in words]
    >>> y = [text.upper() for text in X]
    >>> model = Seq2SeqTransformer(d_model=32, n_heads=2, encoder_layers=1, decoder_layers=1,
    ...                            max_iter=30, early_stopping=False, random_state=0).fit(X, y)
    >>> list(model.predict(["cat dog", "owl bee"]))
    ['CAT DOG', 'OWL BEE']
    """

    _network_class = EncoderDecoder
    _score_name = "token accuracy"
    _warmup_fraction = 0.05
    _parameter_constraints = {
        "tokenizer": [Options(str, set(Tokenizer.KINDS + SubwordTokenizer.KINDS))],
        "lowercase": ["boolean"],
        "max_source_features": [None, Interval(numbers.Integral, 1, None, closed="left")],
        "max_target_features": [None, Interval(numbers.Integral, 1, None, closed="left")],
        "min_df": [Interval(numbers.Integral, 1, None, closed="left"),
                   Interval(numbers.Real, 0, 1, closed="right")],
        "handle_unknown": [Options(str, {"unk", "error"})],
        "max_source_len": [Interval(numbers.Integral, 2, MAX_POSITIONS, closed="both")],
        "max_target_len": [Interval(numbers.Integral, 1, MAX_POSITIONS - 1, closed="both")],
        "padding_id": [Interval(numbers.Integral, None, None, closed="neither")],
        "d_model": [Interval(numbers.Integral, 1, None, closed="left")],
        "encoder_d_model": [None, Interval(numbers.Integral, 1, None, closed="left")],
        "decoder_d_model": [None, Interval(numbers.Integral, 1, None, closed="left")],
        "n_heads": [Interval(numbers.Integral, 1, None, closed="left")],
        "encoder_layers": [Interval(numbers.Integral, 1, None, closed="left")],
        "decoder_layers": [Interval(numbers.Integral, 1, None, closed="left")],
        "d_ff": [None, Interval(numbers.Integral, 1, None, closed="left")],
        "dropout": [Interval(numbers.Real, 0, 1, closed="left")],
        "attention": [Options(str, {"softmax", "linear", "performer"})],
        "positional": [None, Options(str, {"sinusoidal", "learned", "relative"})],
        "label_smoothing": [Interval(numbers.Real, 0, 1, closed="left")],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "learning_rate": [Interval(numbers.Real, 0, None, closed="neither")],
        "weight_decay": [Interval(numbers.Real, 0, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(numbers.Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "warm_start": ["boolean"],
        "random_state": ["random_state"],
        "checkpoint_path": [str, os.PathLike, None],
        "checkpoint_every": [Interval(numbers.Integral, 1, None, closed="left")],
        "verbose": [Interval(numbers.Integral, 0, None, closed="left"), "boolean"],
    }

    def __init__(self, *, tokenizer="char", lowercase=False, max_source_features=None, max_target_features=None,
                 min_df=1, handle_unknown="unk", max_source_len=128, max_target_len=128, padding_id=0, d_model=64,
                 encoder_d_model=None, decoder_d_model=None, n_heads=4, encoder_layers=2, decoder_layers=2,
                 d_ff=None, dropout=0.1, attention="softmax", positional="sinusoidal", label_smoothing=0.1,
                 batch_size=32, learning_rate=3e-3, weight_decay=0.01, max_iter=50, early_stopping=False,
                 validation_fraction=0.1, n_iter_no_change=5, tol=1e-4, warm_start=False,
                 checkpoint_path=None, checkpoint_every=1, random_state=None, n_jobs=None, verbose=0):
        self.tokenizer = tokenizer
        self.lowercase = lowercase
        self.max_source_features = max_source_features
        self.max_target_features = max_target_features
        self.min_df = min_df
        self.handle_unknown = handle_unknown
        self.max_source_len = max_source_len
        self.max_target_len = max_target_len
        self.padding_id = padding_id
        self.d_model = d_model
        self.encoder_d_model = encoder_d_model
        self.decoder_d_model = decoder_d_model
        self.n_heads = n_heads
        self.encoder_layers = encoder_layers
        self.decoder_layers = decoder_layers
        self.d_ff = d_ff
        self.dropout = dropout
        self.attention = attention
        self.positional = positional
        self.label_smoothing = label_smoothing
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.max_iter = max_iter
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.warm_start = warm_start
        self.random_state = random_state
        self.checkpoint_path = checkpoint_path
        self.checkpoint_every = checkpoint_every
        self.n_jobs = n_jobs
        self.verbose = verbose

    # -- public API --------------------------------------------------------------------------------------------
    @fit_context
    def fit(self, X: Texts, y: Texts, *, validation_data: tuple[Texts, Texts] | None = None) -> "Seq2SeqTransformer":
        """Learn the vocabularies and train on source sequences ``X`` and target sequences ``y``.

        Parameters
        ----------
        X : sequence of str, or array-like of int of shape (n_samples, n_columns)
            Source texts, or source token ids (rows padded with ``padding_id``).
        y : sequence of str, or array-like of int of shape (n_samples,) or (n_samples, n_columns)
            Target texts for text ``X``; for token-id ``X``, target token ids: a 2-D array (rows padded
            with ``padding_id``) or a 1-D array (one target token per sample).
        validation_data : tuple (X_val, y_val), default=None
            A held-out set to monitor (and to early-stop on, with ``early_stopping``), instead of
            holding out ``validation_fraction`` of the pairs.

        Returns
        -------
        self
        """
        return self._fit(X, y, validation_data=validation_data)

    @fit_context
    def partial_fit(self, X: Texts, y: Texts) -> "Seq2SeqTransformer":
        """Train for one epoch on the pairs (X, y), continuing from the current weights and optimiser state.

        The first call (on an unfitted model, or after ``fit``) starts from its pairs: on an unfitted model
        it builds the source and target vocabularies from them, so tokens that only later calls bring become
        ``<unk>`` (in targets too, so the model learns to write ``<unk>`` there): give the first call a batch
        that shows every character or word of the task. After ``fit``, training continues from its weights
        with a new optimiser. Early stopping does not apply: every pair trains. The learning rate warms up
        over the first call and then stays constant.

        Parameters
        ----------
        X, y
            As for :meth:`fit`.

        Returns
        -------
        self
        """
        return self._fit(X, y, incremental=True)

    @threaded
    def predict(self, X: Texts, *, strategy: str = "greedy", num_beams: int = 4, length_penalty: float = 1.0,
                no_repeat_ngram_size: int = 0, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                max_length: int | None = None, min_length: int = 0, num_return_sequences: int = 1,
                random_state: int | np.random.Generator | None = None) -> np.ndarray | list[list[str]]:
        """Generate a target sequence for each source sequence.

        Parameters
        ----------
        X : sequence of str or array-like of int
            As given to :meth:`fit`.
        strategy : {"greedy", "beam", "sample"}, default="greedy"
        num_beams, length_penalty, no_repeat_ngram_size, temperature, top_k, top_p, min_length :
            As in :func:`attnkit.decoding.generate` (``temperature=0`` is greedy; ``top_p`` in (0, 1]).
        max_length : int, optional
            Most tokens generated, the end token included (default ``max_target_len``).
        num_return_sequences : int, default=1
            Sequences per input: the best of beam search, or independent samples.
        random_state : None, int or Generator
            Sampling: input i's draws depend only on this and i, not on the rest of X.

        Returns
        -------
        ndarray of shape (n_samples,)
            Text input: the generated texts (dtype object). Token-id input fitted on a 1-D ``y``: the
            generated token of each sample (the end token is not allowed first).
        ndarray of int of shape (n_samples, max_length)
            Token-id input fitted on a 2-D ``y``: the generated ids of each sample, then ``padding_id``
            (a fixed width, so that the rows of one call and of another line up). Tokens outside the
            target vocabulary (``<unk>``) come out as ``padding_id``.
        list of lists
            With ``num_return_sequences > 1``: one list per input of its sequences (texts or id lists).
        """
        check_is_fitted(self)
        one_token = self._input["kind"] == IDS and self._input.get("target_ndim") == 1
        if one_token:
            max_length, min_length = 1, 1
        hypotheses = self._generate(X, strategy=strategy, num_beams=num_beams, length_penalty=length_penalty,
                                    no_repeat_ngram_size=no_repeat_ngram_size, temperature=temperature, top_k=top_k,
                                    top_p=top_p, max_length=max_length, min_length=min_length,
                                    num_return_sequences=num_return_sequences, random_state=random_state)
        outputs = [[self._decode_target(h.tokens) for h in hyps] for hyps in hypotheses]
        if num_return_sequences > 1:
            return outputs
        if self._input["kind"] != IDS:
            texts = np.empty(len(outputs), dtype=object)
            texts[:] = [o[0] for o in outputs]
            return texts
        pad = self._input["padding_id"]
        if one_token:
            return np.array([o[0][0] if o[0] else pad for o in outputs], dtype=np.int64)
        width = self._input["max_target_len"] if max_length is None else max_length
        rows = np.full((len(outputs), width), pad, dtype=np.int64)
        for row, o in zip(rows, outputs):
            row[: len(o[0])] = o[0]
        return rows

    @threaded
    def sequence_log_proba(self, X: Texts, y: Texts) -> np.ndarray:
        """Log-probability of each target sequence given its source (its tokens and the end token).

        Not named ``predict_log_proba``: scikit-learn means by that per-class probabilities of ``X`` alone,
        and meta-estimators that look for it would take this model for a classifier.

        Parameters
        ----------
        X : sequence of str or array-like of int
            Sources, as given to :meth:`fit`.
        y : sequence of str or array-like of int
            The target sequences to score (required). A token outside the target vocabulary is read and scored as
            ``<unk>``, a token that :meth:`predict` never writes: its log-probability is that of the model's
            ``<unk>`` output, low where the training targets had no unknown tokens.

        Returns
        -------
        ndarray of shape (n_samples,), float64
        """
        check_is_fitted(self)
        if y is None:
            raise ValueError("sequence_log_proba needs y: the target sequences whose log-probability to compute")
        pairs = self._encode_pairs(X, y)
        network = self._network()
        out = np.zeros(len(pairs))
        for rows in self._inference_batches([len(s) + len(t) for s, t in pairs]):
            source, lengths, target_in, target_out = self._batch([pairs[i] for i in rows])
            logits, _ = network.forward(source, lengths, target_in)
            picked = np.take_along_axis(_log_softmax(logits), target_out[..., None], axis=-1)[..., 0]
            out[rows] = np.sum(np.where(target_out != 0, picked, 0.0), axis=1)
        return out

    @threaded
    def score(self, X: Texts, y: Texts) -> float:
        """Exact-match accuracy of greedy predictions against ``y``: texts compared after the tokenizer's
        normalisation (lowercasing when ``lowercase=True``, word spacing for word tokens), token ids
        after removing padding."""
        check_is_fitted(self)
        targets = self._read_target_tokens(y)
        n_sources = len(self._read_tokens(X, reset=False))
        if n_sources != len(targets):
            raise ValueError(f"X and y must have the same length, got {n_sources} and {len(targets)} samples")
        if not targets:
            raise ValueError("X and y are empty: give at least one pair")
        predicted = self.predict(X)
        if self._input["kind"] == IDS:
            pad = self._input["padding_id"]
            found = [[t for t in np.atleast_1d(p).tolist() if t != pad] for p in predicted]
            return float(np.mean([f == t for f, t in zip(found, targets)]))
        assert self.tokenizer_ is not None  # text input
        expected = [self.tokenizer_.detokenize(t) for t in targets]
        return float(np.mean([p == e for p, e in zip(predicted, expected)]))

    @threaded
    def attention_maps(self, X: Texts, y: Texts | None = None) -> list[dict[str, Any]]:
        """Attention weights of the model on source sequences ``X`` and target sequences ``y``, for inspection.

        Parameters
        ----------
        X : sequence of str or array-like of int
        y : sequence of str or array-like of int, optional
            Targets to teacher-force (default: the model's own greedy predictions).

        Returns
        -------
        list of dict, one per pair
            ``"source_tokens"`` and ``"target_tokens"`` (the decoder's outputs, ``<eos>`` last), and
            ``"encoder"``, ``"decoder"``, ``"cross"``: lists with one array per layer, of shapes
            (n_heads, S, S), (n_heads, T, T) and (n_heads, T, S), where S and T count those tokens
            (the decoder's input at row t is the output t - 1, ``<bos>`` for t = 0). Softmax attention
            only: linear attention never forms the weights.
        """
        check_is_fitted(self)
        if self._network_config["attention"] != "softmax":
            raise ValueError(f"attention_maps needs attention='softmax' ({self._network_config['attention']!r} "
                             "attention never forms the weights)")
        pairs = self._encode_pairs(X, self.predict(X) if y is None else y)
        src_vocab, tgt_vocab, network = self.source_vocabulary_, self.target_vocabulary_, self._network()
        maps = []
        for src, tgt in pairs:
            source, lengths, target_in, _ = self._batch([(src, tgt)])
            weights = network.attention_weights(source, lengths, target_in)
            maps.append({
                "source_tokens": [src_vocab.tokens[i] for i in src],
                "target_tokens": [tgt_vocab.tokens[i] for i in [*tgt, tgt_vocab.eos_id]],
                **{part: [w[0] for w in layers] for part, layers in weights.items()},
            })
        return maps

    @property
    def model_(self) -> EncoderDecoder:
        check_is_fitted(self)
        return self._network()

    # -- training hooks ----------------------------------------------------------------------------------------
    def _input_settings(self):
        return {"tokenizer": self.tokenizer, "lowercase": bool(self.lowercase), "padding_id": int(self.padding_id),
                "subword_sizes": {"source": self.max_source_features, "target": self.max_target_features},
                "max_source_len": int(self.max_source_len), "max_target_len": int(self.max_target_len)}

    def _read_training_data(self, X, y, sample_weight, *, start, reset, classes, incremental):
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        sources = self._read_tokens(X, reset=reset)
        targets = self._read_target_tokens(y)
        if len(sources) != len(targets):
            raise ValueError(f"X and y must have the same length, got {len(sources)} and {len(targets)} samples")
        if not sources:
            raise ValueError("X and y are empty: give at least one pair")
        if reset:
            if self._input["kind"] == IDS:
                self._input["target_ndim"] = int(np.ndim(y))
                self.tokenizer_ = None
            else:
                self.tokenizer_ = text_tokenizer(self._input, "target")
            self.source_vocabulary_ = Vocabulary.build(sources, max_features=self.max_source_features,
                                                       min_df=self.min_df)
            self.target_vocabulary_ = Vocabulary.build(targets, max_features=self.max_target_features,
                                                       min_df=self.min_df)
        pairs = self._encode_token_pairs(sources, targets)
        # Generation never writes <unk> unless a training target held it (a word cut from the vocabulary).
        unk = self.target_vocabulary_.unk_id
        self._writes_unk: bool = (not reset and self._writes_unk) or any(unk in t for _, t in pairs)
        return Samples(pairs, np.array([len(s) + len(t) for s, t in pairs], dtype=np.int64))

    def _new_network_config(self, samples, start):
        d_enc, d_dec = self.encoder_d_model or self.d_model, self.decoder_d_model or self.d_model
        return {
            "source_vocab_size": len(self.source_vocabulary_), "target_vocab_size": len(self.target_vocabulary_),
            "encoder_d_model": d_enc, "decoder_d_model": d_dec, "n_heads": self.n_heads,
            "encoder_layers": self.encoder_layers, "decoder_layers": self.decoder_layers, "d_ff": self.d_ff,
            "dropout": float(self.dropout), "attention": self.attention, "positional": self.positional,
            "max_source_len": self.max_source_len, "max_target_len": self.max_target_len + 1,
            "relative_window": RELATIVE_WINDOW,
        }

    def _check_params(self):
        if self.tokenizer in SubwordTokenizer.KINDS and self.min_df != 1:
            raise ValueError(f"min_df={self.min_df!r} with tokenizer={self.tokenizer!r} would turn rare pieces into "
                             "<unk> and break the exact decoding of the targets; keep min_df=1 and size the "
                             "vocabularies with max_source_features and max_target_features")
        if self.positional == "relative" and self.attention != "softmax":
            raise ValueError(f"positional='relative' needs attention='softmax' (relative positions are a bias on the "
                             f"attention logits, which {self.attention!r} attention never forms); got "
                             f"attention={self.attention!r}")

    def _read_validation_data(self, validation_data):
        X_val, y_val = validation_pair(validation_data)
        pairs = self._encode_pairs(X_val, y_val, names=("X_val", "y_val"))
        return Samples(pairs, np.array([len(s) + len(t) for s, t in pairs], dtype=np.int64))

    def _batch_loss(self, network, samples, rng):
        loss_fn = CrossEntropyLoss(ignore_index=self.target_vocabulary_.pad_id,
                                   label_smoothing=float(self.label_smoothing))

        def batch_loss(indices):
            source, lengths, target_in, target_out = self._batch([samples.inputs[i] for i in indices])
            logits, cache = network.forward(source, lengths, target_in, training=True)
            loss, dlogits = loss_fn.forward(logits, target_out, training=True)
            network.backward(loss_fn.backward(1.0, dlogits), cache)
            return float(loss), int(np.sum(target_out != 0))

        return batch_loss

    def _evaluate(self, network, samples):
        """Mean token cross-entropy (no smoothing) and next-token accuracy of pairs, teacher forced."""
        if not len(samples):
            return float("nan"), float("nan")
        loss_sum = correct = count = 0.0
        for rows in self._inference_batches(samples.lengths):
            source, lengths, target_in, target_out = self._batch([samples.inputs[i] for i in rows])
            logits, _ = network.forward(source, lengths, target_in)
            real = target_out != 0
            picked = np.take_along_axis(_log_softmax(logits), target_out[..., None], axis=-1)[..., 0]
            loss_sum -= float(np.sum(picked[real]))
            correct += float(np.sum((np.argmax(logits, axis=-1) == target_out)[real]))
            count += float(np.sum(real))
        return loss_sum / count, correct / count

    # -- encoding ----------------------------------------------------------------------------------------------
    def _encode_pairs(self, X, y, names=("X", "y")):
        sources = self._read_tokens(X, reset=False, name=names[0])
        targets = self._read_target_tokens(y, name=names[1])
        if len(sources) != len(targets):
            raise ValueError(f"{names[0]} and {names[1]} must have the same length, got {len(sources)} and "
                             f"{len(targets)} samples")
        if not sources:
            raise ValueError(f"{names[0]} and {names[1]} are empty: give at least one pair")
        return self._encode_token_pairs(sources, targets)

    def _encode_token_pairs(self, sources, targets):
        vocab = self.target_vocabulary_
        max_len = self._input["max_target_len"] - 1
        return list(zip(self._encode_sources(sources), (vocab.encode(t, max_len=max_len) for t in targets)))

    def _encode_sources(self, sources):
        vocab, eos, route = self.source_vocabulary_, self.source_vocabulary_.eos_id, self._input
        room = route["max_source_len"] - 1
        n_cut = sum(len(tokens) > room for tokens in sources)
        if n_cut:  # silently, predict(long) answered as predict(its first max_source_len - 1 tokens)
            warn(f"{n_cut} of {len(sources)} sources are longer than max_source_len={route['max_source_len']} tokens "
                 f"(the end token included) and were truncated to their first {room}")
        encoded = []
        for i, tokens in enumerate(sources):
            ids = vocab.encode(tokens, suffix=[eos], max_len=room)
            # Read at prediction time, as scikit-learn's encoders read theirs: set_params needs no refit.
            if self.handle_unknown == "error" and vocab.unk_id in ids:
                unknown = sorted({t for t in tokens if t not in vocab}, key=repr)[:5]
                raise ValueError(f"X[{i}] has tokens that are not in the source vocabulary: {unknown!r} "
                                 "(handle_unknown='error'; use 'unk' to map them to <unk>)")
            encoded.append(ids)
        return encoded

    def _batch(self, pairs):
        """(source ids, source lengths, decoder input, decoder target) of (source, target) id lists, padded."""
        source, source_lengths = pad_sequences([s for s, _ in pairs])
        bos, eos = self.target_vocabulary_.bos_id, self.target_vocabulary_.eos_id
        target_in, _ = pad_sequences([[bos, *t] for _, t in pairs])
        target_out, _ = pad_sequences([[*t, eos] for _, t in pairs])
        return source, source_lengths, target_in, target_out

    def _decode_target(self, ids):
        tokens = self.target_vocabulary_.decode(ids)
        if self._input["kind"] == IDS:
            pad = self._input["padding_id"]
            return [t if isinstance(t, int) else pad for t in tokens]
        assert self.tokenizer_ is not None  # text input
        return self.tokenizer_.detokenize(tokens)

    # -- generation --------------------------------------------------------------------------------------------
    def _generate(self, X, *, max_length, random_state, **params):
        check_is_fitted(self)
        sources = self._encode_sources(self._read_tokens(X, reset=False))
        params.update(max_length=self._input["max_target_len"] if max_length is None else max_length)
        decoding.check_generation_params(params, "predict")
        per_input = None
        if params["strategy"] == "sample":
            per_input = decoding.input_generators(random_state, max(len(sources), 1))
        out: list[Any] = [None] * len(sources)
        for rows in self._inference_batches([len(s) for s in sources]):
            rngs = None if per_input is None else [per_input[i] for i in rows]
            for i, hyps in zip(rows, self._generate_batch([sources[i] for i in rows], rngs, params)):
                out[i] = hyps
        return out

    def _generate_batch(self, sources, rngs, params):
        """Hypotheses of a batch of encoded sources (see :func:`attnkit.decoding.generate`)."""
        network, vocab = self._network(), self.target_vocabulary_
        source, lengths = pad_sequences(sources)
        memory, _ = network.encode(source, lengths)
        decoder_model = decoding.DecoderModel(network.decoder, memory, lengths,
                                              embed=network.embed_target, project=network.project,
                                              capacity=min(params["max_length"], CACHE_CAPACITY))
        # Decoding drops the other special tokens; a written <unk> would show as the text "<unk>".
        suppress = [] if self._writes_unk else [vocab.unk_id]
        return decoding.generate(decoder_model, len(sources), bos_id=vocab.bos_id, eos_id=vocab.eos_id,
                                 random_state=rngs, suppress_tokens=suppress, **params)

    # -- fitted state ------------------------------------------------------------------------------------------
    def _fitted_extras(self):
        # A subword model is saved once, in the input route; tokenizer_ is rebuilt from it.
        return {}, {"tokenizer": None if self.tokenizer_ is None else {"kind": self.tokenizer_.kind,
                                                                         "lowercase": self.tokenizer_.lowercase},
                    "source_vocabulary": self.source_vocabulary_.get_config(),
                    "target_vocabulary": self.target_vocabulary_.get_config(), "writes_unk": self._writes_unk}

    def _set_fitted_extras(self, groups, config):
        self.tokenizer_ = None if config["tokenizer"] is None else text_tokenizer(self._input, "target")
        self.source_vocabulary_ = Vocabulary.from_config(config["source_vocabulary"])
        self.target_vocabulary_ = Vocabulary.from_config(config["target_vocabulary"])
        self._writes_unk = bool(config.get("writes_unk", True))  # files from before it was kept: as they were
        network, route = self._network_config, self._input
        if (route["max_source_len"], route["max_target_len"] + 1) != (network["max_source_len"],
                                                                      network["max_target_len"]):
            raise ValueError(f"the input's max_source_len={route['max_source_len']} and max_target_len="
                             f"{route['max_target_len']} do not match the network's ({network['max_source_len']}, "
                             f"{network['max_target_len']} with the end token)")

    def _upgrade_fitted_state(self, groups, config, version):
        """attnkit 0.1.0's layout (format 1): text input only, the network described by the parameters."""
        self.source_vocabulary_ = Vocabulary.from_config(config["source_vocabulary"])
        self.target_vocabulary_ = Vocabulary.from_config(config["target_vocabulary"])
        tokenizer = Tokenizer.from_config(config["tokenizer"])
        training = dict(config["history"])
        kept_best = training["best_epoch"] is not None and (self.early_stopping or training["interrupted"])
        training["kept_epoch"] = training["best_epoch"] if kept_best else (
            None if training["interrupted"] else training["n_epochs"])
        arrays = {"weights": groups["model"], **({"optimizer": groups["optimizer"]} if "optimizer" in groups else {})}
        route = {"kind": "text", "tokenizer": tokenizer.kind, "lowercase": tokenizer.lowercase, "padding_id": 0,
                 "max_source_len": int(self.max_source_len), "max_target_len": int(self.max_target_len)}
        return arrays, {"network": self._new_network_config(None, None), "network_seed": config["model_seed"],
                        "training": to_json(training), "input": route, "tokenizer": config["tokenizer"],
                        "source_vocabulary": config["source_vocabulary"],
                        "target_vocabulary": config["target_vocabulary"]}

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True  # sequences of texts
        tags.input_tags.two_d_array = True  # token ids
        tags.input_tags.categorical = True  # token ids are categories, not quantities
        tags.target_tags.required = True
        tags.non_deterministic = self.random_state is None
        return tags


def _log_softmax(logits):
    return ops.log_softmax(logits.astype(np.float64), axis=-1)
