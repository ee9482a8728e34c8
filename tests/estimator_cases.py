"""The two trained network estimators, tiny, on toy tasks: the cases that test_estimators_base and
test_estimators_trainable check alike (a helper, not a test module)."""

import numpy as np

from attnkit import Seq2SeqTransformer, TransformerClassifier
from attnkit.datasets import make_case_pairs, make_negation_sentences
from attnkit.nn import EncoderDecoder, SequenceClassifier

# scikit-learn's common checks run nothing for an estimator whose input is text (parametrize_with_checks skips
# it): the checks that need no data, or only check what happens before fit, which the text estimators call.
DATA_INDEPENDENT_CHECKS = [
    "check_estimator_cloneable", "check_estimator_tags_renamed", "check_valid_tag_types", "check_estimator_repr",
    "check_no_attributes_set_in_init", "check_parameters_default_constructible", "check_get_params_invariance",
    "check_set_params", "check_do_not_raise_errors_in_init_or_set_params", "check_mixin_order",
    "check_estimators_unfitted",
]

TINY_CLASSIFIER = dict(d_model=16, n_heads=2, d_ff=32, n_layers=1, max_iter=3, random_state=0)
TINY_SEQ2SEQ = dict(d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1, max_iter=3,
                    max_target_len=40, random_state=0)


def _classifier_task(n=120):
    X, y = make_negation_sentences(n, random_state=0)
    return X, y


def _seq2seq_task(n=100):
    return make_case_pairs(n, random_state=0)


CASES = {
    "classifier": (TransformerClassifier, TINY_CLASSIFIER, _classifier_task, SequenceClassifier),
    "seq2seq": (Seq2SeqTransformer, TINY_SEQ2SEQ, _seq2seq_task, EncoderDecoder),
}


def outputs(estimator, X):
    """What a user reads off a fitted estimator: probabilities, or generated texts and their scores."""
    if isinstance(estimator, TransformerClassifier):
        return [estimator.predict_proba(X), estimator.transform(X)]
    return [estimator.predict(X, max_length=12), estimator.sequence_log_proba(X, estimator.predict(X, max_length=12))]


def assert_same_outputs(a, b, X):
    for left, right in zip(outputs(a, X), outputs(b, X)):
        np.testing.assert_array_equal(left, right)


def make_case(name):
    """(estimator class, tiny params, X, y, network class) of case ``name``."""
    cls, params, task, network_class = CASES[name]
    X, y = task()
    return cls, params, X, y, network_class


def fit_case(case):
    """The case's estimator fitted with early stopping (the classifier's default, not Seq2Seq's)."""
    cls, params, X, y, _ = case
    return cls(**{**params, "early_stopping": True}).fit(X, y)
