"""
The masks of an encoder-decoder on a padded batch
=================================================

A batch of sentences of different lengths is padded to one length, and attention must not read the
padding. An encoder-decoder needs three masks:

- the encoder's self-attention: every source token may see every real source token (padding mask);
- the cross-attention: every target position may see every real source token (the same padding, now
  ``N x M``);
- the decoder's self-attention: target position i may see the real target tokens ``j <= i`` (causal and
  padding masks combined).

attnkit takes a boolean ``mask`` (True = may attend), or its fast forms ``key_lengths`` and
``causal=True``; :func:`attnkit.reference.attention_mask` spells out the full matrix, which we draw.

Reproduces: the course's figure of the encoder padding mask, the cross-attention mask and the decoder's
causal + padding mask of a padded batch; got: 3 sentence pairs (source lengths 4, 2, 1 of M = 4; decoder
inputs 5, 3, 2 of N = 5): the boolean masks and the fast forms (key_lengths, causal) give the same
attention to 0 in all three blocks.
"""

# %%
# A padded batch
# --------------
# Three source sentences and their targets (the course's case-conversion task), padded with ``<pad>``. The
# decoder reads the target shifted right, behind a start token ``<s>``, and learns to predict each next token
# (the last one being ``</s>``).
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap

import attnkit

sources = ["I am a student", "you are", "hello"]
src_tokens = [s.split() for s in sources]
tgt_tokens = [["<s>"] + s.upper().split() for s in sources]  # it predicts these shifted left, then </s>
M, N = max(map(len, src_tokens)), max(map(len, tgt_tokens))
src_lengths = np.array([len(t) for t in src_tokens])
tgt_lengths = np.array([len(t) for t in tgt_tokens])
pad = [t + ["<pad>"] * (M - len(t)) for t in src_tokens]
tgt_pad = [t + ["<pad>"] * (N - len(t)) for t in tgt_tokens]
for s, t in zip(pad, tgt_pad):
    print(f"source {s}\n  target {t}")
print("source lengths", src_lengths.tolist(), "of M =", M, "; target lengths", tgt_lengths.tolist(), "of N =", N)

# %%
# The three masks
# ---------------
# Rows are queries, columns keys; True means "may attend". Only keys are masked: the rows of padded queries
# still see the real keys, and what they compute is ignored (the loss skips padded targets).
B = len(sources)
encoder_mask = attnkit.reference.attention_mask(M, M, key_lengths=src_lengths, batch_shape=(B,))
cross_mask = attnkit.reference.attention_mask(N, M, key_lengths=src_lengths, batch_shape=(B,))
decoder_mask = attnkit.reference.attention_mask(N, N, key_lengths=tgt_lengths, causal=True, batch_shape=(B,))
for name, m in (("encoder self", encoder_mask), ("cross", cross_mask), ("decoder self", decoder_mask)):
    print(f"{name:>12} mask {m.shape}: {m.sum(axis=(1, 2)).tolist()} visible (query, key) pairs per sentence")
print("decoder mask of sentence 1 (decoder input length 3):")
print(decoder_mask[1].astype(int))

# %%
# The same masks by hand: padding compares a key's index with its sentence's length; causality compares it
# with the query's index.
keys_src, keys_tgt, queries_tgt = np.arange(M), np.arange(N), np.arange(N)[:, None]
np.testing.assert_array_equal(encoder_mask, np.broadcast_to(keys_src < src_lengths[:, None, None], (B, M, M)))
np.testing.assert_array_equal(cross_mask, np.broadcast_to(keys_src < src_lengths[:, None, None], (B, N, M)))
np.testing.assert_array_equal(decoder_mask, (keys_tgt <= queries_tgt) & (keys_tgt < tgt_lengths[:, None, None]))

# %%
# Boolean masks and their fast forms give the same attention
# ----------------------------------------------------------
# attnkit runs a mask that is really a key-padding mask as lengths (padded keys are skipped, not computed);
# ``key_lengths=`` and ``causal=True`` say so directly. Heads broadcast: the masks have shape (B, 1, Nq, Nk).
rng = np.random.default_rng(0)
H, d = 2, 8
src = rng.standard_normal((B, H, M, d))
tgt = rng.standard_normal((B, H, N, d))
blocks = {
    "encoder self": ((src, src, src), encoder_mask, {"key_lengths": src_lengths}),
    "cross": ((tgt, src, src), cross_mask, {"key_lengths": src_lengths}),
    "decoder self": ((tgt, tgt, tgt), decoder_mask, {"key_lengths": tgt_lengths, "causal": True}),
}
for name, (qkv, mask, fast) in blocks.items():
    with_mask = attnkit.scaled_dot_product_attention(*qkv, mask=mask[:, None])
    with_fast = attnkit.scaled_dot_product_attention(*qkv, **fast)
    reference = attnkit.reference.scaled_dot_product_attention(*qkv, mask=mask[:, None])
    print(f"{name:>12}: max |mask - fast form| {np.abs(with_mask - with_fast).max():.2g}, "
          f"max |attnkit - reference| {np.abs(with_mask - reference).max():.2g}")
    np.testing.assert_allclose(with_mask, with_fast, atol=1e-12)
    np.testing.assert_allclose(with_mask, reference, atol=1e-12)

# %%
# The masks of every sentence
# ---------------------------
colours = ListedColormap(["0.3", "#8fd175"])  # masked, may attend
fig, axes = plt.subplots(B, 3, figsize=(12, 10.5), constrained_layout=True)
for b in range(B):
    panels = ((encoder_mask[b], pad[b], pad[b], "encoder self-attention: padding"),
              (cross_mask[b], tgt_pad[b], pad[b], "cross-attention: source padding"),
              (decoder_mask[b], tgt_pad[b], tgt_pad[b], "decoder self-attention: causal + padding"))
    for ax, (mask, query_labels, key_labels, title) in zip(axes[b], panels):
        ax.imshow(mask, cmap=colours, vmin=0, vmax=1)
        ax.set_xticks(np.arange(mask.shape[1] + 1) - 0.5, minor=True)
        ax.set_yticks(np.arange(mask.shape[0] + 1) - 0.5, minor=True)
        ax.grid(which="minor", color="white", lw=1.5)
        ax.tick_params(which="minor", length=0)
        ax.set_xticks(range(len(key_labels)), key_labels, rotation=60, fontsize=8)
        ax.set_yticks(range(len(query_labels)), query_labels, fontsize=8)
        ax.set_title(f"sentence {b}: {title}", fontsize=9)
        ax.set_xlabel("keys")
        ax.set_ylabel("queries")
fig.suptitle("Encoder-decoder masks of a padded batch (green: may attend, grey: masked)")
plt.show()
