"""Broken envs stop the run: a NaN observation entry or reward, or an action_mask row that allows no
action, is flagged on the device once per update (`metrics["env_fault"]`), freezes that update's
parameters, and `Trainer.check` / `train_run` / the CLI / `fusedrl.evaluate` raise naming the env, the
field and the update. Three tiny envs break at step BREAK of their (never ending) episode.

4 envs x 8 steps per update: steps 0-7 are update 1 (healthy), step BREAK=12 falls in update 2.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import fusedrl
from fusedrl.envs import Box, Discrete
from fusedrl.envs._gymnax import spaces
from fusedrl.envs.base import Environment, EnvParams, EnvState
from fusedrl.train import EnvFaultError, PPOConfig, make_train

BREAK = 12  # the step (0-based, of every env's one long episode) at which each env breaks


@struct.dataclass
class TickState(EnvState):
    time: jax.Array  # [] int32 steps taken in the episode


@struct.dataclass
class TickParams(EnvParams):
    max_steps_in_episode: int = 1000  # never reached in these tests


class _Tick(Environment):
    """Discrete(3); reward 1 for action 0; observation {"pos": [2], "vel": [1]} float32; the
    episode never terminates. Subclasses break one field from step BREAK on."""

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def default_params(self):
        return TickParams()

    def action_space(self, params=None):
        return Discrete(3)

    def observation_space(self, params):
        return spaces.Dict({"pos": Box(-1.0, 1.0, (2,), jnp.float32),
                            "vel": Box(-1.0, 1.0, (1,), jnp.float32)})

    def reset_env(self, key, params):
        state = TickState(time=jnp.int32(0))
        return self.get_obs(state), state

    def broken(self, state):
        return state.time >= BREAK

    def step_env(self, key, state, action, params):
        state = state.replace(time=state.time + 1)
        return self.get_obs(state), state, self.reward(state, action), jnp.bool_(False), {}

    def reward(self, state, action):
        return (action == 0).astype(jnp.float32)

    def get_obs(self, state, params=None, key=None):
        t = state.time.astype(jnp.float32) / 100.0
        return {"pos": jnp.stack([t, -t]), "vel": jnp.stack([t])}

    def is_terminated(self, state, params):
        return jnp.bool_(False)


class NaNVelocity(_Tick):
    def get_obs(self, state, params=None, key=None):
        obs = super().get_obs(state)
        return {**obs, "vel": jnp.where(self.broken(state), jnp.nan, obs["vel"])}


class NaNReward(_Tick):
    def reward(self, state, action):
        return jnp.where(self.broken(state), jnp.nan, super().reward(state, action))


class EmptyMask(_Tick):
    """`action_mask` [3]: only action 2 allowed, then none from step BREAK on."""

    def observation_space(self, params):
        return spaces.Dict({**super().observation_space(params).spaces,
                            "action_mask": Box(0, 1, (3,), jnp.bool_)})

    def get_obs(self, state, params=None, key=None):
        mask = (jnp.arange(3) == 2) & ~self.broken(state)
        return {**super().get_obs(state), "action_mask": mask}


class InfPosition(_Tick):
    """A flat observation [3] (no dict) that turns +inf from step BREAK on."""

    def observation_space(self, params):
        return Box(-1.0, 1.0, (3,), jnp.float32)

    def get_obs(self, state, params=None, key=None):
        t = state.time.astype(jnp.float32) / 100.0
        return jnp.where(self.broken(state), jnp.inf, jnp.stack([t, -t, t]))


ENVS = {"broken:NaNVelocity-v0": NaNVelocity, "broken:NaNReward-v0": NaNReward,
        "broken:EmptyMask-v0": EmptyMask, "broken:InfPosition-v0": InfPosition}
for _id, _cls in ENVS.items():
    fusedrl.register(_id, _cls)

SMALL = dict(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 4, update_epochs=1, num_minibatches=1,
             hidden_sizes=(8,))


def config(env_id, **kw):
    return PPOConfig(env_id=env_id, **{**SMALL, **kw})


@pytest.fixture(scope="module")
def trained():
    """env id -> (trainer, result) of one jitted run of 4 updates."""
    out = {}
    for env_id in ENVS:
        train = make_train(config(env_id))
        out[env_id] = train, jax.jit(train)(jax.random.key(0))
    return out


@pytest.mark.parametrize("env_id, field", [("broken:NaNVelocity-v0", "observation entry 'vel'"),
                                           ("broken:NaNReward-v0", "non-finite reward"),
                                           ("broken:EmptyMask-v0", "action_mask row that allows no action"),
                                           ("broken:InfPosition-v0", "in the observation")])
def test_the_update_where_the_env_breaks_is_flagged_and_named(trained, env_id, field):
    train, result = trained[env_id]
    fault = np.asarray(result.metrics["env_fault"])
    assert fault[0] == 0 and np.all(fault[1:] != 0), fault  # healthy in update 1, broken from update 2 on
    with pytest.raises(EnvFaultError) as e:
        train.check(result)
    msg = str(e.value)
    assert env_id in msg and field in msg and "in update 2." in msg, msg
    # Only the broken field is named.
    others = {"observation entry 'vel'", "reward", "action_mask", "observation entry 'pos'"} - {field}
    assert not any(o in msg for o in others if o not in field), msg
    # Resumed pieces count their updates from the run's start.
    with pytest.raises(EnvFaultError, match="in update 12[.]"):
        train.check(result.metrics, first_update=10)


def test_updates_where_the_env_broke_leave_the_parameters_as_they_were(trained):
    # The parameters after update 1 (the last healthy one), from a run of one update, are those the
    # whole run ends with: the updates that trained on NaN changed nothing; all are finite.
    train, result = trained["broken:NaNVelocity-v0"]
    state = train.init(jax.random.key(0))
    one = jax.jit(lambda s: train.run(s, num_updates=1))(state)
    for a, b in zip(jax.tree.leaves(one.params), jax.tree.leaves(result.params), strict=True):
        assert np.all(np.isfinite(b))
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-6, atol=1e-7)
    assert not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(state.params),
                                                         jax.tree.leaves(result.params), strict=True))


def test_a_healthy_env_has_no_fault_and_vmapped_runs_are_named(trained):
    train = make_train(config("CartPole-v1"))
    result = jax.jit(jax.vmap(train))(jax.random.split(jax.random.key(1), 2))
    assert result.metrics["env_fault"].shape == (2, 4) and not np.any(result.metrics["env_fault"])
    train.check(result)  # nothing to say
    broken, _ = trained["broken:NaNReward-v0"]
    runs = jax.jit(jax.vmap(broken))(jax.random.split(jax.random.key(1), 3))
    with pytest.raises(EnvFaultError, match=r"in update 2 \(run\(s\) 0, 1, 2 of 3\)"):
        broken.check(runs)


def test_evaluate_refuses_a_broken_run_and_an_empty_action_mask(trained):
    train, result = trained["broken:EmptyMask-v0"]
    cfg = train.config
    with pytest.raises(EnvFaultError, match="action_mask"):
        fusedrl.evaluate(cfg, result, jax.random.key(0), num_episodes=2, max_steps=BREAK + 4)
    # The same policy without the training's metrics: the evaluation itself meets the empty rows.
    bare = result.replace(metrics={})
    with pytest.raises(ValueError, match="EmptyMask-v0: an observation's action_mask allowed no action"):
        fusedrl.evaluate(cfg, bare, jax.random.key(0), num_episodes=2, max_steps=BREAK + 4)
    # Episodes cut before the mask empties are evaluated as before.
    returns = fusedrl.evaluate(cfg, bare, jax.random.key(0), num_episodes=2, max_steps=BREAK)
    assert np.all(np.isnan(returns))  # never ended: NaN, no error


def test_the_cli_stops_with_the_message_and_the_folder_says_failed(tmp_path, capsys):
    from fusedrl.cli import main

    out = tmp_path / "run"
    # 8 updates with progress every 2: the run is trained in pieces and stops at the piece that broke.
    rc = main(["train", "--env", "broken:NaNVelocity-v0", "--out", str(out), "--no-progress",
               "--total-timesteps", str(4 * 8 * 8), "--set", "num_envs=4", "--set", "num_steps=8",
               "--set", "num_minibatches=1", "--set", "update_epochs=1", "--set", "hidden_sizes=8"])
    err = capsys.readouterr().err
    assert rc != 0
    assert "broken:NaNVelocity-v0" in err and "'vel'" in err and "update 2" in err, err
    assert "Traceback" not in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and "vel" in summary["error"]["message"]


def test_infinite_env_params_are_refused_like_nan():
    for value in (float("inf"), float("-inf"), float("nan")):
        with pytest.raises(ValueError, match=r"env_params\['gravity'\] must be a number, got (-?inf|NaN)"):
            PPOConfig(env_id="CartPole-v1", env_params={"gravity": value})


def test_the_bench_compares_the_check_with_no_check(trained):
    # `python -m fusedrl.bench envcheck` times the trainer against the same trainer without the
    # check: that one must not flag (nor freeze) anything on an env the check flags.
    from fusedrl.bench.envcheck import _unchecked

    train, result = trained["broken:NaNReward-v0"]
    off = jax.jit(_unchecked(train))(jax.random.key(0))
    assert np.any(result.metrics["env_fault"]) and not np.any(off.metrics["env_fault"])
    assert not all(np.all(np.isfinite(x)) for x in jax.tree.leaves(off.params))  # trained on NaN
