"""
attnkit compiled kernels (private: use attnkit.ops)
"""
from __future__ import annotations

import collections.abc
import typing

import numpy
import numpy.typing

__all__: list[str] = ['DecodingPlan', 'adamw_update', 'argmax_attention', 'attention', 'attention_backward', 'attention_weights', 'available_isas', 'block_quantized_matmul', 'block_quantized_rows', 'build_info', 'causal_linear_attention', 'causal_linear_attention_backward', 'cross_entropy', 'dropout', 'embedding_backward', 'gelu', 'gelu_backward', 'get_call_threads', 'get_int8_variant', 'get_isa', 'get_num_threads', 'int8_linear', 'int8_vnni_available', 'int8_vnni_isas', 'layer_norm', 'layer_norm_backward', 'linear_attention', 'linear_attention_backward', 'matmul', 'packed_attention', 'positions', 'projected_random_features', 'random_features', 'rms_norm', 'rms_norm_backward', 'rows_text', 'set_call_threads', 'set_int8_vnni', 'set_isa', 'set_num_threads', 'softmax', 'softmax_backward', 'sum_of_squares', 'swiglu', 'team_stats']
class DecodingPlan:
    """
    One decoding step of a stack of pre-LN blocks, in C++.
    """
    def __init__(self, d_model: typing.SupportsInt | typing.SupportsIndex, n_heads: typing.SupportsInt | typing.SupportsIndex, n_kv_heads: typing.SupportsInt | typing.SupportsIndex, d_head: typing.SupportsInt | typing.SupportsIndex, d_ff: typing.SupportsInt | typing.SupportsIndex, norm: str, eps: typing.SupportsFloat | typing.SupportsIndex, activation: str, rotary_base: typing.SupportsFloat | typing.SupportsIndex, layers: collections.abc.Sequence, final_gamma: typing.Any, final_beta: typing.Any) -> None:
        ...
    def step(self, x: numpy.typing.NDArray[numpy.float32], positions: numpy.typing.NDArray[numpy.int64], keys: collections.abc.Sequence, values: collections.abc.Sequence, sequences: typing.Any = None) -> numpy.typing.NDArray[numpy.float32]:
        """
        The stack's output (batch, d_model) for x, row b at positions[b] of cache row sequences[b] (b when None); writes the keys and values.
        """
def adamw_update(params: list, grads: list, exp_avgs: list, exp_avg_sqs: list, step_size: typing.SupportsFloat | typing.SupportsIndex, beta1: typing.SupportsFloat | typing.SupportsIndex, beta2: typing.SupportsFloat | typing.SupportsIndex, denom_scale: typing.SupportsFloat | typing.SupportsIndex, eps: typing.SupportsFloat | typing.SupportsIndex, shrinks: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], grad_scale: typing.SupportsFloat | typing.SupportsIndex = 1.0, zero_grad: bool = False) -> None:
    ...
@typing.overload
def argmax_attention(q: tuple, k: tuple, v: tuple, mask: typing.Any, bias: typing.Any, key_lengths: typing.Any, causal: bool, window_left: typing.SupportsInt | typing.SupportsIndex, window_right: typing.SupportsInt | typing.SupportsIndex, scale: typing.SupportsFloat | typing.SupportsIndex, out: numpy.typing.NDArray[numpy.float32]) -> None:
    ...
@typing.overload
def argmax_attention(q: tuple, k: tuple, v: tuple, mask: typing.Any, bias: typing.Any, key_lengths: typing.Any, causal: bool, window_left: typing.SupportsInt | typing.SupportsIndex, window_right: typing.SupportsInt | typing.SupportsIndex, scale: typing.SupportsFloat | typing.SupportsIndex, out: numpy.typing.NDArray[numpy.float64]) -> None:
    ...
@typing.overload
def attention(q: tuple, k: tuple, v: tuple, mask: typing.Any, bias: typing.Any, key_lengths: typing.Any, causal: bool, window_left: typing.SupportsInt | typing.SupportsIndex, window_right: typing.SupportsInt | typing.SupportsIndex, scale: typing.SupportsFloat | typing.SupportsIndex, out: numpy.typing.NDArray[numpy.float32], out_offsets: numpy.typing.NDArray[numpy.int64], out_row_stride: typing.SupportsInt | typing.SupportsIndex, nq: typing.SupportsInt | typing.SupportsIndex, dv: typing.SupportsInt | typing.SupportsIndex, lse: typing.Any) -> None:
    ...
@typing.overload
def attention(q: tuple, k: tuple, v: tuple, mask: typing.Any, bias: typing.Any, key_lengths: typing.Any, causal: bool, window_left: typing.SupportsInt | typing.SupportsIndex, window_right: typing.SupportsInt | typing.SupportsIndex, scale: typing.SupportsFloat | typing.SupportsIndex, out: numpy.typing.NDArray[numpy.float64], out_offsets: numpy.typing.NDArray[numpy.int64], out_row_stride: typing.SupportsInt | typing.SupportsIndex, nq: typing.SupportsInt | typing.SupportsIndex, dv: typing.SupportsInt | typing.SupportsIndex, lse: typing.Any) -> None:
    ...
@typing.overload
def attention_backward(q: tuple, k: tuple, v: tuple, mask: typing.Any, bias: typing.Any, key_lengths: typing.Any, causal: bool, window_left: typing.SupportsInt | typing.SupportsIndex, window_right: typing.SupportsInt | typing.SupportsIndex, scale: typing.SupportsFloat | typing.SupportsIndex, lse: numpy.typing.NDArray[numpy.float32], dout: tuple, out: tuple, dq: tuple, dk: tuple, dv: tuple, batch: typing.SupportsInt | typing.SupportsIndex, nq: typing.SupportsInt | typing.SupportsIndex, dv_width: typing.SupportsInt | typing.SupportsIndex, dbias: typing.Any) -> None:
    ...
@typing.overload
def attention_backward(q: tuple, k: tuple, v: tuple, mask: typing.Any, bias: typing.Any, key_lengths: typing.Any, causal: bool, window_left: typing.SupportsInt | typing.SupportsIndex, window_right: typing.SupportsInt | typing.SupportsIndex, scale: typing.SupportsFloat | typing.SupportsIndex, lse: numpy.typing.NDArray[numpy.float64], dout: tuple, out: tuple, dq: tuple, dk: tuple, dv: tuple, batch: typing.SupportsInt | typing.SupportsIndex, nq: typing.SupportsInt | typing.SupportsIndex, dv_width: typing.SupportsInt | typing.SupportsIndex, dbias: typing.Any) -> None:
    ...
@typing.overload
def attention_weights(q: tuple, k: tuple, mask: typing.Any, bias: typing.Any, key_lengths: typing.Any, causal: bool, window_left: typing.SupportsInt | typing.SupportsIndex, window_right: typing.SupportsInt | typing.SupportsIndex, scale: typing.SupportsFloat | typing.SupportsIndex, lse: numpy.typing.NDArray[numpy.float32], weights: numpy.typing.NDArray[numpy.float32]) -> None:
    ...
@typing.overload
def attention_weights(q: tuple, k: tuple, mask: typing.Any, bias: typing.Any, key_lengths: typing.Any, causal: bool, window_left: typing.SupportsInt | typing.SupportsIndex, window_right: typing.SupportsInt | typing.SupportsIndex, scale: typing.SupportsFloat | typing.SupportsIndex, lse: numpy.typing.NDArray[numpy.float64], weights: numpy.typing.NDArray[numpy.float64]) -> None:
    ...
def available_isas() -> list[str]:
    """
    ISA variants compiled in and supported by this CPU.
    """
def block_quantized_matmul(blocks: numpy.typing.NDArray[numpy.uint8], kind: str, n_in: typing.SupportsInt | typing.SupportsIndex, x: numpy.typing.NDArray[numpy.float32], bias: typing.Any, out: numpy.typing.NDArray[numpy.float32], int8_x: bool = False, packed: typing.Any = None) -> None:
    """
    out = x @ W (+ bias), W (n_in, n_out) stored as n_out rows of GGML blocks; int8_x: x as int8 blocks; packed: the blocks in column groups, read instead of blocks with int8_x.
    """
def block_quantized_rows(blocks: numpy.typing.NDArray[numpy.uint8], kind: str, n_in: typing.SupportsInt | typing.SupportsIndex, ids: numpy.typing.NDArray[numpy.int64], out: numpy.typing.NDArray[numpy.float32]) -> None:
    """
    out[r] = the stored row ids[r] of the blocks, dequantised.
    """
def build_info() -> dict[str, str]:
    ...
@typing.overload
def causal_linear_attention(q: numpy.typing.NDArray[numpy.float32], k: numpy.typing.NDArray[numpy.float32], v: numpy.typing.NDArray[numpy.float32], keep: typing.Any, out: numpy.typing.NDArray[numpy.float32], features: typing.SupportsInt | typing.SupportsIndex, eps: typing.SupportsFloat | typing.SupportsIndex, row_map: typing.Any, state_s: typing.Any, state_z: typing.Any) -> None:
    ...
@typing.overload
def causal_linear_attention(q: numpy.typing.NDArray[numpy.float64], k: numpy.typing.NDArray[numpy.float64], v: numpy.typing.NDArray[numpy.float64], keep: typing.Any, out: numpy.typing.NDArray[numpy.float64], features: typing.SupportsInt | typing.SupportsIndex, eps: typing.SupportsFloat | typing.SupportsIndex, row_map: typing.Any, state_s: typing.Any, state_z: typing.Any) -> None:
    ...
@typing.overload
def causal_linear_attention_backward(q: numpy.typing.NDArray[numpy.float32], k: numpy.typing.NDArray[numpy.float32], v: numpy.typing.NDArray[numpy.float32], keep: typing.Any, out: numpy.typing.NDArray[numpy.float32], features: typing.SupportsInt | typing.SupportsIndex, eps: typing.SupportsFloat | typing.SupportsIndex, row_map: typing.Any, dout: numpy.typing.NDArray[numpy.float32], dq: numpy.typing.NDArray[numpy.float32], dk: numpy.typing.NDArray[numpy.float32], dv: numpy.typing.NDArray[numpy.float32]) -> None:
    ...
@typing.overload
def causal_linear_attention_backward(q: numpy.typing.NDArray[numpy.float64], k: numpy.typing.NDArray[numpy.float64], v: numpy.typing.NDArray[numpy.float64], keep: typing.Any, out: numpy.typing.NDArray[numpy.float64], features: typing.SupportsInt | typing.SupportsIndex, eps: typing.SupportsFloat | typing.SupportsIndex, row_map: typing.Any, dout: numpy.typing.NDArray[numpy.float64], dq: numpy.typing.NDArray[numpy.float64], dk: numpy.typing.NDArray[numpy.float64], dv: numpy.typing.NDArray[numpy.float64]) -> None:
    ...
@typing.overload
def cross_entropy(logits: numpy.typing.NDArray[numpy.float32], targets: numpy.typing.NDArray[numpy.int64], weight: typing.Any, loss: numpy.typing.NDArray[numpy.float32], dlogits: typing.Any, ignore_index: typing.SupportsInt | typing.SupportsIndex, label_smoothing: typing.SupportsFloat | typing.SupportsIndex) -> None:
    ...
@typing.overload
def cross_entropy(logits: numpy.typing.NDArray[numpy.float64], targets: numpy.typing.NDArray[numpy.int64], weight: typing.Any, loss: numpy.typing.NDArray[numpy.float64], dlogits: typing.Any, ignore_index: typing.SupportsInt | typing.SupportsIndex, label_smoothing: typing.SupportsFloat | typing.SupportsIndex) -> None:
    ...
@typing.overload
def dropout(x: numpy.typing.NDArray[numpy.float32], out: numpy.typing.NDArray[numpy.float32], key: typing.SupportsInt | typing.SupportsIndex, threshold: typing.SupportsInt | typing.SupportsIndex, scale: typing.SupportsFloat | typing.SupportsIndex) -> None:
    ...
@typing.overload
def dropout(x: numpy.typing.NDArray[numpy.float64], out: numpy.typing.NDArray[numpy.float64], key: typing.SupportsInt | typing.SupportsIndex, threshold: typing.SupportsInt | typing.SupportsIndex, scale: typing.SupportsFloat | typing.SupportsIndex) -> None:
    ...
@typing.overload
def embedding_backward(grad_weight: numpy.typing.NDArray[numpy.float32], ids: numpy.typing.NDArray[numpy.int64], grad: numpy.typing.NDArray[numpy.float32], padding_idx: typing.SupportsInt | typing.SupportsIndex) -> None:
    ...
@typing.overload
def embedding_backward(grad_weight: numpy.typing.NDArray[numpy.float64], ids: numpy.typing.NDArray[numpy.int64], grad: numpy.typing.NDArray[numpy.float64], padding_idx: typing.SupportsInt | typing.SupportsIndex) -> None:
    ...
@typing.overload
def gelu(x: numpy.typing.NDArray[numpy.float32], out: numpy.typing.NDArray[numpy.float32], exact: bool) -> None:
    ...
@typing.overload
def gelu(x: numpy.typing.NDArray[numpy.float64], out: numpy.typing.NDArray[numpy.float64], exact: bool) -> None:
    ...
@typing.overload
def gelu_backward(x: numpy.typing.NDArray[numpy.float32], dy: numpy.typing.NDArray[numpy.float32], dx: numpy.typing.NDArray[numpy.float32], exact: bool) -> None:
    ...
@typing.overload
def gelu_backward(x: numpy.typing.NDArray[numpy.float64], dy: numpy.typing.NDArray[numpy.float64], dx: numpy.typing.NDArray[numpy.float64], exact: bool) -> None:
    ...
def get_call_threads() -> int:
    ...
def get_int8_variant() -> str:
    """
    The int8 kernel variant in use.
    """
def get_isa() -> str:
    """
    The ISA variant in use.
    """
def get_num_threads() -> int:
    ...
def int8_linear(x: numpy.typing.NDArray[numpy.float32], w: numpy.typing.NDArray[numpy.int8], w_scale: numpy.typing.NDArray[numpy.float32], w_colsum: numpy.typing.NDArray[numpy.int32], bias: typing.Any, out: typing.Any, acc: typing.Any) -> None:
    ...
def int8_vnni_available() -> bool:
    """
    Whether this CPU and build have an int8 VNNI kernel.
    """
def int8_vnni_isas() -> list[str]:
    """
    The ISAs whose int8 kernels have a VNNI variant on this CPU and build (avx2: AVX-VNNI, avx512: AVX512-VNNI).
    """
@typing.overload
def layer_norm(x: numpy.typing.NDArray[numpy.float32], gamma: typing.Any, beta: typing.Any, y: numpy.typing.NDArray[numpy.float32], mean: typing.Any, rstd: typing.Any, eps: typing.SupportsFloat | typing.SupportsIndex) -> None:
    ...
@typing.overload
def layer_norm(x: numpy.typing.NDArray[numpy.float64], gamma: typing.Any, beta: typing.Any, y: numpy.typing.NDArray[numpy.float64], mean: typing.Any, rstd: typing.Any, eps: typing.SupportsFloat | typing.SupportsIndex) -> None:
    ...
@typing.overload
def layer_norm_backward(dy: numpy.typing.NDArray[numpy.float32], x: numpy.typing.NDArray[numpy.float32], gamma: typing.Any, mean: numpy.typing.NDArray[numpy.float32], rstd: numpy.typing.NDArray[numpy.float32], dx: numpy.typing.NDArray[numpy.float32], dgamma: typing.Any, dbeta: typing.Any) -> None:
    ...
@typing.overload
def layer_norm_backward(dy: numpy.typing.NDArray[numpy.float64], x: numpy.typing.NDArray[numpy.float64], gamma: typing.Any, mean: numpy.typing.NDArray[numpy.float64], rstd: numpy.typing.NDArray[numpy.float64], dx: numpy.typing.NDArray[numpy.float64], dgamma: typing.Any, dbeta: typing.Any) -> None:
    ...
@typing.overload
def linear_attention(q: numpy.typing.NDArray[numpy.float32], k: numpy.typing.NDArray[numpy.float32], v: numpy.typing.NDArray[numpy.float32], keep: typing.Any, out: numpy.typing.NDArray[numpy.float32], s: numpy.typing.NDArray[numpy.float32], z: numpy.typing.NDArray[numpy.float32], features: typing.SupportsInt | typing.SupportsIndex, eps: typing.SupportsFloat | typing.SupportsIndex, row_map: typing.Any) -> None:
    ...
@typing.overload
def linear_attention(q: numpy.typing.NDArray[numpy.float64], k: numpy.typing.NDArray[numpy.float64], v: numpy.typing.NDArray[numpy.float64], keep: typing.Any, out: numpy.typing.NDArray[numpy.float64], s: numpy.typing.NDArray[numpy.float64], z: numpy.typing.NDArray[numpy.float64], features: typing.SupportsInt | typing.SupportsIndex, eps: typing.SupportsFloat | typing.SupportsIndex, row_map: typing.Any) -> None:
    ...
@typing.overload
def linear_attention_backward(q: numpy.typing.NDArray[numpy.float32], k: numpy.typing.NDArray[numpy.float32], v: numpy.typing.NDArray[numpy.float32], keep: typing.Any, out: numpy.typing.NDArray[numpy.float32], s: numpy.typing.NDArray[numpy.float32], z: numpy.typing.NDArray[numpy.float32], features: typing.SupportsInt | typing.SupportsIndex, eps: typing.SupportsFloat | typing.SupportsIndex, row_map: typing.Any, dout: numpy.typing.NDArray[numpy.float32], dq: numpy.typing.NDArray[numpy.float32], dk: numpy.typing.NDArray[numpy.float32], dv: numpy.typing.NDArray[numpy.float32]) -> None:
    ...
@typing.overload
def linear_attention_backward(q: numpy.typing.NDArray[numpy.float64], k: numpy.typing.NDArray[numpy.float64], v: numpy.typing.NDArray[numpy.float64], keep: typing.Any, out: numpy.typing.NDArray[numpy.float64], s: numpy.typing.NDArray[numpy.float64], z: numpy.typing.NDArray[numpy.float64], features: typing.SupportsInt | typing.SupportsIndex, eps: typing.SupportsFloat | typing.SupportsIndex, row_map: typing.Any, dout: numpy.typing.NDArray[numpy.float64], dq: numpy.typing.NDArray[numpy.float64], dk: numpy.typing.NDArray[numpy.float64], dv: numpy.typing.NDArray[numpy.float64]) -> None:
    ...
@typing.overload
def matmul(a: numpy.typing.NDArray[numpy.float32], b: numpy.typing.NDArray[numpy.float32], bias: typing.Any, out: numpy.typing.NDArray[numpy.float32], accumulate: bool, b_column_sums: typing.Any = None) -> None:
    ...
@typing.overload
def matmul(a: numpy.typing.NDArray[numpy.float64], b: numpy.typing.NDArray[numpy.float64], bias: typing.Any, out: numpy.typing.NDArray[numpy.float64], accumulate: bool, b_column_sums: typing.Any = None) -> None:
    ...
@typing.overload
def packed_attention(q: tuple, k: tuple, v: tuple, lengths: numpy.typing.NDArray[numpy.int64], causal: bool, window_left: typing.SupportsInt | typing.SupportsIndex, window_right: typing.SupportsInt | typing.SupportsIndex, scale: typing.SupportsFloat | typing.SupportsIndex, d: typing.SupportsInt | typing.SupportsIndex, dv: typing.SupportsInt | typing.SupportsIndex, out: numpy.typing.NDArray[numpy.float32], out_offsets: numpy.typing.NDArray[numpy.int64]) -> None:
    ...
@typing.overload
def packed_attention(q: tuple, k: tuple, v: tuple, lengths: numpy.typing.NDArray[numpy.int64], causal: bool, window_left: typing.SupportsInt | typing.SupportsIndex, window_right: typing.SupportsInt | typing.SupportsIndex, scale: typing.SupportsFloat | typing.SupportsIndex, d: typing.SupportsInt | typing.SupportsIndex, dv: typing.SupportsInt | typing.SupportsIndex, out: numpy.typing.NDArray[numpy.float64], out_offsets: numpy.typing.NDArray[numpy.int64]) -> None:
    ...
@typing.overload
def positions(out: numpy.typing.NDArray[numpy.float32], base: typing.SupportsFloat | typing.SupportsIndex, start: typing.SupportsFloat | typing.SupportsIndex) -> None:
    ...
@typing.overload
def positions(out: numpy.typing.NDArray[numpy.float64], base: typing.SupportsFloat | typing.SupportsIndex, start: typing.SupportsFloat | typing.SupportsIndex) -> None:
    ...
@typing.overload
def projected_random_features(x: numpy.typing.NDArray[numpy.float32], w: numpy.typing.NDArray[numpy.float32], offset: typing.Any, row_log: typing.Any, out: numpy.typing.NDArray[numpy.float32], scale: typing.SupportsFloat | typing.SupportsIndex, kind: typing.SupportsInt | typing.SupportsIndex) -> None:
    ...
@typing.overload
def projected_random_features(x: numpy.typing.NDArray[numpy.float64], w: numpy.typing.NDArray[numpy.float64], offset: typing.Any, row_log: typing.Any, out: numpy.typing.NDArray[numpy.float64], scale: typing.SupportsFloat | typing.SupportsIndex, kind: typing.SupportsInt | typing.SupportsIndex) -> None:
    ...
@typing.overload
def random_features(z: numpy.typing.NDArray[numpy.float32], offset: typing.Any, row_log: typing.Any, out: numpy.typing.NDArray[numpy.float32], scale: typing.SupportsFloat | typing.SupportsIndex, kind: typing.SupportsInt | typing.SupportsIndex) -> None:
    ...
@typing.overload
def random_features(z: numpy.typing.NDArray[numpy.float64], offset: typing.Any, row_log: typing.Any, out: numpy.typing.NDArray[numpy.float64], scale: typing.SupportsFloat | typing.SupportsIndex, kind: typing.SupportsInt | typing.SupportsIndex) -> None:
    ...
@typing.overload
def rms_norm(x: numpy.typing.NDArray[numpy.float32], gamma: typing.Any, y: numpy.typing.NDArray[numpy.float32], rstd: typing.Any, eps: typing.SupportsFloat | typing.SupportsIndex) -> None:
    ...
@typing.overload
def rms_norm(x: numpy.typing.NDArray[numpy.float64], gamma: typing.Any, y: numpy.typing.NDArray[numpy.float64], rstd: typing.Any, eps: typing.SupportsFloat | typing.SupportsIndex) -> None:
    ...
@typing.overload
def rms_norm_backward(dy: numpy.typing.NDArray[numpy.float32], x: numpy.typing.NDArray[numpy.float32], gamma: typing.Any, rstd: numpy.typing.NDArray[numpy.float32], dx: numpy.typing.NDArray[numpy.float32], dgamma: typing.Any) -> None:
    ...
@typing.overload
def rms_norm_backward(dy: numpy.typing.NDArray[numpy.float64], x: numpy.typing.NDArray[numpy.float64], gamma: typing.Any, rstd: numpy.typing.NDArray[numpy.float64], dx: numpy.typing.NDArray[numpy.float64], dgamma: typing.Any) -> None:
    ...
@typing.overload
def rows_text(x: numpy.typing.NDArray[numpy.float32]) -> list[str]:
    ...
@typing.overload
def rows_text(x: numpy.typing.NDArray[numpy.float64]) -> list[str]:
    ...
def set_call_threads(n: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    The calling thread's own kernel thread count (0: the process's).
    """
def set_int8_vnni(enabled: bool) -> None:
    """
    Use the int8 VNNI kernels where the active ISA has one (for tests).
    """
def set_isa(name: str) -> None:
    """
    Switch the ISA variant (for tests).
    """
def set_num_threads(n: typing.SupportsInt | typing.SupportsIndex) -> None:
    ...
@typing.overload
def softmax(x: numpy.typing.NDArray[numpy.float32], out: numpy.typing.NDArray[numpy.float32], log: bool, argmax: typing.Any = None) -> None:
    ...
@typing.overload
def softmax(x: numpy.typing.NDArray[numpy.float64], out: numpy.typing.NDArray[numpy.float64], log: bool, argmax: typing.Any = None) -> None:
    ...
@typing.overload
def softmax(x: numpy.typing.NDArray[numpy.float32], out: numpy.typing.NDArray[numpy.float64], log: bool, argmax: typing.Any = None) -> None:
    ...
@typing.overload
def softmax_backward(y: numpy.typing.NDArray[numpy.float32], dy: numpy.typing.NDArray[numpy.float32], dx: numpy.typing.NDArray[numpy.float32], log: bool) -> None:
    ...
@typing.overload
def softmax_backward(y: numpy.typing.NDArray[numpy.float64], dy: numpy.typing.NDArray[numpy.float64], dx: numpy.typing.NDArray[numpy.float64], log: bool) -> None:
    ...
def sum_of_squares(xs: list) -> list[float]:
    ...
@typing.overload
def swiglu(gate: numpy.typing.NDArray[numpy.float32], up: numpy.typing.NDArray[numpy.float32], out: numpy.typing.NDArray[numpy.float32]) -> None:
    ...
@typing.overload
def swiglu(gate: numpy.typing.NDArray[numpy.float64], up: numpy.typing.NDArray[numpy.float64], out: numpy.typing.NDArray[numpy.float64]) -> None:
    ...
def team_stats() -> dict[str, int]:
    """
    Counters of attnkit's worker threads since the process started.
    """
__version__: str = '0.1.0'
