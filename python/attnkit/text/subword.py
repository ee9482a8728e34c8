"""Subword pieces learnt from a corpus (BPE or unigram, with Hugging Face ``tokenizers``): a
:class:`SubwordTokenizer` spells any word and decodes back to the exact text."""

import json
import numbers

import numpy as np

from attnkit.text.checks import check_texts, refuse_unencodable

__all__ = ["SubwordTokenizer"]


class SubwordTokenizer:
    """Split text into subword pieces learnt from a corpus (BPE or unigram), and join them back.

    The pieces come from the Hugging Face ``tokenizers`` library (the ``pretrained`` extra). Text is
    lowercased (optionally) and its whitespace runs made single spaces first (unless ``keep_whitespace``);
    the pieces keep the spaces (byte-level BPE, or the unigram model's metaspace ``"▁"``), so
    :meth:`detokenize` gives back that text exactly.

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
    keep_whitespace : bool, default=False
        Keep every space, tab and newline as written (pieces spell them; nothing is added or stripped):
        what a language model that writes verse or code needs.

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

    def __init__(self, kind="bpe", *, lowercase=True, model=None, keep_whitespace=False):
        if kind not in self.KINDS:
            raise ValueError(f"kind must be one of {self.KINDS}, got {kind!r}")
        for name, value in (("lowercase", lowercase), ("keep_whitespace", keep_whitespace)):
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
        if model is not None and not isinstance(model, str):
            raise TypeError(f"model must be the JSON text of a trained tokenizer or None, got {type(model).__name__}")
        self.kind = kind
        self.lowercase = bool(lowercase)
        self.model = model
        self.keep_whitespace = bool(keep_whitespace)
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
            model.pre_tokenizer = pre.ByteLevel(add_prefix_space=not self.keep_whitespace)
            model.decoder = dec.ByteLevel()
            trainer = tokenizers.trainers.BpeTrainer(vocab_size=int(vocab_size), show_progress=False,
                                                     initial_alphabet=pre.ByteLevel.alphabet())
        else:
            model = tokenizers.Tokenizer(tokenizers.models.Unigram())
            scheme = "never" if self.keep_whitespace else "always"
            model.pre_tokenizer = pre.Metaspace(prepend_scheme=scheme)
            model.decoder = dec.Metaspace(prepend_scheme=scheme)
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
        try:
            return self._tokenizer().encode(text).tokens if text else []
        except TypeError:  # what tokenizers says of a lone surrogate; named here
            refuse_unencodable([text])
            raise

    def detokenize(self, tokens):
        """Join pieces into a string: ``detokenize(tokenizer(text))`` is ``text`` with its whitespace
        runs made single spaces (and lowercased, when lowercasing)."""
        text = self._tokenizer().decoder.decode(list(tokens))
        return text if self.keep_whitespace else text.strip()

    def _normalise(self, text):
        text = text.lower() if self.lowercase else text
        return text if self.keep_whitespace else " ".join(text.split())

    def _tokenizer(self):
        if self.model is None:
            raise ValueError(f"this {self!r} is not trained: call fit(texts) first")
        if self._compiled is None:
            self._compiled = _import_tokenizers().Tokenizer.from_str(self.model)
        return self._compiled

    def get_config(self):
        """JSON-able constructor arguments (the trained model included)."""
        return {"kind": self.kind, "lowercase": self.lowercase, "model": self.model,
                "keep_whitespace": self.keep_whitespace}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __getstate__(self):
        return {**self.__dict__, "_compiled": None}

    def __eq__(self, other):
        return isinstance(other, SubwordTokenizer) and self.get_config() == other.get_config()

    def __hash__(self):
        return hash((self.kind, self.lowercase, self.model, self.keep_whitespace))

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
