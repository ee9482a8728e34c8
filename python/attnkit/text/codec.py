"""Text <-> token ids for a language model: a :class:`TextCodec` encodes a whole text (whitespace, newlines and
case as written, where the tokens can spell them) and decodes ids back into text."""

import numpy as np

from attnkit.text.checks import check_texts, refuse_unencodable
from attnkit.text.subword import SubwordTokenizer, _import_tokenizers
from attnkit.text.tokenizer import Tokenizer
from attnkit.text.vocabulary import SPECIAL_TOKENS, Vocabulary

__all__ = ["TextCodec"]

KINDS = ("char", "word", "bpe", "unigram")


class TextCodec:
    """Token ids of texts and texts of token ids, learnt from a corpus or given as a ``tokenizers`` tokenizer.

    Every codec has attnkit's five special ids first (:data:`attnkit.text.SPECIAL_TOKENS`): ``<pad>``,
    ``<unk>``, ``<cls>``, ``<bos>`` and ``<eos>``, the end of a text (:attr:`eot_id`), which a language model
    reads between the documents of its corpus and writes to end one.

    Parameters
    ----------
    kind : {"char", "word", "bpe", "unigram"} or tokenizers.Tokenizer
        ``"char"``: every character a token (spaces and newlines included; texts decode exactly).
        ``"word"``: :class:`attnkit.text.Tokenizer` words and punctuation (decoded with single spaces, so
        newlines are not kept). ``"bpe"`` and ``"unigram"``: subword pieces learnt from the corpus that keep
        every whitespace character (:class:`attnkit.text.SubwordTokenizer` with ``keep_whitespace=True``).
        A Hugging Face ``tokenizers.Tokenizer`` (e.g. a pretrained model's): its ids, shifted past the
        special ids, and its decoder.
    lowercase : bool, default=False
        Lowercase texts first (attnkit's kinds only).
    max_features : int, optional
        Most tokens learnt (subword kinds: pieces, 8000 by default; char and word: the most frequent).

    Attributes
    ----------
    vocabulary : Vocabulary or None
        attnkit's kinds: the tokens and their ids (None for a ``tokenizers`` tokenizer).
    size : int
        Number of ids.
    end_ids : tuple of int
        Ids that end a text: ``(eot_id,)``, or a pretrained model's end tokens (:meth:`pretrained`).

    Examples
    --------
    >>> codec = TextCodec("char").fit(["To be, or not to be:\\nthat is the question."])
    >>> ids = codec.encode("to be\\n")
    >>> codec.decode(ids)
    'to be\\n'
    """

    def __init__(self, kind="char", *, lowercase=False, max_features=None):
        if not (isinstance(kind, str) and kind in KINDS) and not _is_tokenizers_object(kind):
            raise ValueError(f"tokenizer must be one of {KINDS} or a tokenizers.Tokenizer, got {kind!r}")
        self.kind, self.lowercase, self.max_features = kind, bool(lowercase), max_features
        self.vocabulary: Vocabulary | None = None
        self._splitter = None
        self._hf = kind if _is_tokenizers_object(kind) else None
        self._offset, self._eot = len(SPECIAL_TOKENS), Vocabulary.eos_id  # where the tokenizer's ids start; end of text
        self.end_ids: tuple[int, ...] = (self._eot,)

    @classmethod
    def pretrained(cls, tokenizer, eot_id, end_ids=()):
        """A pretrained model's codec: its ``tokenizers`` tokenizer's own ids (no attnkit special ids before them),
        ``eot_id`` read between documents and written to end one, and ``end_ids`` that also end a text (an
        instruct model's end of turn)."""
        if not _is_tokenizers_object(tokenizer):
            raise TypeError(f"tokenizer must be a tokenizers.Tokenizer, got {type(tokenizer).__name__}")
        codec = cls(tokenizer)
        size = tokenizer.get_vocab_size()
        codec._offset, codec._eot = 0, int(eot_id)
        codec.end_ids = tuple(dict.fromkeys([codec._eot, *(int(i) for i in end_ids)]))
        if not all(0 <= i < size for i in codec.end_ids):
            raise ValueError(f"eot_id and end_ids must be token ids in [0, {size}), got {codec.end_ids}")
        return codec

    @property
    def eot_id(self):
        return self._eot

    @property
    def unk_id(self):
        return Vocabulary.unk_id

    @property
    def specials(self):
        """How many ids before the tokenizer's own: attnkit's special ids, or none for a pretrained codec."""
        return self._offset

    @property
    def size(self):
        if self._hf is not None:
            return self._offset + self._hf.get_vocab_size()
        if self.vocabulary is None:
            raise ValueError("this TextCodec is not fitted: call fit(texts) first")
        return len(self.vocabulary)

    def fit(self, texts):
        """Learn the tokens of ``texts`` (nothing to learn for a ``tokenizers`` tokenizer). Returns self."""
        texts = check_texts(texts, name="texts")
        if self._hf is not None:
            return self
        if self.kind in SubwordTokenizer.KINDS:
            self._splitter = SubwordTokenizer(self.kind, lowercase=self.lowercase, keep_whitespace=True).fit(
                texts, self.max_features)
            # Every piece the model can write, not only those the corpus shows: a unigram model may split a new text
            # into pieces its corpus never used.
            pieces = self._splitter._tokenizer().get_vocab()
            self.vocabulary = Vocabulary([p for p in sorted(pieces, key=pieces.get) if p not in SPECIAL_TOKENS])
            return self
        self._splitter = Tokenizer(self.kind, lowercase=self.lowercase)
        self.vocabulary = Vocabulary.build((self._splitter(t) for t in texts), max_features=self.max_features)
        return self

    def encode(self, text):
        """The ids of one text (no end-of-text id), an int64 array; a token never learnt is ``<unk>``."""
        if self._hf is not None:
            try:
                encoding = self._hf.encode(text, add_special_tokens=False)
            except TypeError:  # what tokenizers says of a lone surrogate; named here
                refuse_unencodable([text])
                raise
            return np.asarray(encoding.ids, dtype=np.int64) + self._offset
        if self.vocabulary is None or self._splitter is None:
            raise ValueError("this TextCodec is not fitted: call fit(texts) first")
        return np.asarray(self.vocabulary.encode(self._splitter(text)), dtype=np.int64)

    def decode(self, ids):
        """The text of ``ids``; special ids are dropped (a pretrained codec's end ids too)."""
        if self._hf is not None and not self._offset:
            return self._hf.decode([int(i) for i in ids if int(i) not in self.end_ids], skip_special_tokens=False)
        ids = [int(i) for i in ids if int(i) >= len(SPECIAL_TOKENS)]
        if self._hf is not None:
            return self._hf.decode([i - len(SPECIAL_TOKENS) for i in ids], skip_special_tokens=False)
        if self.vocabulary is None or self._splitter is None:
            raise ValueError("this TextCodec is not fitted: call fit(texts) first")
        tokens = [self.vocabulary.tokens[i] for i in ids]
        return self._splitter.detokenize(tokens)

    def token_strings(self, ids):
        """A readable string per id (its token; ``<eos>`` for the end of text), for plots and attention maps."""
        out = []
        for i in (int(i) for i in ids):
            if i < self._offset:
                out.append(SPECIAL_TOKENS[i])
            elif self._hf is not None and not self._offset:  # a pretrained byte-level token: its text (" animal")
                text = self._hf.decode([i], skip_special_tokens=False)
                out.append(text if text and "\ufffd" not in text else self._hf.id_to_token(i) or "")
            elif self._hf is not None:
                out.append(self._hf.id_to_token(i - self._offset) or "")
            else:
                assert self.vocabulary is not None
                out.append(str(self.vocabulary.tokens[i]))
        return out

    # -- saving ---------------------------------------------------------------------------------------------
    def get_config(self):
        """JSON-able state: :meth:`from_config` rebuilds an equal codec."""
        if self._hf is not None and not self._offset:
            return {"kind": "pretrained", "model": self._hf.to_str(), "eot_id": self._eot,
                    "end_ids": list(self.end_ids)}
        if self._hf is not None:
            return {"kind": "tokenizers", "model": self._hf.to_str()}
        config = {"kind": self.kind, "lowercase": self.lowercase, "max_features": self.max_features,
                  "vocabulary": None if self.vocabulary is None else self.vocabulary.get_config()}
        if isinstance(self._splitter, SubwordTokenizer):
            config["subword_model"] = self._splitter.model
        return config

    @classmethod
    def from_config(cls, config):
        if config["kind"] == "tokenizers":
            return cls(_import_tokenizers().Tokenizer.from_str(config["model"]))
        if config["kind"] == "pretrained":
            return cls.pretrained(_import_tokenizers().Tokenizer.from_str(config["model"]), config["eot_id"],
                                  config["end_ids"])
        codec = cls(config["kind"], lowercase=config["lowercase"], max_features=config["max_features"])
        if config["vocabulary"] is not None:
            codec.vocabulary = Vocabulary.from_config(config["vocabulary"])
            if codec.kind in SubwordTokenizer.KINDS:
                codec._splitter = SubwordTokenizer(codec.kind, lowercase=codec.lowercase, keep_whitespace=True,
                                                   model=config["subword_model"])
            else:
                codec._splitter = Tokenizer(codec.kind, lowercase=codec.lowercase)
        return codec

    def __getstate__(self):
        # A tokenizers object pickles; keep the state plain anyway, as the estimators' fitted state is.
        return {"config": self.get_config()}

    def __setstate__(self, state):
        self.__dict__.update(TextCodec.from_config(state["config"]).__dict__)

    def __repr__(self):
        kind = "tokenizers.Tokenizer" if self._hf is not None else repr(self.kind)
        return f"TextCodec({kind}{'' if self._hf is not None or self.vocabulary else ', unfitted'})"


def _is_tokenizers_object(obj):
    """A Hugging Face ``tokenizers.Tokenizer`` (by its methods, so that the import stays optional)."""
    return all(hasattr(obj, name) for name in ("encode", "decode", "to_str", "get_vocab_size", "id_to_token"))
