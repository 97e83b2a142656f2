"""What the broken-env check (`metrics["env_fault"]`) costs: PPO with and without it, alternately.

    python -m fusedrl.bench envcheck [--env CartPole-v1] [--num-envs 4,64,512] [--updates 20] [--rounds 5]

For each number of envs it compiles two programs of one run, the trainer as it is and the same
trainer whose `env_fault` is a constant 0 (no reduction, no parameter select: XLA removes both),
then times them alternately, `--rounds` executions each (the order flips every round), and prints the
median run time of each, the median of the rounds' ratios (with the check / without: each round's
pair ran back to back, so a slow spell of a busy machine touches both) and the ratio of the fastest
runs (the least disturbed on a shared machine). A ratio of 1.02 is a 2% cost.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Sequence

from fusedrl.bench._timing import cpu_model


def _unchecked(train):
    """`train` with the check replaced by a constant 0."""
    import jax.numpy as jnp

    off = copy.copy(train)
    off.env_fault = lambda traj: jnp.zeros((), jnp.int32)
    return off


def measure(env_id: str, num_envs: int, updates: int, rounds: int, num_steps: int = 128) -> dict:
    """{"on": median seconds, "off": median seconds, "ratio": median of the rounds' on / off,
    "min_ratio": the fastest run with the check over the fastest without}."""
    import jax

    from fusedrl.train import PPOConfig, make_train

    config = PPOConfig(env_id=env_id, num_envs=num_envs, num_steps=num_steps,
                       total_timesteps=num_envs * num_steps * updates, update_epochs=4, num_minibatches=4)
    train = make_train(config)
    key = jax.random.key(0)
    programs = {"on": jax.jit(train).lower(key).compile(),
                "off": jax.jit(_unchecked(train)).lower(key).compile()}
    times: dict[str, list[float]] = {"on": [], "off": []}
    for r in range(rounds + 1):  # round 0 warms up
        for name in (("on", "off") if r % 2 else ("off", "on")):
            t = time.perf_counter()
            jax.block_until_ready(programs[name](key))
            if r:
                times[name].append(time.perf_counter() - t)
    ratios = [a / b for a, b in zip(times["on"], times["off"], strict=True)]
    return {"on": statistics.median(times["on"]), "off": statistics.median(times["off"]),
            "ratio": statistics.median(ratios), "min_ratio": min(times["on"]) / min(times["off"])}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedrl.bench envcheck", description=__doc__.splitlines()[0])
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--num-envs", default="4,64,512", help="comma-separated numbers of envs")
    p.add_argument("--num-steps", type=int, default=128)
    p.add_argument("--updates", type=int, default=20, help="updates per run")
    p.add_argument("--rounds", type=int, default=5, help="timed executions of each program")
    args = p.parse_args(argv)
    import jax

    print(f"{args.env}, {args.updates} updates of num_steps={args.num_steps}, median of {args.rounds} "
          f"alternating runs; {jax.default_backend()}: {cpu_model()}")
    print(f"{'num_envs':>8}  {'with check s':>12}  {'without s':>10}  {'median ratio':>12}  {'min ratio':>9}")
    for n in (int(x) for x in args.num_envs.split(",")):
        m = measure(args.env, n, args.updates, args.rounds, args.num_steps)
        print(f"{n:>8}  {m['on']:>12.4f}  {m['off']:>10.4f}  {m['ratio']:>12.3f}  {m['min_ratio']:>9.3f}",
              flush=True)
    return 0
