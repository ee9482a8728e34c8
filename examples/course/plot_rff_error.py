"""
Random Fourier features: approximation error against D and D_random
====================================================================

Linear attention replaces the softmax kernel ``exp(q . k / sqrt(d))`` by an inner product of features,
``phi(q) . phi(k)``. Random Fourier features (Rahimi and Recht) draw ``D_random`` frequencies ``w ~ N(0,
sigma^-2 I)`` and use ``[sin(w . x), cos(w . x)]``: an unbiased estimate of the Gaussian kernel
``exp(-|q - k|^2 / 2 sigma^2)``, and, times ``exp(|x|^2 / 2 sigma^2)`` on each side, of the softmax kernel.
Being a Monte-Carlo average, the error falls like ``1 / sqrt(D_random)``, and it grows with the query/key
width D (here d) because the norms of q and k, not the logits, set the variance. A deterministic map does
not average anything: exact polynomial features of ``(1 + q . k / (p sqrt(d)))^p``, a kernel that tends to
``exp(q . k / sqrt(d))`` as the degree p grows, with ``sum_i d^i`` features.

The benchmark ``benchmarks/study_rff_error.py`` (``results/rff_error.md``) sweeps the same questions at full
size (N = 1024, up to 4096 features, more seeds); this example is its small, quick version.

Reproduces: the course's question "how does the RFF approximation of softmax attention behave as D and
D_random grow?" (benchmarks/results/rff_error.md); got: the Gaussian kernel's error falls with slope -0.50 in
D_random; at d = 8 and D_random = 256 the attention error is 0.086 (RFF) and 0.104 (FAVOR+), against 0.016
for degree-3 polynomial features (585 of them) and 0.225 for uniform weights; at D_random = 256 the RFF error
grows from 0.051 (d = 4) to 1.16 (d = 128), past uniform weights' 0.25 from d = 32 on.
"""

# %%
# The Gaussian kernel, estimated
# ------------------------------
# :func:`attnkit.random_fourier_features` applies the sin/cos map with given frequencies. With ``D_random``
# frequencies (2 D_random features) the estimate ``Phi Phi^T`` of the kernel matrix of 128 points has a
# relative error that falls like a Monte-Carlo average. The softmax kernel's estimate (the same features
# times ``exp(|x|^2 / 2 sigma^2)``, :class:`attnkit.feature_maps.RandomFourierFeatureMap` with
# ``softmax_kernel=True``) has larger errors: those factors amplify it. The products ``Phi Phi^T`` run on
# :func:`attnkit.ops.matmul`, attnkit's own GEMM (the same numbers as ``@``, on attnkit's threads).
import matplotlib.pyplot as plt
import numpy as np

import attnkit
from attnkit.feature_maps import PolynomialFeatureMap, PositiveRandomFeatureMap, RandomFourierFeatureMap

d, scale, seeds = 8, 0.5, 3
sigma = d**0.25  # sigma^2 = sqrt(d): softmax attention's kernel
widths = np.array([16, 32, 64, 128, 256, 512, 1024, 2048, 4096])
rng = np.random.default_rng(0)
x = scale * rng.standard_normal((128, d))
sq = np.sum(x * x, axis=1)
gaussian = np.exp(-(sq[:, None] + sq[None, :] - 2 * x @ x.T) / (2 * sigma**2))
softmax_kernel = np.exp(x @ x.T / sigma**2)


def relative(estimate, exact):
    return float(np.linalg.norm(estimate - exact) / np.linalg.norm(exact))


kernel_error = {"Gaussian kernel": [], "softmax kernel": []}
for width in widths:
    g, s = [], []
    for seed in range(seeds):
        w = np.random.default_rng(seed).standard_normal((d, width)) / sigma
        phi = attnkit.random_fourier_features(x, w, kind="sincos")
        g.append(relative(attnkit.ops.matmul(phi, phi.T), gaussian))
        phi_s = RandomFourierFeatureMap(width, random_state=seed, softmax_kernel=True).transform(x)
        s.append(relative(attnkit.ops.matmul(phi_s, phi_s.T), softmax_kernel))
    kernel_error["Gaussian kernel"].append(np.median(g))
    kernel_error["softmax kernel"].append(np.median(s))


def slope(xs, ys):
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


for name, errors in kernel_error.items():
    print(f"{name:>15}: relative error " + ", ".join(f"{e:.3g}" for e in errors)
          + f"  (D_random = {widths[0]}..{widths[-1]}); log-log slope {slope(widths, errors):+.2f}")

# %%
# Attention outputs: random against deterministic features
# --------------------------------------------------------
# Now the output of linear attention (:func:`attnkit.linear_attention`) against exact softmax attention
# (:func:`attnkit.scaled_dot_product_attention`), 4 heads of 256 tokens, q and k entries ``N(0, 0.5^2)``,
# median over 3 draws. Random maps: RFF (``D_random / 2`` frequencies, so ``D_random`` features) and
# Performer's positive features (FAVOR+). Deterministic: :class:`attnkit.feature_maps.PolynomialFeatureMap`
# of degree p with ``c = p sqrt(d)``, whose kernel ``(q . k + c)^p`` is ``c^p (1 + q . k / (p sqrt(d)))^p``;
# the constant ``c^p`` cancels in attention's normalisation.


def attention_errors(dim, feature_maps, n=256, heads=4):
    """Median relative error of linear attention with each map against exact attention, over the seeds."""
    errors = {name: [] for name in feature_maps(0)}
    errors["uniform"] = []
    for seed in range(seeds):
        r = np.random.default_rng(100 + seed)
        q, k = scale * r.standard_normal((2, 1, heads, n, dim))
        v = r.standard_normal((1, heads, n, dim))
        exact = attnkit.scaled_dot_product_attention(q, k, v)
        errors["uniform"].append(relative(np.broadcast_to(v.mean(axis=-2, keepdims=True), exact.shape), exact))
        for name, fm in feature_maps(seed).items():
            errors[name].append(relative(attnkit.linear_attention(q, k, v, feature_map=fm), exact))
    return {name: float(np.median(e)) for name, e in errors.items()}


random_error = {"RFF": [], "FAVOR+": [], "uniform": []}
for width in widths:
    e = attention_errors(d, lambda seed, width=width: {
        "RFF": RandomFourierFeatureMap(width // 2, random_state=seed, softmax_kernel=True),
        "FAVOR+": PositiveRandomFeatureMap(width, random_state=seed)})
    for name in random_error:
        random_error[name].append(e[name])
degrees = [1, 2, 3]
poly = attention_errors(d, lambda seed: {p: PolynomialFeatureMap(p, c=p * np.sqrt(d)) for p in degrees})
poly_widths = [PolynomialFeatureMap(p).n_features_out(d) for p in degrees]
print(f"uniform weights (every key 1/N, the bar to clear): {random_error['uniform'][0]:.3g}")
for name, errors in ((n, random_error[n]) for n in ("RFF", "FAVOR+")):
    print(f"{name:>7} (random):  " + ", ".join(f"D={w}: {e:.3g}" for w, e in zip(widths, errors)))
print("polynomial (deterministic): " + ", ".join(f"p={p} (D={w}): {poly[p]:.2g}" for p, w in zip(degrees, poly_widths)))
i256 = list(widths).index(256)
print(f"at D_random = 256: RFF {random_error['RFF'][i256]:.3g}, FAVOR+ {random_error['FAVOR+'][i256]:.3g}; "
      f"degree 3 ({poly_widths[2]} features): {poly[3]:.2g}")

# %%
# The polynomial kernel is a deterministic approximation, but of a different function: its error is the
# gap between ``(1 + t/p)^p`` and ``e^t``, which shrinks with p, while the number of features grows as
# ``d^p``. With d = 8 and small logits, degree 1 (9 features) is already closer than RFF with 1024 random
# features, and degree 2 (73) as close as 4096 of them; at large d the ``d^p`` growth rules it out. Every
# approximation has to beat the trivial one, uniform weights (the mean of v, error 0.225 here).
#
# Error against the width d
# -------------------------
# With the entries of q and k fixed, ``|q|^2 / sqrt(d)`` grows like ``sqrt(d)``, and with it the variance of
# both random estimates: from d = 32 on, 256 random features do no better than uniform weights.
dims = [4, 8, 16, 32, 64, 128]
by_dim = {"RFF": [], "FAVOR+": [], "uniform": []}
for dim in dims:
    e = attention_errors(dim, lambda seed: {
        "RFF": RandomFourierFeatureMap(128, random_state=seed, softmax_kernel=True),
        "FAVOR+": PositiveRandomFeatureMap(256, random_state=seed)})
    for name in by_dim:
        by_dim[name].append(e[name])
    print(f"d = {dim:>3}, D_random = 256: RFF {e['RFF']:.3g}, FAVOR+ {e['FAVOR+']:.3g}, uniform {e['uniform']:.3g}")

# %%
# Figures
# -------
fig, axes = plt.subplots(1, 3, figsize=(15, 4.4), constrained_layout=True)
for name, errors in kernel_error.items():
    axes[0].plot(widths, errors, marker="o", label=f"{name} (slope {slope(widths, errors):+.2f})")
guide = kernel_error["Gaussian kernel"][0] * np.sqrt(widths[0] / widths)
axes[0].plot(widths, guide, ":", color="0.4", label="1 / sqrt(D_random)")
axes[0].set_title(f"kernel matrix estimate (d = {d}, 128 points)")
axes[0].set_ylabel("relative error (Frobenius)")
axes[1].plot(widths, random_error["RFF"], marker="o", label="RFF (random)")
axes[1].plot(widths, random_error["FAVOR+"], marker="o", label="FAVOR+ (random)")
axes[1].plot(poly_widths, [poly[p] for p in degrees], marker="s", color="k",
             label="polynomial p = 1..3 (deterministic)")
for p, w in zip(degrees, poly_widths):
    axes[1].annotate(f"p={p}", (w, poly[p]), textcoords="offset points", xytext=(4, 4), fontsize=8)
axes[1].axhline(random_error["uniform"][0], color="0.5", ls="--", label="uniform weights (mean of v)")
axes[1].set_title(f"linear attention vs softmax attention (d = {d})")
axes[1].set_ylabel("relative error of the output")
for name, errors in by_dim.items():
    axes[2].plot(dims, errors, marker="o", label=name, **({"color": "0.5", "ls": "--"} if name == "uniform" else {}))
axes[0].set_xlabel("random frequencies D_random (phi has 2 D_random features)")
axes[1].set_xlabel("features D (width of phi; RFF: D / 2 frequencies)")
for ax in axes:
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
axes[2].set_xticks(dims, [str(x) for x in dims])
axes[2].set_xlabel("query/key width d")
axes[2].set_ylabel("relative error of the output")
axes[2].set_title("attention error vs d (D_random = 256)")
fig.suptitle("Random Fourier features: error vs D_random and d (q, k entries N(0, 0.5^2), median of 3 draws)")
plt.show()
