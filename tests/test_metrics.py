"""metrics: BLEU and chrF against numbers computed by sacreBLEU, ROUGE-L, hand-computable cases, edit distance,
WER and exact match; the scorers in scikit-learn's model selection on a tiny sequence-to-sequence task."""

import doctest
import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.base import BaseEstimator
from sklearn.model_selection import GridSearchCV, cross_val_score

from attnkit import Seq2SeqTransformer, metrics
from attnkit.metrics import (
    bleu,
    bleu_scorer,
    chrf,
    chrf_scorer,
    edit_distance,
    exact_match,
    exact_match_scorer,
    get_scorer,
    rouge_l,
    rouge_l_scorer,
    word_error_rate,
)

# The expected scores below were computed with sacrebleu 2.6.0 (corpus_bleu and corpus_chrf with their
# defaults), which attnkit does not depend on. sacreBLEU takes (hypotheses, reference streams); these
# cases hold one list of references per hypothesis, as attnkit's functions take them.
SACREBLEU_CASES = {
    "two references, punctuation, contractions": (
        ["The cat is on the mat.", "I am a student, and you are 3.5 years old!",
         "He's reading a book in the garden.", "We are going to the market tomorrow."],
        [["The cat sat on the mat.", "There is a cat on the mat."],
         ["I'm a student and you're 3.5 years old!", "I am a student; you are 3.5 years old."],
         ["He is reading a book in the garden.", "He's reading a book in the yard."],
         ["Tomorrow we go to the market.", "We're going to the market tomorrow."]],
        71.86442164245365, 83.75683644155716),
    "shorter than the references": (
        ["yes", "no it is not", "ok"], [["yes indeed"], ["no, it is not"], ["okay"]],
        43.742343691381734, 41.462832213665465),
    "brevity penalty": (
        ["the quick brown fox", "jumps over"],
        [["the quick brown fox jumps over the lazy dog"], ["jumps over the dog, quickly"]],
        22.31301601484299, 42.83140683849143),
    "13a tokenizer: entities, numbers, dashes": (
        ['She said "hello" & left (quickly) - at 10-12.', "Prices rose 1,000.5 %", "e-mail: a@b.org"],
        [['She said "hello" &amp; left (quickly) - at 10-12 .'], ["Prices rose 1,000.5%"], ["email: a@b.org"]],
        95.45052552180775, 89.14860756672654),
    "smoothing of orders with no match": (
        ["the cat and a dog sat on a mat"], [["the cat sat on the mat"]],
        14.25876976452075, 42.494196959271996),
}


@pytest.mark.parametrize("case", list(SACREBLEU_CASES))
def test_bleu_and_chrf_equal_sacrebleu(case):
    hypotheses, references, expected_bleu, expected_chrf = SACREBLEU_CASES[case]
    assert bleu(references, hypotheses) == pytest.approx(expected_bleu, rel=1e-12)
    assert chrf(references, hypotheses) == pytest.approx(expected_chrf, rel=1e-12)


def test_identical_scores_100_and_disjoint_scores_0():
    sentences = ["a b c d e", "the cat sat on the mat ."]
    assert bleu(sentences, sentences) == 100.0
    assert chrf(sentences, sentences) == 100.0
    assert bleu(["a b c d"], ["e f g h"]) == 0.0
    assert chrf(["abcd"], ["efgh"]) == 0.0


def test_bleu_by_hand():
    # 4 of 4 unigrams, 3/3 bigrams, 2/2 trigrams, 1/1 4-gram match; 4 tokens against a reference of 8:
    # BP = exp(1 - 8/4).
    assert bleu(["a b c d e f g h"], ["a b c d"]) == pytest.approx(100 * 2.718281828459045 ** (1 - 2))
    # Clipping: "the" counts at most twice (the reference's count): 1-gram precision 2/7. No 2-, 3- or
    # 4-gram matches: the k-th such order gets 1 / (2^k * total) (6, 5 and 4 n-grams).
    precisions = [2 / 7, 1 / (2 * 6), 1 / (4 * 5), 1 / (8 * 4)]
    expected = 100 * math.prod(precisions) ** 0.25
    assert bleu(["the cat the"], ["the the the the the the the"]) == pytest.approx(expected, rel=1e-12)
    # Whitespace tokenisation keeps the period on the word; 13a splits it off.
    assert bleu(["a b c d."], ["a b c d ."], tokenize="none") < 100 == bleu(["a b c d."], ["a b c d ."])
    assert bleu(["A B C D"], ["a b c d"], lowercase=True) == 100.0


def test_chrf_by_hand():
    # Hypothesis "ab", reference "abc": orders 1 and 2 present on both sides; order 3 only in the
    # reference (does not count). P = (1 + 1) / 2 = 1, R = (2/3 + 1/2) / 2 = 7/12, beta = 2.
    p, r = 1.0, 7 / 12
    assert chrf(["abc"], ["ab"]) == pytest.approx(100 * 5 * p * r / (4 * p + r))
    assert chrf(["a b c"], ["abc"]) == 100.0  # whitespace is removed
    assert chrf(["a b c"], ["abc"], whitespace=True) < 100.0
    # with several references, the best one counts
    assert chrf([["xyz", "abc"]], ["abc"]) == 100.0


def test_more_references_never_lower_the_score():
    hyps = ["the cat is on the mat", "a dog barks"]
    one = [["the cat sat on the mat"], ["the dog barks"]]
    two = [["the cat sat on the mat", "the cat is on a mat"], ["the dog barks", "a dog is barking"]]
    assert bleu(two, hyps) >= bleu(one, hyps)
    assert chrf(two, hyps) >= chrf(one, hyps)


def test_rouge_l_identical_and_disjoint():
    assert rouge_l(["police arrest the gunman"], ["police arrest the gunman"]) == 1.0
    assert rouge_l(["police arrest the gunman"], ["markets rally"]) == 0.0
    assert rouge_l([""], ["anything"]) == 0.0  # no reference token: F is 0, not an error
    assert rouge_l(["anything"], ["!?"]) == 0.0  # punctuation alone has no token


def test_rouge_l_by_hand():
    # rouge-score 0.1.2 (RougeScorer(["rougeL"]), score and score_multi) gives the same values; attnkit does
    # not depend on it.
    # Reference "the cat sat on the mat" (6 tokens), hypothesis "the cat was on the mat" (6): the longest
    # common subsequence is "the cat on the mat", L = 5, so P = R = F = 5/6.
    assert rouge_l(["the cat sat on the mat"], ["the cat was on the mat"]) == pytest.approx(5 / 6)
    # Order matters, unlike for unigram overlap: "police killed the gunman" vs "the gunman police killed"
    # share all 4 words but their LCS has 2 ("police killed" or "the gunman"): F = 2 * (1/2)(1/2) / 1 = 1/2.
    assert rouge_l(["police killed the gunman"], ["the gunman police killed"]) == pytest.approx(0.5)
    # Lengths differ: reference 6 tokens, hypothesis 7; "time warner profit" (3) beats "ad sales" (2), so
    # L = 3, P = 3/7, R = 3/6 and F = 2PR / (P + R) = 6/13.
    assert rouge_l(["Ad sales boost Time Warner profit"], ["Time Warner profit rises on ad sales"]) \
        == pytest.approx(6 / 13)
    # Case and punctuation are ignored; non-alphanumeric characters split tokens ("10,000" -> "10" "000").
    assert rouge_l(["Blair's 10,000-strong rally."], ["blair s 10 000 strong rally"]) == 1.0
    # The mean over pairs, not a corpus-level F: (1 + 0) / 2.
    assert rouge_l(["a b", "c d"], ["a b", "e f"]) == 0.5
    # Several references: the best one counts (here "a dog barks loudly": P = 1, R = 3/4, F = 6/7).
    assert rouge_l([["the cat", "a dog barks loudly"]], ["a dog barks"]) == pytest.approx(6 / 7)


def test_edit_distance():
    assert edit_distance("K AE1 T", "K AE1 T") == 0
    assert edit_distance("K AE1 T", "K AH0 T S") == 2  # one substitution, one insertion
    assert edit_distance([], ["a", "b"]) == 2
    assert edit_distance(list("kitten"), list("sitting")) == 3


@given(st.lists(st.sampled_from("abc"), max_size=8), st.lists(st.sampled_from("abc"), max_size=8),
       st.lists(st.sampled_from("abc"), max_size=8))
def test_edit_distance_is_a_metric(a, b, c):
    d = edit_distance
    assert d(a, b) == d(b, a)
    assert (d(a, b) == 0) == (a == b)
    assert d(a, c) <= d(a, b) + d(b, c)
    assert abs(len(a) - len(b)) <= d(a, b) <= max(len(a), len(b))


def test_word_error_rate():
    assert word_error_rate(["the cat sat", "hello"], ["the cat sat down", "hello"]) == 0.25
    assert word_error_rate(["a b"], ["a b"]) == 0.0
    assert word_error_rate(["a"], ["b c d"]) == 3.0  # insertions can push it above 1
    assert word_error_rate([["K", "AE1", "T"]], [["K", "AH0", "T"]]) == pytest.approx(1 / 3)


def test_errors():
    with pytest.raises(ValueError, match="same length"):
        bleu(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="hypotheses is empty"):
        chrf([], [])
    with pytest.raises(TypeError, match="hypotheses must be strings"):
        bleu(["a"], [3])
    with pytest.raises(TypeError, match=r"references\[0\]"):
        chrf([[]], ["a"])
    with pytest.raises(ValueError, match="tokenize"):
        bleu(["a"], ["a"], tokenize="intl")
    with pytest.raises(ValueError, match="char_order"):
        chrf(["a"], ["a"], char_order=0)
    with pytest.raises(ValueError, match="beta"):
        chrf(["a"], ["a"], beta=0)
    with pytest.raises(ValueError, match="same length"):
        rouge_l(["a"], ["a", "b"])
    with pytest.raises(TypeError, match="hypotheses must be strings"):
        rouge_l(["a"], [None])
    with pytest.raises(ValueError, match="same length"):
        word_error_rate(["a"], [])
    with pytest.raises(ValueError, match="no tokens"):
        word_error_rate([""], ["a"])


def test_exact_match():
    assert exact_match(["a b", "c"], ["a b", "C"]) == 0.5
    assert exact_match([["colour", "color"], "x"], ["color", "x"]) == 1.0
    assert exact_match(["a"], ["a "]) == 0.0  # as strings: spaces count
    with pytest.raises(ValueError, match="same length"):
        exact_match(["a"], ["a", "b"])
    with pytest.raises(TypeError, match="hypotheses must be strings"):
        exact_match(["a"], [1])


@given(st.lists(st.tuples(st.text(max_size=5), st.text(max_size=5)), min_size=1, max_size=8))
def test_exact_match_is_the_share_of_equal_pairs_and_symmetric(pairs):
    references, hypotheses = [r for r, _ in pairs], [h for _, h in pairs]
    score = exact_match(references, hypotheses)
    assert score == sum(r == h for r, h in pairs) / len(pairs) == exact_match(hypotheses, references)
    assert exact_match(references, references) == 1.0


WORDS = ["cat", "dog", "owl", "bee", "ant", "elk"]
# Four-word phrases to upper-case: BLEU needs 4-grams, so two-word targets would all score 0.
PHRASES = [" ".join(words) for words in itertools.product(WORDS, repeat=4)][::21]
TARGETS = [text.upper() for text in PHRASES]
TINY = dict(tokenizer="word", d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1, max_target_len=8,
            batch_size=8, early_stopping=False, random_state=0)


class FixedOutputs(BaseEstimator):
    """An estimator whose predict returns given outputs, to check what a scorer computes."""

    def __init__(self, outputs):
        self.outputs = outputs

    def predict(self, X):
        return self.outputs


@pytest.mark.parametrize(("scorer", "metric"), [(bleu_scorer, bleu), (chrf_scorer, chrf),
                                                (rouge_l_scorer, rouge_l), (exact_match_scorer, exact_match)])
def test_a_scorer_is_its_metric_of_predict_against_y(scorer, metric):
    predicted = np.array(["CAT DOG", "owl BEE", "ANT"], dtype=object)
    assert scorer(FixedOutputs(predicted), PHRASES[:3], ["CAT DOG", "OWL BEE", "ANT ELK"]) == metric(
        ["CAT DOG", "OWL BEE", "ANT ELK"], list(predicted))
    assert get_scorer(metric.__name__) is scorer


@pytest.mark.parametrize(("y_true", "y_pred", "match"), [
    (["A", "B"], np.array([[5, 6], [7, 0]]), r"y_pred must be a sequence of str .* array of shape \(2, 2\)"),
    (["A", "B"], [5, 6], "y_pred must be a sequence of str .* got int 5 at index 0"),
    ("AB", ["A", "B"], "y_true must be a sequence of str .* got str"),
    ([["A"], ["B"]], ["A", "B"], r"y_true must be a sequence of str .* array of shape \(2, 1\)"),
    (["A", None], ["A", "B"], "y_true must be a sequence of str .* got NoneType None at index 1"),
])
def test_scorers_take_texts_only(y_true, y_pred, match):
    with pytest.raises(TypeError, match=match):
        bleu_scorer(FixedOutputs(y_pred), ["a", "b"], y_true)


def test_get_scorer_names_what_it_knows():
    with pytest.raises(ValueError, match=r"name must be one of \['bleu', 'chrf', 'exact_match', 'rouge_l'\], got "
                                         "'accuracy'"):
        get_scorer("accuracy")


def test_scorers_select_seq2seq_models():
    grid = {"max_iter": [1, 15]}  # one epoch learns next to nothing
    search = GridSearchCV(Seq2SeqTransformer(**TINY), grid, cv=2, scoring=bleu_scorer).fit(PHRASES, TARGETS)
    assert search.best_params_ == {"max_iter": 15} and 0 < search.best_score_ <= 100
    multi = GridSearchCV(Seq2SeqTransformer(**TINY), grid, cv=2, refit="bleu",
                         scoring={"bleu": bleu_scorer, "chrf": chrf_scorer, "exact": exact_match_scorer})
    multi.fit(PHRASES, TARGETS)
    np.testing.assert_array_equal(multi.cv_results_["mean_test_bleu"], search.cv_results_["mean_test_score"])
    assert multi.cv_results_["mean_test_chrf"][1] > multi.cv_results_["mean_test_chrf"][0]
    assert {"mean_test_exact"} <= set(multi.cv_results_) and multi.best_estimator_.n_iter_ == 15
    scores = cross_val_score(Seq2SeqTransformer(**TINY, max_iter=15), PHRASES, TARGETS, cv=2, scoring=chrf_scorer)
    np.testing.assert_array_equal(scores, [multi.cv_results_[f"split{i}_test_chrf"][1] for i in range(2)])


def test_docstring_examples_run():
    result = doctest.testmod(metrics)
    assert result.attempted > 0 and result.failed == 0
