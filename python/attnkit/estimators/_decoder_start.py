"""What a :class:`attnkit.CausalLanguageModel` takes from a pretrained decoder (a GGUF file): its codec, its
network, its weights as stored or in float32; and the weights' block quantisation for inference."""

import numpy as np

from attnkit import ops
from attnkit.pretrained.gguf_checkpoint import load_gguf_checkpoint
from attnkit.text import TextCodec

__all__ = ["codec_of", "dequantized", "kinds_of", "quantized", "read_decoder", "reading_inputs"]

# Generation and scoring windows of a pretrained decoder when context_length="auto": a news article and its
# summary fit, and a scoring window's logits (tokens x 49,152 for SmolLM2) stay near 200 MB.
PRETRAINED_CONTEXT = 1024


def read_decoder(pretrained, *, quantized):
    """The checkpoint ``pretrained`` names (:func:`attnkit.pretrained.gguf_checkpoint.load_gguf_checkpoint`), its
    quantised tensors kept as stored when ``quantized`` (inference) or dequantised to float32 (training)."""
    return load_gguf_checkpoint(pretrained, weights="stored" if quantized else "float32")


def codec_of(checkpoint):
    """The checkpoint's codec: its tokenizer's ids, documents separated by its end-of-text token (its
    end-of-sequence token when it has none), generation ended by any of its end tokens."""
    eot = checkpoint.tokenizer.token_to_id("<|endoftext|>")
    return TextCodec.pretrained(checkpoint.tokenizer, checkpoint.config.eos_id if eot is None else eot,
                                checkpoint.end_ids)


def kinds_of(weights):
    """``{name: kind}`` of the block-quantised values of ``weights``."""
    return {name: value.kind for name, value in weights.items() if isinstance(value, ops.BlockQuantizedMatrix)}


def dequantized(weights):
    """``weights`` with every block-quantised value in float32, as the network's parameter (a token table
    stored by rows becomes its (vocab_size, d_model) table): a master copy to train."""
    out = {}
    for name, value in weights.items():
        if isinstance(value, ops.BlockQuantizedMatrix):
            value = value.dequantize()
            value = np.ascontiguousarray(value.T) if name.endswith("embedding.tokens.weight") else value
        out[name] = value
    return out


def quantized(weights, kinds):
    """``weights`` (float32) with the parameters named in ``kinds`` quantised to those block kinds again (after
    fine-tuning): the token table by rows, every other weight by the columns ``x @ W`` reads."""
    out = dict(weights)
    for name, kind in kinds.items():
        value = np.asarray(weights[name], dtype=np.float32)
        out[name] = ops.quantize_blocks(value.T if name.endswith("embedding.tokens.weight") else value, kind)
    return out


def reading_inputs(weights, activations):
    """``weights`` with every block-quantised value read by products as ``activations`` says ("float32" or
    "int8"; :meth:`attnkit.ops.BlockQuantizedMatrix.with_activations`: the same blocks, not a copy)."""
    return {name: value.with_activations(activations) if isinstance(value, ops.BlockQuantizedMatrix) else value
            for name, value in weights.items()}
