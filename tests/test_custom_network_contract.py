"""What make_train's trace of a user's network (docs/networks.md) refuses beyond the output shapes:
PRNG streams and mutable collections the trainer does not provide (Dropout, BatchNorm: flax's own
errors, naming no network), variables outside 'params' (which Adam silently trained as parameters),
parameters that are not float32 (a crash inside optax) and a log_std that broadcasts wider than
[B, action_dim] (a crash inside the rollout)."""

from __future__ import annotations

import textwrap

import jax
import jax.numpy as jnp
import pytest

import fusedrl


@pytest.fixture
def nets(tmp_path, monkeypatch):
    (tmp_path / "contract_nets.py").write_text(textwrap.dedent("""
        import flax.linen as nn
        import jax.numpy as jnp
        from fusedrl.distributions import Categorical, DiagGaussian

        class Net(nn.Module):
            action_dim: int
            discrete: bool
            kind: str

            @nn.compact
            def __call__(self, obs):
                x = obs
                if self.kind == "dropout":
                    x = nn.Dropout(0.1, deterministic=False)(x)
                if self.kind in ("batchnorm", "running_average"):
                    x = nn.BatchNorm(use_running_average=self.kind == "running_average")(x)
                dense = dict(param_dtype=jnp.bfloat16) if self.kind == "bf16_params" else {}
                if self.kind == "bf16_compute":
                    dense = dict(dtype=jnp.bfloat16)
                x = nn.tanh(nn.Dense(8, **dense)(x))
                head, value = nn.Dense(self.action_dim, **dense)(x), nn.Dense(1, **dense)(x)[..., 0]
                if self.discrete:
                    return Categorical(logits=head), value
                if self.kind == "log_std_b":  # [B]: broadcasts with [B, 1] to [B, B]
                    return DiagGaussian(mean=head, log_std=nn.Dense(1)(x)[..., 0]), value
                return DiagGaussian(mean=head, log_std=nn.Dense(self.action_dim)(x)), value  # [B, A]

        def make(kind):
            return lambda action_dim, discrete, obs_shape, config: Net(action_dim, discrete, kind)

        (dropout, batchnorm, running_average, bf16_params, bf16_compute, log_std_b,
         state_log_std) = (make(k) for k in ("dropout", "batchnorm", "running_average", "bf16_params",
                                             "bf16_compute", "log_std_b", "state_log_std"))
        """))
    monkeypatch.syspath_prepend(str(tmp_path))


def _config(name, env_id="CartPole-v1"):
    return fusedrl.PPOConfig(env_id=env_id, network=f"contract_nets:{name}", num_envs=4, num_steps=8,
                             total_timesteps=64)


@pytest.mark.parametrize("name, error, match", [
    ("dropout", ValueError, r"without PRNG streams.*Dropout \(or self.make_rng\) is not supported"),
    ("batchnorm", ValueError, r"without mutable collections.*nn.BatchNorm\) are not supported"),
    ("running_average", ValueError, r"variables outside 'params' \(collections \['batch_stats'\]\)"),
    ("bf16_params", TypeError, r"parameters must be float32 \(\['params'\]\['Dense_0'\]\['bias'\] is bfloat"),
])
def test_what_the_trainer_cannot_run_is_refused_naming_the_network(nets, name, error, match):
    with pytest.raises(error, match=match) as excinfo:
        fusedrl.make_train(_config(name))
    assert str(excinfo.value).startswith(f"network 'contract_nets:{name}': ")


def test_a_log_std_that_broadcasts_wider_than_the_mean_is_refused(nets):
    with pytest.raises(ValueError, match=r"log_std has shape \(2,\); expected \[1\] or \[B, 1\]"):
        fusedrl.make_train(_config("log_std_b", "Pendulum-v1"))


@pytest.mark.parametrize("name, env_id", [("bf16_compute", "CartPole-v1"), ("state_log_std", "Pendulum-v1")])
def test_bfloat16_compute_and_a_state_dependent_log_std_are_accepted(nets, name, env_id):
    train = fusedrl.make_train(_config(name, env_id))
    params = jax.eval_shape(train.init, jax.random.key(0)).params
    assert {x.dtype for x in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}
