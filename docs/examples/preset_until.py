"""4 vmapped seeds of an env's PPO preset with network="cnn", trained in chunks of 8 updates (one
compiled program, run again on its own output) until the budget or a wall-clock deadline, printing
each chunk's training returns; then 64 greedy and 64 sampled episodes per seed with fusedrl.evaluate.
Keys as `python -m fusedrl.bench presets` draws them (root seed 0). For a loaded machine, where a
row's whole budget does not fit: what finished is evaluated.

    python docs/examples/preset_until.py gymnax:SpaceInvaders-MinAtar 1000000 $(date -d "+1 hour" +%s)
"""
import json
import sys
import time

import jax
import numpy as np

import fusedrl
from fusedrl.train.presets import preset

env_id, total, deadline = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])  # deadline: unix time
config = preset(env_id, network="cnn", total_timesteps=total)
train = fusedrl.make_train(config)
k_train, k_eval = jax.random.split(jax.random.key(0))
keys = jax.random.split(k_train, 4)
chunk = 8
t0 = time.time()
state = jax.jit(jax.vmap(train.init))(keys)
run = jax.jit(jax.vmap(lambda s: train.run(s, None, chunk)))
done, rets, result = 0, [], None
while done < config.num_updates and time.time() < deadline:
    result = run(state)
    state = result.state
    done += chunk
    r = np.asarray(result.metrics["episode_return"])[:, -1]
    rets.append(r.tolist())
    steps = done * config.num_envs * config.num_steps
    print(f"{env_id} update {done}/{config.num_updates} steps/seed {steps} train return per seed "
          f"{np.round(r, 1).tolist()} elapsed {time.time() - t0:.0f}s", flush=True)
train_s = time.time() - t0
greedy = np.asarray(fusedrl.evaluate(config, result, k_eval, 64)).mean(axis=1)
k_sampled = jax.random.fold_in(k_eval, 1)
sampled = np.asarray(fusedrl.evaluate(config, result, k_sampled, 64, greedy=False)).mean(axis=1)
out = dict(env=env_id, updates=done, num_updates=config.num_updates,
           steps_per_seed=done * config.num_envs * config.num_steps, greedy=greedy.tolist(),
           greedy_mean=float(greedy.mean()), greedy_std=float(greedy.std()), greedy_min=float(greedy.min()),
           sampled=sampled.tolist(), sampled_mean=float(sampled.mean()), sampled_std=float(sampled.std()),
           sampled_min=float(sampled.min()), train_plus_compile_s=train_s, eval_s=time.time() - t0 - train_s)
print(json.dumps(out), flush=True)
