"""Aggregate env steps/s of N vmapped CartPole PPO agents in one program (fusedrl.sweep).

    python -m fusedrl.bench sweep [--agents 1,8,64,256] [--num-updates 10] [--min-time 2] [--json]

Every agent runs PureJaxRL's CartPole config (4 envs x 128 steps, 4 epochs, 4 minibatches,
2x64 tanh, lr 2.5e-4 annealed) for `--num-updates` updates; N agents are the runs of one
`fusedrl.sweep` program (a vmap over keys and a swept learning rate, all equal here). Throughput
is the same for every update, so a short run measures it; total_timesteps only scales the time.

For each N the program is compiled first and that time is reported apart (`.lower().compile()`);
then the compiled program runs once untimed, and is timed over repeated calls until `--min-time`
seconds and at least `--repeats` calls have passed; the table reports the median call. Columns:
aggregate env steps/s (all agents), per agent steps/s, seconds per agent per 1M env steps, and
the speedup of aggregate steps/s over one agent. The machine may be shared: numbers are noisy.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence

import jax
import numpy as np

DEFAULT_AGENTS = (1, 8, 64, 256)


def _int_list(text: str) -> list[int]:
    error = argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise error from None
    if not values or min(values) < 1:
        raise error
    return values


def config_for(num_updates: int):
    """PureJaxRL's CartPole PPO config, shortened to `num_updates` updates."""
    from fusedrl.train import PPOConfig

    return PPOConfig(
        env_id="CartPole-v1", num_envs=4, num_steps=128, total_timesteps=num_updates * 4 * 128,
        update_epochs=4, num_minibatches=4, lr=2.5e-4, anneal_lr=True, gamma=0.99, gae_lambda=0.95,
        clip_eps=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, hidden_sizes=(64, 64),
        activation="tanh",
    )


def measure(num_agents: int, num_updates: int, min_time: float, repeats: int) -> dict:
    """Compile time and median execution time of `num_agents` agents in one sweep program."""
    import importlib

    # `fusedrl.sweep` is the public function; its module is reached through importlib.
    S = importlib.import_module("fusedrl.sweep")
    from fusedrl.train import make_train

    config = config_for(num_updates)
    devices = tuple(jax.devices())
    key = jax.random.key(0)
    program, sharding = S._program(S._static_part(config), (("lr", "hp"),), devices,
                                   str(jax.random.key_impl(key)), None, 1)
    padded = -(-num_agents // len(devices)) * len(devices)
    keys = np.asarray(jax.random.key_data(jax.random.split(key, padded)))
    args = (
        S._global_array(keys, sharding),
        {"lr": S._global_array(np.full(padded, config.lr, np.float32), sharding)},
        jax.tree.map(np.asarray, make_train(config).default_hparams()),
    )
    start = time.perf_counter()
    compiled = program.lower(*args).compile()
    compile_s = time.perf_counter() - start
    jax.block_until_ready(compiled(*args))  # warm-up: first-call allocations are not timed
    times: list[float] = []
    begin = time.perf_counter()
    while len(times) < repeats or time.perf_counter() - begin < min_time:
        t = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t)
    seconds = statistics.median(times)
    steps = num_agents * config.env_steps
    return {
        "agents": num_agents,
        "devices": len(devices),
        "env_steps_per_agent": config.env_steps,
        "compile_s": compile_s,
        "run_s": seconds,
        "calls": len(times),
        "sps": steps / seconds,
        "sps_per_agent": steps / seconds / num_agents,
        "s_per_agent_per_1m_steps": seconds / num_agents * 1e6 / config.env_steps,
    }


def format_table(rows: list[dict]) -> str:
    base = rows[0]["sps"] / rows[0]["agents"] if rows else math.nan
    header = ("agents", "compile s", "run s", "aggregate SPS", "SPS/agent", "s/agent/1M steps",
              "speedup vs 1")
    lines = [header]
    for r in rows:
        lines.append((
            str(r["agents"]), f"{r['compile_s']:.1f}", f"{r['run_s']:.3f}", f"{r['sps']:,.0f}",
            f"{r['sps_per_agent']:,.0f}", f"{r['s_per_agent_per_1m_steps']:.2f}",
            f"{r['sps'] / base:.1f}x",
        ))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedrl.bench sweep", description=__doc__.splitlines()[0])
    p.add_argument("--agents", type=_int_list, default=list(DEFAULT_AGENTS),
                   help="comma-separated agent counts (default 1,8,64,256)")
    p.add_argument("--num-updates", type=int, default=10, help="PPO updates per agent (default 10)")
    p.add_argument("--min-time", type=float, default=2.0, help="seconds of timed calls per count")
    p.add_argument("--repeats", type=int, default=1, help="at least this many timed calls per count")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.num_updates < 1 or args.repeats < 1:
        p.error("--num-updates and --repeats must be >= 1")
    print(f"jax {jax.__version__}, {jax.device_count()} {jax.devices()[0].platform} device(s); "
          f"CartPole-v1, 4 envs x 128 steps, 4 epochs x 4 minibatches, 2x64 tanh, "
          f"{args.num_updates} updates per agent", file=sys.stderr, flush=True)
    rows = []
    for n in args.agents:
        rows.append(measure(n, args.num_updates, args.min_time, args.repeats))
        r = rows[-1]
        print(f"  {n} agents: compile {r['compile_s']:.1f} s, {r['sps']:,.0f} env steps/s",
              file=sys.stderr, flush=True)
    print(json.dumps(rows, indent=2) if args.json else format_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
