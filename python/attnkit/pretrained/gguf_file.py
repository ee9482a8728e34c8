"""A GGUF file (llama.cpp's checkpoint format): its metadata as plain Python values and its tensors as
read-only views into the memory-mapped file.

A GGUF file is untrusted input. ``gguf.GGUFReader`` (the format's reference reader) walks the header wherever
its lengths point (an array that claims 2**60 elements is looped over) and builds an array per item of every
metadata array, so the header is read here instead, with every length bounded and every item inside the file,
and every tensor is checked (its type, shape, byte size and place in the file) before anything is returned. The
``gguf`` package names the tensor types, writes the tests' files and checks this reader (its fields equal ours).
Nothing is copied: the 98 MB of SmolLM2-135M's quantised weights stay in the page cache.
"""

import dataclasses
import os
import struct
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from attnkit.pretrained.tokenizer import require_extra

__all__ = ["GGUFFile", "GGUFTensor", "KINDS", "read_gguf"]

MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_KEY_BYTES = 1024
MAX_STRING_BYTES = 1024
# Strings that are documents rather than names: a chat template is a Jinja program of a few KB.
MAX_LONG_STRING_BYTES = {"tokenizer.chat_template": 2**20}
MAX_ARRAY_LENGTH = 1_000_000  # a vocabulary of 256k tokens and its merges fit
MAX_TENSORS = 65_536
MAX_ELEMENTS = 2**31 - 1
MAX_DIMS = 4  # GGML_MAX_DIMS

# ggml type name -> (attnkit's kind, values per block, bytes per block).
KINDS = {"F32": ("f32", 1, 4), "F16": ("f16", 1, 2), "Q8_0": ("q8_0", 32, 34), "Q4_1": ("q4_1", 32, 20)}

# GGUF value types (gguf.GGUFValueType) -> struct format of a scalar; 8 is a string, 9 an array.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


@dataclasses.dataclass(frozen=True)
class GGUFTensor:
    """One tensor of a GGUF file.

    Attributes
    ----------
    name : str
    kind : {"f32", "f16", "q8_0", "q4_1"}
    shape : tuple of int
        ggml's order, innermost first: a linear layer's weight is ``(n_in, n_out)``, stored as ``n_out`` rows
        of ``n_in`` values.
    data : ndarray
        A read-only view into the file: float32 or float16 of shape ``shape[::-1]``, or for a quantised kind
        uint8 of shape ``(*shape[:0:-1], bytes per row)`` (the blocks of each row, as ggml lays them out).
    """

    name: str
    kind: str
    shape: tuple[int, ...]
    data: np.ndarray = dataclasses.field(repr=False)


@dataclasses.dataclass(frozen=True)
class GGUFFile:
    """What :func:`read_gguf` returns.

    Attributes
    ----------
    path : str
    metadata : mapping of str to value
        Every key/value pair of the file as str, int, float, bool or lists of them (read-only).
    tensors : mapping of str to GGUFTensor
        In the file's order (read-only).
    """

    path: str
    metadata: Mapping[str, Any]
    tensors: Mapping[str, GGUFTensor]


def read_gguf(path):
    """Read a GGUF file's metadata and map its tensors, checking all of it first.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    GGUFFile

    Raises
    ------
    ImportError
        Without the ``gguf`` package (``pip install 'attnkit[pretrained]'``).
    FileNotFoundError
        If there is no such file.
    ValueError
        Naming ``path``: not a GGUF file (magic, version, byte order), a truncated or damaged header, a string
        or array past its bound, a tensor of a type attnkit does not read (named), a shape that is not positive
        or holds 2**31 elements or more, a byte size that is not what the type and shape imply, or a tensor
        that does not lie inside the file.

    Examples
    --------
    >>> from attnkit.pretrained.gguf_file import read_gguf
    >>> gguf_file = read_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")  # doctest: +SKIP
    >>> gguf_file.metadata["llama.block_count"], gguf_file.tensors["blk.0.attn_q.weight"].kind  # doctest: +SKIP
    (30, 'q4_1')
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"path={path!r}: no such file")
    require_extra("gguf")
    # numpy cannot map an empty file
    mapped = np.memmap(path, dtype=np.uint8, mode="r") if os.path.getsize(path) else np.zeros(0, np.uint8)
    metadata, layout, data_start = _scan(mapped.data, path)
    tensors = {}
    for name, kind, shape, offset, size in layout:
        start = data_start + offset
        if kind in ("f32", "f16"):
            data = mapped[start : start + size].view(np.float32 if kind == "f32" else np.float16).reshape(shape[::-1])
        else:  # the blocks of each row, as ggml lays them out
            data = mapped[start : start + size].reshape(*shape[:0:-1], -1)
        tensors[name] = GGUFTensor(name, kind, shape, data)
    return GGUFFile(path, MappingProxyType(metadata), MappingProxyType(tensors))


class _Header:
    """A cursor over the header that refuses to read past the end of the file."""

    def __init__(self, view, path):
        self.view, self.path, self.offset = view, path, 0

    def take(self, size, what):
        if size > len(self.view) - self.offset:
            raise ValueError(f"{self.path} is truncated: {what} at byte {self.offset:,} needs {size:,} bytes, "
                             f"the file has {len(self.view) - self.offset:,} left")
        start, self.offset = self.offset, self.offset + size
        return self.view[start:self.offset]

    def scalar(self, fmt, what):
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what, limit):
        size = self.scalar("Q", what)
        if size > limit:
            raise ValueError(f"{self.path}: {what} is {size:,} bytes long, more than the {limit:,} attnkit reads")
        try:
            return bytes(self.take(size, what)).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{self.path}: {what} is not UTF-8") from None


def _scan(view, path):
    """Walk the header with every length checked; return its metadata, ``[(name, kind, shape, offset, size)]`` of
    its tensors and where their data starts.

    This walk is the reader: ``gguf.GGUFReader`` builds one array per item of every metadata array (SmolLM2's
    49,152 tokens and 48,900 merges: 4 s and 170 MB at its peak), where these bounded reads take a tenth of a
    second and hold only the values (the tests check both readers agree)."""
    header = _Header(view, path)
    if len(view) < 4 or bytes(view[:4]) != MAGIC:
        raise ValueError(f"{path} is not a GGUF file (it does not start with the bytes b'GGUF', got "
                         f"{bytes(view[:4])!r})")
    header.take(4, "the magic")
    version = header.scalar("I", "the version")
    if version not in VERSIONS:
        hint = " (a big-endian file: attnkit reads little-endian GGUF)" if version & 0xFFFF == 0 else ""
        raise ValueError(f"{path}: GGUF version {version} is not one attnkit reads ({VERSIONS}){hint}")
    n_tensors, n_values = header.scalar("Q", "the tensor count"), header.scalar("Q", "the key count")
    if n_tensors > MAX_TENSORS or n_values > MAX_ARRAY_LENGTH:
        raise ValueError(f"{path}: the header claims {n_tensors:,} tensors and {n_values:,} keys, more than the "
                         f"{MAX_TENSORS:,} and {MAX_ARRAY_LENGTH:,} attnkit reads")
    alignment = 32
    metadata: dict[str, Any] = {}
    for _ in range(n_values):
        key = header.string("a metadata key", MAX_KEY_BYTES)
        if key in metadata:
            raise ValueError(f"{path}: metadata key {key!r} appears twice")
        value_type = header.scalar("I", f"the type of {key!r}")
        if key == "general.alignment":
            if value_type != 4:
                raise ValueError(f"{path}: general.alignment must be a uint32, got GGUF value type {value_type}")
            alignment = header.scalar("I", key)
            if alignment == 0 or alignment & (alignment - 1):
                raise ValueError(f"{path}: general.alignment must be a power of two, got {alignment}")
            metadata[key] = alignment
            continue
        metadata[key] = _read_value(header, key, value_type)
    layout, names = [], set()
    for index in range(n_tensors):
        name = header.string(f"the name of tensor {index}", MAX_KEY_BYTES)
        if name in names:
            raise ValueError(f"{path}: tensor name {name!r} appears twice")
        names.add(name)
        n_dims = header.scalar("I", f"the rank of tensor {name!r}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise ValueError(f"{path}: GGUF tensor {name} has {n_dims} dimensions; expected 1 to {MAX_DIMS}")
        shape = tuple(header.scalar("Q", f"the shape of tensor {name!r}") for _ in range(n_dims))
        type_id = header.scalar("I", f"the type of tensor {name!r}")
        offset = header.scalar("Q", f"the offset of tensor {name!r}")
        kind, block, block_bytes = _kind(name, type_id, path)
        if min(shape) < 1 or int(np.prod(shape, dtype=object)) > MAX_ELEMENTS:
            raise ValueError(f"{path}: GGUF tensor {name} has shape {list(shape)}; expected positive sizes and "
                             f"at most {MAX_ELEMENTS:,} elements")
        if shape[0] % block:
            raise ValueError(f"{path}: GGUF tensor {name} has shape {list(shape)} of type {kind}, whose rows must "
                             f"hold a multiple of {block} values")
        layout.append((name, kind, shape, offset, int(np.prod(shape, dtype=object)) // block * block_bytes))
    data_start = -(-header.offset // alignment) * alignment
    for name, _, _, offset, size in layout:
        if offset % alignment or data_start + offset + size > len(view):
            raise ValueError(f"{path}: GGUF tensor {name} ({size:,} bytes at offset {offset:,} of the data, which "
                             f"starts at byte {data_start:,}) does not lie inside the file ({len(view):,} bytes, "
                             f"alignment {alignment})")
    return metadata, layout, data_start


def _read_value(header, key, value_type, *, in_array=False):
    """One metadata value as plain Python (str, int, float, bool, or a list of them)."""
    if value_type in _SCALARS:
        return header.scalar(_SCALARS[value_type], key)
    if value_type == _STRING:
        return header.string(f"the value of {key!r}", MAX_LONG_STRING_BYTES.get(key, MAX_STRING_BYTES))
    if value_type == _ARRAY and not in_array:
        item_type = header.scalar("I", f"the item type of {key!r}")
        length = header.scalar("Q", f"the length of {key!r}")
        if length > MAX_ARRAY_LENGTH:
            raise ValueError(f"{header.path}: metadata array {key!r} has {length:,} items, more than the "
                             f"{MAX_ARRAY_LENGTH:,} attnkit reads")
        if item_type in _SCALARS:
            fmt = _SCALARS[item_type]
            items = header.take(length * struct.calcsize(fmt), f"the items of {key!r}")
            return np.frombuffer(items, dtype=np.dtype("<" + fmt if fmt != "?" else "?")).tolist()
        return [_read_value(header, key, item_type, in_array=True) for _ in range(length)]
    what = "an array of arrays" if value_type == _ARRAY else f"of unknown GGUF value type {value_type}"
    raise ValueError(f"{header.path}: metadata key {key!r} is {what}, which attnkit does not read")


def _kind(name, type_id, path):
    from gguf import GGMLQuantizationType

    try:
        type_name = GGMLQuantizationType(type_id).name
    except ValueError:
        type_name = f"number {type_id} (unknown to the gguf package)"
    if type_name not in KINDS:
        raise ValueError(f"{path}: GGUF tensor {name} has type {type_name}, which attnkit does not read "
                         f"(it reads {', '.join(KINDS)})")
    return KINDS[type_name]
