"""The token space of :class:`~attnkit.estimators.TransformerClassifier`: token lists -> the ids the network
reads, and ids -> the token strings of :meth:`~attnkit.estimators.TransformerClassifier.attention_maps`.

From scratch, attnkit's :class:`~attnkit.text.Tokenizer` splits texts and a :class:`~attnkit.text.Vocabulary`
learnt in fit maps the tokens to ids (:class:`VocabularySpace`); with ``pretrained=...``, the checkpoint's
:class:`~attnkit.pretrained.tokenizer.PretrainedTokenizer` does both, and token-id input is taken as its own
ids (:class:`PretrainedSpace`). Both share one interface, so the classifier never asks which one it holds.
The methods that depend on how the classifier reads its inputs take its ``_input`` route (a dict: ``kind``,
``max_len``, ``cls``, ``whole``).
"""

import sys

import numpy as np

from attnkit.estimators._token_input import IDS
from attnkit.text import SPECIAL_TOKENS, Vocabulary

__all__ = ["VocabularySpace", "PretrainedSpace"]


class VocabularySpace:
    """Tokens -> ids through a :class:`~attnkit.text.Vocabulary` learnt in fit (``<unk>`` for the others).

    Parameters
    ----------
    vocabulary : Vocabulary
    """

    def __init__(self, vocabulary):
        self.vocabulary = vocabulary
        self.vocab_size = len(vocabulary)

    @classmethod
    def from_mapping(cls, mapping):
        """The space of a fitted ``vocabulary_`` (token -> id, special tokens first)."""
        tokens = sorted(mapping, key=mapping.__getitem__)
        return cls(Vocabulary(tokens[len(SPECIAL_TOKENS) :]))

    def encode(self, tokens, route):
        """Id lists, after a <cls> id with cls pooling: truncated to max_len, or whole when the
        n-gram bag reads them (the network then cuts the encoder's copy)."""
        prefix = [Vocabulary.cls_id] if route["cls"] else []
        max_len = None if route["whole"] else route["max_len"]
        return [self.vocabulary.encode(doc, prefix=prefix, max_len=max_len) for doc in tokens]

    def special_ids(self):
        """The ids word dropout never hides, and the id it puts in their place."""
        return np.arange(len(SPECIAL_TOKENS)), Vocabulary.unk_id
    def labels(self, ids):
        """The token of each id."""
        return [self.vocabulary.tokens[i] for i in ids]

    def mapping(self):
        """Token -> id (the classifier's ``vocabulary_``)."""
        return dict(self.vocabulary.index)

    def config(self):
        """The classifier file's ``vocabulary`` and ``tokenizer`` entries."""
        return {"vocabulary": self.vocabulary.get_config()["tokens"], "tokenizer": None}


class PretrainedSpace:
    """Texts -> ids through a checkpoint's own tokenizer; token-id input is taken as its ids, only checked.

    Parameters
    ----------
    tokenizer : PretrainedTokenizer
    vocab_size : int
        Rows of the checkpoint's token embedding: the ids the network can read.
    """

    def __init__(self, tokenizer, vocab_size):
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size

    def text_tokenizer(self, route):
        """Texts -> id lists, for the text route (attnkit's own Tokenizer does not apply)."""
        # The text's first max_len wordpieces between the checkpoint's special tokens, or all of them for the
        # n-gram bag (the network then cuts the encoder's copy).
        budget = sys.maxsize if route["whole"] else route["max_len"] + 2
        return lambda texts: self.tokenizer.encode(texts, budget)[0]

    def encode(self, tokens, route):
        """The id lists themselves (the tokenizer's ids, or the user's, with the special tokens as written),
        checked against the vocabulary; token-id input is cut to max_len + 2 unless the n-gram bag reads it."""
        bad = [t for doc in tokens for t in doc if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"X has token id {bad[0]} outside the pretrained checkpoint's vocabulary "
                             f"[0, {self.vocab_size})")
        return tokens if route["whole"] or route["kind"] != IDS else [doc[:route["max_len"] + 2] for doc in tokens]

    def special_ids(self):
        """The ids word dropout never hides, and the id it puts in their place."""
        return self.tokenizer.special_ids(), self.tokenizer.unk_id()

    def specials(self):
        """How many special tokens the tokenizer puts before and after a text's own ids."""
        return self.tokenizer.special_layout()

    def labels(self, ids):
        """The token of each id (e.g. wordpieces)."""
        return self.tokenizer.tokens(ids)

    def mapping(self):
        """Token -> id, added tokens included (the classifier's ``vocabulary_``)."""
        return self.tokenizer.vocabulary()

    def config(self):
        """The classifier file's ``vocabulary`` and ``tokenizer`` entries."""
        return {"vocabulary": None, "tokenizer": self.tokenizer.json_text}
