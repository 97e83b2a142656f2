"""Kernel launches per update (`fusedrl.launches`): a hand-written HLO module with loops, a call and a
conditional counted exactly; the trainer's compiled program read into its loops and phases; the
PureJaxRL peer's HLO mode; compiling for a GPU model without one (or the error that names the fix)."""

import json
import sys

import jax
import pytest

from fusedrl.launches import GPU_TARGETS, count_launches, program_launches, target_device

# Two nested loops (outer 3 iterations, inner 5), a call and a conditional in the outer body.
# Instruction names are unique in the module, as XLA makes them.
HLO = """HloModule jit_f, is_scheduled=true

%fused_add (p0: f32[4]) -> f32[4] {
  %p0 = f32[4]{0} parameter(0)
  ROOT %a0 = f32[4]{0} add(%p0, %p0)
}

%inner_body (t1: (s32[], f32[4])) -> (s32[], f32[4]) {
  %t1 = (s32[], f32[4]{0}) parameter(0)
  %i1 = s32[] get-tuple-element(%t1), index=0
  %x1 = f32[4]{0} get-tuple-element(%t1), index=1
  %env1 = f32[4]{0} fusion(%x1), kind=kLoop, calls=%fused_add, metadata={op_name="jit(f)/while/body/fusedrl_env/add"}
  %pol1 = f32[4]{0} fusion(%env1), kind=kLoop, calls=%fused_add, metadata={op_name="jit(f)/fusedrl_policy/mul"}
  %b1 = f32[4]{0} bitcast(%pol1)
  %one1 = s32[] constant(1)
  %next1 = s32[] add(%i1, %one1)
  ROOT %r1 = (s32[], f32[4]{0}) tuple(%next1, %b1)
}

%inner_cond (t2: (s32[], f32[4])) -> pred[] {
  %t2 = (s32[], f32[4]{0}) parameter(0)
  %i2 = s32[] get-tuple-element(%t2), index=0
  %n2 = s32[] constant(5)
  ROOT %lt2 = pred[] compare(%i2, %n2), direction=LT
}

%callee (p3: f32[4]) -> f32[4] {
  %p3 = f32[4]{0} parameter(0)
  %l3 = f32[4]{0} fusion(%p3), kind=kLoop, calls=%fused_add, metadata={op_name="jit(f)/fusedrl_loss/add"}
  ROOT %o3 = f32[4]{0} fusion(%l3), kind=kLoop, calls=%fused_add, metadata={op_name="jit(f)/fusedrl_optimizer/add"}
}

%big (p4: f32[4]) -> f32[4] {
  %p4 = f32[4]{0} parameter(0)
  %k4 = f32[4]{0} fusion(%p4), kind=kLoop, calls=%fused_add
  %m4 = f32[4]{0} fusion(%k4), kind=kLoop, calls=%fused_add
  ROOT %q4 = f32[4]{0} custom-call(%m4), custom_call_target="__cublas$gemm"
}

%small (p5: f32[4]) -> f32[4] {
  %p5 = f32[4]{0} parameter(0)
  ROOT %k5 = f32[4]{0} fusion(%p5), kind=kLoop, calls=%fused_add
}

%outer_body (t6: (s32[], f32[4])) -> (s32[], f32[4]) {
  %t6 = (s32[], f32[4]{0}) parameter(0)
  %i6 = s32[] get-tuple-element(%t6), index=0
  %x6 = f32[4]{0} get-tuple-element(%t6), index=1
  %zero6 = s32[] constant(0)
  %init6 = (s32[], f32[4]{0}) tuple(%zero6, %x6)
  %w6 = (s32[], f32[4]{0}) while(%init6), condition=%inner_cond, body=%inner_body, backend_config={"known_trip_count":{"n":"5"}}
  %y6 = f32[4]{0} get-tuple-element(%w6), index=1
  %c6 = f32[4]{0} copy(%y6)
  %call6 = f32[4]{0} call(%c6), to_apply=%callee
  %pred6 = pred[] constant(true)
  %cond6 = f32[4]{0} conditional(%pred6, %call6, %call6), true_computation=%big, false_computation=%small
  %one6 = s32[] constant(1)
  %next6 = s32[] add(%i6, %one6)
  ROOT %r6 = (s32[], f32[4]{0}) tuple(%next6, %cond6)
}

%outer_cond (t7: (s32[], f32[4])) -> pred[] {
  %t7 = (s32[], f32[4]{0}) parameter(0)
  %i7 = s32[] get-tuple-element(%t7), index=0
  %n7 = s32[] constant(3)
  ROOT %lt7 = pred[] compare(%i7, %n7), direction=LT
}

ENTRY %main (x8: f32[4]) -> f32[4] {
  %x8 = f32[4]{0} parameter(0)
  %first8 = f32[4]{0} fusion(%x8), kind=kLoop, calls=%fused_add
  %zero8 = s32[] constant(0)
  %init8 = (s32[], f32[4]{0}) tuple(%zero8, %first8)
  %w8 = (s32[], f32[4]{0}) while(%init8), condition=%outer_cond, body=%outer_body, backend_config={"known_trip_count":{"n":"3"}}
  ROOT %out8 = f32[4]{0} get-tuple-element(%w8), index=1
}
"""  # noqa: E501 (HLO lines as XLA writes them)


def test_a_hand_written_module_is_counted_launch_by_launch():
    """By hand: the inner body launches 3 kernels (env, policy, the counter's add; the bitcast and
    tuple none) 15 times, its condition 1 kernel 15 + 3 times (once more per loop start); the
    outer body 1 copy, the call's 2, the larger branch's 3 and its add, 3 times, its condition 4
    times; the entry 1 fusion."""
    got = count_launches(HLO)
    assert got.total == 3 * 15 + 1 * 18 + (1 + 2 + 3 + 1) * 3 + 1 * 4 + 1 == 89
    assert got.per_phase["env"] == got.per_phase["policy"] == 15
    assert got.per_phase["loss"] == got.per_phase["optimizer"] == 3
    assert got.per_phase["other"] == 89 - 36
    assert got.top == {"other": 1}
    outer, inner = got.loops
    assert (outer.path, outer.trip, outer.starts, outer.iterations) == (("w8",), 3, 1, 3)
    assert (inner.path, inner.trip, inner.starts, inner.iterations) == (("w8", "w6"), 5, 3, 15)
    assert sum(inner.per_iteration.values()) == 3 + 1  # body and condition
    assert sum(outer.per_iteration.values()) == 7 + 1


def test_text_without_an_entry_computation_is_refused():
    with pytest.raises(ValueError, match="ENTRY"):
        count_launches("HloModule empty\n")


def test_the_trainer_program_is_read_into_its_loops_and_phases():
    """The trainer's run compiled for this machine: its update loop runs `updates` times, and in it
    the rollout's step loop (num_steps) and the epochs' loop (update_epochs) around the minibatches'
    (num_minibatches); the rollout's policy and env and the update's loss and optimizer launch
    kernels under their phases, every one of them counted per update."""
    from fusedrl import PPOConfig

    config = PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=12, total_timesteps=4 * 12 * 3,
                       update_epochs=3, num_minibatches=2, hidden_sizes=(8,))
    s = program_launches(config, agents=2, updates=3)
    assert s["agents"] == 2 and s["updates"] == 3 and s["device"].startswith(jax.devices()[0].platform)
    trips = {tuple(lp["path"]): lp["trip"] for lp in s["loops"]}
    (update,) = [path for path, trip in trips.items() if len(path) == 1 and trip == 3]
    inside = {path[1:]: trip for path, trip in trips.items() if path[:1] == update and len(path) > 1}
    assert 12 in inside.values()  # the rollout's steps
    epochs = [p for p, t in inside.items() if len(p) == 1 and t == 3]
    assert any(inside.get((*e, *rest)) == 2 for e in epochs for rest in [(p[-1],) for p in inside])
    for phase in ("env", "policy", "loss", "optimizer"):
        assert s["per_update"][phase] >= 1, (phase, s["per_update"])
    assert s["total_per_update"] == pytest.approx(sum(s["per_update"].values()))
    # per update: the update loop's launches (nested loops too) over its iterations are most of them
    nested = sum(lp["launches"] for lp in s["loops"] if tuple(lp["path"][:1]) == update)
    assert 0.9 * s["total_per_update"] * 3 <= nested <= s["total_per_update"] * 3


@pytest.mark.subprocess
def test_the_purejaxrl_peer_writes_the_hlo_that_is_counted(purejaxrl_stand_in):
    """The peer's HLO mode (`FUSEDRL_PUREJAXRL_HLO`) compiles PureJaxRL's train (here the conftest's
    stand-in: one loop over its updates) and `bench launches` reads the loop and its trip count back."""
    from types import SimpleNamespace

    from fusedrl.bench.launches import purejaxrl_launches

    peer = SimpleNamespace(purejaxrl_src=str(purejaxrl_stand_in), peer_python=sys.executable, peer_path=None,
                           peer_timeout=300, total_timesteps=None)
    out = purejaxrl_launches("cartpole", 2, 6, None, peer)
    assert "error" not in out, out
    (loop,) = [lp for lp in out["loops"] if lp["trip"] == 6]  # (XLA:CPU adds threefry's own loop)
    assert len(loop["path"]) == 1 and loop["per_iteration"] >= 1
    assert out["total_per_update"] * 6 >= loop["launches"]
    assert out["device"].startswith(jax.devices()[0].platform)
    json.dumps(out)


def test_a_gpu_model_is_compiled_for_without_the_gpu_or_the_error_names_the_plugin():
    """With jax's CUDA plugin, `target_device("h200")` is a compile-only H200; without it, the
    error says what to install. (The CI machine has no plugin: its branch is the error.)"""
    try:
        import jax_plugins.xla_cuda12  # noqa: F401

        have_plugin = True
    except ImportError:
        have_plugin = False
    if have_plugin:
        device = target_device("h200")
        assert device.platform == "gpu" and "H200" in device.device_kind
    else:
        with pytest.raises(RuntimeError, match=f"jax-cuda12-plugin=={jax.__version__}"):
            target_device("h200")
    with pytest.raises(ValueError, match="unknown target 'a100'.*h100, h200"):
        target_device("a100")
    assert target_device(None) == target_device("default") == jax.devices()[0]
    assert set(GPU_TARGETS) == {"h100", "h200"}


def test_fusedrl_profile_launches_prints_the_table_and_a_json_line(capsys):
    from fusedrl import profile

    argv = ["--env", "CartPole-v1", "--launches", "--num-steps", "8", "--update-epochs", "1",
            "--num-minibatches", "2", "--updates", "2", "--json"]
    assert profile.main(argv) == 0
    out = capsys.readouterr().out
    table, line = out.rsplit("\n", 2)[0], json.loads(out.strip().splitlines()[-1])
    assert "kernel launches per update (a count, not a time)" in table
    for phase in ("env", "policy", "loss", "optimizer", "other", "total"):
        assert f"\n{phase} " in table
    assert line["bench"] == "launches" and line["updates"] == 2 and line["num_steps"] == 8
    assert line["total_per_update"] == pytest.approx(sum(line["per_update"].values()))
    assert any(lp["trip"] == 8 for lp in line["loops"])  # the rollout's steps


@pytest.mark.parametrize("argv, message", [
    (["--rows", "envs-cartpole"], "is not a training row"),
    (["--rows", "cartpole-0"], "is not a training row"),
    (["--target", "a100"], "invalid choice"),
    (["--updates", "0"], "--updates must be >= 1"),
])
def test_bench_launches_refuses_bad_arguments(argv, message, capsys):
    from fusedrl.bench import launches

    with pytest.raises(SystemExit) as exc:
        launches.main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err
