"""Text to token ids and back: tokenizers, a vocabulary with special tokens, padding, input checks.

Shared by the text estimators (:class:`attnkit.TransformerClassifier`, and a sequence-to-sequence
model's source and target sides): a :class:`Tokenizer` splits a string into tokens (words with
punctuation and contractions as their own tokens, or characters) and joins tokens back into text;
a :class:`Vocabulary` maps tokens to ids with five reserved ids (``<pad>`` = 0, ``<unk>``,
``<cls>``, ``<bos>``, ``<eos>``); :func:`pad_sequences` turns id lists into a padded batch and its
lengths; :func:`check_texts` validates what a user passes as text. Tokenizers and vocabularies
describe themselves as JSON-able dicts (``get_config`` / ``from_config``), so a model file needs
no pickle.

Examples
--------
>>> from attnkit.text import Tokenizer, Vocabulary, pad_sequences
>>> tokenizer = Tokenizer("word")
>>> tokenizer("I don't like it.")
['i', 'do', "n't", 'like', 'it', '.']
>>> docs = [tokenizer(t) for t in ["a good film", "not a good film", "bad"]]
>>> vocab = Vocabulary.build(docs, min_df=2)
>>> vocab.tokens
['<pad>', '<unk>', '<cls>', '<bos>', '<eos>', 'a', 'good', 'film']
>>> ids = [vocab.encode(doc, prefix=[vocab.cls_id]) for doc in docs]
>>> ids
[[2, 5, 6, 7], [2, 1, 5, 6, 7], [2, 1]]
>>> batch, lengths = pad_sequences(ids)
>>> batch.tolist(), lengths.tolist()
([[2, 5, 6, 7, 0], [2, 1, 5, 6, 7], [2, 1, 0, 0, 0]], [4, 5, 2])
>>> tokenizer.detokenize(vocab.decode(ids[1]))
'<unk> a good film'
"""

import collections
import json
import math
import numbers
import re
from collections.abc import Iterable
from typing import TypeAlias

import numpy as np

from attnkit.batching import padded_batches

__all__ = [
    "SPECIAL_TOKENS",
    "SubwordTokenizer",
    "Texts",
    "Tokenizer",
    "Vocabulary",
    "check_texts",
    "length_sorted_batches",
    "pad_sequences",
]

SPECIAL_TOKENS = ("<pad>", "<unk>", "<cls>", "<bos>", "<eos>")

# What the text estimators take as X: a list, tuple, 1-D array or pandas Series of str (the
# classifier also takes a 2-D array of token ids).
Texts: TypeAlias = Iterable[str] | np.ndarray

# Contractions are split as the Penn Treebank does ("don't" -> "do" "n't", "it's" -> "it" "'s"), so
# the negation is one token whatever verb it follows; SST-2 and most English corpora are split so.
# French elisions keep their apostrophe ("c'est" -> "c'" "est"); other inner apostrophes and hyphens
# stay inside the word ("aujourd'hui", "o'clock", "peut-être"). Numbers keep their inner separators
# ("10,000", "3.5", "10:30", "9/11") and abbreviations their dots
# ("U.S.", "p.m."). A space before ! ? ; : % (French typography) is kept in the token
# (" !"), so that detokenize can put it back.
_WORD_PATTERN = re.compile(
    r"""\w+(?=n't\b)                                     # "do" of "don't", "ca" of "can't"
      | n't\b                                            # the negation clitic
      | '(?:s|m|d|re|ve|ll)\b                            # 's 'm 'd 're 've 'll
      | \b(?:[cdjlmnst]|qu|jusqu|lorsqu|puisqu|quoiqu|presqu)'(?=\w)   # c' l' qu' ... (French elision)
      | \d+(?:[.,:/]\d+)+                                # 10,000  3.5  10:30  9/11
      | (?:[^\W\d_]\.){2,}                               # U.S.  p.m.
      | \w+(?:-\w+|'(?!(?:s|m|d|re|ve|ll|t)\b)\w+)*      # words, hyphenated words, aujourd'hui
      | (?<=\S)\s+[!?;:%]                                # French spaced punctuation: " !"
      | [^\w\s]                                          # any other character: one punctuation token each
    """,
    re.VERBOSE | re.IGNORECASE,
)
# Typographic apostrophes become ASCII ones before matching, so "don’t" splits like "don't".
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u02bc": "'", "\u2018": "'"})
# For detokenize: tokens written without a space before them, and after them. Straight quotes open
# and close in turn; guillemets take the French inner spaces, as words do.
_NO_SPACE_BEFORE = re.compile(r"^(?:[.,!?;:%)\]}\u2026\u201d]|n't|'(?:s|m|d|re|ve|ll))$", re.IGNORECASE)
_NO_SPACE_AFTER = frozenset("([{$#\u201c")
_STRAIGHT_QUOTES = frozenset("\"'")


class Tokenizer:
    """Split text into word or character tokens, and join tokens back into text.

    Parameters
    ----------
    kind : {"word", "char"}, default="word"
        ``"word"``: a regular expression keeps words (hyphenated words whole) and numbers
        (``"10,000"``) and makes each punctuation mark a token; contractions are split as in the
        Penn Treebank (``"don't"`` -> ``"do"``, ``"n't"``; ``"it's"`` -> ``"it"``, ``"'s"``).
        ``"char"``: every character is a token, spaces included.
    lowercase : bool, default=True
        Lowercase the text first.
    spacing : bool, default=True
        Word tokens: a mark that French spacing puts after a space (``! ? ; : %``) keeps that space
        in its token (``"Quoi ?"`` -> ``"Quoi"``, ``" ?"``), so :meth:`detokenize` restores it. False
        makes it the same token however it is spaced (``"great!"`` and ``"great !"`` read alike):
        what a model that reads text but never writes it wants (the classifier, a source side).

    Examples
    --------
    >>> Tokenizer()("Hello, world! It's 3.5 stars.")
    ['hello', ',', 'world', '!', 'it', "'s", '3.5', 'stars', '.']
    >>> Tokenizer("char", lowercase=False)("Hi!")
    ['H', 'i', '!']
    """

    KINDS = ("word", "char")

    def __init__(self, kind="word", *, lowercase=True, spacing=True):
        if kind not in self.KINDS:
            raise ValueError(f"kind must be one of {self.KINDS}, got {kind!r}")
        for name, value in (("lowercase", lowercase), ("spacing", spacing)):
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
        self.kind = kind
        self.lowercase = bool(lowercase)
        self.spacing = bool(spacing)

    def __call__(self, text):
        """The tokens of one string, a list of str (empty for an empty string)."""
        if self.lowercase:
            text = text.lower()
        if self.kind == "char":
            return list(text)
        tokens = _WORD_PATTERN.findall(text.translate(_APOSTROPHES))
        if not self.spacing:
            return [token.lstrip() for token in tokens]
        return [" " + token.lstrip() if token[0].isspace() else token for token in tokens]

    def detokenize(self, tokens):
        """Join tokens into a string: characters end to end; words with single spaces, except before
        punctuation that closes (``. , ! ? ) n't 's``), after punctuation that opens (``( $``) and
        after an elision (``c' l' qu'``); straight quotes open and close in turn.

        ``detokenize(tokenizer(text))`` gives back ``text`` with its whitespace runs made single
        spaces (and lowercased, when lowercasing), for English and French text written as usual:
        either spacing before ``! ? ; : %`` and inside guillemets (``« oui »``). Not restored:
        typographic apostrophes (they come back as ``'``), guillemets written without inner spaces,
        and spacing that no convention uses (``"a ,b"``, ``"(a )"``, ``"100$"``). A lone ``'`` after a
        word in ``s`` is read as a plural possessive (``"the boys' room"``) unless a single quote is open.
        """
        if self.kind == "char":
            return "".join(tokens)
        out: list[str] = []
        glued = True  # the next token follows without a space (at the start, after an opening mark)
        open_quotes: set[str] = set()
        for token in tokens:
            if token == "'" and token not in open_quotes and out and out[-1][-1:] in "sS":
                space_before, space_after = False, True  # a plural possessive: "the boys' room"
            elif token in _STRAIGHT_QUOTES:
                closing = token in open_quotes
                open_quotes ^= {token}
                space_before, space_after = not closing, closing
            else:
                space_before = not (token[:1].isspace() or _NO_SPACE_BEFORE.match(token))
                space_after = token not in _NO_SPACE_AFTER and not (len(token) > 1 and token.endswith("'"))
            if space_before and not glued:
                out.append(" ")
            out.append(token)
            glued = not space_after
        return "".join(out).lstrip()

    def get_config(self):
        """JSON-able constructor arguments: ``Tokenizer(**tokenizer.get_config())`` is equal."""
        return {"kind": self.kind, "lowercase": self.lowercase, "spacing": self.spacing}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __eq__(self, other):
        return isinstance(other, Tokenizer) and self.get_config() == other.get_config()

    def __hash__(self):
        return hash((self.kind, self.lowercase, self.spacing))

    def __repr__(self):
        spacing = "" if self.spacing else ", spacing=False"
        return f"Tokenizer({self.kind!r}, lowercase={self.lowercase}{spacing})"


class SubwordTokenizer:
    """Split text into subword pieces learnt from a corpus (BPE or unigram), and join them back.

    The pieces come from the Hugging Face ``tokenizers`` library (the ``pretrained`` extra). Text is
    lowercased (optionally) and its whitespace runs made single spaces first; the pieces keep the
    spaces (byte-level BPE, or the unigram model's metaspace ``"▁"``), so :meth:`detokenize` gives
    back that text exactly.

    Parameters
    ----------
    kind : {"bpe", "unigram"}, default="bpe"
        ``"bpe"``: byte-level byte-pair encoding, whose 256 byte pieces spell any text.
        ``"unigram"``: a unigram language model over pieces (SentencePiece's); characters never seen
        in :meth:`fit` are one piece each, outside the vocabulary.
    lowercase : bool, default=True
        Lowercase the text first.
    model : str, optional
        A trained model (the ``tokenizers`` JSON :attr:`model` gives); None until :meth:`fit`.

    Attributes
    ----------
    model : str or None
        The trained model as JSON text.

    Examples
    --------
    >>> texts = ["the cat sat on the mat", "the dog sat on the log"] * 10
    >>> tokenizer = SubwordTokenizer("bpe").fit(texts, vocab_size=300)
    >>> tokenizer.detokenize(tokenizer("The cat  sat on the log."))
    'the cat sat on the log.'
    """

    KINDS = ("bpe", "unigram")
    DEFAULT_VOCAB_SIZE = 8000

    def __init__(self, kind="bpe", *, lowercase=True, model=None):
        if kind not in self.KINDS:
            raise ValueError(f"kind must be one of {self.KINDS}, got {kind!r}")
        if not isinstance(lowercase, (bool, np.bool_)):
            raise TypeError(f"lowercase must be a bool, got {type(lowercase).__name__} {lowercase!r}")
        if model is not None and not isinstance(model, str):
            raise TypeError(f"model must be the JSON text of a trained tokenizer or None, got {type(model).__name__}")
        self.kind = kind
        self.lowercase = bool(lowercase)
        self.model = model
        self._compiled = None

    def fit(self, texts, vocab_size=None):
        """Learn the pieces of ``texts``.

        Parameters
        ----------
        texts : sequence of str
        vocab_size : int, optional
            Pieces to learn, at most (default 8000; fewer when the texts have no more to merge).
            BPE counts its 256 byte pieces in it; unigram needs at least one piece per distinct
            character of ``texts``.

        Returns
        -------
        self
        """
        tokenizers = _import_tokenizers()
        vocab_size = self.DEFAULT_VOCAB_SIZE if vocab_size is None else vocab_size
        if isinstance(vocab_size, (bool, np.bool_)) or not isinstance(vocab_size, numbers.Integral) or vocab_size < 1:
            raise ValueError(f"vocab_size must be an int >= 1 or None, got {vocab_size!r}")
        texts = [self._normalise(t) for t in check_texts(texts, name="texts")]
        pre, dec = tokenizers.pre_tokenizers, tokenizers.decoders
        if self.kind == "bpe":
            model = tokenizers.Tokenizer(tokenizers.models.BPE())
            model.pre_tokenizer = pre.ByteLevel(add_prefix_space=True)
            model.decoder = dec.ByteLevel()
            trainer = tokenizers.trainers.BpeTrainer(vocab_size=int(vocab_size), show_progress=False,
                                                     initial_alphabet=pre.ByteLevel.alphabet())
        else:
            model = tokenizers.Tokenizer(tokenizers.models.Unigram())
            model.pre_tokenizer = pre.Metaspace()
            model.decoder = dec.Metaspace()
            trainer = tokenizers.trainers.UnigramTrainer(vocab_size=int(vocab_size), show_progress=False,
                                                         special_tokens=["<unk>"], unk_token="<unk>")
        try:
            model.train_from_iterator(texts, trainer)
        except Exception as error:  # the library raises a bare Exception, e.g. for too small a vocabulary
            raise ValueError(f"cannot learn {vocab_size} {self.kind} pieces from these texts: {error}") from None
        self.model = model.to_str() if self.kind == "bpe" else _canonical_unigram(model.to_str())
        self._compiled = None
        return self

    def __call__(self, text):
        """The pieces of one string, a list of str (empty for an empty string)."""
        text = self._normalise(text)
        return self._tokenizer().encode(text).tokens if text else []

    def detokenize(self, tokens):
        """Join pieces into a string: ``detokenize(tokenizer(text))`` is ``text`` with its whitespace
        runs made single spaces (and lowercased, when lowercasing)."""
        return self._tokenizer().decoder.decode(list(tokens)).strip()

    def _normalise(self, text):
        return " ".join((text.lower() if self.lowercase else text).split())

    def _tokenizer(self):
        if self.model is None:
            raise ValueError(f"this {self!r} is not trained: call fit(texts) first")
        if self._compiled is None:
            self._compiled = _import_tokenizers().Tokenizer.from_str(self.model)
        return self._compiled

    def get_config(self):
        """JSON-able constructor arguments (the trained model included)."""
        return {"kind": self.kind, "lowercase": self.lowercase, "model": self.model}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __getstate__(self):
        return {**self.__dict__, "_compiled": None}

    def __eq__(self, other):
        return isinstance(other, SubwordTokenizer) and self.get_config() == other.get_config()

    def __hash__(self):
        return hash((self.kind, self.lowercase, self.model))

    def __repr__(self):
        return f"SubwordTokenizer({self.kind!r}, lowercase={self.lowercase}{'' if self.model else ', untrained'})"


def _import_tokenizers():
    try:
        import tokenizers
    except ImportError as error:
        raise ImportError("subword tokenizers ('bpe', 'unigram') need the Hugging Face tokenizers package: "
                          "pip install 'attnkit[pretrained]'") from error
    return tokenizers


def _canonical_unigram(json_text):
    """A trained unigram model, made the same on every run.

    The trainer sums scores in parallel (they differ in the last bits between runs) and appends the
    pieces it had pruned but needs in hash-set order, a ladder of scores at most 1e-4 apart; so scores
    are rounded and the ladder's pieces are put in code-point order.
    """
    config = json.loads(json_text)
    vocab = [[piece, round(score, 8)] for piece, score in config["model"]["vocab"]]
    start = len(vocab) - 1
    while start > 1 and -1e-7 < vocab[start - 1][1] - vocab[start][1] < 1e-4 + 1e-7:
        start -= 1
    ladder = sorted(piece for piece, _ in vocab[start:])
    vocab[start:] = [[piece, score] for piece, (_, score) in zip(ladder, vocab[start:])]
    head = vocab[1:start]
    config["model"]["vocab"] = vocab[:1] + sorted(head, key=lambda entry: (-entry[1], entry[0])) + vocab[start:]
    return json.dumps(config, ensure_ascii=False)


class Vocabulary:
    """Tokens <-> integer ids, with the special tokens first.

    Ids 0-4 are ``<pad>`` (padding), ``<unk>`` (any token not in the vocabulary), ``<cls>`` (the
    summary position of a classifier), ``<bos>`` and ``<eos>`` (start and end of a generated
    sequence); the other tokens follow, most frequent first. Tokens are strings, or any hashable
    JSON-able values (an estimator given integer token ids uses the ids themselves as tokens).

    Parameters
    ----------
    tokens : sequence of hashable
        The ordinary tokens in id order (ids 5, 6, ...); no duplicates and no special token.

    Attributes
    ----------
    tokens : list
        Every token, specials included, indexed by id.
    index : dict
        Token -> id, for every token.

    See Also
    --------
    Vocabulary.build : A vocabulary from tokenized documents, with frequency cut-offs.
    """

    pad_id, unk_id, cls_id, bos_id, eos_id = range(len(SPECIAL_TOKENS))

    def __init__(self, tokens=()):
        self.tokens = list(SPECIAL_TOKENS) + list(tokens)
        self.index = {token: i for i, token in enumerate(self.tokens)}
        if len(self.index) != len(self.tokens):
            counts = collections.Counter(self.tokens)
            repeated = sorted((repr(t) for t, c in counts.items() if c > 1))[:5]
            raise ValueError(f"tokens must be unique and must not repeat a special token {SPECIAL_TOKENS}; "
                             f"repeated: {', '.join(repeated)}")

    @classmethod
    def build(cls, documents, *, max_features=None, min_df=1):
        """A vocabulary of the tokens of ``documents``.

        Parameters
        ----------
        documents : iterable of sequences of tokens
            Tokenized documents (e.g. ``[tokenizer(text) for text in texts]``).
        max_features : int, optional
            Keep at most this many ordinary tokens, those of highest total count (ties: the
            token first seen first), as :class:`sklearn.feature_extraction.text.CountVectorizer`
            does. None keeps all.
        min_df : int or float, default=1
            Drop tokens found in fewer documents than this: an int is a count (>= 1), a float in
            (0, 1] a fraction of the documents (rounded up). Applied before ``max_features``.

        Returns
        -------
        Vocabulary
            Special tokens, then the kept tokens by decreasing count.
        """
        if max_features is not None:
            if isinstance(max_features, (bool, np.bool_)) or not isinstance(max_features, numbers.Integral):
                raise TypeError(f"max_features must be an int or None, got {type(max_features).__name__}")
            if max_features < 1:
                raise ValueError(f"max_features must be >= 1, got {max_features}")
        counts: collections.Counter[str] = collections.Counter()
        doc_freq: collections.Counter[str] = collections.Counter()
        n_docs = 0
        for doc in documents:
            counts.update(doc)
            doc_freq.update(set(doc))
            n_docs += 1
        threshold = _document_threshold(min_df, n_docs)
        special = set(SPECIAL_TOKENS)
        # Counter keeps first-seen order and sorted() is stable, so ties go to the token seen first.
        kept = [t for t in counts if doc_freq[t] >= threshold and t not in special]
        kept = sorted(kept, key=lambda t: -counts[t])
        return cls(kept if max_features is None else kept[:max_features])

    def __len__(self):
        return len(self.tokens)

    def __contains__(self, token):
        return token in self.index

    def __eq__(self, other):
        return isinstance(other, Vocabulary) and self.tokens == other.tokens

    def __hash__(self):
        return hash(tuple(self.tokens))

    def __repr__(self):
        return f"Vocabulary({len(self)} tokens: {self.tokens[:8]!r}{'...' if len(self) > 8 else ''})"

    def encode(self, tokens, *, prefix=(), suffix=(), max_len=None):
        """Ids of ``tokens`` (``<unk>`` for tokens not in the vocabulary).

        Parameters
        ----------
        tokens : iterable of hashable
        prefix, suffix : sequence of int, optional
            Ids put before and after, e.g. ``[vocab.cls_id]`` or ``[vocab.bos_id]`` /
            ``[vocab.eos_id]``.
        max_len : int, optional
            Keep only the first ``max_len`` tokens (before adding prefix and suffix).

        Returns
        -------
        list of int
        """
        unk, index = self.unk_id, self.index
        ids = [index.get(t, unk) for t in tokens]
        if max_len is not None:
            ids = ids[:max_len]
        return [*prefix, *ids, *suffix]

    def decode(self, ids, *, skip_special=True):
        """Tokens of ``ids``; with ``skip_special``, ``<pad>``, ``<cls>``, ``<bos>`` and ``<eos>``
        are dropped (``<unk>`` is kept: it stands for a word) and decoding stops at the first
        ``<eos>``.

        Raises
        ------
        ValueError
            For an id outside ``[0, len(self))``.
        """
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(self.tokens):
                raise ValueError(f"ids must be in [0, {len(self.tokens)}) (the vocabulary size), got {i}")
            if skip_special:
                if i == self.eos_id:
                    break
                if i != self.unk_id and i < len(SPECIAL_TOKENS):
                    continue
            out.append(self.tokens[i])
        return out

    def get_config(self):
        """JSON-able description: ``{"tokens": [the ordinary tokens in id order]}``."""
        return {"tokens": self.tokens[len(SPECIAL_TOKENS):]}

    @classmethod
    def from_config(cls, config):
        return cls(config["tokens"])


def _document_threshold(min_df, n_docs):
    if isinstance(min_df, (bool, np.bool_)) or not isinstance(min_df, numbers.Real):
        raise TypeError(f"min_df must be an int or a float, got {type(min_df).__name__} {min_df!r}")
    if isinstance(min_df, numbers.Integral):
        if min_df < 1:
            raise ValueError(f"min_df must be >= 1 as an int (a document count), got {min_df}")
        return int(min_df)
    if not 0.0 < float(min_df) <= 1.0:
        raise ValueError(f"min_df must be in (0, 1] as a float (a fraction of the documents), got {min_df}")
    return max(1, math.ceil(min_df * n_docs))


def pad_sequences(sequences, *, pad_id=0, max_len=None, dtype=np.int64):
    """A padded batch of id lists.

    Parameters
    ----------
    sequences : sequence of sequences of int
        One id list per item; items may be empty.
    pad_id : int, default=0
        Value of the padding positions (``Vocabulary.pad_id``).
    max_len : int, optional
        Truncate items to this many ids. The batch is as wide as its longest (truncated) item.
    dtype : numpy integer dtype, default=numpy.int64

    Returns
    -------
    ids : ndarray of shape (B, N)
        Items left-aligned, padded on the right with ``pad_id``; N >= 1 (an all-empty batch gets
        one column of padding, so that every layer sees a non-empty sequence axis).
    lengths : ndarray of shape (B,), int64
        The real length of each item (what attention's ``key_lengths`` takes).
    """
    if max_len is not None:
        sequences = [seq[:max_len] for seq in sequences]
    lengths = np.fromiter((len(seq) for seq in sequences), dtype=np.int64, count=len(sequences))
    width = max(1, int(lengths.max(initial=0)))
    ids = np.full((len(sequences), width), pad_id, dtype=dtype)
    for row, seq in zip(ids, sequences):
        row[: len(seq)] = seq
    return ids, lengths


def length_sorted_batches(sequences, batch_size, *, pad_id=0):
    """Padded batches of sequences of similar lengths, for inference: little padding, any order.

    Parameters
    ----------
    sequences : sequence of sequences of int
    batch_size : int
    pad_id : int, default=0

    Yields
    ------
    rows : ndarray of int
        Positions in ``sequences`` of the batch's items.
    ids, lengths : ndarray
        As :func:`pad_sequences` gives them for those items.
    """
    yield from padded_batches(sequences, batch_size, pad_id=pad_id)


def check_texts(X, name="X"):
    """Validate a collection of texts and return it as a list of str.

    Parameters
    ----------
    X : sequence of str
        A list, tuple, 1-D array, pandas Series, or an array of shape (n, 1) (one text column, as
        a ColumnTransformer passes it).
    name : str, default="X"
        The argument's name, for the messages.

    Returns
    -------
    list of str

    Raises
    ------
    TypeError
        For a single string (not a collection of them), a non-iterable, or an item that is not a
        string (the message gives its position and type).
    ValueError
        For a missing item (None or NaN, with its position), or an array of another shape.
    """
    if isinstance(X, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of strings (one per sample), got a single "
                        f"{type(X).__name__}; wrap it in a list")
    if hasattr(X, "to_numpy") and getattr(X, "ndim", 1) in (1, 2):  # pandas Series / one-column DataFrame
        X = X.to_numpy()
    if isinstance(X, np.ndarray):
        if X.ndim == 2 and X.shape[1] == 1:
            X = X[:, 0]
        elif X.ndim != 1:
            raise ValueError(f"{name} must be a 1-D collection of strings or an array of shape (n_samples, 1), "
                             f"got an array of shape {X.shape}")
    elif not hasattr(X, "__iter__") or isinstance(X, dict):
        raise TypeError(f"{name} must be a sequence of strings, got {type(X).__name__}")
    texts = list(X)
    for i, item in enumerate(texts):
        if isinstance(item, str):
            continue
        if item is None or (isinstance(item, (float, np.floating)) and math.isnan(item)):
            raise ValueError(f"{name} has a missing value ({item!r}) at position {i}; every item must be a string "
                             "(use '' for an empty text)")
        raise TypeError(f"{name} must contain only strings; item {i} is {type(item).__name__} {item!r:.40}")
    return texts
