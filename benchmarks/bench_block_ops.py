"""The elementwise and per-row ops of a transformer block: exact vs tanh GELU, RMS vs layer normalisation.

What the block options cost: ``activation="gelu"`` (exact, BERT) against the tanh form, and
``norm="rms"`` against LayerNorm, forward and backward, float32 and float64, at a BERT-base feed-forward
width (GELU over (tokens, 3072)) and model width (norms over (tokens, 768)). torch's CPU kernels of the
same ops are the baseline where it is installed (forward only: its backward runs through autograd). At
``--threads`` threads and (unless ``--quick``) at one, so that a kernel's win reads apart from a threading win.

Run ``python benchmarks/bench_block_ops.py --help`` for the options.
"""

import numpy as np

import _harness as harness
from attnkit import ops

TOKENS, QUICK_TOKENS = 2048, 256
D_FF, D_MODEL = 3072, 768


def _gelu_calls(x, dy, torch):
    calls = {
        "tanh forward": lambda: ops.gelu(x),
        "exact forward": lambda: ops.gelu(x, approximate="none"),
        "tanh backward": lambda: ops.gelu_backward(x, dy),
        "exact backward": lambda: ops.gelu_backward(x, dy, approximate="none"),
    }
    if torch is not None:
        tx = torch.from_numpy(x)
        calls["torch exact forward"] = lambda: torch.nn.functional.gelu(tx, approximate="none")
        calls["torch tanh forward"] = lambda: torch.nn.functional.gelu(tx, approximate="tanh")
    return calls


def _norm_calls(x, dy, gamma, beta, torch):
    _, mean, rstd = ops.layer_norm(x, gamma, beta, return_stats=True)
    _, rms_rstd = ops.rms_norm(x, gamma, return_stats=True)
    calls = {
        "layer forward": lambda: ops.layer_norm(x, gamma, beta, return_stats=True),
        "rms forward": lambda: ops.rms_norm(x, gamma, return_stats=True),
        "layer backward": lambda: ops.layer_norm_backward(dy, x, gamma, mean, rstd),
        "rms backward": lambda: ops.rms_norm_backward(dy, x, gamma, rms_rstd),
    }
    if torch is not None:
        tx, tg, tb = (torch.from_numpy(a) for a in (x, gamma, beta))
        calls["torch layer forward"] = lambda: torch.nn.functional.layer_norm(tx, (x.shape[-1],), tg, tb)
        calls["torch rms forward"] = lambda: torch.nn.functional.rms_norm(tx, (x.shape[-1],), tg, eps=1e-6)
    return calls


def _rows(table, timings, pairs, threads, dtype, raw):
    for label, baseline, candidate in pairs:
        base, cand = timings.get(baseline), timings.get(candidate)
        if base is None or cand is None:
            continue
        table.add_row(threads, np.dtype(dtype).name, label, harness.fmt_time(base), harness.fmt_time(cand),
                      harness.fmt_ratio(harness.ratio(base, cand)))
        raw.append({"threads": threads, "dtype": np.dtype(dtype).name, "case": label, "baseline": base.as_dict(),
                    "candidate": cand.as_dict()})


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    args = harness.parse_args(parser, "block_ops", argv)
    torch = harness.load_torch()
    harness.set_threads(args.threads, torch)
    report = harness.Report(args, "Block ops: exact vs tanh GELU, RMS vs layer normalisation", torch)
    tokens = QUICK_TOKENS if args.quick else TOKENS
    columns = ["threads", "dtype", "candidate vs baseline", "baseline", "candidate", "baseline / candidate"]
    note = ("The baseline and the candidate of a row are timed in the same interleaved rounds; the last column "
            "is the candidate's speed-up (< 1: the candidate is slower). *threads*: attnkit's and torch's.")
    gelu_table = report.table(f"GELU over ({tokens}, {D_FF})", columns, note)
    norm_table = report.table(f"Normalisation over ({tokens}, {D_MODEL}), with gamma (and beta for LayerNorm)",
                              columns, note)
    raw = {"gelu": [], "norm": []}
    for threads in harness.thread_counts(args):
        harness.set_threads(threads, torch)
        rng = np.random.default_rng(0)  # the same inputs at every thread count
        for dtype in (np.float32, np.float64):
            x = (2 * rng.standard_normal((tokens, D_FF))).astype(dtype)
            dy = rng.standard_normal(x.shape).astype(dtype)
            timings = harness.compare(_gelu_calls(x, dy, torch), repeats=args.repeats)
            _rows(gelu_table, timings, [("exact vs tanh, forward", "tanh forward", "exact forward"),
                                        ("exact vs tanh, backward", "tanh backward", "exact backward"),
                                        ("attnkit vs torch, exact forward", "torch exact forward", "exact forward"),
                                        ("attnkit vs torch, tanh forward", "torch tanh forward", "tanh forward")],
                  threads, dtype, raw["gelu"])
            x = rng.standard_normal((tokens, D_MODEL)).astype(dtype)
            dy = rng.standard_normal(x.shape).astype(dtype)
            gamma, beta = rng.standard_normal(D_MODEL).astype(dtype), rng.standard_normal(D_MODEL).astype(dtype)
            timings = harness.compare(_norm_calls(x, dy, gamma, beta, torch), repeats=args.repeats)
            _rows(norm_table, timings, [("rms vs layer, forward", "layer forward", "rms forward"),
                                        ("rms vs layer, backward", "layer backward", "rms backward"),
                                        ("attnkit vs torch, rms forward", "torch rms forward", "rms forward"),
                                        ("attnkit vs torch, layer forward", "torch layer forward", "layer forward")],
                  threads, dtype, raw["norm"])
    harness.set_threads(args.threads, torch)
    report.data = raw
    report.write()


if __name__ == "__main__":
    main()
