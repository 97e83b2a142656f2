"""Suite-wide settings: strict numerics, and one on-disk cache of compiled programs per test session."""

import os
import shutil
import tempfile

import jax

# Catch the classic [N, 1] value against [N] reward broadcast: implicit rank promotion is an error,
# here and in the processes tests start (multi-device and multi-process runs, notebook kernels),
# which read it from the environment.
os.environ["JAX_NUMPY_RANK_PROMOTION"] = "raise"
jax.config.update("jax_numpy_rank_promotion", "raise")

# Many tests compile programs another test of the session compiled before (evaluate's, a cleared
# cache's, the same config in another file): JAX's persistent compilation cache, in a new folder for
# each session shared by its pytest-xdist workers, compiles each once. Only the test processes use
# it: processes the tests start (a run resumed "in a new process", notebook kernels) compile
# everything themselves, as a user's would.
_CACHE_DIR = "FUSEDRL_TESTS_JAX_CACHE_DIR"


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controller, or the only process (-n 0)
        os.environ[_CACHE_DIR] = tempfile.mkdtemp(prefix="fusedrl-tests-jax-cache-")
    jax.config.update("jax_compilation_cache_dir", os.environ[_CACHE_DIR])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        shutil.rmtree(os.environ.pop(_CACHE_DIR), ignore_errors=True)
