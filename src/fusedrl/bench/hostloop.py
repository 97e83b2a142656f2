"""CartPole, fused vs host bridge (Gymnasium vector env + jitted policy per step): steps/s, time to solve.

    python -m fusedrl.bench hostloop [--total-timesteps 100000] [--seed 0] [--no-sb3]

Both sides train the same PPO (rl-zoo's CartPole settings: 8 envs x 32 steps, 20 epochs of one
256-sample minibatch, lr 1e-3 annealed, gamma 0.98, lambda 0.8, no entropy bonus; unlike rl-zoo,
the clip range stays 0.2 where rl-zoo anneals it, and the value loss is clipped, on every side,
SB3 included) for the same budget, in one process, one after the other:

- fused: `jax.jit(make_train(config))`, compiled first (compile time reported apart), then timed;
- bridge: `make_train(config)` with env_id "gymnasium:CartPole-v1"; the first update (which
  compiles the jitted policy and update) is reported apart as its compile time.

"solve" is the first update at which the mean training episode return (per update: the mean over
the episodes that ended in it), averaged over the last 10 updates, is >= 475; its time counts from
the end of update 0. The bridge records the wall time of every update (its loop is on the host
anyway); the fused run is one program, so its solve time is (updates to solve) x (measured seconds
per update). Stable-Baselines3 PPO with the same settings (value clipping included) is added when it
is installed (it is not a dependency), with the same solve rule, from the start of `learn`.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from fusedrl._argtypes import seed_arg
from fusedrl.bench._timing import compile_then_run

SOLVED = 475.0
WINDOW = 10  # updates averaged for the solve criterion
ZOO = dict(num_envs=8, num_steps=32, update_epochs=20, num_minibatches=1, lr=1e-3, gamma=0.98,
           gae_lambda=0.8, ent_coef=0.0, hidden_sizes=(64, 64))


def _config(env_id: str, total_timesteps: int, **overrides):
    from fusedrl.train import PPOConfig

    return PPOConfig(env_id=env_id, total_timesteps=total_timesteps, **{**ZOO, **overrides})


def _solve_index(returns, window: int = WINDOW) -> int | None:
    """First update at which the mean of the last `window` updates' episode_return is >= SOLVED
    (a single lucky episode is not a solve)."""
    r = np.asarray(returns, np.float64)
    if r.size < window:
        return None
    means = np.convolve(r, np.ones(window) / window, mode="valid")  # means[j] ends at update j+window-1
    hits = np.flatnonzero(means >= SOLVED)
    return int(hits[0]) + window - 1 if hits.size else None


def run_fused(total_timesteps: int, seed: int = 0, **overrides) -> dict[str, Any]:
    """Trains fused CartPole-v1; returns steps/s, compile and train seconds, solve time."""
    from fusedrl.train import make_train

    config = _config("CartPole-v1", total_timesteps, **overrides)
    key = jax.random.key(seed)
    result, compile_s, train_s = compile_then_run(jax.jit(make_train(config)), key)
    returns = np.asarray(result.metrics["episode_return"])
    i = _solve_index(returns)
    per_update = train_s / config.num_updates
    # Time since the end of update 0, as for the bridge (whose update 0 is booked as compile).
    times = per_update * np.arange(config.num_updates)
    return _row("fused", config, compile_s, train_s, returns,
                None if i is None else float(times[i]), i, times=times)


def per_rollout_returns(completed: list[list[float]]) -> np.ndarray:
    """Our trainer's `episode_return` metric from the returns of the episodes that completed in
    each rollout: their mean, or the last rollout's value when none did (0.0 before the first)."""
    out, last = [], 0.0
    for returns in completed:
        last = float(np.mean(returns)) if returns else last
        out.append(last)
    return np.asarray(out)


def run_bridge(total_timesteps: int, seed: int = 0, **overrides) -> dict[str, Any]:
    """Trains gymnasium:CartPole-v1 through the host bridge, timing every update."""
    from fusedrl.learners import make_train

    config = _config("gymnasium:CartPole-v1", total_timesteps, **overrides)
    stamps: list[float] = []
    train = make_train(config, callback=lambda m: stamps.append(time.perf_counter()))
    t0 = time.perf_counter()
    result = train(jax.random.key(seed))
    end = time.perf_counter()
    # The first update compiles the jitted pieces; the training clock starts after it.
    compile_s = stamps[0] - t0
    train_s = end - stamps[0]
    returns = np.asarray(result.metrics["episode_return"])
    i = _solve_index(returns)
    solve = None if i is None else stamps[i] - stamps[0]
    steps_per_s = config.batch_size * (config.num_updates - 1) / train_s if train_s > 0 else float("nan")
    times = np.asarray(stamps) - stamps[0]
    return _row("bridge", config, compile_s, train_s, returns, solve, i, steps_per_s=steps_per_s,
                times=times)


def run_sb3(total_timesteps: int, seed: int = 0) -> dict[str, Any] | None:
    """Stable-Baselines3 PPO with the same settings, if installed (else None)."""
    try:
        from stable_baselines3 import PPO
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.env_util import make_vec_env
    except ImportError:
        return None
    z = ZOO
    stamps: list[float] = []
    completed: list[list[float]] = [[]]  # returns of the episodes that ended, per rollout

    class Stamp(BaseCallback):
        # The same solve rule as fused and bridge: per rollout, the mean return of the episodes
        # that ended in it (not SB3's 100-episode ep_info_buffer, which lags far behind).
        def _on_rollout_end(self):
            stamps.append(time.perf_counter())
            completed.append([])

        def _on_step(self):
            completed[-1].extend(float(i["episode"]["r"]) for i in self.locals["infos"] if "episode" in i)
            return True

    venv = make_vec_env("CartPole-v1", n_envs=z["num_envs"], seed=seed)
    model = PPO("MlpPolicy", venv, n_steps=z["num_steps"], batch_size=z["num_envs"] * z["num_steps"],
                n_epochs=z["update_epochs"], learning_rate=lambda f: z["lr"] * f, gamma=z["gamma"],
                gae_lambda=z["gae_lambda"], ent_coef=0.0, clip_range=0.2, clip_range_vf=0.2, seed=seed,
                device="cpu")
    t0 = time.perf_counter()
    model.learn(total_timesteps=total_timesteps, callback=Stamp())
    train_s = time.perf_counter() - t0
    venv.close()
    returns = per_rollout_returns(completed[:len(stamps)])
    i = _solve_index(returns)
    steps = len(stamps) * z["num_envs"] * z["num_steps"]
    return {"impl": "sb3", "env_steps": steps, "compile_s": 0.0, "train_s": train_s,
            "steps_per_s": steps / train_s, "solve_s": None if i is None else stamps[i] - t0,
            "solve_update": i, "final_return": float(returns[-1]) if len(returns) else float("nan")}


def _row(impl, config, compile_s, train_s, returns, solve_s, solve_i, steps_per_s=None, times=None):
    return {
        "impl": impl,
        "env_steps": config.env_steps,
        "compile_s": compile_s,
        "train_s": train_s,
        "steps_per_s": steps_per_s if steps_per_s is not None else config.env_steps / train_s,
        "solve_s": solve_s,
        "solve_update": solve_i,
        "final_return": float(returns[-1]),
        "returns": returns.tolist(),  # per update
        "times": [float(t) for t in times],  # seconds since training started (compile excluded)
    }


def measure(total_timesteps: int = 100_000, seed: int = 0, sb3: bool = True) -> list[dict[str, Any]]:
    """Fused, bridge (and SB3 if installed and `sb3`) rows, measured one after the other."""
    rows = [run_fused(total_timesteps, seed), run_bridge(total_timesteps, seed)]
    if sb3:
        row = run_sb3(total_timesteps, seed)
        if row is not None:
            rows.append(row)
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    dev = jax.devices()[0]
    lines = [
        f"CartPole-v1 PPO (rl-zoo settings), jax {jax.__version__}, {dev.platform}; "
        f"solve = mean training return over {WINDOW} updates >= {SOLVED:g}",
        f"{'impl':<8}{'env steps/s':>13}{'compile s':>11}{'train s':>9}{'solve s':>9}{'final ret':>11}",
    ]
    for r in rows:
        solve = "-" if r["solve_s"] is None else f"{r['solve_s']:.1f}"
        lines.append(f"{r['impl']:<8}{r['steps_per_s']:>13,.0f}{r['compile_s']:>11.1f}"
                     f"{r['train_s']:>9.1f}{solve:>9}{r['final_return']:>11.1f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedrl.bench hostloop",
                                description="CartPole PPO: fused vs host bridge (and SB3 if installed).")
    p.add_argument("--total-timesteps", type=int, default=100_000)
    p.add_argument("--seed", type=seed_arg, default=0)
    p.add_argument("--no-sb3", action="store_true", help="skip Stable-Baselines3 even if installed")
    args = p.parse_args(argv)
    if args.total_timesteps < ZOO["num_envs"] * ZOO["num_steps"] * 2:
        p.error("--total-timesteps must cover at least two updates (512 steps)")
    rows = measure(args.total_timesteps, args.seed, sb3=not args.no_sb3)
    if not args.no_sb3 and not any(r["impl"] == "sb3" for r in rows):
        print("stable-baselines3 not installed: skipped (pip install stable-baselines3 to add it)")
    print(format_table(rows))
    for r in rows:
        summary = {k: v for k, v in r.items() if k not in ("returns", "times")}
        print(json.dumps({"bench": "hostloop", **summary}))
    return 0


__all__ = ["SOLVED", "ZOO", "format_table", "main", "measure", "run_bridge", "run_fused", "run_sb3"]
