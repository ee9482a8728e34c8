"""Tokens <-> ids: a :class:`Vocabulary` learnt from documents, with five reserved ids first."""

import collections
import math
import numbers

import numpy as np

__all__ = ["SPECIAL_TOKENS", "Vocabulary"]

#: The special tokens every :class:`Vocabulary` starts with (ids 0 to 4): padding, unknown, the classifier's
#: summary position, start and end of a generated sequence.
SPECIAL_TOKENS = ("<pad>", "<unk>", "<cls>", "<bos>", "<eos>")


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
