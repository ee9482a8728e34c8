"""
Performer against softmax attention on a task
=============================================

Performer (Choromanski et al., 2021) replaces softmax attention's ``exp(q . k / sqrt(d))`` by an inner
product of positive random features (FAVOR+), so attention runs in linear time. Is the approximation good
enough to learn with? We train the same small transformer classifier twice, with exact softmax attention
and with Performer attention (``attention="performer"``, 128 random features), on sentences whose label
depends on what "not" applies to ("not very good" is negative, "not bad" positive, "very good and not
bad" positive): a bag of words barely beats chance on them (TF-IDF + logistic regression: 0.62, see the
README's evaluation), attention over the words in order solves them. The n-gram bag that
:class:`attnkit.TransformerClassifier` adds by default is switched off (``bag_ngrams=0``), so the encoder
alone decides.

Reproduces: the course's comparison of Performer and softmax attention on a task; got: test accuracy
0.984 (softmax) and 1.000 (Performer) on 250 held-out sentences after 5 epochs on 1,000.
"""

# %%
# The data
# --------
# :func:`attnkit.datasets.make_negation_sentences` writes short reviews whose label depends on where
# "not" stands.
import time

import matplotlib.pyplot as plt
import numpy as np

from attnkit import TransformerClassifier
from attnkit.datasets import make_negation_sentences

texts, labels = make_negation_sentences(1250, random_state=0)
train_texts, train_labels, test_texts, test_labels = texts[:1000], labels[:1000], texts[1000:], labels[1000:]
for text, label in zip(texts[:4], labels[:4]):
    print(f"{label}  {text}")
print(f"{len(train_texts)} training and {len(test_texts)} test sentences; {np.mean(labels):.2f} positive")

# %%
# Two fits, one difference
# ------------------------
# One seed each: the small differences between the two runs are within what another seed could change; that
# both learn the task in the same few epochs is the point.
results = {}
for attention in ("softmax", "performer"):
    clf = TransformerClassifier(d_model=32, n_heads=2, d_ff=64, dropout=0.0, learning_rate=5e-3, batch_size=16,
                                max_iter=5, early_stopping=False, bag_ngrams=0, attention=attention, random_state=0)
    start = time.perf_counter()
    clf.fit(train_texts, train_labels)
    seconds = time.perf_counter() - start
    accuracy = clf.score(test_texts, test_labels)
    results[attention] = {"model": clf, "accuracy": accuracy, "seconds": seconds, "loss": clf.loss_curve_}
    print(f"{attention:>9}: test accuracy {accuracy:.3f}, final training loss {clf.loss_curve_[-1]:.3f}, "
          f"fit {seconds:.1f} s")

# %%
# Both models read the negation: adding "not" flips their prediction, both ways.
probes = ["the plot was not very good", "the plot was very good", "it was not so bad", "it was so bad"]
for attention, result in results.items():
    print(f"{attention:>9}:", dict(zip(probes, result["model"].predict(probes).tolist())))
softmax_predictions, performer_predictions = (results[a]["model"].predict(test_texts) for a in ("softmax", "performer"))
agreement = np.mean(softmax_predictions == performer_predictions)
print(f"the two models agree on {100 * agreement:.1f}% of the test sentences")

# %%
# At these lengths (a dozen tokens) Performer is not faster: its 128 features per head cost more than the
# 12 x 12 attention matrix it avoids; it pays off on long sequences (see the costs example and
# ``benchmarks/results/linear_vs_torch.md``).
#
# Learning curves
# ---------------
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True, width_ratios=[2, 1])
for attention, result in results.items():
    ax0.plot(np.arange(1, len(result["loss"]) + 1), result["loss"], marker="o", label=f"{attention} attention")
ax0.set_xticks(np.arange(1, len(results["softmax"]["loss"]) + 1))
ax0.set_xlabel("epoch")
ax0.set_ylabel("training loss (cross-entropy)")
ax0.set_title("Transformer classifier on negation sentences")
ax0.legend()
names = list(results)
bars = ax1.bar(names, [results[a]["accuracy"] for a in names], color=["tab:blue", "tab:orange"])
ax1.bar_label(bars, fmt="%.3f")
ax1.set_ylim(0.5, 1.05)
ax1.set_ylabel(f"test accuracy ({len(test_texts)} sentences)")
ax1.set_title("held-out accuracy")
plt.show()
