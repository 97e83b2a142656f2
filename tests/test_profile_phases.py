"""`fusedrl profile --phases`: the device time of training updates per phase, from a jax.profiler trace.

The trace is read back through the compiled program's HLO: each operation's phase is the innermost
phase scope (`fusedrl.train.phases.PHASES`) on its metadata's `op_name`. Checked against a hand-made
program and trace (the sums a reader expects), then end to end on a tiny CartPole run on the CPU.
"""

from __future__ import annotations

import gzip
import json

import pytest

from fusedrl import profile
from fusedrl.train.phases import PHASES

# A scheduled program as `compiled.as_text()` prints it (op_name paths shortened from
# "jit(run)/while/body/..."): a loop whose body runs a fused loss
# (metadata on the fusion), a fusion without metadata (its members are optimiser operations), and
# an entry operation under no phase.
HLO = """HloModule jit_run, is_scheduled=true, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

%fc (param_0: f32[4]) -> f32[4] {
  %param_0 = f32[4]{0} parameter(0)
  ROOT %tanh.0 = f32[4]{0} tanh(%param_0), metadata={op_name="b/fusedrl_loss/jvp(tanh)"}
}

%fc.1 (param_0.1: f32[4]) -> f32[4] {
  %param_0.1 = f32[4]{0} parameter(0)
  %mul.2 = f32[4]{0} multiply(%param_0.1, %param_0.1), metadata={op_name="b/fusedrl_optimizer/mul"}
  ROOT %add.3 = f32[4]{0} add(%mul.2, %param_0.1), metadata={op_name="b/fusedrl_optimizer/add"}
}

%body (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %p = (s32[], f32[4]{0}) parameter(0)
  %x = f32[4]{0} get-tuple-element(%p), index=1
  %loss_fusion = f32[4]{0} fusion(%x), kind=kLoop, calls=%fc, metadata={op_name="b/fusedrl_loss/jvp(tanh)"}
  %opt_fusion.2 = f32[4]{0} fusion(%loss_fusion), kind=kLoop, calls=%fc.1
  %env_in_policy = f32[4]{0} sine(%opt_fusion.2), metadata={op_name="b/fusedrl_policy/vmap(fusedrl_env)/sin"}
  ROOT %t = (s32[], f32[4]{0}) tuple(%x, %env_in_policy)
}

ENTRY %main.1 (x.1: f32[4]) -> f32[4] {
  %x.1 = f32[4]{0} parameter(0), metadata={op_name="x"}
  %while.7 = (s32[], f32[4]{0}) while(%t0), condition=%cond, body=%body, metadata={op_name="jit(run)/while"}
  ROOT %copy.4 = f32[4]{0} copy(%x.1), metadata={op_name="jit(run)/metrics/mean"}
}
"""


def _event(op, dur, module="jit_run", pid=1):
    return {"ph": "X", "pid": pid, "tid": 1, "ts": 0.0, "dur": dur, "name": op,
            "args": {"hlo_op": op, "hlo_module": module}}


def test_hlo_phases_take_the_innermost_scope_and_a_bare_fusions_members():
    module, ops = profile.hlo_phases(HLO)
    assert module == "jit_run"
    assert ops["loss_fusion"] == ("fusion", "loss")
    assert ops["opt_fusion.2"] == ("fusion", "optimizer")  # no metadata: its members' phase
    assert ops["env_in_policy"] == ("sine", "env")  # the innermost phase scope on the path
    assert ops["while.7"] == ("while", "other") and ops["copy.4"] == ("copy", "other")
    assert profile.phase_of("jit(f)/transpose(jvp(fusedrl_shuffle))/gather") == "shuffle"
    assert profile.phase_of("jit(f)/fusedrl_envx/sin") == "other"  # a whole scope name, not a prefix


def _write_trace(tmp_path, events, processes, threads=()):
    meta = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}}
            for pid, name in processes.items()]
    meta += [{"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}}
             for pid, tid, name in threads]
    folder = tmp_path / "plugins" / "profile" / "run"
    folder.mkdir(parents=True)
    with gzip.open(folder / "host.trace.json.gz", "wt") as f:
        json.dump({"traceEvents": meta + events}, f)
    return str(tmp_path)


def test_phase_times_sum_each_operations_events_once(tmp_path):
    _, ops = profile.hlo_phases(HLO)
    events = [
        _event("while.7", 1000.0),  # encloses the body's events: not counted again
        _event("loss_fusion", 30.0), _event("loss_fusion", 20.0),
        _event("opt_fusion.2", 7.0),
        _event("env_in_policy", 5.0),
        _event("copy.4", 3.0),
        _event("loss_fusion", 500.0, module="jit_other"),  # another program's
        _event("mystery.9", 2.0),  # not in this program's HLO: other, and said so
        {"ph": "X", "pid": 1, "tid": 1, "ts": 0.0, "dur": 99.0, "name": "PjitFunction(run)"},
    ]
    folder = _write_trace(tmp_path, events, {1: "/host:CPU"})
    seconds, info = profile.phase_times(profile.read_trace(folder), "jit_run", ops)
    want = {"env": 5e-6, "policy": 0.0, "advantages": 0.0, "loss": 50e-6, "optimizer": 7e-6,
            "shuffle": 0.0, "other": 5e-6}
    assert seconds == pytest.approx(want, abs=1e-12)
    assert info["source"] == "host" and info["unmatched_s"] == pytest.approx(2e-6)


def test_phase_times_prefer_the_devices_events_over_the_hosts(tmp_path):
    # On a GPU the host's threads also name the operations they launch: only the device's count.
    _, ops = profile.hlo_phases(HLO)
    events = [_event("loss_fusion", 40.0, pid=2), _event("loss_fusion", 900.0, pid=1),
              _event("copy.4", 10.0, pid=2)]
    folder = _write_trace(tmp_path, events, {1: "/host:CPU", 2: "/device:GPU:0"})
    seconds, info = profile.phase_times(profile.read_trace(folder), "jit_run", ops)
    assert seconds["loss"] == pytest.approx(40e-6) and seconds["other"] == pytest.approx(10e-6)
    assert info["source"] == "device" and info["events"] == 2


def test_device_kernels_without_hlo_op_go_by_their_name_and_derived_lines_count_once(tmp_path):
    # A GPU kernel XLA emits is named after its operation ("opt_fusion.2" -> "opt_fusion_2"); a
    # library's kernel (cuBLAS) names none of them: other, and said so. A derived "XLA Ops" line
    # repeats the streams' time: where there is one, only it counts.
    _, ops = profile.hlo_phases(HLO)
    kernel = {"ph": "X", "pid": 2, "tid": 7, "ts": 0.0, "dur": 6.0, "name": "opt_fusion_2", "args": {}}
    cublas = {"ph": "X", "pid": 2, "tid": 7, "ts": 0.0, "dur": 4.0, "name": "sm90_xmma_gemm_f32", "args": {}}
    streams = [kernel, cublas]
    folder = _write_trace(tmp_path / "a", streams, {2: "/device:GPU:0"}, [(2, 7, "Stream #13(Compute)")])
    seconds, info = profile.phase_times(profile.read_trace(folder), "jit_run", ops)
    assert seconds["optimizer"] == pytest.approx(6e-6) and seconds["other"] == pytest.approx(4e-6)
    assert info["unmatched_s"] == pytest.approx(4e-6)
    derived = [{**_event("loss_fusion", 9.0, pid=2), "tid": 8}]
    folder = _write_trace(tmp_path / "b", streams + derived, {2: "/device:GPU:0"},
                          [(2, 7, "Stream #13(Compute)"), (2, 8, "XLA Ops")])
    seconds, _ = profile.phase_times(profile.read_trace(folder), "jit_run", ops)
    assert sum(seconds.values()) == pytest.approx(9e-6) and seconds["loss"] == pytest.approx(9e-6)


def test_kernels_replayed_from_a_cuda_graph_go_by_their_own_name(tmp_path):
    # XLA's command buffers (CUDA graphs, on by default on GPUs) put the command buffer's name in
    # each replayed kernel's `hlo_op` (as an H200 trace with jax 0.11.2 showed): the kernel's own
    # name, formed from its operation's, says which operation it is.
    _, ops = profile.hlo_phases(HLO)
    replayed = [{"ph": "X", "pid": 2, "tid": 7, "ts": 0.0, "dur": dur, "name": name,
                 "args": {"hlo_op": "command_buffer_185", "hlo_module": "jit_run", "cuda_graph_id": "54"}}
                for name, dur in (("loss_fusion", 30.0), ("opt_fusion_2", 6.0), ("memcpy32_post", 2.0))]
    folder = _write_trace(tmp_path, replayed, {2: "/device:GPU:0"}, [(2, 7, "Stream #14(Compute)")])
    seconds, info = profile.phase_times(profile.read_trace(folder), "jit_run", ops)
    assert seconds["loss"] == pytest.approx(30e-6) and seconds["optimizer"] == pytest.approx(6e-6)
    assert seconds["other"] == pytest.approx(2e-6) and info["unmatched_s"] == pytest.approx(2e-6)


def test_read_trace_names_the_folder_without_a_trace(tmp_path):
    with pytest.raises(FileNotFoundError, match="wrote no"):
        profile.read_trace(str(tmp_path))


TINY = ["--env", "CartPole-v1", "--num-envs", "4", "--num-steps", "8", "--update-epochs", "2",
        "--num-minibatches", "2", "--updates", "2"]


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """One traced run of 2 vmapped CartPole agents through `fusedrl profile --phases`: (table, summary)."""
    import contextlib
    import io

    out = io.StringIO()
    trace_dir = str(tmp_path_factory.mktemp("trace"))
    with contextlib.redirect_stdout(out):
        assert profile.main([*TINY, "--phases", "--agents", "2", "--trace-dir", trace_dir, "--json"]) == 0
    lines = out.getvalue().splitlines()
    return "\n".join(lines[:-1]), json.loads(lines[-1]), trace_dir


@pytest.mark.timeout(600)
def test_every_phase_of_a_real_run_takes_time_and_the_phases_add_up(traced):
    table, summary, trace_dir = traced
    seconds = summary["seconds"]
    assert list(seconds) == [*PHASES, "other"]
    # Each of the trainer's phases is found in the trace: a scope removed leaves its phase at 0.
    assert all(seconds[p] > 0 for p in PHASES), seconds
    assert sum(seconds.values()) == pytest.approx(summary["busy_seconds"])
    # The events of one thread (or GPU stream) do not overlap, so their time fits in the run's wall
    # time once per thread that ran operations.
    assert summary["busy_seconds"] <= summary["wall_seconds"] * summary["lanes"], summary
    assert summary["agents"] == 2 and summary["updates"] == 2 and summary["events"] > 0
    assert summary["steps_per_s"] == pytest.approx(2 * 4 * 8 / summary["wall_seconds"])
    assert summary["source"] == "host"  # XLA:CPU has no device events: its threads' events count
    for phase in [*PHASES, "other", "busy"]:
        assert f"\n{phase} " in table
    assert profile.read_trace(trace_dir)  # --trace-dir keeps the trace


@pytest.mark.parametrize("argv, message", [
    (["--env", "gymnasium:CartPole-v1", "--phases"], "--phases reads the fused program"),
    (["--env", "gymnasium:CartPole-v1", "--launches"], "--launches reads the fused program"),
    (["--env", "CartPole-v1", "--agents", "2"], "--agents goes with --phases or --launches"),
    (["--env", "CartPole-v1", "--target", "h200"], "--target goes with --launches"),
    (["--env", "CartPole-v1", "--phases", "--launches"], "give one"),
    (["--env", "CartPole-v1", "--launches", "--target", "a100"], "unknown target 'a100'"),
])
def test_phases_refuses_what_it_cannot_profile(argv, message, capsys):
    assert profile.main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("agents", [None, 2])
def test_the_profiled_program_returns_the_metrics_as_training_does(agents):
    """What `--phases` times and `--launches` counts (`training_program`) returns the per-update
    metrics beside the state: a program that returned the state alone would let XLA drop the
    metrics' work, and the profile would miss it."""
    import jax

    from fusedrl import PPOConfig, make_train

    config = PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=8, total_timesteps=4 * 8 * 3,
                       hidden_sizes=(8,))
    init, run = profile.training_program(make_train(config), agents, 3)
    out = jax.eval_shape(run, jax.eval_shape(init, jax.random.key(0)))
    lead = (3,) if agents is None else (2, 3)
    assert out.metrics["episode_return"].shape == lead
    assert out.state.params is not None
