"""attnkit: fast, exact transformer attention and trainable transformers on the CPU.

The compiled kernels (``attnkit._core``) are chosen for this CPU at import; see :func:`show_config`.
"""

from attnkit import ops, reference
from attnkit._config import get_num_threads, set_num_threads, show_config
from attnkit._core import __version__
from attnkit.ops import log_softmax, scaled_dot_product_attention, sinusoidal_positions, softmax

__all__ = [
    "__version__",
    "get_num_threads",
    "log_softmax",
    "ops",
    "reference",
    "scaled_dot_product_attention",
    "set_num_threads",
    "show_config",
    "sinusoidal_positions",
    "softmax",
]
