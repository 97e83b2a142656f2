"""Mixed precision (`compute_dtype="bfloat16"`) for every algorithm and built-in network: MLP, CNN,
GRU and LSTM. Parameters and optimiser state stay float32, the losses are computed in float32 from
the networks' float32 heads, and on one rollout the first update's losses match float32's within
bfloat16's precision (8 bits of mantissa: a relative rounding of 2^-8 per operation)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fusedrl.train import A2CConfig, PPOConfig, ReinforceConfig, make_train

pytestmark = pytest.mark.timeout(600)

TINY = dict(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 2, hidden_sizes=(16, 16), lr=1e-3)
COMBOS = {
    "ppo-mlp": (PPOConfig, dict(env_id="CartPole-v1", update_epochs=2, num_minibatches=2)),
    "ppo-cnn": (PPOConfig, dict(env_id="gymnax:Breakout-MinAtar", network="cnn", update_epochs=1,
                                num_minibatches=2)),
    "ppo-gru": (PPOConfig, dict(env_id="CartPole-v1", recurrent="gru", recurrent_size=16, update_epochs=2,
                                num_minibatches=2)),
    "ppo-lstm": (PPOConfig, dict(env_id="Pendulum-v1", recurrent="lstm", recurrent_size=16, update_epochs=2,
                                 num_minibatches=2)),
    "a2c-mlp": (A2CConfig, dict(env_id="Pendulum-v1")),
    "reinforce-mlp": (ReinforceConfig, dict(env_id="CartPole-v1", env_params={"max_steps_in_episode": 8})),
}
LOSSES = ("policy_loss", "value_loss", "entropy")


def _float_dtypes(tree):
    return {x.dtype for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.floating)}


@pytest.mark.parametrize("combo", [c if c == "ppo-mlp" else pytest.param(c, marks=pytest.mark.slow)
                                   for c in COMBOS])
def test_bfloat16_trains_and_matches_float32_on_the_first_update(combo):
    config_cls, fields = COMBOS[combo]
    config = config_cls(**{**TINY, **fields})
    t32, t16 = make_train(config), make_train(config.replace(compute_dtype="bfloat16"))
    hparams = t32.default_hparams()
    key = jax.random.key(3)
    state = jax.jit(t32.init)(key, hparams)
    start = state.policy_state

    # One float32 rollout; the first update's losses on it, from the same parameters, in each dtype.
    @jax.jit
    def first_update(state):
        state, traj = t32.rollout(state, hparams, t32.make_env(hparams), key)
        return t32.learn_from_rollout(state, traj, hparams, start)[1], t16.learn_from_rollout(
            state, traj, hparams, start)[1]

    # The network's outputs (logits or mean, value; a recurrent carry) come back float32.
    obs = jax.tree.map(lambda x: x[:2], state.obs)
    if t16.recurrent:
        out = jax.eval_shape(t16.network.apply, state.params, jax.tree.map(lambda x: x[:2], start), obs)
    else:
        out = jax.eval_shape(t16.network.apply, state.params, obs)
    assert _float_dtypes(out) == {jnp.dtype(jnp.float32)}, out

    m32, m16 = first_update(state)
    for name in LOSSES:
        a, b = float(m32[name]), float(m16[name])
        assert np.isfinite(b), (name, b)
        # bfloat16's rounding (2^-8 relative) through a few layers; the policy loss, a mean of
        # normalised advantages times ratios near 1, is near 0 and compared absolutely.
        np.testing.assert_allclose(b, a, rtol=0.03, atol=0.01, err_msg=name)
    assert any(float(m32[n]) != float(m16[n]) for n in LOSSES)  # computed in bfloat16, not float32

    # A few updates in bfloat16 from the start: finite, float32 parameters and optimiser state.
    result = jax.jit(t16)(key)
    for name in (*LOSSES, "episode_return"):
        assert np.all(np.isfinite(np.asarray(result.metrics[name]))), name
    float32 = {jnp.dtype(jnp.float32)}
    assert _float_dtypes(result.state.params) == _float_dtypes(result.state.opt_state) == float32
    text = jax.jit(t16).lower(key).as_text()
    assert "bf16" in text and "bf16" not in jax.jit(t32).lower(key).as_text()
