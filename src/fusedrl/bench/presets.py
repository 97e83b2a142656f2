"""Train each preset with N vmapped seeds, evaluate greedily, and compare with gymnax-blines.

    python -m fusedrl.bench presets --env Acrobot-v1 [--seeds 4] [--episodes 64]
    python -m fusedrl.bench presets --all
    python -m fusedrl.bench presets --env Pendulum-v1 --set total_timesteps=2_000_000 --set lr=1e-3
    python -m fusedrl.bench presets --algo a2c --env CartPole-v1     (A2C's and REINFORCE's presets)
    python -m fusedrl.bench presets --all --dtypes float32,bfloat16 --max-timesteps 500000 --greedy-only

Each env is one program: `jax.jit(jax.vmap(make_train(preset(env))))` over `--seeds` keys, compiled
apart (`.lower().compile()`, reported as compile time) and then run (reported as train time). Each
seed is then evaluated with `fusedrl.evaluate` on `--episodes` greedy (mode-action) episodes, with
its final observation statistics frozen and raw (unnormalised) rewards. The row gives the mean and
standard deviation across seeds of the per-seed greedy means, the worst seed, every seed's mean,
and the published gymnax-blines PPO return for the env. `--set field=value` overrides a preset
field (for tuning; a row measured with overrides is not the preset's).

The same policies are also evaluated with sampled actions on as many episodes (its own key), the
way gymnax-blines evaluates (`pi.sample` in its `RolloutManager.batch_evaluate`), so its returns
are compared like with like: the row's "sampled" mean ± std and worst seed (`--greedy-only` skips
it, and its compile).

`--dtypes float32,bfloat16` trains each env once per `compute_dtype`, from the same keys (the same
initial parameters and env randomness: a paired comparison), and prints after each env's rows one
line comparing them: the difference of the greedy means and of the IQMs (the mean of the middle
half of the per-seed means, `fusedrl.plotting.iqm`), and that difference over its standard error
(the per-seed means' spread on both sides). `--max-timesteps N` caps every preset's
`total_timesteps` at N (a shorter run than the preset's, for a machine that cannot afford it; the
row reports the steps it ran). `--env` repeats: `--env CartPole-v1 --env Acrobot-v1`.
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
               sampled: bool = True, **overrides) -> dict:
    """Trains `seeds` agents of `env_id`'s preset of `algo` in one program and evaluates each greedily
    (and with sampled actions unless `sampled` is False: the row's sampled fields are then None)."""
    import fusedrl
    from fusedrl.plotting import iqm

    extra = {} if algo == "ppo" else {"algo": algo}
    config, result, compile_s, train_s, k_eval = train_preset(env_id, seeds, seed, **extra, **overrides)
    t_eval = time.perf_counter()
    returns = np.asarray(fusedrl.evaluate(config, result, k_eval, episodes))  # [seeds, episodes]
    eval_s = time.perf_counter() - t_eval
    per_seed = returns.mean(axis=1)
    sampled_means = None
    if sampled:
        k_sampled = jax.random.fold_in(k_eval, 1)
        sampled_means = np.asarray(
            fusedrl.evaluate(config, result, k_sampled, episodes, greedy=False)).mean(axis=1)
    some = sampled_means is not None
    train_ret = np.asarray(result.metrics["episode_return"])  # [seeds, num_updates]
    return {
        "env": env_id,
        "algo": algo,
        "env_steps": config.env_steps,
        "compute_dtype": getattr(config, "compute_dtype", "float32"),
        "seeds": seeds,
        "episodes": episodes,
        "mean": float(per_seed.mean()),
        "std": float(per_seed.std()),
        "min_seed": float(per_seed.min()),
        "iqm": float(iqm(per_seed)),
        "per_seed": [round(float(x), 1) for x in per_seed],
        "sampled_mean": float(sampled_means.mean()) if some else None,
        "sampled_std": float(sampled_means.std()) if some else None,
        "sampled_min_seed": float(sampled_means.min()) if some else None,
        "sampled_per_seed": [round(float(x), 1) for x in sampled_means] if some else None,
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
    sampled = ("sampled -" if r["sampled_mean"] is None else
               f"sampled {r['sampled_mean']:.1f} ± {r['sampled_std']:.1f} ({r['sampled_min_seed']:.1f})")
    dtype = "" if r.get("compute_dtype", "float32") == "float32" else f", {r['compute_dtype']}"
    return (
        f"{r['env'] + dtype:<30} {r['env_steps']:>11,} {r['seeds']:>5} "
        f"{r['mean']:>9.1f} ± {r['std']:<7.1f} {r['iqm']:>9.1f} {r['min_seed']:>9.1f}  [{per}]  "
        f"{r['train_s']:>8.1f} {r['compile_s']:>8.1f} {ref:>6}  {sampled}"
    )


HEADER = (
    f"{'env':<30} {'steps/seed':>11} {'seeds':>5} {'greedy mean ± std':>19} {'IQM':>9} {'min seed':>9}  "
    f"[per-seed means]  {'train s':>8} {'compile s':>8} {'ref':>6}  sampled mean ± std (min seed)"
)


def compare_dtypes(base: dict, other: dict) -> dict:
    """The paired comparison of two rows of one env (`base` float32, `other` e.g. bfloat16): the
    differences of their greedy means and IQMs, and `z`, the means' difference over its standard
    error (Welch's: each side's sample variance of its per-seed means over the seeds; `std` is the
    population one, so `sqrt((std_a^2 + std_b^2) / (seeds - 1))`; None with one seed or when every
    seed of both sides scored alike). The seeds of one side are independent runs, so |z| well above
    2 says the dtype changed the result; below it, this many seeds cannot tell."""
    diff = other["mean"] - base["mean"]
    n = base["seeds"]
    se = float(np.sqrt((base["std"] ** 2 + other["std"] ** 2) / (n - 1))) if n > 1 else 0.0
    return {
        "env": base["env"], "algo": base["algo"], "env_steps": base["env_steps"],
        "dtypes": [base["compute_dtype"], other["compute_dtype"]],
        "mean": [base["mean"], other["mean"]], "iqm": [base["iqm"], other["iqm"]],
        "mean_diff": diff, "iqm_diff": other["iqm"] - base["iqm"],
        "z": diff / se if se > 0 else None,
        "train_s": [base["train_s"], other["train_s"]],
    }


def format_comparison(c: dict) -> str:
    a, b = c["dtypes"]
    z = "-" if c["z"] is None else f"{c['z']:+.1f}"
    return (f"  {b} - {a}: mean {c['mean'][1]:.1f} - {c['mean'][0]:.1f} = {c['mean_diff']:+.1f}, "
            f"IQM {c['iqm'][1]:.1f} - {c['iqm'][0]:.1f} = {c['iqm_diff']:+.1f}, z {z}; "
            f"train s {c['train_s'][1]:.1f} / {c['train_s'][0]:.1f}")


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
    from fusedrl.train.presets import ALGO_PRESETS, PRESETS, preset_fields

    p = argparse.ArgumentParser(
        prog="python -m fusedrl.bench presets", description=__doc__.splitlines()[0]
    )
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--env", action="append",
                   help=f"env id (repeatable) among: {', '.join(PRESETS)}")
    g.add_argument("--all", action="store_true", help="every preset of --algo, in sequence")
    p.add_argument("--algo", choices=("ppo", "a2c", "reinforce"), default="ppo",
                   help="the algorithm whose presets to train (default ppo)")
    p.add_argument("--seeds", type=int, default=4, help="agents trained in one vmapped program")
    p.add_argument("--episodes", type=int, default=64, help="greedy evaluation episodes per seed")
    p.add_argument("--seed", type=seed_arg, default=0, help="root PRNG seed")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a preset field (repeatable); the row is then not the preset's")
    p.add_argument("--json", action="store_true", help="also print each row as JSON")
    p.add_argument("--dtypes", type=_dtypes_arg, default=None, metavar="D1,D2",
                   help="train each env once per compute_dtype, from the same keys, and compare "
                        "(e.g. float32,bfloat16; default: the preset's own)")
    p.add_argument("--max-timesteps", type=int, default=None, metavar="N",
                   help="cap every preset's total_timesteps at N (the row reports the steps run)")
    p.add_argument("--greedy-only", action="store_true",
                   help="skip the sampled-action evaluation (and its compile)")
    args = p.parse_args(argv)
    if args.seeds < 1 or args.episodes < 1:
        p.error("--seeds and --episodes must be >= 1")
    if args.max_timesteps is not None and args.max_timesteps < 1:
        p.error(f"--max-timesteps must be >= 1, got {args.max_timesteps}")
    table = PRESETS if args.algo == "ppo" else ALGO_PRESETS[args.algo]
    envs = list(table) if args.all else args.env
    overrides = _parse_set(args.set)
    if args.dtypes and "compute_dtype" in overrides:
        p.error("--dtypes sets compute_dtype: drop --set compute_dtype=...")
    for env_id in envs:
        if env_id not in table:
            print(f"note: {env_id!r} has no {args.algo} preset; using its config's defaults", file=sys.stderr)
    print(f"{args.algo}: jax {jax.__version__}, {jax.devices()[0].platform}, {os.cpu_count()} CPUs "
          f"({cpu_model()}), load average {os.getloadavg()[0]:.1f}"
          + (f", overrides {overrides}" if overrides else "")
          + (f", total_timesteps capped at {args.max_timesteps:,}" if args.max_timesteps else ""))
    print(HEADER, flush=True)
    for env_id in envs:
        fields = dict(overrides)
        if args.max_timesteps is not None:
            budget = fields.get("total_timesteps", preset_fields(env_id, args.algo).get("total_timesteps"))
            fields["total_timesteps"] = min(args.max_timesteps, budget or args.max_timesteps)
        rows = []
        for dtype in args.dtypes or [None]:
            extra = {} if dtype is None else {"compute_dtype": dtype}
            r = run_preset(env_id, args.seeds, args.episodes, args.seed, algo=args.algo,
                           sampled=not args.greedy_only, **fields, **extra)
            rows.append(r)
            print(format_row(r), flush=True)
            if args.json:
                print(json.dumps(r), flush=True)
        for other in rows[1:]:
            c = compare_dtypes(rows[0], other)
            print(format_comparison(c), flush=True)
            if args.json:
                print(json.dumps({"comparison": c}), flush=True)
    return 0


def _dtypes_arg(text: str) -> list[str]:
    dtypes = [d.strip() for d in text.split(",") if d.strip()]
    bad = [d for d in dtypes if d not in ("float32", "bfloat16")]
    if bad or len(dtypes) < 2 or len(set(dtypes)) != len(dtypes):
        raise argparse.ArgumentTypeError(
            f"expected two or more distinct dtypes among float32, bfloat16 (comma-separated), got {text!r}")
    return dtypes


if __name__ == "__main__":
    sys.exit(main())
