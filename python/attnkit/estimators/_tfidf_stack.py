"""The TF-IDF stack of :class:`~attnkit.estimators.TransformerClassifier`: a logistic regression over the
TF-IDF of each text's 1- and 2-grams of token ids, fitted beside the network on the same training texts, and
the two models' log-probabilities combined by two weights fitted on the validation set (stacking).

The linear model reads every token of a text however long (the encoder reads windows or a head and tail), and
it errs on other texts than the encoder does: on long movie reviews the two together beat either alone
(``benchmarks/results/eval_pretrained_imdb.md``). The weights are fitted on held-out texts, so a weak linear
model gets a small weight rather than pulling a strong encoder down.
"""

import numpy as np
import scipy.optimize
import scipy.sparse
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, StratifiedKFold

from attnkit import ops

__all__ = ["TfidfStack"]

MIN_DF = 2  # an n-gram in a single training text is noise to a linear model (and most of the features)
CS = np.logspace(-1, 3, 9)  # inverse regularisation strengths tried (TF-IDF rows have norm 1)
# 3 folds chose the same C (316) and test accuracy as 5 on IMDB in 42 s instead of 71 s: a fit pays this once.
CV_FOLDS = 3


class TfidfStack:
    """A fitted TF-IDF logistic regression over token-id n-grams and its two stacking weights.

    ``log p(class | text) = log_softmax(net_weight * log p_net + linear_weight * log p_linear)``, where
    ``p_linear`` is a logistic regression on the L2-normalised TF-IDF (sublinear counts, smoothed idf) of the
    text's unigrams and bigrams of ids seen in at least ``MIN_DF`` training texts, its strength chosen by
    cross-validation.

    Parameters
    ----------
    keys : ndarray of int64, shape (n_features,)
        The n-grams kept, sorted: a unigram ``a`` is ``a``, a bigram ``(a, b)`` is ``(a + 1) * base + b``.
    base : int
        One more than the largest id the keys may hold (the vocabulary's size).
    idf : ndarray of float64, shape (n_features,)
    coef : ndarray of float64, shape (1 or n_classes, n_features)
        The logistic regression's (one row for two classes, scikit-learn's layout).
    intercept : ndarray of float64, shape (1 or n_classes,)
    weights : ndarray of float64, shape (2,)
        The network's and the linear model's weights in the combination.
    """

    def __init__(self, keys, base, idf, coef, intercept, weights):
        self.keys, self.base, self.idf = keys, int(base), idf
        self.coef, self.intercept, self.weights = coef, intercept, weights

    # --------------------------------------------------------------------------------- fit
    @classmethod
    def fit(cls, docs, codes, sample_weight, n_classes, base, *, validation, random_state):
        """Fit the linear model on ``docs`` (id lists) and ``codes`` (class codes), then the weights on
        ``validation``: ``(docs, codes, sample_weight, network log-probabilities)``.

        Returns None when the training texts lack a class (the linear model could not score it) or have fewer
        than 2 of one (no cross-validation).
        """
        folds = min(CV_FOLDS, int(np.bincount(codes, minlength=n_classes).min()))
        if np.unique(codes[sample_weight > 0]).size < n_classes or folds < 2:
            return None
        pairs = _ngrams(docs, base)
        keys, idf = _vocabulary(pairs, len(docs))
        features = _tfidf(pairs, keys, idf, len(docs))
        search = GridSearchCV(LogisticRegression(max_iter=2000), {"C": CS}, scoring="neg_log_loss",
                              cv=StratifiedKFold(folds, shuffle=True, random_state=random_state))
        linear = search.fit(features, codes, sample_weight=sample_weight).best_estimator_
        stack = cls(keys, base, idf, linear.coef_.astype(np.float64), linear.intercept_.astype(np.float64),
                    np.array([1.0, 0.0]))
        val_docs, val_codes, val_weights, val_net = validation
        stack.weights = _fit_weights(val_net, stack.linear_log_proba(val_docs), val_codes, val_weights)
        return stack

    # ----------------------------------------------------------------------------- predict
    def linear_log_proba(self, docs):
        """The linear model's log-probabilities of ``docs``, shape (n_docs, n_classes)."""
        scores = _tfidf(_ngrams(docs, self.base), self.keys, self.idf, len(docs)) @ self.coef.T + self.intercept
        if self.coef.shape[0] == 1:  # two classes: the score is the second's log-odds
            scores = np.hstack([np.zeros_like(scores), scores])
        return ops.log_softmax(scores, axis=-1)

    def combine(self, docs, net_log_proba):
        """The stacked log-probabilities, from the network's and ``docs``'."""
        return _combined(self.weights, net_log_proba, self.linear_log_proba(docs))

    # ------------------------------------------------------------------------------- files
    def arrays(self):
        """The arrays a model file keeps (the base is the network's vocabulary size)."""
        return {"keys": self.keys, "idf": self.idf, "coef": self.coef, "intercept": self.intercept,
                "weights": self.weights}

    @classmethod
    def from_arrays(cls, arrays, base):
        return cls(np.asarray(arrays["keys"], dtype=np.int64), base, *(np.asarray(arrays[name], dtype=np.float64)
                   for name in ("idf", "coef", "intercept", "weights")))


def _ngrams(docs, base):
    """(2, n) int64: the document index and key of every unigram and bigram of ``docs``."""
    lengths = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
    ids = np.concatenate([np.asarray(d, dtype=np.int64) for d in docs]) if len(docs) else np.empty(0, np.int64)
    doc_of = np.repeat(np.arange(len(docs)), lengths)
    pair = doc_of[1:] == doc_of[:-1]  # two neighbours of one text
    bigrams = (ids[:-1][pair] + 1) * base + ids[1:][pair]
    return np.vstack([np.concatenate([doc_of, doc_of[1:][pair]]), np.concatenate([ids, bigrams])])


def _vocabulary(pairs, n_docs):
    """The keys of the n-grams in at least MIN_DF texts, sorted, and their smoothed idf."""
    order = np.lexsort(pairs)  # by key, then text
    doc, key = pairs[0][order], pairs[1][order]
    first = np.ones(len(key), dtype=bool)
    first[1:] = (key[1:] != key[:-1]) | (doc[1:] != doc[:-1])
    keys, df = np.unique(key[first], return_counts=True)  # texts per n-gram
    keys, df = keys[df >= MIN_DF], df[df >= MIN_DF]
    return keys, np.log((1 + n_docs) / (1 + df)) + 1


def _tfidf(pairs, keys, idf, n_docs):
    """Rows of L2-normalised sublinear TF-IDF over the kept ``keys`` (CSR, n_docs x len(keys))."""
    column = np.searchsorted(keys, pairs[1])
    known = column < len(keys)
    known[known] = keys[column[known]] == pairs[1][known]
    counts = scipy.sparse.csr_matrix((np.ones(int(known.sum())), (pairs[0][known], column[known])),
                                     shape=(n_docs, len(keys)))
    counts.sum_duplicates()
    counts.data = (1 + np.log(counts.data)) * idf[counts.indices]
    norms = np.sqrt(np.asarray(counts.multiply(counts).sum(axis=1)).ravel())
    return scipy.sparse.diags(1 / np.maximum(norms, np.finfo(np.float64).tiny)) @ counts


def _combined(weights, net_log_proba, linear_log_proba):
    return ops.log_softmax(weights[0] * net_log_proba + weights[1] * linear_log_proba, axis=-1)


def _fit_weights(net_log_proba, linear_log_proba, codes, sample_weight):
    """The non-negative (network, linear) weights of least weighted log-loss on the validation texts."""
    rows = np.arange(len(codes))
    total = float(sample_weight.sum())

    def loss(weights):
        return -float(np.dot(_combined(weights, net_log_proba, linear_log_proba)[rows, codes], sample_weight)) / total

    result = scipy.optimize.minimize(loss, np.array([1.0, 0.0]), method="L-BFGS-B", bounds=[(0, None)] * 2)
    # Fewer validation texts than can tell the two apart leave the network alone, as it would be without the stack.
    return result.x if result.success and loss(result.x) < loss(np.array([1.0, 0.0])) else np.array([1.0, 0.0])
