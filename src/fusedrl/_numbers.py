"""Small type checks every layer uses (envs, the trainer, runs, the CLI), with no imports of fusedrl."""

from __future__ import annotations

import numbers
from typing import Any


def is_int(x: Any) -> bool:
    """An integer, Python's or NumPy's, and not a bool (which Python counts as an int)."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


__all__ = ["is_int"]
