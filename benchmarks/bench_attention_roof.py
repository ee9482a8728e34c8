"""Exact attention as a fraction of the machine's own sgemm roof, forward and backward, float32.

The roof is NumPy's float32 GEMM 4096 x 4096 x 4096 (2 * 4096^3 flops) on the same threads, timed in
the same interleaved rounds as each attention row (so a noisy phase of the machine hits both alike).
Shapes: B=1, H=8, d=64, N in --sizes, non-causal and causal; every table is run at --threads and
at 1 thread. attnkit's backward is ``context.backward(dout)`` (the delta = rowsum(dO * O) pass
included); torch's is ``aten._scaled_dot_product_flash_attention_for_cpu_backward``, its forward
``F.scaled_dot_product_attention`` (the same flash kernel).

Flop convention: forward 4 B H d V (Q K^T and P V), backward 10 B H d V (S = Q K^T recomputed, dV,
dP, dQ, dK: both kernels recompute the scores), where V is the number of visible (query, key) pairs:
N^2 non-causal, N (N + 1) / 2 causal (each row counts exactly the keys it sees).

Run ``python benchmarks/bench_attention_roof.py --help`` for the options.
"""

import time

import numpy as np

import _harness as harness
from attnkit import ops

HEADS = 8
HEAD_DIM = 64
ROOF_N = 4096
SIZES = [1024, 2048, 4096]
QUICK_SIZES = [256]
TARGET_FORWARD = 0.90
TARGET_BACKWARD = 0.70


def visible_pairs(n, causal):
    """(query, key) pairs that take part: every pair, or those with key <= query."""
    return n * (n + 1) // 2 if causal else n * n


def _attnkit(q, k, v, dout, causal):
    def forward():
        return ops.scaled_dot_product_attention(q, k, v, causal=causal)

    _, context = ops.scaled_dot_product_attention(q, k, v, causal=causal, return_context=True)
    return forward, lambda: context.backward(dout)


def _torch(torch, q, k, v, dout, causal):
    tq, tk, tv, tdout = (torch.from_numpy(a) for a in (q, k, v, dout))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(tq, tk, tv, 0.0, causal)
    backward_op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
    return (lambda: sdpa(tq, tk, tv, is_causal=causal),
            lambda: backward_op(tdout, tq, tk, tv, out, lse, 0.0, causal))


def _cpu_timed(fns):
    """The callables wrapped to record the process CPU seconds of each call (all threads summed)."""
    cpu = {name: [] for name in fns}

    def wrap(name, fn):
        def timed():
            start = time.process_time()
            result = fn()
            cpu[name].append(time.process_time() - start)
            return result
        return timed

    return {name: wrap(name, fn) for name, fn in fns.items()}, cpu


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="sequence lengths N")
    parser.add_argument("--head-dim", type=int, default=HEAD_DIM, help="d (default 64)")
    args = harness.parse_args(parser, "attention_roof", argv)
    torch = harness.load_torch()
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    roof_n = 512 if args.quick else ROOF_N
    d = args.head_dim
    report = harness.Report(args, "Exact attention as a fraction of the sgemm roof", torch)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((roof_n, roof_n), dtype=np.float32)
    b = rng.standard_normal((roof_n, roof_n), dtype=np.float32)
    roof_flops = 2.0 * roof_n**3
    summary = []
    report.data["rows"] = []
    for threads in sorted({args.threads, 1}, reverse=True):
        harness.set_threads(threads, torch)
        table = report.table(
            f"{threads} thread{'s' if threads > 1 else ''}: B=1 H={HEADS} d={d}, float32",
            ["N", "causal", "pass", "roof GFLOPS", "attnkit", "attnkit GFLOPS", "of roof", "of roof (CPU time)",
             "torch", "torch GFLOPS", "torch of roof", "attnkit / torch"],
            f"*roof*: NumPy float32 GEMM {roof_n}^3 on {threads} thread(s), timed interleaved with the row's "
            "attention calls; *of roof*: GFLOPS / roof GFLOPS; *attnkit / torch*: torch time / attnkit time "
            "(> 1: attnkit faster); *of roof (CPU time)*: the same fraction from the process CPU seconds per "
            "call (all threads summed) instead of wall time, which other processes on the machine barely "
            "move. Flops: forward 4 B H d V, backward 10 B H d V (V visible pairs).",
        )
        for n in sizes:
            q, k, v, dout = (rng.standard_normal((1, HEADS, n, d), dtype=np.float32) for _ in range(4))
            for causal in (False, True):
                fns = {"roof": lambda: a @ b}
                fwd, bwd = _attnkit(q, k, v, dout, causal)
                fns.update({"attnkit forward": fwd, "attnkit backward": bwd})
                if torch is not None:
                    tfwd, tbwd = _torch(torch, q, k, v, dout, causal)
                    fns.update({"torch forward": tfwd, "torch backward": tbwd})
                timed, cpu = _cpu_timed(fns)
                timings = harness.compare(timed, repeats=args.repeats, max_seconds=8.0)
                roof = roof_flops / timings["roof"].median / 1e9
                cpu_roof = roof_flops / np.median(cpu["roof"])
                pairs = HEADS * visible_pairs(n, causal) * d
                for name, flops, target in (("forward", 4.0 * pairs, TARGET_FORWARD),
                                            ("backward", 10.0 * pairs, TARGET_BACKWARD)):
                    mine = timings[f"attnkit {name}"]
                    gf = flops / mine.median / 1e9
                    cpu_frac = flops / np.median(cpu[f"attnkit {name}"]) / cpu_roof
                    theirs = timings.get(f"torch {name}")
                    tgf = None if theirs is None else flops / theirs.median / 1e9
                    table.add_row(
                        n, "yes" if causal else "no", name, f"{roof:.1f}", harness.fmt_time(mine), f"{gf:.1f}",
                        f"{gf / roof:.2f}", f"{cpu_frac:.2f}", "-" if theirs is None else harness.fmt_time(theirs),
                        "-" if tgf is None else f"{tgf:.1f}", "-" if tgf is None else f"{tgf / roof:.2f}",
                        "-" if theirs is None else harness.fmt_ratio(theirs.median / mine.median))
                    if n >= 1024:
                        summary.append((threads, n, causal, name, gf / roof, cpu_frac, target))
                report.data["rows"].append({"threads": threads, "n": n, "causal": causal,
                                            **{key: t.as_dict() for key, t in timings.items()}})
    lines = []
    for threads, n, causal, name, frac, cpu_frac, target in summary:
        mark = "met" if min(frac, cpu_frac) >= target else "not met"
        lines.append(f"- {threads} thread(s), N={n}, {'causal' if causal else 'non-causal'} {name}: "
                     f"{frac:.2f} of the roof by wall time, {cpu_frac:.2f} by CPU time (target {target:.2f}): {mark}")
    report.text("Targets (N >= 1024: forward >= 0.90, backward >= 0.70 of the roof)", lines or ["- none measured"])
    report.write()


if __name__ == "__main__":
    main()
