"""
Sinusoidal positions and the rotation that moves them one step
==============================================================

The Transformer's positional encoding writes position t as pairs of a sine and a cosine,
``p(t)[2i] = sin(t w_i)``, ``p(t)[2i + 1] = cos(t w_i)``, with frequencies ``w_i = 10000^(-2i/d)``: a
clock whose hands turn at geometrically spaced speeds. Each pair turns by the fixed angle ``w_i`` from one
position to the next, so one matrix ``M``, block-diagonal with a 2 x 2 rotation per pair, moves every
position one step: ``p(t + 1) = M p(t)`` for all t. That is why a linear layer can attend "one to the left"
without knowing the absolute position.

Reproduces: the course's sinusoidal position matrix and its block-rotation matrix M with p(t+1) = M p(t);
got: M p(t) equals p(t+1) to 6.3e-15 for every t = 0..126 (d = 16); M is orthogonal to 1.1e-16.
"""

# %%
# The encodings
# -------------
# :func:`attnkit.sinusoidal_positions` returns the (n, d) table; we check it against the NumPy reference
# and against the formula.
import matplotlib.pyplot as plt
import numpy as np

import attnkit

n, d = 128, 16
P = attnkit.sinusoidal_positions(n, d)
w = 10000.0 ** (-np.arange(0, d, 2) / d)  # one frequency per (sin, cos) pair
t = np.arange(n)[:, None]
formula = np.empty((n, d))
formula[:, 0::2], formula[:, 1::2] = np.sin(t * w), np.cos(t * w)
print(f"positions {P.shape}; max |P - formula| {np.abs(P - formula).max():.2g}; "
      f"max |P - reference| {np.abs(P - attnkit.reference.sinusoidal_positions(n, d)).max():.2g}")
np.testing.assert_allclose(P, formula, atol=1e-12)
print("frequencies w_i:", np.array2string(w, precision=4))
print("wavelengths 2 pi / w_i (positions):", np.array2string(2 * np.pi / w, precision=1))

# %%
# The block-rotation matrix M
# ---------------------------
# For the pair ``(sin(t w), cos(t w))``, the angle-sum formulas give
# ``sin((t+1) w) = cos(w) sin(t w) + sin(w) cos(t w)`` and ``cos((t+1) w) = -sin(w) sin(t w) + cos(w) cos(t w)``:
# the 2 x 2 block ``[[cos w, sin w], [-sin w, cos w]]``. M has one such block per pair and zeros elsewhere;
# it does not depend on t.
M = np.zeros((d, d))
for i, wi in enumerate(w):
    M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[np.cos(wi), np.sin(wi)], [-np.sin(wi), np.cos(wi)]]

stepped = P[:-1] @ M.T  # row t: M p(t)
error = np.abs(stepped - P[1:]).max()
print(f"max over t = 0..{n - 2} of |M p(t) - p(t+1)|: {error:.2g}")
np.testing.assert_allclose(stepped, P[1:], atol=1e-12)
orthogonality = np.abs(M @ M.T - np.eye(d)).max()
print(f"M is a rotation: max |M M^T - I| = {orthogonality:.2g}")
np.testing.assert_allclose(M @ M.T, np.eye(d), atol=1e-12)

# %%
# k steps are ``M^k``, and the positions computed from any start agree: ``start=t`` gives the table from
# position t on, which is how a decoder gets the encoding of the next token.
M5 = np.linalg.matrix_power(M, 5)
np.testing.assert_allclose(P[:-5] @ M5.T, P[5:], atol=1e-12)
np.testing.assert_allclose(attnkit.sinusoidal_positions(3, d, start=40), P[40:43], atol=1e-12)
print(f"M^5 p(t) = p(t+5): max error {np.abs(P[:-5] @ M5.T - P[5:]).max():.2g}")

# %%
# Since M is a rotation, ``p(t) . p(t + k)`` depends only on the offset k (and is symmetric in it): the
# dot products of the encodings are a function of relative position.
gram = P @ P.T
offsets_equal = max(np.ptp(np.diagonal(gram, offset=k)) for k in range(1, 20))
print(f"p(t) . p(t+k) is the same for every t: largest spread along a diagonal of P P^T {offsets_equal:.2g}")

# %%
# The table, M, and the clock hands
# ---------------------------------
fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), constrained_layout=True, width_ratios=[1.5, 1, 1])
image = axes[0].imshow(P.T, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
axes[0].set_xlabel("position t")
axes[0].set_ylabel("dimension (sin, cos pairs; fast to slow)")
axes[0].set_title(f"sinusoidal positions p(t), d = {d}")
fig.colorbar(image, ax=axes[0], shrink=0.8)
limit = np.abs(M).max()
image = axes[1].imshow(M, cmap="RdBu_r", vmin=-limit, vmax=limit)
axes[1].set_title("M: one 2 x 2 rotation per pair")
axes[1].set_xlabel("column")
axes[1].set_ylabel("row")
fig.colorbar(image, ax=axes[1], shrink=0.8)
circle = np.linspace(0, 2 * np.pi, 200)
axes[2].plot(np.cos(circle), np.sin(circle), color="0.85", lw=1)
for i in (0, 1, 2):
    axes[2].plot(P[:12, 2 * i + 1], P[:12, 2 * i], marker="o", ms=4, lw=0.8, label=f"pair {i}: w = {w[i]:.3g}")
axes[2].set_aspect("equal")
axes[2].set_xlabel("cos(t w_i)")
axes[2].set_ylabel("sin(t w_i)")
axes[2].set_title("t = 0..11: pair i turns w_i per step")
axes[2].legend(fontsize=7, loc="center")
plt.show()
