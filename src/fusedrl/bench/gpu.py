"""The figures people compare on a GPU: PPO on MinAtar-Breakout and CartPole, env stepping, memory.

    python -m fusedrl.bench gpu [--smoke] [--rows ROW,...] [--agents N,...] [--cartpole-agents N,...]
                                [--bf16] [--value-in-rollout] [--capacity] [--total-timesteps N]
                                [--xla-flags "..."]
                                [--profile ROW,...]
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

Sizing a run (every name below is also a valid `--rows` entry):

  breakout-N, cartpole-N    N agents vmapped (`--agents 256,512,1024,2048` sets Breakout's Ns,
                            `--cartpole-agents` CartPole's); each N > 1 in its own fresh process,
                            so its peak memory is its own
  breakout-N-bf16           the same at `compute_dtype="bfloat16"` (`--bf16` adds one beside each
                            vmapped row; PureJaxRL has no such mode: its float32 row is the ratio's)
  breakout-N-vr             the same with the next observations valued in the rollout instead of
                            stored (`Tuning(value_in_rollout=True)`, off by default; also
                            `breakout-N-bf16-vr`, `capacity-breakout-vr`): `--value-in-rollout` adds
                            one beside each vmapped row, in its own process right after it, and the
                            summary gives its steps/s and peak memory against the row without it
  capacity-breakout         the most agents that fit in device memory: from the env's largest N,
  capacity-cartpole         doubling (a fresh process each) until one runs out of device memory or
                            `--capacity-max`; the largest that ran, with its steps/s. With
                            `--purejaxrl-src`, PureJaxRL at the same sizes until its out-of-memory.
                            Both sides' workers preallocate `CAPACITY_MEM_FRACTION` of the device
                            (unless XLA_PYTHON_CLIENT_MEM_FRACTION is set)

`--total-timesteps N` sets the env steps per agent of every training row, both sides (steps/s is
timed without the compile, so a shorter run gives it too; PureJaxRL's memory grows with the run's
length and ours does not, so its peak at a shorter run is below its peak at the full one).
`--xla-flags "..."` is added to XLA_FLAGS in every worker process, both sides (e.g.
`--xla_gpu_triton_gemm_any=True`); the rows record it. `--profile ROW,...` prints each row's
device time per phase (`fusedrl.profile.profile_phases`, a jax.profiler trace of
`--profile-updates` updates) instead of its training rows (with `--rows`, after them).

`--smoke` runs every row at tiny sizes (a few updates, 2-3 agents, 16-256 envs), on CPU in a
minute or two: it checks the harness, not the speed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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

from fusedrl.bench._timing import compile_measure_run, memory_bytes

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
        "min_time": 0.5, "capacity_max": 1 << 20, "profile_updates": 4}
SMOKE = {"breakout": 2, "cartpole": 3, "env_sizes": (16, 64, 256), "scan_steps": 10, "min_time": 0.0,
         "capacity_max": 8, "profile_updates": 2}
#: The device memory the capacity rows' workers preallocate (XLA_PYTHON_CLIENT_MEM_FRACTION), both
#: sides, unless the environment sets it: jax's default .75 would leave a quarter of it unused.
CAPACITY_MEM_FRACTION = "0.95"
ENVS = ("breakout", "cartpole")
_TRAIN_ROW = re.compile(r"^(breakout|cartpole)-([1-9][0-9]*)(-bf16)?(-vr)?$")
_CAPACITY_ROW = re.compile(r"^capacity-(breakout|cartpole)(-bf16)?(-vr)?$")
#: A row name's suffix for `Tuning(value_in_rollout=True)` (`fusedrl.train.tuning`).
VALUE_IN_ROLLOUT = "-vr"
SMOKE_FIELDS = {  # tiny runs: 4 updates of 8 envs x 16 steps; one epoch of 2 minibatches
    "num_envs": 8, "num_steps": 16, "total_timesteps": 8 * 16 * 4, "update_epochs": 1,
    "num_minibatches": 2,
}
ENV_IDS = {"breakout": "gymnax:Breakout-MinAtar", "cartpole": "CartPole-v1"}
PEER_RUNNER = os.path.join(os.path.dirname(__file__), "_purejaxrl_gpu_peer.py")


def row_names(sizes: dict, agents: dict[str, Sequence[int]] | None = None, bf16: bool = False,
              capacity: bool = False, value_in_rollout: bool = False) -> list[str]:
    """Every row of a run at `sizes` (FULL or SMOKE), in the order they run: per env the one-agent
    row, the vmapped rows (`agents[env]`, default the size's one; with `bf16` each beside its
    bfloat16 twin, with `value_in_rollout` each beside its `-vr` twin), with `capacity` its capacity
    row; then the env-stepping rows."""
    names = []
    for env in ENVS:
        names.append(f"{env}-1")
        for n in (agents or {}).get(env) or [sizes[env]]:
            for name in [f"{env}-{n}"] + ([f"{env}-{n}-bf16"] if bf16 else []):
                names += [name] + ([name + VALUE_IN_ROLLOUT] if value_in_rollout else [])
        if capacity:
            names.append(f"capacity-{env}")
    return names + [f"envs-{env}" for env in ENVS]


def parse_row(name: str) -> dict[str, Any] | None:
    """{"kind", "env", "agents", "compute_dtype", "value_in_rollout"} of a row name (None for an
    unknown one): "breakout-256-bf16" is a training row, "breakout-256-vr" the same program with the
    next observations valued in the rollout (`Tuning(value_in_rollout=True)`), "capacity-cartpole"
    a capacity row (agents None), "envs-breakout" env stepping."""
    m = _TRAIN_ROW.match(name)
    if m:
        return {"kind": "train", "env": m.group(1), "agents": int(m.group(2)),
                "compute_dtype": "bfloat16" if m.group(3) else "float32",
                "value_in_rollout": bool(m.group(4))}
    m = _CAPACITY_ROW.match(name)
    if m:
        return {"kind": "capacity", "env": m.group(1), "agents": None,
                "compute_dtype": "bfloat16" if m.group(2) else "float32",
                "value_in_rollout": bool(m.group(3))}
    if name in (f"envs-{env}" for env in ENVS):
        return {"kind": "envs", "env": name.split("-", 1)[1], "agents": None, "compute_dtype": "float32",
                "value_in_rollout": False}
    return None


def row_tuning(spec: dict[str, Any]):
    """The trainer's speed choices of a parsed row: `Tuning(value_in_rollout=True)` for a `-vr` row,
    else None (the trainer's own, `resolve_tuning`)."""
    from fusedrl.train.tuning import Tuning

    return Tuning(value_in_rollout=True) if spec.get("value_in_rollout") else None


def base_row(name: str) -> str:
    """The float32, default-tuning row a variant row is measured against: "breakout-256" for
    "breakout-256-bf16-vr" (PureJaxRL's row of the same sizes)."""
    return name.removesuffix(VALUE_IN_ROLLOUT).removesuffix("-bf16")


def ppo_config(env: str, smoke: bool, total_timesteps: int | None = None, compute_dtype: str = "float32"):
    """Our config of a training row: PureJaxRL's MinAtar or CartPole config (tiny with `smoke`),
    with `total_timesteps` env steps per agent if given."""
    import fusedrl

    config = fusedrl.PPOConfig(**MINATAR) if env == "breakout" else fusedrl.preset("CartPole-v1")
    if smoke:
        config = config.replace(**SMOKE_FIELDS)
    if total_timesteps is not None:
        config = config.replace(total_timesteps=int(total_timesteps))
    return config.replace(compute_dtype=compute_dtype) if compute_dtype != config.compute_dtype else config


def purejaxrl_config(env: str, smoke: bool, total_timesteps: int | None = None) -> dict[str, Any]:
    """PureJaxRL's config dict of a training row (the same numbers as `ppo_config`)."""
    config = dict(PUREJAXRL_MINATAR if env == "breakout" else PUREJAXRL_CARTPOLE)
    if smoke:
        config.update(NUM_ENVS=SMOKE_FIELDS["num_envs"], NUM_STEPS=SMOKE_FIELDS["num_steps"],
                      TOTAL_TIMESTEPS=SMOKE_FIELDS["total_timesteps"],
                      UPDATE_EPOCHS=SMOKE_FIELDS["update_epochs"],
                      NUM_MINIBATCHES=SMOKE_FIELDS["num_minibatches"])
    if total_timesteps is not None:
        config["TOTAL_TIMESTEPS"] = int(total_timesteps)
    return config


def is_out_of_memory(error: str) -> bool:
    """Whether an error's text is XLA's out-of-device-memory (RESOURCE_EXHAUSTED)."""
    text = error.lower()
    return "resource_exhausted" in text or "out of memory" in text


# ---- measurements (run inside a worker process) ----------------------------------------------


def peak_bytes() -> int | None:
    """The device's peak memory in use so far in this process, or None where it keeps no
    statistics (XLA:CPU's `memory_stats()` is None)."""
    stats = jax.devices()[0].memory_stats()
    if not stats or "peak_bytes_in_use" not in stats:
        return None
    return int(stats["peak_bytes_in_use"])


def train_row(config, agents: int | None, key: jax.Array, tuning=None) -> dict[str, Any]:
    """One training measurement: `jax.jit(train)` (agents None) or `jax.jit(jax.vmap(train))` over
    `agents` keys, compiled apart (`compile_then_run`), then run once. `tuning`: the trainer's
    speed choices (None: its own)."""
    import fusedrl

    train = fusedrl.make_train(config) if tuning is None else fusedrl.make_train(config, tuning=tuning)
    if agents is None:
        result, compile_s, run_s, memory = compile_measure_run(jax.jit(train), key)
        ret = float(np.asarray(result.metrics["episode_return"])[-1])
        n = 1
    else:
        keys = jax.random.split(key, agents)
        result, compile_s, run_s, memory = compile_measure_run(jax.jit(jax.vmap(train)), keys)
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
        # XLA's memory analysis of the program (`_timing.memory_bytes`): what it asks of the device
        "predicted_bytes": None if memory is None else memory["total"],
        "value_in_rollout": train.tuning.value_in_rollout,  # the trainer's own record
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


def training_rows(rows: Sequence[str], smoke: bool, total_timesteps: int | None = None,
                  label: str | None = None) -> Iterator[dict[str, Any]]:
    """Training rows in one process, in the order given: a one-agent row is the probe and the
    one agent (with the flat check), a row of N > 1 agents `jax.jit(jax.vmap(train))`. `label`
    names the rows instead of their own names (the capacity row's attempts)."""
    key = jax.random.key(0)
    for name in rows:
        spec = parse_row(name)
        config = ppo_config(spec["env"], smoke, total_timesteps, spec["compute_dtype"])
        tuning = row_tuning(spec)
        out = {"row": label or name, "compute_dtype": spec["compute_dtype"],
               "value_in_rollout": spec["value_in_rollout"]}
        if spec["agents"] == 1:
            probe = train_row(config.replace(total_timesteps=PROBE_UPDATES * config.batch_size), None, key,
                              tuning)
            one = train_row(config, None, key, tuning)
            yield {**out, **one, **flat_check(probe, one)}
        else:
            yield {**out, **train_row(config, spec["agents"], key, tuning)}


def profile_row(name: str, smoke: bool, updates: int) -> dict[str, Any]:
    """The device time per phase of training row `name` (`fusedrl.profile.profile_phases`)."""
    from fusedrl.profile import format_phases, profile_phases

    spec = parse_row(name)
    config = ppo_config(spec["env"], smoke, None, spec["compute_dtype"])
    summary = profile_phases(config, None if spec["agents"] == 1 else spec["agents"], updates,
                             tuning=row_tuning(spec))
    return {"row": name, "kind": "profile", **summary, "table": format_phases(summary)}


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


def device_limit_bytes() -> int | None:
    """The memory the device's allocator may hand out (`memory_stats()["bytes_limit"]`: on a GPU
    the preallocated fraction, XLA_PYTHON_CLIENT_MEM_FRACTION), or None where it keeps no
    statistics (XLA:CPU)."""
    stats = jax.devices()[0].memory_stats()
    return int(stats["bytes_limit"]) if stats and stats.get("bytes_limit") else None


def predict_rows(name: str, sizes: Sequence[int], smoke: bool, length: int,
                 limit: int | None = None) -> Iterator[dict[str, Any]]:
    """Whether training row `name`'s program (its env, dtype and tuning) fits in device memory at
    each agent count of `sizes` in turn, at `length` env steps per agent, without running it: each
    is compiled (`jax.jit(jax.vmap(train))`) and XLA's memory analysis of it (`memory_bytes`:
    arguments + outputs + temporaries at their peak) is compared with `limit` bytes (None: the
    device's, `device_limit_bytes`). Stops after the first that does not fit."""
    import fusedrl

    spec = parse_row(name)
    config = ppo_config(spec["env"], smoke, length, spec["compute_dtype"])
    tuning = row_tuning(spec)
    train = fusedrl.make_train(config) if tuning is None else fusedrl.make_train(config, tuning=tuning)
    limit = limit or device_limit_bytes()
    if not limit:
        raise ValueError("no device memory limit to judge the fit against: this device keeps no "
                         "bytes_limit (XLA:CPU); pass --device-memory-mib")
    for n in sizes:
        t0 = time.perf_counter()
        compiled = jax.jit(jax.vmap(train)).lower(jax.random.split(jax.random.key(0), n)).compile()
        memory = memory_bytes(compiled)
        if memory is None:
            raise ValueError("this platform gives no XLA memory analysis (compiled.memory_analysis())")
        del compiled
        row = {"row": name, "kind": "predict", "agents": n, "num_envs": config.num_envs,
               "total_timesteps": config.total_timesteps, "compile_s": time.perf_counter() - t0,
               "memory": memory, "predicted_bytes": memory["total"], "limit_bytes": int(limit),
               "fits": memory["total"] <= int(limit)}
        yield row
        if not row["fits"]:
            return


def worker(spec: dict[str, Any]) -> None:
    """Runs one group of rows (in a fresh process) and prints each as a JSON line as it ends; a
    row that fails (e.g. out of device memory) prints {"row": ..., "error": ...} and ends the group."""
    sizes = SMOKE if spec["smoke"] else FULL
    env = spec["env"]
    if spec["kind"] == "train":
        rows = training_rows(spec["rows"], spec["smoke"], spec.get("total_timesteps"), spec.get("label"))
    elif spec["kind"] == "profile":
        rows = (profile_row(name, spec["smoke"], spec["profile_updates"]) for name in spec["rows"])
    elif spec["kind"] == "predict":
        rows = ({**row, "row": spec.get("label") or row["row"]} for row in predict_rows(
            spec["rows"][0], spec["sizes"], spec["smoke"], spec["length"], spec.get("limit")))
    else:
        rows = stepping_rows(env, sizes["env_sizes"], sizes["scan_steps"], sizes["min_time"])
    done = set()
    try:
        for row in rows:
            done.add(row["row"])
            print("ROW " + json.dumps(row), flush=True)
    except Exception as e:
        failed = spec.get("label") or next(
            (n for n in spec["rows"] if n not in done or n.startswith("envs-")), spec["rows"][-1])
        error = f"{type(e).__name__}: {e}"
        # An out-of-memory message ends with the allocator's report; its first lines say what failed.
        print("ROW " + json.dumps({"row": failed, "error": error[:2000],
                                   "out_of_memory": is_out_of_memory(error)}), flush=True)


def run_group(kind: str, env: str, rows: list[str], smoke: bool, timeout: float,
              env_vars: dict[str, str] | None = None, **spec_extra) -> Iterator[dict[str, Any]]:
    """A worker process for one group; yields its rows as they arrive (so that a run cut short has
    printed what finished), then an error row for each wanted row that never came. `env_vars` are
    added to the worker's environment (XLA_FLAGS); `spec_extra` goes to `worker` (total_timesteps,
    label, profile_updates)."""
    spec = json.dumps({"kind": kind, "env": env, "rows": rows, "smoke": smoke, **spec_extra})
    code = "import json, sys; from fusedrl.bench.gpu import worker; worker(json.loads(sys.argv[1]))"
    seen = set()
    if spec_extra.get("label"):
        rows = [spec_extra["label"]]
    # stderr to a file, not a pipe: a worker that logs much would block on a full pipe
    with tempfile.TemporaryFile("w+") as log, subprocess.Popen(
        [sys.executable, "-c", code, spec], stdout=subprocess.PIPE, stderr=log, text=True,
        env={**os.environ, **(env_vars or {})},
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
            yield {"row": name, "error": f"{why}: {err}", "out_of_memory": is_out_of_memory(err)}


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


def run_purejaxrl(env: str, agents: int, smoke: bool, args, env_vars: dict[str, str] | None = None,
                  attempts: int = 3, total_timesteps: int | None = None) -> dict[str, Any]:
    """PureJaxRL's `make_train` at our row's config, in a fresh peer process (`run_peer`), at
    `total_timesteps` env steps per agent (default: `--total-timesteps`, else the config's).
    With FUSEDRL_PUREJAXRL_PREDICT in `env_vars`, the peer compiles instead of training (see
    `_purejaxrl_gpu_peer.py`)."""
    from fusedrl.bench.ppo import run_peer

    config = purejaxrl_config(env, smoke, total_timesteps or args.total_timesteps)
    extra = {"PUREJAXRL_SRC": os.path.abspath(args.purejaxrl_src),
             "FUSEDRL_PUREJAXRL_CONFIG": json.dumps(config), **(env_vars or {})}
    if args.peer_path:
        extra["PYTHONPATH"] = os.pathsep.join(
            [os.path.abspath(args.peer_path)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    try:
        out = run_peer(args.peer_python, PEER_RUNNER, agents, config["NUM_ENVS"], config["NUM_STEPS"],
                       int(config["TOTAL_TIMESTEPS"]), env=extra, timeout=args.peer_timeout,
                       attempts=attempts)
    except RuntimeError as e:  # e.g. out of device memory
        return {"error": str(e)[-2000:], "out_of_memory": is_out_of_memory(str(e))}
    if out.get("hung"):
        return {"error": f"hung in all attempts (> {args.peer_timeout:.0f} s each)"}
    return out


def purejaxrl_row(name: str, env: str, agents: int, smoke: bool, args,
                  env_vars: dict[str, str] | None = None, attempts: int = 3) -> dict[str, Any]:
    """PureJaxRL's row `name` at `agents` agents: the table's fields, or its error."""
    config = purejaxrl_config(env, smoke, args.total_timesteps)
    out = run_purejaxrl(env, agents, smoke, args, env_vars, attempts)
    row = {"row": name, "impl": "purejaxrl", "agents": agents, "num_envs": config["NUM_ENVS"],
           "compute_dtype": "float32"}
    if "error" in out:
        return {**row, "error": out["error"], "out_of_memory": out.get("out_of_memory", False)}
    total = int(config["TOTAL_TIMESTEPS"])
    batch = config["NUM_ENVS"] * config["NUM_STEPS"]
    steps = total // batch * batch * agents
    return {**row, "total_timesteps": total, "env_steps": steps, "compile_s": out["compile_s"],
            "run_s": out["train_s"], "wall_s": out["compile_s"] + out["train_s"], "steps_per_s": out["sps"],
            "final_return": out["ret"], "peak_bytes": out.get("peak_bytes"), "hangs": out.get("hangs", 0),
            "predicted_bytes": out.get("predicted_bytes")}


def capacity_sizes(start: int, largest: int) -> list[int]:
    """The agent counts a capacity row tries: `start`, doubling, up to `largest`."""
    sizes = [max(1, int(start))]
    while sizes[-1] * 2 <= largest:
        sizes.append(sizes[-1] * 2)
    return sizes


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


HEADER = (f"{'row':<20} {'impl':<9} {'agents':>6} {'envs':>7} {'env steps':>13} {'compile s':>9} "
          f"{'wall s':>8} {'steps/s':>9} {'final ret':>9} {'peak MiB':>9}")


def format_row(row: dict[str, Any]) -> str:
    impl = row.get("impl", "fusedrl")
    if "error" in row:
        if row.get("out_of_memory"):
            return f"{row['row']:<20} {impl:<9} {row.get('agents', ''):>6} out of device memory"
        return f"{row['row']:<20} {impl:<9} error: {row['error'].splitlines()[-1] if row['error'] else ''}"
    if row.get("kind") == "predict":
        verdict = "fits" if row["fits"] else "does not fit"
        return (f"{row['row']:<20} {impl:<9} {row['agents']:>6} {row['num_envs']:>7} predicted "
                f"{_mib(row['predicted_bytes'])} MiB at {row['total_timesteps']:,} env steps per agent: "
                f"{verdict} in {_mib(row['limit_bytes'])} MiB (compiled, not run)")
    ret = row.get("final_return")
    return (f"{row['row']:<20} {impl:<9} {row.get('agents', ''):>6} {row['num_envs']:>7} "
            f"{row['env_steps']:>13,} {row['compile_s']:>9.1f} {_seconds(row.get('wall_s')):>8} "
            f"{_rate(row['steps_per_s']):>9} {'' if ret is None else f'{ret:.1f}':>9} "
            f"{_mib(row['peak_bytes']):>9}")


def _parse_rows(p: argparse.ArgumentParser, text: str | None, default: list[str], flag: str,
                kinds: tuple[str, ...] = ("train", "capacity", "envs")) -> list[str]:
    """The row names of `text` (comma-separated; `default` when None), each a valid row of `kinds`."""
    if text is None:
        return list(default)
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if (parse_row(n) or {}).get("kind") not in kinds]
    if bad or not names:
        p.error(f"{flag}: unknown or no row(s) {bad}; valid: breakout-N, cartpole-N (N agents), "
                f"breakout-N-bf16, breakout-N-vr, breakout-N-bf16-vr, capacity-breakout[-bf16][-vr], "
                f"capacity-cartpole, envs-breakout, envs-cartpole"
                + (" (here only training rows)" if kinds == ("train",) else ""))
    return names


def _agent_list(p: argparse.ArgumentParser, text: str | None, flag: str) -> list[int] | None:
    if text is None:
        return None
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 2:
        p.error(f"{flag}: comma-separated agent counts >= 2 (e.g. 256,512,1024,2048), got {text!r}")
    return sorted(set(values))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedrl.bench gpu", description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="tiny sizes: checks the harness in a minute on CPU")
    p.add_argument("--rows", default=None, help="comma-separated rows to run (default: all)")
    p.add_argument("--agents", default=None,
                   help="Breakout's vmapped rows: comma-separated agent counts (default: 256; smoke 2)")
    p.add_argument("--cartpole-agents", default=None,
                   help="CartPole's vmapped rows: comma-separated agent counts (default: 2048; smoke 3)")
    p.add_argument("--bf16", action="store_true",
                   help='beside each vmapped training row, the same at compute_dtype="bfloat16"')
    p.add_argument("--value-in-rollout", action="store_true",
                   help="beside each vmapped training row, the same with Tuning(value_in_rollout=True) "
                        "(a -vr row: the next observations valued in the rollout, not stored)")
    p.add_argument("--capacity", action="store_true",
                   help="add the capacity rows (the most agents that fit in device memory)")
    p.add_argument("--capacity-start", type=int, default=None,
                   help="agents of a capacity row's first try (default: the env's largest agent count)")
    p.add_argument("--capacity-max", type=int, default=None,
                   help="stop doubling there (default: 1048576; smoke 8)")
    p.add_argument("--capacity-length", type=int, default=None,
                   help="judge the capacity rows' fit at this many env steps per agent (e.g. 10000000, "
                        "Breakout's config) from XLA's memory analysis of each side's compiled program, "
                        "without running it; then time the largest fit with a short run (--total-timesteps)")
    p.add_argument("--device-memory-mib", type=int, default=None,
                   help="the device memory --capacity-length judges against (default: the device's "
                        "bytes_limit; needed where it keeps none, as XLA:CPU)")
    p.add_argument("--total-timesteps", type=int, default=None,
                   help="env steps per agent of every training row, both sides (default: the config's)")
    p.add_argument("--xla-flags", default=None,
                   help="added to XLA_FLAGS in every worker process, both sides, e.g. "
                        "'--xla_gpu_triton_gemm_any=True'")
    p.add_argument("--profile", default=None,
                   help="comma-separated training rows whose device time per phase to print "
                        "(fusedrl profile --phases); alone, only these")
    p.add_argument("--profile-updates", type=int, default=None,
                   help="updates each --profile trace holds (default: 4; smoke 2)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds one group of rows may take")
    p.add_argument("--purejaxrl-src", default=None,
                   help="folder with purejaxrl/ppo.py and wrappers.py (see _purejaxrl_peer.py)")
    p.add_argument("--purejaxrl-rows", default=None,
                   help="training rows at which PureJaxRL runs (default: all selected float32 training rows)")
    p.add_argument("--peer-python", default=sys.executable,
                   help="interpreter that runs PureJaxRL (default: this one)")
    p.add_argument("--peer-path", default=None,
                   help="folder put first on PureJaxRL's PYTHONPATH (e.g. with gymnax 0.0.9 and distrax)")
    p.add_argument("--peer-timeout", type=float, default=1200,
                   help="seconds until a PureJaxRL run counts as hung")
    args = p.parse_args(argv)
    sizes = SMOKE if args.smoke else FULL
    agents = {"breakout": _agent_list(p, args.agents, "--agents"),
              "cartpole": _agent_list(p, args.cartpole_agents, "--cartpole-agents")}
    default = row_names(sizes, agents, args.bf16, args.capacity, args.value_in_rollout)
    profiles = _parse_rows(p, args.profile, [], "--profile", ("train",)) if args.profile else []
    rows = _parse_rows(p, args.rows, [] if profiles else default, "--rows")
    training = [r for r in rows if parse_row(r)["kind"] == "train"]
    float32 = [r for r in training if base_row(r) == r]  # PureJaxRL's: no bfloat16, no -vr twin
    capacity = [r for r in rows if parse_row(r)["kind"] == "capacity"]
    pjx_rows = _parse_rows(p, args.purejaxrl_rows, float32, "--purejaxrl-rows", ("train",)) if (
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
    for flag, value in (("--total-timesteps", args.total_timesteps),
                        ("--capacity-start", args.capacity_start), ("--capacity-max", args.capacity_max),
                        ("--capacity-length", args.capacity_length),
                        ("--device-memory-mib", args.device_memory_mib),
                        ("--profile-updates", args.profile_updates)):
        if value is not None and value < 1:
            p.error(f"{flag} must be >= 1, got {value}")
    if args.xla_flags is not None and not all(f.startswith("--") for f in args.xla_flags.split()):
        p.error(f"--xla-flags: XLA flags each start with '--' (e.g. --xla_gpu_triton_gemm_any=True), "
                f"got {args.xla_flags!r}")

    # XLA_FLAGS of every worker, both sides: the environment's, then --xla-flags.
    env_vars = {}
    if args.xla_flags:
        env_vars["XLA_FLAGS"] = " ".join(f for f in (os.environ.get("XLA_FLAGS"), args.xla_flags) if f)
    info = {"bench": "gpu", "jax": jax.__version__, **device_info(), "smoke": args.smoke,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "xla_flags": args.xla_flags or ""}
    print(f"fusedrl.bench gpu: jax {info['jax']}, device {info['device']} x{info['device_count']}, "
          f"{info['date']}{' (smoke: tiny sizes, not a measurement)' if args.smoke else ''}"
          f"{f', XLA flags {args.xla_flags!r}' if args.xla_flags else ''}"
          f"{f', {args.total_timesteps:,} env steps per agent' if args.total_timesteps else ''}", flush=True)
    results: list[dict[str, Any]] = []
    if rows:
        print(HEADER, flush=True)

    def emit(row: dict[str, Any]) -> None:
        row = {**row, **info, "impl": row.get("impl", "fusedrl")}
        results.append(row)
        print(format_row(row), flush=True)
        print(json.dumps(row), flush=True)

    for env in ENVS:
        # The one-agent row (with its probe) in one process, then each vmapped row in its own, so
        # that every peak is the row's own and an out-of-memory ends only that row.
        # per agent count: float32, then its -vr twin, then bfloat16 (and its twin)
        for name in sorted((r for r in training if parse_row(r)["env"] == env),
                           key=lambda r: (parse_row(r)["agents"], "-bf16" in r, r)):
            for row in run_group("train", env, [name], args.smoke, args.timeout, env_vars,
                                 total_timesteps=args.total_timesteps):
                emit(row)
            if name in pjx_rows:
                emit(purejaxrl_row(name, env, parse_row(name)["agents"], args.smoke, args, env_vars))
        for name in capacity:
            if parse_row(name)["env"] == env:
                run_capacity(name, args, sizes, agents, env_vars, emit)
    for env in ENVS:
        if f"envs-{env}" in rows:
            for row in run_group("envs", env, [f"envs-{env}"], args.smoke, args.timeout, env_vars):
                emit(row)
    updates = args.profile_updates or sizes["profile_updates"]
    for name in profiles:
        for row in run_group("profile", parse_row(name)["env"], [name], args.smoke, args.timeout, env_vars,
                             profile_updates=updates):
            row = {**row, **info, "impl": "fusedrl"}
            table = row.pop("table", None)
            results.append(row)
            print(flush=True)
            print(table or format_row(row), flush=True)
            print(json.dumps(row), flush=True)

    summary = summarize(results)
    if summary:
        print()
        for line in summary:
            print(line, flush=True)
    # A capacity try that runs out of memory is the measurement, not a failure.
    failed = [r for r in results if "error" in r and not (r.get("capacity") and r.get("out_of_memory"))]
    return 1 if failed else 0


def run_capacity(name: str, args, sizes: dict, agents: dict, env_vars: dict[str, str], emit) -> None:
    """The capacity row `name`: our agents doubling (a fresh process each) until a try runs out of
    device memory or passes `--capacity-max`, then PureJaxRL's at the same sizes (with
    `--purejaxrl-src`) until its out-of-memory. Every try is a row named `name`. With
    `--capacity-length`, the fit is predicted instead (`run_capacity_predicted`)."""
    spec = parse_row(name)
    env, bf16 = spec["env"], spec["compute_dtype"] == "bfloat16"
    start = args.capacity_start or max(agents.get(env) or [sizes[env]])
    tries = capacity_sizes(start, args.capacity_max or sizes["capacity_max"])
    if "XLA_PYTHON_CLIENT_MEM_FRACTION" not in os.environ:
        env_vars = {**env_vars, "XLA_PYTHON_CLIENT_MEM_FRACTION": CAPACITY_MEM_FRACTION}

    def row_name(n: int) -> str:
        vr = VALUE_IN_ROLLOUT if spec["value_in_rollout"] else ""
        return f"{env}-{n}" + ("-bf16" if bf16 else "") + vr

    if args.capacity_length:
        return run_capacity_predicted(name, row_name, tries, args, env_vars, emit)
    tried = []
    for n in tries:
        rows = list(run_group("train", env, [row_name(n)], args.smoke, args.timeout, env_vars,
                              total_timesteps=args.total_timesteps, label=name))
        tried.append(n)
        for row in rows:
            emit({**row, "agents": row.get("agents", n), "capacity": True})
        if any("error" in r for r in rows):
            break
    if args.purejaxrl_src and not bf16:
        for n in tried:
            row = purejaxrl_row(name, env, n, args.smoke, args, env_vars, attempts=1)
            emit({**row, "capacity": True})
            if "error" in row:
                break


def run_capacity_predicted(name: str, row_name, tries: list[int], args, env_vars: dict[str, str],
                           emit) -> None:
    """The capacity row `name` judged at the run's real length without running it: each side's
    program is compiled at `--capacity-length` env steps per agent for each agent count of
    `tries` in turn (one process per side, nothing allocated: XLA_PYTHON_CLIENT_PREALLOCATE=false)
    and fits when XLA's memory analysis of it is at most the device's memory (`bytes_limit`, or
    `--device-memory-mib`); the doubling stops at the first that does not fit. Then the largest
    that fits, per side, trains a short run (`--total-timesteps`) for its steps/s: honest for ours,
    whose memory is flat in the run's length; PureJaxRL's is "predicted to fit at full length,
    timed at a short run". Every row is named `name`."""
    env = parse_row(name)["env"]
    limit = args.device_memory_mib * 2**20 if args.device_memory_mib else None
    quiet = {**env_vars, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    fits = {}
    ours = list(run_group("predict", env, [row_name(tries[0])], args.smoke, args.timeout, quiet,
                          sizes=tries, length=args.capacity_length, limit=limit, label=name))
    for row in ours:
        emit({**row, "capacity": True})
    fits["fusedrl"] = max((r["agents"] for r in ours if r.get("fits")), default=None)
    spec = parse_row(name)
    # PureJaxRL has no bfloat16 mode and no -vr choice: its side runs with the plain capacity row
    if args.purejaxrl_src and spec["compute_dtype"] == "float32" and not spec["value_in_rollout"]:
        ask = json.dumps({"agents": tries, "limit": limit})
        out = run_purejaxrl(env, tries[0], args.smoke, args, {**quiet, "FUSEDRL_PUREJAXRL_PREDICT": ask},
                            attempts=1, total_timesteps=args.capacity_length)
        config = purejaxrl_config(env, args.smoke, args.capacity_length)
        if "error" in out or "predict" not in out:
            emit({"row": name, "impl": "purejaxrl", "kind": "predict", "capacity": True,
                  "error": out.get("error", f"no prediction from the peer: {out}")})
        else:
            for r in out["predict"]:
                emit({"row": name, "impl": "purejaxrl", "kind": "predict", "capacity": True,
                      "agents": r["agents"], "num_envs": config["NUM_ENVS"],
                      "total_timesteps": int(config["TOTAL_TIMESTEPS"]), "memory": r["memory"],
                      "predicted_bytes": r["memory"]["total"], "limit_bytes": r["limit_bytes"],
                      "fits": r["fits"]})
            fits["purejaxrl"] = max((r["agents"] for r in out["predict"] if r["fits"]), default=None)
    # Steps/s at the largest predicted fit, a short run each (device memory preallocated again).
    timed = {"capacity": True, "capacity_predicted": True, "fit_length": args.capacity_length}
    if fits["fusedrl"]:
        for row in run_group("train", env, [row_name(fits["fusedrl"])], args.smoke, args.timeout, env_vars,
                             total_timesteps=args.total_timesteps, label=name):
            emit({**row, **timed, "agents": row.get("agents", fits["fusedrl"])})
    if fits.get("purejaxrl"):
        row = purejaxrl_row(name, env, fits["purejaxrl"], args.smoke, args, env_vars, attempts=1)
        emit({**row, **timed})


def predicted_capacity_summary(results: list[dict[str, Any]]) -> list[str]:
    """Per predicted capacity row and side: the most agents predicted to fit at the run's length
    (XLA's memory analysis against the device's memory), the first that did not, and the steps/s
    of a short run at the most; then ours over PureJaxRL's."""
    lines = []
    for name in dict.fromkeys(r["row"] for r in results if r.get("capacity") and r.get("kind") == "predict"):
        best = {}
        for impl in ("fusedrl", "purejaxrl"):
            source = name
            if impl == "purejaxrl" and not any(r["row"] == name and r.get("impl") == impl for r in results):
                source = name.removesuffix(VALUE_IN_ROLLOUT)  # the plain row's PureJaxRL side
            tries = [r for r in results if r["row"] == source and r.get("impl") == impl
                     and r.get("kind") == "predict"]
            if not tries:
                continue
            if any("error" in r for r in tries):
                lines.append(f"{name}, {impl}: prediction failed: "
                             f"{next(r for r in tries if 'error' in r)['error'].splitlines()[-1][:300]}")
                continue
            fit = [r for r in tries if r["fits"]]
            over = [r for r in tries if not r["fits"]]
            top = max(fit, key=lambda r: r["agents"]) if fit else None
            run = next((r for r in results if r["row"] == source and r.get("impl") == impl
                        and r.get("capacity_predicted") and top and r.get("agents") == top["agents"]), None)
            length = tries[0]["total_timesteps"]
            what = (f"{top['agents']:,} agents predicted to fit at {length:,} env steps per agent "
                    f"({_mib(top['predicted_bytes'])} of {_mib(top['limit_bytes'])} MiB)" if top else
                    f"not even {tries[0]['agents']:,} agents predicted to fit at {length:,} env steps "
                    f"per agent")
            end = (f"{over[0]['agents']:,} would need {_mib(over[0]['predicted_bytes'])} MiB" if over else
                   f"no size up to {tries[-1]['agents']:,} ran out (a bound)")
            if run is None:
                timing = ""
            elif "error" in run:
                why = "out of device memory" if run.get("out_of_memory") else "error"
                timing = f"; its short run failed ({why})"
            else:
                label = ("predicted to fit at full length, timed at a short run" if impl == "purejaxrl" else
                         "timed at a short run; its memory is flat in the run's length")
                timing = (f"; {_rate(run['steps_per_s'])} steps/s at {run['total_timesteps']:,} env steps "
                          f"per agent ({label}; peak {_mib(run['peak_bytes'])} MiB)")
            best[impl] = (top, run, bool(over))
            if source == name:  # the plain row's PureJaxRL line is printed with that row
                lines.append(f"{name}, {impl}: {what}; {end}{timing}")
        if all(best.get(i, (None,))[0] for i in ("fusedrl", "purejaxrl")):
            (ours, our_run, our_over), (theirs, their_run, their_over) = best["fusedrl"], best["purejaxrl"]
            bound = "" if our_over and their_over else " (a bound: a side with no misfit may hold more)"
            speed = ""
            if our_run and their_run and "error" not in our_run and "error" not in their_run:
                speed = f"; aggregate steps/s there {our_run['steps_per_s'] / their_run['steps_per_s']:.2f}x"
            lines.append(f"{name}: fusedrl/PureJaxRL agent capacity at {ours['total_timesteps']:,} env steps "
                         f"per agent {ours['agents'] / theirs['agents']:.1f}x{bound}{speed}")
    return lines


def capacity_summary(results: list[dict[str, Any]]) -> list[str]:
    """Per capacity row and side: the largest agent count that ran (with its steps/s) and where it
    ran out of memory; then ours over PureJaxRL's."""
    lines = []
    measured = [r for r in results if r.get("capacity") and r.get("kind") != "predict"
                and not r.get("capacity_predicted")]
    for name in dict.fromkeys(r["row"] for r in measured):
        best = {}
        for impl in ("fusedrl", "purejaxrl"):
            tries = [r for r in measured if r["row"] == name and r["impl"] == impl]
            if not tries:
                continue
            ran = [r for r in tries if "error" not in r]
            oom = [r for r in tries if r.get("out_of_memory")]
            failed = [r for r in tries if "error" in r and not r.get("out_of_memory")]
            top = max(ran, key=lambda r: r["agents"]) if ran else None
            fastest = max(ran, key=lambda r: r["steps_per_s"]) if ran else None
            best[impl] = (top, fastest, bool(oom))
            end = (f"out of device memory at {oom[0]['agents']:,} agents" if oom else
                   f"failed at {failed[0]['agents']:,} agents (not out of memory: see its row)" if failed else
                   f"no out-of-memory up to {tries[-1]['agents']:,} agents")
            what = (f"{top['agents']:,} agents ran ({_rate(top['steps_per_s'])} steps/s, peak "
                    f"{_mib(top['peak_bytes'])} MiB, {top['total_timesteps']:,} env steps per agent; "
                    f"fastest {_rate(fastest['steps_per_s'])} steps/s at {fastest['agents']:,})"
                    if top else "nothing ran")
            lines.append(f"{name}, {impl}: {what}; {end}")
        if best.get("fusedrl", (None,))[0] and best.get("purejaxrl", (None,))[0]:
            (ours, our_fast, our_oom), (theirs, their_fast, their_oom) = best["fusedrl"], best["purejaxrl"]
            bound = "" if our_oom and their_oom else " (a bound: a side with no out-of-memory may hold more)"
            faster = our_fast["steps_per_s"] / their_fast["steps_per_s"]
            lines.append(f"{name}: fusedrl/PureJaxRL agent capacity {ours['agents'] / theirs['agents']:.1f}x"
                         f"{bound}; best aggregate steps/s {faster:.2f}x")
    return lines


def summarize(results: list[dict[str, Any]]) -> list[str]:
    """Lines after the table: the flat-memory checks, ours/PureJaxRL ratios, and how close training
    gets to env stepping alone."""
    lines = []
    ours = {r["row"]: r for r in results if r["impl"] == "fusedrl" and "error" not in r
            and (parse_row(r["row"]) or {}).get("kind") == "train" and r.get("kind") != "profile"
            and not r.get("capacity")}
    theirs = {r["row"]: r for r in results if r["impl"] == "purejaxrl" and "error" not in r
              and not r.get("capacity")}
    for name, r in ours.items():
        if "flat" in r:
            verdict = {True: "flat", False: "GROWS", None: "n/a (no device memory statistics)"}[r["flat"]]
            lines.append(f"memory in total_timesteps, {name}: {verdict} (peak {_mib(r['probe_peak_bytes'])} "
                         f"MiB at {r['probe_total_timesteps']:,} steps, {_mib(r['peak_bytes'])} MiB at "
                         f"{r['total_timesteps']:,}; one per-step float32 history of the run: "
                         f"{_mib(r['per_step_history_bytes'])} MiB)")
    for name, r in ours.items():
        twin = base_row(name)  # PureJaxRL has no bfloat16 mode and no -vr choice: its float32 row
        if twin in theirs:
            t = theirs[twin]
            ours_is = [w for w, on in (("bfloat16", "-bf16" in name),
                                       ("with value_in_rollout", name.endswith(VALUE_IN_ROLLOUT))) if on]
            vs = f" (ours {' and '.join(ours_is)}, PureJaxRL float32)" if ours_is else ""
            lines.append(f"{name}: fusedrl/PureJaxRL steps/s {r['steps_per_s'] / t['steps_per_s']:.2f}x{vs}, "
                         f"PureJaxRL/fusedrl wall time {t['wall_s'] / r['wall_s']:.2f}x, peak memory "
                         f"{_mib(r['peak_bytes'])} MiB vs {_mib(t['peak_bytes'])} MiB")
    for name, r in ours.items():
        if name.endswith("-bf16") and name.removesuffix("-bf16") in ours:
            lines.append(f"{name}: bfloat16/float32 steps/s "
                         f"{r['steps_per_s'] / ours[name.removesuffix('-bf16')]['steps_per_s']:.2f}x")
    for name, r in ours.items():
        off = name.removesuffix(VALUE_IN_ROLLOUT)
        if off != name and off in ours:
            o = ours[off]
            memory = ""
            for what, field in (("peak memory", "peak_bytes"), ("XLA's memory analysis", "predicted_bytes")):
                if r.get(field) is not None and o.get(field) is not None:
                    memory += (f", {what} {_mib(r[field])} MiB vs {_mib(o[field])} MiB "
                               f"({(r[field] - o[field]) / 2**20 / r['agents']:+,.1f} MiB per agent)")
            lines.append(f"{name}: value_in_rollout on/off steps/s {r['steps_per_s'] / o['steps_per_s']:.2f}x"
                         f"{memory}")
    lines += capacity_summary(results)
    lines += predicted_capacity_summary(results)
    for r in results:  # what the capacity prediction rests on: XLA's analysis against the real peak
        if r.get("kind") != "predict" and r.get("predicted_bytes") and r.get("peak_bytes"):
            lines.append(f"{r['row']}, {r['impl']}, {r['agents']:,} agents: XLA's memory analysis "
                         f"{_mib(r['predicted_bytes'])} MiB, device peak {_mib(r['peak_bytes'])} MiB "
                         f"(peak/analysis {r['peak_bytes'] / r['predicted_bytes']:.2f}x)")
    for r in results:
        if r.get("kind") == "profile" and "error" not in r:
            shares = ", ".join(f"{k} {v / r['busy_seconds']:.0%}" for k, v in r["seconds"].items())
            lines.append(f"{r['row']} device time per phase ({r['source']} events): {shares}; "
                         f"busy {r['busy_seconds'] / r['wall_seconds']:.0%} of wall")
    envs = [r for r in results if r["row"].startswith("envs-") and "error" not in r]
    for name, r in ours.items():
        limit = max((e["steps_per_s"] for e in envs if e["env_id"] == r["env_id"]), default=None)
        if limit:
            lines.append(f"{name}: training at {r['steps_per_s'] / limit:.1%} of the env's own stepping rate "
                         f"({_rate(limit)} steps/s, the fastest env-stepping size)")
    return lines


if __name__ == "__main__":
    sys.exit(main())
