"""MuJoCo Playground's envs on fusedrl's contract: ids "playground:NAME" ("playground:CartpoleBalance").

Every env is loaded with `impl="jax"`, MJX's pure-JAX physics, in place of Playground's default
"warp" (NVIDIA Warp kernels called through a JAX foreign-function call): the JAX implementation
runs on every JAX backend (CPU included) and is traced into our one fused program like any JAX
code, with no kernel cache to build on first use. The episode handling is
`fusedrl.envs._brax_like`'s: the raw env (none of Playground's `wrap_for_brax_training`), fresh
resets, `terminated` = Playground's `done` (NaN physics, or a fall where the env defines one), our
own time limit (the env config's `episode_length`, 1000 steps for the dm_control suite).

The dm_control suite ships its models with the package. Playground's locomotion and manipulation
envs load robot models from MuJoCo Menagerie, which Playground clones from GitHub on first use: they
are offered only once that clone exists (on a machine with network access, load one of them with
`mujoco_playground.registry.load(name)` once).
"""

from __future__ import annotations

from collections.abc import Callable

from mujoco_playground import registry
from mujoco_playground._src import dm_control_suite, locomotion, manipulation, mjx_env

from fusedrl.envs._brax_like import BraxLikeEnv, native_stepper_of

#: The MJX implementation every env is loaded with (see the module docstring).
IMPL = "jax"


def _downloaded() -> bool:
    return mjx_env.MENAGERIE_PATH.exists()


def _needs_download() -> list[str]:
    return sorted([*locomotion.ALL_ENVS, *manipulation.ALL_ENVS])


def env_names() -> list[str]:
    """The dm_control suite's envs; the locomotion and manipulation envs once Menagerie is cloned."""
    return sorted(dm_control_suite.ALL_ENVS) + (_needs_download() if _downloaded() else [])


def unavailable(name: str) -> str | None:
    """Why `name` is not offered (it needs a download), or None."""
    if name in _needs_download() and not _downloaded():
        return (
            f"{name} loads robot models from MuJoCo Menagerie, which MuJoCo Playground clones from GitHub "
            f"on first use (into {mjx_env.MENAGERIE_PATH}); it is not there. On a machine with network "
            f"access run python -c \"from mujoco_playground import registry; registry.load({name!r})\" "
            f"once, then use playground:{name}. Offline, the dm_control suite's envs work "
            f"(playground:CartpoleBalance, ...)."
        )
    return None


def suite_env(name: str):
    """Playground's own (raw, unwrapped) env `name`, with MJX's JAX implementation."""
    return registry.load(name, config_overrides={"impl": IMPL})


def make_env(name: str) -> BraxLikeEnv:
    env = suite_env(name)
    return BraxLikeEnv(env, f"playground:{name}", int(registry.get_default_config(name).episode_length))


def native_stepper(name: str, num_envs: int) -> tuple[Callable, Callable]:
    """Playground's own vectorised stepping of `name`, as its training scripts wrap it:
    `mujoco_playground.wrapper.wrap_for_brax_training` (Brax's VmapWrapper and EpisodeWrapper of the
    config's `episode_length`, then Playground's auto-reset, which restarts a finished env from the
    first state it was reset to).

    Returns `(init, step)`: `init(key) -> carry` resets `num_envs` envs; `step(carry, action) ->
    (carry, reward)` takes actions [num_envs, action_size] in [-1, 1] and returns rewards [num_envs].
    Both are pure JAX and jittable.
    """
    from mujoco_playground import wrapper

    length = int(registry.get_default_config(name).episode_length)
    return native_stepper_of(wrapper.wrap_for_brax_training(suite_env(name), episode_length=length), num_envs)
