"""A `Tuning` variant against the default record across a grid of agents and envs (PPO, CartPole-v1).

For every cell (vmapped agents x envs per agent) and every variant (`--variant FIELD=VALUE`, a field
of `fusedrl.train.tuning.Tuning`), two programs are compiled: the default trainer (`Tuning()`) and
the same with that field changed. Then they run alternately, `--rounds` times each, and the row
shows the ratio of median wall times (default / variant: above 1 the variant is faster).
Alternating in one process keeps drift of a noisy machine out of the ratio. A speed choice belongs
in `resolve_tuning` only where it pays in every cell of its size range, on every supported jax
version. To try a new choice, add it as a `Tuning` field (off by default) and run this.

    python -m fusedrl.bench tuning                       # the whole grid: resets from the pool
    python -m fusedrl.bench tuning --variant predraw_max_bytes=0 --agents 1 8 --envs 4 64
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time

#: The default variant: every reset from the per-env pool instead of predrawn (`VecEnv.rollout_draws`).
DEFAULT_VARIANTS = ("predraw_max_bytes=0",)

#: Steps per rollout for each env count: PureJaxRL's 128 at 4 envs, shorter rollouts for more envs
#: (so that 64 agents of 2048 envs stay at half a million transitions per update).
STEPS = {4: 128, 16: 64, 64: 32, 256: 16, 512: 8, 1024: 8, 2048: 4}


def _config(num_envs: int, updates: int):
    from fusedrl import PPOConfig

    steps = STEPS.get(num_envs, 4)
    return PPOConfig(env_id="CartPole-v1", num_envs=num_envs, num_steps=steps,
                     total_timesteps=num_envs * steps * updates)


def _program(config, tuning, agents: int):
    import jax

    from fusedrl import make_train

    train = make_train(config, tuning=tuning)
    keys = jax.random.split(jax.random.key(0), agents)
    fn = jax.jit(train) if agents == 1 else jax.jit(jax.vmap(train))
    args = keys[0] if agents == 1 else keys
    return fn.lower(args).compile(), args


def _time(compiled, args) -> float:
    import jax

    t = time.perf_counter()
    jax.block_until_ready(compiled(args))
    return time.perf_counter() - t


def parse_variant(text: str) -> tuple[str, int | bool]:
    """"FIELD=VALUE" of a `Tuning` field: (field, value as the field's type)."""
    from fusedrl.train.tuning import Tuning

    name, _, value = text.partition("=")
    fields = {f.name: f for f in dataclasses.fields(Tuning)}
    if name not in fields or not value:
        raise ValueError(f"--variant {text!r}: expected FIELD=VALUE with FIELD among {sorted(fields)}.")
    default = fields[name].default
    if isinstance(default, bool):
        return name, value.lower() in ("1", "true", "yes")
    return name, type(default)(value)


def measure(variant: str, agents: int, num_envs: int, updates: int, rounds: int) -> dict:
    """One cell: median seconds of the default program and of `variant`'s."""
    import jax

    from fusedrl.train.tuning import Tuning

    name, value = parse_variant(variant)
    config = _config(num_envs, updates)
    plain, args = _program(config, Tuning(), agents)
    other, _ = _program(config, dataclasses.replace(Tuning(), **{name: value}), agents)
    _time(plain, args), _time(other, args)  # warm-up
    t_plain, t_other = [], []
    for _ in range(rounds):
        t_plain.append(_time(plain, args))
        t_other.append(_time(other, args))
    mp, mo = statistics.median(t_plain), statistics.median(t_other)
    steps = agents * config.env_steps
    return {"variant": variant, "agents": agents, "num_envs": num_envs, "num_steps": config.num_steps,
            "updates": config.num_updates, "default_s": mp, "variant_s": mo, "ratio": mp / mo,
            "default_steps_per_s": steps / mp, "jax": jax.__version__, "backend": jax.default_backend()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fusedrl.bench tuning",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--variant", action="append", default=None, metavar="FIELD=VALUE",
                        help=f"a Tuning field changed (repeatable; default {' '.join(DEFAULT_VARIANTS)})")
    parser.add_argument("--agents", nargs="+", type=int, default=[1, 4, 8, 16, 64])
    parser.add_argument("--envs", nargs="+", type=int, default=[4, 64, 2048])
    parser.add_argument("--transitions", type=int, default=2**18,
                        help="env steps of all agents per call, about (sets the number of updates, 1 to 128)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="also print one JSON line per cell")
    args = parser.parse_args(argv)
    variants = args.variant or list(DEFAULT_VARIANTS)
    for v in variants:
        try:
            parse_variant(v)
        except ValueError as e:
            parser.error(str(e))
    import jax

    print(f"# jax {jax.__version__}, backend {jax.default_backend()}; "
          f"ratio = default / variant (> 1: the variant is faster)")
    print(f"{'variant':<22} {'agents':>6} {'envs':>6} {'steps':>5} {'upd':>4} "
          f"{'default s':>9} {'variant s':>9} {'ratio':>6}")
    for variant in variants:
        for num_envs in args.envs:
            for agents in args.agents:
                batch = num_envs * STEPS.get(num_envs, 4)
                updates = max(1, min(128, args.transitions // (batch * agents)))
                row = measure(variant, agents, num_envs, updates, args.rounds)
                print(f"{variant:<22} {agents:>6} {num_envs:>6} {row['num_steps']:>5} {row['updates']:>4} "
                      f"{row['default_s']:>9.3f} {row['variant_s']:>9.3f} {row['ratio']:>6.3f}", flush=True)
                if args.json:
                    print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
