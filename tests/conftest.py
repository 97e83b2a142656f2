"""Suite-wide settings: strict numerics, and one on-disk cache of compiled programs per test session."""

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import jax
import pytest

# Catch the classic [N, 1] value against [N] reward broadcast: implicit rank promotion is an error,
# here and in the processes tests start (multi-device and multi-process runs, notebook kernels),
# which read it from the environment.
os.environ["JAX_NUMPY_RANK_PROMOTION"] = "raise"
jax.config.update("jax_numpy_rank_promotion", "raise")

# Two compile-time settings for the test processes and the processes they start (which inherit the
# environment; the multi-device tests add their flags to it). Most of the suite's time is compiling
# some 300 distinct small programs.
# - LLVM at O1 instead of XLA's default O3: faster compiles, and the tests' short runs do not feel
#   its slower code.
# - XLA:CPU's older kernel emitters (`--xla_cpu_use_fusion_emitters=false`) instead of its fusion
#   emitters: faster compiles again; their kernels run slower, which the tests, nearly all compile,
#   hardly feel. Added only when the installed jaxlib knows the flag (an unknown flag in XLA_FLAGS
#   aborts the process): jaxlib 0.10.2 does, 0.11.2 does not (its CPU backend has only the fusion
#   emitters).
# What each saves, with its command, machine and date: docs/testing.md.
# Kernels compiled either way round differently, as another processor's do: no test depends on one
# processor's rounding, and every check is made within one set of flags. A test of a property of the
# programs users compile takes `user_compiler_options`. FUSEDRL_TESTS_XLA_DEFAULT=1 runs the suite at
# XLA's defaults; an optimisation level or an emitter choice already in XLA_FLAGS is kept.
_EMITTERS = "--xla_cpu_use_fusion_emitters=false"


def _xla_knows(flag: str) -> bool:
    probe = "import jax.numpy as jnp; jnp.zeros(1).block_until_ready()"
    env = {**os.environ, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} {flag}", "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True).returncode == 0


# Decided once, by the first test process: the pytest-xdist workers inherit its XLA_FLAGS and this
# mark, so they do not probe again (where jaxlib lacks the flag, nothing in XLA_FLAGS would tell them).
_DECIDED = "FUSEDRL_TESTS_XLA_FLAGS_DECIDED"
if os.environ.get("FUSEDRL_TESTS_XLA_DEFAULT") != "1" and _DECIDED not in os.environ:
    _XLA_FLAGS = os.environ.get("XLA_FLAGS", "")
    if "xla_backend_optimization_level" not in _XLA_FLAGS:
        _XLA_FLAGS += " --xla_backend_optimization_level=1"
    if "xla_cpu_use_fusion_emitters" not in _XLA_FLAGS and _xla_knows(_EMITTERS):
        _XLA_FLAGS += " " + _EMITTERS
    os.environ["XLA_FLAGS"] = _XLA_FLAGS.strip()
    os.environ[_DECIDED] = "1"


@pytest.fixture
def user_compiler_options():
    """`jax.jit` compiler options that undo the suite's emitter choice: a test of a property of the
    programs a user's process compiles (bit-identical results of two programs) passes them."""
    if _EMITTERS in os.environ.get("XLA_FLAGS", "").split():
        return {"xla_cpu_use_fusion_emitters": True}
    return {}


# Many tests compile programs another test of the session compiled before (evaluate's, a cleared
# cache's, the same config in another file): JAX's persistent compilation cache, in a new folder for
# each session shared by its pytest-xdist workers, compiles each once. Only the test processes use
# it: processes the tests start (a run resumed "in a new process", notebook kernels) compile
# everything themselves, as a user's would.
_CACHE_DIR = "FUSEDRL_TESTS_JAX_CACHE_DIR"
# The command line turns on its own per-user compile cache (~/.cache/fusedrl/jax): off here and in
# the processes tests start, so that no test writes to the user's folder or changes the session's
# cache settings (the tests of that cache turn it back on, in a folder of their own).
os.environ["FUSEDRL_COMPILE_CACHE"] = "0"


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controller, or the only process (-n 0)
        os.environ[_CACHE_DIR] = tempfile.mkdtemp(prefix="fusedrl-tests-jax-cache-")
    jax.config.update("jax_compilation_cache_dir", os.environ[_CACHE_DIR])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        shutil.rmtree(os.environ.pop(_CACHE_DIR), ignore_errors=True)


@pytest.fixture
def x64():
    """jax_enable_x64 on for one test; the process-wide flag is restored after it."""
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", before)


#: The smallest network module a user could write (docs/networks.md): `Net`, Dense logits and value,
#: and its factory `net`. The custom-network tests add what each needs.
TINY_NET = """
import flax.linen as nn
from fusedrl.distributions import Categorical


class Net(nn.Module):
    action_dim: int

    @nn.compact
    def __call__(self, obs):
        return Categorical(logits=nn.Dense(self.action_dim)(obs)), nn.Dense(1)(obs)[..., 0]


def net(action_dim, discrete, obs_shape, config):
    return Net(action_dim)
"""


@pytest.fixture
def net_module(tmp_path, monkeypatch):
    """`write(name, extra="", folder=tmp_path)`: writes the module `name` (TINY_NET, then `extra`)
    into `folder` and puts the folder on sys.path; returns the folder."""

    def write(name, extra="", folder=None):
        folder = folder or tmp_path
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.py").write_text(TINY_NET + textwrap.dedent(extra), encoding="utf-8")
        monkeypatch.syspath_prepend(str(folder))
        return folder

    return write


def _run_cli(*argv):
    """`fusedrl ARGV...` in this process: (exit status, stdout, stderr). Arguments may be paths or
    numbers; an argparse error (SystemExit) gives its status, as the shell would see it."""
    import io

    from fusedrl import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main([str(a) for a in argv])
        except SystemExit as e:  # argparse's own errors (a bad value for a typed option)
            code = e.code
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="session")
def run_cli():
    """The command line, called in-process: `code, out, err = run_cli("train", "--env", ...)`.
    Session-scoped, so that module-scoped fixtures can train through it too."""
    return _run_cli


EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "examples")


@contextlib.contextmanager
def _docs_example(name: str):
    """docs/examples/NAME.py imported as `docs.examples.NAME` (importing it registers its envs); on
    leaving, fusedrl's env registry is as it was and the module is gone from sys.modules, so other
    tests in this process see only the built-in envs."""
    import importlib.util

    from fusedrl.envs import registry

    saved = dict(registry._REGISTRY)
    path = os.path.join(EXAMPLES, f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"docs.examples.{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        registry._REGISTRY.clear()
        registry._REGISTRY.update(saved)
        sys.modules.pop(spec.name, None)


@pytest.fixture(scope="session")
def docs_example():
    """`with docs_example("my_env") as module:` a docs/examples module, imported for the block; the
    env registry restored after it. Session-scoped, so that module-scoped fixtures can use it."""
    return _docs_example


#: A stand-in for PureJaxRL's `purejaxrl/ppo.py` with its habit: `train` is a loop over the
#: config's updates that returns one [steps, envs] metric per update, stacked (its history grows with
#: the run's length).
PUREJAXRL_STAND_IN = (
    "import jax, jax.numpy as jnp\n\n"
    "def make_train(config):\n"
    "    updates = int(config['TOTAL_TIMESTEPS']) // (config['NUM_ENVS'] * config['NUM_STEPS'])\n"
    "    def train(key):\n"
    "        def step(c, _):\n"
    "            return c + 1.0, jnp.full((config['NUM_STEPS'], config['NUM_ENVS']), c)\n"
    "        _, m = jax.lax.scan(step, jax.random.uniform(key), None, updates)\n"
    "        return {'metrics': {'returned_episode_returns': m}}\n"
    "    return train\n"
)


@pytest.fixture
def purejaxrl_stand_in(tmp_path):
    """A PUREJAXRL_SRC folder whose `purejaxrl/ppo.py` is `PUREJAXRL_STAND_IN`; returns its path."""
    (tmp_path / "purejaxrl").mkdir()
    (tmp_path / "purejaxrl" / "ppo.py").write_text(PUREJAXRL_STAND_IN)
    return tmp_path


@pytest.fixture
def interrupt_at(monkeypatch):
    """`interrupt_at(update, error=KeyboardInterrupt)`: the CSV logger raises `error` once it has
    written `update`'s rows (Ctrl-C by default: on CPU a real one lands inside the jitted run, where
    the loggers are called). Returns a function that gives the logger back its own `log`."""
    from fusedrl.loggers import CSVLogger

    original = CSVLogger.log

    def arm(update: int, error: BaseException | type[BaseException] = KeyboardInterrupt):
        def log_then_raise(self, u, rows):
            original(self, u, rows)
            if u == update:
                raise error

        monkeypatch.setattr(CSVLogger, "log", log_then_raise)
        return lambda: monkeypatch.setattr(CSVLogger, "log", original)

    return arm


def _tensorboard_scalars(logdir) -> list[tuple[str, float, int]]:
    """Every scalar tensorboardX wrote under `logdir`: (tag, value, step), in the order written. The event
    files are TFRecords (a little-endian uint64 length, its CRC, the record, its CRC), each record a
    serialised `Event`, decoded with tensorboardX's own proto."""
    import pathlib
    import struct

    from tensorboardX.proto import event_pb2

    scalars = []
    for path in sorted(pathlib.Path(logdir).rglob("events.out.tfevents.*")):
        data, i = path.read_bytes(), 0
        while i < len(data):
            (length,) = struct.unpack("<Q", data[i:i + 8])
            event = event_pb2.Event.FromString(data[i + 12:i + 12 + length])
            i += 12 + length + 4
            scalars += [(v.tag, v.simple_value, event.step) for v in event.summary.value]
    return scalars


@pytest.fixture(scope="session")
def tensorboard_scalars():
    """`tensorboard_scalars(logdir)`: the scalars tensorboardX wrote there, [(tag, value, step)]."""
    return _tensorboard_scalars
