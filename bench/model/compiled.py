"""``trainer.compile``: the encoder compiled with ``torch.compile`` while it trains.

A small encoder fine-tuned at a modest batch size leaves a GPU mostly idle: every step the
host dispatches about a thousand operators one by one (``python benchmarks/perf.py --parts
steps`` counts them), and the GPU waits for each launch. ``torch.compile`` traces the
encoder's forward and backward once and runs them as a few fused kernels, so the host has
far fewer launches to issue (``reduce-overhead`` also replays them as CUDA graphs).

The encoder is compiled with ``dynamic=True``: one graph for every batch length and size
(padding is dynamic, so a static graph would be recompiled for each new length). Compiling
costs time before the first step (the ``steps`` part's seconds to the first step show how
much, against the eager side's), and the compiled kernels round differently
(dropout draws its masks from another generator), so a compiled cell is another cell:
``trainer.compile`` is hashed when it is not ``false`` (:func:`bench.cell.config_hash`), except
for cells that read cached states, whose training runs no encoder forward to compile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.errors import ConfigError

if TYPE_CHECKING:  # torch only for the annotation: the check runs before torch is imported
    from torch import nn

#: ``torch.compile``'s modes, as ``trainer.compile`` names them (``false``: not compiled).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def check_compile_mode(value: Any) -> str | None:
    """The ``trainer.compile`` setting, checked.

    Args:
        value: The config value: ``false`` (or null) or one of :data:`COMPILE_MODES`.

    Returns:
        The mode, or None for no compilation.

    Raises:
        ConfigError: Naming the key, the value and the valid choices.
    """
    if value is None or value is False:
        return None
    if isinstance(value, str) and value in COMPILE_MODES:
        return value
    raise ConfigError(
        f"trainer.compile={value!r}: valid choices: false, {', '.join(COMPILE_MODES)}"
    )


def compile_encoder(encoder: nn.Module, mode: str) -> None:
    """Compile ``encoder`` in place (its parameters and ``state_dict`` keys are unchanged).

    Args:
        encoder: The encoder module (Hugging Face model, or its LoRA wrapper).
        mode: One of :data:`COMPILE_MODES`.
    """
    checked = check_compile_mode(mode)
    encoder.compile(dynamic=True, mode=None if checked == "default" else checked)
