"""The estimators end to end, as a user calls them: fit and predict throughput, optionally against another
attnkit build in the same run.

Each measurement runs in a fresh process (so one workload's memory and thread pools do not slow the next)
and, with ``--baseline DIR`` (a directory holding another build's ``attnkit`` package, e.g. a copy of an
installed release), the same measurement of that build runs in the round after it: the two are timed
in alternating processes, so a noisy phase of a shared machine hits both alike. The table gives the
median throughput of each over ``--repeats`` processes and their ratio, at ``--threads`` threads and
(unless ``--quick``) at one, so that a kernel's win reads apart from a threading win.

Workloads (synthetic, fixed seeds, the shapes the estimators are made for: many short padded sequences):

- ``classifier fit``: ``TransformerClassifier(max_iter=1, early_stopping=False)``, defaults otherwise
  (d_model 128, 2 layers, the n-gram bag), one epoch over 2,048 texts of 16-128 words from a
  5,000-word vocabulary; tokens/s over the whole ``fit`` call (vocabulary and encoding included);
- ``classifier predict_proba`` / ``transform``: the fitted classifier on the same 2,048 texts;
- ``seq2seq fit``: ``Seq2SeqTransformer(max_iter=1, early_stopping=False)``, defaults otherwise, one
  epoch over 2,000 case-conversion pairs; target tokens/s;
- ``seq2seq predict``: greedy generation for 256 sources with ``min_length = max_length = 24`` (every
  output is 24 tokens whatever the weights, so builds with different random streams do the same work);
- ``random features``: ``RandomFourierFeatures(1024).transform`` of 4,096 rows of 32 and of 256 features.

Run ``python benchmarks/bench_estimators.py --help`` for the options.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import _harness as harness

CHILD = "--child"
INNER_REPEATS = 5  # calls timed inside one process for the predict workloads (median taken)

WORKLOADS = {
    "classifier fit": ("tokens/s", "fit"),
    "classifier predict_proba": ("tokens/s", "predict"),
    "classifier transform": ("tokens/s", "predict"),
    "seq2seq fit": ("target tokens/s", "fit"),
    "seq2seq predict": ("sequences/s", "predict"),
    "random features, 32 inputs": ("rows/s", "predict"),
    "random features, 256 inputs": ("rows/s", "predict"),
}


# ------------------------------------------------------------------------------------ child side


def _texts(n, quick):
    import numpy as np

    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(500 if quick else 5000)]
    p = 1.0 / np.arange(1, len(vocab) + 1)
    p /= p.sum()
    texts, labels = [], []
    for _ in range(n):
        words = rng.choice(len(vocab), size=int(rng.integers(16, 129)), p=p)
        texts.append(" ".join(vocab[w] for w in words))
        labels.append(int(np.sum(words % 7 == 0) > len(words) / 7))
    return texts, np.array(labels)


def _classifier(quick):
    from attnkit import TransformerClassifier

    texts, labels = _texts(256 if quick else 2048, quick)
    clf = TransformerClassifier(max_iter=1, early_stopping=False, random_state=0)
    return clf, texts, labels


def _timed(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_workload(name, quick):
    """Seconds and units (tokens, sequences, rows) of one measurement of ``name``."""
    import numpy as np

    if name.startswith("classifier"):
        clf, texts, labels = _classifier(quick)
        tokens = sum(min(len(t.split()), 128) + 1 for t in texts)
        if name == "classifier fit":
            start = time.perf_counter()
            clf.fit(texts, labels)
            return time.perf_counter() - start, tokens
        clf.fit(texts, labels)
        call = clf.predict_proba if name.endswith("predict_proba") else clf.transform
        call(texts)
        return _timed(lambda: call(texts), INNER_REPEATS), tokens
    if name.startswith("seq2seq"):
        from attnkit import Seq2SeqTransformer
        from attnkit.datasets import make_case_pairs

        sources, targets = make_case_pairs(200 if quick else 2000, random_state=0)
        model = Seq2SeqTransformer(max_iter=1, early_stopping=False, random_state=0)
        if name == "seq2seq fit":
            start = time.perf_counter()
            model.fit(sources, targets)
            return time.perf_counter() - start, sum(len(t) + 1 for t in targets)
        model.fit(sources, targets)
        batch = sources[: 32 if quick else 256]

        def generate():
            return model.predict(batch, max_length=24, min_length=24)

        generate()
        return _timed(generate, INNER_REPEATS), len(batch)
    from attnkit import RandomFourierFeatures

    width = 32 if "32" in name else 256
    X = np.random.default_rng(0).standard_normal((512 if quick else 4096, width))
    rff = RandomFourierFeatures(1024, random_state=0).fit(X)
    rff.transform(X)
    return _timed(lambda: rff.transform(X), INNER_REPEATS), X.shape[0]


def child_main(args):
    if args.baseline is not None:
        # An editable install redirects `import attnkit` before sys.path is searched: drop its finder so
        # the baseline directory wins.
        sys.meta_path[:] = [f for f in sys.meta_path
                            if not (type(f).__module__.startswith("_editable") and "attnkit" in type(f).__module__)]
        sys.path.insert(0, str(args.baseline))
    harness.set_threads(args.threads)
    import attnkit

    seconds, units = run_workload(args.child, args.quick)
    print(json.dumps({"seconds": seconds, "units": units, "attnkit": os.path.dirname(attnkit.__file__)}))


# ----------------------------------------------------------------------------------- parent side


def measure(args, workload, baseline, threads):
    """One measurement of ``workload`` in a fresh process with ``threads`` threads."""
    command = [sys.executable, __file__, CHILD, workload, "--threads", str(threads)]
    if args.quick:
        command.append("--quick")
    if baseline is not None:
        command += ["--baseline", str(baseline)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode:
        raise RuntimeError(f"{workload} ({baseline or 'this tree'}) failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=None,
                        help="directory holding another build's attnkit package, timed in alternation")
    parser.add_argument(CHILD, default=None, help=argparse.SUPPRESS)
    args = harness.parse_args(parser, "estimators", argv)
    if args.child is not None:
        child_main(args)
        return
    report = harness.Report(args, "Estimators end to end: fit and predict throughput")
    builds = {"this tree": None} if args.baseline is None else {"this tree": None, "baseline": args.baseline}
    columns = ["threads", "workload", "unit"] + [f"{b} (median)" for b in builds]
    if args.baseline is not None:
        columns += ["this tree / baseline"]
    table = report.table(
        f"Throughput, median of {args.repeats} processes", columns,
        note=("Each process times one measurement (fit: one call; predict: the median of "
              f"{INNER_REPEATS} calls); builds alternate process by process. *threads*: attnkit's and "
              "NumPy's BLAS's in each process."
              + (f" Baseline: `{args.baseline}`." if args.baseline else "")))
    raw = []
    # The thread count is the outer loop: the children set it, the parent only passes it on.
    for threads in harness.thread_counts(args):
        for workload, (unit, _) in WORKLOADS.items():
            rates = {b: [] for b in builds}
            for _ in range(args.repeats):
                for build, path in builds.items():
                    r = measure(args, workload, path, threads)
                    rates[build].append(r["units"] / r["seconds"])
            medians = {b: statistics.median(v) for b, v in rates.items()}
            raw.append({"threads": threads, "workload": workload, "unit": unit, "rates": rates, "medians": medians})
            cells = [threads, workload, unit] + [f"{medians[b]:,.0f}" for b in builds]
            if args.baseline is not None:
                cells.append(harness.fmt_ratio(medians["this tree"] / medians["baseline"]))
            table.add_row(*cells)
    report.data["rows"] = raw
    report.write()


if __name__ == "__main__":
    main()
