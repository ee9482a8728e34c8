"""
Relative position biases, clipped at k
======================================

Instead of telling each token *where* it is, relative positions tell each pair of tokens *how far apart*
they are: every head learns one logit bias ``pi_{i-j}`` per distance, added to the score of query i and key
j, with distances clipped to ``[-k, k]`` (Shaw et al., 2018; T5's scalar-per-head form). A head therefore
has ``2k + 1`` parameters, a layer ``(2k + 1) x heads``, whatever the sequence length, and the bias matrix
is constant along each diagonal (a Toeplitz matrix) until the clipping makes it flat.
attnkit exposes it as :class:`attnkit.nn.RelativePositionBias`, whose output goes to
:func:`attnkit.scaled_dot_product_attention` as ``bias``; the layers take ``relative_positions=k``.

Reproduces: the course's relative position representations (biases clipped at k, (2k+1) x heads
parameters); got: k = 3, 4 heads: 28 parameters at every length (8 to 1024 tokens), attention with the
bias equal to the reference to 6.7e-16.
"""

# %%
# A layer with k = 3 and four heads
# ---------------------------------
# The parameters are a ``(2k + 1, heads)`` table; row ``r`` is the bias for the distance ``r - k`` (positive:
# the key is in the query's past). Their initial values are small random numbers; we set four readable
# patterns by hand, as training might shape them: look one step back, look one step ahead, stay local, and
# prefer the far past.
import matplotlib.pyplot as plt
import numpy as np

import attnkit
from attnkit.nn import CausalDecoderLayer, RelativePositionBias

k, heads = 3, 4
layer = RelativePositionBias(heads=heads, max_distance=k, rng=0)
print("parameter table:", layer.params["weight"].shape, "=", layer.params["weight"].size, "parameters")
distances = np.arange(-k, k + 1)
layer.params["weight"][:] = np.stack([
    np.where(distances == 1, 2.0, 0.0),  # head 0: the previous token
    np.where(distances == -1, 2.0, 0.0),  # head 1: the next token
    -np.abs(distances) / 1.5,  # head 2: near tokens
    distances / 1.5,  # head 3: the further back, the better
], axis=1)
print("distance:", distances.tolist())
for h in range(heads):
    print(f"head {h} biases:", [round(float(b), 2) for b in layer.params["weight"][:, h]])

# %%
# The bias of a sequence
# ----------------------
# ``forward(nq, nk)`` returns the ``(heads, nq, nk)`` bias. Each diagonal is one distance; beyond ``k`` every
# entry repeats the edge value.
n = 10
bias, buckets = layer.forward(n, n)
print("bias:", bias.shape, "; bucket rows used:", np.unique(buckets).tolist())
i, j = np.indices((n, n))
for h in range(heads):
    expected = layer.params["weight"][np.clip(i - j, -k, k) + k, h]
    np.testing.assert_array_equal(bias[h], expected)
for offset in range(-(n - 1), n):
    diagonal = np.diagonal(bias, offset=offset, axis1=1, axis2=2)
    assert np.all(diagonal == diagonal[:, :1]), "constant along each diagonal"
print("bias[h, i, j] = weight[clip(i - j, -k, k) + k, h] for every head, query and key")

# %%
# The same table serves any length: a query and a key 2 apart get the same bias at positions (5, 3) as at
# (1005, 1003), and the parameter count does not grow with the length (learned absolute positions, by
# contrast, need one d-wide vector per position).
for length in (8, 64, 512, 1024):
    b, _ = layer.forward(length, length)
    print(f"N = {length:>4}: bias {b.shape}, from {layer.params['weight'].size} parameters "
          f"(absolute positions of width 64 would need {length * 64})")
np.testing.assert_array_equal(layer.forward(1006, 1006)[0][:, 1005, 1003], bias[:, 5, 3])

# %%
# In attention
# ------------
# The bias is added to the scaled logits. With queries and keys that carry no information (all zeros) the
# weights are the softmax of the bias alone: each head's pattern, visible directly. attnkit's kernel agrees
# with the NumPy reference.
rng = np.random.default_rng(0)
q = np.zeros((1, heads, n, 8))
keys = np.zeros((1, heads, n, 8))
v = rng.standard_normal((1, heads, n, 8))
out, weights = attnkit.scaled_dot_product_attention(q, keys, v, bias=bias, return_weights=True)
ref = attnkit.reference.scaled_dot_product_attention(q, keys, v, bias=bias)
print(f"max |attnkit - reference| with the bias: {np.abs(out - ref).max():.2g}")
np.testing.assert_allclose(out, ref, atol=1e-12)
print("head 0, query 5, weights:", np.round(weights[0, 0, 5], 3).tolist())

# %%
# Inside a transformer layer, ``relative_positions=k`` gives its self-attention such a table (learned with
# the rest): ``(2k + 1) x heads`` parameters per layer, the only difference from the same layer without it.
block = CausalDecoderLayer(32, heads, 64, np.random.default_rng(0), relative_positions=k)
plain = CausalDecoderLayer(32, heads, 64, np.random.default_rng(0))
tables = {name: value.shape for name, value, _ in block.named_parameters() if "position_bias" in name}
print(f"CausalDecoderLayer(relative_positions={k}, n_heads={heads}): {tables}; "
      f"{block.n_parameters()} parameters against {plain.n_parameters()} without")
assert list(tables.values()) == [(2 * k + 1, heads)]
assert block.n_parameters() - plain.n_parameters() == (2 * k + 1) * heads

# %%
# The biases and the weights they give
# ------------------------------------
names = ["previous token", "next token", "local", "far past"]
fig, axes = plt.subplots(2, heads, figsize=(13, 7.2), constrained_layout=True)
limit = np.abs(bias).max()
for h in range(heads):
    image = axes[0, h].imshow(bias[h], cmap="RdBu_r", vmin=-limit, vmax=limit)
    axes[0, h].set_title(f"head {h}, {names[h]}: bias", fontsize=10)
    weight_image = axes[1, h].imshow(weights[0, h], cmap="viridis", vmin=0, vmax=1)
    axes[1, h].set_title(f"head {h}: softmax(bias)", fontsize=10)
    for ax in axes[:, h]:
        ax.set_xlabel("key j")
        ax.set_ylabel("query i")
fig.colorbar(image, ax=axes[0], shrink=0.8, label=f"bias (clipped at |i - j| = {k})")
fig.colorbar(weight_image, ax=axes[1], shrink=0.8, label="attention weight")
fig.suptitle(f"Relative position biases: k = {k}, {heads} heads, {(2 * k + 1) * heads} parameters, N = {n}")
plt.show()
