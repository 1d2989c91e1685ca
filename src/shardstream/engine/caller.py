"""Warnings that point at the user's own line: the first frame outside shardstream."""

from __future__ import annotations

import os
import sys
import warnings

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def warn_caller(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message)`` attributed to the first caller outside the shardstream package."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
