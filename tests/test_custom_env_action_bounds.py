"""A Box action space whose bounds leave out 0 (the Gaussian policy's initial mean) is warned about
when the trainer is made: its actions are clipped, not rescaled, so such a dimension barely learns."""

from __future__ import annotations

import warnings

import jax.numpy as jnp
import pytest

import fusedrl
from fusedrl.envs import Box


def _with_bounds(low, high):
    class Bounded(fusedrl.envs.MountainCarContinuous):
        def action_space(self, params=None):
            return Box(jnp.asarray(low, jnp.float32), jnp.asarray(high, jnp.float32), (len(low),),
                       jnp.float32)

        def step_env(self, key, state, action, params):
            return super().step_env(key, state, action[:1], params)

    return Bounded


def _config(env_id):
    return fusedrl.PPOConfig(env_id=env_id, num_envs=2, num_steps=4, total_timesteps=8,
                             update_epochs=1, num_minibatches=1)


def test_bounds_that_leave_out_zero_warn_naming_the_dimension(monkeypatch):
    monkeypatch.setitem(fusedrl.envs.registry._REGISTRY, "Off-v0", _with_bounds([0.0, -6.0], [1.0, -3.0]))
    with pytest.warns(UserWarning, match=r"leaves out 0 in dimension\(s\) 1: \[-6, -3\].*Box\(-1.0, 1.0"):
        fusedrl.make_train(_config("Off-v0"))


@pytest.mark.parametrize("low, high", [([-1.0, -1.0], [1.0, 1.0]), ([0.0, -2.0], [1.0, 0.0])])
def test_bounds_that_hold_zero_do_not_warn(monkeypatch, low, high):
    monkeypatch.setitem(fusedrl.envs.registry._REGISTRY, "On-v0", _with_bounds(low, high))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fusedrl.make_train(_config("On-v0"))


def test_the_warning_is_given_once_per_process(monkeypatch):
    from fusedrl.train import trainer

    monkeypatch.setattr(trainer, "_WARNED_BOUNDS", set())
    monkeypatch.setitem(fusedrl.envs.registry._REGISTRY, "Once-v0", _with_bounds([1.0], [2.0]))
    with pytest.warns(UserWarning, match="leaves out 0"):
        fusedrl.make_train(_config("Once-v0"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fusedrl.make_train(_config("Once-v0"))  # evaluate, Policy and sweeps make trainers again


def test_traced_bounds_are_skipped_not_refused():
    import jax

    from fusedrl.train.trainer import _warn_bounds_exclude_zero

    def check(high):  # bounds computed from traced params: their values are not known
        _warn_bounds_exclude_zero("Traced-v0", Box(high - 3.0, high, (1,), jnp.float32))
        return high

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jax.jit(check)(jnp.ones(1))


def test_the_warning_points_at_the_make_train_call(monkeypatch):
    from fusedrl.train import trainer

    monkeypatch.setattr(trainer, "_WARNED_BOUNDS", set())
    monkeypatch.setitem(fusedrl.envs.registry._REGISTRY, "Where-v0", _with_bounds([1.0], [2.0]))
    with pytest.warns(UserWarning, match="leaves out 0") as record:
        fusedrl.make_train(_config("Where-v0"))
    assert record[0].filename == __file__
