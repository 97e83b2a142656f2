"""A network of the user's own, named in the config as "module:function" (docs/networks.md): it
trains, vmaps, evaluates, sweeps, saves and loads like the MLP, from Python and the CLI, and one that
breaks the contract is refused by make_train with what to change."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

import fusedrl
from fusedrl.cli import main as cli_main
from fusedrl.sweeps import check_sweep

DOCS = Path(__file__).resolve().parents[1] / "docs" / "networks.md"


def _docs_module() -> str:
    """The example module of docs/networks.md, as written there."""
    blocks = re.findall(r"^```python\n(.*?)^```", DOCS.read_text(encoding="utf-8"), flags=re.S | re.M)
    (block,) = [b for b in blocks if b.startswith("# my_nets.py")]
    return block


@pytest.fixture
def nets(tmp_path, monkeypatch):
    """A folder on sys.path (and the cwd) holding my_nets.py (the docs' example) and broken_nets.py."""
    (tmp_path / "my_nets.py").write_text(_docs_module() + textwrap.dedent("""

        class Image(nn.Module):  # checks what the factory is told: the env's unflattened shape
            action_dim: int
            obs_shape: tuple

            @nn.compact
            def __call__(self, obs):
                x = obs.reshape(obs.shape[:-1] + self.obs_shape)
                x = nn.relu(nn.Conv(4, (3, 3))(x)).reshape(obs.shape[:-1] + (-1,))
                return Categorical(logits=nn.Dense(self.action_dim)(x)), nn.Dense(1)(x)[..., 0]


        def image(action_dim, discrete, obs_shape, config):
            assert discrete and obs_shape == (10, 10, 4), obs_shape  # Breakout-MinAtar's
            return Image(action_dim, obs_shape)
        """))
    (tmp_path / "broken_nets.py").write_text(textwrap.dedent("""
        import flax.linen as nn
        from fusedrl.distributions import Categorical, DiagGaussian

        class Net(nn.Module):
            action_dim: int
            mistake: str

            @nn.compact
            def __call__(self, obs):
                head, value = nn.Dense(self.action_dim)(obs), nn.Dense(1)(obs)
                if self.mistake == "value_shape":
                    return Categorical(logits=head), value  # [B, 1], not [B]
                if self.mistake == "gaussian":
                    return DiagGaussian(mean=head, log_std=head * 0), value[..., 0]
                if self.mistake == "width":
                    return Categorical(logits=nn.Dense(7)(obs)), value[..., 0]
                return head, value[..., 0]  # "not_a_pair" is fine, "logits" returns no distribution

        def make(mistake):
            return lambda action_dim, discrete, obs_shape, config: Net(action_dim, mistake)

        value_shape, gaussian, width, logits = (make(m) for m in ("value_shape", "gaussian", "width",
                                                                     "logits"))
        def not_a_module(action_dim, discrete, obs_shape, config):
            return "a network"
        not_callable = 3

        def raises(action_dim, discrete, obs_shape, config):
            raise KeyError("no such layer")

        class Fails(nn.Module):
            @nn.compact
            def __call__(self, obs):
                raise RuntimeError("my bug")

        def fails_in_call(action_dim, discrete, obs_shape, config):
            return Fails()
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _config(env_id="CartPole-v1", **kw):
    fields = dict(env_id=env_id, num_envs=4, num_steps=16, total_timesteps=256, num_minibatches=2,
                  update_epochs=1, network="my_nets:shared_torso", hidden_sizes=(32,))
    return fusedrl.PPOConfig(**{**fields, **kw})


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.slow
def test_own_network_trains_vmaps_and_evaluates(nets, env_id):
    config = _config(env_id)
    train = fusedrl.make_train(config)
    result = jax.jit(jax.vmap(train))(jax.random.split(jax.random.key(0), 2))
    params = result.state.params["params"]
    assert "actor_0" not in params and params["Dense_0"]["kernel"].shape == (2, train.env.observation_space(
        train.env_params).shape[0], 32)  # the docs' network, width from config.hidden_sizes
    assert result.metrics["policy_loss"].shape == (2, config.num_updates)
    assert np.isfinite(result.metrics["value_loss"]).all()
    one = jax.tree.map(lambda x: x[0], result)
    returns = fusedrl.evaluate(config, one, jax.random.key(1), num_episodes=4)
    assert returns.shape == (4,) and np.isfinite(returns).all()


@pytest.mark.slow
def test_own_network_gets_the_envs_observation_shape(nets):
    config = _config("gymnax:Breakout-MinAtar", network="my_nets:image")
    result = jax.jit(fusedrl.make_train(config))(jax.random.key(0))
    assert result.state.params["params"]["Conv_0"]["kernel"].shape == (3, 3, 4, 4)


def test_own_network_in_a_sweep_and_the_config_round_trip(nets):
    config = _config()
    assert fusedrl.PPOConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    swept = fusedrl.sweep(config, num_seeds=2, lr=[1e-3, 3e-4])
    assert swept.metrics["policy_loss"].shape == (2, 2, config.num_updates)
    with pytest.raises(ValueError, match="network"):  # static: one compiled program per network
        check_sweep(config, num_seeds=1, network=["my_nets:shared_torso", "my_nets:image"])


@pytest.mark.parametrize("path", ["my_nets", "my_nets:", ":f", "my-nets:f", "a:b:c", 3, "my_nets:class"])
def test_network_path_format_is_checked_by_the_config(path):
    expected = (r"network must be None \(the MLP actor-critic\), \"cnn\" \(the built-in with a conv torso on "
                r"image observations\) or \"module:func")
    with pytest.raises(ValueError, match=expected):
        fusedrl.PPOConfig(network=path)


@pytest.mark.parametrize("path, match", [
    ("no_such_nets:f", "no module named 'no_such_nets' on the Python path"),
    ("broken_nets:missing", "module 'broken_nets' has no function 'missing'"),
    ("broken_nets:not_callable", r"has no function 'not_callable' \(not_callable is a int\)"),
    ("broken_nets:not_a_module", "must return a flax.linen.Module, got str"),
    ("broken_nets:value_shape", r"value has shape \(2, 1\) for a batch of 2 .*nn.Dense\(1\)\(x\)\[\.\.\."),
    ("broken_nets:gaussian", "pi is a DiagGaussian"),
    ("broken_nets:width", r"logits has shape \(2, 7\) for a batch of 2 observations; expected \(pi, value\)"),
    ("broken_nets:logits", "pi is a ArrayImpl|pi is a ShapeDtypeStruct"),
])
def test_a_network_that_breaks_the_contract_is_refused_by_make_train(nets, path, match):
    with pytest.raises((TypeError, ValueError), match=match) as excinfo:
        fusedrl.make_train(_config(network=path))
    assert f"network {path!r}" in str(excinfo.value)


def test_cli_trains_evaluates_and_loads_a_run_with_its_own_network(nets, capsys):
    out = nets / "run"
    args = ["train", "--env", "CartPole-v1", "--set", "network=my_nets:shared_torso", "--set", "num_envs=4",
            "--set", "num_steps=16", "--total-timesteps", "128", "--eval-episodes", "2", "--out", str(out)]
    assert cli_main(args) == 0
    saved = json.loads((out / "config.json").read_text())
    assert saved["ppo"]["network"] == "my_nets:shared_torso" and "my_nets" in saved["run"]["imports"]
    assert cli_main(["evaluate", str(out), "--episodes", "2", "--trust-imports"]) == 0
    policy = fusedrl.load(out, trust_imports=True)
    assert "Dense_0" in policy.params["params"]
    assert policy.act(np.zeros(4, np.float32)) in (0, 1)
    capsys.readouterr()
    assert cli_main(["train", "--env", "CartPole-v1", "--set", "network=other_nets:f", "--out",
                     str(nets / "run2")]) == 2
    assert "no module named 'other_nets'" in capsys.readouterr().err


@pytest.mark.parametrize("path, error, note", [
    ("broken_nets:raises", KeyError, "while make_train built network 'broken_nets:raises'"),
    ("broken_nets:fails_in_call", RuntimeError, "while make_train traced network 'broken_nets:fails_in"),
])
def test_an_error_of_the_users_own_code_says_which_network_raised_it(nets, path, error, note):
    with pytest.raises(error) as excinfo:
        fusedrl.make_train(_config(network=path))
    assert note in "\n".join(getattr(excinfo.value, "__notes__", []))
