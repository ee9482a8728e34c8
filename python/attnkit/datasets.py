"""Small generated datasets that test what a sequence model must get right."""

import numpy as np

__all__ = ["make_case_pairs"]

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
    rng = np.random.default_rng(random_state)
    X, y = [], []
    for _ in range(n_samples):
        sentence = " ".join(rng.choice(CASE_WORDS, size=int(rng.integers(min_words, max_words + 1))))
        if rng.random() < 0.5:
            sentence = sentence.capitalize()
        upper = rng.random() < 0.5
        X.append(("<U> " if upper else "<L> ") + sentence)
        y.append(sentence.upper() if upper else sentence.lower())
    return X, y
