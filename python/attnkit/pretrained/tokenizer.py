"""A checkpoint's own tokenizer (Hugging Face ``tokenizers``: WordPiece, BPE, ...), as attnkit uses it.

Checkpoints such as all-MiniLM-L6-v2 ship a ``tokenizer.json`` that pads every text to a fixed length
and truncates at 128; both are switched off here, and texts are truncated to what the model reads by
:meth:`PretrainedTokenizer.encode`, the way Hugging Face does it (the text's tokens are cut, the special
tokens kept). The object keeps only the JSON text as its state, so estimators holding one pickle, clone
and cross process boundaries (joblib, Dask); the Rust tokenizer is rebuilt on first use.
"""

import json
import threading

import numpy as np

from attnkit.text.checks import refuse_unencodable

__all__ = ["PretrainedTokenizer", "require_extra"]

EXTRA = "pip install 'attnkit[pretrained]'"


def require_extra(module):
    """Import ``module`` (safetensors, tokenizers, gguf or jinja2) of the ``pretrained`` extra, or say how to install
    it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"pretrained models need the optional packages of the 'pretrained' extra (safetensors, "
                          f"tokenizers, gguf, jinja2), which are not all installed ({module} is missing): {EXTRA}") \
            from None


class PretrainedTokenizer:
    """Texts -> token ids (and back) with a checkpoint's ``tokenizer.json``.

    Parameters
    ----------
    json_text : str
        The contents of ``tokenizer.json``.

    Attributes
    ----------
    vocab_size : int
        Ids the tokenizer can produce (added tokens included).
    """

    def __init__(self, json_text):
        if not isinstance(json_text, str):
            raise TypeError(f"json_text must be the text of tokenizer.json, got {type(json_text).__name__}")
        self.json_text = json_text
        self._tokenizer = None
        self._lock = threading.Lock()
        self.vocab_size = self._rust().get_vocab_size(with_added_tokens=True)

    def _rust(self):
        """The ``tokenizers.Tokenizer``, built once (per process), padding and truncation off."""
        if self._tokenizer is None:
            with self._lock:
                if self._tokenizer is None:
                    tokenizers = require_extra("tokenizers")
                    try:
                        tokenizer = tokenizers.Tokenizer.from_str(self.json_text)
                    except Exception as error:  # the Rust parser raises its own exception type
                        raise ValueError(f"tokenizer.json cannot be read by tokenizers: {error}") from None
                    tokenizer.no_padding()
                    tokenizer.no_truncation()
                    self._tokenizer = tokenizer
        return self._tokenizer

    def encode(self, texts, max_len):
        """Token ids of each text, special tokens included, at most ``max_len`` of them.

        Returns
        -------
        ids : list of lists of int
        n_cut : int
            How many texts were longer and lost tokens at their end (before the closing special tokens).
        """
        tokenizer = self._rust()
        room = max_len - tokenizer.num_special_tokens_to_add(False)
        if room < 0:
            raise ValueError(f"max_len={max_len} leaves no room for the tokenizer's own special tokens")
        ids, n_cut, texts = [], 0, list(texts)
        # One batched call: the Rust side splits the texts over its own thread pool.
        try:
            encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
        except TypeError:  # what it says of a lone surrogate; named here
            refuse_unencodable(texts)
            raise
        for encoding in encodings:
            if len(encoding.ids) > room:
                encoding.truncate(room)
                n_cut += 1
            ids.append(tokenizer.post_process(encoding).ids)
        return ids, n_cut

    def decode(self, ids, skip_special_tokens=True):
        """The text of token ids: the inverse of :meth:`encode`, through the tokenizer's own decoder.

        WordPiece's decoder glues ``##`` pieces and ``. , ? !`` to the word before them (a BERT tokenizer
        lower-cases and strips accents, so its text comes back normalised); byte-level BPE's maps its byte
        symbols back to UTF-8, so the exact text comes back.

        Parameters
        ----------
        ids : sequence of int
            Token ids, in ``[0, vocab_size)``.
        skip_special_tokens : bool, default=True
            Leave out the special tokens ([CLS], [SEP], [PAD], ``<|endoftext|>``, ...).

        Returns
        -------
        str

        Raises
        ------
        ValueError
            For an id outside the vocabulary (the tokenizer itself would drop it silently).
        """
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"ids must be token ids in [0, {self.vocab_size}), got {bad[:5]}")
        return self._rust().decode(ids, skip_special_tokens=bool(skip_special_tokens))

    def special_layout(self):
        """(before, after): how many special tokens the tokenizer puts before and after a text's own (1, 1 for
        BERT's ``[CLS] ... [SEP]``)."""
        tokenizer = self._rust()
        own = tokenizer.encode("a", add_special_tokens=False).ids
        full = tokenizer.encode("a", add_special_tokens=True).ids
        before = next(i for i in range(len(full) - len(own) + 1) if full[i:i + len(own)] == own)
        return before, len(full) - len(own) - before

    def tokens(self, ids):
        """The token strings of ``ids`` (e.g. wordpieces ``["[CLS]", "play", "##ing", "[SEP]"]``)."""
        tokenizer = self._rust()
        return [tokenizer.id_to_token(int(i)) for i in ids]

    def token_id(self, token):
        """The id of ``token`` (e.g. "[MASK]"), or None."""
        return self._rust().token_to_id(token)

    def special_ids(self):
        """The ids of the special tokens ([PAD], [CLS], [SEP], [UNK], [MASK], ...), as a sorted array."""
        decoder = self._rust().get_added_tokens_decoder()
        return np.array(sorted(i for i, token in decoder.items() if token.special), dtype=np.int64)

    def unk_id(self):
        """The id the tokenizer gives to what its vocabulary lacks ([UNK]), or None."""
        model = json.loads(self.json_text).get("model", {})
        token = model.get("unk_token") if isinstance(model, dict) else None
        return None if token is None else self.token_id(token)

    def vocabulary(self):
        """Token -> id, added tokens included."""
        return dict(self._rust().get_vocab(with_added_tokens=True))

    def __getstate__(self):
        return {"json_text": self.json_text, "vocab_size": self.vocab_size}

    def __setstate__(self, state):
        self.json_text, self.vocab_size = state["json_text"], state["vocab_size"]
        self._tokenizer, self._lock = None, threading.Lock()

    def __repr__(self):
        return f"PretrainedTokenizer(vocab_size={self.vocab_size})"
