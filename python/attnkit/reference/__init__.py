"""Plain NumPy references of the attnkit ops.

Each function has the signature and the semantics of its twin in :mod:`attnkit.ops` and is
written to be read: it materialises every intermediate (the full ``Nq x Nk`` weight matrix
included) and computes in float64. It is the oracle of the test-suite and a specification for
users, never a hot path. Only the checks needed to compute the right thing live here; argument
validation with helpful messages is the job of :mod:`attnkit.ops`.
"""

from attnkit.reference._common import attention_mask
from attnkit.reference.activations import gelu, gelu_backward, swiglu
from attnkit.reference.attention import (
    argmax_attention,
    kernel_attention,
    packed_attention,
    scaled_dot_product_attention,
    scaled_dot_product_attention_backward,
)
from attnkit.reference.block_quantized import block_quantized_matmul, dequantize_blocks
from attnkit.reference.cross_entropy import cross_entropy
from attnkit.reference.dropout import dropout, dropout_keep
from attnkit.reference.embedding import embedding_backward
from attnkit.reference.int8_linear import int8_linear, quantize_activations, quantize_linear_weight
from attnkit.reference.linear_attention import feature_map_features, linear_attention
from attnkit.reference.llama import llama_forward, llama_weights
from attnkit.reference.matmul import matmul
from attnkit.reference.normalization import layer_norm, layer_norm_backward, rms_norm, rms_norm_backward
from attnkit.reference.optim import adamw_update, sum_of_squares
from attnkit.reference.positions import rotary_positions, sinusoidal_positions
from attnkit.reference.random_features import random_fourier_features
from attnkit.reference.softmax import log_softmax, log_softmax_backward, softmax, softmax_backward

__all__ = [
    "adamw_update",
    "argmax_attention",
    "attention_mask",
    "block_quantized_matmul",
    "cross_entropy",
    "dequantize_blocks",
    "dropout",
    "dropout_keep",
    "embedding_backward",
    "feature_map_features",
    "gelu",
    "gelu_backward",
    "int8_linear",
    "kernel_attention",
    "layer_norm",
    "layer_norm_backward",
    "linear_attention",
    "llama_forward",
    "llama_weights",
    "log_softmax",
    "log_softmax_backward",
    "matmul",
    "packed_attention",
    "quantize_activations",
    "quantize_linear_weight",
    "random_fourier_features",
    "rms_norm",
    "rms_norm_backward",
    "rotary_positions",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_backward",
    "sinusoidal_positions",
    "softmax",
    "softmax_backward",
    "swiglu",
    "sum_of_squares",
]
