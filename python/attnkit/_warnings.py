"""Warnings that point at the user's line: the first frame outside attnkit, however deep the call."""

import os
import sys
import warnings
from types import FrameType

__all__ = ["warn"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
# Wrappers a call passes through between the user's line and attnkit (scikit-learn's set_output).
_WRAPPERS = (os.sep + os.path.join("sklearn", "utils", "_set_output.py"),)


def warn(message, category=UserWarning):
    """``warnings.warn(message, category)`` attributed to the nearest caller outside attnkit (and outside
    scikit-learn's output wrapper), so that ``-W error`` and warning filters point at the user's code."""
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and (frame.f_code.co_filename.startswith(_PACKAGE)
                                 or frame.f_code.co_filename.endswith(_WRAPPERS)):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level + 1)
