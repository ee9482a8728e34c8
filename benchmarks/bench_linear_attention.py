"""Linear attention vs exact softmax attention, float32: the crossover N, and torch's naive linear attention.

Three parts, one run, one table file (``results/linear_attention.md``):

1. sizes: B=1, H=8, d=dv=64, N = 256 ... --max-n (powers of two), non-causal and causal. Exact softmax
   attention (``attnkit.scaled_dot_product_attention``, tiled) next to ``attnkit.linear_attention`` with
   three feature maps: elu(x)+1; random Fourier features of the softmax kernel (128 frequencies, so 256
   features); FAVOR+ (256 orthogonal positive features). Beside them, torch's naive linear attention
   with the elu+1 map, written the way naive implementations are: an einsum of phi(K)^T V when
   non-causal, ``torch.cumsum`` of the outer products phi(k_j) v_j^T when causal. Exact attention is
   skipped once its predicted time per call (the previous N's time times 4) passes 20 s, and the
   causal torch baseline once its two N x d x dv intermediates pass 4 GiB. At --threads threads and
   (unless --quick) at one, so that a kernel's win reads apart from a threading win;
2. the crossover N per feature map and case: from which N on linear attention is faster than exact
   (from the --threads rows);
3. causal drift: error of the float32 result against float64 at large N, attnkit vs the torch baseline.

Run ``python benchmarks/bench_linear_attention.py --help`` for the options.
"""

import math

import numpy as np

import _harness as harness
import attnkit
from attnkit.feature_maps import PositiveRandomFeatureMap, RandomFourierFeatureMap

HEADS = 8
HEAD_DIM = 64
MIN_N = 256
RFF_FREQUENCIES = 128
FAVOR_FEATURES = 256
EXACT_MAX_SECONDS = 20.0
TORCH_MAX_BYTES = 4 * 2**30
EPS = 1e-6  # attnkit's default denominator guard; the torch baseline adds it to the denominator
DRIFT_NS = (4096, 16384, 65536)
DRIFT_TAIL = 1024  # rows at the end of the sequence, where a float32 running sum has drifted most

MAPS = ("elu", "RFF", "FAVOR+")
CASES = ("non-causal", "causal")


def feature_maps():
    """The three maps, built once so that the random ones draw their weights once (seed 0)."""
    return {
        "elu": "elu",
        "RFF": RandomFourierFeatureMap(RFF_FREQUENCIES, random_state=0, softmax_kernel=True),
        "FAVOR+": PositiveRandomFeatureMap(FAVOR_FEATURES, random_state=0, orthogonal=True),
    }


def torch_naive_linear_attention(torch, q, k, v, causal, eps=EPS):
    """elu+1 linear attention as naive implementations write it; causal holds N x d x dv in memory."""
    elu = torch.nn.functional.elu
    phi_q, phi_k = elu(q) + 1, elu(k) + 1
    if causal:
        s = torch.cumsum(torch.einsum("bhnd,bhne->bhnde", phi_k, v), dim=2)
        z = torch.cumsum(phi_k, dim=2)
        num = torch.einsum("bhnd,bhnde->bhne", phi_q, s)
    else:
        s = torch.einsum("bhnd,bhne->bhde", phi_k, v)
        z = phi_k.sum(dim=2, keepdim=True)
        num = torch.einsum("bhnd,bhde->bhne", phi_q, s)
    return num / ((phi_q * z).sum(dim=-1, keepdim=True) + eps)


def torch_naive_bytes(n, causal, itemsize=4):
    """Size of the causal baseline's outer products plus their cumsum (0 when non-causal)."""
    return 2 * HEADS * n * HEAD_DIM * HEAD_DIM * itemsize if causal else 0


def _ns(max_n):
    return [1 << p for p in range(MIN_N.bit_length() - 1, max_n.bit_length())]


def _max_abs_diff(a, b):
    return None if a is None or b is None else float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


def _calls(q, k, v, causal, maps, with_exact, torch):
    """The callables timed side by side on one input (None: skipped)."""
    fns = {"exact": (lambda: attnkit.scaled_dot_product_attention(q, k, v, causal=causal)) if with_exact else None}
    for name, fm in maps.items():
        fns[name] = lambda fm=fm: attnkit.linear_attention(q, k, v, feature_map=fm, causal=causal)
    if torch is not None:
        tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
        fns["torch"] = lambda: torch_naive_linear_attention(torch, tq, tk, tv, causal)
    return fns


def bench_sizes(report, args, torch):
    """Part 1: the size sweep; returns {(case, n): timings} at ``--threads`` (a missing key = skipped)."""
    table = report.table(
        f"Time per call: float32, B=1, H={HEADS}, d=dv={HEAD_DIM}",
        ["threads", "case", "N", "exact softmax", "elu", "RFF", "FAVOR+", "torch naive (elu)",
         "elu vs exact", "RFF vs exact", "FAVOR+ vs exact", "elu vs torch", "max abs diff"],
        "Median time of one call ± interquartile range. *exact softmax*: "
        "`attnkit.scaled_dot_product_attention`. *elu*, *RFF*, *FAVOR+*: `attnkit.linear_attention` "
        f"with elu(x)+1, `RandomFourierFeatureMap({RFF_FREQUENCIES}, softmax_kernel=True)` "
        f"({2 * RFF_FREQUENCIES} features) and `PositiveRandomFeatureMap({FAVOR_FEATURES}, "
        "orthogonal=True)`; the random maps' weights are drawn once, outside the timing. "
        "*torch naive (elu)*: the elu+1 map in torch, non-causal by an einsum of phi(K)^T V, causal "
        "by `torch.cumsum` of the outer products phi(k_j) v_j^T (B·H·N·d·dv floats, twice). "
        "*X vs exact* = exact time / linear time, *elu vs torch* = torch time / attnkit elu time "
        "(> 1: the second is faster). *skipped*: exact attention whose predicted time "
        f"(4x the previous N's) passes {EXACT_MAX_SECONDS:.0f} s per call, or a causal torch baseline "
        f"whose intermediates pass {harness.fmt_bytes(TORCH_MAX_BYTES)}. *max abs diff*: attnkit elu "
        "against the torch baseline. *threads*: attnkit's, torch's and NumPy's BLAS's; the crossover "
        "and the comparison with torch below use the first thread count's rows.",
    )
    maps = feature_maps()
    results, raw = {}, []
    for threads in harness.thread_counts(args):
        harness.set_threads(threads, torch)
        rng = np.random.default_rng(0)  # the same inputs at every thread count
        for case in CASES:
            causal = case == "causal"
            # The skip rule predicts from this thread count's own times: one thread is slower.
            exact_seconds, exact_n = None, None
            for n in _ns(args.max_n):
                q, k, v = (rng.standard_normal((1, HEADS, n, HEAD_DIM), dtype=np.float32) for _ in range(3))
                predicted = None if exact_seconds is None else exact_seconds * (n / exact_n) ** 2
                run_exact = predicted is None or predicted <= EXACT_MAX_SECONDS
                run_torch = torch is not None and torch_naive_bytes(n, causal) <= TORCH_MAX_BYTES
                fns = _calls(q, k, v, causal, maps, run_exact, torch if run_torch else None)
                timings = harness.compare(fns, repeats=args.repeats)
                if run_exact:
                    exact_seconds, exact_n = timings["exact"].median, n
                if threads == args.threads:
                    results[case, n] = timings
                exact, torch_t = timings.get("exact"), timings.get("torch")
                err = _max_abs_diff(timings["elu"].result, torch_t and torch_t.result)
                exact_cell = harness.fmt_time(exact) if run_exact else f"skipped (~{predicted:.0f} s predicted)"
                torch_cell = harness.fmt_time(torch_t) if torch_t is not None else (
                    f"skipped ({harness.fmt_bytes(torch_naive_bytes(n, causal))})" if torch is not None else "–")
                table.add_row(
                    threads, case, n, exact_cell, *(harness.fmt_time(timings[m]) for m in MAPS), torch_cell,
                    *(harness.fmt_ratio(harness.ratio(exact, timings[m])) for m in MAPS),
                    harness.fmt_ratio(harness.ratio(torch_t, timings["elu"])), harness.fmt_number(err, 2),
                )
                raw.append({"threads": threads, "case": case, "n": n,
                            "exact_predicted_seconds": None if run_exact else predicted,
                            "max_abs_diff_elu_torch": err, **{name: t.as_dict() for name, t in timings.items()}})
    harness.set_threads(args.threads, torch)
    report.data["sizes"] = raw
    return results


def crossover(results, case, name):
    """(first grid N from which linear stays faster, log-log interpolated N, last N with both timed).

    The interpolated N is where the straight line through log(exact / linear) at the two grid points
    around the sign change crosses 0. None entries where there is no crossover in the grid.
    """
    points = [(n, harness.ratio(t["exact"], t[name])) for (c, n), t in sorted(results.items())
              if c == case and "exact" in t]
    if not points:
        return None, None, None
    last = points[-1][0]
    first = next((i for i in range(len(points)) if all(r >= 1 for _, r in points[i:])), None)
    if first is None:
        return None, None, last
    if first == 0:
        return points[0][0], None, last
    (n0, r0), (n1, r1) = points[first - 1], points[first]
    t = -math.log(r0) / (math.log(r1) - math.log(r0))
    return n1, math.exp(math.log(n0) + t * (math.log(n1) - math.log(n0))), last


def summarise_crossover(report, results):
    """Part 2: from which N each map beats exact softmax attention."""
    table = report.table(
        "Crossover: from which N linear attention is faster than exact softmax attention",
        ["feature map", "case", "faster from N =", "interpolated crossover N", "speed-up at largest timed N"],
        "*faster from N =*: the smallest N of the grid from which linear attention is faster at every "
        "larger N timed (≤ the first N when it always was). *interpolated*: where log(exact / linear) "
        "interpolated linearly in log N between the grid points around the sign change crosses 0. "
        "The last column is exact time / linear time at the largest N at which exact attention ran. "
        "From the first thread count's rows of the table above.",
    )
    raw = []
    for name in MAPS:
        for case in CASES:
            first, interpolated, last = crossover(results, case, name)
            speedup = None if last is None else harness.ratio(results[case, last]["exact"], results[case, last][name])
            if first is None:
                first_cell = "–" if last is None else f"not within N ≤ {last}"
            elif interpolated is None:
                first_cell = f"≤ {first}"
            else:
                first_cell = str(first)
            table.add_row(name, case, first_cell, "–" if interpolated is None else f"~{interpolated:.0f}",
                          "–" if speedup is None else f"{harness.fmt_ratio(speedup)} (N={last})")
            raw.append({"map": name, "case": case, "first_n": first, "interpolated_n": interpolated,
                        "largest_timed_n": last, "speedup_at_largest": speedup})
    report.data["crossover"] = raw


def summarise_torch(report, results):
    """attnkit's elu linear attention against torch's naive one, per case."""
    lines = ["torch naive time / attnkit time, elu+1 map, over the N where both ran (> 1: attnkit is faster), "
             "at the first thread count of the table above.",
             "", "| case | N | min | geometric mean | max |", "| --- | --- | --- | --- | --- |"]
    raw = {}
    for case in CASES:
        pairs = [(n, harness.ratio(t["torch"], t["elu"])) for (c, n), t in sorted(results.items())
                 if c == case and "torch" in t]
        if not pairs:
            continue
        speedups = [r for _, r in pairs]
        lines.append(f"| {case} | {pairs[0][0]}..{pairs[-1][0]} | {harness.fmt_ratio(min(speedups))} | "
                     f"{harness.fmt_ratio(harness.geomean(speedups))} | {harness.fmt_ratio(max(speedups))} |")
        raw[case] = dict(pairs)
    if raw:
        report.text("attnkit vs torch's naive linear attention", lines)
    report.data["vs_torch"] = raw


def _relative_errors(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    tail = slice(-DRIFT_TAIL, None)

    def rel(a, b):
        return float(np.linalg.norm(a - b) / np.linalg.norm(b))

    return rel(out, ref), rel(out[..., tail, :], ref[..., tail, :])


def bench_drift(report, args, torch):
    """Part 3: causal elu linear attention in float32 against float64, at large N."""
    table = report.table(
        f"Causal drift: float32 against float64, elu map, B=1, H={HEADS}, d=dv={HEAD_DIM}",
        ["N", "library", "relative error, all rows", f"relative error, last {DRIFT_TAIL} rows"],
        "Relative Frobenius error ‖out32 − out64‖ / ‖out64‖ of the causal output, inputs N(0, 1). The "
        "float64 result is attnkit's causal op on the float64 inputs (the first row checks it against "
        "torch's naive float64 version, without its eps). A running sum kept in float32 loses digits as N grows; the "
        "last rows show it most.",
    )
    rng = np.random.default_rng(3)
    ns = [1024] if args.quick else DRIFT_NS
    raw = []
    for n in ns:
        q, k, v = (rng.standard_normal((1, HEADS, n, HEAD_DIM)) for _ in range(3))
        ref = attnkit.linear_attention(q, k, v, causal=True)
        if torch is not None and n == ns[0]:
            torch64 = torch_naive_linear_attention(torch, *(torch.from_numpy(a) for a in (q, k, v)), True, eps=0)
            errs = _relative_errors(ref, torch64)
            table.add_row(n, "attnkit float64 vs torch naive float64", *(f"{e:.1e}" for e in errs))
            raw.append({"n": n, "library": "attnkit64-vs-torch64", "errors": errs})
        q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
        errs = _relative_errors(attnkit.linear_attention(q32, k32, v32, causal=True), ref)
        table.add_row(n, "attnkit", *(f"{e:.1e}" for e in errs))
        raw.append({"n": n, "library": "attnkit", "errors": errs})
        if torch is not None and torch_naive_bytes(n, True) <= TORCH_MAX_BYTES:
            out = torch_naive_linear_attention(torch, *(torch.from_numpy(a) for a in (q32, k32, v32)), True)
            errs = _relative_errors(out, ref)
            table.add_row(n, "torch naive", *(f"{e:.1e}" for e in errs))
            raw.append({"n": n, "library": "torch", "errors": errs})
    report.data["drift"] = raw


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--max-n", type=int, default=None, help="largest sequence length (default 65536; quick: 1024)"
    )
    args = harness.parse_args(parser, "linear_attention", argv)
    if args.max_n is None:
        args.max_n = 1024 if args.quick else 65536
    if args.max_n < MIN_N:
        parser.error(f"--max-n must be >= {MIN_N}")

    torch = harness.load_torch()
    harness.set_threads(args.threads, torch)
    report = harness.Report(args, "Linear attention: attnkit vs exact softmax attention vs torch", torch)
    results = bench_sizes(report, args, torch)
    summarise_crossover(report, results)
    summarise_torch(report, results)
    bench_drift(report, args, torch)
    report.write()


if __name__ == "__main__":
    main()
