"""Suite-wide settings: strict numerics and a faulthandler dump if a test hangs."""

import jax

# Catch the classic [N, 1] value against [N] reward broadcast: implicit rank promotion is an error.
jax.config.update("jax_numpy_rank_promotion", "raise")
