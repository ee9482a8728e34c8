"""attnkit.estimators._classifier_start: the two starts of a TransformerClassifier answer the same questions;
a checkpoint is read only when a fit needs it, and its arrays are the encoder's first weights."""

import numpy as np
import pytest

from attnkit import TransformerClassifier
from attnkit.estimators._classifier_start import FineTuning, FromScratch, start_of
from attnkit.pretrained import load_checkpoint
from tiny_bert import write_tiny_bert

TEXTS = ["a good film", "a bad film", "good fun", "bad and dull"] * 5
LABELS = [1, 0, 1, 0] * 5


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(write_tiny_bert(tmp_path_factory.mktemp("ck") / "tiny"))


def test_the_start_follows_pretrained_and_reads_nothing_until_asked():
    assert isinstance(start_of(TransformerClassifier()), FromScratch)
    start = start_of(TransformerClassifier(pretrained="/no/such/checkpoint"))
    assert isinstance(start, FineTuning) and start.learning_rate == 1e-4  # no file read for the defaults
    with pytest.raises(FileNotFoundError):
        start.initial_weights()  # reads the checkpoint


def test_both_starts_answer_the_same_questions():
    public = {name for name in dir(FromScratch) if not name.startswith("_")}
    assert public == {name for name in dir(FineTuning) if not name.startswith("_")} - {"checkpoint", "source"}


def test_fine_tuning_starts_the_encoder_from_the_checkpoint_and_the_head_from_scratch(tiny):
    clf = TransformerClassifier(pretrained=tiny, max_iter=1, learning_rate=1e-12, early_stopping=False)
    clf.fit(TEXTS, LABELS)
    weights = load_checkpoint(tiny).weights
    for name, value in weights.items():
        np.testing.assert_allclose(clf._weights[name], value, atol=1e-9, err_msg=name)
    assert set(clf._weights) - set(weights) == {"head.weight", "head.bias"}
    assert "checkpoint" not in clf.__dict__.get("_cache", {})  # nothing of the start is kept after the fit


def test_each_start_checks_its_own_parameters(tiny):
    with pytest.raises(ValueError, match=r"d_model \(10\) must be divisible by n_heads \(4\)"):
        FromScratch().check(TransformerClassifier(d_model=10))
    clf = TransformerClassifier(pretrained=tiny, d_model=64)
    with pytest.raises(ValueError, match="leave d_model=64 at their defaults"):
        start_of(clf).check(clf)
