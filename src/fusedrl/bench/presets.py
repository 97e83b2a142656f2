"""Train each preset with N vmapped seeds, evaluate greedily, and compare with gymnax-blines.

    python -m fusedrl.bench presets --env Acrobot-v1 [--seeds 4] [--episodes 64]
    python -m fusedrl.bench presets --all
    python -m fusedrl.bench presets --env Pendulum-v1 --set total_timesteps=2_000_000 --set lr=1e-3
    python -m fusedrl.bench presets --algo a2c --env CartPole-v1     (A2C's and REINFORCE's presets)

Each env is one program: `jax.jit(jax.vmap(make_train(preset(env))))` over `--seeds` keys, compiled
apart (`.lower().compile()`, reported as compile time) and then run (reported as train time). Each
seed is then evaluated with `fusedrl.evaluate` on `--episodes` greedy (mode-action) episodes, with
its final observation statistics frozen and raw (unnormalised) rewards. The row gives the mean and
standard deviation across seeds of the per-seed greedy means, the worst seed, every seed's mean,
and the published gymnax-blines PPO return for the env. `--set field=value` overrides a preset
field (for tuning; a row measured with overrides is not the preset's).

The same policies are also evaluated with sampled actions on as many episodes (its own key), the
way gymnax-blines evaluates (`pi.sample` in its `RolloutManager.batch_evaluate`), so its returns
are compared like with like: the row's "sampled" mean ± std and worst seed.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import time
from collections.abc import Sequence

import jax
import numpy as np

from fusedrl._argtypes import seed_arg
from fusedrl.bench._timing import compile_then_run, cpu_model

# Published PPO returns in gymnax-blines (RobertTLange/gymnax-blines), the targets we compare with.
REFERENCE = {
    "CartPole-v1": 500.0,
    "Acrobot-v1": -80.0,
    "Pendulum-v1": -130.0,
    "MountainCar-v0": -118.0,
    "MountainCarContinuous-v0": 92.0,
    "gymnax:Breakout-MinAtar": 28.0,
    "gymnax:SpaceInvaders-MinAtar": 131.0,
}


def train_preset(env_id: str, seeds: int = 4, seed: int = 0, *, algo: str = "ppo", **overrides):
    """Trains `seeds` agents of `env_id`'s preset in one vmapped program, as a row does.

    Returns (config, result with a leading seed axis, compile_s, train_s, k_eval): the row
    evaluates with `fusedrl.evaluate(config, result, k_eval, episodes)`.
    """
    import fusedrl
    from fusedrl.train.presets import preset

    config = preset(env_id, algo=algo, **overrides)
    train = fusedrl.make_train(config)
    k_train, k_eval = jax.random.split(jax.random.key(seed))
    keys = jax.random.split(k_train, seeds)
    result, compile_s, train_s = compile_then_run(jax.jit(jax.vmap(train)), keys)
    return config, result, compile_s, train_s, k_eval


def run_preset(env_id: str, seeds: int = 4, episodes: int = 64, seed: int = 0, *, algo: str = "ppo",
               **overrides) -> dict:
    """Trains `seeds` agents of `env_id`'s preset of `algo` in one program and evaluates each greedily."""
    import fusedrl

    extra = {} if algo == "ppo" else {"algo": algo}
    config, result, compile_s, train_s, k_eval = train_preset(env_id, seeds, seed, **extra, **overrides)
    t_eval = time.perf_counter()
    returns = np.asarray(fusedrl.evaluate(config, result, k_eval, episodes))  # [seeds, episodes]
    eval_s = time.perf_counter() - t_eval
    per_seed = returns.mean(axis=1)
    k_sampled = jax.random.fold_in(k_eval, 1)
    sampled = np.asarray(fusedrl.evaluate(config, result, k_sampled, episodes, greedy=False)).mean(axis=1)
    train_ret = np.asarray(result.metrics["episode_return"])  # [seeds, num_updates]
    return {
        "env": env_id,
        "algo": algo,
        "env_steps": config.env_steps,
        "seeds": seeds,
        "episodes": episodes,
        "mean": float(per_seed.mean()),
        "std": float(per_seed.std()),
        "min_seed": float(per_seed.min()),
        "per_seed": [round(float(x), 1) for x in per_seed],
        "sampled_mean": float(sampled.mean()),
        "sampled_std": float(sampled.std()),
        "sampled_min_seed": float(sampled.min()),
        "sampled_per_seed": [round(float(x), 1) for x in sampled],
        "train_s": train_s,
        "compile_s": compile_s,
        "eval_s": eval_s,
        "reference": REFERENCE.get(env_id),
        "final_train_return": [round(float(x), 1) for x in train_ret[:, -1]],
        "overrides": {k: v for k, v in overrides.items()},
    }


def format_row(r: dict) -> str:
    ref = "-" if r["reference"] is None else f"{r['reference']:g}"
    per = ", ".join(f"{x:g}" for x in r["per_seed"])
    return (
        f"{r['env']:<30} {r['env_steps']:>11,} {r['seeds']:>5} "
        f"{r['mean']:>9.1f} ± {r['std']:<7.1f} {r['min_seed']:>9.1f}  [{per}]  "
        f"{r['train_s']:>8.1f} {r['compile_s']:>8.1f} {ref:>6}  "
        f"sampled {r['sampled_mean']:.1f} ± {r['sampled_std']:.1f} ({r['sampled_min_seed']:.1f})"
    )


HEADER = (
    f"{'env':<30} {'steps/seed':>11} {'seeds':>5} {'greedy mean ± std':>19} {'min seed':>9}  "
    f"[per-seed means]  {'train s':>8} {'compile s':>8} {'ref':>6}  sampled mean ± std (min seed)"
)


def _parse_set(items: Sequence[str]) -> dict:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set expects field=value, got {item!r}")
        try:
            out[name.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            out[name.strip()] = value.strip()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    from fusedrl.train.presets import ALGO_PRESETS, PRESETS

    p = argparse.ArgumentParser(
        prog="python -m fusedrl.bench presets", description=__doc__.splitlines()[0]
    )
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--env", help=f"env id among: {', '.join(PRESETS)}")
    g.add_argument("--all", action="store_true", help="every preset of --algo, in sequence")
    p.add_argument("--algo", choices=("ppo", "a2c", "reinforce"), default="ppo",
                   help="the algorithm whose presets to train (default ppo)")
    p.add_argument("--seeds", type=int, default=4, help="agents trained in one vmapped program")
    p.add_argument("--episodes", type=int, default=64, help="greedy evaluation episodes per seed")
    p.add_argument("--seed", type=seed_arg, default=0, help="root PRNG seed")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a preset field (repeatable); the row is then not the preset's")
    p.add_argument("--json", action="store_true", help="also print each row as JSON")
    args = p.parse_args(argv)
    if args.seeds < 1 or args.episodes < 1:
        p.error("--seeds and --episodes must be >= 1")
    table = PRESETS if args.algo == "ppo" else ALGO_PRESETS[args.algo]
    envs = list(table) if args.all else [args.env]
    if not args.all and args.env not in table:
        print(f"note: {args.env!r} has no {args.algo} preset; using its config's defaults", file=sys.stderr)
    overrides = _parse_set(args.set)
    print(f"{args.algo}: jax {jax.__version__}, {jax.devices()[0].platform}, {os.cpu_count()} CPUs "
          f"({cpu_model()}), load average {os.getloadavg()[0]:.1f}"
          + (f", overrides {overrides}" if overrides else ""))
    print(HEADER, flush=True)
    for env_id in envs:
        r = run_preset(env_id, args.seeds, args.episodes, args.seed, algo=args.algo, **overrides)
        print(format_row(r), flush=True)
        if args.json:
            print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
