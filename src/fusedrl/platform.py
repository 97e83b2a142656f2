"""The one place where fusedrl's choices depend on the platform.

Whether a sweep or a multi-seed CLI run splits its runs over host threads ("streams", one per core,
on a lone CPU device) differs by platform, and the trainer's speed record is resolved for one
(`fusedrl.train.tuning.resolve_tuning`; today the same everywhere). Both ask `choices_platform`
which platform to choose for.

To run the program an accelerator would run on a CPU (CI has no GPU), force the choices:

    FUSEDRL_PLATFORM=gpu python -m pytest ...          # or
    with fusedrl.platform.choices_for("gpu"):
        ...

Only the choices change; jax still computes on the device it has.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator

#: Environment variable that forces the platform every choice is made for ("cpu", "gpu", "tpu").
ENV_VAR = "FUSEDRL_PLATFORM"

_FORCED: contextvars.ContextVar[str | None] = contextvars.ContextVar("fusedrl_platform", default=None)


def choices_platform(device_platform: str | None = None) -> str:
    """The platform to make platform-dependent choices for: the one forced by `choices_for` or
    $FUSEDRL_PLATFORM, else `device_platform` (a `jax.Device.platform`), else jax's default backend."""
    forced = _FORCED.get() or os.environ.get(ENV_VAR) or None
    if forced is not None:
        return forced.lower()
    if device_platform is not None:
        return device_platform
    import jax  # start-up time: a forced platform is answered without loading JAX

    return jax.default_backend()


@contextlib.contextmanager
def choices_for(platform: str) -> Iterator[None]:
    """Within the block, choices are made as on `platform` (e.g. "gpu" on a CPU-only machine)."""
    if not isinstance(platform, str) or not platform:
        raise TypeError(f"platform must be a platform name such as 'gpu' or 'cpu', got {platform!r}.")
    token = _FORCED.set(platform.lower())
    try:
        yield
    finally:
        _FORCED.reset(token)


__all__ = ["ENV_VAR", "choices_for", "choices_platform"]
