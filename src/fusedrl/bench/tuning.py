"""Each speed choice of `Tuning` on vs off across a grid of agents and envs (PPO, CartPole-v1).

For every cell (vmapped agents x envs per agent) and every choice, two programs are compiled: the
plain trainer (`Tuning()`, every choice off) and the same with that one choice on. Then they run
alternately, `--rounds` times each, and the row shows the ratio of median wall times (plain / on:
above 1 the choice pays). Alternating in one process keeps drift of a noisy machine out of the
ratio. A choice belongs in `resolve_tuning` for a backend only where it pays in every cell of its
size range, on every supported jax version.

    python -m fusedrl.bench tuning                       # the whole grid, every choice
    python -m fusedrl.bench tuning --choices shuffle_ahead --agents 1 8 --envs 4 64
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time

#: The choices and the value that turns each on.
CHOICES = {"shuffle_ahead": True, "cpu_weight_grad": True}

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


def measure(choice: str, agents: int, num_envs: int, updates: int, rounds: int) -> dict:
    """One cell: median seconds of the plain program and of the one with `choice` on."""
    import jax

    from fusedrl.train.tuning import Tuning

    config = _config(num_envs, updates)
    plain, args = _program(config, Tuning(), agents)
    on, _ = _program(config, dataclasses.replace(Tuning(), **{choice: CHOICES[choice]}), agents)
    _time(plain, args), _time(on, args)  # warm-up
    t_plain, t_on = [], []
    for _ in range(rounds):
        t_plain.append(_time(plain, args))
        t_on.append(_time(on, args))
    mp, mo = statistics.median(t_plain), statistics.median(t_on)
    steps = agents * config.env_steps
    return {"choice": choice, "agents": agents, "num_envs": num_envs, "num_steps": config.num_steps,
            "updates": config.num_updates, "plain_s": mp, "on_s": mo, "ratio": mp / mo,
            "plain_steps_per_s": steps / mp, "jax": jax.__version__, "backend": jax.default_backend()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fusedrl.bench tuning",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--choices", nargs="+", default=list(CHOICES), choices=list(CHOICES))
    parser.add_argument("--agents", nargs="+", type=int, default=[1, 4, 8, 16, 64])
    parser.add_argument("--envs", nargs="+", type=int, default=[4, 64, 2048])
    parser.add_argument("--transitions", type=int, default=2**18,
                        help="env steps of all agents per call, about (sets the number of updates, 1 to 128)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="also print one JSON line per cell")
    args = parser.parse_args(argv)
    import jax

    print(f"# jax {jax.__version__}, backend {jax.default_backend()}; "
          f"ratio = plain / on (> 1: the choice pays)")
    print(f"{'choice':<18} {'agents':>6} {'envs':>6} {'steps':>5} {'upd':>4} "
          f"{'plain s':>9} {'on s':>9} {'ratio':>6}")
    for choice in args.choices:
        for num_envs in args.envs:
            for agents in args.agents:
                batch = num_envs * STEPS.get(num_envs, 4)
                updates = max(1, min(128, args.transitions // (batch * agents)))
                row = measure(choice, agents, num_envs, updates, args.rounds)
                print(f"{choice:<18} {agents:>6} {num_envs:>6} {row['num_steps']:>5} {row['updates']:>4} "
                      f"{row['plain_s']:>9.3f} {row['on_s']:>9.3f} {row['ratio']:>6.3f}", flush=True)
                if args.json:
                    print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
