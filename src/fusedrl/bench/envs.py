"""Env steps/s of any env id: fusedrl's VecEnv vs the env's own suite stepping, in a jitted scan.

    python -m fusedrl.bench envs [--env CartPole-v1 [--env gymnax:Breakout-MinAtar ...]]
        [--num-envs 1,64,512,4096,16384] [--steps 100] [--repeats 5] [--min-time 0.05]

For each env id (`--env`, repeatable; default CartPole-v1) and batch size N, both sides run the
same program shape: a jitted `lax.scan` of `--steps` steps (repeated by an outer `fori_loop` whose
trip count is a runtime argument, so calibrating the run length does not recompile). Each chunk
draws the random actions of all its steps and envs in one call from the env's action space
(Discrete: `randint`; Box: `uniform` within its bounds; any other space: its own `sample`,
vmapped), so the action source stays out of the step loop, and both sides step with the same
actions:

- ours: `fusedrl.make(ID)` stepped by `fusedrl.envs.VecEnv(env, N).step(state, action)`; the key
  lives in the VecEnv state and finished episodes take fresh initial states from the reset pool;
- baseline, the env's own suite stepping:
  - gymnax ids ("gymnax:Breakout-MinAtar") and our envs that gymnax has under the same name
    (CartPole-v1, Pendulum-v1, ...): `jax.vmap(env.step)(jax.random.split(key, N), state, action,
    params)`, the PureJaxRL way: one key per env per step, and a fresh reset drawn for every env at
    every step;
  - suite ids ("brax:ant", `fusedrl.envs.suites`): the suite adapter's
    `native_stepper(name, N) -> (init, step)`, the suite's own vmapped step with its own
    auto-reset (`init(key) -> carry`, `step(carry, action [N, ...]) -> (carry, reward [N])`);
  - any other env (or an adapter without `native_stepper`): none; its rows time ours alone.

When the observation space is a Dict with an `action_mask` entry (Discrete actions), a chunk
draws one uniform number per (step, env, action) instead, and each step of ours takes the largest
among the actions its current observation allows: a uniformly random allowed action, as
`fusedrl.envs.checks.random_action` draws. The baseline's step returns no observation, so it takes
the largest over all actions: the same operation, at the same cost.

Every per-step output is consumed by a checksum (as a learner would), so XLA cannot drop it: ours
and gymnax sum observation, reward and episode flags; `native_stepper` returns only the reward,
which is summed, and its carry (the suite's state, observation included) is returned by the
program, so it is computed too.

Only execution is timed: each function is compiled and run once first, every timing ends with
`block_until_ready`, ours and the baseline alternate within each repeat (the first of the pair
also alternates), and the table reports medians over repeats. At small N the number of scan chunks
is raised until one timed call lasts at least `--min-time` seconds.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import jax
import jax.numpy as jnp

from fusedrl._argtypes import UsageError, add_import_option, import_modules, positive_int, seed_arg

ENV_ID = "CartPole-v1"
DEFAULT_NUM_ENVS = (1, 64, 512, 4096, 16384)
IMPLS = ("ours", "baseline")

#: `build(num_envs, steps) -> (init(key) -> carry, run(carry, num_chunks) -> carry)`, both jitted.
Builder = Callable[[int, int], tuple[Callable, Callable]]


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
        description="Env steps/s: fusedrl VecEnv vs the env's own suite stepping (gymnax's "
        "vmap(env.step), a suite adapter's native_stepper), both stepped in a jitted lax.scan with "
        "the same random actions.",
    )
    parser.add_argument(
        "--env",
        action="append",
        dest="envs",
        metavar="ID",
        help=f"env id (repeatable): ours (CartPole-v1), gymnax:NAME, or a suite's PREFIX:NAME "
        f"(`fusedrl envs` lists them; default: {ENV_ID})",
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
    add_import_option(parser)
    return parser


@dataclass(frozen=True)
class Actions:
    """The random-action source both sides of one env share.

    `draw(key, steps, num_envs)` draws a whole chunk in one call, outside the step loop;
    `pick(x, mask)` turns one step's slice `x` of it into the actions [num_envs, ...] inside it.
    """

    space: Any  # the env's action space (gymnax spaces)
    masked: bool = False  # the observation has an `action_mask` entry (Discrete actions only)

    def draw(self, key: jax.Array, steps: int, num_envs: int) -> Any:
        from fusedrl.envs._gymnax import spaces

        batch, space = (steps, num_envs), self.space
        if self.masked:  # one uniform number per action; `pick` takes the largest allowed one
            return jax.random.uniform(key, (*batch, int(space.n)))
        if isinstance(space, spaces.Discrete):
            return jax.random.randint(key, batch, 0, int(space.n)).astype(space.dtype)
        if isinstance(space, spaces.Box):
            shape = (*batch, *space.shape)
            return jax.random.uniform(key, shape, minval=space.low, maxval=space.high).astype(space.dtype)
        keys = jax.random.split(key, steps * num_envs).reshape(batch)
        return jax.vmap(jax.vmap(space.sample))(keys)

    def pick(self, x: Any, mask: jax.Array | None = None) -> Any:
        """x: one step's draw ([num_envs, ...]); mask: [num_envs, n] bool, the allowed actions."""
        if not self.masked:
            return x
        if mask is not None:
            x = jnp.where(mask, x, -1.0)
        return jnp.argmax(x, axis=-1).astype(self.space.dtype)


def _action_mask(obs: Any) -> Any:
    """The observation's `action_mask` entry (a dict key or a field), or None."""
    return obs.get("action_mask") if isinstance(obs, dict) else getattr(obs, "action_mask", None)


def _actions_of(env_id: str, env: Any, params: Any) -> Actions:
    """The env's action source; masked when its observation space (a Dict) has an `action_mask`."""
    from fusedrl.envs._gymnax import spaces

    space, obs_space = env.action_space(params), env.observation_space(params)
    mask = obs_space.spaces.get("action_mask") if isinstance(obs_space, spaces.Dict) else None
    if mask is None:
        return Actions(space)
    if not isinstance(space, spaces.Discrete) or math.prod(mask.shape) != int(space.n):
        raise ValueError(f"{env_id}: its observation's action_mask has shape {tuple(mask.shape)}, which "
                         f"does not fit its action space {space}: a mask needs Discrete(n) actions and n "
                         f"entries.")
    return Actions(space, masked=True)


def _checksum(obs, reward, terminated, truncated) -> jax.Array:
    """Consumes every per-step output (as a learner would), so XLA cannot drop any of them."""
    total = sum((jnp.sum(leaf, dtype=jnp.float32) for leaf in jax.tree.leaves(obs)), jnp.float32(0))
    return (
        total
        + jnp.sum(reward, dtype=jnp.float32)
        + jnp.sum(terminated | truncated, dtype=jnp.float32)
    )


def _chunked(body: Callable, actions: Actions, steps: int, num_envs: int) -> Callable:
    """`run(carry, num_chunks)`: `num_chunks` scans of `steps` steps; `num_chunks` is traced.

    `carry` is (env state, key, checksum); `body(carry, x)` is one step, `x` its slice of the
    chunk's action draw.
    """

    def run(carry, num_chunks):
        def chunk(_, c):
            state, key, acc = c
            key, k_act = jax.random.split(key)
            return jax.lax.scan(body, (state, key, acc), actions.draw(k_act, steps, num_envs))[0]

        return jax.lax.fori_loop(0, num_chunks, chunk, carry)

    return run


def make_ours(env: Any, params: Any, actions: Actions, num_envs: int,
              steps: int) -> tuple[Callable, Callable]:
    """(init(key) -> carry, run(carry, num_chunks) -> carry) for fusedrl's VecEnv."""
    from fusedrl.envs import VecEnv

    venv = VecEnv(env, num_envs)

    def mask_of(obs):  # the allowed actions [num_envs, n] of the current observation, or None
        return _action_mask(obs).reshape(num_envs, -1).astype(bool) if actions.masked else None

    def init(key):
        k_env, k_act = jax.random.split(key)
        obs, vstate = venv.reset(k_env, params)
        return (vstate, mask_of(obs)), k_act, jnp.float32(0)

    def body(carry, x):
        (vstate, mask), key, acc = carry  # the key lives in the VecEnv state; this one is unused
        obs, vstate, reward, terminated, truncated, _ = venv.step(vstate, actions.pick(x, mask), params)
        return ((vstate, mask_of(obs)), key, acc + _checksum(obs, reward, terminated, truncated)), None

    return jax.jit(init), jax.jit(_chunked(body, actions, steps, num_envs))


def make_gymnax(name: str, actions: Actions, num_envs: int, steps: int) -> tuple[Callable, Callable]:
    """(init, run) as `make_ours`, for gymnax's env `name`, stepped the PureJaxRL way."""
    import gymnax

    env, params = gymnax.make(name)
    vreset = jax.vmap(env.reset, in_axes=(0, None))
    vstep = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def init(key):
        k_env, k_act = jax.random.split(key)
        _, state = vreset(jax.random.split(k_env, num_envs), params)
        return state, k_act, jnp.float32(0)

    def body(carry, x):
        state, key, acc = carry
        key, k_step = jax.random.split(key)
        step_keys = jax.random.split(k_step, num_envs)
        obs, state, reward, terminated, truncated, _ = vstep(step_keys, state, actions.pick(x), params)
        return (state, key, acc + _checksum(obs, reward, terminated, truncated)), None

    return jax.jit(init), jax.jit(_chunked(body, actions, steps, num_envs))


def make_native(native_stepper: Callable, name: str, actions: Actions, num_envs: int,
                steps: int) -> tuple[Callable, Callable]:
    """(init, run) as `make_ours`, for a suite adapter's `native_stepper(name, num_envs)`."""
    native_init, native_step = native_stepper(name, num_envs)
    where = f"{getattr(native_stepper, '__module__', '?')}.native_stepper({name!r}, {num_envs})"

    def init(key):
        k_env, k_act = jax.random.split(key)
        return native_init(k_env), k_act, jnp.float32(0)

    def body(carry, x):
        state, key, acc = carry
        state, reward = native_step(state, actions.pick(x))
        if jnp.shape(reward) != (num_envs,):  # checked while tracing: costs nothing when it runs
            raise ValueError(f"{where}: step returned a reward of shape {jnp.shape(reward)}; the protocol "
                             f"is step(carry, action) -> (carry, reward [num_envs={num_envs}]).")
        return (state, key, acc + jnp.sum(reward, dtype=jnp.float32)), None

    return jax.jit(init), jax.jit(_chunked(body, actions, steps, num_envs))


@dataclass(frozen=True)
class Target:
    """One env id's two sides: builders of ours and of its baseline (None: there is none)."""

    env_id: str
    ours: Builder
    baseline: Builder | None
    baseline_name: str | None  # "gymnax", "brax native_stepper", ...; None without a baseline
    note: str = ""  # why there is no baseline


def _same_action_space(a: Any, b: Any) -> bool:
    return (type(a) is type(b) and getattr(a, "n", None) == getattr(b, "n", None)
            and tuple(getattr(a, "shape", ())) == tuple(getattr(b, "shape", ())))


def resolve(env_id: str) -> Target:
    """The `Target` of `env_id`; errors (an unknown id, a suite not installed) come from
    `fusedrl.make` and name the valid ids or the install command. Nothing is compiled."""
    from fusedrl.envs import registry, suites

    if env_id.startswith(registry.GYMNASIUM_PREFIX):
        raise UsageError(f"--env {env_id}: Gymnasium envs step on the host (the bridge); this benchmark "
                         f"steps JAX envs inside a jitted scan. Give one of ours, gymnax:NAME or a suite's "
                         f"PREFIX:NAME (`fusedrl envs` lists them).")
    env, params = registry.make(env_id)
    actions = _actions_of(env_id, env, params)
    ours = functools.partial(make_ours, env, params, actions)
    own = env_id in registry.registered_ids(include_gymnax=False)
    if env_id.startswith(registry.GYMNAX_PREFIX):
        name = env_id[len(registry.GYMNAX_PREFIX):]
        return Target(env_id, ours, functools.partial(make_gymnax, name, actions), "gymnax")
    if not own and (suite := suites.split_id(env_id)):
        prefix, name = suite
        adapter = suites.adapter(prefix)
        native_stepper = getattr(adapter, "native_stepper", None)
        if native_stepper is None:
            return Target(env_id, ours, None, None,
                          f"{env_id}: no baseline: the {prefix} adapter ({adapter.__name__}) defines no "
                          f"native_stepper(name, num_envs), the suite's own vmapped step with its own "
                          f"auto-reset; its rows time ours alone.")
        return Target(env_id, ours, functools.partial(make_native, native_stepper, name, actions),
                      f"{prefix} native_stepper")
    import gymnax

    if env_id not in gymnax.registered_envs:
        return Target(env_id, ours, None, None,
                      f"{env_id}: no baseline: gymnax has no env of this name and it is no suite's env; "
                      f"its rows time ours alone.")
    g_env, g_params = gymnax.make(env_id)
    ours_space, g_space = env.action_space(params), g_env.action_space(g_params)
    if not _same_action_space(ours_space, g_space):
        return Target(env_id, ours, None, None,
                      f"{env_id}: no baseline: gymnax's {env_id} takes other actions ({g_space}) than "
                      f"ours ({ours_space}); its rows time ours alone.")
    return Target(env_id, ours, functools.partial(make_gymnax, env_id, actions), "gymnax")


def _time_call(run: Callable, carry, num_chunks: jax.Array) -> float:
    start = time.perf_counter()
    out = run(carry, num_chunks)
    jax.block_until_ready(out)
    elapsed = time.perf_counter() - start
    checksum = float(out[-1])
    if not math.isfinite(checksum):
        raise FloatingPointError(f"non-finite checksum {checksum} from the benchmark loop")
    return elapsed


def bench_size(target: Target, num_envs: int, steps: int, repeats: int, min_time: float,
               key: jax.Array) -> dict[str, Any]:
    """Times both sides of `target` (ours alone without a baseline) at one batch size; returns one
    result row."""
    builders = {"ours": target.ours, "baseline": target.baseline}
    impls = tuple(impl for impl in IMPLS if builders[impl] is not None)
    runs, carries = {}, {}
    for impl in impls:
        init, run = builders[impl](num_envs, steps)
        carries[impl] = jax.block_until_ready(init(key))
        jax.block_until_ready(run(carries[impl], jnp.int32(1)))  # compile and warm up
        runs[impl] = run

    # Calibrate: grow the number of chunks (a runtime argument: no recompile) until the faster side
    # lasts at least `min_time` per call; both sides then run the same number of steps.
    num_chunks = 1
    while True:
        fastest = min(_time_call(runs[i], carries[i], jnp.int32(num_chunks)) for i in impls)
        if fastest >= min_time:
            break
        grow = min(10.0, 1.2 * min_time / max(fastest, 1e-9))
        num_chunks = max(num_chunks + 1, math.ceil(num_chunks * grow))
    chunks = jnp.int32(num_chunks)

    seconds: dict[str, list[float]] = {impl: [] for impl in impls}
    for r in range(repeats):
        order = impls if r % 2 == 0 else impls[::-1]
        for impl in order:
            seconds[impl].append(_time_call(runs[impl], carries[impl], chunks))

    total_steps = steps * num_chunks
    env_steps = num_envs * total_steps
    row: dict[str, Any] = {"bench": "envs", "env_id": target.env_id, "num_envs": num_envs,
                           "baseline": target.baseline_name, "scan_steps": total_steps}
    for impl in IMPLS:
        row[f"{impl}_steps_per_s"] = env_steps / statistics.median(seconds[impl]) if impl in impls else None
    if "baseline" in impls:
        row["ratio"] = row["ours_steps_per_s"] / row["baseline_steps_per_s"]
        # Each repeat times the two sides back to back, so the per-repeat ratio cancels slow drifts
        # in machine load; its median is a robustness check on `ratio`.
        row["paired_ratio"] = statistics.median(
            b / o for o, b in zip(seconds["ours"], seconds["baseline"], strict=True)
        )
    else:
        row["ratio"] = row["paired_ratio"] = None
    for impl in IMPLS:
        row[f"{impl}_seconds"] = [round(s, 6) for s in seconds[impl]] if impl in impls else None
    return row


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def environment_info(env_ids: Sequence[str] = ()) -> dict[str, Any]:
    """Versions and device; with `env_ids`, also the version of each env suite they use."""
    from fusedrl.envs import suites

    device = jax.devices()[0]
    info = {
        "jax": jax.__version__,
        "jaxlib": _version("jaxlib"),
        "gymnax": _version("gymnax"),
        "backend": jax.default_backend(),
        "device": f"{device.platform}:{device.device_kind}",
        "device_count": jax.device_count(),
        "cpu_count": os.cpu_count(),
        "suites": {},  # {prefix: the suite's version}
    }
    for prefix in dict.fromkeys(s[0] for s in map(suites.split_id, env_ids) if s):
        suite = suites.SUITES[prefix]
        versions = [v for v in (_version(suite.packages[0]), _version(suite.extra)) if v != "?"]
        info["suites"][prefix] = versions[0] if versions else "?"
    return info


def _fmt_rate(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1e9:
        return f"{value / 1e9:.2f}G"
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.0f}"


def _fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


@dataclass(frozen=True)
class Table:
    """The column widths of one table: the env and baseline columns fit the longest names."""

    env_width: int = len(ENV_ID)
    baseline_width: int = len("gymnax")

    @classmethod
    def for_targets(cls, targets: Sequence[Target]) -> Table:
        return cls(max(len("env"), *(len(t.env_id) for t in targets)),
                   max(len("baseline"), *(len(t.baseline_name or "-") for t in targets)))

    def header(self) -> str:
        return (f"{'env':<{self.env_width}}  {'num_envs':>8}  {'scan_steps':>10}  {'ours steps/s':>13}  "
                f"{'baseline':<{self.baseline_width}}  {'baseline steps/s':>16}  {'ratio':>7}  {'paired':>7}")

    def format_row(self, row: dict[str, Any]) -> str:
        return (
            f"{row['env_id']:<{self.env_width}}  {row['num_envs']:>8}  {row['scan_steps']:>10}  "
            f"{_fmt_rate(row['ours_steps_per_s']):>13}  {row['baseline'] or '-':<{self.baseline_width}}  "
            f"{_fmt_rate(row['baseline_steps_per_s']):>16}  {_fmt_ratio(row['ratio']):>7}  "
            f"{_fmt_ratio(row['paired_ratio']):>7}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    from fusedrl.envs.suites import SuiteNotInstalledError

    parser = build_parser()
    args = parser.parse_args(argv)
    env_ids = list(dict.fromkeys(args.envs or [ENV_ID]))
    try:  # every id is checked (and its baseline found) before anything compiles
        import_modules(args.imports)
        targets = [resolve(env_id) for env_id in env_ids]
    except (UsageError, SuiteNotInstalledError, ValueError, TypeError) as e:
        parser.error(str(e))
    info = environment_info(env_ids)
    out = sys.stdout
    print(
        f"fusedrl.bench envs: env steps/s (median of {args.repeats}), random actions, "
        f"jitted lax.scan of {args.steps}-step chunks",
        file=out,
    )
    suites_used = "".join(f", {prefix} {v}" for prefix, v in info["suites"].items())
    print(
        f"jax {info['jax']} (jaxlib {info['jaxlib']}), gymnax {info['gymnax']}{suites_used}, "
        f"device {info['device']} x{info['device_count']}, {info['cpu_count']} CPUs",
        file=out,
    )
    for target in targets:
        if target.note:
            print(target.note, file=out)
    table = Table.for_targets(targets)
    print(table.header(), file=out, flush=True)
    key = jax.random.key(args.seed)
    rows = []
    for target in targets:
        for num_envs in args.num_envs:
            row = bench_size(target, num_envs, args.steps, args.repeats, args.min_time, key)
            rows.append(row)
            print(table.format_row(row), file=out, flush=True)
    print(
        "ratio = median ours steps/s / median baseline steps/s; paired = median over repeats of the "
        "ratio within a repeat (robust to load drifts); scan_steps = steps per env in one timed call; "
        "baseline: the env's own suite stepping (gymnax: vmap(env.step) over split keys; "
        "PREFIX native_stepper: the suite adapter's own vmapped step and auto-reset)",
        file=out,
    )
    for row in rows:
        print(json.dumps({**row, **info}, sort_keys=False), file=out)
    out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
