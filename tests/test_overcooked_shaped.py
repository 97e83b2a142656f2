"""docs/examples/overcooked_shaped.py: JaxMARL's Overcooked with its shaped reward added, against
JaxMARL's own step (its reward plus coef times its info["shaped_reward"], cook by cook)."""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

jaxmarl = pytest.importorskip("jaxmarl", reason="jaxmarl is not installed (pip install -e \".[jaxmarl]\")")

import fusedrl  # noqa: E402
from fusedrl.envs.multiagent import TeamEnv  # noqa: E402


@pytest.fixture(scope="module")
def example(docs_example):
    with docs_example("overcooked_shaped") as module:
        yield module


def test_each_cooks_reward_is_jaxmarls_plus_coef_times_its_shaped_reward(example):
    from jaxmarl.environments.overcooked import overcooked_layouts

    coef = 0.5
    fusedrl.register("OvercookedHalf-v0", functools.partial(example.ShapedOvercooked, coef=coef))
    ours, _ = fusedrl.make("OvercookedHalf-v0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "OvercookedV2 is released"
        own = jaxmarl.make("overcooked", layout=overcooked_layouts["cramped_room"])
    agents = own.agents
    n = 64

    def both(key, state, acts):
        with jax.numpy_rank_promotion("allow"):
            _, new, want, _, info = own.step_env(key, state, acts)
        _, _, got, _, _ = ours.step_env(key, state, acts)
        return new, got, want, info["shaped_reward"]

    step = jax.jit(jax.vmap(both))
    with jax.numpy_rank_promotion("allow"):
        _, state = jax.jit(jax.vmap(own.reset))(jax.random.split(jax.random.key(0), n))
    rng = np.random.default_rng(0)
    seen = 0.0
    for t in range(150):
        acts = {a: jnp.asarray(rng.integers(0, 6, n), jnp.int32) for a in agents}
        state, got, want, shaped = step(jax.random.split(jax.random.key(t + 1), n), state, acts)
        for a in agents:
            reference = np.asarray(want[a], np.float64) + coef * np.asarray(shaped[a], np.float64)
            np.testing.assert_allclose(np.asarray(got[a], np.float64), reference, rtol=1e-6, atol=1e-6)
            seen += float(np.abs(np.asarray(shaped[a])).sum())
    assert seen > 0  # random cooks earned some shaped reward: the check above saw it added


def test_the_trainer_steps_it_as_a_team(example):
    team = TeamEnv(fusedrl.make("OvercookedShaped-v0")[0], env_id="OvercookedShaped-v0")
    assert team.num_agents == 2 and team.max_steps == 400
