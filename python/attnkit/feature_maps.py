"""The feature maps of linear attention, under their public name; they live in :mod:`attnkit.ops.feature_maps`
(beside the kernels that apply them)."""

from attnkit.ops.feature_maps import *  # noqa: F403
from attnkit.ops.feature_maps import __all__  # noqa: F401
