"""Python threads calling attnkit at once: the speed-up that releasing the GIL buys.

attnkit's kernels run without the GIL, so two Python threads (a web server's workers, a thread
pool scoring batches) can each run an op on their own core. With attnkit's own threads set to 1
(``attnkit.set_num_threads(1)``), the speed-up of T Python threads over one thread doing the same
calls in turn can only come from the released GIL: T times on an idle T-core machine, 1x if
the GIL were held. Measured for the estimators' workload (batches of 32 padded sentences, 4 heads
of width 32, causal and padded attention) and for ``TransformerClassifier.predict_proba``, whose
NumPy glue holds the GIL between kernels.

Run ``python benchmarks/bench_concurrency.py --help`` for the options.
"""

from concurrent.futures import ThreadPoolExecutor

import numpy as np

import _harness as harness
import attnkit
from attnkit import TransformerClassifier
from attnkit.datasets import make_negation_sentences

CALLS = 16  # op calls per measurement, split between the threads
SHAPES = ((32, 4, 64, 32), (32, 4, 128, 32))
QUICK_SHAPES = ((8, 4, 64, 32),)


def _serial_and_threaded(fn, threads):
    """Callables doing CALLS calls of fn: one thread in turn, or ``threads`` threads at once."""
    pool = ThreadPoolExecutor(threads)

    def serial():
        for _ in range(CALLS):
            fn()

    def threaded():
        list(pool.map(lambda _: fn(), range(CALLS)))

    return serial, threaded, pool


def _op_calls(rng, b, h, n, d):
    """The ops timed at one shape: padded and causal attention, causal linear attention."""
    q, k, v = (rng.standard_normal((b, h, n, d), dtype=np.float32) for _ in range(3))
    lengths = rng.integers(1, n + 1, size=b)
    return {
        "scaled_dot_product_attention, padded": lambda: attnkit.scaled_dot_product_attention(
            q, k, v, key_lengths=lengths),
        "scaled_dot_product_attention, causal": lambda: attnkit.scaled_dot_product_attention(q, k, v, causal=True),
        "linear_attention, causal": lambda: attnkit.linear_attention(q, k, v, causal=True),
    }


def _measure(table, report, name, fn, args, raw):
    serial, threaded, pool = _serial_and_threaded(fn, args.threads)
    with pool:
        timings = harness.compare({"serial": serial, "threads": threaded}, repeats=args.repeats)
    s, t = timings["serial"], timings["threads"]
    table.add_row(name, harness.fmt_time(s), harness.fmt_time(t), harness.fmt_ratio(s.median / t.median))
    raw.append({"case": name, **{key: value.as_dict() for key, value in timings.items()}})
    return s.median / t.median


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    args = harness.parse_args(parser, "concurrency", argv)
    harness.set_threads(1)  # attnkit and BLAS single-threaded: any speed-up comes from the GIL
    report = harness.Report(args, "Python threads calling attnkit at once")
    table = report.table(
        f"{CALLS} calls, one thread in turn vs {args.threads} Python threads",
        ["call", "1 thread", f"{args.threads} threads", "speed-up"],
        f"attnkit.set_num_threads(1) and BLAS at 1 thread; the speed-up can reach {args.threads}x only "
        "if the call releases the GIL. float32; key_lengths drawn uniformly in [1, N].",
    )
    rng = np.random.default_rng(0)
    raw, ratios = [], []
    for b, h, n, d in QUICK_SHAPES if args.quick else SHAPES:
        for name, call in _op_calls(rng, b, h, n, d).items():
            ratios.append(_measure(table, report, f"{name} B={b} H={h} N={n} d={d}", call, args, raw))
    texts, labels = make_negation_sentences(400 if args.quick else 2000, random_state=0)
    clf = TransformerClassifier(d_model=64, n_heads=4, d_ff=128, max_iter=1, early_stopping=False,
                                random_state=0).fit(texts, labels)
    batch = texts[:256]
    _measure(table, report, "TransformerClassifier.predict_proba, 256 sentences",
             lambda: clf.predict_proba(batch), args, raw)
    report.data["cases"] = raw
    report.text("Summary", [
        f"- ops: speed-up {min(ratios):.2f}x to {max(ratios):.2f}x with {args.threads} Python threads "
        f"(geometric mean {harness.geomean(ratios):.2f}x); 1x would mean the GIL is held.",
    ])
    report.write()


if __name__ == "__main__":
    main()
