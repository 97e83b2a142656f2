"""Where the wall time of one PPO update goes: env stepping, policy, GAE, update, transfers, Python.

    python -m fusedrl.bench profile --env CartPole-v1 --mode fused
    python -m fusedrl.bench profile --env gymnasium:CartPole-v1 --mode bridge

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
import json
import statistics
import sys
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
from fusedrl.train.config import PPOConfig
from fusedrl.train.losses import Batch
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
        )
    except (ValueError, TypeError, UsageError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    use_compile_cache(args.no_compile_cache)
    summary = profile_update(config, mode, args.repeats)
    print(format_table(summary))
    if args.json:
        print(json.dumps(summary))
    return 0


__all__ = ["MODES", "default_config", "format_table", "main", "profile_update", "resolve"]

if __name__ == "__main__":
    raise SystemExit(main())
