"""
What each attention of an encoder-decoder costs
===============================================

An encoder-decoder with a source of M tokens, a target of N tokens and query/key width k runs three kinds
of attention. Each compares every query with every key it may see, k multiply-adds per pair:

- encoder self-attention: M queries x M keys, ``O(M^2 k)``;
- cross-attention: N target queries x M source keys, ``O(M N k)``;
- decoder self-attention: N x N, causal (half of the pairs), ``O(N^2 k)``.

We time :func:`attnkit.scaled_dot_product_attention` on each and fit the exponent of the time against each
size on a log-log scale: about 2 for the self-attentions, 1 for cross-attention in M or N, 1 in k.

Reproduces: the course's costs of encoder self-attention O(M^2 k), cross-attention O(M N k) and decoder
self-attention O(N^2 k); got: fitted exponents 2.11 (encoder, M), 1.19 and 1.09 (cross, M and N), 2.16
(decoder, N) and 0.93 (encoder, k), on 2 shared cores (the times, and so the slopes, vary with the load).
"""

# %%
# A timer
# -------
# The shortest of a few runs: on a shared machine the minimum is the least disturbed measurement.
import time

import matplotlib.pyplot as plt
import numpy as np

import attnkit

rng = np.random.default_rng(0)
H = 4  # heads


def seconds(nq, nk, k, causal=False, repeats=3):
    """Shortest time of ``repeats`` calls of attention with nq queries and nk keys of width k (H heads)."""
    q = rng.standard_normal((1, H, nq, k), dtype=np.float32)
    keys, v = rng.standard_normal((2, 1, H, nk, k), dtype=np.float32)
    attnkit.scaled_dot_product_attention(q, keys, v, causal=causal)  # warm-up
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        attnkit.scaled_dot_product_attention(q, keys, v, causal=causal)
        best = min(best, time.perf_counter() - start)
    return best


def slope(sizes, times):
    """Exponent p of ``time ~ size^p``, fitted by least squares on logs."""
    return float(np.polyfit(np.log(sizes), np.log(times), 1)[0])


# %%
# Sweeps
# ------
# Each sweep doubles one size and holds the others (k = 64, the other length 1024).
k, fixed = 64, 1024
sizes = np.array([256, 512, 1024, 2048])
sweeps = {
    "encoder self-attention, M": [seconds(m, m, k) for m in sizes],
    "cross-attention, M (N = 1024)": [seconds(fixed, m, k) for m in sizes],
    "cross-attention, N (M = 1024)": [seconds(n, fixed, k) for n in sizes],
    "decoder self-attention (causal), N": [seconds(n, n, k, causal=True) for n in sizes],
}
widths = np.array([32, 64, 128, 256])
width_times = [seconds(fixed, fixed, w) for w in widths]

expected = {"encoder self-attention, M": 2, "cross-attention, M (N = 1024)": 1, "cross-attention, N (M = 1024)": 1,
            "decoder self-attention (causal), N": 2}
print(f"{'sweep':<36} " + " ".join(f"{s:>9}" for s in sizes) + "   exponent (expected)")
for name, times in sweeps.items():
    row = " ".join(f"{1e3 * t:7.2f}ms" for t in times)
    print(f"{name:<36} {row}   {slope(sizes, times):.2f} ({expected[name]})")
row = " ".join(f"{1e3 * t:7.2f}ms" for t in width_times)
print(f"{'encoder self-attention, k (M = 1024)':<36} {row}   {slope(widths, width_times):.2f} (1)  "
      f"[k = {widths.tolist()}]")

# %%
# Causal attention skips the blocks of pairs above the diagonal, so the decoder's self-attention costs about
# half of the encoder's at the same length (0.55 on a quiet machine; a busy one moves single timings).
ratio = sweeps["decoder self-attention (causal), N"][-1] / sweeps["encoder self-attention, M"][-1]
print(f"causal / full self-attention at length {sizes[-1]}: {ratio:.2f}")

# %%
# On log-log axes
# ---------------
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.4), constrained_layout=True)
for name, times in sweeps.items():
    ax0.plot(sizes, 1e3 * np.array(times), marker="o", label=f"{name}: slope {slope(sizes, times):.2f}")
guide = sweeps["encoder self-attention, M"][0] * 1e3
ax0.plot(sizes, guide * (sizes / sizes[0]) ** 2, ":", color="0.5", label="slope 2")
cross_start = sweeps["cross-attention, M (N = 1024)"][0] * 1e3
ax0.plot(sizes, cross_start * (sizes / sizes[0]), "--", color="0.5", label="slope 1")
ax0.set_xscale("log", base=2)
ax0.set_yscale("log")
ax0.set_xticks(sizes, [str(s) for s in sizes])
ax0.set_xlabel("the length that varies (M or N)")
ax0.set_ylabel("time (ms, fastest of 3)")
ax0.set_title(f"attention time vs length (k = {k}, {H} heads)")
ax0.legend(fontsize=8)
ax1.plot(widths, 1e3 * np.array(width_times), marker="o", label=f"slope {slope(widths, width_times):.2f}")
ax1.plot(widths, 1e3 * width_times[0] * widths / widths[0], "--", color="0.5", label="slope 1")
ax1.set_xscale("log", base=2)
ax1.set_yscale("log")
ax1.set_xticks(widths, [str(w) for w in widths])
ax1.set_xlabel("query/key width k")
ax1.set_ylabel("time (ms, fastest of 3)")
ax1.set_title(f"encoder self-attention vs k (M = {fixed})")
ax1.legend(fontsize=8)
plt.show()
