"""RandomFourierFeatures.transform vs scikit-learn's RBFSampler.transform: rows/s and the ratio.

Three parts, one run, one table file (``results/random_features.md``):

1. sizes: n=100000 rows, f=64 features, n_components D = 256 ... 4096 (powers of two), float32 and
   float64 (``RandomFourierFeatures(kind="cos")``, RBFSampler's map). Both estimators are fitted on
   the same X; the max-abs-diff column runs RBFSampler with attnkit's weights and phases on the
   first rows, so it checks that the two compute the same map;
2. where attnkit's time goes: the BLAS projection ``X @ W`` alone (which RBFSampler runs first)
   next to attnkit's whole transform, which at f <= 64 projects inside its own kernel and applies
   offset/cos/scale to each block of rows while it is in cache;
3. the other kinds (``sincos``, ``positive``) at D=1024, against ``cos``;
4. the target (>= 2x RBFSampler), met or not.

Run ``python benchmarks/bench_random_features.py --help`` for the options.
"""

import numpy as np
from sklearn.kernel_approximation import RBFSampler

import _harness as harness
from attnkit import RandomFourierFeatures

N_ROWS = 100_000
N_FEATURES = 64
COMPONENTS = (256, 512, 1024, 2048, 4096)
QUICK_ROWS = 10_000
QUICK_COMPONENTS = (256, 1024)
KINDS_D = 1024
CHECK_ROWS = 2000
TARGET_RATIO = 2.0
DTYPES = (np.float32, np.float64)


def _discard(fn, *args):
    """``fn(*args)`` returning None: the harness keeps each callable's first result, and at
    n=100000, D=4096 in float64 one result is 3.3 GB."""

    def call():
        fn(*args)

    return call


def _fitted(X, n_components, kind="cos"):
    ours = RandomFourierFeatures(n_components, gamma=1.0 / N_FEATURES, kind=kind, random_state=0).fit(X)
    theirs = RBFSampler(n_components=n_components, gamma=1.0 / N_FEATURES, random_state=0).fit(X)
    return ours, theirs


def _max_abs_diff(ours, X):
    """attnkit against RBFSampler given attnkit's weights and phases, on the first rows."""
    same = RBFSampler(n_components=ours.n_components, gamma=ours.gamma_).fit(X[:2])
    same.random_weights_, same.random_offset_ = ours.random_weights_, ours.random_offset_
    rows = X[:CHECK_ROWS]
    return float(np.max(np.abs(ours.transform(rows).astype(np.float64) - same.transform(rows))))


def bench_sizes(report, args, X_by_dtype, components):
    """Part 1, with ``--threads`` threads and (unless quick) with one; returns {(dtype name, D): ratio} at
    ``--threads``."""
    n = next(iter(X_by_dtype.values())).shape[0]
    table = report.table(
        f"Sizes: n={n}, f={N_FEATURES}, kind='cos'",
        ["threads", "dtype", "D", "attnkit", "RBFSampler", "attnkit rows/s", "RBFSampler rows/s", "ratio",
         "max abs diff"],
        "Median time of one `transform` call ± interquartile range of the repeats. *ratio* = "
        "RBFSampler time / attnkit time (> 1: attnkit is faster). *max abs diff*: attnkit vs "
        f"RBFSampler given attnkit's weights and phases, first {CHECK_ROWS} rows (float32 output "
        "compared with float64's: RBFSampler computes in the weights' dtype). *threads*: attnkit's and "
        "NumPy's BLAS's (RBFSampler's product).",
    )
    ratios, raw = {}, []
    for threads in harness.thread_counts(args):
        harness.set_threads(threads)
        for dtype, X in X_by_dtype.items():
            for d in components:
                ours, theirs = _fitted(X, d)
                timings = harness.compare(
                    {"attnkit": _discard(ours.transform, X), "RBFSampler": _discard(theirs.transform, X)},
                    repeats=args.repeats,
                )
                a, r = timings["attnkit"], timings["RBFSampler"]
                if threads == args.threads:
                    ratios[dtype, d] = harness.ratio(r, a)
                err = _max_abs_diff(ours, X)
                table.add_row(
                    threads, dtype, d, harness.fmt_time(a), harness.fmt_time(r), harness.fmt_number(n / a.median),
                    harness.fmt_number(n / r.median), harness.fmt_ratio(harness.ratio(r, a)),
                    harness.fmt_number(err, 2),
                )
                raw.append({"threads": threads, "dtype": dtype, "n": n, "f": N_FEATURES, "D": d,
                            "max_abs_diff": err, **{name: t.as_dict() for name, t in timings.items()}})
    harness.set_threads(args.threads)
    report.data["sizes"] = raw
    return ratios


def bench_breakdown(report, args, X_by_dtype, d):
    """Part 2: the BLAS projection alone vs attnkit's whole transform."""
    table = report.table(
        f"Where the time goes: D={d}",
        ["dtype", "BLAS X @ W alone", "attnkit transform", "transform / projection", "rest ns/feature"],
        "*BLAS X @ W alone*: NumPy's matmul, the first step of RBFSampler. *attnkit transform*: the "
        "whole fused transform (at f <= 64 the kernel projects a block of rows in registers and takes "
        "offset, cosine and scale while the block is in L1). *rest ns/feature*: (transform - "
        "projection) per output element (n·D), all threads together: what the cosine costs beyond a "
        "matmul.",
    )
    raw = []
    for dtype, X in X_by_dtype.items():
        ours, _ = _fitted(X, d)
        W = ours.random_weights_
        timings = harness.compare(
            {"projection": _discard(np.matmul, X, W), "transform": _discard(ours.transform, X)},
            repeats=args.repeats,
        )
        p, t = timings["projection"], timings["transform"]
        rest = max(t.median - p.median, 0.0)
        table.add_row(dtype, harness.fmt_time(p), harness.fmt_time(t), harness.fmt_ratio(t.median / p.median),
                      harness.fmt_number(1e9 * rest / (X.shape[0] * d)))
        raw.append({"dtype": dtype, "D": d, **{name: tm.as_dict() for name, tm in timings.items()}})
    report.data["breakdown"] = raw


def bench_kinds(report, args, X_by_dtype, d):
    """Part 3: sincos and positive against cos."""
    table = report.table(
        f"Kinds: D={d}",
        ["dtype", "cos", "sincos", "positive", "sincos / cos", "positive / cos"],
        "Median time of one `transform` call. *sincos* computes D/2 projections and both sin and "
        "cos of each; *positive* centers X, projects and takes exp (plus the row norms).",
    )
    raw = []
    for dtype, X in X_by_dtype.items():
        fitted = {kind: _fitted(X, d, kind)[0] for kind in ("cos", "sincos", "positive")}
        timings = harness.compare(
            {kind: _discard(est.transform, X) for kind, est in fitted.items()},
            repeats=args.repeats,
        )
        c = timings["cos"]
        table.add_row(
            dtype, harness.fmt_time(c), harness.fmt_time(timings["sincos"]),
            harness.fmt_time(timings["positive"]),
            harness.fmt_ratio(timings["sincos"].median / c.median),
            harness.fmt_ratio(timings["positive"].median / c.median),
        )
        raw.append({"dtype": dtype, "D": d, **{name: t.as_dict() for name, t in timings.items()}})
    report.data["kinds"] = raw


def summarise(report, ratios):
    """Part 4: the target, met or not (printed, never asserted)."""
    lines = []
    for dtype in sorted({dt for dt, _ in ratios}):
        values = {d: r for (dt, d), r in ratios.items() if dt == dtype}
        met = sum(r >= TARGET_RATIO for r in values.values())
        lines.append(
            f"- {dtype}: ratio min {min(values.values()):.2f}x, geometric mean "
            f"{harness.geomean(values.values()):.2f}x; >= {TARGET_RATIO:.0f}x at {met}/{len(values)} sizes "
            f"-- {'met' if met == len(values) else '**not met**'}"
        )
    report.text(f"Target: >= {TARGET_RATIO:.0f}x RBFSampler", lines)


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=None,
                        help=f"rows of X (default {N_ROWS}; quick: {QUICK_ROWS})")
    args = harness.parse_args(parser, "random_features", argv)
    rows = args.rows or (QUICK_ROWS if args.quick else N_ROWS)
    components = QUICK_COMPONENTS if args.quick else COMPONENTS

    harness.set_threads(args.threads)
    report = harness.Report(args, "Random Fourier features: attnkit vs scikit-learn's RBFSampler")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((rows, N_FEATURES))
    X_by_dtype = {np.dtype(dt).name: X.astype(dt) for dt in DTYPES}
    ratios = bench_sizes(report, args, X_by_dtype, components)
    bench_breakdown(report, args, X_by_dtype, KINDS_D)
    bench_kinds(report, args, X_by_dtype, KINDS_D)
    summarise(report, ratios)
    report.write()


if __name__ == "__main__":
    main()
