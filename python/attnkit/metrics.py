"""Scores of generated text against references: BLEU, chrF, ROUGE-L, exact match, word error rate and edit
distance, and scikit-learn scorers of them for model selection.

:func:`bleu` and :func:`chrf` compute corpus-level scores the way sacreBLEU does with its defaults
(the de-facto standard for reporting them, so attnkit's numbers can be compared with published
ones) without depending on it; :func:`rouge_l` likewise follows Google's rouge-score package, the
usual reference for summaries. Every function takes the references first and the hypotheses second,
like scikit-learn's ``metric(y_true, y_pred)`` (sacreBLEU's own functions take them the other way
round).

scikit-learn names its scorers by strings it alone can register, so attnkit's are objects, to pass as
``scoring``: :data:`bleu_scorer`, :data:`chrf_scorer`, :data:`rouge_l_scorer` and :data:`exact_match_scorer`
(or :func:`get_scorer` by name). Each scores an estimator's greedy :meth:`predict` on ``X`` against ``y``,
and refuses anything but texts (a model fitted on token ids has its own ``score``).

Examples
--------
>>> from sklearn.model_selection import GridSearchCV
>>> from attnkit import Seq2SeqTransformer
>>> from attnkit.metrics import bleu_scorer, chrf_scorer
>>> search = GridSearchCV(Seq2SeqTransformer(max_iter=2), {"d_model": [16, 32]},
...                       scoring={"bleu": bleu_scorer, "chrf": chrf_scorer}, refit="bleu")
"""

import math
import re
from collections import Counter

import numpy as np
from sklearn.metrics import make_scorer

__all__ = ["bleu", "bleu_scorer", "chrf", "chrf_scorer", "edit_distance", "exact_match", "exact_match_scorer",
           "get_scorer", "rouge_l", "rouge_l_scorer", "word_error_rate"]

TOKENIZERS = ("13a", "none")

# mteval-v13a's tokenizer as sacreBLEU runs it: every ASCII punctuation mark except ' - . , is split
# off; a period or comma is split off unless it sits between digits; a dash after a digit is.
_13A_RULES = (
    (re.compile(r"""([!"#$%&()*+/:;<=>?@\[\\\]^_`{|}~ ])"""), r" \1 "),
    (re.compile(r"([^0-9])([.,])"), r"\1 \2 "),
    (re.compile(r"([.,])([^0-9])"), r" \1 \2"),
    (re.compile(r"([0-9])(-)"), r"\1 \2 "),
)


def _tokenize_13a(line):
    line = line.replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    if "&" in line:
        for entity, char in (("&quot;", '"'), ("&amp;", "&"), ("&lt;", "<"), ("&gt;", ">")):
            line = line.replace(entity, char)
    line = f" {line} "
    for pattern, replacement in _13A_RULES:
        line = pattern.sub(replacement, line)
    return line.split()


def _pairs(references, hypotheses):
    """``[(list of reference strings, hypothesis string)]``, checking types and lengths."""
    hypotheses, references = list(hypotheses), list(references)
    if len(references) != len(hypotheses):
        raise ValueError(f"references and hypotheses must have the same length, got {len(references)} and "
                         f"{len(hypotheses)}")
    if not hypotheses:
        raise ValueError("hypotheses is empty: there is nothing to score")
    pairs = []
    for i, (refs, hyp) in enumerate(zip(references, hypotheses)):
        refs = [refs] if isinstance(refs, str) else list(refs)
        if not isinstance(hyp, str):
            raise TypeError(f"hypotheses must be strings, got {type(hyp).__name__} at index {i}")
        if not refs or not all(isinstance(r, str) for r in refs):
            raise TypeError(f"references[{i}] must be a string or a non-empty sequence of strings, got {refs!r}")
        pairs.append((refs, hyp))
    return pairs


def _ngrams(tokens, max_order):
    return Counter(tuple(tokens[i : i + n]) for n in range(1, max_order + 1) for i in range(len(tokens) - n + 1))


def bleu(references, hypotheses, *, tokenize="13a", lowercase=False):
    """Corpus BLEU-4 (Papineni et al., 2002) as sacreBLEU computes it by default.

    ``BLEU = BP * exp(mean_n log p_n)`` over n = 1..4, where ``p_n`` is the corpus's clipped n-gram
    precision (each hypothesis n-gram counts at most as often as in one of its references) and
    ``BP = min(1, exp(1 - r / c))`` the brevity penalty, c the hypotheses' total length and r the sum
    of the reference lengths closest to each hypothesis's (the shorter on a tie). An order with no
    match gets sacreBLEU's "exp" smoothing, ``p_n = 1 / (2^k * total_n)`` for the k-th such order;
    no match at all scores 0.

    Parameters
    ----------
    references : sequence of str, or sequence of sequences of str
        One reference per hypothesis, or several.
    hypotheses : sequence of str
        The system's outputs.
    tokenize : {"13a", "none"}, default="13a"
        "13a" is mteval-v13a's tokenizer (sacreBLEU's default: punctuation split off); "none" splits on
        whitespace only.
    lowercase : bool, default=False
        Compare case-insensitively.

    Returns
    -------
    float
        BLEU in [0, 100].

    Examples
    --------
    >>> from attnkit.metrics import bleu
    >>> bleu(["the cat sat on the mat."], ["the cat sat on the mat."])
    100.0
    """
    if tokenize not in TOKENIZERS:
        raise ValueError(f"tokenize must be one of {TOKENIZERS}, got {tokenize!r}")
    split = _tokenize_13a if tokenize == "13a" else str.split
    correct, total, hyp_length, ref_length = [0] * 4, [0] * 4, 0, 0
    for refs, hyp in _pairs(references, hypotheses):
        prepare = (lambda s: s.lower().rstrip()) if lowercase else str.rstrip
        hyp_tokens = split(prepare(hyp))
        ref_counts: Counter[tuple[str, ...]] = Counter()
        lengths: list[int] = []
        for ref in refs:
            tokens = split(prepare(ref))
            lengths.append(len(tokens))
            ref_counts |= _ngrams(tokens, 4)  # | keeps each n-gram's largest count over the references
        for gram, count in _ngrams(hyp_tokens, 4).items():
            total[len(gram) - 1] += count
            correct[len(gram) - 1] += min(count, ref_counts[gram])
        hyp_length += len(hyp_tokens)
        ref_length += min(lengths, key=lambda n: (abs(n - len(hyp_tokens)), n))
    if not any(correct):
        return 0.0
    log_precisions, halvings = [], 1
    for n in range(4):
        if total[n] == 0:  # hypotheses too short for this order: the score is 0 (log 0)
            return 0.0
        if correct[n] == 0:
            halvings *= 2
            log_precisions.append(math.log(1.0 / (halvings * total[n])))
        else:
            log_precisions.append(math.log(correct[n] / total[n]))
    brevity = 1.0 if hyp_length >= ref_length else math.exp(1 - ref_length / hyp_length)
    return 100.0 * brevity * math.exp(sum(log_precisions) / 4)


def _char_ngrams(text, order, whitespace):
    if not whitespace:
        text = "".join(text.split())
    return [Counter(text[i : i + n] for i in range(len(text) - n + 1)) for n in range(1, order + 1)]


def _chrf_from_stats(stats, beta):
    """chrF from per-order [hypothesis, reference, matching] n-gram counts: precision and recall are
    averaged over the orders present on both sides, then combined into F-beta (sacreBLEU >= 2.0)."""
    present = [(match / hyp, match / ref) for hyp, ref, match in stats if hyp > 0 and ref > 0]
    if not present:
        return 0.0
    precision = sum(p for p, _ in present) / len(present)
    recall = sum(r for _, r in present) / len(present)
    if precision + recall == 0:
        return 0.0
    factor = beta**2
    return 100.0 * (1 + factor) * precision * recall / (factor * precision + recall)


def chrf(references, hypotheses, *, char_order=6, beta=2.0, lowercase=False, whitespace=False):
    """Corpus chrF (Popović, 2015): an F-score of character n-grams, as sacreBLEU computes it by default.

    For each sentence and order n = 1..char_order, the hypothesis's and the reference's character
    n-grams (whitespace removed) are counted and matched (clipped); with several references, the one
    whose sentence chrF is highest counts. The counts are summed over the corpus; precision and
    recall are averaged over the orders that occur, and ``chrF = (1 + beta^2) P R / (beta^2 P + R)``.
    ``beta = 2`` weighs recall twice as much as precision.

    Parameters
    ----------
    references : sequence of str, or sequence of sequences of str
        One reference per hypothesis, or several.
    hypotheses : sequence of str
        The system's outputs.
    char_order : int, default=6
        Longest character n-gram.
    beta : float, default=2.0
        Recall's weight.
    lowercase : bool, default=False
        Compare case-insensitively.
    whitespace : bool, default=False
        Keep whitespace inside the n-grams.

    Returns
    -------
    float
        chrF in [0, 100].

    Examples
    --------
    >>> from attnkit.metrics import chrf
    >>> chrf(["le chat"], ["le chat"]), chrf(["abc"], ["xyz"])
    (100.0, 0.0)
    """
    if isinstance(char_order, bool) or not isinstance(char_order, int) or char_order < 1:
        raise ValueError(f"char_order must be an int >= 1, got {char_order!r}")
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not beta > 0 or not math.isfinite(beta):
        raise ValueError(f"beta must be a finite number > 0, got {beta!r}")
    totals = [[0, 0, 0] for _ in range(char_order)]
    for refs, hyp in _pairs(references, hypotheses):
        prepare = str.lower if lowercase else str
        hyp_grams = _char_ngrams(prepare(hyp), char_order, whitespace)
        best: list[list[int]] = []
        best_score = -1.0
        for ref in refs:
            stats = []
            for h, r in zip(hyp_grams, _char_ngrams(prepare(ref), char_order, whitespace)):
                # An order the reference is too short for counts no hypothesis n-grams either.
                stats.append([sum(h.values()) if r else 0, sum(r.values()), sum((h & r).values())])
            score = _chrf_from_stats(stats, beta)
            if score > best_score:
                best, best_score = stats, score
        for total, counts in zip(totals, best):
            for j in range(3):
                total[j] += counts[j]
    return _chrf_from_stats(totals, beta)


# rouge-score's tokenizer: lowercase, every run of characters outside [a-z0-9] separates tokens.
_ROUGE_SEPARATOR = re.compile(r"[^a-z0-9]+")


def _rouge_tokens(text):
    return _ROUGE_SEPARATOR.sub(" ", text.lower()).split()


def _lcs_length(a, b):
    """Length of the longest common subsequence of two token lists (dynamic programming, O(len(a) len(b)))."""
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b, start=1):
            current.append(previous[j - 1] + 1 if x == y else max(previous[j], current[j - 1]))
        previous = current
    return previous[-1]


def rouge_l(references, hypotheses):
    """ROUGE-L F-measure (Lin, 2004) on word tokens, averaged over the pairs, as rouge-score computes it.

    For each pair, with L the length of the longest common subsequence of the reference's and the
    hypothesis's tokens (in order, not necessarily contiguous), ``P = L / len(hypothesis)``,
    ``R = L / len(reference)`` and ``F = 2 P R / (P + R)`` (0 when L = 0 or either side has no
    token). Tokens are lowercased runs of ASCII letters and digits; everything else separates them
    and is dropped (rouge-score's default tokenizer, without stemming, so letters outside a-z do
    not count). With several references, a pair scores its best F (rouge-score's ``score_multi``).

    Parameters
    ----------
    references : sequence of str, or sequence of sequences of str
        One reference per hypothesis, or several.
    hypotheses : sequence of str
        The system's outputs.

    Returns
    -------
    float
        The mean F-measure over the pairs, in [0, 1] (rouge-score's scale, not BLEU's 0-100).

    Examples
    --------
    >>> from attnkit.metrics import rouge_l
    >>> rouge_l(["the cat sat on the mat"], ["The cat was on the mat!"])  # LCS "the cat on the mat"
    0.8333333333333334
    """
    total, pairs = 0.0, _pairs(references, hypotheses)
    for refs, hyp in pairs:
        hyp_tokens = _rouge_tokens(hyp)
        best = 0.0
        for ref in refs:
            ref_tokens = _rouge_tokens(ref)
            common = _lcs_length(ref_tokens, hyp_tokens)
            if common:
                precision, recall = common / len(hyp_tokens), common / len(ref_tokens)
                best = max(best, 2 * precision * recall / (precision + recall))
        total += best
    return total / len(pairs)


def exact_match(references, hypotheses):
    """Share of the hypotheses equal to their reference (to one of them, when there are several), as strings:
    case, spaces and punctuation all count.

    :meth:`Seq2SeqTransformer.score <attnkit.Seq2SeqTransformer.score>` is this accuracy after the model's
    tokenizer has normalised both sides (lowercased with ``lowercase=True``, respaced with word tokens).

    Parameters
    ----------
    references, hypotheses
        As for :func:`bleu`.

    Returns
    -------
    float
        In [0, 1].

    Examples
    --------
    >>> from attnkit.metrics import exact_match
    >>> exact_match(["1969-04-25", "2001-09-11"], ["1969-04-25", "2001-11-09"])
    0.5
    """
    pairs = _pairs(references, hypotheses)
    return sum(hyp in refs for refs, hyp in pairs) / len(pairs)


def _tokens(x, name):
    if isinstance(x, str):
        return x.split()
    try:
        return list(x)
    except TypeError:
        raise TypeError(f"{name} must be a string or a sequence of tokens, got {type(x).__name__}") from None


def edit_distance(reference, hypothesis):
    """Levenshtein distance between two token sequences: the fewest insertions, deletions and
    substitutions of tokens that turn one into the other.

    Parameters
    ----------
    reference, hypothesis : str or sequence
        A string is split on whitespace; to compare characters, pass ``list(text)``.

    Returns
    -------
    int

    Examples
    --------
    >>> from attnkit.metrics import edit_distance
    >>> edit_distance("K AE1 T", "K AH0 T S")
    2
    """
    a, b = _tokens(reference, "reference"), _tokens(hypothesis, "hypothesis")
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        current = [i]
        for j, y in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def word_error_rate(references, hypotheses):
    """Corpus word error rate: total edit distance over total reference length, in tokens.

    ``WER = sum_i edit_distance(ref_i, hyp_i) / sum_i len(ref_i)``; it can exceed 1 (many insertions).
    For grapheme-to-phoneme with space-separated phonemes this is the *phoneme* error rate; that
    field's "word error rate" (the share of words with any error) is ``1 - exact-match accuracy``.

    Parameters
    ----------
    references, hypotheses : sequences of str or of token sequences
        Strings are split on whitespace.

    Returns
    -------
    float

    Examples
    --------
    >>> from attnkit.metrics import word_error_rate
    >>> word_error_rate(["the cat sat", "hello"], ["the cat sat down", "hello"])
    0.25
    """
    references, hypotheses = list(references), list(hypotheses)
    if len(references) != len(hypotheses):
        raise ValueError(f"references and hypotheses must have the same length, got {len(references)} and "
                         f"{len(hypotheses)}")
    errors = sum(edit_distance(r, h) for r, h in zip(references, hypotheses))
    length = sum(len(_tokens(r, "references")) for r in references)
    if length == 0:
        raise ValueError("references hold no tokens: the error rate is undefined")
    return errors / length


def _texts(x, name):
    """``x`` as a list of str: a list, tuple, 1-D array or pandas Series of texts, nothing else."""
    if isinstance(x, (str, bytes)) or not hasattr(x, "__len__"):
        raise TypeError(f"{name} must be a sequence of str (one text per sample), got {type(x).__name__}")
    if np.ndim(x) != 1:
        raise TypeError(f"{name} must be a sequence of str (one text per sample), got an array of shape "
                        f"{np.shape(x)}; a model fitted on token ids is scored by its own score method")
    texts = list(x)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{name} must be a sequence of str (one text per sample), got {type(text).__name__} "
                            f"{text!r:.40} at index {i}")
    return texts


def _on_texts(metric):
    """``metric(y_true, y_pred)`` for a scorer: the two checked to be sequences of texts first."""

    def score(y_true, y_pred):
        return metric(_texts(y_true, "y_true"), _texts(y_pred, "y_pred"))

    score.__name__ = score.__qualname__ = metric.__name__  # how the scorer's repr names it
    return score


bleu_scorer = make_scorer(_on_texts(bleu))
"""Scorer of corpus :func:`bleu` (0-100) of an estimator's predictions, for ``scoring=`` of scikit-learn's
model selection (GridSearchCV, cross_val_score)."""
chrf_scorer = make_scorer(_on_texts(chrf))
"""Scorer of corpus :func:`chrf` (0-100), as :data:`bleu_scorer`."""
rouge_l_scorer = make_scorer(_on_texts(rouge_l))
"""Scorer of :func:`rouge_l` (0-1), as :data:`bleu_scorer`."""
exact_match_scorer = make_scorer(_on_texts(exact_match))
"""Scorer of :func:`exact_match` (0-1), as :data:`bleu_scorer`."""

SCORERS = {"bleu": bleu_scorer, "chrf": chrf_scorer, "exact_match": exact_match_scorer, "rouge_l": rouge_l_scorer}


def get_scorer(name):
    """attnkit's scorer called ``name``, for ``scoring=`` in scikit-learn's model selection.

    Parameters
    ----------
    name : {"bleu", "chrf", "exact_match", "rouge_l"}

    Returns
    -------
    callable
        ``scorer(estimator, X, y)``: the metric of ``estimator.predict(X)`` against ``y`` (higher is better).

    Examples
    --------
    >>> from attnkit.metrics import get_scorer
    >>> get_scorer("chrf")
    make_scorer(chrf, response_method='predict')
    """
    if not isinstance(name, str) or name not in SCORERS:
        raise ValueError(f"name must be one of {sorted(SCORERS)}, got {name!r} (scikit-learn's own scorers are "
                         "sklearn.metrics.get_scorer's)")
    return SCORERS[name]
