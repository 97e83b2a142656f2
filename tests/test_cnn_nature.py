"""The CNN's Nature-DQN torso (images of `NATURE_MIN_SIZE` = 36 pixels a side or more) trains: a
tiny image env of 36x36 pixels, two updates, finite parameters that changed, in every conv layer."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

import fusedrl
from fusedrl.envs import Box, Discrete
from fusedrl.envs.base import Environment, EnvParams, EnvState
from fusedrl.networks import NATURE_MIN_SIZE
from fusedrl.train import PPOConfig, make_train

SIZE = 36


@struct.dataclass
class SideState(EnvState):
    side: jax.Array  # [] int32 0 (left) or 1 (right)
    time: jax.Array  # [] int32


@struct.dataclass
class SideParams(EnvParams):
    max_steps_in_episode: int = 10


class BigPixels(Environment):
    """Discrete(2), one step per episode. Observation uint8 [36, 36, 1]: a bright band (255) on the
    left or right third; reward 1 for the action naming that side."""

    @property
    def name(self) -> str:
        return "BigPixels"

    @property
    def default_params(self):
        return SideParams()

    def action_space(self, params=None):
        return Discrete(2)

    def observation_space(self, params):
        return Box(0, 255, (SIZE, SIZE, 1), jnp.uint8)

    def reset_env(self, key, params):
        state = SideState(side=jax.random.randint(key, (), 0, 2), time=jnp.int32(0))
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        reward = (action == state.side).astype(jnp.float32)
        state = state.replace(time=state.time + 1)
        return self.get_obs(state), state, reward, state.time >= 1, {}

    def get_obs(self, state, params=None, key=None):
        cols = jnp.arange(SIZE)
        band = jnp.where(state.side == 0, cols < SIZE // 3, cols >= SIZE - SIZE // 3)
        img = jnp.where(band[None, :], 255, 0).astype(jnp.uint8)
        return jnp.broadcast_to(img, (SIZE, SIZE))[..., None]

    def is_terminated(self, state, params):
        return state.time >= 1


fusedrl.register("test:BigPixels-v0", BigPixels)


def test_the_nature_torso_trains():
    assert SIZE == NATURE_MIN_SIZE  # the smallest image that gets the Nature torso
    config = PPOConfig(env_id="test:BigPixels-v0", network="cnn", num_envs=2, num_steps=4,
                       total_timesteps=2 * 4 * 2, update_epochs=1, num_minibatches=1, hidden_sizes=(16,))
    train = make_train(config)
    start = jax.jit(train.init)(jax.random.key(0))
    result = jax.jit(train.run)(start)
    # The Nature torso's three convs: 8x8 stride 4 (32), 4x4 stride 2 (64), 3x3 stride 1 (64).
    kernels = sorted(x.shape for x in jax.tree.leaves(result.params) if x.ndim == 4)
    assert kernels == [(3, 3, 64, 64), (4, 4, 32, 64), (8, 8, 1, 32)], kernels
    assert result.metrics["env_steps"].tolist() == [8, 16]
    for before, after in zip(jax.tree.leaves(start.params), jax.tree.leaves(result.params), strict=True):
        assert np.all(np.isfinite(after))
        if before.ndim == 4:  # every conv layer learned
            assert not np.array_equal(before, after)
    assert np.all(np.isfinite(result.metrics["policy_loss"]))
