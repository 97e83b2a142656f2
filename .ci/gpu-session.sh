#!/usr/bin/env bash
# One prepared session on the project's GPU machine (docs/gpu.md, "Running the benchmark on the
# project's GPU machine"): installs the carried wheels, then, most wanted first: fusedrl beside
# PureJaxRL at Breakout x256 and CartPole x2048 (ours with and without Tuning(value_in_rollout=True),
# Breakout at bf16 too), the Breakout capacity judged at the run's full length (1e7 steps per agent)
# from XLA's memory analysis and timed at a short run (both sides; ours with value_in_rollout too),
# the phase breakdown of Breakout x256 and CartPole x2048, XLA's cost analysis per env step, the
# accelerator tests, and prints a short summary last.
#
#   bash .ci/gpu-session.sh            # on the GPU machine, from the checkout's root, .whl carried
#   bash .ci/gpu-session.sh --smoke    # the same steps at tiny sizes: a dry run on a CPU
#   bash .ci/gpu-session.sh --presets  # instead: the presets learned at float32 and bfloat16 (a
#                                      # second call; its own budget, GPU_PRESETS_BUDGET, 240 s)
#
# Needs .whl/ (gymnax, gymnasium, farama-notifications, six), .whl/peers/ (PureJaxRL's dependencies),
# .whl/fw/ (fusedrl's own wheel) and .whl/purejaxrl-src/. Every step runs under `timeout`, within
# one budget for the whole script (GPU_SESSION_BUDGET seconds, default 560); a step that would not
# fit in what is left is skipped and says so. Each step's output goes to its own file under $OUT
# (8 files with the summary; the machine returns at most 8). PYTHON names the interpreter
# (default python3); GPU_SESSION_SCALE multiplies every limit (a dry run on a slower CPU);
# GPU_SESSION_STEPS="install cost" runs only the steps named (a dry run of one step).
set -uo pipefail

SMOKE=""
PRESETS=""
for arg in "$@"; do
  case $arg in
    --smoke) SMOKE="--smoke" ;;
    --presets) PRESETS=1 ;;
    *) echo "usage: bash .ci/gpu-session.sh [--smoke] [--presets]" >&2; exit 2 ;;
  esac
done
ROOT=$PWD
PY=${PYTHON:-python3}
OUT=${OUT:-$ROOT/gpu-session-out}
WORK=${GPU_SESSION_TMP:-/tmp/gpu-session}
BUDGET=${GPU_SESSION_BUDGET:-560}
[ -n "$PRESETS" ] && BUDGET=${GPU_PRESETS_BUDGET:-240}
SCALE=${GPU_SESSION_SCALE:-1}  # multiplies every step's limits: a dry run on a slow CPU
START=$(date +%s)
mkdir -p "$OUT"
rm -f "$OUT"/{setup,tests,profile,bench,capacity,xla,presets}.log "$OUT"/final.txt
rm -rf "$WORK" && mkdir -p "$WORK"
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
export PIP_NO_INDEX=1 PYTHONUNBUFFERED=1

if [ -n "$SMOKE" ]; then  # tiny sizes with the same row kinds: a dry run of every command
  BA=2; CA=3; CAP_START=2; CAP_MAX=4; T_BREAKOUT=256; T_CARTPOLE=256; T_CAPACITY=256; UPDATES=1
  CAP_LENGTH=1024000; CAP_MEMORY=(--device-memory-mib 8)  # XLA:CPU keeps no bytes_limit: a stand-in
else
  # Speed rows: 50 Breakout updates (105M env steps at 256 agents) and 200 CartPole updates (210M at
  # 2048 agents): steps/s is timed without the compile, so shorter runs than the configs' give it.
  # Capacity: each side's program compiled at Breakout's full 1e7 steps per agent and judged
  # against the device's memory (bytes_limit at XLA_PYTHON_CLIENT_MEM_FRACTION .95), 512 agents
  # doubling; the largest fit is timed at 32,768 steps (4 updates).
  BA=256; CA=2048; CAP_START=512; CAP_MAX=16384; T_BREAKOUT=409600; T_CARTPOLE=102400; T_CAPACITY=32768
  UPDATES=4; CAP_LENGTH=10000000; CAP_MEMORY=()
fi

elapsed() { echo $(( $(date +%s) - START )); }

# step NAME LIMIT MIN LOG COMMAND...: runs COMMAND under `timeout` (LIMIT seconds, or what is left of
# the budget), appending its output to $OUT/LOG; skipped when less than MIN seconds are left.
step() {
  local name=$1 limit=$(( $2 * SCALE )) min=$(( $3 * SCALE )) log=$OUT/$4
  shift 4
  if [ -n "${GPU_SESSION_STEPS:-}" ] && [[ " $GPU_SESSION_STEPS " != *" $name "* ]]; then
    return 0
  fi
  local left=$(( BUDGET - $(elapsed) ))
  if [ "$left" -lt "$min" ]; then
    printf '%-22s skipped: %4ss of the %ss budget left, needs %ss\n' "$name" "$left" "$BUDGET" "$min" \
      | tee -a "$SUMMARY"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit ${limit}s, at $(elapsed)s): $*" | tee -a "$log"
  local t0
  t0=$(date +%s)
  timeout -k 10 "$limit" "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  local why=""
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && why=" (timed out)"
  printf '%-22s rc=%-3s %4ss%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$why" | tee -a "$SUMMARY"
}

# The wheels into folders of their own (fusedrl's dependencies, PureJaxRL's, fusedrl), then a check
# from outside the checkout that jax sees the device and fusedrl imports from the wheel.
export PY ROOT WORK
INSTALL='"$PY" -m pip install -q --no-deps --no-compile --target "$WORK/site" "$ROOT"/.whl/*.whl &&
  "$PY" -m pip install -q --no-deps --no-compile --target "$WORK/peersite" "$ROOT"/.whl/peers/*.whl &&
  "$PY" -m pip install -q --no-deps --no-compile --target "$WORK/pkg" "$ROOT"/.whl/fw/*.whl &&
  cd "$WORK" && PYTHONPATH="$WORK/pkg:$WORK/site" "$PY" -c "import jax, fusedrl
print(jax.devices(), jax.__version__, fusedrl.__file__)"'

export PYTHONPATH=$WORK/pkg:$WORK/site
S=$ROOT/.whl/purejaxrl-src
BENCH=("$PY" -m fusedrl.bench gpu $SMOKE --purejaxrl-src "$S" --peer-path "$WORK/peersite")

step install 60 5 setup.log bash -c "$INSTALL"
grep -q "^install .*rc=0 " "$SUMMARY" || { echo "install failed: see $OUT/setup.log"; exit 1; }

# ---- bf16 on the presets (--presets): learning at float32 and at bfloat16, then exit ----
# Each preset trained with 4 vmapped seeds at float32 and at bfloat16 from the same keys and evaluated
# on 64 greedy episodes per seed (`python -m fusedrl.bench presets --dtypes float32,bfloat16`): first
# the CPU half's rows at its budgets (docs/gpu.md, "bf16": SpaceInvaders-MinAtar capped at 200,000
# steps), then what a CPU could not afford (both MinAtar presets at their full budgets, the other
# classic presets). Compiling takes most of the time and runs on the host's cores, so three processes
# run at once (device memory allocated as needed); each prints a row as it ends, prefixed with its
# stream's name, and a line comparing the dtypes after each env. Only presets whose envs travel as
# wheels (ours, gymnax's).
if [ -n "$PRESETS" ]; then
  cd "$WORK" || exit 1
  if [ -n "$SMOKE" ]; then  # one env per stream, tiny budgets: a dry run of every command
    export P_CAP=4096 P_MINATAR_CPU=8192 P_MINATAR=8192 P_EPISODES=4  # one update: REINFORCE 8 x 500, MinAtar 64 x 128 steps
    export P_CLASSIC="--env CartPole-v1" P_FULL_MINATAR="--env gymnax:Breakout-MinAtar"
    export P_A2C="--env CartPole-v1" P_REINFORCE="--env CartPole-v1"
  else
    export P_CAP=1000000000 P_MINATAR_CPU=200000 P_MINATAR=1000000000 P_EPISODES=64  # 1e9: no cap
    export P_CLASSIC="--env CartPole-v1 --env Acrobot-v1 --env MountainCarContinuous-v0 --env Pendulum-v1 --env MountainCar-v0"
    export P_FULL_MINATAR="--env gymnax:Breakout-MinAtar --env gymnax:SpaceInvaders-MinAtar"
    export P_A2C="--env CartPole-v1 --env Acrobot-v1" P_REINFORCE="--env CartPole-v1 --env Acrobot-v1"
  fi
  # shellcheck disable=SC2016,SC2086  # expanded by the inner bash; the env lists split into words
  step presets 230 60 presets.log env XLA_PYTHON_CLIENT_PREALLOCATE=false bash -c '
    failed=$(mktemp)
    p() { local tag=$1; shift
          "$PY" -m fusedrl.bench presets --seeds 4 --episodes "$P_EPISODES" --dtypes float32,bfloat16 \
            --greedy-only --json "$@" 2>&1 | sed -u "s/^/[$tag] /"
          local rc=${PIPESTATUS[0]}  # a stream that fails makes the step fail (its rc in the summary)
          [ "$rc" = 0 ] || { echo "[$tag] FAILED rc=$rc"; echo "$tag" >> "$failed"; }; }
    p classic $P_CLASSIC --max-timesteps "$P_CAP" &
    { p minatar --env gymnax:SpaceInvaders-MinAtar --max-timesteps "$P_MINATAR_CPU"
      p minatar $P_FULL_MINATAR --max-timesteps "$P_MINATAR"; } &
    { p a2c --algo a2c $P_A2C --max-timesteps "$P_CAP"
      p reinforce --algo reinforce $P_REINFORCE --max-timesteps "$P_CAP"
      p gru --env gymnax:MemoryChain-bsuite --max-timesteps "$P_CAP"; } &
    wait
    [ ! -s "$failed" ]'
  {
    echo
    echo "== summary ($(elapsed)s of the ${BUDGET}s budget; logs in $OUT)"
    cat "$SUMMARY"
    echo
    grep -v -E '^\[[a-z0-9]+\] (\{|env  |ppo:|a2c:|reinforce:)' "$OUT/presets.log" | grep -E '^\[[a-z0-9]+\] '
  } | tee "$OUT/final.txt"
  exit 0
fi
# ---- end of the bf16 presets block ----

cd "$WORK" || exit 1  # Python from outside the checkout: its envs/ and train/ are not the package

# Speed, ours beside PureJaxRL in the same run: Breakout x256 at float32, with value_in_rollout
# (the -vr row: no next_obs buffer, a critic pass per rollout step) and at bfloat16; CartPole x2048
# with and without value_in_rollout. Each row is a fresh process; ours, PureJaxRL's, then ours -vr.
step speed-breakout 170 60 bench.log "${BENCH[@]}" --rows "breakout-$BA,breakout-$BA-vr,breakout-$BA-bf16" \
  --total-timesteps "$T_BREAKOUT" --timeout $((140 * SCALE)) --peer-timeout $((120 * SCALE))
step speed-cartpole 110 40 bench.log "${BENCH[@]}" --rows "cartpole-$CA,cartpole-$CA-vr" \
  --total-timesteps "$T_CARTPOLE" --timeout $((80 * SCALE)) --peer-timeout $((70 * SCALE))

# Capacity at the run's real length: Breakout agents doubling from $CAP_START, each side's program
# compiled (not run) at $CAP_LENGTH steps per agent until XLA's memory analysis passes the device's
# memory, then the largest fit per side trained $T_CAPACITY steps for its steps/s; the -vr row is
# ours with value_in_rollout (PureJaxRL's side runs once, with the plain row).
step capacity 220 60 capacity.log "${BENCH[@]}" --rows capacity-breakout,capacity-breakout-vr \
  --capacity-start "$CAP_START" --capacity-max "$CAP_MAX" --capacity-length "$CAP_LENGTH" "${CAP_MEMORY[@]}" \
  --total-timesteps "$T_CAPACITY" --timeout $((150 * SCALE)) --peer-timeout $((120 * SCALE))

# Where the device time goes, per phase (a jax.profiler trace of $UPDATES updates of each).
step profile 100 50 profile.log "${BENCH[@]:0:4}" $SMOKE --profile "breakout-$BA,cartpole-$CA" \
  --profile-updates "$UPDATES"

# XLA's cost analysis of one update per env step on the device (flops, bytes accessed, by phase:
# rollout / targets / learn), beside the CPU's in docs/gpu.md's "Less work per sample"; into
# profile.log (the machine returns at most 8 files).
COST_ROWS=cartpole,breakout
[ -n "$SMOKE" ] && COST_ROWS=cartpole
step cost 70 40 profile.log "$PY" -m fusedrl.bench.cost --rows "$COST_ROWS" --agents 2

# The tests of the program an accelerator runs (they run from the checkout, fusedrl from the wheel);
# they passed on the H200 twice (docs/gpu.md), so they come last, when the budget allows.
cd "$ROOT" || exit 1
step tests 100 60 tests.log env XLA_PYTHON_CLIENT_PREALLOCATE=false "$PY" -m pytest -p no:cacheprovider \
  -o addopts="--import-mode=importlib" -q -x "$ROOT/tests/test_accelerator_path.py"

{
  echo
  echo "== summary ($(elapsed)s of the ${BUDGET}s budget; logs in $OUT)"
  cat "$SUMMARY"
  echo
  grep -h -E "^(breakout|cartpole|capacity)[^ ]* +(fusedrl|purejaxrl) " "$OUT/bench.log" "$OUT/capacity.log" \
    2>/dev/null
  echo
  grep -h -E ": fusedrl/PureJaxRL|bfloat16/float32|value_in_rollout on/off|XLA's memory analysis|device time per phase|of 'other'|GROWS|^capacity-[^ ]+[,:] " \
    "$OUT/profile.log" "$OUT/bench.log" "$OUT/capacity.log" 2>/dev/null
  grep -h -E "^# jax .*compute_dtype|^(cartpole|breakout) +[0-9]+ +[0-9]+ +flops" "$OUT/profile.log" 2>/dev/null
} | tee "$OUT/final.txt"
