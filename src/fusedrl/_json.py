"""Strict JSON (RFC 8259) for the files fusedrl writes: run folders, checkpoints, sweeps.

Python's `json.dumps` writes NaN and Infinity, which are not JSON: jq, JavaScript and strict
parsers refuse the whole file. Here NaN becomes null (a number that does not exist, e.g. the return
of an evaluation after training diverged) and ±inf becomes ±1e999, a valid number literal that
Python's `json` and JavaScript read back as ±infinity (e.g. `max_grad_norm=inf`: no clipping).
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

# Stand-ins for ±inf while encoding: plain strings, replaced by number literals afterwards.
_INF, _NEG_INF = "__fusedrl_inf__", "__fusedrl_neg_inf__"


def dumps(obj: Any, *, indent: int | None = 2) -> str:
    """`obj` as strict JSON text: NaN as null, ±inf as ±1e999; NumPy scalars and arrays as numbers
    and lists."""
    text = json.dumps(_strict(obj), indent=indent, allow_nan=False)
    return text.replace(json.dumps(_INF), "1e999").replace(json.dumps(_NEG_INF), "-1e999")


def _strict(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        x = x.tolist()
    elif isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else (_INF if x > 0 else _NEG_INF)
    if isinstance(x, dict):
        return {k: _strict(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_strict(v) for v in x]
    if x is None or isinstance(x, str | int | float):
        return x
    raise TypeError(f"cannot write {type(x).__name__} to JSON")
