"""The env-suite plumbing (`fusedrl.envs.suites`) and `check_env`, without any suite installed.

Each suite's own tests (tests/test_suite_<prefix>.py) run its adapter for real.
"""

from __future__ import annotations

import jax.numpy as jnp
import pytest

import fusedrl
from fusedrl.envs import suites
from fusedrl.envs.cartpole import CartPole
from fusedrl.envs.checks import check_env


def test_unknown_prefix_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"Unknown environment suite 'bax:'.*Did you mean 'brax:'.*jumanji:"):
        fusedrl.make("bax:ant")


def test_registered_ids_with_a_colon_are_not_taken_for_a_suite():
    fusedrl.register("mine:CartPole-v0", CartPole, overwrite=True)
    env, _ = fusedrl.make("mine:CartPole-v0")
    assert isinstance(env, CartPole)
    with pytest.raises(ValueError, match="did you mean 'mine:CartPole-v0'"):
        fusedrl.make("mine:CartPole-v1")


@pytest.mark.parametrize("prefix", sorted(suites.SUITES))
def test_suite_prefixes_are_reserved(prefix):
    with pytest.raises(ValueError, match=f"reserved for the {prefix} suite"):
        fusedrl.register(f"{prefix}:x", CartPole)


def test_a_missing_suite_names_its_install_command(monkeypatch):
    # A suite whose package is not installed (a made-up one: the real ones are installed in CI).
    fake = suites.Suite("brax", "brax", ("no_such_suite_pkg",), "test")
    monkeypatch.setitem(suites.SUITES, "brax", fake)
    monkeypatch.setattr(fake.__class__, "module", property(lambda self: "no_such_suite_pkg.adapter"))
    with pytest.raises(suites.SuiteNotInstalledError, match=r'pip install -e "\.\[brax\]"'):
        fusedrl.make("brax:ant")
    assert not suites.is_installed("brax")


class _NeverTruncated(CartPole):
    """Breaks the time limit: episodes run on past max_steps_in_episode."""

    def is_truncated(self, state, params):
        return jnp.array(False)


class _NoRestart(CartPole):
    """Reports truncation one step late."""

    def is_truncated(self, state, params):
        return state.time > params.max_steps_in_episode


def test_check_env_passes_ours_and_counts_truncations():
    counts = check_env("CartPole-v1", max_steps=5, num_steps=16)
    assert counts["truncations"] + counts["terminations"] == counts["episodes_ended"] > 0


@pytest.mark.parametrize("env, message", [(_NeverTruncated(), "ran past max_steps_in_episode"),
                                          (_NoRestart(), "time limit without ending")])
def test_check_env_fails_an_env_that_breaks_the_time_limit(env, message):
    params = env.default_params.replace(x_threshold=1e9, theta_threshold_radians=1e9)  # never terminates
    with pytest.raises(AssertionError, match=message):
        check_env(env, params, max_steps=4, num_steps=10)


class _StepChangesDtype(CartPole):
    """Its step returns the state's time counter as a float (VecEnv could not select reset states in)."""

    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, info = super().step_env(key, state, action, params)
        return obs, state.replace(time=state.time.astype(jnp.float32)), reward, terminated, info


def test_check_step_shapes_traces_ours_and_fails_a_changed_state_dtype():
    from fusedrl.envs.checks import check_step_shapes

    env = CartPole()
    assert check_step_shapes(env, env.default_params).shape == (4,)
    bad = _StepChangesDtype()
    with pytest.raises(AssertionError, match="changes a state leaf's shape or dtype"):
        check_step_shapes(bad, bad.default_params)
