"""What one checkpoint architecture supplies to :func:`attnkit.pretrained.load_checkpoint`: a door per
``model_type``, listed in :mod:`attnkit.pretrained.registry`.

The config reader takes the config's fields already parsed, under Hugging Face's names (``config.json``);
a file format (safetensors + JSON today, GGUF next) is read elsewhere and only hands it a dict, so one
reader serves every format. The config it returns has ``vocab_size`` and ``max_position_embeddings``
(checked against the tokenizer and sentence-transformers' ``max_seq_length``).
"""

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Architecture", "unsupported_model_type"]


@dataclasses.dataclass(frozen=True)
class Architecture:
    """One architecture's door.

    Attributes
    ----------
    model_type : str
        The config's ``model_type`` it reads ("bert").
    reads : str
        What it reads, for the message that refuses other types ("BERT-family checkpoints (model_type
        'bert': BERT, MiniLM, ...)").
    read_config : callable
        ``(fields, source) -> config``: a dict of config fields -> the architecture's config dataclass,
        refusing what attnkit cannot build with a ValueError that names ``source`` and the field.
    network_options : callable
        ``config -> dict``: keyword arguments of the attnkit network the weights fit.
    map_weights : callable
        ``(tensors, config, source) -> {attnkit name: float32 array}``: its tensor table applied and
        checked (:mod:`attnkit.pretrained.table`).
    """

    model_type: str
    reads: str
    read_config: Callable[[Any, str], Any]
    network_options: Callable[[Any], dict]
    map_weights: Callable[[Mapping, Any, str], dict]


def unsupported_model_type(model_type, reads, source):
    """The error for a ``model_type`` no architecture reads; ``reads`` lists what attnkit does read."""
    return ValueError(f"{source}: model_type {model_type!r} is not supported; attnkit reads {' and '.join(reads)}")
