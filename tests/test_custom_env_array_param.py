"""An array-valued env param (gymnax Acrobot's available_torque) cannot be a sweep axis or a PPOConfig
env_params value; both refusals now say how to vary it (train's hparams), where they pointed at each
other before (the config said to sweep it, the sweep wanted a 1-D list)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import fusedrl
from fusedrl.sweeps import check_sweep

ENV = "gymnax:Acrobot-v1"


def _config(**kwargs):
    return fusedrl.PPOConfig(env_id=ENV, num_envs=2, num_steps=4, total_timesteps=8, **kwargs)


def test_sweeping_an_array_valued_env_param_says_how_to_vary_it():
    default = np.asarray(fusedrl.make(ENV)[1].available_torque)
    values = [default, default * 0.5]
    with pytest.raises(ValueError, match=re.escape("cannot sweep 'available_torque': it is an array-valued "
                                                   "env param") + ".*hp.env_params.replace"):
        check_sweep(_config(), num_seeds=1, available_torque=values)


def test_an_array_in_config_env_params_says_how_to_vary_it():
    with pytest.raises(TypeError, match=re.escape("An array-valued env param cannot be set in the config")
                       + ".*hp.env_params.replace\\(available_torque=...\\)"):
        _config(env_params={"available_torque": [-1.0, 0.0, 1.0]})


def test_a_zero_dimensional_array_in_config_env_params_is_a_number():
    import jax.numpy as jnp

    for value in (jnp.float32(12.0), np.array(12.0)):
        config = fusedrl.PPOConfig(env_params={"gravity": value})
        assert config.env_params["gravity"] == 12.0 and type(config.env_params["gravity"]) is float
