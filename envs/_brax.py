"""Brax's envs on fusedrl's contract: ids "brax:NAME" and "brax:NAME@BACKEND".

`brax:ant` is exactly `brax.envs.get_environment("ant")`: Brax's own default physics pipeline
("generalized" for every env of Brax 0.14), so an id means what the same name means in Brax;
`brax:ant@spring` (or `@positional`, `@generalized`, `@mjx`) chooses the pipeline (spring is the
fastest to compile and step on CPU, and the least accurate; docs/environments.md). `brax:fast`
is Brax's trivial test env (no physics, so no backend). The episode handling is
`fusedrl.envs._brax_like`'s: the raw env, fresh resets, `terminated` = Brax's `done`, our own time
limit (1000 steps, Brax's training default).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import brax.envs

from fusedrl.envs._brax_like import BraxLikeEnv, native_stepper_of

#: Brax's physics pipelines, the `@BACKEND` of an id.
BACKENDS = ("generalized", "positional", "spring", "mjx")
#: Brax's training episode length (`brax.envs.training.wrap`), our default time limit.
EPISODE_LENGTH = 1000
#: Brax envs without a physics pipeline: no backend to choose.
_NO_BACKEND = ("fast",)


def _suite_names() -> list[str]:
    return sorted(brax.envs._envs)  # Brax's registry (get_environment's), including registered envs


def env_names() -> list[str]:
    """Every Brax env, then each physics env once per backend ("ant@mjx", ...)."""
    names = _suite_names()
    return names + [f"{n}@{b}" for n in names if n not in _NO_BACKEND for b in BACKENDS]


def _split(name: str) -> tuple[str, str | None]:
    """("ant", "mjx") for "ant@mjx"; ("ant", None) (Brax's default pipeline) for "ant"."""
    base, _, backend = name.partition("@")
    return base, backend or None


def suite_env(name: str) -> Any:
    """Brax's own (raw, unwrapped) env for our `name` ("ant", "ant@mjx")."""
    base, backend = _split(name)
    kwargs = {} if backend is None else {"backend": backend}
    with warnings.catch_warnings():
        # Brax warns on every model load that its pipelines are no longer maintained (MJX and
        # MuJoCo Playground are its successors; docs/environments.md says so): not actionable here.
        warnings.filterwarnings("ignore", message="Brax System, piplines and environments",
                                category=UserWarning)
        return brax.envs.get_environment(base, **kwargs)


def make_env(name: str) -> BraxLikeEnv:
    return BraxLikeEnv(suite_env(name), f"brax:{name}", EPISODE_LENGTH)


def native_stepper(name: str, num_envs: int) -> tuple[Callable, Callable]:
    """Brax's own vectorised stepping of `name`, as a Brax user trains it: the raw env wrapped by
    `brax.envs.training.wrap` (VmapWrapper, EpisodeWrapper of 1000 steps, AutoResetWrapper, which
    restarts a finished env from the first state it was reset to).

    Returns `(init, step)`: `init(key) -> carry` resets `num_envs` envs; `step(carry, action) ->
    (carry, reward)` takes actions [num_envs, action_size] in [-1, 1] and returns rewards [num_envs].
    Both are pure JAX and jittable.
    """
    from brax.envs.wrappers import training

    return native_stepper_of(training.wrap(suite_env(name), episode_length=EPISODE_LENGTH), num_envs)
