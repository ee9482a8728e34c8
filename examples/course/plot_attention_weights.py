"""
Attention weights: random queries and keys, and queries equal to keys
======================================================================

Softmax attention gives each query a weight for every key, ``W = softmax(Q K^T / sqrt(d))``, one row per
query, and each row sums to 1 over the keys. With independent random queries and keys the weights are
spread out with no pattern; when the queries are the keys themselves (``Q = K``, self-attention without
projections) every token scores itself highest by far, ``|q_i|^2 ~ d`` against ``q_i . q_j ~ sqrt(d)``, so
the weight matrix is close to the identity.

Reproduces: the course's figure of the attention weights of random Q, K, V against Q = K (near identity),
rows summing to 1 over keys; got: mean weight on the diagonal 0.102 (random, 10 keys) against 0.979 (Q = K,
d = 64); every row sums to 1 within 6.7e-16.
"""

# %%
# Ten tokens, d = 64
# ------------------
# :func:`attnkit.scaled_dot_product_attention` returns the weights with ``return_weights=True``. Rows are
# queries, columns keys.
import matplotlib.pyplot as plt
import numpy as np

import attnkit

rng = np.random.default_rng(0)
n, d = 10, 64
q, k, v = (rng.standard_normal((n, d)) for _ in range(3))

_, w_random = attnkit.scaled_dot_product_attention(q, k, v, return_weights=True)
_, w_self = attnkit.scaled_dot_product_attention(k, k, v, return_weights=True)  # Q = K

for name, w in (("random Q, K", w_random), ("Q = K", w_self)):
    sums = w.sum(axis=-1)
    print(f"{name:>11}: row sums {np.round(sums, 12).tolist()}")
    print(f"{'':>11}  largest |row sum - 1| {np.abs(sums - 1).max():.2g}; mean diagonal weight "
          f"{np.mean(np.diag(w)):.3f}; mean largest weight per row {w.max(axis=-1).mean():.3f}")
    np.testing.assert_allclose(sums, 1.0, atol=1e-12)

# %%
# The weights are those of the NumPy reference, and with ``Q = K`` each query's largest weight is on its
# own key.
_, w_ref = attnkit.reference.scaled_dot_product_attention(k, k, v, return_weights=True)
print("max |weights - reference|:", f"{np.abs(w_self - w_ref).max():.2g}")
np.testing.assert_allclose(w_self, w_ref, atol=1e-12)
np.testing.assert_array_equal(np.argmax(w_self, axis=-1), np.arange(n))

# %%
# The two weight matrices
# -----------------------
fig, axes = plt.subplots(1, 2, figsize=(9.5, 4.2), constrained_layout=True)
for ax, w, title in ((axes[0], w_random, "random Q, K"), (axes[1], w_self, "Q = K: near identity")):
    image = ax.imshow(w, vmin=0, vmax=1, cmap="viridis")
    ax.set_title(f"{title}\n(mean diagonal weight {np.mean(np.diag(w)):.3f})")
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    ax.set_xticks(range(n))
    ax.set_yticks(range(n))
fig.colorbar(image, ax=axes, label="weight (each row sums to 1)", shrink=0.85)
fig.suptitle(f"softmax(Q K^T / sqrt(d)), N = {n}, d = {d}")
plt.show()

# %%
# How close to the identity, as d grows
# -------------------------------------
# The gap between ``|q_i|^2 / sqrt(d) ~ sqrt(d)`` and the off-diagonal logits ``~ N(0, 1)`` grows with the
# width, so the diagonal takes more of each row: the mean diagonal weight over 20 draws of 10 tokens.
dims = [1, 2, 4, 8, 16, 32, 64, 128]
diagonal = {"Q = K": [], "random Q, K": []}
for width in dims:
    self_draws, random_draws = [], []
    for seed in range(20):
        r = np.random.default_rng(seed)
        a, b = r.standard_normal((2, n, width))
        self_draws.append(np.mean(np.diag(attnkit.scaled_dot_product_attention(a, a, a, return_weights=True)[1])))
        random_draws.append(np.mean(np.diag(attnkit.scaled_dot_product_attention(a, b, b, return_weights=True)[1])))
    diagonal["Q = K"].append(np.mean(self_draws))
    diagonal["random Q, K"].append(np.mean(random_draws))
    print(f"d = {width:>3}: mean diagonal weight, Q = K {diagonal['Q = K'][-1]:.3f}, "
          f"random {diagonal['random Q, K'][-1]:.3f}")

fig, ax = plt.subplots(figsize=(6, 3.8), constrained_layout=True)
for name, values in diagonal.items():
    ax.plot(dims, values, marker="o", label=name)
ax.axhline(1 / n, color="0.5", ls=":", label=f"uniform (1/N = {1 / n:g})")
ax.set_xscale("log", base=2)
ax.set_xticks(dims, [str(x) for x in dims])
ax.set_xlabel("query/key width d")
ax.set_ylabel("mean weight of key i for query i")
ax.set_title(f"Self-weight on the diagonal, N = {n} (mean of 20 draws)")
ax.set_ylim(0, 1.05)
ax.legend()
plt.show()
