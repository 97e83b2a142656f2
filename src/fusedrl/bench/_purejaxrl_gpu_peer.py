"""Runs PureJaxRL's PPO (`purejaxrl/ppo.py`) at a given config; prints one JSON line.

    PYTHON _purejaxrl_gpu_peer.py SEEDS NUM_ENVS NUM_STEPS TOTAL
        (with PUREJAXRL_SRC and FUSEDRL_PUREJAXRL_CONFIG set)

With `FUSEDRL_PUREJAXRL_PREDICT` set (JSON: {"agents": [N, ...], "limit": bytes or null}) it trains
nothing: for each N in turn it compiles `jax.jit(jax.vmap(make_train(config)))` for N keys at the given
TOTAL and reads XLA's memory analysis of the program (`_timing.memory_bytes`), against `limit` (None:
the device's `bytes_limit`), stopping after the first N that does not fit; the JSON line is then
{"predict": [{"agents", "memory", "limit_bytes", "fits"}, ...]} (SEEDS is not used).

With `FUSEDRL_PUREJAXRL_HLO` set (JSON: {"path": file, "target_config": text or null}) it trains
nothing either: it compiles `jax.jit(jax.vmap(make_train(config)))` for SEEDS keys, for the default
device or, given a `target_config` (a GPU model's description, `fusedrl.launches.GPU_TARGETS`), for
that GPU without one (a compile-only device of jax's CUDA plugin), writes the optimised HLO text to
`path` and prints {"impl": "purejaxrl", "hlo": path, "device": ...}; `python -m fusedrl.bench
launches` counts its kernel launches.

`python -m fusedrl.bench gpu` runs it (through `fusedrl.bench.ppo.run_peer`) for its MinAtar and
CartPole rows. `FUSEDRL_PUREJAXRL_CONFIG` is PureJaxRL's config dict as JSON (its upper-case keys);
the arguments override its NUM_ENVS, NUM_STEPS and TOTAL_TIMESTEPS, and SEEDS agents train as its
README does, `jax.jit(jax.vmap(make_train(config)))(keys)`, timed with the helper that times ours
(`_timing.compile_then_run`: compile apart, then one execution). It also reports the device's
peak memory (None where the platform keeps no statistics). Like `_purejaxrl_peer.py` (which
describes the `PUREJAXRL_SRC` folder), it runs in an interpreter with PureJaxRL's dependencies
(gymnax 0.0.x, distrax), never fusedrl's.
"""

import json
import os
import sys


def main() -> None:
    src = os.environ.get("PUREJAXRL_SRC")
    if not src or not os.path.isfile(os.path.join(src, "purejaxrl", "ppo.py")):
        sys.exit(f"PUREJAXRL_SRC must name a folder with purejaxrl/ppo.py in it, got {src!r}.")
    try:
        config = json.loads(os.environ["FUSEDRL_PUREJAXRL_CONFIG"])
    except (KeyError, ValueError) as e:
        sys.exit(f"FUSEDRL_PUREJAXRL_CONFIG must hold PureJaxRL's config dict as JSON: {e}")
    sys.path.insert(0, src)
    import jax
    import numpy as np
    from _timing import compile_measure_run, memory_bytes  # beside this file (no fusedrl here)
    from purejaxrl.ppo import make_train

    seeds, envs, steps, total = (int(float(x)) for x in sys.argv[1:5])
    config.update(NUM_ENVS=envs, NUM_STEPS=steps, TOTAL_TIMESTEPS=total)
    if os.environ.get("FUSEDRL_PUREJAXRL_HLO"):
        ask = json.loads(os.environ["FUSEDRL_PUREJAXRL_HLO"])
        device = jax.devices()[0]
        if ask.get("target_config"):
            from jax.experimental import topologies

            device = topologies.get_topology_desc(platform="cuda", target_config=ask["target_config"],
                                                  topology="1x1x1").devices[0]
        keys = jax.ShapeDtypeStruct((seeds, 2), np.uint32,
                                    sharding=jax.sharding.SingleDeviceSharding(device))
        compiled = jax.jit(jax.vmap(make_train(config))).trace(keys).lower().compile()
        with open(ask["path"], "w", encoding="utf-8") as f:
            f.write(compiled.as_text())
        print(json.dumps({"impl": "purejaxrl", "hlo": ask["path"],
                          "device": f"{device.platform}:{getattr(device, 'device_kind', '')}"}))
        return
    stats = jax.devices()[0].memory_stats() or {}
    if os.environ.get("FUSEDRL_PUREJAXRL_PREDICT"):
        ask = json.loads(os.environ["FUSEDRL_PUREJAXRL_PREDICT"])
        limit = ask.get("limit") or stats.get("bytes_limit")
        if not limit:
            sys.exit("no device memory limit: the device keeps no bytes_limit; give one in "
                     "FUSEDRL_PUREJAXRL_PREDICT's 'limit'")
        tried = []
        for n in ask["agents"]:
            keys = jax.random.split(jax.random.PRNGKey(0), int(n))
            memory = memory_bytes(jax.jit(jax.vmap(make_train(config))).lower(keys).compile())
            if memory is None:
                sys.exit("this platform gives no XLA memory analysis (compiled.memory_analysis())")
            tried.append({"agents": int(n), "memory": memory, "limit_bytes": int(limit),
                          "fits": memory["total"] <= int(limit)})
            if not tried[-1]["fits"]:
                break
        print(json.dumps({"impl": "purejaxrl", "predict": tried}))
        return
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    out, compile_s, train_s, memory = compile_measure_run(jax.jit(jax.vmap(make_train(config))), keys)
    n = (total // (envs * steps)) * envs * steps * seeds
    info = out["metrics"]  # each [seeds, updates, steps, envs]
    done = np.asarray(info["returned_episode"])[:, -1]
    rets = np.asarray(info["returned_episode_returns"])[:, -1]
    ret = float(rets[done].mean()) if done.any() else float("nan")
    stats = jax.devices()[0].memory_stats() or {}
    print(json.dumps({"impl": "purejaxrl", "compile_s": compile_s, "train_s": train_s, "sps": n / train_s,
                      "ret": ret, "peak_bytes": stats.get("peak_bytes_in_use"),
                      "predicted_bytes": None if memory is None else memory["total"]}))


if __name__ == "__main__":
    main()
