"""attnkit: fast, exact transformer attention and trainable transformers on the CPU.

The compiled kernels (``attnkit._core``) are chosen for this CPU at import; see :func:`show_config`.
"""

from attnkit import feature_maps, ops, reference
from attnkit._config import get_num_threads, set_num_threads, show_config
from attnkit._core import __version__
from attnkit.ops import (
    LinearAttentionState,
    linear_attention,
    log_softmax,
    random_fourier_features,
    scaled_dot_product_attention,
    sinusoidal_positions,
    softmax,
)
from attnkit.random_features import RandomFourierFeatures

__all__ = [
    "LinearAttentionState",
    "RandomFourierFeatures",
    "__version__",
    "feature_maps",
    "get_num_threads",
    "linear_attention",
    "log_softmax",
    "ops",
    "random_fourier_features",
    "reference",
    "scaled_dot_product_attention",
    "set_num_threads",
    "show_config",
    "sinusoidal_positions",
    "softmax",
]
