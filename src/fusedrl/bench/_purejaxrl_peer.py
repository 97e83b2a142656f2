"""Runs PureJaxRL's PPO (`purejaxrl/ppo.py`) at its default CartPole config; prints one JSON line.

    PYTHON _purejaxrl_peer.py SEEDS NUM_ENVS NUM_STEPS TOTAL   (with PUREJAXRL_SRC set)

PureJaxRL is a set of scripts, not a package, and pins the gymnax 0.0.x step API, so this runs in
the peers' scratch interpreter (../shared/peers/setup.sh: jax, flax, optax, distrax, gymnax 0.0.9),
never in ours. `PUREJAXRL_SRC` is a folder holding `purejaxrl/ppo.py` and `purejaxrl/wrappers.py`
from github.com/luchris429/purejaxrl, with `wrappers.py`'s brax import either stubbed (a stub `brax`
package) or left out with the classes that use it: CartPole uses neither. Nothing of PureJaxRL is
part of fusedrl; this file only calls its `make_train` the way its README does,
`jax.jit(jax.vmap(make_train(config)))(keys)`, and times it with the helper that times ours
(`_timing.compile_then_run`: compile apart, then one execution).
"""

import json
import os
import sys


def main() -> None:
    src = os.environ.get("PUREJAXRL_SRC")
    if not src or not os.path.isfile(os.path.join(src, "purejaxrl", "ppo.py")):
        sys.exit(f"PUREJAXRL_SRC must name a folder with purejaxrl/ppo.py in it, got {src!r}.")
    sys.path.insert(0, src)
    import jax
    import numpy as np
    from _timing import compile_then_run  # beside this file (the peers' interpreter has no fusedrl)
    from purejaxrl.ppo import make_train

    seeds, envs, steps, total = (int(float(x)) for x in sys.argv[1:5])
    config = {
        "LR": 2.5e-4, "NUM_ENVS": envs, "NUM_STEPS": steps, "TOTAL_TIMESTEPS": total,
        "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95,
        "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5,
        "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1", "ANNEAL_LR": True, "DEBUG": False,
    }
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    out, compile_s, train_s = compile_then_run(jax.jit(jax.vmap(make_train(config))), keys)
    n = (total // (envs * steps)) * envs * steps * seeds
    info = out["metrics"]  # each [seeds, updates, steps, envs]
    done = np.asarray(info["returned_episode"])[:, -1]
    rets = np.asarray(info["returned_episode_returns"])[:, -1]
    ret = float(rets[done].mean()) if done.any() else float("nan")
    print(json.dumps({"impl": "purejaxrl", "compile_s": compile_s, "train_s": train_s,
                      "sps": n / train_s, "ret": ret}))


if __name__ == "__main__":
    main()
