"""argparse value types shared by the command-line tools."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An argparse `type` accepting integers >= 1, with a message naming the bad value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value
