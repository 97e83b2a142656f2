"""The `--set FIELD=VALUE` parser and argparse types shared by `fusedrl train` and `fusedrl sweep`
(fusedrl._argtypes): what each field type accepts and refuses."""

import pytest

from fusedrl._argtypes import UsageError, parse_overrides, positive_int


@pytest.mark.parametrize("text", ["ture", "t", "truthy", "2", "yess"])
def test_set_bool_refuses_near_misses(text):
    with pytest.raises(UsageError, match="normalize_obs expects true or false"):
        parse_overrides([f"normalize_obs={text}"])


@pytest.mark.parametrize("text, want", [("true", True), ("ON", True), ("yes", True), ("1", True),
                                        ("false", False), ("Off", False), ("no", False), ("0", False)])
def test_set_bool_spellings(text, want):
    assert parse_overrides([f"normalize_obs={text}"]) == {"normalize_obs": want}


@pytest.mark.parametrize("text", ["1.5", "2.25", "1e-1"])
def test_set_int_refuses_fractions(text):
    with pytest.raises(UsageError, match="num_envs expects an integer"):
        parse_overrides([f"num_envs={text}"])
    assert parse_overrides(["num_envs=1e1", "num_steps=1_024"]) == {"num_envs": 10, "num_steps": 1024}


@pytest.mark.parametrize("text", ["(64,)", "[64, 32]", "(64, 32)", "64,32,", " 64 , 32 "])
def test_set_hidden_sizes_accepts_bracketed_tuples(text):
    want = (64,) if text == "(64,)" else (64, 32)
    assert parse_overrides([f"hidden_sizes={text}"]) == {"hidden_sizes": want}


@pytest.mark.parametrize("text", ["none", "off", "None", ""])
def test_set_optional_number_can_be_switched_off(text):
    assert parse_overrides([f"target_kl={text}"]) == {"target_kl": None}


def test_host_env_params_keep_the_json_type():
    # No defaults known (a "gymnasium:" env): ints stay ints, floats floats, true/false bools.
    got = parse_overrides(["env_params.max_episode_steps=200", "env_params.g=9.5",
                           "env_params.sutton_barto_reward=true"], None)
    assert got == {"env_params": {"max_episode_steps": 200, "g": 9.5, "sutton_barto_reward": True}}
    assert type(got["env_params"]["max_episode_steps"]) is int
    assert type(got["env_params"]["sutton_barto_reward"]) is bool


@pytest.mark.parametrize("text", ["0", "-1", "x"])
def test_positive_int_refuses_non_positive(text):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match="positive integer"):
        positive_int(text)
    assert positive_int("1") == 1
