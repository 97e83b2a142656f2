"""XLA's cost analysis of one PPO update, per env step: the work a training program asks of the device.

    python -m fusedrl.bench.cost [--rows cartpole,breakout] [--agents 1] [--compute-dtype float32]

Rows: `cartpole` is `fusedrl.preset("CartPole-v1")` (PureJaxRL's config: 4 envs x 128 steps, 4 epochs of
4 minibatches, 2x64 tanh), `breakout` PureJaxRL's MinAtar config (`fusedrl.bench.gpu.MINATAR`: 64 envs x
128 steps, 4 epochs of 8 minibatches, 2x64 relu). For `--agents` agents (`jax.vmap`), each phase
of one update is lowered and compiled for the default device (`update_cost` says which), and
`compiled.cost_analysis()`'s "flops" and "bytes accessed" are divided by the update's env steps
(agents x envs x steps).

XLA counts a while loop's body once, whatever its trip count: the rollout's step is therefore lowered
alone and multiplied by the steps, and the learning phase's loops (epochs, minibatches) are unrolled.
The figures are XLA's estimates for the programs it compiled on this device (its fusion decides
"bytes accessed"): compare rows of one device and jax version only. Prints a table and one JSON line per row.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

import jax

from fusedrl.bench.gpu import MINATAR


def row_config(row: str, compute_dtype: str = "float32"):
    import fusedrl

    if row == "cartpole":
        config = fusedrl.preset("CartPole-v1")
    elif row == "breakout":
        config = fusedrl.PPOConfig(**MINATAR)
    else:
        raise SystemExit(f"unknown row {row!r}: choose among cartpole, breakout.")
    return config.replace(compute_dtype=compute_dtype)


@contextlib.contextmanager
def unrolled_scans():
    """Every `jax.lax.scan` traced inside unrolls fully, so XLA's cost analysis counts each step."""
    scan = jax.lax.scan

    def unrolled(*args, **kwargs):
        kwargs["unroll"] = True
        return scan(*args, **kwargs)

    jax.lax.scan = unrolled
    try:
        yield
    finally:
        jax.lax.scan = scan


def _cost(fn, *args) -> tuple[float, float]:
    cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return float(cost.get("flops", float("nan"))), float(cost.get("bytes accessed", float("nan")))


def update_cost(config, agents: int = 1) -> dict:
    """XLA's flops and bytes accessed of one update of `agents` vmapped agents, per env step, by
    phase: `rollout` (one rollout step, lowered alone, times the rollout's steps: the policy's
    forward, the env's step and the value of the observation after it), `targets` (the algorithm's
    targets from the rollout; GAE's loop body counted once, a negligible part) and `learn` (every
    epoch's shuffle and every minibatch's loss forward, backward and optimiser step, with their
    loops unrolled)."""
    import fusedrl
    from fusedrl.train.losses import Batch
    from fusedrl.train.rollout import rollout
    from fusedrl.train.state import typed_key

    train = fusedrl.make_train(config)
    hparams = train.default_hparams()
    venv = train.make_env(hparams)
    keys = jax.random.split(typed_key(jax.random.key(0)), agents)
    state = jax.eval_shape(jax.vmap(lambda k: train.init(k, hparams)), keys)

    def one_step(s):
        return rollout(train.policy_step, s.params, venv, s.env_state, s.obs, s.policy_state,
                       hparams.env_params, s.key, num_steps=1, noise=train.noise, tuning=train.tuning,
                       reset_policy_state=train.reset_policy_state,
                       next_value=train.value_after_step if train.algorithm.bootstraps else None)

    traj = jax.eval_shape(jax.vmap(lambda s: train.rollout(s, hparams, venv, s.key)[1]), state)

    def targets(s, traj):
        return train.advantages(s.params, traj, hparams)

    def learn(s, traj):  # the trainer's flat batch (feed-forward networks), then its optimiser steps
        flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), traj)
        adv = flat.reward  # any [B] float32: the cost does not depend on the values
        batch = Batch(obs=flat.obs, action=flat.action, log_prob=flat.log_prob, value=flat.value,
                      advantage=adv, target=adv)
        return train.learn(s.params, s.opt_state, batch, hparams, s.key)

    steps = config.num_envs * config.num_steps
    phases = {"rollout": [c * config.num_steps for c in _cost(jax.vmap(one_step), state)],
              "targets": _cost(jax.vmap(targets), state, traj)}
    with unrolled_scans():
        phases["learn"] = _cost(jax.vmap(learn), state, traj)
    out = {}
    for name, (flops, nbytes) in phases.items():
        out[f"{name}_flops"] = flops / (agents * steps)
        out[f"{name}_bytes"] = nbytes / (agents * steps)
    out["flops_per_step"] = sum(out[f"{n}_flops"] for n in phases)
    out["bytes_per_step"] = sum(out[f"{n}_bytes"] for n in phases)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fusedrl.bench.cost", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="cartpole,breakout")
    parser.add_argument("--agents", type=int, default=1)
    parser.add_argument("--compute-dtype", default="float32", choices=("float32", "bfloat16"))
    args = parser.parse_args(argv)
    print(f"# jax {jax.__version__}, {jax.devices()[0].device_kind}, agents {args.agents}, "
          f"compute_dtype {args.compute_dtype}")
    print(f"{'row':<10} {'flops/step':>12} {'bytes/step':>12}   (rollout / targets / learn)")
    for row in args.rows.split(","):
        cost = update_cost(row_config(row, args.compute_dtype), args.agents)
        flops, nbytes = (" / ".join(f"{cost[f'{p}_{kind}']:.0f}" for p in ("rollout", "targets", "learn"))
                         for kind in ("flops", "bytes"))
        print(f"{row:<10} {cost['flops_per_step']:>12.0f} {cost['bytes_per_step']:>12.0f}   "
              f"flops {flops}; bytes {nbytes}")
        print(json.dumps({"row": row, "agents": args.agents, "compute_dtype": args.compute_dtype,
                          "jax": jax.__version__, "device": jax.devices()[0].device_kind, **cost}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
