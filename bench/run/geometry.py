"""Measure the geometry of each layer's word states and commit it beside the results.

``python -m bench.run.geometry results/fair_table7_probe`` runs the experiment's encoder
over the words of its selection slice (held out from train, the same 500 sentences for
every cell; the reporting splits are never read), reads every word at its first sub-token
(the state a token head classifies) in every hidden layer, and writes the figures of
:mod:`bench.results.geometry` to ``results/<experiment>/geometry.json`` with the commit,
the versions and the encoder it measured. The experiment's README
(:mod:`bench.report.readme`) shows them beside the per-layer probe.

Exit status: 0 when written; 2 for bad input (a results directory whose experiment config
does not exist or whose task is not a token task, an existing file without ``--force``).

Examples:
    python -m bench.run.geometry results/fair_table7_probe
    python -m bench.run.geometry results/fair_table7_probe --out /tmp/geometry.json
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from bench.atomic import atomic_write_json
from bench.clock import utc_now
from bench.data.selection import SELECTION_SPLIT
from bench.data.tasks import get_task
from bench.errors import ConfigError
from bench.model.encoders import load_encoder, run_encoder
from bench.model.task_types import TokenTaskType, task_type
from bench.paths import config_dir
from bench.results.geometry import GEOMETRY_FILE, N_PAIRS, layer_geometry
from bench.run import provenance
from bench.run.preflight import compose_single_run
from bench.run.train import build_datamodule

log = logging.getLogger(__name__)


def compose(experiment: str, overrides: Sequence[str] = ()) -> DictConfig:
    """One cell's config of ``experiment`` (its data, selection slice and encoder).

    Args:
        experiment: The name of a file in ``conf/experiment/``.
        overrides: Further Hydra overrides (another encoder, a smaller slice).

    Returns:
        The composed config.

    Raises:
        ConfigError: When ``conf/experiment/<experiment>.yaml`` does not exist, or its task
            is not a token task (it has no words to read).
    """
    options = sorted(p.stem for p in (config_dir() / "experiment").glob("*.yaml"))
    if experiment not in options:
        raise ConfigError(
            f"no experiment config conf/experiment/{experiment}.yaml; valid: {', '.join(options)}"
        )
    cfg = compose_single_run(
        config_dir(), [f"experiment={experiment}", "hydra.mode=RUN", "seed=1", *overrides]
    )
    assert cfg is not None  # hydra.mode=RUN
    if not isinstance(task_type(get_task(cfg.task.name)), TokenTaskType):
        raise ConfigError(f"experiment {experiment}: task {cfg.task.name} has no words to read")
    return cfg


@torch.no_grad()
def word_states(cfg: DictConfig, batch_size: int) -> tuple[list[np.ndarray], np.ndarray, Any]:
    """Every layer's state of every word of the selection slice, at its first sub-token.

    Args:
        cfg: A token task's cell config with ``selection=heldout``.
        batch_size: Sentences per encoder pass.

    Returns:
        ``(states, sentence, info)``: one ``(n_words, hidden)`` array per hidden layer
        (0 = embeddings), the row of each word's sentence in the slice, the encoder's
        :class:`bench.model.encoders.EncoderInfo`.

    Raises:
        ConfigError: When the config holds out no selection slice.
    """
    cfg = cfg.copy()
    OmegaConf.update(cfg, "data.eval_batch_size", batch_size)
    datamodule = build_datamodule(cfg)
    datamodule.setup("fit")
    if SELECTION_SPLIT not in datamodule.eval_names:
        raise ConfigError(
            f"selection={cfg.selection.name}: no slice held out from train to read "
            "(valid here: selection=heldout)"
        )
    plain = OmegaConf.to_container(cfg.encoder, resolve=True)
    assert isinstance(plain, dict)
    encoder, info = load_encoder(cast(dict[str, Any], plain))
    encoder.eval()
    layers: list[list[np.ndarray]] = [[] for _ in range(info.num_layers + 1)]
    sentence: list[np.ndarray] = []
    offset = 0
    for batch in datamodule.val_dataloader()[datamodule.eval_names.index(SELECTION_SPLIT)]:
        hidden = run_encoder(encoder, batch, info.causal).hidden_states
        rows, cols = torch.nonzero(batch["word_pos"] >= 0, as_tuple=True)
        positions = batch["word_pos"][rows, cols]
        for j, h in enumerate(hidden):
            layers[j].append(h[rows, positions].float().numpy())
        sentence.append(rows.numpy() + offset)
        offset += int(batch["word_pos"].shape[0])
    return [np.concatenate(parts) for parts in layers], np.concatenate(sentence), info


def measure(
    experiment: str, overrides: Sequence[str] = (), batch_size: int = 64, seed: int = 0
) -> dict[str, Any]:
    """The ``geometry.json`` payload of an experiment.

    Args:
        experiment: The experiment config's name.
        overrides: Further Hydra overrides, recorded in the payload.
        batch_size: Sentences per encoder pass.
        seed: Seeds the draw of the cross-sentence word pairs.

    Returns:
        Per layer the figures of :func:`bench.results.geometry.layer_geometry`, with what
        was read and the provenance.
    """
    start = time.perf_counter()
    cfg = compose(experiment, overrides)
    states, sentence, info = word_states(cfg, batch_size)
    figures = {str(j): layer_geometry(x, sentence, seed=seed) for j, x in enumerate(states)}
    return {
        "experiment": experiment,
        "overrides": list(overrides),
        "task": str(cfg.task.name),
        "split": SELECTION_SPLIT,
        "sentences": len(np.unique(sentence)),
        "words": len(sentence),
        "read_at": "first sub-token of each word",
        "pairs": {"n": N_PAIRS, "seed": seed},
        "train_size": cfg.data.train_size,
        "data_seed": int(cfg.data_seed),
        "encoder": info.to_dict(),
        "layers": figures,
        "seconds": round(time.perf_counter() - start, 1),
        "finished_at": utc_now(),
        "git": provenance.git_commit(),
        "versions": provenance.versions(),
    }


def main(argv: list[str] | None = None) -> int:
    """Command line: measure and write ``geometry.json``; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="results/<experiment>")
    parser.add_argument(
        "--experiment", help="conf/experiment/<name>.yaml (default: the directory's name)"
    )
    parser.add_argument(
        "overrides", nargs="*", help="Hydra overrides of the experiment's config (recorded)"
    )
    parser.add_argument("--out", type=Path, help=f"default: <source>/{GEOMETRY_FILE}")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    args = parser.parse_intermixed_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    out = args.out or args.source / GEOMETRY_FILE
    if out.exists() and not args.force:
        print(f"error: {out} exists; pass --force to replace it", file=sys.stderr)
        return 2
    try:
        payload = measure(args.experiment or args.source.name, args.overrides, args.batch_size)
    except (ConfigError, HydraException, OmegaConfBaseException) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    atomic_write_json(out, payload)
    for layer, row in payload["layers"].items():
        print(
            f"layer {layer}: sentence share {row['sentence_share']:.3f}, word-to-sentence "
            f"cosine {row['word_to_sentence_cos']:.3f}, anisotropy {row['anisotropy']:.3f}"
        )
    print(f"wrote {out} ({payload['words']} words of {payload['sentences']} sentences)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
