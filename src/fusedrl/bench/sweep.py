"""Aggregate env steps/s of N CartPole PPO agents trained at once by `fusedrl.sweep`.

    python -m fusedrl.bench sweep [--agents 1,8,64,256] [--streams auto,1] [--num-updates 10]
                                  [--min-time 2] [--json]

Every agent runs PureJaxRL's CartPole config (4 envs x 128 steps, 4 epochs, 4 minibatches,
2x64 tanh, lr 2.5e-4 annealed) for `--num-updates` updates; N agents are the N seeds of one
`fusedrl.sweep` call. Throughput is the same for every update, so a short run measures it;
total_timesteps only scales the time.

`--streams` lists how the sweep executes, one table row per agent count and value: `auto` is
`sweep`'s default (on one CPU device, one host thread per usable core, each running its share of
the agents one after another), `1` is one vmapped program of all agents, k is k threads.

For each (N, streams) the first `sweep` call compiles and runs; its time minus that of a later
call is reported as compile time. Then calls are timed until `--min-time` seconds and at least
`--repeats` calls have passed; the table reports the median call (the whole public call: layout,
execution, results fetched to the host). Columns: aggregate env steps/s (all agents), per agent
steps/s, seconds per agent per 1M env steps, and the speedup of aggregate steps/s over one agent
of the same strategy. The machine may be shared: numbers are noisy.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence

import jax

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


def _streams_list(text: str) -> list[int | None]:
    error = argparse.ArgumentTypeError(f"expected comma-separated 'auto' or positive integers, got {text!r}")
    out: list[int | None] = []
    for t in (t.strip() for t in text.split(",")):
        if t == "auto":
            out.append(None)
        elif t.isdigit() and int(t) >= 1:
            out.append(int(t))
        elif t:
            raise error
    if not out:
        raise error
    return out


def measure(num_agents: int, num_updates: int, min_time: float, repeats: int,
            streams: int | None = None) -> dict:
    """First-call (compile) time and median call time of `fusedrl.sweep` over `num_agents` seeds."""
    from fusedrl import sweeps  # `sweeps.sweep` looked up at call time (tests replace it)
    from fusedrl.streams import resolve_streams

    config = config_for(num_updates)
    devices = tuple(jax.devices())

    def call():
        t = time.perf_counter()
        sweeps.sweep(config, num_agents, keep_state=False, streams=streams)
        return time.perf_counter() - t

    first = call()
    times: list[float] = []
    begin = time.perf_counter()
    while len(times) < repeats or time.perf_counter() - begin < min_time:
        times.append(call())
    seconds = statistics.median(times)
    steps = num_agents * config.env_steps
    return {
        "agents": num_agents,
        "streams": resolve_streams(streams, devices, num_agents),
        "devices": len(devices),
        "env_steps_per_agent": config.env_steps,
        "compile_s": max(first - seconds, 0.0),
        "run_s": seconds,
        "calls": len(times),
        "sps": steps / seconds,
        "sps_per_agent": steps / seconds / num_agents,
        "s_per_agent_per_1m_steps": seconds / num_agents * 1e6 / config.env_steps,
    }


def format_table(rows: list[dict]) -> str:
    base = {r["streams"]: r["sps"] / r["agents"] for r in rows if r["agents"] == 1}
    header = ("agents", "streams", "compile s", "run s", "aggregate SPS", "SPS/agent",
              "s/agent/1M steps", "speedup vs 1")
    lines = [header]
    for r in rows:
        one = base.get(r["streams"], base.get(1))
        lines.append((
            str(r["agents"]), str(r["streams"]), f"{r['compile_s']:.1f}", f"{r['run_s']:.3f}",
            f"{r['sps']:,.0f}", f"{r['sps_per_agent']:,.0f}", f"{r['s_per_agent_per_1m_steps']:.2f}",
            f"{r['sps'] / one:.1f}x" if one else "-",
        ))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedrl.bench sweep", description=__doc__.splitlines()[0])
    p.add_argument("--agents", type=_int_list, default=list(DEFAULT_AGENTS),
                   help="comma-separated agent counts (default 1,8,64,256)")
    p.add_argument("--streams", type=_streams_list, default=[None, 1],
                   help="comma-separated sweep strategies: auto (sweep's default), 1 (one vmap), "
                        "k threads (default auto,1)")
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
    from fusedrl.streams import resolve_streams

    rows = []
    for n in args.agents:
        done = set()
        for streams in args.streams:
            resolved = resolve_streams(streams, tuple(jax.devices()), n)
            if resolved in done:  # e.g. auto and 1 at one agent: the same program, measured once
                continue
            done.add(resolved)
            rows.append(measure(n, args.num_updates, args.min_time, args.repeats, streams))
            r = rows[-1]
            print(f"  {n} agents, {r['streams']} stream(s): compile {r['compile_s']:.1f} s, "
                  f"{r['sps']:,.0f} env steps/s", file=sys.stderr, flush=True)
    print(json.dumps(rows, indent=2) if args.json else format_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
