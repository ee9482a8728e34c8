"""TransformerClassifier as a Pipeline step: LogisticRegression on each choice of ``features``, against the
classifier itself, on rt-polarity.

The classifier is fitted with its defaults (``random_state=seed``) on 3,000 rt-polarity sentences; then a
``LogisticRegression`` is fitted on its ``transform`` of the same sentences, as ``make_pipeline(clf, LR)`` does,
for ``features="scores"`` (the default), ``"pooled"`` and ``"pooled+scores"``, and all are scored on the other
7,662 sentences. Writes ``results/stacking.md``: mean test accuracy over ``--seeds``, min-max spread and the test
set's standard error. The data directory is ``--data`` (default ``$ATTNKIT_DATA``, else ``../shared/data``
beside the repository); without rt-polarity there, the script says so and stops.
"""

import copy
import math
import statistics
import sys
from pathlib import Path

from sklearn.linear_model import LogisticRegression

import _harness as harness
from attnkit import TransformerClassifier
from eval_pretrained import DEFAULT_DATA, QUICK_TEST, QUICK_TRAIN, RT_TRAIN, load_rt

FEATURES = ("scores", "pooled", "pooled+scores")


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder holding rt_polarity/")
    parser.add_argument("--seeds", type=int, default=3, help="classifier seeds (default 3)")
    args = harness.parse_args(parser, "stacking", argv)
    if not (args.data / "rt_polarity").is_dir():
        print(f"{args.data / 'rt_polarity'} is missing (pass --data): nothing to evaluate")
        return 0
    X, y = load_rt(args.data)
    n_train = QUICK_TRAIN if args.quick else RT_TRAIN
    X_train, y_train = X[:n_train], y[:n_train]
    X_test, y_test = X[RT_TRAIN:], y[RT_TRAIN:]
    if args.quick:
        X_test, y_test = X_test[:QUICK_TEST], y_test[:QUICK_TEST]
    scores = {name: [] for name in ("classifier", *FEATURES)}
    for seed in range(args.seeds):
        clf = TransformerClassifier(random_state=seed, n_jobs=args.threads).fit(X_train, y_train)
        scores["classifier"].append(clf.score(X_test, y_test))
        for features in FEATURES:
            step = copy.deepcopy(clf).set_params(features=features)
            head = LogisticRegression(max_iter=2000).fit(step.transform(X_train), y_train)
            scores[features].append(head.score(step.transform(X_test), y_test))
        print(f"seed {seed}: " + ", ".join(f"{k} {v[-1]:.4f}" for k, v in scores.items()), flush=True)
    report = harness.Report(args, "TransformerClassifier's transform under LogisticRegression (rt-polarity)")
    table = report.table(f"rt-polarity: {len(y_train):,} training sentences, {len(y_test):,} test",
                         ["model", "seeds", "test accuracy (mean)", "spread", "vs the classifier", "test SE"],
                         note="LogisticRegression fitted on the classifier's transform of its own training "
                              "sentences, as make_pipeline(TransformerClassifier(features=...), "
                              "LogisticRegression()) does.")
    own = statistics.mean(scores["classifier"])
    for name, values in scores.items():
        mean = statistics.mean(values)
        label = "TransformerClassifier itself" if name == "classifier" else f'+ LR on features="{name}"'
        table.add_row(label, len(values), f"{mean:.4f}", f"{min(values):.4f}-{max(values):.4f}",
                      "" if name == "classifier" else f"{mean - own:+.4f}",
                      f"{math.sqrt(mean * (1 - mean) / len(y_test)):.4f}")
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
