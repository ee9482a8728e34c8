"""A checkpoint's tensors through one architecture's table: the one explicit, checked mapping.

The table (checkpoint name -> :mod:`rule <attnkit.pretrained.rules>`) is built from the config, so a config
is first held to the tensors: its number of layers must be the checkpoint's (a config claiming 10^9 layers
is refused before a table of 10^9 entries is built). Then every tensor the table names must be present,
floating point, of the rule's shape and finite; tensors the network does not use are ignored by prefix;
anything else is refused. Errors name the file and the tensor.
"""

import collections
import dataclasses
import re
from collections.abc import Callable

import numpy as np

__all__ = ["TensorNames", "apply_table", "check_layer_count"]


def _same(name):
    return name


@dataclasses.dataclass(frozen=True)
class TensorNames:
    """How one architecture's checkpoints name their tensors.

    Attributes
    ----------
    model : str
        What the table builds, for messages ("a BERT encoder").
    layer : re.Pattern
        Matches a canonical name inside a layer; group 1 is the layer's index.
    layers : str
        What the layers are called in messages ("encoder layers").
    layers_field : str
        The config field that gives their number ("num_hidden_layers").
    canonical : callable, default=identity
        Checkpoint name -> the table's name (drops a model prefix, renames old spellings).
    ignored : tuple of str, default=()
        Prefixes of canonical names the network does not use (buffers, pre-training heads).
    """

    model: str
    layer: re.Pattern
    layers: str
    layers_field: str
    canonical: Callable[[str], str] = _same
    ignored: tuple[str, ...] = ()


def check_layer_count(tensors, n_layers, names, *, source):
    """Refuse a config whose number of layers is not the checkpoint's, before its table is built.

    Raises
    ------
    ValueError
        "{source} holds 2 encoder layers, but the config's num_hidden_layers is 1000".
    """
    layers = {int(match.group(1)) for name in tensors if (match := names.layer.match(names.canonical(name)))}
    if len(layers) != n_layers:
        raise ValueError(f"{source} holds {len(layers)} {names.layers}, but the config's {names.layers_field} is "
                         f"{n_layers}")


def apply_table(tensors, table, names, *, source):
    """The checkpoint's tensors as attnkit's parameters: ``{attnkit name: float32 array}``.

    Parameters
    ----------
    tensors : mapping of str to ndarray
        The checkpoint's tensors under its own names.
    table : dict of str to Rule
        Canonical checkpoint name -> rule.
    names : TensorNames
    source : str
        The file, for messages.

    Raises
    ------
    ValueError
        Naming the missing, unexpected, misshapen, non-float or non-finite tensors.
    """
    written = collections.Counter(target for rule in table.values() for target in rule.targets)
    if twice := sorted(target for target, count in written.items() if count > 1):
        raise RuntimeError(f"the tensor table of {names.model} writes {twice} more than once")
    found = {}
    unexpected = []
    for name, value in tensors.items():
        key = names.canonical(name)
        if key in table:
            found[key] = (name, value)
        elif not key.startswith(names.ignored):
            unexpected.append(name)
    missing = sorted(set(table) - set(found))
    if missing or unexpected:
        raise ValueError(f"{source} does not match {names.model} of its config: missing {missing[:6]}"
                         f"{' ...' if len(missing) > 6 else ''}, unexpected {sorted(unexpected)[:6]}"
                         f"{' ...' if len(unexpected) > 6 else ''}")
    weights = {}
    for key, rule in table.items():
        name, value = found[key]
        value = np.asarray(value)
        if value.dtype.kind != "f":
            raise ValueError(f"{source}: tensor {name} must be floating point, got {value.dtype}")
        if value.shape != rule.shape:
            raise ValueError(f"{source}: tensor {name} has shape {value.shape}, but the config implies {rule.shape}")
        if not np.isfinite(value).all():
            raise ValueError(f"{source}: tensor {name} holds non-finite values (NaN or inf); the checkpoint is damaged")
        weights.update(rule.apply(value))
    return weights
