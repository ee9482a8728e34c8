"""Exact attention side by side: attnkit vs torch vs the NumPy reference, float32.

Four parts, one run, one table file (``results/attention.md``); the timed parts run at --threads
threads and (unless --quick) at one, so that a kernel's win reads apart from a threading win:

1. sizes: B in --batches, H=8, d=64, N = 128 ... --max-n (powers of two), three cases:
   non-causal, causal, and a key-padding mask (one random length per batch element in
   [N/2, N]: attnkit gets ``key_lengths``, torch the equivalent boolean ``attn_mask`` and the
   reference the same mask);
2. the estimators' workload: batches of many short padded sequences;
3. the peak extra memory of one call at N=16384;
4. the causal / non-causal time ratio at N=4096;
5. the targets, met or not.

Run ``python benchmarks/bench_attention.py --help`` for the options.
"""

import dataclasses
from pathlib import Path

import numpy as np

import _harness as harness
from attnkit import ops, reference

HEADS = 8
HEAD_DIM = 64
MIN_N = 128
# The reference materialises B*H*N*N float64 logits and more temporaries: run it up to 2**25
# logits (256 MiB each; B=1 up to N=2048, B=4 up to N=1024), where one call takes ~1 s.
REFERENCE_MAX_LOGITS = 2**25
MEMORY_N = 16384

# (batch, heads, padded length, head width) of the batches TransformerClassifier and
# Seq2SeqTransformer train on: many short sequences padded to the longest in the batch.
WORKLOAD = [
    (32, 4, 16, 32),
    (64, 4, 32, 32),
    (64, 4, 64, 32),
    (64, 8, 64, 64),
    (32, 8, 128, 64),
    (64, 8, 128, 64),
]

TARGET_SPEEDUP = 1.0  # attnkit / torch, non-causal and causal, N >= TARGET_MIN_N
TARGET_MIN_N = 512
TARGET_MEMORY = 0.10  # extra memory of one call / inputs' size
TARGET_CAUSAL = 1.7  # non-causal time / causal time at N = 4096
CAUSAL_N = 4096


@dataclasses.dataclass
class Problem:
    """One attention call: inputs (B, H, N, d) float32 plus its masking."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    causal: bool = False
    key_lengths: np.ndarray = None

    @classmethod
    def random(cls, rng, batch, heads, n, d, *, causal=False, min_length=None, longest=False):
        """Standard normal inputs.

        With ``min_length``, key lengths are uniform in [min_length, n]; with ``longest`` too,
        the first one is n, as in a batch padded to its longest sequence.
        """
        q, k, v = (rng.standard_normal((batch, heads, n, d), dtype=np.float32) for _ in range(3))
        lengths = None
        if min_length is not None:
            lengths = rng.integers(min_length, n + 1, size=batch)
            if longest:
                lengths[0] = n
        return cls(q, k, v, causal, lengths)

    @property
    def flops(self):
        """4 B H Nq Nk d (two matmuls), half of it when causal; padding is not discounted."""
        *batch, nq, d = self.q.shape
        total = 4 * np.prod(batch) * nq * self.k.shape[-2] * d
        return total / 2 if self.causal else total

    @property
    def input_bytes(self):
        return self.q.nbytes + self.k.nbytes + self.v.nbytes

    def mask(self):
        """Boolean mask equivalent to ``key_lengths`` (B, 1, 1, Nk), or None without padding."""
        if self.key_lengths is None:
            return None
        nk = self.k.shape[-2]
        return (np.arange(nk) < self.key_lengths[:, None])[:, None, None, :]

    def attnkit(self):
        return lambda: ops.scaled_dot_product_attention(
            self.q, self.k, self.v, key_lengths=self.key_lengths, causal=self.causal
        )

    def reference(self):
        mask = self.mask()
        return lambda: reference.scaled_dot_product_attention(
            self.q, self.k, self.v, mask=mask, causal=self.causal
        )

    def torch(self, torch):
        """torch's call: ``is_causal`` alone, or one boolean mask holding padding and causality."""
        if torch is None:
            return None
        q, k, v = (torch.from_numpy(a) for a in (self.q, self.k, self.v))
        mask, is_causal = self.mask(), self.causal
        if mask is not None and self.causal:
            nq, nk = self.q.shape[-2], self.k.shape[-2]
            mask = mask & np.tri(nq, nk, nk - nq, dtype=bool)
            is_causal = False
        if mask is not None:
            mask = torch.from_numpy(np.ascontiguousarray(mask))
        sdpa = torch.nn.functional.scaled_dot_product_attention
        return lambda: sdpa(q, k, v, attn_mask=mask, is_causal=is_causal)


def _gflops(problem, timing):
    return None if timing is None else problem.flops / timing.median / 1e9


def _max_abs_diff(timings):
    """Largest |attnkit - torch| (against the reference where torch is absent)."""
    other = timings.get("torch", timings.get("reference"))
    if other is None:
        return None
    return float(np.max(np.abs(timings["attnkit"].result - np.asarray(other.result))))


def _measure(problem, args, torch, with_reference):
    fns = {
        "attnkit": problem.attnkit(),
        "torch": problem.torch(torch),
        "reference": problem.reference() if with_reference else None,
    }
    timings = harness.compare(fns, repeats=args.repeats)
    return timings, _max_abs_diff(timings)


def _record(timings, err, **fields):
    fields.update({name: t.as_dict() for name, t in timings.items()})
    fields["max_abs_diff"] = err
    return fields


def bench_sizes(report, args, torch):
    """Part 1: the size sweep; returns {(case, batch, n): timings} at ``--threads``."""
    table = report.table(
        "Sizes: float32, H=8, d=64",
        ["threads", "case", "B", "N", "attnkit", "torch", "NumPy ref", "attnkit GFLOP/s", "torch GFLOP/s",
         "vs torch", "vs NumPy", "max abs diff"],
        "Median time of one call ± interquartile range. GFLOP/s counts 4·B·H·N²·d (half when "
        "causal; padded keys are not discounted). *vs torch* = torch time / attnkit time "
        "(> 1: attnkit is faster); *vs NumPy* likewise against `attnkit.reference` (float64, "
        "skipped above 2^25 logits B·H·N², i.e. N > 2048 at B=1). *padded*: key lengths uniform in [N/2, N] per batch "
        "element (attnkit `key_lengths`, torch and NumPy the boolean mask). *max abs diff*: "
        "attnkit against torch. *threads*: attnkit's, torch's and NumPy's BLAS's; the targets "
        "use the first thread count's rows.",
    )
    ns = [1 << p for p in range(MIN_N.bit_length() - 1, args.max_n.bit_length())]
    results, raw = {}, []
    for threads in harness.thread_counts(args):
        harness.set_threads(threads, torch)
        rng = np.random.default_rng(0)  # the same inputs at every thread count
        for case in ("non-causal", "causal", "padded"):
            for batch in args.batches:
                for n in ns:
                    problem = Problem.random(
                        rng, batch, HEADS, n, HEAD_DIM, causal=case == "causal",
                        min_length=n // 2 if case == "padded" else None,
                    )
                    logits = batch * HEADS * n * n
                    timings, err = _measure(problem, args, torch, logits <= REFERENCE_MAX_LOGITS)
                    if threads == args.threads:
                        results[case, batch, n] = timings
                    a, t, r = (timings.get(name) for name in ("attnkit", "torch", "reference"))
                    table.add_row(
                        threads, case, batch, n, harness.fmt_time(a), harness.fmt_time(t),
                        harness.fmt_time(r), harness.fmt_number(_gflops(problem, a)),
                        harness.fmt_number(_gflops(problem, t)),
                        harness.fmt_ratio(harness.ratio(t, a)), harness.fmt_ratio(harness.ratio(r, a)),
                        harness.fmt_number(err, 2),
                    )
                    raw.append(_record(timings, err, threads=threads, case=case, batch=batch, n=n,
                                       flops=problem.flops))
    harness.set_threads(args.threads, torch)
    report.data["sizes"] = raw
    return results


def bench_workload(report, args, torch):
    """Part 2: many short padded sequences, as the estimators train on."""
    table = report.table(
        "Estimator workload: many short padded sequences, float32",
        ["threads", "case", "B", "H", "N", "d", "attnkit", "torch", "NumPy ref", "vs torch", "vs NumPy",
         "max abs diff"],
        "Each batch is padded to its longest sequence (length N); the other lengths are uniform "
        "in [N/4, N]. *padded*: encoder self-attention (attnkit `key_lengths`, torch a boolean "
        "mask); *causal+padded*: decoder self-attention (torch gets one boolean mask holding "
        "both). Columns as above.",
    )
    shapes = WORKLOAD[:2] if args.quick else WORKLOAD
    raw = []
    for threads in harness.thread_counts(args):
        harness.set_threads(threads, torch)
        rng = np.random.default_rng(1)  # the same inputs at every thread count
        for case in ("padded", "causal+padded"):
            for batch, heads, n, d in shapes:
                problem = Problem.random(
                    rng, batch, heads, n, d, causal=case != "padded", min_length=max(1, n // 4),
                    longest=True,
                )
                timings, err = _measure(problem, args, torch, with_reference=True)
                a, t, r = (timings.get(name) for name in ("attnkit", "torch", "reference"))
                table.add_row(
                    threads, case, batch, heads, n, d, harness.fmt_time(a), harness.fmt_time(t),
                    harness.fmt_time(r), harness.fmt_ratio(harness.ratio(t, a)),
                    harness.fmt_ratio(harness.ratio(r, a)), harness.fmt_number(err, 2),
                )
                raw.append(_record(timings, err, threads=threads, case=case, batch=batch, heads=heads,
                                   n=n, d=d))
    harness.set_threads(args.threads, torch)
    report.data["workload"] = raw


def memory_case(library, n, batch=1, heads=HEADS, d=HEAD_DIM):
    """Peak-memory factory (runs in the harness's child process): one non-causal call.

    Warms up with an N=256 call of the same library so that thread stacks and code pages are
    not charged to the measured call.
    """
    rng = np.random.default_rng(2)
    problem = Problem.random(rng, batch, heads, n, d)
    small = Problem.random(rng, batch, heads, 256, d)
    if library == "torch":
        import torch

        torch.set_grad_enabled(False)
        small.torch(torch)()
        return problem.torch(torch), problem.input_bytes
    small.attnkit()()
    return problem.attnkit(), problem.input_bytes


def bench_memory(report, args, torch):
    """Part 3: peak extra memory of one call; returns attnkit's PeakMemory."""
    n = 2048 if args.quick else MEMORY_N
    table = report.table(
        f"Peak memory of one call: non-causal, float32, B=1, H={HEADS}, N={n}, d={HEAD_DIM}",
        ["library", "inputs (q, k, v)", "peak RSS increase", "output", "extra = peak - output",
         "extra / inputs"],
        "Measured in a fresh process per library: resident high-water mark during the call "
        "minus resident memory just before it (method in `benchmarks/_peak_memory.py`). The output "
        "has to exist, so *extra* (workspace, copies, temporaries) is what the target bounds.",
    )
    factory = f"{Path(__file__).resolve()}:memory_case"
    results = {}
    for library in ("attnkit", "torch") if torch is not None else ("attnkit",):
        mem = harness.peak_memory(factory, {"library": library, "n": n}, args.threads)
        results[library] = mem
        table.add_row(
            library, harness.fmt_bytes(mem.input_bytes), harness.fmt_bytes(mem.peak_bytes),
            harness.fmt_bytes(mem.output_bytes), harness.fmt_bytes(mem.extra_bytes),
            f"{100 * mem.extra_fraction:.1f}%",
        )
    report.data["memory"] = {
        "n": n, "method": results["attnkit"].method,
        **{lib: dataclasses.asdict(mem) for lib, mem in results.items()},
    }
    return results["attnkit"]


def bench_causal(report, args, torch):
    """Part 4: non-causal time / causal time, both timed in the same interleaved rounds.

    The size sweep has these timings too, but minutes apart; on a shared machine the load
    changes in between, so the ratio gets its own measurement. Returns N and {batch: attnkit
    ratio} at ``--threads``.
    """
    n = min(CAUSAL_N, args.max_n)
    table = report.table(
        f"Causal speed-up at N={n}: float32, H={HEADS}, d={HEAD_DIM}",
        ["threads", "B", "attnkit non-causal", "attnkit causal", "attnkit speed-up", "torch non-causal",
         "torch causal", "torch speed-up"],
        "Time of a non-causal call / time of a causal call on the same inputs; a causal kernel "
        "that skips the blocks above the diagonal approaches 2x. The target uses the first thread "
        "count's rows.",
    )
    speedups, raw = {}, {"n": n}
    for threads in harness.thread_counts(args):
        harness.set_threads(threads, torch)
        rng = np.random.default_rng(3)  # the same inputs at every thread count
        for batch in args.batches:
            full = Problem.random(rng, batch, HEADS, n, HEAD_DIM)
            half = dataclasses.replace(full, causal=True)
            timings = harness.compare(
                {
                    "attnkit non-causal": full.attnkit(),
                    "attnkit causal": half.attnkit(),
                    "torch non-causal": full.torch(torch),
                    "torch causal": half.torch(torch),
                },
                repeats=args.repeats,
            )
            a_full, a_half, t_full, t_half = (
                timings.get(f"{lib} {case}") for lib in ("attnkit", "torch") for case in ("non-causal", "causal")
            )
            speedup = harness.ratio(a_full, a_half)
            if threads == args.threads:
                speedups[batch] = speedup
            raw[f"{threads}T B={batch}"] = {"threads": threads, "batch": batch, "attnkit speed-up": speedup}
            table.add_row(
                threads, batch, harness.fmt_time(a_full), harness.fmt_time(a_half),
                harness.fmt_ratio(speedup), harness.fmt_time(t_full), harness.fmt_time(t_half),
                harness.fmt_ratio(harness.ratio(t_full, t_half)),
            )
    harness.set_threads(args.threads, torch)
    report.data["causal_speedup"] = raw
    return n, speedups


def summarise(report, results, memory, causal_n, causal):
    """Part 5: the three targets, met or not (printed, never asserted)."""
    def verdict(ok):
        return "met" if ok else "**not met**"

    lines = []
    for case in ("non-causal", "causal"):
        rows = [t for (c, _, n), t in results.items() if c == case and n >= TARGET_MIN_N and "torch" in t]
        speedups = [harness.ratio(t["torch"], t["attnkit"]) for t in rows]
        contended = sum(t["attnkit"].contended for t in rows)
        if speedups:
            lines.append(
                f"- attnkit vs torch, {case}, N >= {TARGET_MIN_N} "
                f"(target >= {TARGET_SPEEDUP:.1f}x): min {min(speedups):.2f}x, "
                f"geometric mean {harness.geomean(speedups):.2f}x, "
                f"{sum(s >= TARGET_SPEEDUP for s in speedups)}/{len(speedups)} shapes "
                f"({contended} timed under contention, †) -- "
                f"{verdict(min(speedups) >= TARGET_SPEEDUP)}"
            )
        else:
            lines.append(f"- attnkit vs torch, {case}: no shape with N >= {TARGET_MIN_N} timed against torch")
    lines.append(
        f"- peak extra memory of one call (N={report.data['memory']['n']}): "
        f"{100 * memory.extra_fraction:.1f}% of the inputs (target < {100 * TARGET_MEMORY:.0f}%) "
        f"-- {verdict(memory.extra_fraction < TARGET_MEMORY)}"
    )
    worst = min(causal.values())
    lines.append(
        f"- causal speed-up at N={causal_n}: {worst:.2f}x at worst over B "
        f"(target >= {TARGET_CAUSAL}x) -- {verdict(worst >= TARGET_CAUSAL)}"
    )
    report.text("Targets", lines)


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--max-n", type=int, default=None, help="largest sequence length (default 8192; quick: 512)"
    )
    parser.add_argument(
        "--batches",
        type=lambda s: [int(b) for b in s.split(",")],
        default=None,
        help="comma-separated batch sizes (default 1,4; quick: 1,2)",
    )
    args = harness.parse_args(parser, "attention", argv)
    if args.max_n is None:
        args.max_n = 512 if args.quick else 8192
    if args.batches is None:
        args.batches = [1, 2] if args.quick else [1, 4]
    if args.max_n < MIN_N:
        parser.error(f"--max-n must be >= {MIN_N}")

    torch = harness.load_torch()
    harness.set_threads(args.threads, torch)
    report = harness.Report(args, "Exact attention: attnkit vs torch vs NumPy", torch)
    results = bench_sizes(report, args, torch)
    bench_workload(report, args, torch)
    memory = bench_memory(report, args, torch)
    causal_n, causal = bench_causal(report, args, torch)
    summarise(report, results, memory, causal_n, causal)
    report.write()


if __name__ == "__main__":
    main()
