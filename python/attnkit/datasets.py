"""Small generated datasets that test what a sequence model must get right.

:func:`make_negation_sentences` is a sentiment task where word order decides the label: the same
words give opposite labels in different orders ("very good and not so bad" / "not very good and
so bad"). A bag-of-words model, even with word pairs (bigrams), cannot solve it; a model that
reads the sentence can.

:func:`make_case_pairs` is the case-rewriting task of a sequence-to-sequence model
(``"<U> I am a student"`` -> ``"I AM A STUDENT"``).
"""

import numpy as np

from attnkit._validation import check_int, validate_params

__all__ = ["CASE_WORDS", "NEGATIVE_WORDS", "POSITIVE_WORDS", "make_case_pairs", "make_negation_sentences"]

#: The positive adjectives of :func:`make_negation_sentences` (a negation in its scope flips them).
POSITIVE_WORDS = ("good", "great", "fine", "excellent", "wonderful", "nice", "brilliant", "enjoyable")
#: The negative adjectives of :func:`make_negation_sentences` (a negation in its scope flips them).
NEGATIVE_WORDS = ("bad", "awful", "terrible", "boring", "dull", "poor", "weak", "horrible")
_SUBJECTS = ("the movie", "this film", "the plot", "the acting", "the ending", "the cast", "it", "the script")
_VERBS = ("was", "is", "seemed", "felt")
_ADVERBS = ("very", "really", "truly", "quite", "so", "particularly")
# (template, label rule). "a" and "b" are adjectives of opposite polarity, "x" and "y" one or two
# adverbs, "c" a connective; the label is the polarity of the adjective that is not negated.
_TEMPLATES = (
    ("{x} {a}", "a"),
    ("not {x} {a}", "not a"),
    ("{x} {a} {c} not {y} {b}", "a"),
    ("not {x} {a} {c} {y} {b}", "b"),
)
_CONNECTIVES = ("and", ",")


def make_negation_sentences(n_samples=2000, *, random_state=None):
    """Sentences whose sentiment depends on the scope of a negation.

    Each sentence is a subject, a verb and one of four patterns over adjectives ``a`` and ``b`` of
    opposite polarity (from :data:`POSITIVE_WORDS` and :data:`NEGATIVE_WORDS`), each after one or
    two adverbs ``x``, ``y``, joined by "and" or ","::

        x a               -> polarity of a      "the plot was really good"
        not x a           -> opposite of a      "it is not very good"
        x a , not y b     -> polarity of a      "the movie was quite good , not so bad"
        not x a and y b   -> polarity of b      "this film is not very bad and truly great"

    The label is the exclusive-or of where the negation stands and which adjective comes first:
    the two-adjective patterns use the same words with opposite labels, and since an adverb
    always separates "not" from its adjective, no word pair (bigram) carries both facts. So a
    linear model on word and bigram counts scores about 50%; a model that reads the order can
    reach 100%.

    Parameters
    ----------
    n_samples : int, default=2000
        Number of sentences; labels are balanced in expectation.
    random_state : int, numpy Generator or None, default=None
        Seed.

    Returns
    -------
    texts : list of str
        Lowercase, space-separated sentences (punctuation as its own token).
    labels : ndarray of shape (n_samples,), int64
        1 positive, 0 negative.

    Examples
    --------
    >>> from attnkit.datasets import make_negation_sentences
    >>> texts, labels = make_negation_sentences(2, random_state=3)
    >>> len(texts), sorted(set(labels.tolist())) <= [0, 1]
    (2, True)
    """
    n_samples = check_int(n_samples, "n_samples", minimum=0)
    rng = _generator(random_state, "make_negation_sentences")
    texts, labels = [], np.empty(n_samples, dtype=np.int64)
    for i in range(n_samples):
        template, rule = _TEMPLATES[rng.integers(len(_TEMPLATES))]
        positive_a = bool(rng.integers(2))
        a = _pick(rng, POSITIVE_WORDS if positive_a else NEGATIVE_WORDS)
        b = _pick(rng, NEGATIVE_WORDS if positive_a else POSITIVE_WORDS)
        clause = template.format(a=a, b=b, x=_adverbs(rng), y=_adverbs(rng), c=_pick(rng, _CONNECTIVES))
        texts.append(f"{_pick(rng, _SUBJECTS)} {_pick(rng, _VERBS)} {clause}")
        labels[i] = {"a": positive_a, "not a": not positive_a, "b": not positive_a}[rule]
    return texts, labels


def _generator(random_state, caller):
    """NumPy's generator of ``random_state``, checked as the estimators check theirs."""
    validate_params({"random_state": random_state}, {"random_state": ["random_state"]}, caller=caller)
    return np.random.default_rng(random_state)


def _pick(rng, options):
    return options[rng.integers(len(options))]


def _adverbs(rng):
    return " ".join(_pick(rng, _ADVERBS) for _ in range(1 + rng.integers(2)))


#: The words :func:`make_case_pairs` draws its sentences from, lowercase.
CASE_WORDS = (
    "i am a student you are the teacher we like green apples they read old books she is happy he runs fast "
    "today my cat sleeps on warm mats a big dog barks at night our team won the match"
).split()


def make_case_pairs(n_samples=2000, *, random_state=None, min_words=3, max_words=6):
    """The case-rewriting task: ``"<U> I am a student"`` -> ``"I AM A STUDENT"``, ``"<L> ..."`` -> lower case.

    Each source is a tag, ``<U>`` or ``<L>`` (equally likely), and a sentence of ``min_words`` to
    ``max_words`` words drawn from :data:`CASE_WORDS`, capitalised half of the time; the target is
    the sentence in upper or lower case. A model must read the tag at the start and copy every
    character with its case changed: a test of attention over the whole source.

    Returns
    -------
    X, y : list of str
    """
    n_samples = check_int(n_samples, "n_samples", minimum=0)
    min_words = check_int(min_words, "min_words", minimum=1)
    max_words = check_int(max_words, "max_words", minimum=min_words)
    rng = _generator(random_state, "make_case_pairs")
    X, y = [], []
    for _ in range(n_samples):
        sentence = " ".join(rng.choice(CASE_WORDS, size=int(rng.integers(min_words, max_words + 1))))
        if rng.random() < 0.5:
            sentence = sentence.capitalize()
        upper = rng.random() < 0.5
        X.append(("<U> " if upper else "<L> ") + sentence)
        y.append(sentence.upper() if upper else sentence.lower())
    return X, y
