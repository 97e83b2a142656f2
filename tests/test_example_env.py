"""docs/examples/my_env.py, the worked example of docs/environments.md, works as the page says: it
registers, follows the env contract under jit and vmap, PPO learns it from Python, and the page's
command line trains it."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fusedrl

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "my_env.py"
PAGE = ROOT / "docs" / "environments.md"
ENV_ID = "WalkToTarget-v0"


@pytest.fixture(scope="module")
def my_env(docs_example):
    """The example module, imported once for this file (importing it registers the env)."""
    with docs_example("my_env") as module:
        yield module


def test_the_example_follows_the_env_contract(my_env):
    env, params = fusedrl.make(ENV_ID)
    assert isinstance(env, my_env.WalkToTarget) and params == my_env.WalkParams()
    n = 5
    keys = jax.random.split(jax.random.key(0), n)
    obs, state = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params)
    assert obs.shape == (n, *env.observation_space(params).shape) and obs.dtype == jnp.float32
    step = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))
    action = jnp.full((n,), 2, jnp.int32)  # always right
    ends = {"terminated": 0, "truncated": 0}
    for i in range(3 * params.max_steps_in_episode):
        step_keys = jax.random.split(jax.random.key(i + 1), n)  # new reset states after each end
        obs, state, reward, terminated, truncated, info = step(step_keys, state, action, params)
        assert reward.shape == terminated.shape == truncated.shape == (n,)
        assert terminated.dtype == jnp.bool_ and reward.dtype == jnp.float32
        assert np.all(np.abs(np.asarray(obs)) <= 1.0)
        assert info["final_observation"].shape == obs.shape
        # The goal reward comes exactly with termination; every other step costs step_penalty.
        np.testing.assert_allclose(reward, np.where(terminated, params.goal_reward, -params.step_penalty))
        ends["terminated"] += int(terminated.sum())
        ends["truncated"] += int(truncated.sum())
    # Always walking right reaches the targets to the right and runs out of time (100 steps) on the
    # others: both kinds of episode end happen, and resets start new episodes.
    assert ends["terminated"] > 0 and ends["truncated"] > 0, ends
    assert np.all(np.asarray(state.time) <= params.max_steps_in_episode)


def _page_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", PAGE.read_text(encoding="utf-8"), flags=re.S | re.M)


def test_the_pages_excerpts_are_the_example_file():
    source = {line.strip() for line in EXAMPLE.read_text(encoding="utf-8").splitlines()}
    excerpts = [b for b in _page_blocks() if "fusedrl.make(" not in b]
    assert len(excerpts) >= 3
    for block in excerpts:
        for line in block.splitlines():
            shown = line.strip()
            assert not shown or shown in source, f"docs/environments.md shows {shown!r}, not in my_env.py"


@pytest.mark.slow
def test_the_pages_python_example_trains_the_env(my_env):
    """The page's "Train it" block, as written (with the example's module for `my_env`): PPO learns the
    env, `make` changes its params, and `sweep` sweeps one."""
    (block,) = [b for b in _page_blocks() if "fusedrl.make(" in b]
    ns = {"sys": sys}
    exec(compile(block.replace("import my_env", "my_env = sys.modules['docs.examples.my_env']"),
                 "docs/environments.md", "exec"), ns)
    assert ns["params"].step_size == 0.05
    greedy = float(np.mean(fusedrl.evaluate(ns["config"], ns["result"], jax.random.key(1), num_episodes=32)))
    # An untrained policy wanders until the time limit (about -7.6 here); walking straight to the
    # target scores about +0.4 on average.
    assert greedy > -2.0, f"PPO did not learn {ENV_ID}: greedy return {greedy:.2f}"
    assert ns["swept"].metrics["episode_return"].shape == (2, 2, ns["config"].num_updates)
    radius = ns["swept"].values["goal_radius"]  # [seed, goal_radius]
    np.testing.assert_allclose(radius, [[0.05, 0.1]] * 2, rtol=1e-6)


@pytest.mark.subprocess
def test_the_pages_command_line_trains_the_example(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "fusedrl.cli", "train", "--import", "docs.examples.my_env", "--env", ENV_ID,
           "--total-timesteps", "1024", "--eval-episodes", "2", "--no-progress", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished"
    assert "docs.examples.my_env" in (out / "config.json").read_text()  # evaluate and --resume find it
