"""attnkit: fast, exact transformer attention and trainable transformers on the CPU.

The compiled kernels (``attnkit._core``) are chosen for this CPU at import; see :func:`show_config`.
"""

import os

# GNU OpenMP threads spin-wait after every parallel region, and so do NumPy's BLAS threads; when the
# two libraries' calls alternate (every training step), their idle threads then take the cores from
# each other. Passive waiting costs a lone kernel call nothing measurable and made alternating
# BLAS/kernel calls 4.6x faster on 2 cores. Must be set before libgomp loads; a user's setting wins.
# Most kernels now run on attnkit's own workers (cpp/src/thread_pool.cpp), which spin briefly only while the
# machine has cores free; OpenMP still runs the decoding plan's region and the block-quantized products.
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

from attnkit import feature_maps, metrics, ops, reference, text  # noqa: E402
from attnkit._config import get_num_threads, set_num_threads, show_config
from attnkit._core import __version__
from attnkit.estimators import (
    CausalLanguageModel,
    MaskedLanguageModel,
    RandomFourierFeatures,
    Seq2SeqTransformer,
    TransformerClassifier,
    TransformerEmbedder,
)
from attnkit.io import load
from attnkit.ops import (
    LinearAttentionState,
    argmax_attention,
    linear_attention,
    log_softmax,
    random_fourier_features,
    scaled_dot_product_attention,
    sinusoidal_positions,
    softmax,
)

__all__ = [
    "CausalLanguageModel",
    "LinearAttentionState",
    "MaskedLanguageModel",
    "RandomFourierFeatures",
    "Seq2SeqTransformer",
    "TransformerClassifier",
    "TransformerEmbedder",
    "__version__",
    "argmax_attention",
    "feature_maps",
    "get_num_threads",
    "linear_attention",
    "load",
    "log_softmax",
    "metrics",
    "ops",
    "random_fourier_features",
    "reference",
    "scaled_dot_product_attention",
    "set_num_threads",
    "show_config",
    "sinusoidal_positions",
    "softmax",
    "text",
]
