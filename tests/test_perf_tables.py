"""benchmarks/perf.py's bookkeeping: ABBA order, medians and speedups, and tables at every stage.

The benchmark itself is not a test (it times real runs); these check the arithmetic and
that a partly measured state (the benchmark saves after every cell) always renders.
"""

from __future__ import annotations

import json
import logging
import statistics

import pytest
import torch

from benchmarks import perf
from benchmarks.perf_files import perf_file_name


def _cell(head: str, seed: int, wall: float, build: float = 0.0, acc: float = 0.7) -> dict:
    return {
        "head": head,
        "seed": seed,
        "wall_s": wall,
        "dev_accuracy": {"final": acc, "best": acc},
        "cache": {"build_s": build},
        "throughput": {"train_loop_s": wall / 2},
    }


def _grid(n_unc: int, n_fp16: int, n_fp32: int) -> dict:
    cells = perf._grid_cells(32)
    walls = {"linear": 80.0, "pooler": 80.0, "last4_concat": 81.0, "bilstm": 110.0}
    cached = {"linear": 5.0, "pooler": 5.0, "last4_concat": 6.0, "bilstm": 40.0}
    grid = {
        "settings": {
            "encoder": "minilm",
            "task": "sst2",
            "train_size": 2000,
            "epochs": 3,
            "max_length": 128,
            "batch_size": 32,
        },
        "threads": 1,
        "uncached": [_cell(h, s, walls[h]) for h, s in cells[:n_unc]],
    }
    for path, n in (("cached", n_fp16), ("cached_fp32", n_fp32)):
        grid[path] = [
            _cell(
                h,
                s,
                cached[h] + (30.0 if s == 1 and h in ("linear", "last4_concat") else 0),
                build=30.0 if s == 1 and h in ("linear", "last4_concat") else 0.0,
            )
            for h, s in cells[:n]
        ]
    return grid


def test_abba_order():
    assert perf._finetune_order(2, ["headbench", "hf_trainer"]) == [
        "headbench",
        "hf_trainer",
        "hf_trainer",
        "headbench",
    ]
    assert perf._finetune_order(3, ["hf_trainer", "headbench"])[:4] == [
        "hf_trainer",
        "headbench",
        "headbench",
        "hf_trainer",
    ]
    assert perf._finetune_order(2, ["headbench", "hf_trainer", "hf_trainer_tuned"]) == [
        "headbench",
        "hf_trainer",
        "hf_trainer_tuned",
        "hf_trainer_tuned",
        "hf_trainer",
        "headbench",
    ]


@pytest.mark.parametrize(
    "text", ["headbench", "headbench,hf_trainer,hf_trainer", "headbench,hf_trainer,xla"]
)
def test_the_frameworks_option_names_the_valid_sides(text):
    with pytest.raises(SystemExit):
        perf._parser().parse_args(["--ft-frameworks", text])
    parsed = perf._parser().parse_args(["--ft-frameworks", "hf_trainer_tuned,hf_trainer,headbench"])
    assert parsed.ft_frameworks == ["hf_trainer_tuned", "hf_trainer", "headbench"]


@pytest.mark.parametrize("counts", [(0, 0, 0), (3, 0, 0), (32, 0, 0), (32, 32, 5), (32, 32, 32)])
def test_table_renders_partial_grids(counts):
    """Every state the benchmark saves renders (a partial state once crashed the table)."""
    text = perf.table({"grid": _grid(*counts)})
    complete = min(counts)
    assert ("| 12 |" in text) == (complete >= 12)
    assert ("Per head" in text) == (complete >= 12)


def test_grid_sizes_and_heads_arithmetic():
    grid = _grid(32, 32, 32)
    rows = {r["cells"]: r for r in perf.grid_sizes(grid)}
    assert sorted(rows) == [4, 8, 12, 16, 32]
    unc12 = 3 * (80 + 80 + 81 + 110)
    cac12 = 3 * (5 + 5 + 6 + 40) + 60  # two encoder passes paid by seed 1
    assert rows[12]["uncached_s"] == pytest.approx(unc12)
    assert rows[12]["cached_fp32_s"] == pytest.approx(cac12)
    assert rows[12]["cached_fp32_ratio"] == pytest.approx(unc12 / cac12)
    assert rows[12]["cached_fp32_encoder_s"] == pytest.approx(60)
    heads = {h["head"]: h for h in perf.grid_heads(grid)}
    assert heads["bilstm"]["ratio"] == pytest.approx(330 / 120)
    assert heads["linear"]["cached_encoder_s"] == pytest.approx(30)


def _run(framework: str, ex_per_s: float, acc: float, first: float | None = None) -> dict:
    seconds = 100.0
    tp = {
        "examples_per_s": ex_per_s,
        "train_loop_s": seconds,
        "examples": ex_per_s * seconds,
        "train_loop_cpu_s": 0.5 * seconds,  # half the wall time: waiting for a core
        "tokens": 700,
        "padded_tokens": 1000,
        "padded_tokens_sq": 40000,
    }
    if first is not None:  # a headbench run since the timer split its first batch off
        tp["first_batch_s"] = first
        tp["examples_per_s_after_first"] = tp["examples"] / (seconds - first)
    return {
        "framework": framework,
        "throughput": tp,
        "dev_accuracy": {"final": acc},
        "flops": {"flop_per_s": 2e9 * ex_per_s, "formula": "f"},
    }


def _ft_settings(ft_epochs: int) -> dict:
    """The fine-tuning part's settings record, as ``run_finetune`` writes it."""
    return {
        "encoder": "minilm",
        "task": "sst2",
        "ft_train_size": 2000,
        "ft_epochs": ft_epochs,
        "max_length": 128,
        "batch_size": 32,
        "threads": 1,
        "fresh_process_per_run": True,
    }


def test_finetune_summary_medians_and_table():
    runs = [
        _run("headbench", 40, 0.77),
        _run("hf_trainer", 44, 0.76),
        _run("hf_trainer", 42, 0.76),
        _run("headbench", 46, 0.77),
        _run("headbench", 41, 0.77),
        _run("hf_trainer", 43, 0.76),
    ]
    settings = _ft_settings(ft_epochs=3)
    part = {"runs": runs, "order": [r["framework"] for r in runs], "settings": settings}
    summary = perf.finetune_summary(part)
    assert summary["headbench"]["examples_per_s"] == statistics.median([40, 46, 41])
    assert summary["speedup"] == pytest.approx(41 / 43)
    assert summary["headbench"]["examples_per_cpu_s"] == statistics.median([80, 92, 82])
    assert summary["speedup_cpu"] == pytest.approx(82 / 86)
    assert summary["dev_accuracy_gap_points"] == pytest.approx(1.0)
    part["summary"] = summary
    flops = {
        "threads": 1,
        "matmul_n": 2048,
        "repeats": 3,
        "peak_flop_per_s": {"fp32": 1e11, "bf16": 2e11},
        "headbench_fraction_of_fp32_peak": 0.82,
        "hf_trainer_fraction_of_fp32_peak": 0.86,
    }
    text = perf.table({"finetune": part, "flops": flops})
    assert "**41.0** (0.95x vs hf) (40.0, 46.0, 41.0)" in text and "**82%**" in text
    assert "**82.0** (0.95x vs hf) (80.0, 92.0, 82.0)" in text  # per CPU second
    assert "3 runs each, each in a fresh process, in the order hb hf hf hb hb hf" in text
    for run in runs:  # runs saved before CPU time was recorded: no CPU row
        del run["throughput"]["train_loop_cpu_s"]
    assert "speedup_cpu" not in perf.finetune_summary(part)
    assert perf.finetune_summary({"runs": runs[:1]}) == {}  # one framework only: no ratio


def test_a_compiled_side_shows_its_first_batch_apart():
    """Compiling lands in the first batch: the table gives it and the speed after it."""
    runs = [
        _run("headbench", 40, 0.77, first=0.5),
        _run("headbench_graphs", 30, 0.77, first=40.0),
        _run("hf_trainer", 44, 0.76),
    ]
    settings = _ft_settings(ft_epochs=1)
    part = {"runs": runs, "order": [r["framework"] for r in runs], "settings": settings}
    summary = perf.finetune_summary(part)
    assert summary["headbench_graphs"]["first_batch_s"] == 40.0
    assert summary["headbench_graphs"]["examples_per_s_after_first"] == pytest.approx(3000 / 60)
    assert "first_batch_s" not in summary["hf_trainer"]
    part["summary"] = summary
    text = perf.table({"finetune": part})
    header = next(line for line in text.splitlines() if line.startswith("| measurement"))
    assert "CUDA graphs" in header
    assert "| 0.5 s / 40.2 | 40.0 s / 50.0 | - |" in text
    for run in runs:  # runs saved before the timer split the first batch off: no such row
        run["throughput"].pop("first_batch_s", None)
    part["summary"] = perf.finetune_summary(part)
    assert "first training batch" not in perf.table({"finetune": part})


def test_five_sides_with_faults_and_memory():
    speeds = {
        "headbench": [50, 52, 51],
        "headbench_hf_sampler": [47, 48, 49],
        "headbench_step_sync": [45, 46, 44],
        "hf_trainer": [48, 49, 47],
        "hf_trainer_tuned": [51, 53, 50],
    }
    order = perf._finetune_order(3, list(speeds))
    runs, seen = [], dict.fromkeys(speeds, 0)
    for name in order:
        run = _run(name, speeds[name][seen[name]], 0.8)
        run.update(
            minor_faults=(1e4 if name == "hf_trainer" else 1e3) * (1 + seen[name]),
            peak_rss_mb=900.0 + seen[name],
        )
        run["throughput"]["train_loop_minor_faults"] = run["minor_faults"] - 500
        seen[name] += 1
        runs.append(run)
    settings = _ft_settings(ft_epochs=3)
    part = {"runs": runs, "order": order, "settings": settings}
    summary = perf.finetune_summary(part)
    assert summary["speedup"] == pytest.approx(51 / 48)
    ratios = summary["ratios"]
    assert ratios["headbench"]["hf_trainer_tuned"]["examples_per_s"] == pytest.approx(51 / 51)
    assert ratios["headbench_hf_sampler"]["hf_trainer"]["examples_per_s"] == pytest.approx(1.0)
    assert summary["hf_trainer"]["minor_faults"] == 2e4
    assert summary["hf_trainer_tuned"]["peak_rss_mb"] == 901.0
    part["summary"] = summary
    flops = {
        "threads": 1,
        "matmul_n": 2048,
        "repeats": 3,
        "peak_flop_per_s": {"fp32": 1e11, "bf16": 2e11},
        "headbench_fraction_of_fp32_peak": 0.82,
        "hf_trainer_fraction_of_fp32_peak": 0.86,
    }  # measured before the third side
    text = perf.table({"finetune": part, "flops": flops})
    header = next(line for line in text.splitlines() if line.startswith("| measurement"))
    assert header.count("|") == 7 and "headbench's allocator setting" in header
    assert "the Trainer's length grouping" in header and "the loss read every step" in header
    assert "**45.0** (0.94x vs hf; 0.88x vs hf+malloc) (45.0, 46.0, 44.0)" in text
    assert "**51.0** (1.06x vs hf; 1.00x vs hf+malloc) (50.0, 52.0, 51.0)" in text
    assert "**48.0** (1.00x vs hf; 0.94x vs hf+malloc) (47.0, 48.0, 49.0)" in text
    assert "| 2 k / 901 MB | 2 k / 901 MB | 2 k / 901 MB | 20 k / 901 MB | 2 k / 901 MB |" in text
    assert "training loop | 2 k | 2 k | 2 k | 20 k | 2 k |" in text  # 1500 rounds to 2 k
    assert (
        "in the order hb hb/hf-sampler hb/step-sync hf hf+malloc hf+malloc hf hb/step-sync "
        "hb/hf-sampler hb hb hb/hf-sampler hb/step-sync hf hf+malloc"
    ) in text
    assert "| 102.0 G |" in text  # no fraction recorded for the third side: FLOP/s only


def test_the_tables_in_docs_are_what_the_committed_measurements_print():
    """docs/performance.md quotes `--parts table` on results/perf_cpu.json, unedited."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    state = json.loads((root / "results" / "perf_cpu.json").read_text())
    assert state["machine"]["device"]["kind"] == "cpu"  # GPU figures live in perf_gpu.json
    doc = (root / "docs" / "performance.md").read_text()
    block = re.search(
        r"<!-- perf-tables:start[^\n]*-->\n(.*?)\n<!-- perf-tables:end -->", doc, re.S
    )
    assert block is not None
    assert block.group(1).strip() == perf.table(state).strip()


def test_a_file_from_another_device_is_never_resumed(tmp_path):
    """GPU and CPU figures never meet in one ratio: a CPU file refuses a GPU run."""
    cpu_state = {"machine": {"cpus": 2}}  # before devices were recorded: this project's CPUs
    gpu = {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3"}
    with pytest.raises(SystemExit, match=r"measured on cpu, this run is on NVIDIA H100.*--out"):
        perf.check_same_device(cpu_state, gpu, tmp_path / "perf.json")
    perf.check_same_device(cpu_state, {"kind": "cpu"}, tmp_path / "perf.json")
    perf.check_same_device({}, gpu, tmp_path / "perf_gpu.json")  # a new file: any device
    gpu_state = {"machine": {"device": gpu}}
    perf.check_same_device(gpu_state, dict(gpu), tmp_path / "perf_gpu.json")
    with pytest.raises(SystemExit, match="never mixed"):
        perf.check_same_device(gpu_state, {"kind": "cuda", "name": "NVIDIA H200"}, tmp_path)


def test_the_device_record_names_the_device_both_sides_use():
    record = perf.device_record()
    assert record["kind"] == ("cuda" if torch.cuda.is_available() else "cpu")


def _lockstep(cells: int, alone: float, together: float, one: float, rate: float) -> dict:
    return {
        "settings": {
            "encoder": "minilm",
            "task": "sst2",
            "train_size": 2000,
            "epochs": 3,
            "max_length": 128,
            "batch_size": 32,
            "heads": ["linear", "bilstm"],
            "cells": cells,
            "threads": 1,
        },
        "groups": [cells],
        "alone_s": alone,
        "lockstep_s": together,
        "ratio": alone / together,
        "one_cell_wall_s": one,
        "one_cell_examples_per_s": 9000.0,
        "lockstep_head_examples_per_s": rate,
        "cells_differing": 0,
        "cells_trained_alone": 0,
    }


def test_targets_on_a_cpu_follow_the_measurements():
    grid = _grid(12, 12, 12)
    unc = sum(c["wall_s"] for c in grid["uncached"][:12])
    cac = sum(c["wall_s"] for c in grid["cached_fp32"][:12])
    assert unc / cac < 8  # the fixture's grid misses the CPU goal
    state = {
        "machine": {"device": {"kind": "cpu"}},
        "grid": grid,
        "finetune": {"summary": {"speedup": 1.07, "dev_accuracy_gap_points": 0.4}},
        "flops": {
            "peak_flop_per_s": {"fp32": 1e11, "bf16": 2e11},
            "headbench_fraction_of_fp32_peak": 0.62,
        },
        "lockstep": _lockstep(100, 400.0, 100.0, 2.0, 50_000.0),
    }
    lines = perf.targets(state)
    text = "\n".join(lines)
    assert lines[1] == "Against the targets on this CPU:"
    assert f"{unc / cac:.1f}x faster, goal >= 8x: not met" in text
    assert "1.07x at dev accuracy 0.4 points apart, goal >= 1.0x within 1.0 points: met" in text
    assert "62% of the measured fp32 matmul peak, goal >= 50%: met" in text
    assert "50,000 head-examples/s, the H100 goal (issue #22; not a CPU target) >=" in text
    assert "cells' wall = 50.0x one cell's" in text  # 100 s / 2 s; no verdict on a CPU
    assert ": met" not in text.split("lock-step")[-1]
    state["finetune"]["summary"]["dev_accuracy_gap_points"] = 1.2  # faster, but not as good
    assert "within 1.0 points: not met" in "\n".join(perf.targets(state))
    assert perf.targets({}) == []


def test_targets_on_a_gpu_are_issue_22s():
    cells = [
        {"head": h, "throughput": {"examples_per_s": v}}
        for h, v in [("linear", 30_000.0), ("pooler", 18_000.0), ("last4_concat", 25_000.0)]
    ] + [{"head": "bilstm", "throughput": {"examples_per_s": 100.0}}]
    state = {
        "machine": {"device": {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3"}},
        "grid": {"cached_fp32": cells},
        "finetune": {"summary": {"speedup": 1.6, "dev_accuracy_gap_points": 0.6}},
        "lockstep": _lockstep(100, 300.0, 5.0, 2.0, 2_000_000.0),
    }
    text = "\n".join(perf.targets(state))
    assert "Against the targets on this GPU:" in text
    assert "(cached, float32; median of 3): 25,000 examples/s, goal >= 20,000: met" in text
    assert "1.60x at dev accuracy 0.6 points apart, goal >= 1.5x within 0.5 points: not met" in text
    assert "2,000,000 head-examples/s, goal >= 1,000,000: met" in text
    assert "cells' wall = 2.5x one cell's, goal <= 3x: met" in text
    assert "matmul peak" not in text  # the FLOP/s goal is the CPU's
    groups = [
        {"cells": 80, "heads": ["bilstm", "linear"], "wall_s": 90.0, "head_examples_per_s": 4e5},
        {"cells": 20, "heads": ["last4_concat"], "wall_s": 3.0, "head_examples_per_s": 1.2e6},
    ]
    state["lockstep"].update(
        group_details=groups,
        alone_by_head={"linear": {"cells": 20, "wall_s": 30.0, "median_wall_s": 1.5}},
    )
    text = "\n".join(perf.targets(state))
    assert "best group (20 cells: last4_concat): 1,200,000 head-examples/s, goal" in text
    table = perf.table({"lockstep": state["lockstep"]})
    assert "| lock-step group of 80 (bilstm, linear) | 90.0 s; 400,000 head-examples/s" in table
    assert "| one after another: the linear cells (20) | 30.0 s (median 1.5 s a cell) |" in table


def test_packed_table_renders():
    part = {
        "settings": {
            "encoder": "minilm",
            "task": "sst2",
            "ft_train_size": 2000,
            "ft_epochs": 3,
            "batch_size": 32,
            "max_length": 128,
            "threads_alone": 2,
            "threads_packed": 1,
            "seeds": [1, 2],
        },
        "plan": {
            "cells": 2,
            "limited_by": ["cores (--threads)"],
            "estimate_gib": 1.25,
            "available_gib": 31.4,
            "headroom": 0.9,
        },
        "alone_s": 80.0,
        "packed_s": 64.0,
        "ratio": 1.25,
        "dev_accuracy_alone": [0.811, 0.805],
        "dev_accuracy_packed": [0.812, 0.805],
    }
    text = perf.table({"packed": part})
    assert "K = 2, limited by cores (--threads) (memory estimate 1.25 GiB a cell" in text
    assert "| the same 2 cells at once, 1 thread(s) each | 64.0 s (1.25x faster) |" in text
    assert "| 81.1, 80.5 / 81.2, 80.5 |" in text


def test_pack_count_on_a_cpu_uses_the_memory_estimate_and_the_cores():
    from bench.run.packing import estimate_cell

    args = perf._parser().parse_args(["--threads", "2", "--pack-max", "4"])
    plan = perf.pack_count(args, {"kind": "cpu"})
    estimate = estimate_cell(perf._compose(perf._finetune_overrides(args, "bucket")))
    assert plan["estimate_gib"] == pytest.approx(estimate.total / 2**30)
    assert plan["cells"] == 2 and plan["limited_by"] == ["cores (--threads)"]
    one = perf.pack_count(perf._parser().parse_args(["--threads", "8", "--pack-max", "1"]), {})
    assert one["cells"] == 1 and one["limited_by"] == ["--pack-max"]


def test_the_output_file_names_the_device_and_a_reprint_writes_nothing(tmp_path, capsys):
    assert perf._parser().parse_args([]).out is None  # main() names it from the device
    assert perf.default_out({"kind": "cuda", "name": "NVIDIA H100 80GB HBM3"}).name == (
        "perf_gpu_h100.json"
    )
    assert perf_file_name({"kind": "cuda", "name": "NVIDIA H200"}) == "perf_gpu_h200.json"
    assert perf_file_name({"kind": "cuda", "name": "NVIDIA L40S"}) == "perf_gpu_l40s.json"
    assert perf_file_name({"kind": "cuda", "name": "NVIDIA GeForce RTX 4090"}) == (
        "perf_gpu_nvidia_geforce_rtx_4090.json"
    )
    assert perf.default_out({"kind": "cpu"}).name == "perf_cpu.json"
    assert perf._parser().parse_args([]).parts.split(",") == [p for p in perf.PARTS if p != "table"]
    out = tmp_path / "perf.json"
    state = {"machine": {"cpus": 64, "device": {"kind": "cpu"}}, "packed": {}}
    out.write_text(json.dumps(state))
    levels = {n: logging.getLogger(n).level for n in ("bench", "lightning", "transformers")}
    perf.main(["--parts", "table", "--out", str(out)])
    assert json.loads(out.read_text()) == state  # the measuring machine is kept
    # a reprint leaves the process's logging alone (it once hid headbench's warnings)
    assert {n: logging.getLogger(n).level for n in levels} == levels
    with pytest.raises(SystemExit, match="unknown part 'tables'; valid: grid, finetune"):
        perf.main(["--parts", "tables", "--out", str(out)])


def test_quieting_a_benchmark_keeps_headbench_warnings():
    """The benchmark silences third-party chatter but never headbench's own warnings."""
    bench_logger = logging.getLogger("bench")
    before = bench_logger.level
    try:
        perf._quiet()
        assert bench_logger.isEnabledFor(logging.WARNING)
        assert not logging.getLogger("lightning").isEnabledFor(logging.WARNING)
    finally:
        bench_logger.setLevel(before)


def test_the_gpu_tables_in_docs_are_what_the_committed_gpu_measurements_print():
    """docs/performance.md quotes `--parts table` on each results/perf_gpu_<model>.json."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    doc = (root / "docs" / "performance.md").read_text()
    files = sorted((root / "results").glob("perf_gpu_*.json"))
    assert [f.name for f in files] == ["perf_gpu_h100.json", "perf_gpu_h200.json"]
    for path in files:
        state = json.loads(path.read_text())
        device = state["machine"]["device"]
        assert device["kind"] == "cuda"  # CPU figures live in perf_cpu.json
        assert perf_file_name(device) == path.name  # one GPU model per file
        assert "flops" not in state or state["flops"].get("device") == "cuda"  # peak on the GPU
        block = re.search(
            rf"<!-- perf-gpu-tables:start results/{re.escape(path.name)} [^\n]*-->\n(.*?)\n"
            r"<!-- perf-gpu-tables:end -->",
            doc,
            re.S,
        )
        assert block is not None, path.name
        assert block.group(1).strip() == perf.table(state).strip(), path.name


def test_a_part_saved_with_other_settings_is_kept_aside_not_dropped(capsys):
    machine = {"device": {"kind": "cuda", "name": "NVIDIA H200"}}
    old = {"settings": {"frameworks": ["headbench", "hf_trainer"]}, "runs": [{"x": 1}]}
    state = {
        "machine": machine,
        "finetune": old,
        "part_git": {"finetune": {"commit": "abc"}},
        "part_machine": {"finetune": {"device": {"kind": "cuda", "name": "NVIDIA H200 old"}}},
    }
    same = perf.settle_part(state, "finetune", {"frameworks": ["headbench", "hf_trainer"]})
    assert same is old and "superseded" not in state  # resumed as it is
    assert state["part_git"]["finetune"] == perf.git_commit()  # this run's code from now on
    state["part_git"]["finetune"] = {"commit": "abc"}  # as a file from an older run has them
    state["part_machine"]["finetune"] = {"device": {"kind": "cuda", "name": "NVIDIA H200 old"}}
    fresh = perf.settle_part(state, "finetune", {"frameworks": ["headbench"]})
    assert fresh == {"settings": {"frameworks": ["headbench"]}} and state["finetune"] is fresh
    (aside,) = state["superseded"]["finetune"]
    assert aside["part"] is old and aside["part_git"] == {"commit": "abc"}
    assert aside["part_machine"]["device"]["name"] == "NVIDIA H200 old"
    assert state["part_machine"]["finetune"] is machine
    assert "kept under superseded.finetune" in capsys.readouterr().out
    assert perf._superseded_line(state)[-1] == (
        "Kept in the file under `superseded`, measured with other settings than the parts "
        "above: finetune (1 earlier, at commit abc)."
    )
    assert perf.measured(state, "lockstep") == {}
    state["lockstep"] = {"settings": {"cells": 20}}  # settled, not measured yet
    assert perf.measured(state, "lockstep") == {}
    state["lockstep"]["ratio"] = 2.0
    assert perf.measured(state, "lockstep") is state["lockstep"]


def test_flops_measured_with_the_same_settings_only_recompute_the_fractions():
    args = perf._parser().parse_args(["--threads", "1", "--matmul-n", "64"])
    settings = {
        "device": "cpu",
        "threads": 1,
        "matmul_n": 64,
        "repeats": 3,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }
    peak = {"fp32": 4e9, "bf16": 8e9}  # not what this machine measures: kept as saved
    state = {
        "machine": {"device": {"kind": "cpu"}},
        "flops": {"settings": settings, **settings, "peak_flop_per_s": dict(peak)},
        "finetune": {"summary": {"headbench": {"flop_per_s": 1e9}}},
    }
    perf.run_flops(args, state, lambda: None)
    assert state["flops"]["peak_flop_per_s"] == peak
    assert state["flops"]["headbench_fraction_of_fp32_peak"] == pytest.approx(0.25)
    assert state["flops"]["headbench_fraction_of_bf16_peak"] == pytest.approx(0.125)
