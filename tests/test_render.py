"""`fusedrl.render`: one episode played on the host, CartPole frames and the GIF writer."""

import jax
import numpy as np
import pytest

from fusedrl.policy import Policy
from fusedrl.render import cartpole_frame, play_episode, save_gif
from fusedrl.train import PPOConfig, make_train


def _policy(**env_params):
    """An untrained CartPole policy (greedy: a fixed function of the observation)."""
    config = PPOConfig(env_id="CartPole-v1", num_envs=2, num_steps=8, total_timesteps=16,
                       num_minibatches=1, update_epochs=1, hidden_sizes=(8,), env_params=env_params)
    train = make_train(config)
    return Policy(config, jax.jit(train.init)(jax.random.key(0)), train.default_hparams())


def test_play_episode_returns_every_state_of_one_greedy_episode():
    # The states are the start and the state after each step, the last one terminal (before any
    # reset); each is the previous stepped with the policy's greedy action; CartPole pays 1 a step.
    pi = _policy()
    env, params = pi.trainer.env, pi.hparams.env_params
    states, total = play_episode(pi, jax.random.key(1))
    assert len(states) > 2 and total == len(states) - 1
    assert [int(s.time) for s in states] == list(range(len(states)))
    step = jax.jit(lambda s, a: env.step_env(None, s, a, params))
    for before, after in zip(states[:-1], states[1:], strict=True):
        assert not bool(env.is_terminated(before, params))
        _, stepped, _, _, _ = step(before, pi.act(env.get_obs(before)))
        for a, b in zip(jax.tree.leaves(stepped), jax.tree.leaves(after), strict=True):
            np.testing.assert_array_equal(a, b)
    assert bool(env.is_terminated(states[-1], params))


def test_play_episode_stops_at_truncation_and_at_max_steps():
    states, total = play_episode(_policy(max_steps_in_episode=5), jax.random.key(1))
    assert (len(states), total) == (6, 5.0)
    states, total = play_episode(_policy(), jax.random.key(1), max_steps=3)
    assert (len(states), total) == (4, 3.0)


def test_cartpole_frame_and_gif(tmp_path):
    from PIL import Image

    pi = _policy()
    states, _ = play_episode(pi, jax.random.key(1), max_steps=2)
    frame = cartpole_frame(states[0], pi.hparams.env_params, size=(160, 100))
    assert frame.shape == (100, 160, 3) and frame.dtype == np.uint8 and frame.min() < frame.max()
    frames = [np.full((8, 8, 3), 80 * i, np.uint8) for i in range(3)]  # distinct: none merged
    path = save_gif(frames, tmp_path / "a.gif", fps=20)
    with Image.open(path) as gif:
        assert gif.n_frames == 3 and gif.info["duration"] == 50 and gif.info["loop"] == 0
    with pytest.raises(ValueError, match="at least one frame"):
        save_gif([], tmp_path / "b.gif")
