"""scikit-learn estimators built on attnkit's networks (:class:`TransformerClassifier`,
:class:`Seq2SeqTransformer`) and random features (:class:`RandomFourierFeatures`).

The network estimators share one base (:mod:`attnkit.estimators._base`): fitted state, fit skeleton,
training loop, batched inference, save and load.
"""

from attnkit.estimators.classifier import TransformerClassifier
from attnkit.estimators.random_features import RandomFourierFeatures
from attnkit.estimators.seq2seq import Seq2SeqTransformer

__all__ = ["RandomFourierFeatures", "Seq2SeqTransformer", "TransformerClassifier"]
