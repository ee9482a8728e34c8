"""
Sliding-window attention and its rolling cache: drop the far past
=================================================================

A causal sliding window lets query i see only itself and the w keys before it (``window=(w, 0)`` with
``causal=True``): attention costs O(N w) instead of O(N^2), and a decoder generating token after token
needs to keep only the last w + 1 keys and values, in a ring buffer whose slot ``t mod (w + 1)`` the new
position overwrites. We draw the window's mask, check windowed attention against the NumPy reference and
against the full boolean mask, time it, then generate with :class:`attnkit.nn.CausalDecoder` (``window=w``)
and watch its cache stay the same size.

Reproduces: the course's sliding-window attention and its rolling cache ("drop the far past",
benchmarks/results/window.md); got: windowed attention = reference to 4.4e-16, = the boolean band mask to
0; 18.7x faster than full causal attention at N = 8192, w = 128 (on 2 shared cores); a cache of 17
positions per layer for w = 16 over 300 decoded tokens (17 KiB against 300 KiB without a window), step by
step = the whole-sequence forward to 2.4e-15.
"""

# %%
# The window's mask
# -----------------
# :func:`attnkit.reference.attention_mask` spells out which keys each query sees: a band of w + 1 keys
# ending at the diagonal.
import time

import matplotlib.pyplot as plt
import numpy as np

import attnkit
from attnkit.nn import CausalDecoder

n, w = 24, 4
band = attnkit.reference.attention_mask(n, n, causal=True, window=(w, 0))
full = attnkit.reference.attention_mask(n, n, causal=True)
print(f"N = {n}, w = {w}: each query sees at most {band.sum(axis=1).max()} keys "
      f"({band.sum()} pairs, against {full.sum()} for full causal attention)")

# %%
# Windowed attention is exact attention over the band
# ---------------------------------------------------
rng = np.random.default_rng(0)
q, k, v = rng.standard_normal((3, 2, n, 16))
windowed = attnkit.scaled_dot_product_attention(q, k, v, causal=True, window=(w, 0))
with_mask = attnkit.scaled_dot_product_attention(q, k, v, mask=band)
reference = attnkit.reference.scaled_dot_product_attention(q, k, v, causal=True, window=(w, 0))
print(f"max |window - reference| {np.abs(windowed - reference).max():.2g}; "
      f"max |window - boolean band mask| {np.abs(windowed - with_mask).max():.2g}")
np.testing.assert_allclose(windowed, reference, atol=1e-12)
np.testing.assert_allclose(windowed, with_mask, atol=1e-12)

# %%
# Key blocks outside the band are never computed, so the time grows like N w, not N^2 (one head of 64,
# float32, fastest of 3 runs).


def fastest(fn, *args, repeats=3, **kwargs):
    """Shortest time of ``repeats`` calls ``fn(*args, **kwargs)``, after one warm-up call."""
    fn(*args, **kwargs)
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args, **kwargs)
        best = min(best, time.perf_counter() - start)
    return best


lengths, w_time = [1024, 2048, 4096, 8192], 128
window_times, full_times = [], []
for length in lengths:
    qq, kk, vv = rng.standard_normal((3, 1, 1, length, 64), dtype=np.float32)
    window_times.append(fastest(attnkit.scaled_dot_product_attention, qq, kk, vv, causal=True, window=(w_time, 0)))
    full_times.append(fastest(attnkit.scaled_dot_product_attention, qq, kk, vv, causal=True))
    print(f"N = {length:>4}: window w = {w_time} {1e3 * window_times[-1]:6.2f} ms, full causal "
          f"{1e3 * full_times[-1]:7.2f} ms ({full_times[-1] / window_times[-1]:.1f}x)")

# %%
# Generating with a rolling cache
# -------------------------------
# A two-layer decoder with ``window=16`` decodes 300 positions one at a time; a second one without a window
# (the same weights) keeps every position. ``cache.layers[i].kept()`` is the number of positions layer i
# holds. The step-by-step outputs equal the windowed decoder's forward over the whole sequence: nothing
# that the window lets a position see is lost by dropping the far past.
window, steps, d_model = 16, 300, 32
decoder = CausalDecoder(2, d_model, 2, 64, np.random.default_rng(0), dropout=0.0, window=window)
unbounded = CausalDecoder(2, d_model, 2, 64, np.random.default_rng(0), dropout=0.0)
x = np.random.default_rng(1).standard_normal((1, steps, d_model))
rolling, growing = decoder.start(1), unbounded.start(1)
kept_window, kept_full, bytes_window, bytes_full, outputs = [], [], [], [], []
for t in range(steps):
    outputs.append(decoder.step(x[:, t : t + 1], rolling)[0])
    unbounded.step(x[:, t : t + 1], growing)
    kept_window.append(rolling.layers[0].kept())
    kept_full.append(growing.layers[0].kept())
    bytes_window.append(sum(a.nbytes for layer in rolling.layers for a in layer.keys_values()))
    bytes_full.append(sum(a.nbytes for layer in growing.layers for a in layer.keys_values()))
stepped = np.concatenate(outputs, axis=1)
whole, _ = decoder.forward(x)
print(f"after {steps} steps: the windowed cache holds {kept_window[-1]} positions per layer "
      f"({bytes_window[-1]} bytes of keys and values), the full cache {kept_full[-1]} ({bytes_full[-1]} bytes)")
print(f"max |step by step - whole-sequence forward| {np.abs(stepped - whole).max():.2g}")
np.testing.assert_allclose(stepped, whole, atol=1e-10)
assert max(kept_window) == window + 1

# %%
# Dropping the far past is exactly what the window means: with two layers of window 16, position t reads
# positions t - 32 .. t at most, so changing the first token changes no output after position 32.
changed = x.copy()
changed[:, 0] += 10.0
shifted, _ = decoder.forward(changed)
moved = np.abs(shifted - whole).max(axis=-1)[0]
print(f"outputs moved by changing token 0: positions {np.flatnonzero(moved > 0).min()}.."
      f"{np.flatnonzero(moved > 0).max()}")
assert np.flatnonzero(moved > 0).max() <= 2 * window

# %%
# The mask, the times and the cache
# ---------------------------------
fig, axes = plt.subplots(1, 3, figsize=(14, 4.3), constrained_layout=True)
axes[0].imshow(band.astype(float) + full, cmap="Greens", vmin=0, vmax=2)
axes[0].set_title(f"window w = {w}: seen (dark), far past dropped (light)", fontsize=10)
axes[0].set_xlabel("key j")
axes[0].set_ylabel("query i")
axes[1].plot(lengths, 1e3 * np.array(full_times), marker="o", label="full causal")
axes[1].plot(lengths, 1e3 * np.array(window_times), marker="o", label=f"window w = {w_time}")
axes[1].set_xscale("log", base=2)
axes[1].set_yscale("log")
axes[1].set_xticks(lengths, [str(x) for x in lengths])
axes[1].set_xlabel("sequence length N")
axes[1].set_ylabel("time (ms, fastest of 3)")
axes[1].set_title("causal attention, 1 head of 64")
axes[1].legend()
axes[2].plot(np.arange(1, steps + 1), np.array(bytes_full) / 1024, label="key/value cache, no window")
axes[2].plot(np.arange(1, steps + 1), np.array(bytes_window) / 1024, label=f"rolling cache, window {window}")
axes[2].set_xlabel("tokens generated")
axes[2].set_ylabel("keys and values held (KiB, 2 layers)")
axes[2].set_title("decoding memory")
axes[2].legend()
plt.show()
