"""PPO training throughput (env steps/s) and compile time at PureJaxRL's CartPole configs.

    python -m fusedrl.bench ppo [--configs default,seeds8,wide] [--repeats 3] [--timesteps CONFIG=N]
                                [--peer-python .peers-venv/bin/python [--purejaxrl-src DIR
                                 [--purejaxrl-configs default,seeds8,wide]]]

Configs (CartPole-v1, 4 epochs, 4 minibatches, lr 2.5e-4, 2x64 tanh, 5e5 steps per agent):
  default  1 seed,  4 envs x 128 steps
  seeds8   8 seeds vmapped, 4 envs x 128 steps (aggregate steps/s)
  wide     1 seed,  2048 envs x 16 steps
  seeds64  64 seeds vmapped, 4 envs x 128 steps (not run by default: the many-agents goal of
           `python -m fusedrl.bench sweep`, here against the peer; give it fewer steps, e.g.
           `--timesteps seeds64=51200`)
  recurrent  1 seed, 4 envs x 128 steps, recurrent PPO at the config of PureJaxRL's `ppo_rnn.py`:
           a 128-unit GRU between 128-wide ReLU layers (embedding; actor and critic heads), the
           minibatches whole envs (not run by default; rejax has no recurrent PPO, so only
           PureJaxRL's `purejaxrl/ppo_rnn.py` runs beside ours)

Compile time is measured apart (`.lower().compile()`); steps/s times execution only. Ours runs
seeds as the peers do (`jax.jit(jax.vmap(train))`, "fusedrl") and, at the multi-seed configs,
also through `fusedrl.sweep` ("fusedrl-sweep": on one CPU device, one host thread per core; its
first call compiles and runs, the second is timed and the difference is its compile time). With
`--peer-python`, the peer script `../shared/peers/rejax_ppo.py` runs in that interpreter for each
config; with `--purejaxrl-src DIR` as well, PureJaxRL's own `purejaxrl/ppo.py` (from DIR, run by
`fusedrl/bench/_purejaxrl_peer.py` in the same interpreter) runs too. Every repeat runs all
implementations in fresh processes, in rotating order, and the table adds the ratio of medians
against each peer. The machine is noisy: only ratios measured in the same run mean anything.

`--grid` compares checkouts instead, across the speed rule's sizes: with one `--baseline-python`
or more (interpreters of other fusedrl checkouts), every implementation gets a process of its own
that stays up; per cell (vmapped agents x envs per agent, `--grid-cells`) each compiles once, then
they run alternately `--repeats` times (rotating order, after one warm-up each), and the row gives
the median seconds and ratio of medians against the first (this interpreter's) and the ratio of the
fastest runs. Only this interpreter's own fusedrl and the public API (`PPOConfig`, `make_train`)
are used in the workers, so any checkout can be the baseline.

    python -m fusedrl.bench ppo --grid --baseline-python ../base/.venv/bin/python --repeats 5

With seeds8 and seeds64 in one run, it also prints the many-agents goal of issue 5: our
aggregate steps/s at 64 agents over PureJaxRL's (and rejax's) at 8 vmapped seeds, and over
rejax's at 64. `--purejaxrl-configs seeds8` skips PureJaxRL elsewhere (it hung at 64 seeds here).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence

import jax
import numpy as np

from fusedrl.bench._timing import compile_then_run, cpu_model

CONFIGS = {
    "default": dict(seeds=1, num_envs=4, num_steps=128),
    "seeds8": dict(seeds=8, num_envs=4, num_steps=128),
    "wide": dict(seeds=1, num_envs=2048, num_steps=16),
    "seeds64": dict(seeds=64, num_envs=4, num_steps=128),
    "recurrent": dict(seeds=1, num_envs=4, num_steps=128, network="gru"),
}
#: Peers that have no recurrent PPO: they sit out the configs with network="gru".
FEEDFORWARD_ONLY = ("rejax",)
DEFAULT_CONFIGS = "default,seeds8,wide"
OURS = ("fusedrl", "fusedrl-sweep")  # jax.vmap(train) over seeds; fusedrl.sweep (multi-seed configs)
PEER_SCRIPT = os.path.join(
    os.path.dirname(__file__), "..", "..", "..", "..", "shared", "peers", "rejax_ppo.py"
)
PUREJAXRL_RUNNER = os.path.join(os.path.dirname(__file__), "_purejaxrl_peer.py")


def _config(num_envs: int, num_steps: int, total: int, network: str = "mlp"):
    """PureJaxRL's `ppo.py` config ("mlp": 2x64 tanh), or its `ppo_rnn.py` config ("gru": a Dense(128)
    ReLU embedding, a 128-unit GRU, then 128-wide ReLU actor and critic layers: our recurrent
    network with hidden_sizes (128, 128)); the PPO numbers are the same in both scripts."""
    from fusedrl.train import PPOConfig

    network_fields = (dict(hidden_sizes=(64, 64), activation="tanh") if network == "mlp" else
                      dict(recurrent="gru", recurrent_size=128, hidden_sizes=(128, 128), activation="relu"))
    return PPOConfig(
        env_id="CartPole-v1",
        num_envs=num_envs,
        num_steps=num_steps,
        total_timesteps=total,
        update_epochs=4,
        num_minibatches=4,
        lr=2.5e-4,
        **network_fields,
    )


def run_ours(seeds: int, num_envs: int, num_steps: int, total: int, network: str = "mlp") -> dict:
    """`jax.jit(jax.vmap(train))` over `seeds` keys: the way the peers run seeds."""
    from fusedrl.train import make_train

    config = _config(num_envs, num_steps, total, network)
    train = make_train(config)
    keys = jax.random.split(jax.random.key(0), seeds)
    result, compile_s, train_s = compile_then_run(jax.jit(jax.vmap(train)), keys)
    steps = config.env_steps * seeds
    ret = float(np.asarray(result.metrics["episode_return"])[:, -1].mean())
    return {"impl": "fusedrl", "compile_s": compile_s, "train_s": train_s, "sps": steps / train_s, "ret": ret}


def run_ours_sweep(seeds: int, num_envs: int, num_steps: int, total: int) -> dict:
    """`fusedrl.sweep(config, seeds)`: our way to train many seeds (on one CPU device, one host
    thread per core, each running its share of the seeds one after another). The first call
    compiles and runs; the second (other seeds, same program) is timed as the run, and the
    difference is reported as compile time."""
    import time

    from fusedrl.sweeps import sweep

    config = _config(num_envs, num_steps, total)
    t0 = time.perf_counter()
    sweep(config, seeds, keep_state=False, key=jax.random.key(1))
    t1 = time.perf_counter()
    result = sweep(config, seeds, keep_state=False, key=jax.random.key(0))
    t2 = time.perf_counter()
    steps = config.env_steps * seeds
    ret = float(result.metrics["episode_return"][:, -1].mean())
    return {"impl": "fusedrl-sweep", "compile_s": max((t1 - t0) - (t2 - t1), 0.0), "train_s": t2 - t1,
            "sps": steps / (t2 - t1), "ret": ret}


def run_peer(
    python: str, script: str, seeds: int, num_envs: int, num_steps: int, total: int,
    env: dict[str, str] | None = None, timeout: float = 900, attempts: int = 3, network: str = "mlp",
) -> dict:
    """One peer run in a fresh process; its JSON line, plus "hangs": runs killed at `timeout`.
    `network` other than "mlp" goes to the script as a fifth argument (PureJaxRL's runner: "gru").

    A run that passes `timeout` is killed and retried (up to `attempts` runs in all; if every one
    hangs, the result is {"hung": True, "hangs": attempts} and the table says "hung"): vmapped
    PureJaxRL hung here at 8 and at 64 seeds (no CPU use for minutes; gdb showed its threads
    waiting in jax::ParallelBatchMap of jaxlib's _lapack.so, the batched QR of its vmapped
    orthogonal initialiser), a 2-core hazard our own initialiser avoids (tests/test_networks.py).
    """
    hangs = 0
    for _ in range(attempts):
        try:
            out = subprocess.run(
                [python, script, str(seeds), str(num_envs), str(num_steps), str(total)]
                + ([network] if network != "mlp" else []),
                capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
            )
        except subprocess.TimeoutExpired:
            hangs += 1
            print(f"# {os.path.basename(script)} passed {timeout:.0f} s: killed, retrying", flush=True)
            continue
        if out.returncode:
            raise RuntimeError(f"peer {script} failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
        return {**json.loads(out.stdout.strip().splitlines()[-1]), "hangs": hangs}
    print(f"# {os.path.basename(script)} passed {timeout:.0f} s in all {attempts} attempts", flush=True)
    return {"hung": True, "hangs": hangs}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedrl.bench ppo", description=__doc__.splitlines()[0])
    p.add_argument(
        "--configs", default=DEFAULT_CONFIGS, help="comma-separated among " + ",".join(CONFIGS)
    )
    p.add_argument("--total-timesteps", type=int, default=500_000, help="env steps per agent")
    p.add_argument(
        "--timesteps", action="append", default=[], metavar="CONFIG=N",
        help="env steps per agent for one config, overriding --total-timesteps (repeatable)",
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--peer-python", default=None, help="interpreter with rejax installed (../shared/peers)")
    p.add_argument("--peer-script", default=os.path.normpath(PEER_SCRIPT),
                   help="rejax's runner (default: shared/peers/rejax_ppo.py beside this repository's folder)")
    p.add_argument("--peer-timeout", type=float, default=300, help="seconds until a peer run counts as hung")
    p.add_argument(
        "--purejaxrl-src", default=None,
        help="folder with purejaxrl/ppo.py and wrappers.py (needs --peer-python; see _purejaxrl_peer.py)",
    )
    p.add_argument(
        "--baseline-python", default=None, action="append",
        help="interpreter of another fusedrl checkout (e.g. a venv of the previous commit): runs as "
             "'baseline' (and 'baseline-sweep'), alternating with ours, with the ratios; with --grid, "
             "repeatable (baseline, baseline2, ...)",
    )
    p.add_argument("--grid", action="store_true",
                   help="compare with --baseline-python across --grid-cells, each compiled once per process")
    p.add_argument("--grid-cells", default=GRID_CELLS, help=f"AGENTSxENVS,... (default {GRID_CELLS})")
    p.add_argument("--transitions", type=int, default=2**17,
                   help="--grid: env steps of all agents per timed call, about (1 to 128 updates)")
    p.add_argument(
        "--purejaxrl-configs", default=None,
        help="configs at which PureJaxRL runs (default: all of --configs)",
    )
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats must be >= 1, got {args.repeats}")
    baselines = args.baseline_python or []
    for python in baselines:
        if not os.path.isfile(python):
            p.error(f"--baseline-python {python}: no such file")
    if args.grid:
        if not baselines:
            p.error("--grid compares checkouts: give --baseline-python (one or more)")
        pythons = {"fusedrl": sys.executable, **{f"baseline{i + 1 if i else ''}": python
                                                 for i, python in enumerate(baselines)}}
        print(f"jax {jax.__version__}, {os.cpu_count()} CPUs ({cpu_model()}), {args.repeats} repeats; "
              f"ratio = implementation's seconds / fusedrl's (> 1: fusedrl faster); "
              + ", ".join(f"{k} {v}" for k, v in pythons.items()), flush=True)
        rows = grid(pythons, _grid_cells(p, args.grid_cells), args.repeats, args.transitions)
        print(f"\n{'agents':>6} {'envs':>5} {'steps':>5} {'upd':>4} "
              + " ".join(f"{k + ' s':>12}" for k in pythons)
              + "".join(f" {'ratio ' + k:>16} {'min ' + k:>14}" for k in list(pythons)[1:]))
        for row in rows:
            print(f"{row['agents']:>6} {row['envs']:>5} {row['steps']:>5} {row['updates']:>4} "
                  + " ".join(f"{row['median_s'][k]:>12.3f}" for k in pythons)
                  + "".join(f" {row['ratio_' + k]:>16.3f} {row['min_ratio_' + k]:>14.3f}"
                            for k in list(pythons)[1:]))
        return 0
    if len(baselines) > 1:
        p.error("--baseline-python: one, except with --grid")
    args.baseline_python = baselines[0] if baselines else None
    names = _config_names(p, args.configs, "--configs")
    pjx_names = names if args.purejaxrl_configs is None else _config_names(
        p, args.purejaxrl_configs, "--purejaxrl-configs")
    if args.purejaxrl_src and not args.peer_python:
        p.error("--purejaxrl-src needs --peer-python (PureJaxRL runs in the peers' interpreter)")
    if args.purejaxrl_configs is not None:
        if not args.purejaxrl_src:
            p.error("--purejaxrl-configs needs --purejaxrl-src")
        if set(pjx_names) - set(names):
            p.error(f"--purejaxrl-configs {sorted(set(pjx_names) - set(names))} are not among --configs")
    # Each implementation: label -> function(config name, config) -> result dict.
    totals = {name: args.total_timesteps for name in names}
    for item in args.timesteps:
        name, _, n = item.partition("=")
        if name not in totals or not n.isdigit() or int(n) < 1:
            p.error(f"--timesteps {item!r}: expected CONFIG=N with CONFIG among --configs "
                    f"({', '.join(names)}) and N a positive integer")
        totals[name] = int(n)
    # Missing peer files are reported now, not after minutes of our own runs.
    if args.peer_python:
        if not os.path.isfile(args.peer_python):
            p.error(f"--peer-python {args.peer_python}: no such file; make the peers' interpreter with "
                    f"../shared/peers/setup.sh DIR and pass DIR/bin/python")
        if not os.path.isfile(args.peer_script):
            p.error(f"--peer-script {args.peer_script}: no such file (the default looks for "
                    f"shared/peers/rejax_ppo.py beside the folder that holds this repository); pass "
                    f"its path, e.g. --peer-script ../shared/peers/rejax_ppo.py")
    for script, needed in (("ppo.py", any(CONFIGS[n].get("network", "mlp") == "mlp" for n in pjx_names)),
                           ("ppo_rnn.py", any(CONFIGS[n].get("network") == "gru" for n in pjx_names))):
        if args.purejaxrl_src and needed and not os.path.isfile(
                os.path.join(args.purejaxrl_src, "purejaxrl", script)):
            p.error(f"--purejaxrl-src {args.purejaxrl_src}: no purejaxrl/{script} in it (see "
                    f"fusedrl/bench/_purejaxrl_peer.py for what the folder holds)")
    impls = {
        "fusedrl": lambda name, cfg: _subprocess_ours(cfg, totals[name]),
        "fusedrl-sweep": lambda name, cfg: _subprocess_ours(cfg, totals[name], "run_ours_sweep"),
    }
    if args.baseline_python:
        impls["baseline"] = lambda name, cfg: _subprocess_ours(cfg, totals[name], python=args.baseline_python)
        impls["baseline-sweep"] = lambda name, cfg: _subprocess_ours(
            cfg, totals[name], "run_ours_sweep", python=args.baseline_python)
    if args.peer_python:
        impls["rejax"] = lambda name, cfg: run_peer(
            args.peer_python, args.peer_script, **cfg, total=totals[name], timeout=args.peer_timeout,
        )  # never at a recurrent config (FEEDFORWARD_ONLY)
    if args.purejaxrl_src:
        src = os.path.abspath(args.purejaxrl_src)
        impls["purejaxrl"] = lambda name, cfg: run_peer(
            args.peer_python, PUREJAXRL_RUNNER, **cfg, total=totals[name],
            env={"PUREJAXRL_SRC": src}, timeout=args.peer_timeout,
        )
    print(
        f"jax {jax.__version__}, devices {jax.devices()}, {os.cpu_count()} CPUs ({cpu_model()}), "
        f"steps per agent {totals}, {args.repeats} repeats"
    )
    labels = list(impls)
    rows = []
    for name in names:
        cfg = CONFIGS[name]
        recurrent = cfg.get("network", "mlp") != "mlp"
        here = [label for label in labels if (label != "purejaxrl" or name in pjx_names)
                and (not label.endswith("-sweep") or cfg["seeds"] > 1)
                and not (recurrent and label in FEEDFORWARD_ONLY)]
        runs: dict[str, list[dict]] = {label: [] for label in here}
        for r in range(args.repeats):
            # Rotate the order every repeat, so no implementation always runs first or last.
            for label in here[r % len(here):] + here[: r % len(here)]:
                runs[label].append(impls[label](name, cfg))  # each in a fresh process: no warm caches
        row = {"config": name, **cfg, "total_timesteps": totals[name]}
        for label, rs in runs.items():
            done = [x for x in rs if not x.get("hung")]
            row[label] = {"hangs": sum(x.get("hangs", 0) for x in rs)}
            if done:  # medians over the runs that finished (a repeat that hung in every attempt is left out)
                row[label].update(
                    sps=statistics.median(x["sps"] for x in done),
                    compile_s=statistics.median(x["compile_s"] for x in done),
                    ret=statistics.median(x["ret"] for x in done),
                    sps_runs=[round(x["sps"]) for x in done],
                )
        for label in here:
            if label not in OURS and "sps" in row[label]:
                for ours in OURS:
                    if ours in row:
                        row[f"ratio_{ours}_vs_{label}"] = row[ours]["sps"] / row[label]["sps"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    print()
    print(f"{'config':<8} {'impl':<13} {'compile s':>9} {'steps/s':>10} {'final ret':>9}")
    for row in rows:
        for label in labels:
            if label not in row:
                continue
            r = row[label]
            if "sps" not in r:
                print(f"{row['config']:<8} {label:<13} {'hung in every attempt':>30}")
                continue
            print(
                f"{row['config']:<8} {label:<13} {r['compile_s']:>9.1f} {r['sps']:>10.0f} {r['ret']:>9.1f}"
            )
        for ours in OURS:
            for label in labels:
                if f"ratio_{ours}_vs_{label}" in row:
                    print(
                        f"{row['config']:<8} ratio {ours}/{label} steps/s (median of runs): "
                        f"{row[f'ratio_{ours}_vs_{label}']:.2f}x"
                    )
    for line in many_agents_goal(rows):
        print(line)
    return 0


#: `--grid`'s default cells, "AGENTSxENVS": the corners and middle of the speed rule's 1-64 agents
#: and 4-2048 envs per agent.
GRID_CELLS = "1x4,64x4,8x64,1x2048,64x2048"
#: Steps per rollout by envs per agent (PureJaxRL's 128 at 4 envs, shorter for more envs).
GRID_STEPS = {4: 128, 16: 64, 64: 32, 256: 16, 512: 8, 1024: 8, 2048: 4}

#: The worker of `--grid`: reads JSON commands on stdin, one per line, and answers each with a
#: JSON line: {"cell": [agents, envs, steps, updates]} compiles that cell's program (the
#: `bench ppo` CartPole config, `jax.jit(jax.vmap(train))` over agents) and answers its compile
#: seconds; {"run": 1} runs it once and answers the seconds.
_GRID_WORKER = """
import json, sys, time
import jax
from fusedrl import PPOConfig, make_train
prog = None
for line in sys.stdin:
    cmd = json.loads(line)
    t = time.perf_counter()
    if "cell" in cmd:
        agents, envs, steps, updates = cmd["cell"]
        config = PPOConfig(env_id="CartPole-v1", num_envs=envs, num_steps=steps,
                           total_timesteps=envs * steps * updates, update_epochs=4, num_minibatches=4,
                           lr=2.5e-4, hidden_sizes=(64, 64), activation="tanh")
        keys = jax.random.split(jax.random.key(0), agents)
        prog = jax.jit(jax.vmap(make_train(config))).lower(keys).compile()
    else:
        jax.block_until_ready(prog(keys))
    print(json.dumps({"s": time.perf_counter() - t, "jax": jax.__version__}), flush=True)
"""


def grid(pythons: dict[str, str], cells: list[tuple[int, int]], repeats: int, transitions: int) -> list[dict]:
    """`--grid`: each implementation (label -> interpreter) in a process of its own; per cell one
    compile each (all at once), then `repeats` alternating timed runs after a warm-up. Rows of median seconds,
    ratios of medians and of minimums against the first implementation."""
    procs = {label: subprocess.Popen([python, "-c", _GRID_WORKER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=os.path.expanduser("~"))
             for label, python in pythons.items()}

    def send(label, cmd):
        procs[label].stdin.write(json.dumps(cmd) + "\n")
        procs[label].stdin.flush()

    def answer(label):
        line = procs[label].stdout.readline()
        if not line:
            raise RuntimeError(f"--grid: the {label} worker ({pythons[label]}) exited")
        return json.loads(line)

    def ask(label, cmd):
        send(label, cmd)
        return answer(label)

    labels, rows = list(procs), []
    try:
        for agents, envs in cells:
            steps = GRID_STEPS.get(envs, 4)
            updates = max(1, min(128, transitions // (agents * envs * steps)))
            for label in labels:  # the workers compile at the same time
                send(label, {"cell": [agents, envs, steps, updates]})
            compile_s = {label: answer(label)["s"] for label in labels}
            times: dict[str, list[float]] = {label: [] for label in labels}
            for r in range(repeats + 1):
                for label in labels[r % len(labels):] + labels[:r % len(labels)]:
                    t = ask(label, {"run": 1})["s"]
                    if r:  # the first round warms up
                        times[label].append(t)
            first = labels[0]
            row = {"agents": agents, "envs": envs, "steps": steps, "updates": updates,
                   "compile_s": compile_s, "median_s": {k: statistics.median(v) for k, v in times.items()},
                   "runs_s": times}
            for label in labels[1:]:
                row[f"ratio_{label}"] = row["median_s"][label] / row["median_s"][first]
                row[f"min_ratio_{label}"] = min(times[label]) / min(times[first])
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        for proc in procs.values():
            proc.stdin.close()
            proc.wait(timeout=60)
            proc.stdout.close()
    return rows


def _grid_cells(p: argparse.ArgumentParser, text: str) -> list[tuple[int, int]]:
    cells = []
    for item in text.split(","):
        a, _, e = item.strip().partition("x")
        if not (a.isdigit() and e.isdigit() and int(a) > 0 and int(e) > 0):
            p.error(f"--grid-cells: {item!r} is not AGENTSxENVS (e.g. 8x64)")
        cells.append((int(a), int(e)))
    return cells


def many_agents_goal(rows: list[dict]) -> list[str]:
    """Issue 5's goal from one run's rows: our aggregate steps/s at 64 agents (seeds64; each of
    our ways that ran) over each peer's at 8 vmapped seeds (seeds8) and at 64; empty unless both
    configs were run."""
    by = {row["config"]: row for row in rows}
    if "seeds8" not in by or "seeds64" not in by:
        return []
    lines = []
    for ours in OURS:
        mine = by["seeds64"].get(ours, {})
        if "sps" not in mine:
            continue
        lines += ["", f"many agents: {ours} at 64 agents {mine['sps']:,.0f} aggregate steps/s"]
        for config in ("seeds8", "seeds64"):
            for label, r in by[config].items():
                if isinstance(r, dict) and label not in OURS and "sps" in r:
                    lines.append(f"  {mine['sps'] / r['sps']:.2f}x {label} at {config} ({r['sps']:,.0f})")
    return lines


def _config_names(p: argparse.ArgumentParser, text: str, flag: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in CONFIGS]
    if bad or not names:
        p.error(f"{flag}: unknown or no config(s) {bad}; valid: {', '.join(CONFIGS)}")
    return names


def _subprocess_ours(cfg: dict, total: int, fn: str = "run_ours", python: str | None = None) -> dict:
    """Ours at `cfg` in a fresh process of `python` (default: this interpreter)."""
    network = f", network={cfg['network']!r}" if cfg.get("network", "mlp") != "mlp" else ""
    code = (
        f"import json, sys; from fusedrl.bench.ppo import {fn}; "
        f"print(json.dumps({fn}({cfg['seeds']}, {cfg['num_envs']}, {cfg['num_steps']}, {total}{network})))"
    )
    out = subprocess.run(
        [python or sys.executable, "-c", code], capture_output=True, text=True, timeout=900, check=True,
        cwd=os.path.expanduser("~"),  # not a checkout's root, whose envs/ and train/ are no package
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    sys.exit(main())
