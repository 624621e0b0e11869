"""What a warm TorchInductor cache saves a process that compiles the encoder.

``trainer.compile`` compiles the encoder once per process (a ``gpu_pack`` worker's later
cells reuse the graphs: ``tests/test_compile.py``). Every device call starts on a fresh
machine, so each worker of each call would compile from nothing; ``benchmarks/device_run.sh
bench`` therefore carries TorchInductor's on-disk caches (``TORCHINDUCTOR_CACHE_DIR``: FX
graphs, AOT autograd, the generated kernels) from one call to the next. This script measures
what that is worth here, in one run: a fresh process compiles the encoder and times its
first training step and its first evaluation forward, into an empty cache folder; a second
fresh process does the same on the folder the first one filled::

    python benchmarks/compile_cache.py                  # minilm, trainer.compile=default
    python benchmarks/compile_cache.py --mode reduce-overhead --batch 32 --length 64

It prints both processes' seconds and the ratios. On a CPU the kernels are C++; on a GPU,
Triton's (whose compilation the cache also skips). Dynamo still traces the model each time.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the checkout's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def first_steps(encoder: str, mode: str, batch: int, length: int, cache: str) -> dict[str, Any]:
    """In this process: compile ``encoder``, time its first training step and eval forward.

    Args:
        encoder: A ``conf/encoder`` option.
        mode: A ``trainer.compile`` mode.
        batch: Examples in the batch.
        length: Tokens per example.
        cache: ``TORCHINDUCTOR_CACHE_DIR`` for this process (set before torch compiles).

    Returns:
        ``train_s`` (first forward + backward + optimizer step, compiling included),
        ``second_train_s``, ``eval_s`` (first forward in eval mode, no gradients), the
        device and torch's version.
    """
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    import torch
    from omegaconf import OmegaConf

    from bench.model.compiled import compile_encoder
    from bench.model.encoders import load_encoder, run_encoder
    from bench.paths import config_dir

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cfg = OmegaConf.to_container(OmegaConf.load(config_dir() / "encoder" / f"{encoder}.yaml"))
    model, info = load_encoder(cfg)  # type: ignore[arg-type]
    model.to(device).train()
    compile_encoder(model, mode)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 2000, (batch, length), generator=generator).to(device)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    def timed(fn: Any) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - started

    def train_step() -> None:
        run_encoder(model, inputs, info.causal).hidden_states[-1][:, 0].sum().backward()
        optimizer.step()
        optimizer.zero_grad()

    def eval_forward() -> None:
        model.eval()
        with torch.no_grad():
            run_encoder(model, inputs, info.causal)
        model.train()

    return {
        "train_s": timed(train_step),
        "second_train_s": timed(train_step),
        "eval_s": timed(eval_forward),
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
    }


def in_fresh_process(*args: Any) -> dict[str, Any]:
    """:func:`first_steps` in a new (spawned) process: nothing compiled in memory."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(first_steps, args)


def main(argv: list[str] | None = None) -> None:
    """Command line: ``--encoder``, ``--mode``, ``--batch``, ``--length``, ``--out``."""
    p = argparse.ArgumentParser(prog="python benchmarks/compile_cache.py")
    p.add_argument("--encoder", default="minilm")
    p.add_argument("--mode", default="default", help="trainer.compile's mode")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--length", type=int, default=40)
    p.add_argument("--out", type=Path, help="also write the figures here (JSON)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="headbench-inductor-") as cache:
        common = (args.encoder, args.mode, args.batch, args.length, cache)
        cold = in_fresh_process(*common)
        warm = in_fresh_process(*common)
    figures = {"settings": vars(args) | {"out": None}, "cold": cold, "warm": warm}
    print(
        f"{args.encoder}, trainer.compile={args.mode}, batch {args.batch} x {args.length} "
        f"tokens, on {cold['device']} (torch {cold['torch']}), each in a fresh process:"
    )
    print("| process | first training step | second | first eval forward |")
    print("|---|---|---|---|")
    for name, f in (("empty cache", cold), ("warm cache", warm)):
        print(
            f"| {name} | {f['train_s']:.1f} s | {f['second_train_s']:.2f} s | {f['eval_s']:.1f} s |"
        )
    print(
        f"warm / empty: first training step {warm['train_s'] / cold['train_s']:.2f}x, "
        f"first eval forward {warm['eval_s'] / cold['eval_s']:.2f}x"
    )
    if args.out:
        from bench.atomic import atomic_write_json

        atomic_write_json(args.out, figures)


if __name__ == "__main__":
    main()
