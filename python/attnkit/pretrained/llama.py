"""Llama-family checkpoints in GGUF: the configuration read from a file's metadata, and the one table of its
tensors under attnkit's names.

GGUF keeps the rows of ``attn_q`` and ``attn_k`` in llama.cpp's rotary layout, neighbouring features paired
(``(x[2i], x[2i + 1])``; :mod:`attnkit.pretrained.rotary_rows`). attnkit's decoder turns the same interleaved
pairs, so the rows are used as stored: no permutation. A weight of ggml shape ``[n_in, n_out]`` is ``n_out``
rows of ``n_in`` values, Hugging Face's (out, in).
"""

import dataclasses

__all__ = ["LlamaConfig", "TensorSpec", "check_tensors", "config_of", "llama_config", "llama_tensor_table"]

# Sizes the metadata may give, inclusive: it is untrusted, and each size is checked before anything of
# that size is built (Llama-3-70B has 80 layers, 8192 wide, 28,672 in the MLP, 128,256 tokens).
SIZE_LIMITS = {"block_count": (1, 2**10), "embedding_length": (1, 2**16), "feed_forward_length": (1, 2**18),
               "attention.head_count": (1, 2**10), "attention.head_count_kv": (1, 2**10),
               "context_length": (1, 2**24), "rope.dimension_count": (2, 2**12)}
TOKEN_ID_LIMIT = 2**24


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """The shape of a Llama-family decoder, read from a GGUF file's metadata.

    Attributes
    ----------
    vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff, head_dim : int
        ``n_kv_heads`` divides ``n_heads`` (grouped-query attention); ``d_model == n_heads * head_dim``.
    rope_base : float
        Rotary positions' base ("theta": 10,000 in Llama 2, 100,000 in SmolLM2).
    rms_eps : float
        RMSNorm's epsilon.
    context_length : int
        Positions the model was trained on.
    tie_embeddings : bool
        Whether the output layer reuses the token embeddings (the file has no ``output.weight``).
    bos_id, eos_id : int
    pad_id : int or None
    """

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    head_dim: int
    rope_base: float
    rms_eps: float
    context_length: int
    tie_embeddings: bool
    bos_id: int
    eos_id: int
    pad_id: int | None


def llama_config(metadata, *, tie_embeddings=None):
    """The :class:`LlamaConfig` of a GGUF file's metadata.

    Parameters
    ----------
    metadata : mapping
        :attr:`attnkit.pretrained.gguf_file.GGUFFile.metadata`.
    tie_embeddings : bool, optional
        Whether the file lacks ``output.weight`` (GGUF says so only by the tensor's absence); by default
        True, SmolLM2's case. :func:`config_of` reads it from a file's tensors.

    Raises
    ------
    ValueError
        For an architecture other than 'llama', a missing or wrong-typed key (named), a size out of bounds,
        ``n_heads`` not a multiple of ``n_kv_heads``, ``embedding_length`` not ``n_heads * head_dim``, or rotary
        positions on part of each head only (``rope.dimension_count`` below the head size).
    """
    architecture = _value(metadata, "general.architecture", str)
    if architecture != "llama":
        raise ValueError(f"general.architecture is {architecture!r}; attnkit reads 'llama' GGUF files here")

    def size(name):
        value = _value(metadata, f"llama.{name}", int)
        low, high = SIZE_LIMITS[name]
        if not low <= value <= high:
            raise ValueError(f"llama.{name} must be in [{low}, {high}], got {value}")
        return value

    d_model, n_heads, n_kv_heads = size("embedding_length"), size("attention.head_count"), \
        size("attention.head_count_kv")
    if n_heads % n_kv_heads:
        raise ValueError(f"llama.attention.head_count ({n_heads}) must be a multiple of "
                         f"llama.attention.head_count_kv ({n_kv_heads})")
    if d_model % n_heads or (d_model // n_heads) % 2:
        raise ValueError(f"llama.embedding_length ({d_model}) must be llama.attention.head_count ({n_heads}) "
                         "times an even head size")
    head_dim = d_model // n_heads
    rotary = _value(metadata, "llama.rope.dimension_count", int, default=head_dim)
    if rotary != head_dim:
        raise ValueError(f"llama.rope.dimension_count is {rotary}: rotary positions on part of each head (of "
                         f"{head_dim} features) are not supported; attnkit rotates whole heads")
    tokens = metadata.get("tokenizer.ggml.tokens")
    vocab_size = _value(metadata, "llama.vocab_size", int,
                        default=len(tokens) if isinstance(tokens, list) else _REQUIRED)
    if not 1 <= vocab_size <= TOKEN_ID_LIMIT:
        raise ValueError(f"llama.vocab_size must be in [1, {TOKEN_ID_LIMIT}], got {vocab_size}")
    rope_base = _value(metadata, "llama.rope.freq_base", float, default=10_000.0)
    rms_eps = _value(metadata, "llama.attention.layer_norm_rms_epsilon", float)
    if not (rope_base > 1 and 0 < rms_eps < 1):
        raise ValueError(f"llama.rope.freq_base must be > 1 and llama.attention.layer_norm_rms_epsilon in (0, 1), "
                         f"got {rope_base} and {rms_eps}")

    def token(name, default=_REQUIRED):
        value = _value(metadata, f"tokenizer.ggml.{name}", int, default=default)
        if value is not None and not 0 <= value < vocab_size:
            raise ValueError(f"tokenizer.ggml.{name} must be a token id in [0, {vocab_size}), got {value}")
        return value

    return LlamaConfig(vocab_size=vocab_size, d_model=d_model, n_layers=size("block_count"), n_heads=n_heads,
                       n_kv_heads=n_kv_heads, d_ff=size("feed_forward_length"), head_dim=head_dim,
                       rope_base=float(rope_base), rms_eps=float(rms_eps), context_length=size("context_length"),
                       tie_embeddings=True if tie_embeddings is None else bool(tie_embeddings),
                       bos_id=token("bos_token_id"), eos_id=token("eos_token_id"),
                       pad_id=token("padding_token_id", None))


def config_of(gguf_file):
    """The :class:`LlamaConfig` of a :class:`~attnkit.pretrained.gguf_file.GGUFFile`, ``tie_embeddings`` read
    from whether it holds ``output.weight``."""
    return llama_config(gguf_file.metadata, tie_embeddings="output.weight" not in gguf_file.tensors)


_REQUIRED = object()


def _value(metadata, key, kind, *, default=_REQUIRED):
    if key not in metadata:
        if default is _REQUIRED:
            raise ValueError(f"GGUF metadata key {key!r} is missing")
        return default
    value = metadata[key]
    ok = isinstance(value, kind) and not isinstance(value, bool) if kind is not float else \
        isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok:
        raise ValueError(f"GGUF metadata key {key!r} must be {'a number' if kind is float else kind.__name__}, "
                         f"got {type(value).__name__} {value!r:.60}")
    return value


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """What one GGUF tensor must be, and its name in attnkit.

    Attributes
    ----------
    target : str
        attnkit's parameter name.
    shape : tuple of int
        ggml's order: ``(n_in, n_out)`` for a weight, ``(n,)`` for a norm.
    kinds : tuple of str
        The kinds it may be stored as (:data:`attnkit.pretrained.gguf_file.KINDS`).
    """

    target: str
    shape: tuple[int, ...]
    kinds: tuple[str, ...]


WEIGHT_KINDS = ("f32", "f16", "q8_0", "q4_1")
NORM_KINDS = ("f32",)  # llama.cpp never quantises a 1-D tensor


def llama_tensor_table(config):
    """GGUF tensor name -> :class:`TensorSpec`, for every tensor of a Llama GGUF file of ``config``.

    The table lists the GGUF name, attnkit's name, the ggml shape and the kinds, one line per tensor; to move
    a tensor in attnkit, edit its line here.
    """
    d, ff, kv, vocab = config.d_model, config.d_ff, config.n_kv_heads * config.head_dim, config.vocab_size
    table = {
        "token_embd.weight": TensorSpec("embedding.tokens.weight", (d, vocab), WEIGHT_KINDS),
        "output_norm.weight": TensorSpec("decoder.norm.gamma", (d,), NORM_KINDS),
    }
    if not config.tie_embeddings:
        table["output.weight"] = TensorSpec("output.weight", (d, vocab), WEIGHT_KINDS)
    for i in range(config.n_layers):
        block, attention, mlp = f"blk.{i}.", f"decoder.layer{i}.self_attention.", f"decoder.layer{i}.feed_forward."
        table.update({
            block + "attn_norm.weight": TensorSpec(attention + "norm.gamma", (d,), NORM_KINDS),
            block + "attn_q.weight": TensorSpec(attention + "sublayer.wq", (d, d), WEIGHT_KINDS),
            block + "attn_k.weight": TensorSpec(attention + "sublayer.wk", (d, kv), WEIGHT_KINDS),
            block + "attn_v.weight": TensorSpec(attention + "sublayer.wv", (d, kv), WEIGHT_KINDS),
            block + "attn_output.weight": TensorSpec(attention + "sublayer.wo", (d, d), WEIGHT_KINDS),
            block + "ffn_norm.weight": TensorSpec(mlp + "norm.gamma", (d,), NORM_KINDS),
            # SwiGLU's gate and up maps are one parameter, [gate | up]: two tensors, one target, in this order.
            block + "ffn_gate.weight": TensorSpec(mlp + "sublayer.linear1.weight", (d, ff), WEIGHT_KINDS),
            block + "ffn_up.weight": TensorSpec(mlp + "sublayer.linear1.weight", (d, ff), WEIGHT_KINDS),
            block + "ffn_down.weight": TensorSpec(mlp + "sublayer.linear2.weight", (ff, d), WEIGHT_KINDS),
        })
    return table


def check_tensors(config, tensors):
    """Check a GGUF file's tensors against :func:`llama_tensor_table`.

    Parameters
    ----------
    config : LlamaConfig
    tensors : mapping of str to GGUFTensor

    Raises
    ------
    ValueError
        Naming every tensor that is missing, unexpected, of the wrong shape or of a kind the table does not
        allow.
    """
    table = llama_tensor_table(config)
    problems = [f"{name} is missing" for name in table if name not in tensors]
    problems += [f"{name} is unexpected" for name in tensors if name not in table]
    for name, spec in table.items():
        tensor = tensors.get(name)
        if tensor is None:
            continue
        if tuple(tensor.shape) != spec.shape:
            problems.append(f"{name} has ggml shape {list(tensor.shape)}, expected {list(spec.shape)}")
        if tensor.kind not in spec.kinds:
            problems.append(f"{name} is {tensor.kind}, expected one of {', '.join(spec.kinds)}")
    if problems:
        shown = "; ".join(problems[:10]) + (f"; and {len(problems) - 10} more" if len(problems) > 10 else "")
        raise ValueError(f"the GGUF file's tensors do not fit a Llama of {config.n_layers} layers x {config.d_model} "
                         f"({config.n_heads} heads, {config.n_kv_heads} KV heads, vocabulary {config.vocab_size}): "
                         f"{shown}")
