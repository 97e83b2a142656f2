"""Suite-wide settings: strict numerics and a faulthandler dump if a test hangs."""

import os

import jax

# Catch the classic [N, 1] value against [N] reward broadcast: implicit rank promotion is an error,
# here and in the processes tests start (multi-device and multi-process runs, notebook kernels),
# which read it from the environment.
os.environ["JAX_NUMPY_RANK_PROMOTION"] = "raise"
jax.config.update("jax_numpy_rank_promotion", "raise")
