"""Env suites reached through an id prefix: `fusedrl.make("brax:ant")`, `"jumanji:Snake-v1"`, ...

Each suite is an optional extra (`pip install -e ".[brax]"` from the clone; `suites` installs all)
and has one thin adapter module, `fusedrl.envs._<prefix>`, that puts the suite's envs on our
contract (a gymnax `Environment`: `reset_env`, `step_env` returning `terminated`, `is_truncated`
from the adapter's own step counter, spaces, `default_params`). The adapter module defines:

    env_names() -> list[str]      # the suite's env names that build offline, without the prefix
    make_env(name) -> Environment # one env; its params are `env.default_params`
    unavailable(name) -> str|None # optional: why a suite id left out of env_names is not offered

The adapters are ours, not a maintained adapter library's: `jax-envelope` needs Python >= 3.12
(we support 3.11), and `stoa-env` puts envs on its own TimeStep contract, steps navix through its
auto-resetting `step` (the action of the step after an episode ends is dropped) and reports
Jumanji's time limits as terminations.

Importing this module imports no suite; a suite's adapter (and the suite) is imported on first use.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class Suite:
    prefix: str  # the id prefix, before ":"
    extra: str  # the pip extra that installs it
    packages: tuple[str, ...]  # the import names it needs (the first is the suite itself)
    about: str  # one line for listings

    @property
    def module(self) -> str:
        return f"fusedrl.envs._{self.prefix}"

    @property
    def install(self) -> str:
        return f'pip install -e ".[{self.extra}]"'


SUITES: dict[str, Suite] = {
    s.prefix: s
    for s in (
        Suite("brax", "brax", ("brax",), "Brax locomotion (MJX and generalized backends)"),
        Suite("playground", "playground", ("mujoco_playground",), "MuJoCo Playground (dm_control suite)"),
        Suite("jumanji", "jumanji", ("jumanji",), "Jumanji combinatorial and grid tasks"),
        Suite("craftax", "craftax", ("craftax",), "Craftax and Craftax-Classic"),
        Suite("navix", "navix", ("navix",), "Navix MiniGrid worlds"),
        Suite("xminigrid", "xminigrid", ("xminigrid",), "XLand-MiniGrid worlds"),
        Suite("jaxmarl", "jaxmarl", ("jaxmarl",), "JaxMARL multi-agent envs (MPE, SMAX, Overcooked, Hanabi)"),
    )
}

#: Prefixes that are not suites of this module but are taken: gymnax's ids and the host bridge's.
OTHER_PREFIXES = ("gymnax", "gymnasium")


class SuiteNotInstalledError(ImportError):
    """A suite's env was asked for, but the suite (its extra) is not installed."""


def suite_code():
    """A context in which adapters run a suite's own code: implicit rank promotion allowed, since
    suites broadcast across ranks (MJX [3, 3] against [3], navix [1, 2] positions against [2],
    XLand-MiniGrid's LockedRoom [2] against [1, 2]) even where the user's jax config raises on it
    (fusedrl's tests do)."""
    import jax  # start-up time: `fusedrl envs --suites` lists the suites without loading JAX

    return jax.numpy_rank_promotion("allow")


def split_id(env_id: str) -> tuple[str, str] | None:
    """(prefix, name) when `env_id` names a suite's env ("brax:ant" -> ("brax", "ant")), else None."""
    prefix, sep, name = env_id.partition(":")
    return (prefix, name) if sep and prefix in SUITES else None


def known_prefixes() -> list[str]:
    return [*OTHER_PREFIXES, *SUITES]


def adapter(prefix: str) -> ModuleType:
    """The adapter module of suite `prefix`; SuiteNotInstalledError naming the install command
    when the suite (or a package it needs) is missing."""
    suite = SUITES[prefix]
    try:
        return importlib.import_module(suite.module)
    except ModuleNotFoundError as e:
        if e.name is None or e.name.split(".")[0] not in suite.packages:
            raise  # something else is missing: its own error says what
        raise SuiteNotInstalledError(
            f"{prefix}: environments need the {suite.extra!r} extra ({e.name} is not installed): "
            f"{suite.install} in the fusedrl clone (or pip install -e \".[suites]\" for every suite)."
        ) from e


def is_installed(prefix: str) -> bool:
    """Whether suite `prefix`'s packages can be imported (without importing them)."""
    return all(importlib.util.find_spec(p) is not None for p in SUITES[prefix].packages)


def env_ids(prefix: str) -> list[str]:
    """The ids of suite `prefix` ("brax:ant", ...) that build offline."""
    return [f"{prefix}:{name}" for name in adapter(prefix).env_names()]


def make_env(prefix: str, name: str) -> Any:
    """The env `name` of suite `prefix`; the caller has checked `name` is one of its ids."""
    return adapter(prefix).make_env(name)

