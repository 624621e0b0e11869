"""Performance benchmark: ``python benchmarks/perf.py`` prints tables, writes results/perf_cpu.json.

On a GPU it writes ``results/perf_gpu_<model>.json`` instead (``benchmarks/perf_files.py``):
both sides of every comparison run on the same device, and a file measured on one device is
never resumed on another.

Everything is measured side by side in one run on this machine (nothing is extrapolated):

1. ``grid``: frozen cells (4 heads x seeds, minilm, SST-2 subset) uncached vs cached —
   wall time, ratio and scores. The cells run seed-major (seed 1: four heads, seed 2: four
   heads, ...) and the cumulative wall time after 4, 8, 12, 16, 32 cells is recorded, so
   the first 12 cells are the issue's 4 heads x 3 seeds grid and the prefixes are the
   growth grids (part 4). The cached path starts from an empty cache directory.
2. ``finetune``: one full fine-tuning cell (linear head) with headbench vs the Hugging Face
   ``Trainer`` on the same model (same encoder + head module), batch size, max length,
   learning rate schedule, epochs and padding policy (dynamic padding, length-grouped
   batches); training examples/s (validation excluded), examples per CPU second (the
   process's CPU time over the same span: not inflated by waiting for a shared core),
   page faults, peak memory and the dev accuracies. Each side runs as it ships; a third
   side, the Trainer in a process given headbench's allocator setting
   (``runtime.malloc=tuned``, :mod:`bench.run.allocator`), shows what that setting is worth on
   its own. They alternate in ABBA order (``--ft-repeats`` runs each), every run in a fresh
   process, and the medians are compared.
3. ``flops``: that cell's achieved training FLOP/s (each run's own token counts) against
   the measured dense matmul peak (fp32 and bf16, best of 3) at the same thread count.
5. ``lockstep``: N frozen cells (``--lockstep-heads`` x seeds, one ``order_seed``) trained
   in lock-step groups (:mod:`bench.run.lockstep`) against the same N cells one after
   another with ``run()``, in the same process, from the same warm feature cache: the two
   walls and their ratio, one cell's training examples/s, the group's head-examples/s
   (examples x cells per second of its batch loop), and how many cells' selected epoch
   or metrics differ between the two.
6. ``packed``: K fine-tuning cells (part 2's cell, K seeds) at once, each in its own
   process, against the same K one after another: K is what the memory estimate of
   ``hydra/launcher=gpu_pack`` (:mod:`bench.run.packing`) lets fit, at most ``--pack-max``
   (on a CPU also at most the cores, the threads split between the cells).
7. ``steps``: the anatomy of part 2's fine-tuning step (:mod:`benchmarks.step_anatomy`):
   operators, kernels, GPU busy time and host syncs per optimizer step, headbench against the
   Trainer, in float32 and bf16-mixed, and headbench with its encoder compiled
   (``trainer.compile``), under ``torch.profiler``.

Every measured run is wrapped in :class:`bench.run.gpu_sampler.GpuSampler` (GPU
utilisation from ``nvidia-smi``; nothing on a CPU); each part records the commit that
measured it (``part_git``); the table ends with the figures against their targets.

Each part is saved to the output file as it finishes (uncached grid cells one by one), and
a rerun with the same settings skips what is already measured (:func:`settle_part`); a part
saved with other settings is measured afresh, the saved one kept under ``superseded``.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, cast

import torch

from bench.atomic import atomic_write_json
from bench.axes.resolvers import register as register_resolvers
from bench.paths import config_dir
from bench.run.gpu_sampler import GpuSampler
from bench.run.provenance import git_commit, hardware
from bench.run.timing import BATCH_COUNTS, count_batch, minor_faults
from benchmarks.perf_files import perf_file_name
from benchmarks.step_anatomy import (
    GRAPHS_OVERRIDES,
    STEP_SIDES,
    TF32_OVERRIDES,
    batches_pinned,
    recorded_pinned,
    run_steps,
    steps_table,
)

ROOT = Path(__file__).resolve().parents[1]
HEADS = ("linear", "pooler", "last4_concat", "bilstm")
GRID_MARKS = (4, 8, 12, 16, 32)
#: Fine-tuning sides: headbench's fast path (bucketed batches, ``data.group_by_length=bucket``),
#: headbench with the Trainer's own length grouping (the same batches' statistics), the HF
#: Trainer as it ships, and the Trainer in a process given headbench's allocator setting
#: (``runtime.malloc=tuned``). The headbench sides run with its defaults otherwise, but for
#: ``headbench_step_sync``: the fast path reading its loss back every step, as before
#: ``runtime.loss_check_steps`` (what not waiting for the GPU each step is worth), and
#: ``headbench_compile``: its encoder compiled (``trainer.compile=default``; the compilation
#: is inside the timed training loop, as a user pays it), and ``headbench_graphs``: compiled
#: and replayed as CUDA graphs (``trainer.compile=reduce-overhead``), one per batch shape,
#: its batches padded to a multiple of 8 tokens (``data.pad_to_multiple_of=8``) so that
#: there are few shapes to record (on a CPU there are no graphs: it compiles as
#: ``headbench_compile`` does), and ``headbench_graphs_tf32``: the same with float32 matrix
#: products on TensorFloat32 tensor cores (``trainer.matmul_precision=high``).
FRAMEWORKS = (
    "headbench",
    "headbench_hf_sampler",
    "headbench_step_sync",
    "headbench_compile",
    "headbench_graphs",
    "headbench_graphs_tf32",
    "hf_trainer",
    "hf_trainer_tuned",
)
#: The headbench sides and their ``data.group_by_length``; the others are the Trainer's.
_GROUPING = {
    "headbench": "bucket",
    "headbench_hf_sampler": "true",
    "headbench_step_sync": "bucket",
    "headbench_compile": "bucket",
    "headbench_graphs": "bucket",
    "headbench_graphs_tf32": "bucket",
}
#: Overrides a headbench side adds to the fine-tuning cell's.
_SIDE_OVERRIDES = {
    "headbench_step_sync": ["runtime.loss_check_steps=1"],
    "headbench_compile": ["trainer.compile=default"],  # compiling is inside the timed loop
    "headbench_graphs": list(GRAPHS_OVERRIDES),
    "headbench_graphs_tf32": list(TF32_OVERRIDES),
}
HEADBENCH_SIDES = tuple(_GROUPING)
HF_SIDES = tuple(n for n in FRAMEWORKS if n not in _GROUPING)
_SHORT = {
    "headbench": "hb",
    "headbench_hf_sampler": "hb/hf-sampler",
    "headbench_step_sync": "hb/step-sync",
    "headbench_compile": "hb/compile",
    "headbench_graphs": "hb/graphs",
    "headbench_graphs_tf32": "hb/graphs+tf32",
    "hf_trainer": "hf",
    "hf_trainer_tuned": "hf+malloc",
}
#: Every benchmark cell scores dev after each epoch, as the HF Trainer side does, so both
#: sides train on the same examples and report the same split (speed, not the protocol:
#: the reference experiments select on a slice carved from train).
SPEED_ONLY = ("selection=dev",)
#: Grid paths and their ``cache.dtype`` (None: cache disabled).
GRID_PATHS = {"uncached": None, "cached": "float16", "cached_fp32": "float32"}


def _compose(overrides: list[str]) -> Any:
    from hydra import compose, initialize_config_dir

    register_resolvers()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def _quiet() -> None:
    """Silence third-party chatter; headbench's own warnings (e.g. truncation) still show."""
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "transformers"):
        logging.getLogger(name).setLevel(logging.ERROR)
    logging.getLogger("bench").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _dev_accuracy(result: dict[str, Any]) -> dict[str, float | None]:
    history = result.get("history") or [{}]
    best = (result.get("best") or {}).get("metrics", {}).get("dev", {})
    return {"final": history[-1].get("dev", {}).get("accuracy"), "best": best.get("accuracy")}


# --------------------------------------------------------------------------- lockstep


def _lockstep_overrides(args: argparse.Namespace, head: str, seed: int, cache: Path) -> list[str]:
    """The grid part's cell (length-grouped batches), with one order seed for all."""
    return [*_grid_overrides(args, head, seed, {"dir": cache}), "order_seed=1"]


def _same_cell(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return bool(
        a["status"] == b["status"] == "ok"
        and a["best"]["epoch"] == b["best"]["epoch"]
        and json.dumps(a["best"]["metrics"]) == json.dumps(b["best"]["metrics"])
    )


def settle_part(state: dict[str, Any], name: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The part ``name`` a run resumes or starts, its commit and machine recorded.

    The saved part when it was measured with ``settings``: a run goes on from what it holds.
    Otherwise a fresh part; one saved with other settings is not dropped but kept under
    ``superseded[name]`` (with the commit and the machine that measured it), and a line says
    so. ``part_git[name]`` and ``part_machine[name]`` then name this run's code and machine.

    Args:
        state: The output file's contents (``machine`` already this run's).
        name: One of :data:`PARTS`.
        settings: What the part's figures depend on.

    Returns:
        ``state[name]``.
    """
    part = state.get(name)
    if part is not None and part.get("settings") != settings:
        state.setdefault("superseded", {}).setdefault(name, []).append(
            {
                "part": part,
                "part_git": (state.get("part_git") or {}).get(name),
                "part_machine": (state.get("part_machine") or {}).get(name),
            }
        )
        print(f"[{name}] saved with other settings: kept under superseded.{name}; measured afresh")
        part = None
    if part is None:
        part = state[name] = {"settings": settings}
    state.setdefault("part_git", {})[name] = git_commit()
    state.setdefault("part_machine", {})[name] = state["machine"]
    return part


#: The key a one-shot part holds once it is measured (before, only its settings).
_RESULT_KEY = {"lockstep": "ratio", "packed": "ratio", "flops": "peak_flop_per_s"}


def measured(state: dict[str, Any], name: str) -> dict[str, Any]:
    """A one-shot part (:data:`_RESULT_KEY`) when it holds its figures, else ``{}``."""
    part = state.get(name) or {}
    return part if _RESULT_KEY[name] in part else {}


def run_lockstep(args: argparse.Namespace, state: dict[str, Any], save: Any) -> None:
    """Part 5 (#22 item 2): N frozen cells in lock-step vs N x one cell, same process."""
    from bench.run.lockstep import group_cells, train_group
    from bench.run.train import run

    heads = [h.strip() for h in args.lockstep_heads.split(",") if h.strip()]
    seeds = math.ceil(args.lockstep_cells / len(heads))
    cells = [(h, s) for s in range(1, seeds + 1) for h in heads][: args.lockstep_cells]
    settings = {
        "encoder": args.encoder,
        "task": args.task,
        "train_size": args.train_size,
        "epochs": args.epochs,
        "max_length": args.max_length,
        "batch_size": args.batch_size,
        "heads": heads,
        "cells": len(cells),
        "threads": args.grid_threads,
    }
    part = settle_part(state, "lockstep", settings)
    if measured(state, "lockstep"):
        print("[lockstep] measured with these settings: skipped")
        return
    work = Path(tempfile.mkdtemp(prefix="headbench-lockstep-"))
    torch.set_num_threads(args.grid_threads)
    cfgs = [_compose(_lockstep_overrides(args, h, s, work / "cache")) for h, s in cells]
    run(cfgs[0], work / "warm")  # fills the feature cache: both sides read it warm
    started = time.perf_counter()
    with GpuSampler() as alone_gpu:
        alone = [run(cfg, work / "alone" / str(i)) for i, cfg in enumerate(cfgs)]
    alone_s = time.perf_counter() - started
    groups, single = group_cells(cfgs)
    started = time.perf_counter()
    together: dict[int, dict[str, Any]] = {}
    group_walls = []
    with GpuSampler() as lockstep_gpu:
        for members in groups:
            dirs = [work / "lockstep" / str(i) for i in members]
            began = time.perf_counter()
            trained = train_group([cfgs[i] for i in members], dirs)
            group_walls.append(time.perf_counter() - began)
            together.update(zip(members, trained, strict=True))
        for i in single:
            together[i] = run(cfgs[i], work / "lockstep" / str(i))
    lockstep_s = time.perf_counter() - started
    loops = []
    for members, wall in zip(groups, group_walls, strict=True):
        tp = together[members[0]]["throughput"]
        loops.append(
            {
                "cells": len(members),
                "heads": sorted({cells[i][0] for i in members}),
                "wall_s": wall,
                "train_loop_s": tp["train_loop_s"],
                "examples": tp["examples"],
                "head_examples_per_s": tp["examples"] * len(members) / tp["train_loop_s"],
            }
        )
    head_examples = sum(g["examples"] * g["cells"] for g in loops)
    loop_s = sum(g["train_loop_s"] for g in loops)
    by_head: dict[str, list[float]] = {}
    for (head, _), result in zip(cells, alone, strict=True):
        by_head.setdefault(head, []).append(result["wall_time_s"])
    one = statistics.median(r["throughput"]["examples_per_s"] for r in alone if r["throughput"])
    part.update(
        {
            "groups": [len(m) for m in groups],
            "group_details": loops,
            "alone_by_head": {
                h: {"cells": len(w), "wall_s": sum(w), "median_wall_s": statistics.median(w)}
                for h, w in by_head.items()
            },
            "trained_alone": sorted(set(single.values())),
            "cells_trained_alone": len(single),
            "alone_s": alone_s,
            "lockstep_s": lockstep_s,
            "ratio": alone_s / lockstep_s,
            "one_cell_wall_s": statistics.median(r["wall_time_s"] for r in alone),
            "one_cell_examples_per_s": one,
            "lockstep_head_examples_per_s": head_examples / loop_s if loop_s else None,
            "cells_differing": sum(not _same_cell(alone[i], together[i]) for i in range(len(cfgs))),
            "gpu_utilisation": {"alone": alone_gpu.summary(), "lockstep": lockstep_gpu.summary()},
        }
    )
    save()


# --------------------------------------------------------------------------- part 1 and 4


def _grid_cells(n_cells: int) -> list[tuple[str, int]]:
    seeds = math.ceil(n_cells / len(HEADS))
    return [(head, seed) for seed in range(1, seeds + 1) for head in HEADS][:n_cells]


def _grid_overrides(
    args: argparse.Namespace, head: str, seed: int, cache: dict[str, Any]
) -> list[str]:
    return [
        f"encoder={args.encoder}",
        f"head={head}",
        "freeze=frozen",
        f"task={args.task}",
        f"seed={seed}",
        f"data.train_size={args.train_size}",
        f"data.max_length={args.max_length}",
        f"data.batch_size={args.batch_size}",
        "data.group_by_length=true",
        f"trainer.max_epochs={args.epochs}",
        "trainer.log_every_n_steps=50",
        *SPEED_ONLY,
        *[f"cache.{k}={v}" for k, v in cache.items()],
    ]


def _run_cell(overrides: list[str], run_dir: Path) -> dict[str, Any]:
    from bench.run.train import run

    started = time.perf_counter()
    with GpuSampler() as sampler:
        result = run(_compose(overrides), run_dir)
    return {
        "status": result["status"],
        "reason": result.get("reason"),
        "wall_s": time.perf_counter() - started,
        "dev_accuracy": _dev_accuracy(result),
        "cache": result.get("cache"),
        "throughput": result.get("throughput"),
        "gpu_utilisation": sampler.summary(),
    }


def run_grid(args: argparse.Namespace, state: dict[str, Any], save: Any) -> None:
    """Part 1 and 4: uncached vs cached frozen cells, cumulative wall time per grid size."""
    keys = ("encoder", "task", "train_size", "epochs", "max_length", "batch_size")
    settings = {k: getattr(args, k) for k in keys}
    grid = settle_part(state, "grid", settings)
    cells = _grid_cells(args.grid_cells)
    work = Path(tempfile.mkdtemp(prefix="headbench-perf-"))
    torch.set_num_threads(args.grid_threads)
    grid["threads"] = args.grid_threads
    for path, dtype in GRID_PATHS.items():
        done = grid.setdefault(path, [])
        if dtype is not None and len(done) < len(cells):
            done.clear()  # a cached path is timed from an empty cache in one go
        for head, seed in cells[len(done) :]:
            cache = {"enabled": dtype is not None, "dir": work / path / "cache"}
            if dtype is not None:
                cache["dtype"] = dtype
            overrides = _grid_overrides(args, head, seed, cache)
            cell = _run_cell(overrides, work / path / f"{head}-{seed}")
            cell.update(head=head, seed=seed, load_avg_1min=os.getloadavg()[0])
            done.append(cell)
            print(
                f"[grid {path}] {head} seed={seed}: {cell['wall_s']:.1f}s "
                f"dev acc {cell['dev_accuracy']['final']}",
                flush=True,
            )
            save()
    grid["sizes"] = grid_sizes(grid)
    save()


def grid_sizes(grid: dict[str, Any]) -> list[dict[str, Any]]:
    """Totals of the first 4, 8, 12, 16, 32 cells of each path (cells measured on all paths).

    ``<path>_encoder_s`` is the time spent in cache lookups and encoder passes on a miss,
    ``<path>_heads_s`` everything else (loading, head training, evaluation).
    """
    paths = list(GRID_PATHS)
    n = min(len(grid.get(p) or []) for p in paths)  # rows once every path has the cells
    rows = []
    for m in (m for m in GRID_MARKS if m <= n):
        unc = grid["uncached"][:m]
        row: dict[str, Any] = {"cells": m, "uncached_s": sum(c["wall_s"] for c in unc)}
        for path in paths[1:]:
            cac = grid[path][:m]
            total = sum(c["wall_s"] for c in cac)
            build = sum((c.get("cache") or {}).get("build_s", 0.0) for c in cac)
            diffs = [
                abs(a["dev_accuracy"]["final"] - b["dev_accuracy"]["final"])
                for a, b in zip(unc, cac, strict=True)
            ]
            row.update(
                {
                    f"{path}_s": total,
                    f"{path}_encoder_s": build,
                    f"{path}_heads_s": total - build,
                    f"{path}_ratio": row["uncached_s"] / total,
                    f"{path}_same_scores": all(
                        a["dev_accuracy"] == b["dev_accuracy"]
                        for a, b in zip(unc, cac, strict=True)
                    ),
                    f"{path}_cells_differing": sum(d > 0 for d in diffs),
                    f"{path}_max_abs_acc_diff": max(diffs),
                }
            )
        rows.append(row)
    return rows


def grid_heads(grid: dict[str, Any], cells: int = 12) -> list[dict[str, Any]]:
    """Per head over the first ``cells`` cells: uncached vs cached float32 wall time.

    The cached time is split into the encoder passes the head's cells paid for (cache
    builds) and everything else, which is what caching cannot remove: the head's own
    training and evaluation, plus per-cell setup.
    """
    unc = (grid.get("uncached") or [])[:cells]
    cac = (grid.get("cached_fp32") or [])[:cells]
    if len(unc) < cells or len(cac) < cells:
        return []
    rows = []
    for head in HEADS:
        u = [c for c in unc if c["head"] == head]
        c = [c for c in cac if c["head"] == head]
        build = sum((x.get("cache") or {}).get("build_s", 0.0) for x in c)
        total = sum(x["wall_s"] for x in c)
        rows.append(
            {
                "head": head,
                "cells": len(u),
                "uncached_s": sum(x["wall_s"] for x in u),
                "cached_s": total,
                "cached_encoder_s": build,
                "cached_rest_s": total - build,
                "ratio": sum(x["wall_s"] for x in u) / total,
                "train_loop_s": sum(
                    (x.get("throughput") or {}).get("train_loop_s", 0.0) for x in c
                ),
            }
        )
    return rows


# --------------------------------------------------------------------------- part 2


class _EncoderWithHead(torch.nn.Module):
    """headbench's encoder + head as one module returning ``loss`` and ``logits`` (HF style)."""

    def __init__(self, encoder: torch.nn.Module, head: torch.nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        out = self.encoder(**inputs, output_hidden_states=True, return_dict=True)
        logits = self.head(out.hidden_states, attention_mask)  # (B, C)
        result = {"logits": logits}
        if labels is not None:
            result["loss"] = torch.nn.functional.cross_entropy(logits, labels)
        return result


def _finetune_overrides(args: argparse.Namespace, grouping: str = "true") -> list[str]:
    return [
        f"encoder={args.encoder}",
        "head=linear",
        "freeze=full",
        f"task={args.task}",
        f"seed={args.seed}",
        f"data.train_size={args.ft_train_size}",
        f"data.max_length={args.max_length}",
        f"data.batch_size={args.batch_size}",
        f"data.group_by_length={grouping}",
        f"trainer.max_epochs={args.ft_epochs}",
        "trainer.log_every_n_steps=50",
        *SPEED_ONLY,
        "optim.head_lr=${optim.encoder_lr}",  # one learning rate, as the HF Trainer uses
        "optim.fused=true",  # fused AdamW, as the HF Trainer's default optimizer
    ]


class _CountingCollator:
    """``DataCollatorWithPadding`` that also counts what it pads (the TrainLoopTimer's counts)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.counts = dict.fromkeys(BATCH_COUNTS, 0)

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        batch = self.inner(features)
        count_batch(self.counts, batch["attention_mask"])
        return batch


def _train_cpu_time_callback() -> Any:
    from transformers import TrainerCallback

    class TrainCpuTime(TrainerCallback):
        """The process's CPU time and page faults from ``on_train_begin`` to ``on_train_end``.

        The span of the Trainer's ``train_runtime`` (which starts just before
        ``on_train_begin``): the counterpart of ``TrainLoopTimer``'s ``train_loop_cpu_s``
        and ``train_loop_minor_faults``.
        """

        def __init__(self) -> None:
            self.seconds = 0.0
            self.faults = 0
            self._since = (0.0, 0)

        def on_train_begin(self, *args: Any, **kwargs: Any) -> None:
            self._since = (time.process_time(), minor_faults())

        def on_train_end(self, *args: Any, **kwargs: Any) -> None:
            self.seconds = time.process_time() - self._since[0]
            self.faults = minor_faults() - self._since[1]

    return TrainCpuTime()


def _hf_trainer_cell(
    args: argparse.Namespace, cfg: Any, work: Path, precision: str = "32-true"
) -> dict[str, Any]:
    import numpy as np
    from datasets import Dataset
    from omegaconf import OmegaConf
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments, set_seed

    from bench.data.sequence_datamodule import GlueDataModule
    from bench.data.tasks import get_task
    from bench.model.encoders import load_encoder, load_tokenizer
    from bench.model.heads import build_head

    plain = cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True))
    spec = get_task(plain["task"]["name"])
    tokenizer = load_tokenizer(plain["encoder"])
    dm = GlueDataModule(
        spec,
        tokenizer,
        data_dir=plain["data"]["dir"],
        train_size=args.ft_train_size,
        data_seed=int(plain["data_seed"]),
        max_length=args.max_length,
        batch_size=args.batch_size,
        eval_batch_size=int(plain["data"]["eval_batch_size"]),
    )
    dm.setup("fit")

    def to_dataset(examples: Any) -> Dataset:
        rows = [{k: v for k, v in ex.items() if k != "idx"} for ex in examples.examples]
        for row in rows:
            row["length"] = len(row["input_ids"])
        return Dataset.from_list(rows)

    set_seed(args.seed)
    encoder, info = load_encoder(plain["encoder"])
    setattr(encoder, "pooler", None)  # noqa: B010  # as the module has it: the head pools
    head = build_head(plain["head"], info.hidden_size, info.num_layers, spec.num_labels)
    model = _EncoderWithHead(encoder, head)
    optim = plain["optim"]
    targs = TrainingArguments(
        output_dir=str(work / "hf"),
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=int(plain["data"]["eval_batch_size"]),
        learning_rate=float(optim["encoder_lr"]),
        weight_decay=float(optim["weight_decay"]),
        adam_beta1=float(optim["betas"][0]),
        adam_beta2=float(optim["betas"][1]),
        adam_epsilon=float(optim["adam_eps"]),
        warmup_steps=float(optim["warmup_ratio"]),
        lr_scheduler_type="linear",
        num_train_epochs=args.ft_epochs,
        max_grad_norm=float(plain["trainer"]["gradient_clip_val"]),
        train_sampling_strategy="group_by_length",
        eval_strategy="no",
        save_strategy="no",
        logging_strategy="no",
        report_to="none",
        use_cpu=not torch.cuda.is_available(),  # the device headbench's side trains on
        bf16=precision.startswith("bf16"),  # bf16-mixed: autocast, as Lightning's
        seed=args.seed,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )

    def accuracy(pred: Any) -> dict[str, float]:
        logits = pred.predictions[0] if isinstance(pred.predictions, tuple) else pred.predictions
        return {"accuracy": float((np.argmax(logits, axis=-1) == pred.label_ids).mean())}

    collator = _CountingCollator(DataCollatorWithPadding(tokenizer))
    cpu = _train_cpu_time_callback()
    trainer = Trainer(
        model=model,
        args=targs,
        train_dataset=to_dataset(dm.train),
        eval_dataset=to_dataset(dm.dev["dev"]),
        data_collator=collator,
        compute_metrics=accuracy,
        callbacks=[cpu],
    )
    out = trainer.train()
    counts = dict(collator.counts)  # training batches only: evaluation comes next
    dev = trainer.evaluate()
    seconds = float(out.metrics["train_runtime"])
    return {
        "dev_accuracy": {"final": dev["eval_accuracy"]},
        "throughput": {
            **counts,
            "train_loop_s": seconds,
            "train_loop_cpu_s": cpu.seconds,
            "train_loop_minor_faults": cpu.faults,
            "examples_per_s": counts["examples"] / seconds,
        },
    }


def _finetune_run(args: argparse.Namespace, name: str, work: Path) -> dict[str, Any]:
    """One fine-tuning run of ``name`` (one of :data:`FRAMEWORKS`) in this process.

    The headbench sides run with its defaults (``runtime.malloc=tuned``) and their length
    grouping (:data:`_GROUPING`); ``hf_trainer`` as the Trainer ships (the process's
    allocator untouched); ``hf_trainer_tuned`` is the Trainer in a process given headbench's
    allocator setting, to show what that setting is worth on its own. ``peak_rss_mb`` and
    ``minor_faults`` are the whole (fresh) process's.
    """
    import resource

    from bench.run.allocator import configure_malloc

    _quiet()
    torch.set_num_threads(args.threads)
    if name in HEADBENCH_SIDES:
        overrides = _finetune_overrides(args, _GROUPING[name]) + _SIDE_OVERRIDES.get(name, [])
        run = _run_cell(overrides, work)
    else:
        malloc = configure_malloc("tuned" if name == "hf_trainer_tuned" else "default")
        run = _hf_trainer_cell(args, _compose(_finetune_overrides(args)), work)
        run["malloc"] = malloc
    usage = resource.getrusage(resource.RUSAGE_SELF)
    run.update(
        batches_pinned=batches_pinned("headbench" if name in HEADBENCH_SIDES else "hf_trainer"),
        git=git_commit(),  # the code that measured this run (a part may span several)
        torch_threads=torch.get_num_threads(),
        peak_rss_mb=usage.ru_maxrss / 1024,
        minor_faults=usage.ru_minflt,
    )
    return run


def _finetune_run_in_fresh_process(
    args: argparse.Namespace, name: str, work: Path
) -> dict[str, Any]:
    """:func:`_finetune_run` in a new (spawned) Python process.

    Every run starts from the same state: nothing one framework leaves behind in the
    process (the C allocator's heap and its mmap threshold, global torch flags, lazy
    imports and caches warmed by the run before) speeds up or slows down the other's
    timed loop, and no run is the only one that pays a cold start.
    """
    (run,) = _in_fresh_processes(_finetune_run, [(args, name, work)])
    return run


def _in_fresh_processes(fn: Any, calls: list[tuple[Any, ...]], at_once: int = 1) -> list[Any]:
    """``fn(*call)`` for every call, each in a new spawned process, ``at_once`` at a time.

    Returns:
        The results in the order of ``calls``.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=at_once, mp_context=ctx, max_tasks_per_child=1) as pool:
        futures = [pool.submit(fn, *call) for call in calls]
        return [f.result() for f in futures]


def _finetune_order(repeats: int, names: list[str]) -> list[str]:
    """ABBA order (A B C C B A A B C ...) so that a drift in machine load hits every framework."""
    return [name for r in range(repeats) for name in (names if r % 2 == 0 else names[::-1])]


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def finetune_summary(part: dict[str, Any]) -> dict[str, Any]:
    """Medians per framework over the repeats, the speedups, and each side's FLOP/s.

    ``speedup`` (and ``speedup_cpu``) is headbench's fast path over the Trainer as it ships;
    ``ratios[headbench side][HF side]`` has every headbench side over every HF side measured.
    """
    out: dict[str, Any] = {}
    for name in FRAMEWORKS:
        runs = [r for r in part.get("runs", []) if r["framework"] == name]
        if not runs:
            continue
        out[name] = {
            "runs": len(runs),
            "examples_per_s": _median([r["throughput"]["examples_per_s"] for r in runs]),
            "examples_per_s_all": [r["throughput"]["examples_per_s"] for r in runs],
            "padded_tokens_per_s": _median(
                [r["throughput"]["padded_tokens"] / r["throughput"]["train_loop_s"] for r in runs]
            ),
            "padding": _median(
                [1 - r["throughput"]["tokens"] / r["throughput"]["padded_tokens"] for r in runs]
            ),
            "dev_accuracy": [r["dev_accuracy"]["final"] for r in runs],
            "flop_per_s": _median([r["flops"]["flop_per_s"] for r in runs]),
        }
        cpu = [r["throughput"].get("train_loop_cpu_s") for r in runs]
        if all(cpu):  # runs saved before CPU time was recorded have none
            per_cpu_s = [r["throughput"]["examples"] / c for r, c in zip(runs, cpu, strict=True)]
            out[name]["examples_per_cpu_s"] = _median(per_cpu_s)
            out[name]["examples_per_cpu_s_all"] = per_cpu_s
        if all("minor_faults" in r for r in runs):  # recorded since the allocator setting
            out[name]["minor_faults"] = _median([r["minor_faults"] for r in runs])
            out[name]["peak_rss_mb"] = _median([r["peak_rss_mb"] for r in runs])
        loop_faults = [r["throughput"].get("train_loop_minor_faults") for r in runs]
        if all(f is not None for f in loop_faults):
            out[name]["train_loop_minor_faults"] = _median(loop_faults)
        first = [r["throughput"].get("first_batch_s") for r in runs]
        after = [r["throughput"].get("examples_per_s_after_first") for r in runs]
        if all(f is not None for f in first) and all(a is not None for a in after):
            # headbench's runs since the timer split the first batch off (compilation lands
            # there): the one-time cost and the running speed apart.
            out[name]["first_batch_s"] = _median(first)
            out[name]["examples_per_s_after_first"] = _median(after)
    if "headbench" not in out or "hf_trainer" not in out:
        return {}
    # ratios[headbench side][HF side]: examples/s and examples per CPU second.
    ratios: dict[str, dict[str, dict[str, float]]] = {}
    for mine in (n for n in HEADBENCH_SIDES if n in out):
        for theirs in (n for n in HF_SIDES if n in out):
            a, b = out[mine], out[theirs]
            pair = {"examples_per_s": a["examples_per_s"] / b["examples_per_s"]}
            if "examples_per_cpu_s" in a and "examples_per_cpu_s" in b:
                pair["examples_per_cpu_s"] = a["examples_per_cpu_s"] / b["examples_per_cpu_s"]
            ratios.setdefault(mine, {})[theirs] = pair
    out["ratios"] = ratios
    hb, hf = out["headbench"], out["hf_trainer"]
    out["speedup"] = ratios["headbench"]["hf_trainer"]["examples_per_s"]
    if "examples_per_cpu_s" in ratios["headbench"]["hf_trainer"]:
        out["speedup_cpu"] = ratios["headbench"]["hf_trainer"]["examples_per_cpu_s"]
    out["speedup_padded_tokens"] = hb["padded_tokens_per_s"] / hf["padded_tokens_per_s"]
    out["dev_accuracy_gap_points"] = 100 * abs(
        _median(hb["dev_accuracy"]) - _median(hf["dev_accuracy"])
    )
    return out


def run_finetune(args: argparse.Namespace, state: dict[str, Any], save: Any) -> None:
    """Part 2: headbench vs the HF Trainer on one full fine-tuning cell, repeated in ABBA order.

    Both frameworks run in this process, alternately, ``--ft-repeats`` times each; every run's
    FLOP/s is counted from its own batches (part 3). A rerun resumes after the last saved run.
    """
    keys = ("encoder", "task", "ft_train_size", "ft_epochs", "max_length", "batch_size", "seed")
    settings = {k: getattr(args, k) for k in (*keys, "threads")}
    settings["fresh_process_per_run"] = True  # runs saved before were all in one process
    settings["frameworks"] = args.ft_frameworks
    settings["headbench_grouping"] = {n: _GROUPING[n] for n in args.ft_frameworks if n in _GROUPING}
    part = settle_part(state, "finetune", settings)
    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="headbench-perf-ft-"))
    order = _finetune_order(args.ft_repeats, args.ft_frameworks)
    runs = part.setdefault("runs", [])
    part["order"] = order
    for i, name in enumerate(order):
        if i < len(runs):
            continue
        with GpuSampler() as sampler:  # the whole run, its fresh process's start included
            run = _finetune_run_in_fresh_process(args, name, work / f"{name}-{i}")
        run.update(
            framework=name,
            load_avg_1min=os.getloadavg()[0],
            gpu_utilisation=sampler.summary(),
        )
        run["flops"] = training_flops(args, run["throughput"])
        runs.append(run)
        tp = run["throughput"]
        print(
            f"[finetune {i + 1}/{len(order)} {name}] {tp['examples_per_s']:.1f} ex/s, "
            f"{run['flops']['flop_per_s'] / 1e9:.1f} GFLOP/s, "
            f"dev acc {run['dev_accuracy']['final']:.4f}",
            flush=True,
        )
        save()
    part["summary"] = finetune_summary(part)
    save()


@functools.cache
def _model_shape(encoder: str) -> tuple[int, int, int]:
    """(N, L, H): the transformer layers' matrix weights, depth and width of an encoder."""
    from bench.model.encoders import load_encoder, transformer_layers

    model, info = load_encoder({"name": encoder, **_encoder_cfg(encoder)})
    n = sum(
        m.weight.numel()
        for layer in transformer_layers(model)
        for m in layer.modules()
        if isinstance(m, torch.nn.Linear)
    )
    return n, info.num_layers, info.hidden_size


def training_flops(args: argparse.Namespace, throughput: dict[str, Any]) -> dict[str, Any]:
    """FLOPs of a fine-tuning run from the model shape and the real (padded) token counts.

    Formula (forward 2 FLOPs per multiply-add, backward twice the forward):
    ``6 * N * sum(B*T) + 12 * L * H * sum(B*T^2)``, N = weights of the transformer layers'
    matrices (QKV, output, FFN), L layers, H width, T the padded length of each batch (the
    tensors the hardware multiplies). The second term is attention (QK^T and AV). Embedding
    lookups, norms, softmax and the head are left out, so the figure is a lower bound.
    """
    n, L_, H = _model_shape(args.encoder)
    flops = 6 * n * throughput["padded_tokens"] + 12 * L_ * H * throughput["padded_tokens_sq"]
    seconds = throughput["train_loop_s"]
    return {
        "formula": "6*N*sum(B*T) + 12*L*H*sum(B*T^2)",
        "N_matrix_weights": n,
        "L": L_,
        "H": H,
        "sum_BT": throughput["padded_tokens"],
        "sum_BT2": throughput["padded_tokens_sq"],
        "real_tokens": throughput["tokens"],
        "flops": flops,
        "seconds": seconds,
        "flop_per_s": flops / seconds,
    }


def _encoder_cfg(name: str) -> dict[str, Any]:
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(config_dir() / "encoder" / f"{name}.yaml")
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


# --------------------------------------------------------------------------- part 3


def _peak_device() -> torch.device:
    """Where the fine-tuning cells train, so where the matmul peak is measured."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def matmul_peak(
    dtype: torch.dtype, n: int, seconds: float = 3.0, device: torch.device | None = None
) -> float:
    """Measured dense matmul FLOP/s: (n x n) @ (n x n) on ``device``, repeated ``seconds``.

    On a GPU every product is waited for before the clock is read (launches are
    asynchronous), so the figure is the device's, not the launch rate's.
    """
    device = device or torch.device("cpu")

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    for _ in range(3):
        torch.mm(a, b)  # warm-up (and cuBLAS's handle and heuristics on a GPU)
    sync()
    reps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        torch.mm(a, b)
        sync()
        reps += 1
    return 2 * n**3 * reps / (time.perf_counter() - started)


def run_flops(args: argparse.Namespace, state: dict[str, Any], save: Any) -> None:
    """Part 3: matmul peak (fp32, bf16; best of 3) on the fine-tuning device; fractions.

    On a CPU at the fine-tuning thread count with ``--matmul-n`` (default 2048); on a GPU
    on that GPU with n = 8192 unless ``--matmul-n`` says otherwise, under the process's
    float32 matmul precision (recorded: "highest" is true fp32, "high" lets it use TF32).
    """
    torch.set_num_threads(args.threads)
    device = _peak_device()
    n = args.matmul_n or (8192 if device.type == "cuda" else 2048)
    repeats = 3
    precision = torch.get_float32_matmul_precision()
    settings = {
        "device": device.type,
        "threads": args.threads,
        "matmul_n": n,
        "repeats": repeats,
        "float32_matmul_precision": precision,
    }
    part = settle_part(state, "flops", settings)
    if measured(state, "flops"):
        print("[flops] peak measured with these settings: only the fractions are recomputed")
    else:
        part["peak_flop_per_s"] = {
            name: max(matmul_peak(dtype, n, seconds=2.0, device=device) for _ in range(repeats))
            for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))
        }
    part.update(settings)  # the table reads these at the part's top level
    peak = part["peak_flop_per_s"]
    summary = (state.get("finetune") or {}).get("summary") or {}
    for name in FRAMEWORKS:
        if name in summary:
            achieved = summary[name]["flop_per_s"]
            part[f"{name}_fraction_of_fp32_peak"] = achieved / peak["fp32"]
            part[f"{name}_fraction_of_bf16_peak"] = achieved / peak["bf16"]
    save()


# --------------------------------------------------------------------------- packed


def _packed_cell(args: argparse.Namespace, seed: int, threads: int, work: Path) -> dict[str, Any]:
    """One fine-tuning cell of the packed part (the finetune part's cell, another seed)."""
    _quiet()
    torch.set_num_threads(threads)
    cell = argparse.Namespace(**{**vars(args), "seed": seed})
    run = _run_cell(_finetune_overrides(cell, _GROUPING["headbench"]), work)
    run.update(seed=seed, torch_threads=threads)
    return run


def _in_processes(
    args: argparse.Namespace, seeds: list[int], threads: int, work: Path, at_once: int
) -> tuple[float, list[dict[str, Any]]]:
    """Train one cell per seed, each in a fresh process, ``at_once`` at a time; (wall, runs)."""
    started = time.perf_counter()
    calls = [(args, seed, threads, work / str(seed)) for seed in seeds]
    runs = _in_fresh_processes(_packed_cell, calls, at_once)
    return time.perf_counter() - started, runs


def pack_count(args: argparse.Namespace, device: dict[str, Any]) -> dict[str, Any]:
    """How many fine-tuning cells the packed part runs at once, and why.

    On a GPU: as many as :func:`bench.run.packing.check_pack` lets fit in its memory (the
    estimate ``hydra/launcher=gpu_pack`` refuses to exceed), at most ``--pack-max``. On a
    CPU the memory estimate is checked against the host's memory and the count is also
    capped by the cores, each cell getting ``--threads`` / K of them.
    """
    from bench.run.packing import DEFAULT_HEADROOM, estimate_cell, pack_size

    estimate = estimate_cell(_compose(_finetune_overrides(args, _GROUPING["headbench"])))
    if device.get("kind") == "cuda":
        available = int(torch.cuda.get_device_properties(0).total_memory)
        limits = {"memory": pack_size(estimate.total, available), "--pack-max": args.pack_max}
    else:
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        limits = {
            "memory": pack_size(estimate.total, available),
            "--pack-max": args.pack_max,
            "cores (--threads)": args.threads,
        }
    count = max(1, min(limits.values()))
    return {
        "cells": count,
        "limited_by": [k for k, v in limits.items() if v == count],
        "estimate_gib": estimate.total / 2**30,
        "available_gib": available / 2**30,
        "headroom": DEFAULT_HEADROOM,
    }


def run_packed(args: argparse.Namespace, state: dict[str, Any], save: Any) -> None:
    """Part 6 (#22 item 4): K fine-tuning cells at once vs the same K one after another.

    The cells are the finetune part's (headbench, bucketed batches) with seeds ``--seed``
    .. ``--seed + K - 1``. One after another, each has the whole device (``--threads``
    torch threads); packed, K worker processes share it (``--threads`` / K threads each on
    a CPU; on a GPU each also keeps ``--threads`` // K host threads). Every cell runs in a
    fresh process on both sides.
    """
    plan = pack_count(args, state["machine"]["device"])
    k = plan["cells"]
    seeds = list(range(args.seed, args.seed + k))
    threads = max(1, args.threads // k)
    settings = {
        "encoder": args.encoder,
        "task": args.task,
        "ft_train_size": args.ft_train_size,
        "ft_epochs": args.ft_epochs,
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "threads_alone": args.threads,
        "threads_packed": threads,
        "seeds": seeds,
    }
    part = settle_part(state, "packed", settings)
    if measured(state, "packed"):
        print("[packed] measured with these settings: skipped")
        return
    work = Path(tempfile.mkdtemp(prefix="headbench-perf-pack-"))
    with GpuSampler() as alone_gpu:
        alone_s, alone = _in_processes(args, seeds, args.threads, work / "alone", 1)
    print(f"[packed] {k} cells one after another: {alone_s:.1f} s", flush=True)
    with GpuSampler() as packed_gpu:
        packed_s, packed = _in_processes(args, seeds, threads, work / "packed", k)
    print(f"[packed] the same {k} cells at once: {packed_s:.1f} s", flush=True)
    part.update(
        {
            "plan": plan,
            "alone_s": alone_s,
            "packed_s": packed_s,
            "ratio": alone_s / packed_s,
            "dev_accuracy_alone": [r["dev_accuracy"]["final"] for r in alone],
            "dev_accuracy_packed": [r["dev_accuracy"]["final"] for r in packed],
            "status": [r["status"] for r in alone + packed],
            "gpu_utilisation": {"alone": alone_gpu.summary(), "packed": packed_gpu.summary()},
        }
    )
    save()


# --------------------------------------------------------------------------- output


_HEADERS = {
    "headbench": "headbench (bucketed batches)",
    "headbench_hf_sampler": "headbench, the Trainer's length grouping",
    "headbench_step_sync": "headbench, the loss read every step",
    "headbench_compile": "headbench, encoder compiled (compiling inside the loop)",
    "headbench_graphs": "headbench, encoder compiled as CUDA graphs (batches padded to 8)",
    "headbench_graphs_tf32": "headbench, CUDA graphs, float32 matmuls as TF32",
    "hf_trainer": "HF `Trainer`",
    "hf_trainer_tuned": "HF `Trainer`, headbench's allocator setting",
}


def _flops_cell(name: str, side: dict[str, Any], fl: dict[str, Any]) -> str:
    achieved = f"{side['flop_per_s'] / 1e9:.1f} G"
    fraction = fl.get(f"{name}_fraction_of_fp32_peak")
    if fraction is None:  # measured before this framework's fraction was computed
        return achieved
    if name == "headbench":
        return f"{achieved} = **{100 * fraction:.0f}%** of fp32 peak"
    return f"{achieved} = {100 * fraction:.0f}%"


def _finetune_table(ft: dict[str, Any], summary: dict[str, Any], fl: dict[str, Any]) -> list[str]:
    """The fine-tuning part as Markdown: one column per measured framework."""
    st = ft["settings"]
    names = [n for n in FRAMEWORKS if n in summary]
    sides = [summary[n] for n in names]

    def each(values: list[float]) -> str:
        return ", ".join(f"{x:.1f}" for x in values)

    def ratio(name: str, key: str) -> str:
        vs = [
            f"{pair[key]:.2f}x vs {_SHORT[other]}"
            for other, pair in summary.get("ratios", {}).get(name, {}).items()
            if key in pair
        ]
        return f" ({'; '.join(vs)})" if vs else ""

    def row(label: str, cells: list[str]) -> str:
        return f"| {label} | {' | '.join(cells)} |"

    lines = [
        f"Full fine-tuning ({st['encoder']} + linear head, {st['task']} "
        f"{st['ft_train_size']}-example subset, {st['ft_epochs']} epochs, batch "
        f"{st['batch_size']}, max length {st['max_length']}, dynamic padding, "
        f"length-grouped batches (headbench: bucketed unless said), {st['threads']} "
        f"thread(s); {sides[0]['runs']} runs each"
        f"{', each in a fresh process,' if st.get('fresh_process_per_run') else ''} in the "
        f"order {' '.join(_SHORT[n] for n in ft['order'])}; medians):",
        "",
        row("measurement", [_HEADERS[n] for n in names]),
        "|---" * (len(names) + 1) + "|",
        row(
            "training examples/s, validation excluded (each run)",
            [
                f"**{x['examples_per_s']:.1f}**{ratio(n, 'examples_per_s')} "
                f"({each(x['examples_per_s_all'])})"
                for n, x in zip(names, sides, strict=True)
            ],
        ),
    ]
    if all("examples_per_cpu_s" in x for x in sides):
        lines.append(
            row(
                "training examples per CPU second "
                "(process time: not inflated by waiting for a core)",
                [
                    f"**{x['examples_per_cpu_s']:.1f}**{ratio(n, 'examples_per_cpu_s')} "
                    f"({each(x['examples_per_cpu_s_all'])})"
                    for n, x in zip(names, sides, strict=True)
                ],
            )
        )
    if any("first_batch_s" in x for x in sides):
        lines.append(
            row(
                "seconds to the end of the first training batch (compiling included) / "
                "training examples/s after it",
                [
                    f"{x['first_batch_s']:.1f} s / {x['examples_per_s_after_first']:.1f}"
                    if "first_batch_s" in x
                    else "-"
                    for x in sides
                ],
            )
        )
    lines += [
        row(
            "padded tokens/s (padding share)",
            [f"{x['padded_tokens_per_s']:.0f} ({100 * x['padding']:.0f}%)" for x in sides],
        ),
        row(
            "dev accuracy after the last epoch (each run)",
            [each([100 * a for a in x["dev_accuracy"]]) for x in sides],
        ),
    ]
    if all("train_loop_minor_faults" in x for x in sides):
        lines.append(
            row(
                "minor page faults in the training loop",
                [f"{x['train_loop_minor_faults'] / 1e3:.0f} k" for x in sides],
            )
        )
    if all("minor_faults" in x for x in sides):
        lines.append(
            row(
                "minor page faults of the whole run / its peak resident memory",
                [f"{x['minor_faults'] / 1e3:.0f} k / {x['peak_rss_mb']:.0f} MB" for x in sides],
            )
        )
    if fl:
        peak = fl["peak_flop_per_s"]
        formula = ft["runs"][0]["flops"]["formula"]
        lines += [
            row(
                f"achieved training FLOP/s ({formula})",
                [_flops_cell(n, x, fl) for n, x in zip(names, sides, strict=True)],
            ),
            row(
                f"measured matmul peak, {_peak_where(fl)}, n={fl['matmul_n']}, best of "
                f"{fl['repeats']}: fp32 / bf16",
                [f"{peak['fp32'] / 1e9:.1f} G / {peak['bf16'] / 1e9:.1f} G"]
                + [""] * (len(names) - 1),
            ),
        ]
    return lines


def _unpinned_note(ft: dict[str, Any], machine: dict[str, Any] | None) -> list[str]:
    """On a GPU, a line naming the sides whose batches came from pageable host memory."""
    on_gpu = ((machine or {}).get("device") or {}).get("kind") == "cuda"
    unpinned = sorted(
        {r["framework"] for r in ft.get("runs") or [] if not recorded_pinned(r, on_gpu)}
    )
    if not on_gpu or not unpinned:
        return []
    return [
        "",
        f"Batches from pageable (not pinned) host memory in: {', '.join(unpinned)} (runs "
        "measured before bench/data/pinning.py, or a Trainer set not to pin).",
    ]


def _peak_where(fl: dict[str, Any]) -> str:
    """Where the peak was measured: the GPU (and its fp32 matmul precision) or CPU threads."""
    if fl.get("device") == "cuda":
        return f"on the GPU (float32 matmul precision {fl['float32_matmul_precision']})"
    return f"{fl['threads']} thread(s)"


def table(state: dict[str, Any]) -> str:
    """The measured figures as Markdown: the frozen grids, then fine-tuning and FLOP/s."""
    lines = []
    grid = state.get("grid") or {}
    rows = grid_sizes(grid)
    if rows:
        st = grid["settings"]
        lines += [
            f"Frozen grids ({st['encoder']}, {st['task']} {st['train_size']}-example subset, "
            f"{st['epochs']} epochs, max length {st['max_length']}, batch {st['batch_size']}, "
            f"{grid.get('threads')} thread; 4 heads x seeds; cumulative wall time of the "
            "first N cells of one sweep, each path from an empty cache):",
            "",
            "| cells | uncached | cached fp16 (x faster) | cached fp32 (x faster) "
            "| cached fp32: encoder + rest | cells whose dev accuracy differs: fp16 / fp32 |",
            "|---|---|---|---|---|---|",
        ]
        for r in rows:
            lines.append(
                f"| {r['cells']} | {r['uncached_s']:.0f} s "
                f"| {r['cached_s']:.0f} s ({r['cached_ratio']:.1f}x) "
                f"| {r['cached_fp32_s']:.0f} s ({r['cached_fp32_ratio']:.1f}x) "
                f"| {r['cached_fp32_encoder_s']:.0f} s + {r['cached_fp32_heads_s']:.0f} s "
                f"| {r['cached_cells_differing']} (max {100 * r['cached_max_abs_acc_diff']:.2f} "
                f"points) / {r['cached_fp32_cells_differing']} |"
            )
        lines.append("")
    heads = grid_heads(grid)
    if heads:
        lines += [
            "Per head, the 12-cell grid (seeds 1-3), float32 cache: what caching removes "
            "(encoder passes) and what it cannot (the head's own training and evaluation):",
            "",
            "| head | uncached | cached | of which encoder passes | rest | "
            "head training loop | x faster |",
            "|---|---|---|---|---|---|---|",
        ]
        for h in heads:
            lines.append(
                f"| {h['head']} | {h['uncached_s']:.0f} s | {h['cached_s']:.0f} s "
                f"| {h['cached_encoder_s']:.0f} s | {h['cached_rest_s']:.0f} s "
                f"| {h['train_loop_s']:.0f} s | {h['ratio']:.1f}x |"
            )
        lines.append("")
    ft = state.get("finetune") or {}
    summary = ft.get("summary") or {}
    if summary:
        lines += _finetune_table(ft, summary, measured(state, "flops"))
        machine = (state.get("part_machine") or {}).get("finetune") or state.get("machine")
        lines += _unpinned_note(ft, machine)
    lines += _lockstep_table(measured(state, "lockstep"))
    lines += _packed_table(measured(state, "packed"))
    lines += steps_table(state.get("steps") or {}, (state.get("part_machine") or {}).get("steps"))
    lines += gpu_table(state)
    lines += targets(state)
    lines += _superseded_line(state)
    return "\n".join(lines)


def _superseded_line(state: dict[str, Any]) -> list[str]:
    """A line naming the parts kept in the file under ``superseded`` (:func:`settle_part`)."""
    aside = state.get("superseded") or {}
    if not aside:
        return []
    kept = ", ".join(
        f"{name} ({len(parts)} earlier, at commit "
        + ", ".join(str((p.get("part_git") or {}).get("commit") or "unknown")[:7] for p in parts)
        + ")"
        for name, parts in aside.items()
    )
    return [
        "",
        f"Kept in the file under `superseded`, measured with other settings than the parts "
        f"above: {kept}.",
    ]


def _packed_table(pk: dict[str, Any]) -> list[str]:
    """Part 6's figures, when measured."""
    if not pk:
        return []
    st, plan = pk["settings"], pk["plan"]
    k = plan["cells"]
    acc = ", ".join(f"{100 * a:.1f}" for a in pk["dev_accuracy_alone"])
    acc_packed = ", ".join(f"{100 * a:.1f}" for a in pk["dev_accuracy_packed"])
    return [
        "",
        f"Packed fine-tuning ({st['encoder']} + linear head, {st['task']} "
        f"{st['ft_train_size']}-example subset, {st['ft_epochs']} epochs, batch "
        f"{st['batch_size']}; seeds {', '.join(map(str, st['seeds']))}; each cell in a fresh "
        f"process): K = {k}, limited by {' and '.join(plan['limited_by'])} (memory estimate "
        f"{plan['estimate_gib']:.2f} GiB a cell, {plan['headroom']:.0%} of "
        f"{plan['available_gib']:.0f} GiB):",
        "",
        "| measurement | value |",
        "|---|---|",
        f"| {k} cells one after another, {st['threads_alone']} thread(s) each "
        f"| {pk['alone_s']:.1f} s |",
        f"| the same {k} cells at once, {st['threads_packed']} thread(s) each "
        f"| {pk['packed_s']:.1f} s ({pk['ratio']:.2f}x faster) |",
        f"| dev accuracy after the last epoch: alone / packed | {acc} / {acc_packed} |",
    ]


def _verdict(value: float, goal: float, higher: bool = True) -> str:
    met = value >= goal if higher else value <= goal
    return "met" if met else "not met"


def targets(state: dict[str, Any]) -> list[str]:
    """The measured figures against their targets, for the device the file was measured on.

    On a CPU: the cached frozen grid >= 8x faster than uncached (12 cells), fine-tuning at
    least as fast as the HF Trainer at dev accuracy within 1 point, >= 50% of the measured
    fp32 matmul peak. On a GPU: issue #22's goals (an H100): one linear-family frozen cell
    >= 20,000 examples/s, a lock-step group >= 1,000,000 head-examples/s, the lock-step
    cells' wall <= 3x one cell's, fine-tuning >= 1.5x the Trainer at dev accuracy within
    0.5 points; packing is reported without a goal.
    """
    gpu = ((state.get("machine") or {}).get("device") or {}).get("kind") == "cuda"
    lines: list[str] = []
    grid = state.get("grid") or {}
    rows = {r["cells"]: r for r in grid_sizes(grid)} if grid else {}
    summary = (state.get("finetune") or {}).get("summary") or {}
    ls = measured(state, "lockstep")
    fl = measured(state, "flops")
    if gpu:
        cached = [
            c["throughput"]["examples_per_s"]
            for c in grid.get("cached_fp32") or []
            if c["head"] != "bilstm" and c.get("throughput")
        ]
        if cached:
            one = statistics.median(cached)
            lines.append(
                f"- one linear-family frozen cell (cached, float32; median of {len(cached)}): "
                f"{one:,.0f} examples/s, goal >= 20,000: {_verdict(one, 20_000)}"
            )
    elif 12 in rows:
        r = rows[12]
        lines.append(
            f"- frozen 12-cell grid, cached float32 vs uncached: {r['cached_fp32_ratio']:.1f}x "
            f"faster, goal >= 8x: {_verdict(r['cached_fp32_ratio'], 8.0)}"
        )
    if summary:
        goal, gap = (1.5, 0.5) if gpu else (1.0, 1.0)
        speed = summary["speedup"]
        points = summary["dev_accuracy_gap_points"]
        met = speed >= goal and points <= gap
        lines.append(
            f"- fine-tuning, headbench over the HF Trainer: {speed:.2f}x at dev accuracy "
            f"{points:.1f} points apart, goal >= {goal}x within {gap} points: "
            f"{'met' if met else 'not met'}"
        )
    if not gpu and "headbench_fraction_of_fp32_peak" in fl:
        share = fl["headbench_fraction_of_fp32_peak"]
        lines.append(
            f"- fine-tuning FLOP/s: {share:.0%} of the measured fp32 matmul peak, goal >= 50%: "
            f"{_verdict(share, 0.5)}"
        )
    if ls:
        per_cell = ls["lockstep_s"] / ls["one_cell_wall_s"]
        details = ls.get("group_details") or []
        best = max(details, key=lambda g: g["head_examples_per_s"]) if details else None
        rate = best["head_examples_per_s"] if best else ls["lockstep_head_examples_per_s"] or 0.0
        group = f"best group ({best['cells']} cells: {', '.join(best['heads'])})" if best else ""
        where = "goal" if gpu else "the H100 goal (issue #22; not a CPU target)"
        lines.append(
            f"- lock-step, {ls['settings']['cells']} cells, {group or 'all groups'}: "
            f"{rate:,.0f} head-examples/s, {where} >= 1,000,000"
            + (f": {_verdict(rate, 1_000_000)}" if gpu else "")
        )
        lines.append(
            f"- lock-step, {ls['settings']['cells']} cells' wall = {per_cell:.1f}x one "
            f"cell's, {where} <= 3x" + (f": {_verdict(per_cell, 3.0, higher=False)}" if gpu else "")
        )
    if not lines:
        return []
    device = "this GPU" if gpu else "this CPU"
    return ["", f"Against the targets on {device}:", "", *lines]


def _mean_util(records: list[dict[str, Any]]) -> float | None:
    """Median over runs of each run's mean utilisation; None when none was sampled."""
    values = [
        r["gpu_utilisation"]["util_mean"]
        for r in records
        if "util_mean" in (r.get("gpu_utilisation") or {})
    ]
    return _median(values) if values else None


def gpu_table(state: dict[str, Any]) -> list[str]:
    """GPU utilisation (``nvidia-smi``) of every measured part; nothing on a CPU.

    Each row is the median over the part's runs of a run's mean ``utilization.gpu``.
    """
    rows: list[tuple[str, float]] = []
    grid = state.get("grid") or {}
    for path in GRID_PATHS:
        util = _mean_util(grid.get(path) or [])
        if util is not None:
            rows.append((f"frozen grid, {path}", util))
    runs = (state.get("finetune") or {}).get("runs") or []
    for name in FRAMEWORKS:
        util = _mean_util([r for r in runs if r.get("framework") == name])
        if util is not None:
            rows.append((f"fine-tuning, {_SHORT[name]}", util))
    ls = measured(state, "lockstep").get("gpu_utilisation") or {}
    for side in ("alone", "lockstep"):
        util = _mean_util([{"gpu_utilisation": ls.get(side)}])
        if util is not None:
            rows.append((f"lock-step part, {side}", util))
    if not rows:
        return []
    return [
        "",
        "GPU utilisation (nvidia-smi `utilization.gpu`, sampled every 0.5 s; median over "
        "runs of each run's mean):",
        "",
        "| part | utilisation |",
        "|---|---|",
        *[f"| {name} | {util:.0f}% |" for name, util in rows],
    ]


def _lockstep_table(ls: dict[str, Any]) -> list[str]:
    """Part 4's figures, when measured."""
    if not ls:
        return []
    st = ls["settings"]
    return [
        "",
        f"Lock-step frozen heads ({st['encoder']}, {st['task']} {st['train_size']}-example "
        f"subset, {st['epochs']} epochs, max length {st['max_length']}, batch "
        f"{st['batch_size']}, {st['threads']} thread; {st['cells']} cells: "
        f"{', '.join(st['heads'])} x seeds, one order seed; warm feature cache):",
        "",
        "| measurement | value |",
        "|---|---|",
        f"| wall of {st['cells']} cells one after another (run()) | {ls['alone_s']:.1f} s |",
        f"| wall of the same cells in lock-step (groups of {ls['groups']}) "
        f"| {ls['lockstep_s']:.1f} s ({ls['ratio']:.1f}x faster) |",
        f"| one cell's wall (median) | {ls['one_cell_wall_s']:.1f} s |",
        f"| one cell's training examples/s (median) | {ls['one_cell_examples_per_s']:.0f} |",
        f"| lock-step head-examples/s (examples x cells per second of the batch loops) "
        f"| {ls['lockstep_head_examples_per_s']:.0f} |",
        f"| cells whose selected epoch or metrics differ | {ls['cells_differing']} |",
        *[
            f"| one after another: the {h} cells ({a['cells']}) | {a['wall_s']:.1f} s "
            f"(median {a['median_wall_s']:.1f} s a cell) |"
            for h, a in (ls.get("alone_by_head") or {}).items()
        ],
        *[
            f"| lock-step group of {g['cells']} ({', '.join(g['heads'])}) | {g['wall_s']:.1f} s; "
            f"{g['head_examples_per_s']:,.0f} head-examples/s in its batch loop |"
            for g in ls.get("group_details") or []
        ],
        *(
            [f"| cells trained alone inside the lock-step side | {ls['cells_trained_alone']} |"]
            if ls.get("cells_trained_alone")
            else []
        ),
    ]


def _frameworks(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in FRAMEWORKS]
    if unknown or len(set(names)) != len(names) or not {"headbench", "hf_trainer"} <= set(names):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give headbench and hf_trainer, optionally the others, each once "
            f"(valid: {', '.join(FRAMEWORKS)})"
        )
    return names


def _step_sides(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in STEP_SIDES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{text!r}: unknown side {unknown[0] if unknown else ''!r} "
            f"(valid: {', '.join(STEP_SIDES)})"
        )
    return names


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python benchmarks/perf.py", description=__doc__.split("\n")[0]
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output file (default: results/perf_gpu_<model>.json on a GPU, results/perf_cpu.json)",
    )
    p.add_argument(
        "--parts",
        default="grid,finetune,flops,lockstep,packed,steps",
        help="comma-separated: grid (parts 1 and 4), finetune (2), flops (3), lockstep (5), "
        "packed (6), steps (7), table (reprint)",
    )
    p.add_argument("--encoder", default="minilm")
    p.add_argument("--task", default="sst2")
    p.add_argument("--train-size", type=int, default=2000, help="grid cells' training subset")
    p.add_argument("--epochs", type=int, default=3, help="grid cells' epochs")
    p.add_argument("--grid-cells", type=int, default=32, help="cells per path (4 heads x seeds)")
    p.add_argument("--grid-threads", type=int, default=1, help="torch threads for the grid")
    p.add_argument("--lockstep-cells", type=int, default=100, help="cells of the lockstep part")
    p.add_argument(
        "--lockstep-heads",
        default="linear,pooler,last4_concat,mean_linear,bilstm",
        help="heads of the lockstep part (comma-separated)",
    )
    p.add_argument(
        "--pack-max", type=int, default=4, help="at most this many cells at once (packed part)"
    )
    p.add_argument("--ft-train-size", type=int, default=2000)
    p.add_argument("--ft-epochs", type=int, default=3)
    p.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count() or 1,
        help="torch threads for fine-tuning and the matmul peak (default: all cores)",
    )
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--ft-frameworks",
        type=_frameworks,
        default=list(FRAMEWORKS),
        help="comma-separated fine-tuning sides in ABBA order, headbench and hf_trainer "
        f"required (default: {','.join(FRAMEWORKS)})",
    )
    p.add_argument("--ft-repeats", type=int, default=3, help="fine-tuning runs per framework")
    p.add_argument(
        "--steps-sides",
        type=_step_sides,
        default=list(STEP_SIDES),
        help=f"comma-separated sides of the steps part (default: {','.join(STEP_SIDES)})",
    )
    p.add_argument(
        "--steps-train-size",
        type=int,
        default=2000,
        help="steps part: training examples (one epoch; it needs wait + active batches)",
    )
    p.add_argument(
        "--steps-wait", type=int, default=20, help="steps part: optimizer steps before the window"
    )
    p.add_argument(
        "--steps-active", type=int, default=10, help="steps part: optimizer steps profiled"
    )
    p.add_argument(
        "--matmul-n", type=int, default=None, help="matmul peak size (default: 2048 CPU, 8192 GPU)"
    )
    return p


def device_record() -> dict[str, Any]:
    """The device both sides of every comparison train on, as the output file records it.

    Returns:
        ``kind`` (``cuda`` or ``cpu``); on a GPU also its name, memory, compute capability,
        the CUDA version torch was built with and the driver version (``nvidia-smi``).
    """
    if not torch.cuda.is_available():
        return {"kind": "cpu"}
    props = torch.cuda.get_device_properties(0)
    record: dict[str, Any] = {
        "kind": "cuda",
        "name": props.name,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "capability": f"{props.major}.{props.minor}",
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
    }
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        record["driver"] = out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        record["driver"] = None
    return record


def check_same_device(state: dict[str, Any], device: dict[str, Any], out: Path) -> None:
    """Refuse to add measurements to a file recorded on another device.

    A rerun resumes the parts already measured; figures from a GPU and from a CPU must
    never meet in one ratio, so a file whose ``machine.device`` differs is not resumed.

    Raises:
        SystemExit: Naming both devices and the way out (``--out``).
    """
    if not state:
        return
    # Files written before devices were recorded were all measured on this project's CPUs.
    before = (state.get("machine") or {}).get("device") or {"kind": "cpu"}
    if (before.get("kind"), before.get("name")) != (device.get("kind"), device.get("name")):
        raise SystemExit(
            f"{out} was measured on {before.get('name') or before.get('kind')}, this run is on "
            f"{device.get('name') or device.get('kind')}: figures from two devices are never "
            f"mixed; pass another --out (e.g. results/{perf_file_name(device)})"
        )


#: The parts ``--parts`` takes, in the order a full run measures them.
PARTS = ("grid", "finetune", "flops", "lockstep", "packed", "steps", "table")


def default_out(device: dict[str, Any]) -> Path:
    """``results/perf_gpu_<model>.json`` for a CUDA device, else ``results/perf_cpu.json``."""
    return ROOT / "results" / perf_file_name(device)


def main(argv: list[str] | None = None) -> None:
    """Run the chosen parts, saving each as it finishes, then print the table."""
    args = _parser().parse_args(argv)
    device = device_record()
    if args.out is None:
        args.out = default_out(device)
    state: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    names = args.parts.split(",")
    unknown = [n for n in names if n not in PARTS]
    if unknown:
        raise SystemExit(f"--parts: unknown part {unknown[0]!r}; valid: {', '.join(PARTS)}")
    if names == ["table"]:  # reprint only: the file keeps the machine that measured it
        print(table(state))
        return
    _quiet()
    check_same_device(state, device, args.out)
    machine = hardware()
    # Until part_machine, a file had one machine record for all its parts: theirs.
    measured = [n for n in PARTS if n != "table" and n in state]
    if "machine" in state and "part_machine" not in state:
        state["part_machine"] = dict.fromkeys(measured, state["machine"])
    state["machine"] = {  # the machine of the latest run; each part's is in part_machine
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        **{k: machine.get(k) for k in ("cpu_model", "cpu_capability")},
        "device": device,
    }

    def save() -> None:
        state["table"] = table(state)
        atomic_write_json(args.out, state)

    parts = {
        "grid": run_grid,
        "finetune": run_finetune,
        "flops": run_flops,
        "lockstep": run_lockstep,
        "packed": run_packed,
        "steps": run_steps,
        "table": lambda *_: None,
    }
    for name in names:  # each part records its commit and machine (settle_part)
        started = time.perf_counter()
        parts[name](args, state, save)
        state.setdefault("part_seconds", {})[name] = time.perf_counter() - started
        state.setdefault("load_avg_1min_after", {})[name] = os.getloadavg()[0]
        save()
    print(table(state))


if __name__ == "__main__":
    main()
