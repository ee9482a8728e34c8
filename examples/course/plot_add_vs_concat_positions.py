"""
Adding or concatenating positions: the cross terms
==================================================

A token's vector ``x_i`` can carry its position ``p_i`` in two ways: added, ``x_i + p_i`` (the original
Transformer), or concatenated, ``[x_i, p_i]``. The attention score of two tokens shows the difference. Added,
the dot product expands into four terms,

``(x_i + p_i) . (x_j + p_j) = x_i . x_j + x_i . p_j + p_i . x_j + p_i . p_j``

content-content, content-position, position-content and position-position: the two middle ones are the
*cross terms*, where a word's content is compared with another token's position. Concatenated, content and
position live in separate coordinates and the score is ``x_i . x_j + p_i . p_j``: no cross terms.

Reproduces: the course's comparison of added and concatenated positions (the cross terms of the score);
got: the four terms sum to the added score to 1.1e-14, the cross terms are 39% of its size (Frobenius
norm), the concatenated score equals content . content + position . position to 3.6e-15.
"""

# %%
# Twelve tokens with d = 16
# -------------------------
# Random content vectors stand for word embeddings; :class:`attnkit.nn.SinusoidalPositions` adds the
# sinusoidal table (``mode="add"``) or appends it (``mode="concat"``).
import matplotlib.pyplot as plt
import numpy as np

import attnkit
from attnkit.nn import SinusoidalPositions

rng = np.random.default_rng(0)
n, d = 12, 16
X = rng.standard_normal((n, d))
P = attnkit.sinusoidal_positions(n, d)

added, _ = SinusoidalPositions(d, mode="add").forward(X)
concatenated, _ = SinusoidalPositions(d, mode="concat").forward(X)
print("added:", added.shape, " concatenated:", concatenated.shape)

# %%
# The four terms of the added score
# ---------------------------------
terms = {
    "content . content": X @ X.T,
    "content . position": X @ P.T,
    "position . content": P @ X.T,
    "position . position": P @ P.T,
}
score_added = added @ added.T
gap = np.abs(sum(terms.values()) - score_added).max()
print(f"added score = sum of the four terms: max difference {gap:.2g}")
np.testing.assert_allclose(sum(terms.values()), score_added, atol=1e-12)

cross = terms["content . position"] + terms["position . content"]
share = np.linalg.norm(cross) / np.linalg.norm(score_added)
for name, term in terms.items():
    print(f"  {name:<20} Frobenius norm {np.linalg.norm(term):6.2f}, mean |entry| {np.abs(term).mean():.2f}")
print(f"cross terms: norm {np.linalg.norm(cross):.2f}, {100 * share:.0f}% of the added score's norm "
      f"({np.linalg.norm(score_added):.2f})")

# %%
# The concatenated score has no cross terms
# -----------------------------------------
score_concat = concatenated @ concatenated.T
gap_concat = np.abs(score_concat - (terms["content . content"] + terms["position . position"])).max()
print(f"concatenated score = content . content + position . position: max difference {gap_concat:.2g}")
np.testing.assert_allclose(score_concat, terms["content . content"] + terms["position . position"], atol=1e-12)

# %%
# Through attention: the weights of the two inputs (Q = K = the token vectors, no projections) differ, and the
# difference is exactly what the cross terms put into the logits. Learned projections ``W_q``, ``W_k`` acting
# on ``[x_i, p_i]`` as a whole can mix content and position again; only projections that keep the two blocks
# apart (block-diagonal) keep the concatenated score free of cross terms.
_, w_added = attnkit.scaled_dot_product_attention(added, added, added, return_weights=True)
_, w_concat = attnkit.scaled_dot_product_attention(concatenated, concatenated, concatenated, return_weights=True)
_, w_no_cross = attnkit.scaled_dot_product_attention(
    added, added, added, bias=-cross / np.sqrt(d), return_weights=True)  # the added logits minus the cross terms
print(f"mean |weights added - weights concatenated|: {np.abs(w_added - w_concat).mean():.3f}")
print(f"added logits with the cross terms removed vs concatenated (same scale): "
      f"max |difference| {np.abs(w_no_cross - attnkit.softmax(score_concat / np.sqrt(d))).max():.2g}")
np.testing.assert_allclose(w_no_cross, attnkit.softmax(score_concat / np.sqrt(d)), atol=1e-12)

# %%
# The terms, drawn
# ----------------
panels = [*terms.items(), ("added: sum of all four", score_added), ("concatenated: no cross terms", score_concat)]
limit = max(np.abs(m).max() for _, m in panels)
fig, axes = plt.subplots(2, 3, figsize=(11, 7), constrained_layout=True)
for ax, (title, matrix) in zip(axes.ravel(), panels):
    image = ax.imshow(matrix, cmap="RdBu_r", vmin=-limit, vmax=limit)
    cross_term = title in ("content . position", "position . content")
    ax.set_title(title + (" (cross term)" if cross_term else ""), fontsize=10, color="tab:red" if cross_term else "k")
    ax.set_xlabel("key token j")
    ax.set_ylabel("query token i")
fig.colorbar(image, ax=axes, shrink=0.7, label="score contribution")
fig.suptitle(f"Scores of {n} tokens (d = {d}): added positions bring two cross terms, concatenation none")
plt.show()
