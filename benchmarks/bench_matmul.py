"""attnkit's matrix product (``ops.matmul``) against NumPy's (OpenBLAS), at 1 and 2 threads.

Shapes are the products the estimators run (rows = batch x tokens): NN ``x @ W``, TN ``x.T @ g``
(weight gradients), NT ``g @ W.T`` (input gradients), two small ones and one in float64. Both
libraries write into a preallocated ``out``. One run, one table file (``results/matmul.md``):

1. one thread: attnkit under each ISA of ``--isas`` (switched at run time, as ``ATTNKIT_ISA`` does at
   import) against NumPy with its BLAS on one thread (threadpoolctl), GFLOPS and the time ratio;
2. two threads: attnkit (first ISA) against NumPy with two BLAS threads, and each library's speed-up
   over its own single thread; the last column checks that attnkit's 1-thread, 2-thread and other-ISA
   results are the same bits;
3. small products around the size below which the kernel runs on one thread;
4. the two-thread speed-ups of parts 2 and 3 again, in a child process whose OpenMP threads spin
   (``OMP_WAIT_POLICY=ACTIVE``) instead of sleeping as attnkit's do by default;
5. the targets, met or not.

Every configuration of one shape is timed in the same interleaved rounds (``harness.compare``); a
thread count or ISA is set inside the timed callable, which loops over enough calls (>= 1 ms) that the
switch costs nothing measurable.

What the tuning found (Zen 4, AMD EPYC, 2 cores shared with other jobs; the kernel's constants were
chosen from minimum CPU times over 15 repeats of each variant, the only figures that stayed steady
within 2% while other engineers' builds ran):

- Zen 4 executes a 512-bit FMA as two 256-bit halves, so the AVX2 kernel (6 x 16 floats per tile)
  peaks as high as the AVX-512 one (12 x 32): both reach 95-107 GFLOPS in float32 on one core.
  OpenBLAS keeps its AVX-512 kernel either way, and the two ratios come out alike.
- KC of 512 floats (2 KB of each row of A's micro-panel) rather than 256: at k = 384 and 1536 the
  smaller block re-reads C once per block, 10-15% slower; 768 gained nothing. NC = 512 columns:
  256 or 384 lost up to 15% at k = 1536 (A repacked per block), 1024 gained nothing.
- Prefetching a C tile that will be read (a later KC block) before its FMA chain: +10% at k = 1536,
  where each block finds C evicted; prefetching tiles that are only written cost two threads 10%.
- MR = 12 rows (24 accumulators, 3/4 of the registers) rather than 14 (every register): the same
  speed on large products, 3% rather than 9% of wasted rows at m = 128 (the weight gradients).
- Packing a row-major A into the p-major micro-panel transposed it element by element, 16% of a
  2304 x 128 x 128 product (perf); packed in blocks of W columns instead (whole vectors of its rows)
  it went from 101 to 110 GFLOPS, and 4096 x 1536 x 384 from 96 to 106.
- Two threads: the kernel itself scales 1.9-2.0x from ~1 ms of work (spinning threads, part 4), but
  attnkit's OpenMP threads wait passively (set at import), so each parallel region wakes a sleeping
  thread and the caller may sleep at its end. On this KVM guest that cost 40-200 us a region and varied
  from run to run: 2 threads gained 1.0-1.6x at 0.4-1.5 ms products (1.0x in results/matmul.md, the
  two-thread time equal to the one-thread time, as if both halves had run on one core), ~1.9x at
  25-50 ms. Hence one thread below 2^24 multiply-adds (with passive threads a second one lost 10-25% up
  to 8M in a plain loop of calls, and 5% at 16-33M in this script's loop). Spinning threads (OMP_WAIT_POLICY=ACTIVE,
  or GOMP_SPINCOUNT) fell to 0.1-0.8x of one thread whenever another process ran. _harness imports
  torch, whose libgomp.so.1 then also serves attnkit: without the setting at the top of this file,
  attnkit's threads would spin here while they sleep in a user's process.
- Small products: a tile computed for rows that do not exist (m = 32 runs 3 x 12 rows) and packing
  B (each packed panel serves only three A panels) keep attnkit below OpenBLAS there, and the
  Python-side checks add ~2-3 us per call.

Run ``python benchmarks/bench_matmul.py --help`` for the options.
"""

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

# attnkit makes its OpenMP threads wait passively unless the user chose otherwise (attnkit/__init__.py).
# But _harness imports torch first, and torch's bundled libgomp.so.1 has the soname of the system one
# attnkit links: the first loaded serves both, so attnkit's kernels would run on a runtime started
# before attnkit could set the policy, with spinning threads. Apply attnkit's rule before that import,
# so that the tables measure what a user gets; part 4 measures spinning threads in a child process.
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

import numpy as np  # noqa: E402

import _harness as harness  # noqa: E402
import attnkit  # noqa: E402
from attnkit import _core, ops  # noqa: E402

# (kind, m, k, n, dtype): NN a (m, k) @ b (k, n); TN a = x.T for x (k, m) C-ordered; NT b = w.T for w (n, k).
SHAPES = [
    ("NN", 2304, 128, 128, np.float32),
    ("NN", 2304, 128, 256, np.float32),
    ("NN", 2304, 256, 128, np.float32),
    ("NN", 4096, 384, 1536, np.float32),
    ("NN", 4096, 1536, 384, np.float32),
    ("NN", 256, 128, 30000, np.float32),
    ("TN", 128, 2304, 128, np.float32),
    ("TN", 128, 2304, 256, np.float32),
    ("NT", 2304, 128, 256, np.float32),
    ("NN", 32, 128, 128, np.float32),
    ("NN", 64, 64, 64, np.float32),
    ("NN", 512, 64, 64, np.float64),
]
QUICK_SHAPES = [SHAPES[0], SHAPES[6], SHAPES[8], SHAPES[9], SHAPES[11]]
# Products around the one-thread threshold (2^24 multiply-adds): (m x 128) @ (128 x 128) and squares.
SMALL = [(m, 128, 128) for m in (16, 64, 256, 512, 1024, 2048)] + [(s, s, s) for s in (64, 128, 256, 384)]
QUICK_SMALL = [(64, 128, 128), (1024, 128, 128), (256, 256, 256)]
SPINNING_CHILD = "--spinning-child"
MIN_CALL_SECONDS = 1e-3
TARGET_ONE_THREAD = 0.9  # attnkit / OpenBLAS at one thread, float32, m >= 256, first ISA
TARGET_AVX2 = 0.5  # the same under AVX2
TARGET_SPEEDUP = 1.7  # attnkit at 2 threads over its own single thread, m >= 1024


def operands(kind, m, k, n, dtype, rng):
    """``a`` (m, k) and ``b`` (k, n) in the layout ``kind`` names (read in place by both libraries)."""
    a = rng.standard_normal((k, m) if kind == "TN" else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if kind == "NT" else (k, n)).astype(dtype)
    return (a.T if kind == "TN" else a), (b.T if kind == "NT" else b)


def label(kind, m, k, n):
    if kind == "TN":
        return f"({k}x{m}).T @ ({k}x{n})"
    if kind == "NT":
        return f"({m}x{k}) @ ({n}x{k}).T"
    return f"({m}x{k}) @ ({k}x{n})"


def blas_pools():
    """Setters of the thread count of NumPy's BLAS (none without threadpoolctl)."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return []
    return [lib.set_num_threads for lib in ThreadpoolController().select(user_api="blas").lib_controllers]


def calls_per_sample(m, k, n):
    """Calls in one timed callable: >= MIN_CALL_SECONDS at ~100 GFLOPS."""
    return max(1, math.ceil(MIN_CALL_SECONDS / (2 * m * k * n / 100e9)))


def numpy_call(a, b, out, threads, pools, inner):
    def call():
        for set_blas in pools:
            set_blas(threads)
        for _ in range(inner):
            np.matmul(a, b, out=out)

    return call


def attnkit_call(a, b, out, threads, isa, inner):
    def call():
        _core.set_isa(isa)
        attnkit.set_num_threads(threads)
        for _ in range(inner):
            ops.matmul(a, b, out=out)

    return call


def attnkit_result(a, b, threads, isa):
    _core.set_isa(isa)
    attnkit.set_num_threads(threads)
    return ops.matmul(a, b)


def gflops(m, k, n, timing, inner):
    return 2 * m * k * n / (timing.median / inner) / 1e9


def bench_shapes(report, args, shapes, pools):
    """Parts 1 and 2; returns one dict of ratios per shape."""
    isas, first = args.isas, args.isas[0]
    one = report.table(
        "One thread: attnkit vs NumPy (OpenBLAS)",
        ["product", "dtype", "NumPy", *(f"attnkit {i}" for i in isas), "NumPy GFLOPS",
         *(f"{i} GFLOPS" for i in isas), *(f"{i} / NumPy" for i in isas)],
        "Median time of one call ± interquartile range of the repeats; *x / NumPy* = NumPy's time / "
        "attnkit's (> 1: attnkit is faster). GFLOPS = 2 m k n / time.",
    )
    two = report.table(
        f"Two threads: attnkit ({first}) vs NumPy (OpenBLAS)",
        ["product", "dtype", "NumPy", "attnkit", "NumPy GFLOPS", "attnkit GFLOPS", "attnkit / NumPy",
         "NumPy 2T / 1T", "attnkit 2T / 1T", "same bits", "max rel. diff vs NumPy"],
        "*2T / 1T*: each library's speed-up over its own single thread, timed in the same rounds. *same "
        f"bits*: attnkit's results at 1 and 2 threads and under {', '.join(isas)} are identical. *max rel. "
        "diff*: largest |attnkit - NumPy| over the largest |NumPy|.",
    )
    rng = np.random.default_rng(0)
    rows, raw = [], []
    for kind, m, k, n, dtype in shapes:
        a, b = operands(kind, m, k, n, dtype, rng)
        out = np.empty((m, n), dtype)
        inner = calls_per_sample(m, k, n)
        fns = {"numpy 1": numpy_call(a, b, out, 1, pools, inner), "numpy 2": numpy_call(a, b, out, 2, pools, inner)}
        fns.update({f"{isa} 1": attnkit_call(a, b, out, 1, isa, inner) for isa in isas})
        fns[f"{first} 2"] = attnkit_call(a, b, out, 2, first, inner)
        timings = harness.compare(fns, repeats=args.repeats)
        results = [attnkit_result(a, b, threads, isa) for isa, threads in [(first, 1), (first, 2)] + [
            (isa, 1) for isa in isas[1:]]]
        same = all(np.array_equal(results[0], r, equal_nan=True) for r in results[1:])
        expected = np.matmul(a, b)
        diff = float(np.max(np.abs(results[0] - expected), initial=0.0) / np.max(np.abs(expected), initial=1.0))
        t = timings
        ratios = {isa: harness.ratio(t["numpy 1"], t[f"{isa} 1"]) for isa in isas}
        speedup = harness.ratio(t[f"{first} 1"], t[f"{first} 2"])
        name, dt = label(kind, m, k, n), np.dtype(dtype).name
        one.add_row(name, dt, harness.fmt_time(_per_call(t["numpy 1"], inner)),
                    *(harness.fmt_time(_per_call(t[f"{isa} 1"], inner)) for isa in isas),
                    harness.fmt_number(gflops(m, k, n, t["numpy 1"], inner)),
                    *(harness.fmt_number(gflops(m, k, n, t[f"{isa} 1"], inner)) for isa in isas),
                    *(harness.fmt_ratio(ratios[isa]) for isa in isas))
        two.add_row(name, dt, harness.fmt_time(_per_call(t["numpy 2"], inner)),
                    harness.fmt_time(_per_call(t[f"{first} 2"], inner)),
                    harness.fmt_number(gflops(m, k, n, t["numpy 2"], inner)),
                    harness.fmt_number(gflops(m, k, n, t[f"{first} 2"], inner)),
                    harness.fmt_ratio(harness.ratio(t["numpy 2"], t[f"{first} 2"])),
                    harness.fmt_ratio(harness.ratio(t["numpy 1"], t["numpy 2"])), harness.fmt_ratio(speedup),
                    "yes" if same else "**no**", harness.fmt_number(diff, 2))
        rows.append({"label": name, "kind": kind, "m": m, "k": k, "n": n, "dtype": dt, "ratios": ratios,
                     "speedup": speedup, "contended": any(x.contended for x in t.values())})
        raw.append({"kind": kind, "m": m, "k": k, "n": n, "dtype": dt, "calls_per_sample": inner, "same_bits": same,
                    "max_rel_diff": diff, **{name: x.as_dict() for name, x in t.items()}})
    report.data["shapes"] = raw
    return rows


def _per_call(timing, inner):
    """The timing of one call (the callables loop ``inner`` times)."""
    return harness.Timing(timing.median / inner, timing.spread, timing.repeats, timing.number * inner,
                          timing.contention, None)


def thread_timings(args, kind, m, k, n, dtype, rng):
    """attnkit (first ISA) at one and two threads on one product, in the same rounds; and the calls a
    sample makes."""
    a, b = operands(kind, m, k, n, dtype, rng)
    out = np.empty((m, n), dtype)
    inner = calls_per_sample(m, k, n)
    fns = {threads: attnkit_call(a, b, out, threads, args.isas[0], inner) for threads in (1, 2)}
    return harness.compare(fns, repeats=args.repeats), inner


def bench_small(report, args, sizes):
    """Part 3: one against two threads on small float32 products; returns {label: speed-up}."""
    table = report.table(
        f"Small products, one vs two threads (attnkit {args.isas[0]}, float32)",
        ["product", "m k n", "1 thread", "2 threads", "2T / 1T"],
        "Products below 2^24 = 16.8M multiply-adds (*m k n*) run on one thread whatever the setting; the "
        "larger ones show what a second thread gains. Each call includes the Python-side checks (~3 us).",
    )
    rng = np.random.default_rng(1)
    raw, speedups = [], {}
    for m, k, n in sizes:
        t, inner = thread_timings(args, "NN", m, k, n, np.float32, rng)
        speedups[label("NN", m, k, n)] = harness.ratio(t[1], t[2])
        table.add_row(label("NN", m, k, n), f"{m * k * n:.3g}", harness.fmt_time(_per_call(t[1], inner)),
                      harness.fmt_time(_per_call(t[2], inner)), harness.fmt_ratio(speedups[label("NN", m, k, n)]))
        raw.append({"m": m, "k": k, "n": n, "calls_per_sample": inner, **{f"{th} threads": x.as_dict()
                                                                          for th, x in t.items()}})
    report.data["small"] = raw
    return speedups


def child_main(args, shapes, sizes):
    """In the spinning child: attnkit's one- and two-thread times of every product, as JSON on stdout."""
    rng = np.random.default_rng(2)
    results = {}
    for kind, m, k, n, dtype in shapes + [("NN", m, k, n, np.float32) for m, k, n in sizes]:
        t, inner = thread_timings(args, kind, m, k, n, dtype, rng)
        results[label(kind, m, k, n)] = {"mkn": m * k * n, "calls_per_sample": inner,
                                         **{str(th): x.as_dict() for th, x in t.items()}}
    print(json.dumps(results))


def bench_spinning(report, args, passive):
    """Part 4: the two-thread speed-ups again, in a child process whose OpenMP threads spin."""
    command = [sys.executable, str(Path(__file__).resolve()), SPINNING_CHILD, "--repeats", str(args.repeats),
               "--isas", args.isas[0], *(["--quick"] if args.quick else [])]
    done = subprocess.run(command, env={**os.environ, "OMP_WAIT_POLICY": "ACTIVE"}, capture_output=True, text=True,
                          check=False)
    title = f"Two threads over one, passive vs spinning OpenMP threads (attnkit {args.isas[0]})"
    if done.returncode != 0:
        report.text(title, [f"The child process failed: {done.stderr[-2000:]}"])
        return
    results = json.loads(done.stdout.strip().splitlines()[-1])
    table = report.table(
        title,
        ["product", "m k n", "1 thread", "2 threads", "2T / 1T spinning", "2T / 1T passive"],
        "*spinning*: a child process with OMP_WAIT_POLICY=ACTIVE, whose idle OpenMP threads spin instead of "
        "sleeping, so a parallel region needs no wake-up (its times are in the first two columns). *passive*: "
        "attnkit's default, from the tables above. Below 2^24 multiply-adds both run one thread.",
    )
    for name, r in results.items():
        one, two = (harness.Timing(**r[th], result=None) for th in ("1", "2"))
        inner = r["calls_per_sample"]
        table.add_row(name, f"{r['mkn']:.3g}", harness.fmt_time(_per_call(one, inner)),
                      harness.fmt_time(_per_call(two, inner)), harness.fmt_ratio(harness.ratio(one, two)),
                      harness.fmt_ratio(passive.get(name)))
    report.data["spinning"] = results


def summarise(report, args, rows):
    """Part 5: the targets (printed, never asserted)."""
    first, lines = args.isas[0], []
    large = [r for r in rows if r["dtype"] == "float32" and r["m"] >= 256]
    for isa, target in [(first, TARGET_ONE_THREAD)] + [(isa, TARGET_AVX2) for isa in args.isas[1:]]:
        values = {label(r["kind"], r["m"], r["k"], r["n"]): r["ratios"][isa] for r in large}
        missed = {name: v for name, v in values.items() if v < target}
        lines.append(f"- one thread, {isa}, float32, m >= 256: attnkit / OpenBLAS min {min(values.values()):.2f}x, "
                     f"geometric mean {harness.geomean(values.values()):.2f}x; >= {target}x at "
                     f"{len(values) - len(missed)}/{len(values)} -- {'met' if not missed else '**not met**'}"
                     + "".join(f"; {name}: {v:.2f}x" for name, v in missed.items()))
    big = {label(r["kind"], r["m"], r["k"], r["n"]): r["speedup"] for r in rows if r["m"] >= 1024}
    missed = {name: v for name, v in big.items() if v < TARGET_SPEEDUP}
    lines.append(f"- two threads over one, {first}, m >= 1024, {report.env['OpenMP wait']}: min "
                 f"{min(big.values()):.2f}x; >= {TARGET_SPEEDUP}x at "
                 f"{len(big) - len(missed)}/{len(big)} -- {'met' if not missed else '**not met**'}"
                 + "".join(f"; {name}: {v:.2f}x" for name, v in missed.items()))
    if any(r["contended"] for r in rows):
        lines.append("- some timings were taken while other processes used the CPUs (marked †): on 2 shared "
                     "cores a second thread then waits for a core, and the 2-thread figures understate it.")
    report.text("Targets", lines)


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--isas", default=None,
                        help="comma-separated ISAs to run attnkit under, the first also at 2 threads "
                             "(default: every available one but baseline, best first)")
    parser.add_argument(SPINNING_CHILD, action="store_true", help=argparse.SUPPRESS)
    args = harness.parse_args(parser, "matmul", argv)
    available = _core.available_isas()
    simd = [i for i in reversed(available) if i != "baseline"] or ["baseline"]
    args.isas = args.isas.split(",") if args.isas else simd
    unknown = [i for i in args.isas if i not in available]
    if unknown:
        parser.error(f"--isas: {', '.join(unknown)} not available here (available: {', '.join(available)})")
    harness.set_threads(args.threads)
    shapes, sizes = (QUICK_SHAPES, QUICK_SMALL) if args.quick else (SHAPES, SMALL)
    if args.spinning_child:
        return child_main(args, shapes, sizes)
    report = harness.Report(args, "Matrix product: attnkit's ops.matmul vs NumPy (OpenBLAS)")
    policy = {name: os.environ[name] for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if name in os.environ}
    report.env["OpenMP wait"] = " ".join(f"{name}={value}" for name, value in policy.items())
    isa_before = _core.get_isa()
    try:
        rows = bench_shapes(report, args, shapes, blas_pools())
        passive = {r["label"]: r["speedup"] for r in rows} | bench_small(report, args, sizes)
    finally:
        _core.set_isa(isa_before)
    bench_spinning(report, args, passive)
    summarise(report, args, rows)
    report.write()


if __name__ == "__main__":
    main()
