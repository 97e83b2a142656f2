"""The figures people compare on a GPU: PPO on MinAtar-Breakout and CartPole, env stepping, memory.

    python -m fusedrl.bench gpu [--smoke] [--rows ROW,...]
                                [--purejaxrl-src DIR [--peer-python PY] [--peer-path DIR]
                                 [--purejaxrl-rows ROW,...]]

Measures, in one run on whatever device jax sees (`jax.devices()[0]`), each printed as a table row
and as one JSON line:

  breakout-1      PPO on gymnax:Breakout-MinAtar at PureJaxRL's MinAtar config, 1e7 steps, one
                  agent: wall time (compile + run), compile time, steps/s, final return
  breakout-256    the same, 256 agents vmapped (`jax.jit(jax.vmap(train))`): aggregate steps/s
  cartpole-1      PPO on CartPole-v1 at PureJaxRL's config (`fusedrl.preset("CartPole-v1")`)
  cartpole-2048   the same, 2048 agents vmapped
  envs-breakout   env stepping alone (`fusedrl.envs.VecEnv`, random actions, jitted `lax.scan`)
  envs-cartpole   at 4096, 65536 and 262144 envs: steps/s, the env's own limit

Each row reports the device's peak memory (`device.memory_stats()["peak_bytes_in_use"]`; "n/a"
where the platform keeps no such statistics, as XLA:CPU). Every group of rows runs in a fresh
process, so its peak is its own: the training rows of one env run in one process, smallest first
(a short probe run, then one agent, then the vmapped agents), and so do the env-stepping sizes,
in increasing order; each row's peak is the process's peak after it. The parent process starts
no jax backend (on a GPU it would preallocate most of the memory away from the workers).
Memory must not grow with `total_timesteps`: the probe trains the one-agent config for
`PROBE_UPDATES` updates, the row for all of them, and the `flat` check compares the two peaks
(allowing the per-update metrics, which are [num_updates] by design, plus `FLAT_SLACK_BYTES`).
For contrast the row gives what per-step histories of the same run would take
(`per_step_history_bytes`).

PureJaxRL's MinAtar config (its examples/brax_minatar.ipynb, "PPO Gymnax MinAtar"): 64 envs x
128 steps, 4 epochs x 8 minibatches, lr 5e-3 annealed, gamma 0.99, GAE 0.95, clip 0.2, entropy
0.01, value 0.5, grad norm 0.5, a 2x64 relu MLP for actor and critic on the flattened observation.
No preset matches it (fusedrl's Breakout preset is gymnax-blines' tuned one), so it is spelled out
here. Its CartPole config is `purejaxrl/ppo.py`'s, which `fusedrl.preset("CartPole-v1")` is.

With `--purejaxrl-src DIR` (a folder with PureJaxRL's `purejaxrl/ppo.py` and `wrappers.py`, as
`python -m fusedrl.bench ppo` takes; see `_purejaxrl_peer.py`), PureJaxRL's own `make_train`
runs at the same configs in the same run (`_purejaxrl_gpu_peer.py`, each row in a fresh process
with the retry-on-hang of `fusedrl.bench.ppo.run_peer`), and the table adds the ratios. It needs
gymnax 0.0.x and distrax, which our gymnax 1.x excludes from one interpreter: `--peer-python`
names another interpreter (default: this one) and `--peer-path` a folder put first on the peer's
PYTHONPATH (e.g. one holding gymnax 0.0.9 and distrax).

`--smoke` runs every row at tiny sizes (a few updates, 2-3 agents, 16-256 envs), on CPU in a
minute or two: it checks the harness, not the speed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fusedrl.bench._timing import compile_then_run

#: PureJaxRL's MinAtar PPO config (examples/brax_minatar.ipynb), as PPOConfig fields.
MINATAR = dict(
    env_id="gymnax:Breakout-MinAtar", num_envs=64, num_steps=128, total_timesteps=10_000_000,
    update_epochs=4, num_minibatches=8, lr=5e-3, anneal_lr=True, gamma=0.99, gae_lambda=0.95,
    clip_eps=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, hidden_sizes=(64, 64),
    activation="relu",
)
#: The same, as PureJaxRL's config dict (upper-case keys, its `ENV_NAME`).
PUREJAXRL_MINATAR = {
    "LR": 5e-3, "NUM_ENVS": 64, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 1e7, "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 8, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01,
    "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5, "ACTIVATION": "relu", "ENV_NAME": "Breakout-MinAtar",
    "ANNEAL_LR": True, "DEBUG": False,
}
#: PureJaxRL's CartPole config (`purejaxrl/ppo.py`'s `__main__`), which fusedrl's preset is.
PUREJAXRL_CARTPOLE = {
    "LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 5e5, "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01,
    "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1",
    "ANNEAL_LR": True, "DEBUG": False,
}

#: Updates of the short probe run that the `flat` check compares the one-agent row's peak with.
PROBE_UPDATES = 2
#: Allowed growth of the peak beyond the per-update metrics' bytes: allocator rounding.
FLAT_SLACK_BYTES = 1 << 20

#: Sizes of a full run and of `--smoke`. Per env: (agents of the vmapped row, env-stepping sizes).
FULL = {"breakout": 256, "cartpole": 2048, "env_sizes": (4096, 65536, 262144), "scan_steps": 100,
        "min_time": 0.5}
SMOKE = {"breakout": 2, "cartpole": 3, "env_sizes": (16, 64, 256), "scan_steps": 10, "min_time": 0.0}
SMOKE_FIELDS = {  # tiny runs: 4 updates of 8 envs x 16 steps; one epoch of 2 minibatches
    "num_envs": 8, "num_steps": 16, "total_timesteps": 8 * 16 * 4, "update_epochs": 1,
    "num_minibatches": 2,
}
ENV_IDS = {"breakout": "gymnax:Breakout-MinAtar", "cartpole": "CartPole-v1"}
PEER_RUNNER = os.path.join(os.path.dirname(__file__), "_purejaxrl_gpu_peer.py")


def row_names(sizes: dict) -> list[str]:
    """Every row of a run at `sizes` (FULL or SMOKE), in the order they run."""
    return ["breakout-1", f"breakout-{sizes['breakout']}", "cartpole-1", f"cartpole-{sizes['cartpole']}",
            "envs-breakout", "envs-cartpole"]


def ppo_config(env: str, smoke: bool):
    """Our config of a training row: PureJaxRL's MinAtar or CartPole config (tiny with `smoke`)."""
    import fusedrl

    config = fusedrl.PPOConfig(**MINATAR) if env == "breakout" else fusedrl.preset("CartPole-v1")
    return config.replace(**SMOKE_FIELDS) if smoke else config


def purejaxrl_config(env: str, smoke: bool) -> dict[str, Any]:
    """PureJaxRL's config dict of a training row (the same numbers as `ppo_config`)."""
    config = dict(PUREJAXRL_MINATAR if env == "breakout" else PUREJAXRL_CARTPOLE)
    if smoke:
        config.update(NUM_ENVS=SMOKE_FIELDS["num_envs"], NUM_STEPS=SMOKE_FIELDS["num_steps"],
                      TOTAL_TIMESTEPS=SMOKE_FIELDS["total_timesteps"],
                      UPDATE_EPOCHS=SMOKE_FIELDS["update_epochs"],
                      NUM_MINIBATCHES=SMOKE_FIELDS["num_minibatches"])
    return config


# ---- measurements (run inside a worker process) ----------------------------------------------


def peak_bytes() -> int | None:
    """The device's peak memory in use so far in this process, or None where it keeps no
    statistics (XLA:CPU's `memory_stats()` is None)."""
    stats = jax.devices()[0].memory_stats()
    if not stats or "peak_bytes_in_use" not in stats:
        return None
    return int(stats["peak_bytes_in_use"])


def train_row(config, agents: int | None, key: jax.Array) -> dict[str, Any]:
    """One training measurement: `jax.jit(train)` (agents None) or `jax.jit(jax.vmap(train))` over
    `agents` keys, compiled apart (`compile_then_run`), then run once."""
    import fusedrl

    train = fusedrl.make_train(config)
    if agents is None:
        result, compile_s, run_s = compile_then_run(jax.jit(train), key)
        ret = float(np.asarray(result.metrics["episode_return"])[-1])
        n = 1
    else:
        keys = jax.random.split(key, agents)
        result, compile_s, run_s = compile_then_run(jax.jit(jax.vmap(train)), keys)
        ret = float(np.asarray(result.metrics["episode_return"])[:, -1].mean())
        n = agents
    metric_bytes = sum(int(np.asarray(v).nbytes) for v in result.metrics.values())
    del result
    steps = config.env_steps * n
    return {
        "agents": n, "env_id": config.env_id, "num_envs": config.num_envs, "num_steps": config.num_steps,
        "total_timesteps": config.total_timesteps, "env_steps": steps, "compile_s": compile_s,
        "run_s": run_s, "wall_s": compile_s + run_s, "steps_per_s": steps / run_s, "final_return": ret,
        "metric_bytes": metric_bytes, "peak_bytes": peak_bytes(),
    }


def flat_check(probe: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """Whether the peak stayed put from the probe's budget to the row's: it may grow by the
    per-update metrics (the row's `metric_bytes`) plus `FLAT_SLACK_BYTES`, no more."""
    out = {"probe_total_timesteps": probe["total_timesteps"], "probe_peak_bytes": probe["peak_bytes"],
           # [num_updates, num_steps, num_envs] float32 per agent: one per-step history of the run
           "per_step_history_bytes": 4 * row["env_steps"]}
    if probe["peak_bytes"] is None or row["peak_bytes"] is None:
        return {**out, "flat": None}
    growth = row["peak_bytes"] - probe["peak_bytes"]
    return {**out, "peak_growth_bytes": growth, "flat": growth <= row["metric_bytes"] + FLAT_SLACK_BYTES}


def training_rows(env: str, agents: int, smoke: bool, want: set[str]) -> Iterator[dict[str, Any]]:
    """A training group in one process, smallest first: the probe and the one-agent row (with the
    flat check), then `agents` agents vmapped; `want` names the rows to run."""
    config = ppo_config(env, smoke)
    key = jax.random.key(0)
    if f"{env}-1" in want:
        probe = train_row(config.replace(total_timesteps=PROBE_UPDATES * config.batch_size), None, key)
        one = train_row(config, None, key)
        yield {"row": f"{env}-1", **one, **flat_check(probe, one)}
    if f"{env}-{agents}" in want:
        yield {"row": f"{env}-{agents}", **train_row(config, agents, key)}


def stepping_rows(env: str, sizes: Sequence[int], scan_steps: int, min_time: float):
    """Env steps/s of `fusedrl.envs.VecEnv` at each size (increasing), random actions.

    Each call runs `chunks` scans of `scan_steps` steps (`chunks` a traced argument, so growing it
    until a call lasts `min_time` does not recompile); each scan draws its actions in one call, and
    each call resets the envs once before its `chunks x scan_steps` steps."""
    import fusedrl
    from fusedrl.envs import VecEnv

    env_obj, params = fusedrl.make(ENV_IDS[env])
    num_actions = env_obj.action_space(params).n
    for n in sorted(sizes):
        venv = VecEnv(env_obj, n)

        def step(carry, action, venv=venv):
            vstate, acc = carry
            obs, vstate, reward, terminated, truncated, _ = venv.step(vstate, action, params)
            # consume every output, so that XLA drops none of the work
            acc = acc + jnp.sum(obs, dtype=jnp.float32) + jnp.sum(reward) + jnp.sum(terminated | truncated)
            return (vstate, acc), None

        def run(key, chunks, venv=venv, n=n):
            k_reset, key = jax.random.split(key)
            _, vstate = venv.reset(k_reset, params)

            def chunk(i, carry):
                actions = jax.random.randint(jax.random.fold_in(key, i), (scan_steps, n), 0, num_actions)
                return jax.lax.scan(step, carry, actions)[0]

            return jax.lax.fori_loop(0, chunks, chunk, (vstate, jnp.float32(0)))[1]

        fn = jax.jit(run)
        key = jax.random.key(0)
        t0 = time.perf_counter()
        compiled = fn.lower(key, jnp.int32(1)).compile()
        compile_s = time.perf_counter() - t0
        chunks = 1
        while True:
            t0 = time.perf_counter()
            checksum = float(jax.block_until_ready(compiled(key, jnp.int32(chunks))))
            run_s = time.perf_counter() - t0
            if run_s >= min_time:
                break
            chunks = max(chunks + 1, int(chunks * min(10.0, 1.2 * min_time / max(run_s, 1e-6))))
        if not np.isfinite(checksum):
            raise FloatingPointError(f"non-finite checksum from stepping {ENV_IDS[env]} at {n} envs")
        steps = n * scan_steps * chunks
        yield {"row": f"envs-{env}", "env_id": ENV_IDS[env], "num_envs": n, "env_steps": steps,
               "compile_s": compile_s, "run_s": run_s, "steps_per_s": steps / run_s,
               "peak_bytes": peak_bytes()}


def worker(spec: dict[str, Any]) -> None:
    """Runs one group of rows (in a fresh process) and prints each as a JSON line as it ends; a
    row that fails (e.g. out of device memory) prints {"row": ..., "error": ...} and ends the group."""
    sizes = SMOKE if spec["smoke"] else FULL
    env, want = spec["env"], set(spec["rows"])
    if spec["kind"] == "train":
        rows = training_rows(env, sizes[env], spec["smoke"], want)
    else:
        rows = stepping_rows(env, sizes["env_sizes"], sizes["scan_steps"], sizes["min_time"])
    done = set()
    try:
        for row in rows:
            done.add(row["row"])
            print("ROW " + json.dumps(row), flush=True)
    except Exception as e:
        failed = next((n for n in spec["rows"] if n not in done or n.startswith("envs-")), spec["rows"][-1])
        print("ROW " + json.dumps({"row": failed, "error": f"{type(e).__name__}: {e}"[:2000]}), flush=True)


def run_group(kind: str, env: str, rows: list[str], smoke: bool, timeout: float) -> Iterator[dict[str, Any]]:
    """A worker process for one group; yields its rows as they arrive (so that a run cut short has
    printed what finished), then an error row for each wanted row that never came."""
    spec = json.dumps({"kind": kind, "env": env, "rows": rows, "smoke": smoke})
    code = "import json, sys; from fusedrl.bench.gpu import worker; worker(json.loads(sys.argv[1]))"
    seen = set()
    # stderr to a file, not a pipe: a worker that logs much would block on a full pipe
    with tempfile.TemporaryFile("w+") as log, subprocess.Popen(
        [sys.executable, "-c", code, spec], stdout=subprocess.PIPE, stderr=log, text=True
    ) as proc:
        timer = threading.Timer(timeout, proc.kill)  # a hung worker is killed; its rows become errors
        timer.start()
        try:
            for line in proc.stdout:
                if line.startswith("ROW "):
                    row = json.loads(line[4:])
                    seen.add(row["row"])
                    yield row
            proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
        log.seek(0)
        err = log.read().strip()[-2000:]
    for name in rows:
        if name not in seen:
            why = f"worker exited {proc.returncode}" + (f" (killed after {timeout:.0f} s)" if proc.returncode
                                                         == -9 else "")
            yield {"row": name, "error": f"{why}: {err}"}


def device_info() -> dict[str, Any]:
    """The device the rows run on, asked of a child process: this process never starts a backend,
    because on a GPU that would preallocate most of its memory (XLA_PYTHON_CLIENT_MEM_FRACTION)
    away from the workers."""
    code = ("import json, jax; d = jax.devices()[0]; print(json.dumps({'device': f'{d.platform}:"
            "{d.device_kind}', 'device_count': jax.device_count()}))")
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    if out.returncode:
        return {"device": f"unknown (jax failed to start: {out.stderr.strip()[-300:]})", "device_count": 0}
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_purejaxrl(env: str, agents: int, smoke: bool, args) -> dict[str, Any]:
    """PureJaxRL's `make_train` at our row's config, in a fresh peer process (`run_peer`)."""
    from fusedrl.bench.ppo import run_peer

    config = purejaxrl_config(env, smoke)
    extra = {"PUREJAXRL_SRC": os.path.abspath(args.purejaxrl_src),
             "FUSEDRL_PUREJAXRL_CONFIG": json.dumps(config)}
    if args.peer_path:
        extra["PYTHONPATH"] = os.pathsep.join(
            [os.path.abspath(args.peer_path)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    try:
        out = run_peer(args.peer_python, PEER_RUNNER, agents, config["NUM_ENVS"], config["NUM_STEPS"],
                       int(config["TOTAL_TIMESTEPS"]), env=extra, timeout=args.peer_timeout)
    except RuntimeError as e:  # e.g. out of device memory
        return {"error": str(e)[-2000:]}
    if out.get("hung"):
        return {"error": f"hung in all attempts (> {args.peer_timeout:.0f} s each)"}
    return out


# ---- the table ------------------------------------------------------------------------------


def _mib(b) -> str:
    return "n/a" if b is None else f"{b / 2**20:,.0f}"


def _rate(v: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return f"{v / scale:.2f}{unit}"
    return f"{v:.0f}"


def _seconds(s) -> str:
    return "" if s is None else f"{s:.1f}"


HEADER = (f"{'row':<16} {'impl':<9} {'agents':>6} {'envs':>7} {'env steps':>11} {'compile s':>9} "
          f"{'wall s':>8} {'steps/s':>9} {'final ret':>9} {'peak MiB':>9}")


def format_row(row: dict[str, Any]) -> str:
    impl = row.get("impl", "fusedrl")
    if "error" in row:
        return f"{row['row']:<16} {impl:<9} error: {row['error'].splitlines()[-1] if row['error'] else ''}"
    ret = row.get("final_return")
    return (f"{row['row']:<16} {impl:<9} {row.get('agents', ''):>6} {row['num_envs']:>7} "
            f"{row['env_steps']:>11,} {row['compile_s']:>9.1f} {_seconds(row.get('wall_s')):>8} "
            f"{_rate(row['steps_per_s']):>9} {'' if ret is None else f'{ret:.1f}':>9} "
            f"{_mib(row['peak_bytes']):>9}")


def _parse_rows(p: argparse.ArgumentParser, text: str | None, valid: list[str], flag: str) -> list[str]:
    if text is None:
        return list(valid)
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in valid]
    if bad or not names:
        p.error(f"{flag}: unknown or no row(s) {bad}; valid: {', '.join(valid)}")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedrl.bench gpu", description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="tiny sizes: checks the harness in a minute on CPU")
    p.add_argument("--rows", default=None, help="comma-separated rows to run (default: all)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds one group of rows may take")
    p.add_argument("--purejaxrl-src", default=None,
                   help="folder with purejaxrl/ppo.py and wrappers.py (see _purejaxrl_peer.py)")
    p.add_argument("--purejaxrl-rows", default=None,
                   help="training rows at which PureJaxRL runs (default: all selected training rows)")
    p.add_argument("--peer-python", default=sys.executable,
                   help="interpreter that runs PureJaxRL (default: this one)")
    p.add_argument("--peer-path", default=None,
                   help="folder put first on PureJaxRL's PYTHONPATH (e.g. with gymnax 0.0.9 and distrax)")
    p.add_argument("--peer-timeout", type=float, default=1200,
                   help="seconds until a PureJaxRL run counts as hung")
    args = p.parse_args(argv)
    sizes = SMOKE if args.smoke else FULL
    valid = row_names(sizes)
    rows = _parse_rows(p, args.rows, valid, "--rows")
    training = [r for r in rows if not r.startswith("envs-")]
    pjx_rows = _parse_rows(p, args.purejaxrl_rows, training, "--purejaxrl-rows") if (
        args.purejaxrl_src or args.purejaxrl_rows) else []
    if args.purejaxrl_rows and not args.purejaxrl_src:
        p.error("--purejaxrl-rows needs --purejaxrl-src")
    if args.purejaxrl_src and not os.path.isfile(os.path.join(args.purejaxrl_src, "purejaxrl", "ppo.py")):
        p.error(f"--purejaxrl-src {args.purejaxrl_src}: no purejaxrl/ppo.py in it (see "
                f"fusedrl/bench/_purejaxrl_peer.py for what the folder holds)")
    if args.peer_path and not os.path.isdir(args.peer_path):
        p.error(f"--peer-path {args.peer_path}: no such folder")
    if args.timeout <= 0 or args.peer_timeout <= 0:
        p.error("--timeout and --peer-timeout must be > 0 seconds")

    info = {"bench": "gpu", "jax": jax.__version__, **device_info(), "smoke": args.smoke,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(f"fusedrl.bench gpu: jax {info['jax']}, device {info['device']} x{info['device_count']}, "
          f"{info['date']}{' (smoke: tiny sizes, not a measurement)' if args.smoke else ''}", flush=True)
    print(HEADER, flush=True)
    results: list[dict[str, Any]] = []

    def emit(row: dict[str, Any]) -> None:
        row = {**row, **info, "impl": row.get("impl", "fusedrl")}
        results.append(row)
        print(format_row(row), flush=True)
        print(json.dumps(row), flush=True)

    for env in ("breakout", "cartpole"):
        group = [r for r in training if r.startswith(env)]
        if group:
            for row in run_group("train", env, group, args.smoke, args.timeout):
                emit(row)
        for name in group:
            if name in pjx_rows:
                agents = int(name.split("-")[1])
                config = purejaxrl_config(env, args.smoke)
                out = run_purejaxrl(env, agents, args.smoke, args)
                row = {"row": name, "impl": "purejaxrl", "agents": agents, "num_envs": config["NUM_ENVS"]}
                if "error" not in out:
                    steps = (int(config["TOTAL_TIMESTEPS"]) // (config["NUM_ENVS"] * config["NUM_STEPS"])
                             * config["NUM_ENVS"] * config["NUM_STEPS"] * agents)
                    row.update(env_steps=steps, compile_s=out["compile_s"], run_s=out["train_s"],
                               wall_s=out["compile_s"] + out["train_s"], steps_per_s=out["sps"],
                               final_return=out["ret"], peak_bytes=out.get("peak_bytes"),
                               hangs=out.get("hangs", 0))
                else:
                    row["error"] = out["error"]
                emit(row)
    for env in ("breakout", "cartpole"):
        if f"envs-{env}" in rows:
            for row in run_group("envs", env, [f"envs-{env}"], args.smoke, args.timeout):
                emit(row)

    summary = summarize(results)
    if summary:
        print()
        for line in summary:
            print(line, flush=True)
    return 1 if any("error" in r for r in results) else 0


def summarize(results: list[dict[str, Any]]) -> list[str]:
    """Lines after the table: the flat-memory checks, ours/PureJaxRL ratios, and how close training
    gets to env stepping alone."""
    lines = []
    ours = {r["row"]: r for r in results if r["impl"] == "fusedrl" and "error" not in r
            and not r["row"].startswith("envs-")}
    theirs = {r["row"]: r for r in results if r["impl"] == "purejaxrl" and "error" not in r}
    for name, r in ours.items():
        if "flat" in r:
            verdict = {True: "flat", False: "GROWS", None: "n/a (no device memory statistics)"}[r["flat"]]
            lines.append(f"memory in total_timesteps, {name}: {verdict} (peak {_mib(r['probe_peak_bytes'])} "
                         f"MiB at {r['probe_total_timesteps']:,} steps, {_mib(r['peak_bytes'])} MiB at "
                         f"{r['total_timesteps']:,}; one per-step float32 history of the run: "
                         f"{_mib(r['per_step_history_bytes'])} MiB)")
    for name, r in ours.items():
        if name in theirs:
            t = theirs[name]
            lines.append(f"{name}: fusedrl/PureJaxRL steps/s {r['steps_per_s'] / t['steps_per_s']:.2f}x, "
                         f"PureJaxRL/fusedrl wall time {t['wall_s'] / r['wall_s']:.2f}x, peak memory "
                         f"{_mib(r['peak_bytes'])} MiB vs {_mib(t['peak_bytes'])} MiB")
    envs = [r for r in results if r["row"].startswith("envs-") and "error" not in r]
    for name, r in ours.items():
        limit = max((e["steps_per_s"] for e in envs if e["env_id"] == r["env_id"]), default=None)
        if limit:
            lines.append(f"{name}: training at {r['steps_per_s'] / limit:.1%} of the env's own stepping rate "
                         f"({_rate(limit)} steps/s, the fastest env-stepping size)")
    return lines


if __name__ == "__main__":
    sys.exit(main())
