"""Public array operations backed by the compiled kernels.

This layer validates, broadcasts and lays out arrays; the kernels assume valid input. Each function
has a NumPy twin of the same name in :mod:`attnkit.reference`. One module per concept.
"""

from attnkit.ops.activations import gelu, gelu_backward, swiglu
from attnkit.ops.argmax_attention import argmax_attention
from attnkit.ops.attention import (
    AttentionContext,
    scaled_dot_product_attention,
    scaled_dot_product_attention_backward,
)
from attnkit.ops.block_quantized import BlockQuantizedMatrix, block_quantized_matmul, quantize_blocks
from attnkit.ops.cross_entropy import cross_entropy
from attnkit.ops.decoding_plan import DecodingPlan, DecodingPlanLayer
from attnkit.ops.dropout import dropout
from attnkit.ops.embedding import embedding_backward
from attnkit.ops.int8_linear import QuantizedLinearWeight, int8_linear, quantize_linear_weight
from attnkit.ops.linear_attention import (
    LinearAttentionContext,
    LinearAttentionState,
    linear_attention,
    linear_attention_backward,
)
from attnkit.ops.matmul import matmul
from attnkit.ops.normalization import layer_norm, layer_norm_backward, rms_norm, rms_norm_backward
from attnkit.ops.optim import adamw_update, adamw_update_many, sum_of_squares, sum_of_squares_many
from attnkit.ops.packed_attention import packed_attention
from attnkit.ops.positions import rotary_positions, sinusoidal_positions
from attnkit.ops.random_features import random_fourier_features
from attnkit.ops.softmax import log_softmax, log_softmax_backward, softmax, softmax_backward

__all__ = [
    "AttentionContext",
    "BlockQuantizedMatrix",
    "DecodingPlan",
    "DecodingPlanLayer",
    "LinearAttentionContext",
    "LinearAttentionState",
    "QuantizedLinearWeight",
    "adamw_update",
    "adamw_update_many",
    "argmax_attention",
    "block_quantized_matmul",
    "cross_entropy",
    "dropout",
    "embedding_backward",
    "gelu",
    "gelu_backward",
    "int8_linear",
    "layer_norm",
    "layer_norm_backward",
    "linear_attention",
    "linear_attention_backward",
    "log_softmax",
    "log_softmax_backward",
    "matmul",
    "packed_attention",
    "quantize_blocks",
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
    "sum_of_squares",
    "sum_of_squares_many",
    "swiglu",
]
