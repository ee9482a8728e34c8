"""Sliding-window attention ("dropping the far past"): time against the window, and decoding memory.

One run, one table file (``results/window.md``):

1. time: causal attention over N = --n positions (default 16,384; B=1, 4 heads of 64, float32), forward
   and forward + backward, with ``window=(w, 0)`` for w = 64 ... 4,096 against the full causal kernel,
   timed side by side (interleaved repeats). The target (issue 32): w = 256 at N = 16k at least 20x
   faster than full causal attention;
2. memory: a 2-layer ``nn.CausalDecoder`` (d_model 256, 4 heads) decoding --steps positions one at a time
   with its key/value cache: the bytes its caches hold at 1/8, 1/4, 1/2 and all of the steps, with a
   window of 256 (a rolling cache: flat) and without (growing with the steps).

Run ``python benchmarks/bench_window.py --help`` for the options.
"""

import numpy as np

import _harness as harness
import attnkit
from attnkit import nn
from attnkit.ops import scaled_dot_product_attention_backward

HEADS = 4
HEAD_DIM = 64
WINDOWS = (64, 256, 1024, 4096)
TARGET = (256, 20.0)  # (window, speed-up over full causal attention) at N = 16k
DECODER = dict(n_layers=2, d_model=256, n_heads=4, d_ff=1024)
DECODE_WINDOW = 256


def forward(q, k, v, window):
    return lambda: attnkit.scaled_dot_product_attention(q, k, v, causal=True, window=window)


def forward_backward(q, k, v, window, dout):
    def run():
        out, lse = attnkit.scaled_dot_product_attention(q, k, v, causal=True, window=window, return_lse=True)
        return scaled_dot_product_attention_backward(dout, q, k, v, out, lse, causal=True, window=window)

    return run


def cache_bytes(cache):
    total = 0
    for layer in cache.layers:
        if layer.kept():
            keys, values = layer.keys_values()
            total += keys.base.nbytes + values.base.nbytes  # the buffers, not the views
    return total


def decoding_memory(steps, window):
    rng = np.random.default_rng(0)
    decoder = nn.CausalDecoder(DECODER["n_layers"], DECODER["d_model"], DECODER["n_heads"], DECODER["d_ff"], rng,
                               dropout=0.0, window=window)
    cache = decoder.start(1, capacity=16)
    marks, held = {steps // 8, steps // 4, steps // 2, steps}, {}
    x = rng.standard_normal((1, 1, DECODER["d_model"])).astype(np.float32)
    for t in range(1, steps + 1):
        x = decoder.step(x, cache)[0]
        if t in marks:
            held[t] = cache_bytes(cache)
    return held


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16384, help="positions of the timed attention (default 16384)")
    parser.add_argument("--steps", type=int, default=8192, help="decoding steps of the memory part (default 8192)")
    args = harness.parse_args(parser, "window", argv)
    if args.quick:
        args.n, args.steps = min(args.n, 2048), min(args.steps, 512)
    harness.set_threads(args.threads)
    report = harness.Report(args, "Sliding-window attention: time against the window, and decoding memory")
    rng = np.random.default_rng(0)
    q, k, v, dout = (rng.standard_normal((1, HEADS, args.n, HEAD_DIM)).astype(np.float32) for _ in range(4))
    windows = [w for w in WINDOWS if w < args.n]
    table = report.table(f"Causal attention, N = {args.n:,}, {HEADS} heads of {HEAD_DIM}, float32",
                         ["pass", "window", "time", "full causal", "speed-up"],
                         note="`window=(w, 0)`: each query sees itself and the w keys before it; the full kernel "
                              "is timed in the same interleaved rounds.")
    speedups = {}
    for name, make in (("forward", lambda w: forward(q, k, v, w)),
                       ("forward + backward", lambda w: forward_backward(q, k, v, w, dout))):
        fns = {"full": make(None), **{w: make((w, 0)) for w in windows}}
        timings = harness.compare(fns, repeats=args.repeats, max_seconds=30.0)
        for w in windows:
            speedups[(name, w)] = harness.ratio(timings["full"], timings[w])
            table.add_row(name, f"{w:,}", harness.fmt_time(timings[w]), harness.fmt_time(timings["full"]),
                          harness.fmt_ratio(speedups[(name, w)]))
    memory = report.table(f"Key/value caches of a 2-layer decoder (d_model {DECODER['d_model']}) decoding "
                          f"{args.steps:,} positions, float32",
                          ["window", *[f"after {t:,} steps" for t in sorted({args.steps // 8, args.steps // 4,
                                                                             args.steps // 2, args.steps})]])
    flat = {}
    for window in (DECODE_WINDOW, None):
        held = decoding_memory(args.steps, window)
        flat[window] = held
        memory.add_row("none" if window is None else f"{window}", *[harness.fmt_bytes(held[t]) for t in sorted(held)])
    w, goal = TARGET
    lines = []
    if args.n == 16384 and w in windows:
        got = speedups[("forward", w)]
        lines.append(f"- window {w} at N = 16,384, forward: {got:.1f}x full causal attention (target >= {goal:.0f}x): "
                     + ("met" if got >= goal else "**not met**"))
    windowed = flat[DECODE_WINDOW]
    full = {b for t, b in windowed.items() if t > DECODE_WINDOW}  # once the window is full, nothing grows
    lines.append(f"- rolling cache over {args.steps:,} steps, once {DECODE_WINDOW + 1} positions are held: "
                 + ("flat" if len(full) <= 1 else "**not flat**")
                 + f" ({', '.join(harness.fmt_bytes(b) for b in windowed.values())})")
    report.text("Targets", lines)
    report.data = {"speedups": {f"{p} w={w}": s for (p, w), s in speedups.items()},
                   "cache_bytes": {str(k): v for k, v in flat.items()}}
    report.write()
    return 0


if __name__ == "__main__":
    main()
