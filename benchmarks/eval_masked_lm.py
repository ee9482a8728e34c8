"""MaskedLanguageModel on SST-2: pretrain on the unlabelled training text, fine-tune on 500 and 2,000 labels,
against no pretraining; masked-token accuracy and fill_mask examples; BERT's and GPT's attention side by side.

1. ``MaskedLanguageModel(random_state=0)`` (the classifier's encoder shape: 2 layers, d_model 128) fitted on the
   text of all 67,349 SST-2 training phrases (no labels): fit time, masked-token accuracy on the 872 dev
   sentences, and ``fill_mask`` on a few of them.
2. ``TransformerClassifier()`` from scratch against ``TransformerClassifier(pretrained=mlm)`` (everything else at
   its defaults: the same "auto" epochs, n-gram bag and pooling), each on 500 and 2,000 labelled training phrases
   drawn with seeds 0, 1, 2; accuracy on the 1,821 labelled test sentences (standard error of one accuracy
   about 0.011).
3. A figure (``results/masked_vs_causal_attention.png``): the masked model's attention on one dev sentence beside
   that of a word-level ``CausalLanguageModel`` fitted on the same text: bidirectional against lower-triangular.

``--quick``: a smoke test on 3,000 phrases.
"""

import time
from pathlib import Path

import numpy as np

import _harness as harness
from attnkit import CausalLanguageModel, MaskedLanguageModel, TransformerClassifier
from eval_sentiment import load_sst2

REPO = harness.RESULTS_DIR.parent.parent
LABELS = (500, 2000)
SEEDS = (0, 1, 2)
FILL_EXAMPLES = 5
FIGURE = harness.RESULTS_DIR / "masked_vs_causal_attention.png"


def pretraining_section(report, train_texts, dev_texts, quick):
    start = time.perf_counter()
    mlm = MaskedLanguageModel(random_state=0, max_iter=2 if quick else 10).fit(train_texts)
    seconds = time.perf_counter() - start
    accuracy = mlm.score(dev_texts)
    table = report.table("Masked-language-model pretraining on SST-2's training text",
                         ["corpus", "epochs", "fit", "masked-token accuracy (dev)", "final training loss"],
                         note="BERT's corruption: 15% of each text's tokens chosen; 80% masked, 10% random, 10% kept; "
                              "the accuracy is on the chosen tokens of the 872 dev sentences (a fixed draw).")
    table.add_row(f"{len(train_texts):,} phrases", str(mlm.n_iter_), f"{seconds:.0f} s", f"{accuracy:.3f}",
                  f"{mlm.loss_curve_[-1]:.3f}")
    rng = np.random.default_rng(0)
    lines = []
    for text in rng.choice([t for t in dev_texts if 6 <= len(t.split()) <= 14], FILL_EXAMPLES, replace=False):
        words = text.split()
        hidden = int(rng.integers(len(words)))
        masked = " ".join(words[:hidden] + ["[MASK]"] + words[hidden + 1 :])
        fillers = mlm.fill_mask([masked], top_k=5)[0][0]
        lines.append(f"- `{masked}` (was *{words[hidden]}*): "
                     + ", ".join(f"{token} {p:.2f}" for token, p in fillers))
    report.text("fill_mask on dev sentences", lines)
    return mlm, {"seconds": seconds, "dev_accuracy": accuracy}


def fine_tuning_section(report, mlm, train, test, quick):
    texts, labels = train
    table = report.table("SST-2 with few labels: no pretraining against the masked-language model's encoder",
                         ["labels", "start", "seed 0", "seed 1", "seed 2", "mean", "spread"],
                         note="Accuracy on the 1,821 SST-2 test sentences (one accuracy's standard error ~0.011). "
                              "Labelled phrases drawn from the training set with each seed; everything else at the "
                              "defaults.")
    results = {}
    for n in LABELS:
        for name in ("from scratch", "MaskedLanguageModel"):
            scores = []
            for seed in SEEDS[:1] if quick else SEEDS:
                pick = np.random.default_rng(seed).choice(len(texts), n, replace=False)
                clf = TransformerClassifier(random_state=seed, pretrained=mlm if name != "from scratch" else None)
                clf.fit([texts[i] for i in pick], labels[pick])
                scores.append(clf.score(*test))
            results[(n, name)] = scores
            cells = [f"{s:.3f}" for s in scores] + ["–"] * (len(SEEDS) - len(scores))
            table.add_row(f"{n:,}", name, *cells, f"{np.mean(scores):.3f}", f"{np.ptp(scores):.3f}")
    return {f"{n} {name}": scores for (n, name), scores in results.items()}


def figure_section(report, mlm, train_texts, sentence, quick):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        report.text("Figure", ["skipped: matplotlib is not installed (pip install 'attnkit[plot]')"])
        return None
    lm = CausalLanguageModel(tokenizer="word", lowercase=True, d_model=128, n_layers=2, context_length=64,
                             max_iter=60 if quick else 600, eval_interval=200, random_state=0)
    lm.fit(train_texts)
    masked, causal = mlm.attention_maps([sentence])[0], lm.attention_maps([sentence])[0]
    fig, axes = plt.subplots(1, 2, figsize=(11, 5.2))
    for ax, maps, title in ((axes[0], masked, "MaskedLanguageModel (BERT): bidirectional"),
                            (axes[1], causal, "CausalLanguageModel (GPT): lower-triangular")):
        weights = maps["layers"][0].mean(axis=0)
        ax.imshow(weights, cmap="viridis", vmin=0, vmax=max(weights.max(), 1e-9))
        ax.set_xticks(range(len(maps["tokens"])), maps["tokens"], rotation=90)
        ax.set_yticks(range(len(maps["tokens"])), maps["tokens"])
        ax.set_title(f"{title}\nlayer 1, mean over heads", fontsize=10)
        ax.set_xlabel("key (attended to)")
        ax.set_ylabel("query")
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=110)
    plt.close(fig)
    report.text("BERT's and GPT's attention on one sentence",
                [f"![attention]({FIGURE.name})", "",
                 f"`{sentence}`: the masked model's first layer (trained {mlm.n_iter_} epochs on the text) and a "
                 f"word-level causal model's ({lm.n_iter_ * lm.eval_interval} updates on the same text; validation "
                 f"loss {lm.validation_loss_curve_[-1]:.2f} nats per word), head-averaged."])
    return str(FIGURE)


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data",
                        help="folder of the data sets (default: ../shared/data beside the repository)")
    args = harness.parse_args(parser, "eval_masked_lm", argv)
    harness.set_threads(args.threads)
    report = harness.Report(args, "MaskedLanguageModel: pretraining on SST-2's text, fine-tuning on few labels")
    if not (args.data / "sst2").exists():
        report.text("skipped", [f"{args.data / 'sst2'} not found (pass --data)"])
        report.write()
        return
    sst2 = load_sst2(args.data)
    train_texts, train_labels = sst2["train"]
    train_texts, train_labels = list(train_texts), np.asarray(train_labels)
    if args.quick:
        train_texts, train_labels = train_texts[:3000], train_labels[:3000]
    dev_texts = list(sst2["dev"][0])
    test = (list(sst2["test"][0]), np.asarray(sst2["test"][1]))
    start = time.perf_counter()
    mlm, report.data["pretraining"] = pretraining_section(report, train_texts, dev_texts, args.quick)
    report.data["fine_tuning"] = fine_tuning_section(report, mlm, (train_texts, train_labels), test, args.quick)
    sentence = "the film is not as funny as it thinks it is ."
    report.data["figure"] = figure_section(report, mlm, train_texts, sentence, args.quick)
    report.text("Run", [f"Whole run: {(time.perf_counter() - start) / 60:.1f} min."])
    report.write()


if __name__ == "__main__":
    main()
