"""Env steps/s of CartPole-v1: fusedrl's VecEnv vs gymnax's vmapped step, inside a jitted scan.

    python -m fusedrl.bench envs [--num-envs 1,64,512,4096,16384] [--steps 100] [--repeats 5]

Both sides run the same program shape: a jitted `lax.scan` of `--steps` steps (repeated by an
outer `fori_loop` whose trip count is a runtime argument, so calibrating the run length does not
recompile). Each chunk draws the random actions of all its steps and envs with one
`jax.random.bernoulli` call (so the action source costs little and stays out of the step loop),
then every step steps every env once. The action source and the per-step checksum that keeps the
outputs live are identical on both sides, so the difference is the cost of stepping and
auto-resetting:

- ours: `fusedrl.envs.VecEnv(env, n).step(state, action)`; the key lives in the VecEnv state and
  finished episodes take fresh initial states from the reset pool;
- gymnax: `jax.vmap(env.step)(jax.random.split(key, n), state, action, params)`, the PureJaxRL
  way: one key per env per step, and a fresh reset drawn for every env at every step.

Only execution is timed: each function is compiled and run once first, every timing ends with
`block_until_ready`, ours and gymnax alternate within each repeat (the first of the pair also
alternates), and the table reports medians over repeats. At small N the number of scan chunks is
raised until one timed call lasts at least `--min-time` seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

import jax
import jax.numpy as jnp

from fusedrl._argtypes import positive_int, seed_arg

ENV_ID = "CartPole-v1"
DEFAULT_NUM_ENVS = (1, 64, 512, 4096, 16384)
IMPLS = ("ours", "gymnax")


def _int_list(text: str) -> list[int]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list of positive integers")
    return [positive_int(t) for t in items]


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fusedrl.bench envs",
        description=f"Env steps/s of {ENV_ID}: fusedrl VecEnv vs gymnax vmap(env.step), "
        "both stepped in a jitted lax.scan with the same random actions.",
    )
    parser.add_argument(
        "--num-envs",
        type=_int_list,
        default=list(DEFAULT_NUM_ENVS),
        help="comma-separated batch sizes (default: %(default)s)",
    )
    parser.add_argument(
        "--steps", type=positive_int, default=100, help="scan length of one chunk (default: %(default)s)"
    )
    parser.add_argument(
        "--repeats", type=positive_int, default=5, help="timed runs per side and size (default: %(default)s)"
    )
    parser.add_argument(
        "--min-time",
        type=_non_negative_float,
        default=0.05,
        help="seconds one timed call must last at least; more chunks are run at small N "
        "(default: %(default)s)",
    )
    parser.add_argument("--seed", type=seed_arg, default=0, help="PRNG seed (default: %(default)s)")
    return parser


def _random_actions(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """The shared, cheap action source: one Bernoulli draw for a whole chunk [steps, num_envs]."""
    return jax.random.bernoulli(key, 0.5, shape).astype(jnp.int32)


def _checksum(obs, reward, terminated, truncated) -> jax.Array:
    """Consumes every per-step output (as a learner would), so XLA cannot drop any of them."""
    return (
        jnp.sum(obs, dtype=jnp.float32)
        + jnp.sum(reward, dtype=jnp.float32)
        + jnp.sum(terminated | truncated, dtype=jnp.float32)
    )


def _chunked(body: Callable, steps: int, num_envs: int) -> Callable:
    """`run(carry, num_chunks)`: `num_chunks` scans of `steps` steps; `num_chunks` is traced.

    `carry` is (env state, key, checksum); `body(carry, action [num_envs])` is one step.
    """

    def run(carry, num_chunks):
        def chunk(_, c):
            state, key, acc = c
            key, k_act = jax.random.split(key)
            actions = _random_actions(k_act, (steps, num_envs))
            return jax.lax.scan(body, (state, key, acc), actions)[0]

        return jax.lax.fori_loop(0, num_chunks, chunk, carry)

    return run


def make_ours(num_envs: int, steps: int) -> tuple[Callable, Callable]:
    """(init(key) -> carry, run(carry, num_chunks) -> carry) for fusedrl's VecEnv."""
    import fusedrl
    from fusedrl.envs import VecEnv

    env, params = fusedrl.make(ENV_ID)
    venv = VecEnv(env, num_envs)

    def init(key):
        k_env, k_act = jax.random.split(key)
        _, vstate = venv.reset(k_env, params)
        return vstate, k_act, jnp.float32(0)

    def body(carry, action):
        vstate, key, acc = carry  # the key lives in the VecEnv state; this one is unused
        obs, vstate, reward, terminated, truncated, _ = venv.step(vstate, action, params)
        return (vstate, key, acc + _checksum(obs, reward, terminated, truncated)), None

    return jax.jit(init), jax.jit(_chunked(body, steps, num_envs))


def make_gymnax(num_envs: int, steps: int) -> tuple[Callable, Callable]:
    """(init(key) -> carry, run(carry, num_chunks) -> carry) for gymnax, stepped the PureJaxRL way."""
    import gymnax

    env, params = gymnax.make(ENV_ID)
    vreset = jax.vmap(env.reset, in_axes=(0, None))
    vstep = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def init(key):
        k_env, k_act = jax.random.split(key)
        _, state = vreset(jax.random.split(k_env, num_envs), params)
        return state, k_act, jnp.float32(0)

    def body(carry, action):
        state, key, acc = carry
        key, k_step = jax.random.split(key)
        step_keys = jax.random.split(k_step, num_envs)
        obs, state, reward, terminated, truncated, _ = vstep(step_keys, state, action, params)
        return (state, key, acc + _checksum(obs, reward, terminated, truncated)), None

    return jax.jit(init), jax.jit(_chunked(body, steps, num_envs))


BUILDERS = {"ours": make_ours, "gymnax": make_gymnax}


def _time_call(run: Callable, carry, num_chunks: jax.Array) -> float:
    start = time.perf_counter()
    out = run(carry, num_chunks)
    jax.block_until_ready(out)
    elapsed = time.perf_counter() - start
    checksum = float(out[-1])
    if not math.isfinite(checksum):
        raise FloatingPointError(f"non-finite checksum {checksum} from the benchmark loop")
    return elapsed


def bench_size(num_envs: int, steps: int, repeats: int, min_time: float, key: jax.Array) -> dict[str, Any]:
    """Times both sides at one batch size; returns one result row."""
    runs, carries = {}, {}
    for impl in IMPLS:
        init, run = BUILDERS[impl](num_envs, steps)
        carries[impl] = jax.block_until_ready(init(key))
        jax.block_until_ready(run(carries[impl], jnp.int32(1)))  # compile and warm up
        runs[impl] = run

    # Calibrate: grow the number of chunks (a runtime argument: no recompile) until the faster side
    # lasts at least `min_time` per call; both sides then run the same number of steps.
    num_chunks = 1
    while True:
        fastest = min(_time_call(runs[i], carries[i], jnp.int32(num_chunks)) for i in IMPLS)
        if fastest >= min_time:
            break
        grow = min(10.0, 1.2 * min_time / max(fastest, 1e-9))
        num_chunks = max(num_chunks + 1, math.ceil(num_chunks * grow))
    chunks = jnp.int32(num_chunks)

    seconds: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    for r in range(repeats):
        order = IMPLS if r % 2 == 0 else IMPLS[::-1]
        for impl in order:
            seconds[impl].append(_time_call(runs[impl], carries[impl], chunks))

    total_steps = steps * num_chunks
    env_steps = num_envs * total_steps
    row: dict[str, Any] = {"bench": "envs", "env_id": ENV_ID, "num_envs": num_envs}
    row["scan_steps"] = total_steps
    for impl in IMPLS:
        row[f"{impl}_steps_per_s"] = env_steps / statistics.median(seconds[impl])
    row["ratio"] = row["ours_steps_per_s"] / row["gymnax_steps_per_s"]
    # Each repeat times the two sides back to back, so the per-repeat ratio cancels slow drifts in
    # machine load; its median is a robustness check on `ratio`.
    row["paired_ratio"] = statistics.median(
        g / o for o, g in zip(seconds["ours"], seconds["gymnax"], strict=True)
    )
    for impl in IMPLS:
        row[f"{impl}_seconds"] = [round(s, 6) for s in seconds[impl]]
    return row


def environment_info() -> dict[str, Any]:
    device = jax.devices()[0]

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "?"

    return {
        "jax": jax.__version__,
        "jaxlib": version("jaxlib"),
        "gymnax": version("gymnax"),
        "backend": jax.default_backend(),
        "device": f"{device.platform}:{device.device_kind}",
        "device_count": jax.device_count(),
        "cpu_count": os.cpu_count(),
    }


def _fmt_rate(value: float) -> str:
    if value >= 1e9:
        return f"{value / 1e9:.2f}G"
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.0f}"


HEADER = (
    f"{'num_envs':>8}  {'scan_steps':>10}  {'ours steps/s':>13}  {'gymnax steps/s':>14}  {'ratio':>6}  "
    f"{'paired':>6}"
)


def format_row(row: dict[str, Any]) -> str:
    return (
        f"{row['num_envs']:>8}  {row['scan_steps']:>10}  {_fmt_rate(row['ours_steps_per_s']):>13}  "
        f"{_fmt_rate(row['gymnax_steps_per_s']):>14}  {row['ratio']:>5.2f}x  {row['paired_ratio']:>5.2f}x"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    info = environment_info()
    out = sys.stdout
    print(
        f"fusedrl.bench envs: {ENV_ID}, env steps/s (median of {args.repeats}), "
        f"random actions, jitted lax.scan of {args.steps}-step chunks",
        file=out,
    )
    print(
        f"jax {info['jax']} (jaxlib {info['jaxlib']}), gymnax {info['gymnax']}, "
        f"device {info['device']} x{info['device_count']}, {info['cpu_count']} CPUs",
        file=out,
    )
    print(HEADER, file=out, flush=True)
    key = jax.random.key(args.seed)
    rows = []
    for num_envs in args.num_envs:
        row = bench_size(num_envs, args.steps, args.repeats, args.min_time, key)
        rows.append(row)
        print(format_row(row), file=out, flush=True)
    print(
        "ratio = median ours steps/s / median gymnax steps/s; paired = median over repeats of the "
        "ratio within a repeat (robust to load drifts); scan_steps = steps per env in one timed call",
        file=out,
    )
    for row in rows:
        print(json.dumps({**row, **info}, sort_keys=False), file=out)
    out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
