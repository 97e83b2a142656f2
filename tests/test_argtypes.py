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


def test_set_takes_the_fields_of_each_algorithms_config():
    from fusedrl.train import A2CConfig, PPOConfig, ReinforceConfig

    a2c = parse_overrides(["optimizer=adam", "rmsprop_alpha=0.9", "normalize_adv=on", "gae_lambda=1"],
                          config_cls=A2CConfig)
    assert a2c == {"optimizer": "adam", "rmsprop_alpha": 0.9, "normalize_adv": True, "gae_lambda": 1.0}
    assert type(a2c["gae_lambda"]) is float
    reinforce = parse_overrides(["baseline=false", "normalize_returns=0", "rmsprop_eps=1e-6"],
                                config_cls=ReinforceConfig)
    assert reinforce == {"baseline": False, "normalize_returns": False, "rmsprop_eps": 1e-6}
    ReinforceConfig(**reinforce)  # valid values of the right types
    ppo = parse_overrides(["recurrent=gru", "recurrent_size=1e2"], config_cls=PPOConfig)
    assert ppo == {"recurrent": "gru", "recurrent_size": 100} and type(ppo["recurrent_size"]) is int
    assert parse_overrides(["recurrent=none"]) == {"recurrent": None}  # PPOConfig's by default
    with pytest.raises(UsageError, match="baseline expects true or false"):
        parse_overrides(["baseline=maybe"], config_cls=ReinforceConfig)
    with pytest.raises(UsageError, match="recurrent_size expects an integer"):
        parse_overrides(["recurrent_size=1.5"])
    with pytest.raises(UsageError, match="rmsprop_alpha expects a number"):
        parse_overrides(["rmsprop_alpha=high"], config_cls=A2CConfig)


@pytest.mark.parametrize("item, cls, words", [
    ("clip_eps=0.1", "A2CConfig", ["A2CConfig has no field 'clip_eps'",
                                   "a field of PPOConfig (algorithm ppo)", "A2C has no clipping",
                                   "Valid fields: env_id"]),
    ("gae_lambda=0.9", "ReinforceConfig", ["ReinforceConfig has no field 'gae_lambda'",
                                           "PPOConfig and A2CConfig (algorithm ppo or a2c)", "Monte-Carlo"]),
    ("baseline=false", "PPOConfig", ["PPOConfig has no field 'baseline'",
                                     "ReinforceConfig (algorithm reinforce)"]),
    ("optimiser=adam", "A2CConfig", ["unknown field 'optimiser' (A2CConfig has no such field)",
                                     "Did you mean 'optimizer'"]),
])
def test_set_names_the_algorithm_a_field_belongs_to(item, cls, words):
    import fusedrl.train

    with pytest.raises(UsageError) as info:
        parse_overrides([item], config_cls=getattr(fusedrl.train, cls))
    for w in words:
        assert w in str(info.value), (w, str(info.value))
