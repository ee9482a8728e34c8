"""Generated datasets."""

from attnkit.datasets import CASE_WORDS, make_case_pairs


def test_case_pairs():
    X, y = make_case_pairs(200, random_state=0)
    assert len(X) == len(y) == 200
    assert (X, y) == make_case_pairs(200, random_state=0)
    for source, target in zip(X, y):
        tag, sentence = source[:4], source[4:]
        assert tag in ("<U> ", "<L> ")
        assert target == (sentence.upper() if tag == "<U> " else sentence.lower())
        assert 3 <= len(sentence.split()) <= 6 and all(w.lower() in CASE_WORDS for w in sentence.split())
    assert {x[:3] for x in X} == {"<U>", "<L>"}
