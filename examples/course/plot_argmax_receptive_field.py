"""
Argmax attention's receptive field: (k + 1)^n after n layers
============================================================

With argmax (hard) attention a query reads exactly one key. If each layer lets a token keep its own state
(the residual connection) and read k other tokens (k heads, or k keys of a window besides its own), then
after n layers its state can hold information from at most ``(k + 1)^n`` positions: each layer multiplies
the number of sources by at most k + 1. We measure this by propagation, with
:func:`attnkit.argmax_attention` carrying sets of source positions as its values, and then look at the
window, where the ``(k + 1)^n`` routes land on far fewer distinct positions.

Reproduces: the course's hard-attention question, receptive field (k + 1)^n after n layers; got: k argmax
heads with random choices over 2048 positions reach on average 2, 4, 8, 15.8 positions (k = 1; bound 2, 4,
8, 16) and 4, 15.9, 61.6, 218.8 (k = 3; bound 4, 16, 64, 256); with a causal window of k = 2, (k + 1)^n =
3, 9, 27, 81, 243 routes land on nk + 1 = 3, 5, 7, 9, 11 positions.
"""

# %%
# Propagating sets of sources through argmax attention
# ----------------------------------------------------
# Row i of ``S`` marks the input positions whose information has reached token i (at first, only itself:
# ``S = I``). Argmax attention with ``S`` as its values returns, for each query, the row of the key it
# chose, so ``S_new = S OR argmax_attention(q, k_h, S)`` over the heads h is exactly the propagation rule.
# Queries and keys are random at every layer and head, as choices a network might make.
import matplotlib.pyplot as plt
import numpy as np

import attnkit

N, d, layers = 2048, 16, 4
measured = {}
for k in (1, 2, 3):
    rng = np.random.default_rng(k)
    S = np.eye(N, dtype=np.float32)
    sizes = []
    for n in range(1, layers + 1):
        new = S.copy()
        for _ in range(k):  # k heads, each reading one key
            q, keys = rng.standard_normal((2, N, d), dtype=np.float32)
            np.maximum(new, attnkit.argmax_attention(q, keys, S), out=new)
        S = new
        sizes.append(S.sum(axis=1).mean())
        print(f"k = {k}, n = {n}: mean sources per token {sizes[-1]:7.1f}, largest {S.sum(axis=1).max():4.0f}, "
              f"bound (k + 1)^n = {(k + 1) ** n}")
    measured[k] = sizes
    assert S.sum(axis=1).max() <= (k + 1) ** layers

# %%
# The bound is reached whenever the chosen keys' own sources do not overlap; with random choices among 2048
# positions they rarely do for small fields, and the shortfall grows as the fields fill the sequence (two
# heads choosing the same key, or a key already among the sources).
#
# A sliding window: routes against positions
# -------------------------------------------
# With a causal window of k (query i sees keys i - k, ..., i: k + 1 keys, its own included), one head picks
# one of k + 1 keys per layer. Counting the routes by which position j can reach position i after n layers
# is the n-th power of the window's visibility matrix: ``(k + 1)^n`` routes, the bound above. But they all
# stay inside ``i - nk, ..., i``: ``nk + 1`` distinct positions.
n_window, k = 64, 2
A = attnkit.reference.attention_mask(n_window, n_window, causal=True, window=(k, 0)).astype(np.int64)
last = n_window - 1
routes, reach = [], []
power = np.eye(n_window, dtype=np.int64)
for n in range(1, 6):
    power = A @ power
    routes.append(power[last].sum())
    reach.append(np.count_nonzero(power[last]))
    print(f"window k = {k}, n = {n}: routes into the last position {routes[-1]:4d} = (k + 1)^n = {(k + 1) ** n:4d}; "
          f"distinct positions {reach[-1]:2d} = nk + 1 = {n * k + 1}")
    assert routes[-1] == (k + 1) ** n and reach[-1] == n * k + 1

# %%
# One actual route: argmax attention over the window, stacked without a residual, passes on one position's
# value per layer. Carrying each token's index as its value shows where every output came from: always
# inside the ``nk + 1`` positions of its cone.
rng = np.random.default_rng(0)
source = np.arange(n_window, dtype=np.float64)[:, None]
for n in range(1, 6):
    q, keys = rng.standard_normal((2, n_window, d))
    source = attnkit.argmax_attention(q, keys, source, causal=True, window=(k, 0))
    offsets = np.arange(n_window) - source[:, 0]
    assert offsets.min() >= 0 and offsets.max() <= n * k
    print(f"n = {n}: each output is the input from 0..{int(offsets.max())} positions back (cone: 0..{n * k})")

# %%
# The two counts, drawn
# ---------------------
fig, axes = plt.subplots(1, 3, figsize=(14, 4.2), constrained_layout=True)
ns = np.arange(1, layers + 1)
for k_heads, sizes in measured.items():
    line, = axes[0].plot(ns, sizes, marker="o", label=f"k = {k_heads}: measured")
    axes[0].plot(ns, (k_heads + 1.0) ** ns, ls=":", color=line.get_color(), label=f"k = {k_heads}: (k + 1)^n")
axes[0].set_yscale("log", base=2)
axes[0].set_xticks(ns)
axes[0].set_xlabel("layers n")
axes[0].set_ylabel("sources per token (mean)")
axes[0].set_title(f"k argmax heads + residual, N = {N}")
axes[0].legend(fontsize=8)
nw = np.arange(1, 6)
axes[1].plot(nw, routes, marker="o", label="routes (k + 1)^n")
axes[1].plot(nw, reach, marker="s", label="distinct positions nk + 1")
axes[1].set_yscale("log", base=3)
axes[1].set_xticks(nw)
axes[1].set_xlabel("layers n")
axes[1].set_ylabel("count")
axes[1].set_title(f"causal window k = {k}: routes vs positions")
axes[1].legend(fontsize=8)
power3 = np.linalg.matrix_power(A, 3)[last]
axes[2].bar(np.arange(n_window)[-3 * k - 3:], power3[-3 * k - 3:])
axes[2].set_xlabel("source position j")
axes[2].set_ylabel(f"routes from j to position {last}")
axes[2].set_title(f"n = 3, k = {k}: {power3.sum()} routes over {np.count_nonzero(power3)} positions")
plt.show()
