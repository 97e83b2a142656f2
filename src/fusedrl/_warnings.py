"""Warnings that point at the user's code, however deep inside fusedrl (or jax's tracing) they arise.

A fixed `stacklevel` names the right line only when the warning is reached by one known call path:
the same check reached through `make_train`, a jitted `train`, the host bridge or the data-parallel
path would point at a line inside fusedrl or jax. `warn_user` walks the stack instead.
"""

from __future__ import annotations

import sys
import warnings

#: Top-level packages whose frames are skipped: fusedrl's own (`fusedrl`, `fusedrl.envs`,
#: `fusedrl.train`, whatever folder they load from) and the tracing machinery between a user's call
#: and fusedrl's code inside a traced function.
_INTERNAL_PACKAGES = frozenset({"fusedrl", "jax", "jaxlib", "contextlib", "functools", "importlib"})


def _internal(frame) -> bool:
    module = frame.f_globals.get("__name__") or ""
    return module.split(".")[0] in _INTERNAL_PACKAGES


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """`warnings.warn(message, category)` attributed to the first caller outside fusedrl and jax.

    Filters, `-W` options, `pytest.warns` and the "once per location" registry apply to that
    caller's file, line and module, as they would for a warning raised there. When every frame is
    internal (e.g. `python -m fusedrl.cli`), the outermost frame is named.
    """
    frame = sys._getframe(1)
    while frame.f_back is not None and _internal(frame):
        frame = frame.f_back
    module_globals = frame.f_globals
    warnings.warn_explicit(
        message,
        category,
        frame.f_code.co_filename,
        frame.f_lineno,
        module=module_globals.get("__name__", "<unknown>"),
        registry=module_globals.setdefault("__warningregistry__", {}),
    )  # no module_globals: its loader lookup fails for __main__ (python -c); the source line is
    # read from the file, as warnings.warn does
