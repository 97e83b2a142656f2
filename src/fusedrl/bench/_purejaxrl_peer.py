"""Runs PureJaxRL's PPO (`purejaxrl/ppo.py`) at its default CartPole config, or its recurrent PPO
(`purejaxrl/ppo_rnn.py`, a GRU) at that script's own config; prints one JSON line.

    PYTHON _purejaxrl_peer.py SEEDS NUM_ENVS NUM_STEPS TOTAL [NETWORK]   (with PUREJAXRL_SRC set)

NETWORK is "mlp" (default: `ppo.py`) or "gru" (`ppo_rnn.py`). PureJaxRL is a set of scripts, not a
package, and pins the gymnax 0.0.x step API, so this runs in the peers' scratch interpreter
(../shared/peers/setup.sh: jax, flax, optax, distrax, gymnax 0.0.9), never in ours. `PUREJAXRL_SRC`
is a folder holding `purejaxrl/ppo.py`, `purejaxrl/ppo_rnn.py` and `purejaxrl/wrappers.py` from
github.com/luchris429/purejaxrl, with `wrappers.py`'s brax and navix imports either stubbed or left
out with the classes that use them: CartPole uses neither. Nothing of PureJaxRL is part of fusedrl;
this file only calls its `make_train` the way its README does, `jax.jit(jax.vmap(make_train(config)))(keys)`,
and times it with the helper that times ours (`_timing.compile_then_run`: compile apart, then one
execution).

`ppo_rnn.py` was written against flax < 0.7's `GRUCell` (constructed without `features`, a static
`initialize_carry(rng, batch_dims, size)`); `_flax_gru_compat` gives the installed flax's `GRUCell`
that interface, computing the same cell, so the script runs unmodified.
"""

import json
import os
import sys

#: PureJaxRL's config of each script (`ppo.py`'s default CartPole config; `ppo_rnn.py`'s `__main__`,
#: the same numbers, with its GRU of 128 units between 128-wide ReLU layers built in).
CONFIG = {
    "LR": 2.5e-4, "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5,
    "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1", "ANNEAL_LR": True, "DEBUG": False,
}
SCRIPTS = {"mlp": "ppo", "gru": "ppo_rnn"}


def _flax_gru_compat() -> None:
    """`flax.linen.GRUCell` with flax < 0.7's interface as well (see the module docstring): a default
    of 128 features (the size ppo_rnn.py asks its carry for) and a static zero `initialize_carry`."""
    import flax.linen as nn
    import jax.numpy as jnp

    if "features" not in getattr(nn.GRUCell, "__dataclass_fields__", {}):
        return  # an old flax: the script's own API

    class GRUCell(nn.GRUCell):
        features: int = 128

        @staticmethod
        def initialize_carry(rng, batch_dims, size):  # flax < 0.7: zeros [*batch_dims, size]
            del rng
            return jnp.zeros((*batch_dims, size), jnp.float32)

    nn.GRUCell = GRUCell


def main() -> None:
    src = os.environ.get("PUREJAXRL_SRC")
    network = sys.argv[5] if len(sys.argv) > 5 else "mlp"
    if network not in SCRIPTS:
        sys.exit(f"NETWORK must be one of {list(SCRIPTS)}, got {network!r}.")
    script = SCRIPTS[network]
    if not src or not os.path.isfile(os.path.join(src, "purejaxrl", f"{script}.py")):
        sys.exit(f"PUREJAXRL_SRC must name a folder with purejaxrl/{script}.py in it, got {src!r}.")
    # Its scripts import the wrappers as `purejaxrl.wrappers` or, in later commits, as `wrappers`.
    sys.path[:0] = [src, os.path.join(src, "purejaxrl")]
    import importlib

    import jax
    import numpy as np
    from _timing import compile_then_run  # beside this file (the peers' interpreter has no fusedrl)

    if network == "gru":
        _flax_gru_compat()
    make_train = importlib.import_module(f"purejaxrl.{script}").make_train

    seeds, envs, steps, total = (int(float(x)) for x in sys.argv[1:5])
    config = {**CONFIG, "NUM_ENVS": envs, "NUM_STEPS": steps, "TOTAL_TIMESTEPS": total}
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    out, compile_s, train_s = compile_then_run(jax.jit(jax.vmap(make_train(config))), keys)
    n = (total // (envs * steps)) * envs * steps * seeds
    info = out["metrics" if network == "mlp" else "metric"]  # each [seeds, updates, steps, envs]
    done = np.asarray(info["returned_episode"])[:, -1]
    rets = np.asarray(info["returned_episode_returns"])[:, -1]
    ret = float(rets[done].mean()) if done.any() else float("nan")
    print(json.dumps({"impl": "purejaxrl", "compile_s": compile_s, "train_s": train_s,
                      "sps": n / train_s, "ret": ret}))


if __name__ == "__main__":
    main()
