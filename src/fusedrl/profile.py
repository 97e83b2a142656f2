"""Where the wall time of one PPO update goes: env stepping, policy, GAE, update, transfers, Python.

    python -m fusedrl.bench profile --env CartPole-v1 --mode fused
    python -m fusedrl.bench profile --env gymnasium:CartPole-v1 --mode bridge
    fusedrl profile --env CartPole-v1 --phases [--agents 2048]     # device time per phase

`--phases` is another measurement (`profile_phases`): a jax.profiler trace of a few updates of the
whole jitted run, its device time summed per phase of the update (`fusedrl.train.phases`) through
the compiled program's HLO. What follows describes the modes' timings of separately jitted pieces.

Measured, not estimated. Every piece is run once first (compile excluded), then timed `--repeats`
times with `block_until_ready`; the table reports medians.

fused: the update is one jitted program. Its pieces are jitted separately on the same state:
  env      a `lax.scan` of num_steps vectorised env steps with random actions
  policy   a `lax.scan` of num_steps policy calls (forward, sample, log-prob, value)
  rollout  the trainer's real rollout (env and policy interleaved in one scan); the row
           "rollout: fusion" is rollout - env - policy (negative when XLA overlaps them)
  gae      the trainer's `advantages` (value of the next observations + GAE)
  update   the trainer's `learn` (update_epochs x num_minibatches Adam steps)
  other    whole update - rollout - gae - update (metrics, dispatch of the one call)
  transfer is 0: no host<->device transfer happens inside the fused program (the promise that
  tests/test_ppo.py checks with jax.transfer_guard("disallow") on the whole jitted train).

bridge: the trainer's real host loop runs with a probe that synchronises and times each phase:
  env        Gymnasium vector env `step` (host)
  policy     the jitted policy calls, split into device compute (the same call in a jitted
             scan, per call) and dispatch (the rest: Python-side jit call overhead)
  to_device  observations host -> device; to_host: actions device -> host
  python     the rest of the loop (bookkeeping, encoding, final observations)
  gae, update  the trainer's `advantages` and `learn`, jitted separately on the collected rollout
  other      the learn call - gae - update (stacking the rollout, metrics, dispatch)

`device_fraction` is the measured device computation (fused: rollout + gae + update; bridge:
policy compute + gae + update) over the update's wall time; `steps_per_s` is num_envs * num_steps
over the median wall time of an unprobed update.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from fusedrl import bridge
from fusedrl._argtypes import UsageError, add_import_option, import_modules, positive_int
from fusedrl.compile_cache import use_compile_cache
from fusedrl.envs import Discrete, make, registered_ids
from fusedrl.envs.host import GYMNASIUM_PREFIX, is_host_env_id
from fusedrl.launches import format_launches, program_launches, training_program
from fusedrl.train.config import PPOConfig
from fusedrl.train.losses import Batch
from fusedrl.train.phases import PHASE_ROWS, hlo_phases, phase_of
from fusedrl.train.ppo import make_train
from fusedrl.train.presets import preset_fields

MODES = ("fused", "bridge")


def _median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    """Median wall time of `fn()` (blocked until ready) over `repeats` runs, after one warm-up."""
    jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def resolve(env_id: str, mode: str | None) -> tuple[str, str]:
    """(env id to profile, mode). "CartPole-v1" in bridge mode profiles "gymnasium:CartPole-v1";
    a "gymnasium:" id in fused mode profiles our JAX env of the same name, if there is one."""
    if mode is None:
        mode = "bridge" if is_host_env_id(env_id) else "fused"
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}.")
    if mode == "bridge" and not is_host_env_id(env_id):
        env_id = GYMNASIUM_PREFIX + env_id.split(":", 1)[-1]
    if mode == "fused" and is_host_env_id(env_id):
        name = env_id[len(GYMNASIUM_PREFIX):]
        if name not in registered_ids(include_gymnax=False):
            raise ValueError(
                f"fused mode needs a JAX environment; {env_id!r} is a Gymnasium env and fusedrl has "
                f"no JAX env named {name!r}. Use --mode bridge."
            )
        env_id = name
    return env_id, mode


def default_config(env_id: str, **overrides) -> PPOConfig:
    """The preset of `env_id` (see `preset_source`), cut to at most 100 updates (the profiler
    times single updates; its annealing schedule needs a run to anneal over)."""
    base = preset_fields(env_id)
    base.update({k: v for k, v in overrides.items() if v is not None})
    base["env_id"] = env_id
    c = PPOConfig(**{**base, "total_timesteps": base.get("total_timesteps", 10**6)})
    return c.replace(total_timesteps=max(c.batch_size, min(c.total_timesteps, 100 * c.batch_size)))


def _flat_batch(traj, adv, targets) -> Batch:
    n = traj.reward.shape[0] * traj.reward.shape[1]

    def flat(x):
        return x.reshape((n,) + x.shape[2:])

    return Batch(obs=flat(traj.obs), action=flat(traj.action), log_prob=flat(traj.log_prob),
                 value=flat(traj.value), advantage=flat(adv), target=flat(targets))


def _random_actions(space, key, n: int):
    if isinstance(space, Discrete):
        return jax.random.randint(key, (n,), 0, space.n, jnp.int32)
    return jax.random.uniform(key, (n,) + tuple(space.shape), jnp.float32, -1.0, 1.0)


def _policy_scan(trainer, num_steps: int):
    """num_steps policy calls in one jitted scan, as in the rollout; obs drift slightly so nothing
    is hoisted."""

    def fn(params, obs, key):
        def step(carry, k):
            obs = carry
            pi, value = trainer.network.apply(params, obs)
            action = pi.sample(k)
            return obs + 1e-6 * value[:, None], (action, pi.log_prob(action))

        return jax.lax.scan(step, obs, jax.random.split(key, num_steps))

    return jax.jit(fn)


def profile_fused(config: PPOConfig, repeats: int = 5) -> dict[str, Any]:
    trainer = make_train(config)
    c = config
    hp = trainer.default_hparams()
    state = jax.jit(trainer.init)(jax.random.key(0), hp)
    venv = trainer.make_env(hp)
    space = trainer.env.action_space(hp.env_params)

    update = jax.jit(lambda s, h: trainer.update_step(s, h, venv))
    rollout = jax.jit(lambda s, h, k: trainer.rollout(s, h, venv, k))

    @jax.jit
    def env_only(env_state, h, key):
        def step(es, k):
            obs, es, reward, *_ = venv.step(es, _random_actions(space, k, c.num_envs), h.env_params)
            return es, reward.sum() + obs.sum()

        return jax.lax.scan(step, env_state, jax.random.split(key, c.num_steps))

    policy = _policy_scan(trainer, c.num_steps)
    advantages = jax.jit(trainer.advantages)
    learn = jax.jit(trainer.learn)

    key = jax.random.key(1)
    _, traj = rollout(state, hp, key)
    adv, targets = advantages(state.params, traj, hp)
    batch = jax.jit(_flat_batch)(traj, adv, targets)
    s = {
        "total": _median_seconds(lambda: update(state, hp), repeats),
        "env": _median_seconds(lambda: env_only(state.env_state, hp, key), repeats),
        "policy": _median_seconds(lambda: policy(state.params, state.obs, key), repeats),
        "rollout": _median_seconds(lambda: rollout(state, hp, key), repeats),
        "gae": _median_seconds(lambda: advantages(state.params, traj, hp), repeats),
        "update": _median_seconds(
            lambda: learn(state.params, state.opt_state, batch, hp, key), repeats),
    }
    rows = {
        "env": s["env"],
        "policy": s["policy"],
        "rollout: fusion": s["rollout"] - s["env"] - s["policy"],
        "gae": s["gae"],
        "update": s["update"],
        "transfer": 0.0,
        "other": s["total"] - s["rollout"] - s["gae"] - s["update"],
    }
    device = min(s["rollout"] + s["gae"] + s["update"], s["total"])
    return _summary(config, "fused", rows, s["total"], s["total"], device, repeats)


def profile_bridge(config: PPOConfig, repeats: int = 5) -> dict[str, Any]:
    trainer = bridge.make_host_train(config)
    c = config
    hp = trainer.default_hparams()
    state = trainer.init(jax.random.key(0), hp)
    envs = trainer.env.make_vec(c.num_envs)
    try:
        state, episode = trainer.reset_envs(envs, state)
        # Warm-up: compiles every jitted piece and fills the episode pipeline.
        state, episode, traj = trainer.collect(envs, state, episode)
        state0 = state
        jax.block_until_ready(trainer.learn_step(state, *traj, hp))

        unprobed, probes, learn_times = [], [], []
        for _ in range(repeats):
            t = time.perf_counter()
            state, episode, traj = trainer.collect(envs, state0, episode)
            jax.block_until_ready(trainer.learn_step(state, *traj, hp))
            unprobed.append(time.perf_counter() - t)
            probe = bridge.Probe()  # looked up at call time: tests record the probes
            t = time.perf_counter()
            state, episode, traj = trainer.collect(envs, state0, episode, probe=probe)
            collected = time.perf_counter()
            jax.block_until_ready(trainer.learn_step(state, *traj, hp))
            learn_times.append(time.perf_counter() - collected)
            probe.seconds["total"] = time.perf_counter() - t
            probes.append(probe.seconds)
    finally:
        envs.close()
    med = {k: statistics.median(p.get(k, 0.0) for p in probes) for k in probes[0]}

    # The device compute of one policy call, measured inside a jitted scan (no dispatch).
    steps, host = traj
    raw_obs = jnp.asarray(steps[0][0])
    scan = _policy_scan(trainer, c.num_steps)
    policy_device = _median_seconds(lambda: scan(state.params, raw_obs, state.key), repeats)
    policy_device = min(policy_device, med.get("policy", 0.0))

    _, tr = jax.jit(trainer.transition)(state0.env_state, steps, host, hp.gamma)
    advantages, learn = jax.jit(trainer.advantages), jax.jit(trainer.learn)
    adv, targets = advantages(state.params, tr, hp)
    batch = jax.jit(_flat_batch)(tr, adv, targets)
    key = jax.random.key(1)
    gae_s = _median_seconds(lambda: advantages(state.params, tr, hp), repeats)
    upd_s = _median_seconds(lambda: learn(state.params, state.opt_state, batch, hp, key), repeats)
    learn_call = statistics.median(learn_times)

    rows = {
        "env": med.get("env", 0.0),
        "policy: device": policy_device,
        "policy: dispatch": med.get("policy", 0.0) - policy_device,
        "to_device": med.get("to_device", 0.0),
        "to_host": med.get("to_host", 0.0),
        "python": med.get("host", 0.0),
        "gae": gae_s,
        "update": upd_s,
        "other": learn_call - gae_s - upd_s,
    }
    total = med["total"]
    device = policy_device + gae_s + upd_s
    return _summary(config, "bridge", rows, total, statistics.median(unprobed), device, repeats)


# ---- phases: the device time of a training run per phase, from a jax.profiler trace ----------

#: Operations that only run others (a loop, a branch, a call): their events enclose the events of
#: the operations they run, so only those are counted.
_CONTROL_OPCODES = {"while", "conditional", "call", "async-start", "async-done", "async-update"}


def read_trace(trace_dir: str) -> list[dict[str, Any]]:
    """The events of the trace `jax.profiler.trace(trace_dir, create_perfetto_trace=True)` wrote:
    its Chrome-trace JSON (`*.trace.json.gz`, or `perfetto_trace.json.gz`), each complete event
    ("ph": "X") with its process's and thread's names added as "process" and "thread"."""
    files = sorted(glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True))
    files = files or sorted(glob.glob(os.path.join(trace_dir, "**", "perfetto_trace.json.gz"),
                                      recursive=True))
    if not files:
        raise FileNotFoundError(f"{trace_dir}: jax.profiler wrote no *.trace.json.gz or "
                                f"perfetto_trace.json.gz there")
    with gzip.open(files[-1], "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    meta = [e for e in events if e.get("ph") == "M"]
    processes = {e["pid"]: e.get("args", {}).get("name", "") for e in meta if e.get("name") == "process_name"}
    threads = {(e["pid"], e.get("tid")): e.get("args", {}).get("name", "") for e in meta
               if e.get("name") == "thread_name"}
    return [{**e, "process": processes.get(e.get("pid"), ""),
             "thread": threads.get((e.get("pid"), e.get("tid")), "")}
            for e in events if e.get("ph") == "X"]


def _same_module(event_module: str, module: str) -> bool:
    return event_module.split("(")[0] == module.split("(")[0]


#: Lines a trace viewer derives from a device's kernels (one event per XLA op or module, or per
#: name scope): they repeat the kernels' time. Of them only "XLA Ops" is used, where present.
_DERIVED_LINES = ("XLA Ops", "XLA Modules", "Steps", "TensorFlow Name Scope", "TensorFlow Ops",
                  "Framework Name Scope", "Framework Ops", "Source code")


def _kernel_name(name: str) -> str:
    """A GPU kernel's name as XLA forms it from its HLO instruction's ("loop_add_fusion.3" ->
    "loop_add_fusion_3")."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def phase_times(events: Sequence[dict[str, Any]], module: str,
                ops: dict[str, tuple[str, str]]) -> tuple[dict[str, float], dict[str, Any]]:
    """Seconds per phase (`PHASE_ROWS`) of the operations of `module` in a trace's `events`.

    On a GPU the device's events count (processes named "/device:...": its kernels and copies, or
    its derived "XLA Ops" line where the trace has one); each names its operation (`args.hlo_op`,
    else the kernel's name, which XLA forms from the operation's). On a CPU, which has no device
    events, the events of XLA's threads that name an operation count. Events of control-flow
    operations (a loop enclosing its body's operations) are left out, so nothing counts twice, and
    so are events of another program (`args.hlo_module`). A device event the module's HLO does not
    name counts as "other" (`unmatched_s` says how much)."""
    def ours(e):
        return _same_module(str(e.get("args", {}).get("hlo_module", module)), module)

    device = [e for e in events if e["process"].startswith("/device:") and "CPU" not in e["process"]
              and ours(e) and e.get("dur", 0) > 0]
    derived = [e for e in device if e.get("thread") == "XLA Ops"]
    device = derived or [e for e in device if e.get("thread") not in _DERIVED_LINES]
    source = "device" if device else "host"
    counted = device or [e for e in events if "hlo_op" in e.get("args", {}) and ours(e)]
    by_kernel = {_kernel_name(name): v for name, v in ops.items()}
    seconds = dict.fromkeys(PHASE_ROWS, 0.0)
    unmatched = 0.0
    def operation(e):
        # A kernel XLA launched itself names its operation in `hlo_op`. A kernel replayed from a
        # CUDA graph (XLA's command buffers, on by default on GPUs) has the command buffer's name
        # there ("command_buffer_185"); its own name is then the kernel name XLA formed from its
        # operation's, so that is tried next.
        for name in (e.get("args", {}).get("hlo_op"), e.get("name")):
            if name:
                found = ops.get(str(name)) or by_kernel.get(_kernel_name(str(name)))
                if found:
                    return found
        return "", None

    for e in counted:
        opcode, phase = operation(e)
        if opcode in _CONTROL_OPCODES:
            continue
        dur = float(e.get("dur", 0.0)) * 1e-6  # the trace's times are microseconds
        if phase is None:
            unmatched += dur
            phase = "other"
        seconds[phase] += dur
    lanes = len({(e.get("pid"), e.get("tid")) for e in counted})
    return seconds, {"events": len(counted), "lanes": lanes, "source": source, "unmatched_s": unmatched}


def profile_phases(config, agents: int | None = None, updates: int = 4,
                   trace_dir: str | None = None, tuning=None) -> dict[str, Any]:
    """The device time of `updates` training updates of `config` per phase (`PHASE_ROWS`).

    The run (`Trainer.run`, jitted; with `agents`, vmapped over that many agents as
    `jax.jit(jax.vmap(train))` trains them) is compiled and run once, then run again under
    `jax.profiler.trace`; the trace's events are summed per phase through the compiled program's
    HLO (each operation's scope path). `trace_dir` keeps the trace there (for TensorBoard or
    Perfetto); by default it goes to a temporary folder. `tuning`: the trainer's speed choices
    (`fusedrl.train.tuning.Tuning`; None: its own). Returns the summary that `format_phases`
    prints (seconds per update, summed over the agents' batched operations)."""
    if int(updates) < 1:
        raise ValueError(f"updates must be >= 1, got {updates}.")
    if agents is not None and int(agents) < 1:
        raise ValueError(f"agents must be >= 1, got {agents}.")
    updates = int(updates)
    trainer = make_train(config) if tuning is None else make_train(config, tuning=tuning)
    init, run = training_program(trainer, agents, updates)
    state = jax.jit(init)(jax.random.key(0))
    run = jax.jit(run)
    t0 = time.perf_counter()
    compiled = run.lower(state).compile()
    compile_s = time.perf_counter() - t0
    module, ops = hlo_phases(compiled.as_text())
    jax.block_until_ready(compiled(state))  # first run: allocations, autotuning
    with tempfile.TemporaryDirectory() as tmp:
        folder = trace_dir or tmp
        with jax.profiler.trace(folder, create_perfetto_trace=True):
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(state))
            wall = time.perf_counter() - t0
        events = read_trace(folder)
    seconds, info = phase_times(events, module, ops)
    busy = sum(seconds.values())
    if busy <= 0:
        raise RuntimeError(f"the trace in {trace_dir or 'a temporary folder'} holds no event of the "
                           f"program {module!r} ({len(events)} events in all): the profiler saw none "
                           f"of its operations")
    n = 1 if agents is None else int(agents)
    dev = jax.devices()[0]
    return {
        "bench": "profile-phases",
        "env_id": config.env_id, "agents": n, "num_envs": config.num_envs, "num_steps": config.num_steps,
        "update_epochs": getattr(config, "update_epochs", 1),
        "num_minibatches": getattr(config, "num_minibatches", 1),
        "compute_dtype": getattr(config, "compute_dtype", "float32"), "updates": updates,
        "seconds": {k: v / updates for k, v in seconds.items()},
        "busy_seconds": busy / updates, "wall_seconds": wall / updates, "compile_s": compile_s,
        "steps_per_s": n * config.num_envs * config.num_steps * updates / wall,
        "events": info["events"], "lanes": info["lanes"], "source": info["source"],
        "unmatched_seconds": info["unmatched_s"] / updates,
        "jax": jax.__version__, "device": f"{dev.platform}:{getattr(dev, 'device_kind', '')}",
        "trace_dir": trace_dir,
    }


#: What each phase row holds, printed under the table.
PHASE_NOTES = {
    "env": "the envs' step and reset",
    "policy": "the policy's forward pass in the rollout, sampling, log-probabilities",
    "advantages": "values of the next observations and the targets (GAE)",
    "loss": "the loss's forward and backward pass per minibatch",
    "optimizer": "the optimiser's update (Adam, the gradient clip) and applying it",
    "shuffle": "each epoch's permutation and the gathered minibatches",
    "other": "operations under no phase: per-update metrics, the loops' bookkeeping, XLA's copies",
}


def format_phases(summary: dict[str, Any]) -> str:
    """The table of `profile_phases`: each phase's time per update and share of the busy time."""
    busy, wall = summary["busy_seconds"], summary["wall_seconds"]
    lines = [
        f"{summary['env_id']}  agents={summary['agents']}  num_envs={summary['num_envs']}  "
        f"num_steps={summary['num_steps']}  epochs x minibatches={summary['update_epochs']}x"
        f"{summary['num_minibatches']}  {summary['compute_dtype']}  (jax {summary['jax']}, "
        f"{summary['device']}, {summary['updates']} updates traced, {summary['source']} events)",
        f"{'phase':<12}{'ms/update':>12}{'share':>9}   what",
    ]
    for name in PHASE_ROWS:
        sec = summary["seconds"][name]
        lines.append(f"{name:<12}{sec * 1e3:>12.3f}{sec / busy:>9.1%}   {PHASE_NOTES[name]}")
    lines.append(f"{'busy':<12}{busy * 1e3:>12.3f}{1:>9.0%}   the operations' time, summed")
    where = "device" if summary["source"] == "device" else "XLA's CPU threads (they overlap)"
    lines.append(f"wall {wall * 1e3:.3f} ms/update; operations' time / wall {busy / wall:.0%} ({where}); "
                 f"env steps/s {summary['steps_per_s']:,.0f}")
    if summary["source"] == "host" and summary["device"].split(":")[0] != "cpu":
        lines.append("the trace has no device events (is CUPTI installed?): these are the host's launch "
                     "times, not the device's")
    if summary.get("unmatched_seconds"):
        lines.append(f"of 'other': {summary['unmatched_seconds'] * 1e3:.3f} ms/update in operations the "
                     f"program's HLO does not name")
    return "\n".join(lines)


def _summary(config, mode, rows, total, unprobed_total, device, repeats) -> dict[str, Any]:
    dev = jax.devices()[0]
    return {
        "bench": "profile",
        "env_id": config.env_id,
        "mode": mode,
        "num_envs": config.num_envs,
        "num_steps": config.num_steps,
        "update_epochs": config.update_epochs,
        "num_minibatches": config.num_minibatches,
        "repeats": repeats,
        "seconds": {k: float(v) for k, v in rows.items()},
        "total_seconds": float(total),
        "steps_per_s": float(config.batch_size / unprobed_total),
        "device_fraction": float(min(max(device / total, 0.0), 1.0)),
        "jax": jax.__version__,
        "device": f"{dev.platform}:{getattr(dev, 'device_kind', '')}",
    }


def profile_update(config: PPOConfig, mode: str | None = None, repeats: int = 5) -> dict[str, Any]:
    """Measures one training update of `config` in `mode` ("fused" or "bridge"; default from the
    env id). Returns the summary dict that `main` prints as JSON (times in seconds)."""
    env_id, mode = resolve(config.env_id, mode)
    if env_id != config.env_id:
        config = config.replace(env_id=env_id)
    if int(repeats) < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}.")
    fn = profile_fused if mode == "fused" else profile_bridge
    return fn(config, int(repeats))


#: What each mode's "other" row holds, printed under the table.
OTHER = {
    "fused": "other: the whole jitted update - rollout - gae - update (the per-update metrics, the "
             "optimizer-state bookkeeping between the pieces, and dispatching the one call)",
    "bridge": "other: the trainer's learn call - gae - update (stacking the host rollout into device "
              "arrays, the per-update metrics, and dispatching the calls)",
}

#: Why a row can come out negative: its pieces were timed apart and overlap inside the whole.
NEGATIVE = {
    "rollout: fusion": "XLA overlaps env and policy inside the one rollout program, so they take "
                       "less time together than timed apart",
    "other": "the pieces timed apart took longer than the whole, which XLA schedules as one program",
    "policy: dispatch": "the policy's device time per call, timed in a scan, exceeds its call time "
                        "here (timing noise at this size)",
}


def format_table(summary: dict[str, Any]) -> str:
    """The table `fusedrl profile` prints: one row per phase that takes time, then notes on the
    phases whose measured share is negative (timed apart, they overlap in the whole) and on what
    "other" holds."""
    total = summary["total_seconds"]
    lines = [
        f"{summary['env_id']}  mode={summary['mode']}  num_envs={summary['num_envs']}  "
        f"num_steps={summary['num_steps']}  epochs x minibatches={summary['update_epochs']}x"
        f"{summary['num_minibatches']}  (jax {summary['jax']}, {summary['device']}, "
        f"medians of {summary['repeats']})",
        f"{'phase':<18}{'ms/update':>12}{'share':>9}",
    ]
    negative = {name: sec for name, sec in summary["seconds"].items() if sec < 0}
    for name, sec in summary["seconds"].items():
        if name not in negative:
            lines.append(f"{name:<18}{sec * 1e3:>12.2f}{sec / total:>9.1%}")
    lines.append(f"{'total':<18}{total * 1e3:>12.2f}{1:>9.0%}")
    lines.append(
        f"env steps/s {summary['steps_per_s']:,.0f}   device computation "
        f"{summary['device_fraction']:.1%} of wall time"
    )
    if "other" in summary["seconds"] and summary["mode"] in OTHER:
        lines.append(OTHER[summary["mode"]])
    for name, sec in negative.items():
        why = NEGATIVE.get(name, "its pieces, timed apart, overlap in the whole")
        lines.append(f"not a row: {name} {sec * 1e3:.2f} ms, below zero: {why}; the rows above then "
                     f"add up to more than the total")
    return "\n".join(lines)


def build_parser(prog: str = "fusedrl profile") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Measure where the wall time of one PPO update goes (fused or host bridge).",
    )
    p.add_argument("--env", default="CartPole-v1",
                   help="env id; 'gymnasium:<id>' for the bridge (default: %(default)s)")
    p.add_argument("--mode", choices=MODES, default=None,
                   help="fused (one XLA program) or bridge (host envs); default from the id")
    p.add_argument("--num-envs", type=positive_int, default=None)
    p.add_argument("--num-steps", type=positive_int, default=None)
    p.add_argument("--update-epochs", type=positive_int, default=None)
    p.add_argument("--num-minibatches", type=positive_int, default=None)
    p.add_argument("--repeats", type=positive_int, default=5, help="timed repeats (default: 5)")
    p.add_argument("--json", action="store_true",
                   help="also print the measurements as one JSON line after the table")
    p.add_argument("--phases", action="store_true",
                   help="where the device time goes: trace a few training updates with jax.profiler and "
                        "sum the device time per phase (env, policy, advantages, loss, optimizer, "
                        "shuffle, other); fused mode only")
    p.add_argument("--launches", action="store_true",
                   help="how many kernels one update launches, per phase and per loop, read from the "
                        "compiled program without running it (fusedrl.launches); fused mode only")
    p.add_argument("--target", default="default",
                   help="with --launches: compile for this machine's device (default) or for a GPU "
                        "model without one: h100, h200 (needs jax's CUDA plugin and JAX_PLATFORMS=cpu)")
    p.add_argument("--agents", type=positive_int, default=None,
                   help="with --phases or --launches: that many agents vmapped, as "
                        "jax.jit(jax.vmap(train)) trains them")
    p.add_argument("--updates", type=positive_int, default=4,
                   help="with --phases: updates traced; with --launches: updates compiled "
                        "(default: %(default)s)")
    p.add_argument("--trace-dir", default=None,
                   help="with --phases: keep the jax.profiler trace in this folder (TensorBoard, Perfetto)")
    p.add_argument("--compute-dtype", choices=("float32", "bfloat16"), default=None,
                   help="the config's compute_dtype (default: the preset's)")
    p.add_argument("--no-compile-cache", action="store_true",
                   help="compile every program here instead of loading it from fusedrl's compile "
                        "cache (~/.cache/fusedrl/jax), and save none there; or set FUSEDRL_COMPILE_CACHE=0")
    add_import_option(p)
    return p


def main(argv: Sequence[str] | None = None, prog: str = "fusedrl profile") -> int:
    """Parses `argv`, profiles, prints the table (then one JSON line with --json); returns 0 (2 on
    bad input)."""
    args = build_parser(prog).parse_args(argv)
    try:
        import_modules(args.imports)
        env_id, mode = resolve(args.env, args.mode)
        make(env_id)  # an unknown id: the same error as `fusedrl train`, before any work
        config = default_config(
            env_id, num_envs=args.num_envs, num_steps=args.num_steps,
            update_epochs=args.update_epochs, num_minibatches=args.num_minibatches,
            compute_dtype=args.compute_dtype,
        )
        fused_only = "--phases" if args.phases else "--launches" if args.launches else None
        if fused_only and mode != "fused":
            raise UsageError(f"{fused_only} reads the fused program, and {env_id!r} runs on the host "
                             f"bridge: profile a JAX env (e.g. {env_id.split(':', 1)[-1]!r})")
        if args.phases and args.launches:
            raise UsageError("--phases (device time, measured) and --launches (a count, compiled) "
                             "are two runs: give one")
        if not fused_only and args.agents:
            raise UsageError("--agents goes with --phases or --launches")
        if not args.phases and args.trace_dir:
            raise UsageError("--trace-dir goes with --phases")
        if not args.launches and args.target != "default":
            raise UsageError("--target goes with --launches")
    except (ValueError, TypeError, UsageError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    use_compile_cache(args.no_compile_cache)
    if args.launches:
        try:
            summary = program_launches(config, args.agents, args.updates, args.target)
        except (ValueError, RuntimeError) as e:  # an unknown target; no CUDA plugin for a GPU one
            print(f"{prog}: error: {e}", file=sys.stderr)
            return 2
        print(format_launches(summary))
        if args.json:
            print(json.dumps(summary))
        return 0
    if args.phases:
        summary = profile_phases(config, args.agents, args.updates, args.trace_dir)
        print(format_phases(summary))
        if args.json:
            print(json.dumps(summary))
        return 0
    summary = profile_update(config, mode, args.repeats)
    print(format_table(summary))
    if args.json:
        print(json.dumps(summary))
    return 0


__all__ = ["MODES", "PHASE_ROWS", "default_config", "format_phases", "format_table", "hlo_phases", "main",
           "phase_of", "phase_times", "profile_phases", "profile_update", "read_trace", "resolve",
           "training_program"]

if __name__ == "__main__":
    raise SystemExit(main())
