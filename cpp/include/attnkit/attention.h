// Scaled dot-product attention, tiled with an online softmax (no Nq x Nk buffer):
//   out[b, i, :] = sum_j softmax_j(scale * q[b,i].k[b,j] + bias[b,i,j]) v[b, j, :]
// over the keys j visible to query i: j < key_length[b], mask[b, i, j] != 0, if causal
// j <= i + (nk - nq), and within a window i + (nk - nq) - window_left <= j <= i + (nk - nq) + window_right.  q: (batch, nq, d), k: (batch, nk, d), v: (batch, nk, dv), out: (batch, nq, dv)
// contiguous, lse: (batch, nq) log-sum-exp of the visible logits (-inf where nothing is visible; such
// rows output zeros).
#pragma once
#include <cstdint>

#include "attnkit/view.h"

namespace attnkit {

template <class T>
struct AttentionArgs {
  std::int64_t batch = 0, nq = 0, nk = 0, d = 0, dv = 0;
  BatchedRows<T> q, k, v;
  BatchedRows<std::uint8_t> mask;      // optional; row_stride 0 for a per-key mask
  BatchedRows<T> bias;                 // optional; row_stride 0 for a per-key bias
  const std::int64_t* key_length = nullptr;  // optional, one per batch item, each in [0, nk]
  // Optional (forward only), one per batch item, each in [0, nq]: queries i >= length are neither
  // computed nor written, so items of different lengths can be packed end to end in q and out.
  const std::int64_t* query_length = nullptr;
  bool causal = false;
  // A sliding window around each query's end-aligned position i + (nk - nq): keys at most window_left
  // before it and window_right after it; -1 leaves that side unbounded.
  std::int64_t window_left = -1, window_right = -1;
  T scale = T(1);
  T* out = nullptr;  // (batch, nq, dv) contiguous, unless out_offset is set:
  const std::int64_t* out_offset = nullptr;  // optional: row i of item b at out + out_offset[b] + i * out_row_stride
  std::int64_t out_row_stride = 0;
  T* lse = nullptr;  // optional output, (batch, nq)
};

// Argmax ("hard") attention takes AttentionArgs too (v, out; lse, query_length and out_offset unused):
//   out[b, i, :] = v[b, j*, :],  j* the visible key of the largest scale * q.k + bias (the lowest such j),
// zeros where no visible key has a logit above -inf, NaN where a visible logit is NaN.

// weights[b, i, j] = exp(scale * q.k + bias - lse[b, i]) at visible keys, 0 elsewhere: (batch, nq, nk).
template <class T>
struct AttentionWeightsArgs {
  AttentionArgs<T> attn;  // out unused; lse read
  T* weights = nullptr;
};

// Backward of attention (flash style: logits recomputed per block from lse, no Nq x Nk buffer but
// the optional dbias). With P = exp(logits - lse), delta_i = sum_c dout[i,c] out[i,c]:
//   dv[j] = sum_i P_ij dout[i],  dS_ij = P_ij (dout[i].v[j] - delta_i),
//   dq[i] = scale sum_j dS_ij k[j],  dk[j] = scale sum_i dS_ij q[i],  dbias[i, j] = dS_ij.
// dout and out (batch, nq, dv) are read, and dq (batch, nq, d), dk (batch, nk, d), dv (batch, nk, dv) written, in
// place through their views (a layer's heads, laid out as its projections want them); dbias (batch, nq, nk) is
// contiguous and optional. Every output is overwritten; invisible keys get zero gradient.
template <class T>
struct AttentionBackwardArgs {
  AttentionArgs<T> attn;  // forward problem; attn.lse read, attn.out unused
  BatchedRows<T> dout, out;
  BatchedRowsOut<T> dq, dk, dv;
  T* dbias = nullptr;
};

}  // namespace attnkit
