"""
QKV mechanics with the course's numbers
=======================================

One query is compared with three keys by dot products; the scores decide how much of each key's value
the query reads. With hard (argmax) attention it reads exactly one value, that of the best-scoring key;
softmax attention weighs every value by ``exp(score)``, and scores this far apart make it as hard as
argmax. We choose small integer vectors that give exactly the course's scores, 1054, 852 and -396, and
the value [23, 46], then follow the scores through argmax, softmax and a temperature.

Reproduces: the course's QKV worked example (scores 1054, 852, -396; argmax attention returns [23, 46]);
got: scores [1054, 852, -396], argmax output [23, 46], softmax weights [1, 1.9e-88, 0].
"""

# %%
# A query, three keys, three values
# ---------------------------------
# Two dimensions are enough. The query is ``q = (22, 24)``; the keys were chosen so that the dot
# products are the course's scores: ``22 * 25 + 24 * 21 = 1054``, ``22 * 18 + 24 * 19 = 852`` and
# ``22 * (-6) + 24 * (-11) = -396``. The first key carries the value [23, 46]; the other two values are
# arbitrary small integers.
import matplotlib.pyplot as plt
import numpy as np

import attnkit

q = np.array([[22.0, 24.0]])  # (Nq=1, d=2)
k = np.array([[25.0, 21.0], [18.0, 19.0], [-6.0, -11.0]])  # (Nk=3, d=2)
v = np.array([[23.0, 46.0], [7.0, 3.0], [-5.0, 12.0]])  # (Nk=3, dv=2)

scores = q @ k.T
print("scores q . k_j:", scores[0].astype(int).tolist())
np.testing.assert_array_equal(scores[0], [1054, 852, -396])

# %%
# Hard attention: the value of the best key
# -----------------------------------------
# :func:`attnkit.argmax_attention` takes, for each query, the value row of its highest-scoring key.
# Only the sign of the scale matters to an argmax, so ``scale=1.0`` compares the raw scores.
hard = attnkit.argmax_attention(q, k, v, scale=1.0)
print("argmax attention output:", hard[0].tolist())
np.testing.assert_array_equal(hard[0], [23, 46])

# %%
# Softmax attention: weights from the scores
# ------------------------------------------
# Softmax turns the scores into weights that sum to 1: ``w_j = exp(s_j) / sum_l exp(s_l)``. The second
# score is 202 below the first, so its weight is ``exp(-202)``, about 1.9e-88; the third, 1450 below,
# underflows to 0 even in float64. Scaled by ``1 / sqrt(d)`` (the transformer's default, here
# ``1 / sqrt(2)``) the gaps shrink to 143 and 1025 (weights 9.3e-63 and 0): still one-hot. The output
# of softmax attention is then the first value, as with argmax.
weights_raw = attnkit.softmax(scores[0])
weights_scaled = attnkit.softmax(scores[0] / np.sqrt(q.shape[-1]))
print("softmax(scores):          ", np.array2string(weights_raw, precision=3))
print("softmax(scores / sqrt(d)):", np.array2string(weights_scaled, precision=3))
soft, w = attnkit.scaled_dot_product_attention(q, k, v, return_weights=True)  # scale 1/sqrt(d)
print("softmax attention output (scale 1/sqrt(2)):", np.round(soft[0], 6).tolist())
np.testing.assert_allclose(w[0], weights_scaled, rtol=1e-12)
np.testing.assert_allclose(soft, hard, atol=1e-12)

# %%
# Temperature: from uniform to argmax
# -----------------------------------
# Dividing the scores by a temperature T (``scale = 1 / T``) shows the whole range between the two
# rules. At T = 10000 the weights are nearly uniform (0.35, 0.34, 0.30) and the output is close to the
# mean of the three values; at T = 100 the second key still gets 12%; at T = 30 the first key already
# takes 99.9%, and below that softmax attention is argmax attention.
temperatures = np.logspace(0, 4, 200)
curves = np.stack([attnkit.softmax(scores[0] / t) for t in temperatures])
for t in (1, 30, 100, 300, 1000, 10000):
    wt = attnkit.softmax(scores[0] / t)
    out = attnkit.scaled_dot_product_attention(q, k, v, scale=1.0 / t)[0]
    print(f"T = {t:>5}: weights {np.array2string(wt, precision=3)}, output {np.round(out, 2).tolist()}")

fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 3.8), constrained_layout=True)
labels = [f"key {j + 1}: score {int(s)}" for j, s in enumerate(scores[0])]
bars = np.arange(3)
ax0.bar(bars - 0.2, weights_scaled, width=0.4, label="softmax(s / sqrt(d))")
ax0.bar(bars + 0.2, (np.arange(3) == np.argmax(scores[0])).astype(float), width=0.4, label="argmax (one-hot)")
for j, wj in enumerate(weights_scaled):
    ax0.annotate(f"{wj:.2g}" if wj else "0 (underflow)", (j - 0.2, wj), ha="center", va="bottom", fontsize=8)
ax0.set_xticks(bars, labels, fontsize=8)
ax0.set_ylim(0, 1.15)
ax0.set_ylabel("attention weight")
ax0.set_title("weights of the three keys")
ax0.legend(fontsize=8)
for j in range(3):
    ax1.plot(temperatures, curves[:, j], label=labels[j])
ax1.set_xscale("log")
ax1.set_xlabel("temperature T (scores divided by T)")
ax1.set_ylabel("softmax weight")
ax1.set_title("softmax(scores / T): one-hot below T ~ 30")
ax1.legend(fontsize=8)
fig.suptitle("q = (22, 24) against three keys: scores 1054, 852, -396")
plt.show()
