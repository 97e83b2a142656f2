"""Watching a trained policy: play one episode on the host, draw CartPole frames, write a GIF.

    policy = fusedrl.load("runs/cartpole")
    states, total = play_episode(policy, jax.random.key(0))
    save_gif([cartpole_frame(s) for s in states[::2]], "cartpole.gif")
"""

from __future__ import annotations

import os
from pathlib import Path

import jax
import numpy as np


def play_episode(policy, key: jax.Array, *, max_steps: int = 1000, greedy: bool = True):
    """Runs one episode of `policy` (a `fusedrl.policy.Policy`) in its env, step by step.

    Returns (states, total_reward): the env state before every step and after the last one
    (before the automatic reset), and the episode's undiscounted return.
    """
    env, params = policy.trainer.env, policy.hparams.env_params

    @jax.jit
    def step(key, state, action):
        # step_env, not step: without the automatic reset the final state stays visible.
        obs, state, reward, done, _ = env.step_env(key, state, action, params)
        truncated = env.is_truncated(state, params) if hasattr(env, "is_truncated") else False
        return obs, state, reward, done, truncated

    key, k_reset = jax.random.split(key)
    obs, state = jax.jit(env.reset)(k_reset, params)
    states, total = [state], 0.0
    for _ in range(max_steps):
        key, k_act, k_step = jax.random.split(key, 3)
        action = policy.act(obs, None if greedy else k_act)
        obs, state, reward, terminated, truncated = step(k_step, state, action)
        states.append(state)
        total += float(reward)
        if bool(terminated) or bool(truncated):
            break
    return states, total


def cartpole_frame(state, params=None, *, size=(320, 200)) -> np.ndarray:
    """An RGB frame [H, W, 3] uint8 of a CartPole state (cart position `x`, pole angle `theta`)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    x_limit = float(getattr(params, "x_threshold", 2.4))
    half_pole = float(getattr(params, "length", 0.5))
    x, theta = float(state.x), float(state.theta)
    w, h = size
    fig = Figure(figsize=(w / 100, h / 100), dpi=100)
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(-x_limit - 0.4, x_limit + 0.4)
    ax.set_ylim(-0.4, 2.2 * half_pole + 0.4)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.axhline(0, color="0.3", linewidth=1)
    ax.axvline(-x_limit, color="0.8", linewidth=1, linestyle="--")
    ax.axvline(x_limit, color="0.8", linewidth=1, linestyle="--")
    cart_w, cart_h = 0.5, 0.3
    ax.add_patch(Rectangle((x - cart_w / 2, 0), cart_w, cart_h, color="0.2"))
    top = (x, cart_h)
    tip = (x + 2 * half_pole * np.sin(theta), cart_h + 2 * half_pole * np.cos(theta))
    ax.plot([top[0], tip[0]], [top[1], tip[1]], color="#c8642d", linewidth=5, solid_capstyle="round")
    ax.plot([top[0]], [top[1]], "o", color="#7f7fc8", markersize=5)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def save_gif(frames, path: str | os.PathLike, *, fps: int = 30) -> Path:
    """Writes RGB frames [H, W, 3] as a looping animated GIF (Pillow)."""
    from PIL import Image

    if len(frames) == 0:
        raise ValueError("save_gif needs at least one frame.")
    images = [Image.fromarray(np.asarray(f, np.uint8)) for f in frames]
    path = Path(path)
    images[0].save(path, save_all=True, append_images=images[1:], duration=max(1, round(1000 / fps)), loop=0)
    return path
