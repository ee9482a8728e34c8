"""MaskedLanguageModel: a BERT-style encoder pretrained on raw text by filling in hidden words, as a scikit-learn
estimator (fill_mask, sentence embeddings, masked-token accuracy), and the start of a TransformerClassifier."""

import numbers
import os
from typing import Any

import numpy as np
from sklearn.utils.validation import check_is_fitted

from attnkit import ops
from attnkit._validation import Interval, Options, check_int
from attnkit.estimators._jobs import fit_context, threaded
from attnkit.estimators._pretraining import MASK_PROBABILITY, masked_lm_batch_loss
from attnkit.estimators._token_input import TEXT, text_tokenizer
from attnkit.estimators._trainable import Samples, TrainableEstimator
from attnkit.io import register_estimator
from attnkit.nn import mask_tokens
from attnkit.nn.masked_lm import MaskedLM
from attnkit.nn.positional import MAX_POSITIONS
from attnkit.text import SPECIAL_TOKENS, Texts, Tokenizer, Vocabulary, check_texts, pad_sequences

__all__ = ["MaskedLanguageModel"]

MASK_TOKEN = "[MASK]"
RELATIVE_DISTANCE = 16  # as the classifier's: its network takes these weights
VALIDATION_SEED = 12345  # the masks of score() and of validation: the same hidden tokens at every evaluation


@register_estimator
class MaskedLanguageModel(TrainableEstimator):
    """BERT-style masked-language model: an encoder learns to fill in hidden tokens of raw text.

    ``fit`` splits the texts into words (or characters), learns a vocabulary, and trains a transformer encoder
    (:class:`attnkit.nn.MaskedLM`, bidirectional: every position sees every other) on BERT's corruption: 15% of
    the tokens of each text are chosen (never special tokens or padding); 80% of those become the mask token,
    10% a random token, 10% stay; the model predicts the chosen tokens through an output tied to its token table.
    Then :meth:`fill_mask` proposes words for ``[MASK]`` in new texts, :meth:`transform` gives contextual sentence
    embeddings, :meth:`score` is the masked-token accuracy, and a :class:`attnkit.TransformerClassifier` can
    start from the encoder (``TransformerClassifier(pretrained=mlm)``): pretrain on unlabelled text, fine-tune on
    few labels.

    Parameters
    ----------
    tokenizer : {"word", "char"}, default="word"
    lowercase : bool, default=True
    max_features : int, optional
        Keep the most frequent tokens (the others read as ``<unk>``, which is also the mask token).
    min_df : int or float, default=1
    max_len : int, default=128
        Tokens of a text the encoder reads (after a ``<cls>`` token); longer texts are cut.
    d_model, n_heads, n_layers, d_ff, dropout, attention, positional :
        The encoder's, with :class:`attnkit.TransformerClassifier`'s defaults (so that a classifier with its
        defaults can start from it).
    mask_probability : float, default=0.15
        Share of each text's tokens chosen for prediction.
    batch_size : int, default=32
    learning_rate : float, default=1e-3
    weight_decay : float, default=0.01
    max_iter : int, default=10
        Epochs.
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the texts and stop when their masked-token loss has not improved for
        ``n_iter_no_change`` epochs (their masks are drawn once, so every evaluation hides the same tokens).
    validation_fraction, n_iter_no_change, tol, warm_start, checkpoint_path, checkpoint_every, random_state,
    n_jobs, verbose :
        As for :class:`attnkit.TransformerClassifier`.

    Attributes
    ----------
    vocabulary_ : dict
        Token -> id, the special tokens first.
    model_ : attnkit.nn.MaskedLM
    n_iter_, loss_curve_, validation_loss_curve_, validation_scores_, best_validation_score_, best_epoch_ :
        As for the other estimators; the score is the masked-token accuracy.

    Examples
    --------
    >>> from attnkit import MaskedLanguageModel
    >>> texts = ["the cat sat on the mat", "the dog sat on the log", "a cat sat on a mat"] * 30
    >>> mlm = MaskedLanguageModel(d_model=32, n_heads=2, d_ff=64, max_iter=60, learning_rate=3e-3,
    ...                           random_state=0).fit(texts)
    >>> [[token for token, _ in fillers] for fillers in mlm.fill_mask(["the dog sat on the [MASK]"], top_k=2)[0]]
    [['log', 'mat']]
    """

    _network_class = MaskedLM
    _score_name = "masked-token accuracy"
    _plateau_stops = False
    _parameter_constraints = {
        "tokenizer": [Options(str, set(Tokenizer.KINDS))],
        "lowercase": ["boolean"],
        "max_features": [None, Interval(numbers.Integral, 1, None, closed="left")],
        "min_df": [Interval(numbers.Integral, 1, None, closed="left"), Interval(numbers.Real, 0, 1, closed="right")],
        "max_len": [Interval(numbers.Integral, 1, MAX_POSITIONS - 1, closed="both")],
        "d_model": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_heads": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_layers": [Interval(numbers.Integral, 1, None, closed="left")],
        "d_ff": [Interval(numbers.Integral, 1, None, closed="left")],
        "dropout": [Interval(numbers.Real, 0, 1, closed="left")],
        "attention": [Options(str, {"softmax", "linear", "performer"})],
        "positional": [None, Options(str, {"sinusoidal", "learned", "relative"})],
        "mask_probability": [Interval(numbers.Real, 0, 1, closed="right")],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "learning_rate": [Interval(numbers.Real, 0, None, closed="neither")],
        "weight_decay": [Interval(numbers.Real, 0, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(numbers.Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "warm_start": ["boolean"],
        "checkpoint_path": [str, os.PathLike, None],
        "checkpoint_every": [Interval(numbers.Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "verbose": [Interval(numbers.Integral, 0, None, closed="left"), "boolean"],
    }

    def __init__(self, *, tokenizer="word", lowercase=True, max_features=None, min_df=1, max_len=128, d_model=128,
                 n_heads=4, n_layers=2, d_ff=256, dropout=0.1, attention="softmax", positional="sinusoidal",
                 mask_probability=MASK_PROBABILITY, batch_size=32, learning_rate=1e-3, weight_decay=0.01, max_iter=10,
                 early_stopping=False, validation_fraction=0.1, n_iter_no_change=5, tol=1e-4, warm_start=False,
                 checkpoint_path=None, checkpoint_every=1, random_state=None, n_jobs=None, verbose=0):
        self.tokenizer = tokenizer
        self.lowercase = lowercase
        self.max_features = max_features
        self.min_df = min_df
        self.max_len = max_len
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_layers = n_layers
        self.d_ff = d_ff
        self.dropout = dropout
        self.attention = attention
        self.positional = positional
        self.mask_probability = mask_probability
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.max_iter = max_iter
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

    # -- training ---------------------------------------------------------------------------------------------
    @fit_context
    def fit(self, X: Texts, y: None = None, *, validation_data: Texts | None = None) -> "MaskedLanguageModel":
        """Learn the vocabulary (on a fresh fit) and train on the texts ``X`` (``y`` is ignored).

        ``validation_data``: held-out texts to score after each epoch (and to stop on, with ``early_stopping``),
        instead of ``validation_fraction`` of ``X``."""
        return self._fit(X, None, validation_data=(validation_data, None) if validation_data is not None else None)

    @fit_context
    def partial_fit(self, X: Texts, y: None = None) -> "MaskedLanguageModel":
        """One epoch on the texts ``X``, continuing from the current weights (the first call learns the
        vocabulary from its texts)."""
        return self._fit(X, None, incremental=True)

    def _check_params(self):
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_heads ({self.n_heads})")
        if self.positional == "relative" and self.attention != "softmax":
            raise ValueError(f"positional='relative' needs attention='softmax'; got attention={self.attention!r}")

    def _input_settings(self):
        return {"tokenizer": self.tokenizer, "lowercase": bool(self.lowercase), "padding_id": 0,
                "max_len": int(self.max_len)}

    def _read_training_data(self, X, y, sample_weight, *, start, reset, classes, incremental):
        texts = check_texts(X, name="X")
        if reset:
            self._input = {"kind": TEXT, **self._input_settings()}
        tokens = self._tokens(texts)
        if reset:
            vocabulary = Vocabulary.build(tokens, max_features=self.max_features, min_df=self.min_df)
            self.vocabulary_ = dict(vocabulary.index)
            self.__dict__.setdefault("_cache", {})["vocabulary"] = vocabulary
        docs = self._docs(tokens)
        if not any(len(d) > 1 for d in docs):
            raise ValueError("X holds no token to learn from: give non-empty texts")
        return Samples(docs, np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs)))

    def _new_network_config(self, samples, start):
        return {"vocab_size": len(self._vocabulary()), "d_model": self.d_model, "n_heads": self.n_heads,
                "n_layers": self.n_layers, "d_ff": self.d_ff, "dropout": float(self.dropout),
                "attention": self.attention, "positional": self.positional, "max_len": self._input["max_len"] + 1,
                "relative_distance": RELATIVE_DISTANCE}

    def _read_validation_data(self, validation_data):
        docs = self._docs(self._tokens(check_texts(validation_data[0], name="validation_data")))
        if not _hideable(docs):  # its loss would be NaN every epoch, and early stopping would choose on NaN
            raise ValueError("validation_data holds no word seen in training to hide: give texts in the training "
                             "text's words")
        return Samples(docs, np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs)))

    def _batch_loss(self, network, samples, rng):
        return masked_lm_batch_loss(network, network.output, samples.inputs, np.random.default_rng(rng.integers(2**63)),
                                    probability=float(self.mask_probability))

    def _evaluate(self, network, samples):
        """Masked-token cross-entropy and accuracy with masks drawn from a fixed seed."""
        return self._masked_scores(network, samples.inputs)

    def _masked_scores(self, network, docs):
        rng = np.random.default_rng(VALIDATION_SEED)
        loss_sum = correct = count = 0.0
        for rows in self._inference_batches([len(d) for d in docs]):
            ids, lengths = pad_sequences([docs[i] for i in rows])
            corrupted, picked = mask_tokens(ids, lengths, rng, vocab_size=network.output.embedding.num_embeddings,
                                            mask_id=Vocabulary.unk_id, first_ordinary_id=len(SPECIAL_TOKENS),
                                            probability=float(self.mask_probability))
            if not picked.any():
                continue
            logits, _ = network.masked_logits(corrupted, picked, lengths=lengths)
            logp = ops.log_softmax(logits.astype(np.float64), axis=-1)
            target = ids[picked]
            loss_sum -= float(logp[np.arange(target.size), target].sum())
            correct += float(np.sum(np.argmax(logits, axis=-1) == target))
            count += target.size
        if not count:
            return float("nan"), float("nan")
        return loss_sum / count, correct / count

    # -- use --------------------------------------------------------------------------------------------------
    @threaded
    def fill_mask(self, X: Texts, top_k: int = 5) -> list[list[list[tuple[str, float]]]]:
        """The most likely fillers of each ``[MASK]`` in each text.

        Parameters
        ----------
        X : sequence of str
            Texts holding ``[MASK]`` (each stands for one token).
        top_k : int, default=5

        Returns
        -------
        list (per text) of lists (per ``[MASK]``, in order) of ``top_k`` (token, probability) pairs, most likely
        first (fewer when the vocabulary has fewer words); special tokens are never proposed.
        """
        check_is_fitted(self)
        top_k = check_int(top_k, "top_k", minimum=1)
        texts = check_texts(X, name="X")
        docs = []
        for i, text in enumerate(texts):
            if MASK_TOKEN not in text:
                raise ValueError(f"X[{i}] holds no {MASK_TOKEN}: write {MASK_TOKEN} where a token should be filled in")
            pieces = [self._docs([t], cls=False)[0] for t in self._tokens(text.split(MASK_TOKEN))]
            ids = [Vocabulary.cls_id]
            for j, piece in enumerate(pieces):
                ids += ([Vocabulary.unk_id] if j else []) + list(piece)
            if len(ids) > self._input["max_len"] + 1:
                raise ValueError(f"X[{i}] is {len(ids) - 1} tokens long, more than max_len={self._input['max_len']}")
            docs.append((ids, [1 + len(sum(pieces[: j + 1], [])) + j for j in range(len(pieces) - 1)]))
        network, vocabulary, out = self._network(), self._vocabulary(), []
        for ids, positions in docs:
            batch = np.array([ids])
            picked = np.zeros(batch.shape, bool)
            picked[0, positions] = True
            logits, _ = network.masked_logits(batch, picked, lengths=np.array([len(ids)]))
            logits = logits.astype(np.float64)
            logits[:, : len(SPECIAL_TOKENS)] = -np.inf
            probs = ops.softmax(logits, axis=-1)
            # at most the words there are: a larger top_k listed the special tokens, at probability 0
            best = np.argsort(-probs, axis=-1, kind="stable")[:, : min(top_k, probs.shape[1] - len(SPECIAL_TOKENS))]
            out.append([[(vocabulary.tokens[t], float(p[t])) for t in row] for row, p in zip(best, probs)])
        return out

    @threaded
    def transform(self, X: Texts) -> np.ndarray:
        """Contextual sentence embeddings: the encoder's outputs averaged over each text's tokens (its ``<cls>``
        included), float32 (n_samples, d_model)."""
        check_is_fitted(self)
        docs = self._docs(self._tokens(check_texts(X, name="X")))
        network = self._network()
        out = np.empty((len(docs), self._network_config["d_model"]), dtype=np.float32)
        for rows in self._inference_batches([len(d) for d in docs]):
            ids, lengths = pad_sequences([docs[i] for i in rows])
            hidden = network.infer(ids, lengths=lengths)
            mask = np.arange(ids.shape[1])[None, :] < lengths[:, None]
            out[rows] = (hidden * mask[..., None]).sum(axis=1) / lengths[:, None]
        return out

    @threaded
    def score(self, X: Texts, y: None = None) -> float:
        """Masked-token accuracy on the texts ``X``: BERT's corruption with a fixed seed (the same tokens hidden
        on every call), the share of hidden tokens predicted exactly."""
        check_is_fitted(self)
        docs = self._docs(self._tokens(check_texts(X, name="X")))
        accuracy = self._masked_scores(self._network(), docs)[1]
        if np.isnan(accuracy):
            raise ValueError("X holds no word seen in training to hide: give non-empty texts in the training text's "
                             "words")
        return accuracy

    @threaded
    def attention_maps(self, X: Texts) -> list[dict[str, Any]]:
        """Self-attention weights of every layer on each text: bidirectional (every row spans every token).

        Returns
        -------
        list of dict, one per text
            ``"tokens"`` (``"<cls>"`` first) and ``"layers"``: one (n_heads, N, N) array per layer.
        """
        check_is_fitted(self)
        if self._network_config["attention"] != "softmax":
            raise ValueError(f"attention_maps needs attention='softmax' ({self._network_config['attention']!r} "
                             "attention never forms the weights)")
        network, vocabulary, out = self._network(), self._vocabulary(), []
        for ids in self._docs(self._tokens(check_texts(X, name="X"))):
            weights = network.attention_weights(np.array([ids]), lengths=np.array([len(ids)]))
            out.append({"tokens": [vocabulary.tokens[i] for i in ids], "layers": [w[0] for w in weights]})
        return out

    @property
    def model_(self) -> MaskedLM:
        check_is_fitted(self)
        return self._network()

    # -- internals --------------------------------------------------------------------------------------------
    def _tokens(self, texts):
        tokenizer = text_tokenizer(self._input, "source")
        return [tokenizer(t) for t in texts]

    def _docs(self, tokens, cls=True):
        """Id lists: ``<cls>`` and at most ``max_len`` tokens."""
        prefix = [Vocabulary.cls_id] if cls else []
        return [self._vocabulary().encode(t, prefix=prefix, max_len=self._input["max_len"]) for t in tokens]

    def _vocabulary(self):
        mapping = self.vocabulary_
        return self._cached("vocabulary", lambda: Vocabulary(sorted(mapping, key=mapping.__getitem__)[
            len(SPECIAL_TOKENS):]))

    def _fitted_extras(self):
        return {}, {"vocabulary": self._vocabulary().get_config()["tokens"]}

    def _set_fitted_extras(self, groups, config):
        vocabulary = Vocabulary(config["vocabulary"])
        self._cache["vocabulary"] = vocabulary
        self.vocabulary_ = dict(vocabulary.index)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.two_d_array = False
        tags.target_tags.required = False
        tags.non_deterministic = self.random_state is None
        return tags


def _hideable(docs):
    """Whether ``docs`` (id arrays) hold a token the corruption may hide: an ordinary one, not special or unknown."""
    return any(np.any(np.asarray(doc) >= len(SPECIAL_TOKENS)) for doc in docs)
