"""Every preset is a valid config of its algorithm for its env (nothing compiles)."""

from __future__ import annotations

import pytest

import fusedrl
from fusedrl.envs import suites
from fusedrl.train.config import config_class
from fusedrl.train.presets import ALGO_PRESETS, PRESETS

ALL_PRESETS = [("ppo", env_id) for env_id in PRESETS] + [
    (algo, env_id) for algo, table in ALGO_PRESETS.items() for env_id in table]


@pytest.mark.parametrize("algo, env_id", ALL_PRESETS)
def test_preset_is_a_valid_config_for_its_env(algo, env_id):
    config = fusedrl.preset(env_id, algo=algo)
    assert type(config) is config_class(algo) and config.env_id == env_id
    suite = suites.split_id(env_id)
    if suite and not suites.is_installed(suite[0]):
        pytest.skip(f"{suite[0]} (an optional env suite) is not installed")
    env, params = fusedrl.make(env_id)
    config.check_env_params(params)  # REINFORCE: rollouts as long as the env's time limit
    assert config.num_updates >= 1


def test_reinforce_presets_cover_whole_episodes():
    for env_id, fields in ALGO_PRESETS["reinforce"].items():
        _, params = fusedrl.make(env_id)
        assert fields["num_steps"] >= params.max_steps_in_episode, env_id
