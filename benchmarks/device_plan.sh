#!/usr/bin/env bash
# One device call that spends a short lease on every GPU job of issue #22, in order of value,
# each step with a time box so that a slow or failing step never starves the next:
#
#   bash benchmarks/device_plan.sh [TOTAL_S]     # default 500; a lease: 565 with timeout_s=595
#
# 1. check (not in the default PLAN_STEPS: the first lease showed the image's versions and
#    that MiniLM loads as float32): GPU, package versions there vs here, the plan (dry run);
# 2. tests: the GPU-only tests not yet run on a GPU (a fine-tuning step reads nothing back
#    from the GPU, its batches come pinned) and lock-step against each cell alone on CUDA;
# 3. bench: fair_heads_gpu, part after part (BENCH_ARGS, parts separated by `::`), resumed
#    from the carried run directories: fine-tuning (every frozen cell is done), packed 4 to
#    the GPU, on the small tasks, then on SST-2, as CUDA graphs (the preset pins the choice
#    benchmarks/compile_choice.py made from the H100's finetune figures); BENCH_BOX seconds;
# 4. perf: benchmarks/perf.py's parts at lease-sized settings (see PERF_ARGS) with the rest
#    of the time, into $OUT/perf_gpu.json, resumed from the carried figures of the machine's
#    GPU model (benchmarks/perf_files.py; a part measured with the same settings is skipped).
#    First the two parts of issue #22's list that no lease has finished on any GPU: the
#    frozen grid (cached against uncached cells, resumed cell by cell) and packing (K cells
#    at once against the same K one after another). Then the anatomy of a step (operators,
#    kernels, GPU busy time and where the host waits, bf16 too; eager headbench against the
#    Trainer first: a side saved before batches were pinned is measured again; then CUDA
#    graphs in float32 and with TF32 matmuls, trainer.matmul_precision=high), lock-step
#    (the stacked step), FLOP/s, and fine-tuning end to end (eager, CUDA graphs and compiled
#    headbench, then the Trainer; an H100 has it, an H200 would start it afresh).
#
# Every step goes through benchmarks/device_run.sh (its own deadline: HB_DEADLINE_S), so each
# step's files come back even when it is cut. The whole output is also in $OUT/plan.log.
# Environment: PLAN_STEPS (default "tests bench perf"), PERF_ARGS, BENCH_ARGS, BENCH_BOX (the
# bench step's time box, default 360 s), PERF_BOX (the perf step's, default 300 s).
set -u
total=${1:-500}
out=${OUT:-.device/out}
mkdir -p "$out"
steps=${PLAN_STEPS:-tests bench perf}
perf_args=${PERF_ARGS:---parts grid,packed,steps,lockstep,flops,finetune \
--steps-sides headbench,hf_trainer,headbench_graphs,headbench_graphs_tf32,headbench_compile,headbench_bf16 \
--ft-frameworks headbench,headbench_graphs,headbench_compile,hf_trainer --ft-repeats 1 \
--ft-train-size 16000 --ft-epochs 1 --lockstep-cells 20 --pack-max 2 --grid-cells 4}
bench_args=${BENCH_ARGS:-freeze=full task=rte,mrpc,stsb,cola hydra/launcher=gpu_pack \
runtime.cells_per_gpu=4 :: freeze=full task=sst2 hydra/launcher=gpu_pack runtime.cells_per_gpu=4}
check_args=${bench_args%% ::*} # check dry-runs the first part
started=$SECONDS

# step WANT MODE ARGS...: MODE gets WANT seconds, or what is left of TOTAL when less.
step() {
  local want=$1 left give
  shift
  left=$((total - (SECONDS - started)))
  give=$((want < left ? want : left))
  if [ "$give" -lt 45 ]; then
    echo "[plan] not started, ${left}s left: $*" | tee -a "$out/plan.log"
    return
  fi
  echo "[plan] $* (at most ${give}s; ${left}s left in all)" | tee -a "$out/plan.log"
  HB_DEADLINE_S=$give bash benchmarks/device_run.sh "$@" >>"$out/plan.log" 2>&1
  echo "[plan] exit $? after $((SECONDS - started))s: $1" | tee -a "$out/plan.log"
}

for s in $steps; do
  case $s in
  # shellcheck disable=SC2086
  check) step 75 check $check_args ;;
  tests)
    step 100 tests \
      tests/test_step_anatomy.py::test_on_a_gpu_headbench_steps_read_nothing_back \
      tests/test_pinning.py::test_a_gpu_trainers_batches_come_pinned \
      tests/test_lockstep.py::test_on_a_gpu_lockstep_agrees_with_each_cell_alone
    ;;
  # shellcheck disable=SC2086  # the argument lists split on purpose
  perf) step "${PERF_BOX:-300}" perf $perf_args ;;
  # shellcheck disable=SC2086
  bench) step "${BENCH_BOX:-360}" bench $bench_args ;;
  *) echo "[plan] unknown step $s (valid: check tests perf bench)" | tee -a "$out/plan.log" ;;
  esac
done
tail -n 60 "$out/plan.log"
