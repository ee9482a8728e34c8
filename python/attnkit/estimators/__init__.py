"""scikit-learn estimators built on attnkit's networks (:class:`TransformerClassifier`,
:class:`Seq2SeqTransformer`, :class:`TransformerEmbedder` over pretrained checkpoints) and random features
(:class:`RandomFourierFeatures`), and GPT- and BERT-style language models (:class:`CausalLanguageModel`,
:class:`MaskedLanguageModel`).

The network estimators share one base (:mod:`attnkit.estimators._base`): fitted state, fit skeleton,
training loop, batched inference, save and load.
"""

from attnkit.estimators.classifier import TransformerClassifier
from attnkit.estimators.embedder import TransformerEmbedder
from attnkit.estimators.language_model import CausalLanguageModel
from attnkit.estimators.masked_language_model import MaskedLanguageModel
from attnkit.estimators.random_features import RandomFourierFeatures
from attnkit.estimators.seq2seq import Seq2SeqTransformer

__all__ = [
    "CausalLanguageModel",
    "MaskedLanguageModel",
    "RandomFourierFeatures",
    "Seq2SeqTransformer",
    "TransformerClassifier",
    "TransformerEmbedder",
]
