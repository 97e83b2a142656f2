"""Kernel launches per PPO update, fusedrl beside PureJaxRL, compiled for a GPU with or without one.

    python -m fusedrl.bench launches [--rows cartpole-2048,breakout-256] [--target h200] [--updates 4]
        [--purejaxrl-src DIR --peer-python PYTHON [--peer-path DIR]] [--json]

Rows are `bench gpu`'s training rows (`ENV-N[-bf16][-vr]`: PureJaxRL's CartPole or MinAtar config at
N vmapped agents). Each side's program is compiled, not run, for `--target` (`default`: this
machine's device; `h100`, `h200`: that GPU, on a machine without one, through jax's CUDA plugin with
`JAX_PLATFORMS=cpu`; see `fusedrl.launches`), and its optimised HLO read for the kernels one update
launches (`fusedrl.launches.count_launches`): ours per phase, PureJaxRL's in total (its program has
no phase scopes), both with their loops. Ours is `--updates` updates of the trainer's run;
PureJaxRL's is its whole `train` at `--updates` updates, so its count includes its initialisation
(a few dozen launches, once). The ratio is PureJaxRL's launches over ours (> 1: ours launches fewer).
A launch count is not a time: it is what a GPU pays for in a program of small kernels (CartPole at
4 envs per agent), much less in one of large kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from fusedrl.bench.gpu import parse_row, ppo_config, purejaxrl_config, row_tuning, run_purejaxrl
from fusedrl.launches import GPU_TARGETS, count_launches, format_launches, program_launches


def purejaxrl_launches(env: str, agents: int, updates: int, target: str | None, peer) -> dict[str, Any]:
    """PureJaxRL's `train` at the row's config and `updates` updates, compiled in its peer process
    for `target`; its launches per update and loops, or {"error": ...}."""
    config = purejaxrl_config(env, smoke=False)
    total = updates * config["NUM_ENVS"] * config["NUM_STEPS"]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "purejaxrl.hlo.txt")
        ask = {"path": path, "target_config": GPU_TARGETS.get(target or "")}
        out = run_purejaxrl(env, agents, False, peer, {"FUSEDRL_PUREJAXRL_HLO": json.dumps(ask)},
                            attempts=1, total_timesteps=total)
        if "error" in out:
            return out
        with open(path, encoding="utf-8") as f:
            counted = count_launches(f.read())
    return {"device": out.get("device"), "total_per_update": counted.total / updates,
            "loops": counted.loop_rows()}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedrl.bench launches", description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="cartpole-2048,breakout-256",
                   help="training rows of `bench gpu` (default: %(default)s)")
    p.add_argument("--target", default="default", choices=["default", *sorted(GPU_TARGETS)],
                   help="compile for this machine's device, or for that GPU without one "
                        "(default: %(default)s)")
    p.add_argument("--updates", type=int, default=4,
                   help="updates in each program (default: %(default)s)")
    p.add_argument("--purejaxrl-src", default=None,
                   help="PureJaxRL's source folder, as for `bench gpu`")
    p.add_argument("--peer-python", default=sys.executable,
                   help="the interpreter with PureJaxRL's dependencies")
    p.add_argument("--peer-path", default=None, help="a folder put first on the peer's PYTHONPATH")
    p.add_argument("--peer-timeout", type=float, default=1200.0, help="seconds per peer compile")
    p.add_argument("--json", action="store_true", help="also print each row as a JSON line")
    args = p.parse_args(argv)
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    for name in rows:
        spec = parse_row(name)
        if spec is None or spec["kind"] != "train":
            p.error(f"--rows: {name!r} is not a training row (e.g. cartpole-2048, breakout-256-bf16)")
    if args.updates < 1:
        p.error("--updates must be >= 1")
    if args.purejaxrl_src and not os.path.isfile(os.path.join(args.purejaxrl_src, "purejaxrl", "ppo.py")):
        p.error(f"--purejaxrl-src {args.purejaxrl_src}: no purejaxrl/ppo.py in it")
    peer = SimpleNamespace(purejaxrl_src=args.purejaxrl_src, peer_python=args.peer_python,
                           peer_path=args.peer_path, peer_timeout=args.peer_timeout, total_timesteps=None)
    failed = False
    for name in rows:
        spec = parse_row(name)
        config = ppo_config(spec["env"], smoke=False, compute_dtype=spec["compute_dtype"])
        ours = program_launches(config, spec["agents"], args.updates, args.target, tuning=row_tuning(spec))
        print(f"== {name}")
        print(format_launches(ours))
        row = {"row": name, "ours": ours}
        if args.purejaxrl_src:
            if spec["compute_dtype"] != "float32" or spec["value_in_rollout"]:
                print(f"PureJaxRL: no {name} (its programs are float32 without value_in_rollout); "
                      f"compare with {name.split('-')[0]}-{spec['agents']}")
            else:
                theirs = purejaxrl_launches(spec["env"], spec["agents"], args.updates, args.target, peer)
                row["purejaxrl"] = theirs
                if "error" in theirs:
                    failed = True
                    print(f"PureJaxRL: error: {theirs['error'][-600:]}")
                else:
                    ratio = theirs["total_per_update"] / ours["total_per_update"]
                    row["ratio"] = ratio
                    loops = ", ".join(f"{lp['per_iteration']} x {lp['trip']}" for lp in theirs["loops"])
                    print(f"PureJaxRL: {theirs['total_per_update']:.0f} launches per update (incl. its "
                          f"initialisation / {args.updates}); loops (kernels x trip): {loops}")
                    print(f"{name}: PureJaxRL's launches / ours = {ratio:.2f}x")
        if args.json:
            print(json.dumps(row))
    return 1 if failed else 0


__all__ = ["main", "purejaxrl_launches"]

if __name__ == "__main__":
    raise SystemExit(main())
