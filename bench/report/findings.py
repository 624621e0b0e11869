"""The README's Findings, generated from the committed reference results.

Every number comes from ``results/<experiment>/`` through the verdict of the HTML report
(:mod:`bench.report.headline`); nothing is typed by hand. The README holds the output
between two markers, and a test checks that it is current::

    python -m bench.report.findings --write README.md   # regenerate the block
    python -m bench.report.findings --check README.md   # exit 1 if it is stale
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from bench.atomic import atomic_write
from bench.report.context import build_context, points, pvalue, short_metric, threshold_name
from bench.report.devices import device_caveat
from bench.report.headline import (
    has_winner,
    headline_comparisons,
    headline_frame,
    test_words,
    tested_phrase,
)
from bench.report.inputs import load_inputs
from bench.report.layer_profile import profile_sentence
from bench.report.readme import what_ran
from bench.report.selfcheck import selfcheck_sentence
from bench.report.style import task_title
from bench.report.variance import variance_sentence
from bench.results import stats
from bench.results.calibration import (
    N_BINS,
    calibration_summary,
    calibration_tables,
    has_probabilities,
)
from bench.results.curves import (
    CURVE_KEYS,
    change_verdict,
    changes_text,
    leaders_of,
    size_key,
    size_range,
    size_text,
    whole_number,
)
from bench.results.predictions import read_predictions
from bench.results.stats import SETTING_KEYS

START, END = "<!-- findings:start -->", "<!-- findings:end -->"
ROOT = Path(__file__).resolve().parents[2]
#: The reference experiments under the evaluation protocol, in the order shown.
EXPERIMENTS = (
    "fair_heads",
    "fair_table7",
    "fair_table7_probe",
    "variance_seeds",
    "curves_sst2_rte",
    "fair_heads_gpu",
)


def experiment_finding(source: Path) -> str:
    """One bullet for one results directory: winners per setting, and how sure.

    A setting that compares fewer heads than the experiment has is marked where its winner
    is named, and the count says how many such settings it includes; settings whose heads
    trained on different devices are named (:func:`bench.report.devices.device_caveat`).

    Args:
        source: ``results/<experiment>``.

    Returns:
        A Markdown bullet (with a trailing newline).
    """
    ctx = build_context(load_inputs(source))
    frame = headline_frame(ctx)
    shown = headline_comparisons(ctx)
    name = source.name
    if frame.empty:
        return f"- **`{name}`**: no successful cell yet.\n"
    every = int(ctx.cells["head_label"].nunique())
    ran = ctx.cells.groupby(list(SETTING_KEYS), sort=False)["head_label"].nunique()
    winners = []
    for freeze, group in frame.groupby("freeze_label", sort=False):
        per_task = ", ".join(
            f"{task_title(r['task'])}"
            + (f" ({size_text(r['train_size'])})" if r["freeze_shown"] != freeze else "")
            + _winner_text(r)
            + partial_text(int(r["n_heads"]), int(ran[tuple(r[k] for k in SETTING_KEYS)]), every)
            for _, r in group.iterrows()
        )
        winners.append(f"{freeze}: {per_task}")
    clear = frame[frame["significant"] & has_winner(frame)]
    partial = int((frame["n_heads"] < every).sum())
    text = (
        f"- **`{name}`** ({what_ran(ctx)}) Best head by mean — " + "; ".join(winners) + ". "
        f"The winner is significantly ahead of the runner-up in {len(clear)} of {len(frame)} "
        f"settings ({test_words(frame)}, Holm over {tested_phrase(shown)}; a tier marks "
        "those)"
    )
    if not clear.empty:
        top = clear.sort_values("margin", ascending=False).iloc[0]
        text += (
            f"; the largest such margin: {task_title(top['task'])} {top['freeze_shown']}, "
            f"`{top['winner']}` over `{top['runner_up']}` by {points(top['margin'])} "
            f"{short_metric(top['metric'])} points (95% t-interval {points(top['ci_low'])} to "
            f"{points(top['ci_high'])}, p = {pvalue(top['p_holm'])})"
        )
    text += "."
    if partial:  # only experiments where some heads did not run everywhere
        text += f" {partial_count_text(partial, len(frame), every)}"
    devices = device_caveat(ctx.inputs.cells, code=True)
    if devices is not None:  # only settings whose heads trained on different devices
        text += f" {devices}"
    failed = int(pd.to_numeric(ctx.runs["failed"]).sum())
    text += f" {failed} of {len(ctx.runs)} runs failed against the best constant prediction."
    calibration = calibration_sentence(ctx.inputs.predictions)
    if calibration is not None:  # only results whose predictions carry probabilities
        text += f" {calibration}"
    curves = curves_sentence(leaders_of(ctx.cells, ctx.comparisons), ctx.multi_encoder)
    if curves is not None:  # only experiments with learning curves
        text += f" {curves}"
    variance = variance_sentence(ctx.inputs.table)
    if variance is not None:  # only studies that cross seeds with order seeds
        text += f" {variance}"
    profile = profile_sentence(ctx.inputs.table, ctx.inputs.refs, ctx.inputs.geometry)
    if profile is not None:  # only per-layer probes
        text += f" {profile}"
    selfcheck = selfcheck_sentence(ctx.inputs.selfcheck, ctx.inputs.table)
    if selfcheck is not None:  # only results with a committed selfcheck.json
        text += f" {selfcheck}"
    return text + "\n"


def partial_text(scored: int, ran: int, every: int) -> str:
    """After a setting's winner: how few of the experiment's heads it compares, if not all.

    A best head among some of the heads is not the best head of the experiment's set, so
    the setting stays in the list (its result is measured) but says how many heads it
    compares.

    Args:
        scored: Heads with a mean in the setting (its verdict compares these).
        ran: Heads with a cell in the setting (one whose runs all failed has no mean).
        every: Heads the experiment has (any setting).

    Returns:
        ``""`` when the setting compares every head, else `` (only 2 of 5 heads ran)`` or,
        when some ran without a score, `` (only 2 of 5 heads have a score)``.
    """
    if scored >= every:
        return ""
    verb = "ran" if ran <= scored else "have a score"
    return f" (only {scored} of {every} heads {verb})"


def partial_count_text(partial: int, settings: int, every: int) -> str:
    """The caveat of the count: how many of its settings compare fewer than every head.

    Args:
        partial: Settings whose verdict compares fewer than ``every`` heads.
        settings: Settings counted.
        every: Heads the experiment has.

    Returns:
        A sentence, e.g. ``1 of the 6 settings compares fewer than the 5 heads (marked
        "only ... of 5 heads"): its winner is the best of the heads that ran there, not of all
        5.``
    """
    verb, whose = (
        ("compares", "its winner is") if partial == 1 else ("compare", "their winners are")
    )
    return (
        f"{partial} of the {settings} settings {verb} fewer than the {every} heads (marked "
        f'"only ... of {every} heads"): {whose} the best of the heads that ran there, not '
        f"of all {every}."
    )


def _winner_text(r: pd.Series) -> str:
    """One setting's winner after its name: `` `bilstm` 83.6 (***)``, or why there is none."""
    constant = threshold_name(r["best_constant"], r["baseline"])
    if r["vs_constant"] == stats.NOT_ABOVE:
        return (
            f" no winner (best `{r['winner']}` {points(r['winner_mean'])}, not above "
            f"{constant} {points(r['threshold'])})"
        )
    reaches = r["vs_constant"] == stats.INTERVAL_REACHES
    return (
        f" `{r['winner']}` {points(r['winner_mean'])}"
        + (f" ({r['tier']})" if r["significant"] else "")
        + (f" (its interval reaches {constant})" if reaches else "")
    )


def _led(head: str, low: int, high: int) -> str:
    """A head's run of sizes as the leader: ``at 100 examples``, ``from 100 to 400 examples``."""
    if low == high:
        return f"`{head}` at {size_text(low)}"
    return f"`{head}` from {size_range(low, high)}"


def _below_constant(curve: pd.DataFrame) -> str:
    """Where a curve's leader does not beat the best constant prediction, in brackets."""
    below = curve[curve["leader_vs_constant"] == stats.NOT_ABOVE]["train_size"].tolist()
    if not below:
        return ""
    if len(below) == len(curve):
        return " (no leader's mean beats the best constant prediction at any size)"
    sizes = ", ".join(size_text(size) for size in below)
    return f" (no leader's mean beats the best constant prediction at {sizes})"


def curves_sentence(leaders: pd.DataFrame, multi_encoder: bool = False) -> str | None:
    """One sentence on learning curves: the leader per curve, and each change of lead.

    A change is called significant only when the new leader is significantly ahead of the
    previous one at that size (:func:`bench.results.curves.curve_leaders`).

    Args:
        leaders: :func:`bench.results.curves.curve_leaders` rows of one experiment.
        multi_encoder: Whether to name the encoder of each curve.

    Returns:
        The sentence, or None when no setting ran at two or more training sizes.
    """
    if leaders.empty:
        return None
    curves: list[str] = []
    changes: list[str] = []
    for (task, encoder, freeze), curve in leaders.groupby(CURVE_KEYS, sort=True):
        name = task_title(task) + (f" ({encoder})" if multi_encoder else "") + f" {freeze}"
        sizes = size_range(curve["train_size"].iloc[0], curve["train_size"].iloc[-1])
        runs: list[list] = []  # consecutive sizes led by one head: [head, first, last]
        for _, r in curve.iterrows():
            if runs and runs[-1][0] == r["leader"]:
                runs[-1][2] = r["train_size"]
            else:
                runs.append([r["leader"], r["train_size"], r["train_size"]])
        if len(runs) == 1:
            curves.append(f"{name} ({sizes}): `{runs[0][0]}` at every size")
        else:
            curves.append(f"{name}: " + ", then ".join(_led(*run) for run in runs))
        curves[-1] += _below_constant(curve)
        for _, r in curve[curve["changed"].astype(bool)].iterrows():
            if pd.notna(r["change_p_holm"]):
                tier = r["change_tier"] if r["change_significant"] else "not significant"
                detail = (
                    f"by {points(r['change'])} points (95% t-interval "
                    f"{points(r['change_t_low'])} to {points(r['change_t_high'])}, "
                    f"p = {pvalue(r['change_p_holm'])}, {tier})"
                )
            else:
                detail = f"({change_verdict(r)})"
            changes.append(
                f"{name} at {size_text(r['train_size'])}, `{r['leader']}` overtakes "
                f"`{r['previous']}` {detail}"
            )
    text = (
        "Learning curves (dev, leading head by mean at each training size): "
        + "; ".join(curves)
        + f". The lead {changes_text(leaders)}"
        + (
            " (the new leader ahead of the previous one at that size: paired t-test over "
            "seeds, Holm over each curve's leader comparisons)"
            if changes
            else ""
        )
    )
    return text + (": " + "; ".join(changes) + "." if changes else ".")


def calibration_sentence(predictions: pd.DataFrame, split: str = "dev") -> str | None:
    """One sentence on calibration: the best-calibrated head per setting, and scaling's effect.

    Definitions and the temperature fit: :mod:`bench.results.calibration`.

    Args:
        predictions: ``predictions.parquet`` rows of one experiment.
        split: The reporting split described.

    Returns:
        The sentence, or None when no prediction of ``split`` carries class probabilities
        (older results, regression and token tasks).
    """
    if not has_probabilities(predictions):
        return None
    runs, _ = calibration_tables(predictions)
    runs = runs[runs["split"] == split]
    if runs.empty:
        return None
    summary = calibration_summary(runs)
    several = summary["encoder"].nunique() > 1
    every = int(summary["head_label"].nunique())
    best = []
    for freeze, group in summary.groupby("freeze_label", sort=False):
        per_task = ", ".join(
            f"{task_title(b.task)}{f' {b.encoder}' if several else ''}"
            + (f" ({size_text(b.train_size)})" if b.sized else "")
            + f" `{b.head}` {points(b.ece)}"
            + partial_text(b.n_heads, b.n_heads, every)
            for b in lowest_ece(group)
        )
        best.append(f"{freeze}: {per_task}")
    text = (
        f"Calibration on {split} (ECE ×100 over {N_BINS} equal-width confidence bins, "
        "mean over seeds): lowest per setting — " + "; ".join(best)
    )
    scaled = runs.dropna(subset=["temperature"])
    if scaled.empty:
        return text + "; temperature scaling unavailable (no selection slice held out)."
    lowered = int((scaled["ece_ts"] < scaled["ece"]).sum())
    return text + (
        f"; temperature scaling fitted on the selection slice lowers ECE in {lowered} of "
        f"{len(scaled)} runs (mean {points(scaled['ece'].mean())} → "
        f"{points(scaled['ece_ts'].mean())}; median T "
        f"{scaled['temperature'].median():.2f})."
    )


class LowestEce(NamedTuple):
    """The best-calibrated head of one setting (:func:`lowest_ece`).

    Attributes:
        task: The task.
        encoder: The encoder.
        train_size: The training size (``stats.WHOLE_SPLIT``: the whole split).
        sized: Whether the task and encoder ran at several sizes (then the size is named).
        head: The head with the lowest mean ECE.
        ece: Its mean ECE over seeds.
        n_heads: Heads with probabilities in the setting.
    """

    task: str
    encoder: str
    train_size: int
    sized: bool
    head: str
    ece: float
    n_heads: int


def lowest_ece(group: pd.DataFrame) -> list[LowestEce]:
    """The head with the lowest mean ECE in each setting of one freezing strategy.

    A setting is a task, encoder and training size: a learning curve's minimum over its
    sizes would pick one size silently, so every size is its own setting, named with its
    size where its task and encoder ran at several.

    Args:
        group: :func:`bench.results.calibration.calibration_summary` rows of one freezing
            strategy and split.

    Returns:
        One :class:`LowestEce` per setting, ordered by task, encoder and training size
        (the whole split last).
    """
    frame = group.assign(size=group["train_size"].map(whole_number))
    frame = frame.sort_values(["ece_mean", "head_label"], kind="stable")
    several = frame.groupby(["task", "encoder"])["size"].nunique()
    heads = frame.groupby(["task", "encoder", "size"])["head_label"].nunique()
    rows = [
        LowestEce(
            task=str(r["task"]),
            encoder=str(r["encoder"]),
            train_size=int(r["size"]),
            sized=bool(several[(r["task"], r["encoder"])] > 1),
            head=str(r["head_label"]),
            ece=float(r["ece_mean"]),
            n_heads=int(heads[(r["task"], r["encoder"], r["size"])]),
        )
        for _, r in frame.groupby(["task", "encoder", "size"], sort=False).head(1).iterrows()
    ]
    return sorted(rows, key=lambda row: (row.task, row.encoder, size_key(row.train_size)))


def calibration_finding(source: Path, split: str = "dev") -> str | None:
    """:func:`calibration_sentence` of a results directory (``results/<experiment>``).

    Args:
        source: The results directory (its ``predictions.parquet``).
        split: The reporting split described.

    Returns:
        The sentence, or None when its predictions carry no class probabilities.
    """
    return calibration_sentence(read_predictions(source), split)


def summary(results: Path = ROOT / "results") -> str:
    """The Findings block: one bullet per reference experiment under the protocol.

    Args:
        results: The directory holding ``fair_heads/``, ``fair_table7/``.

    Returns:
        Markdown bullet lines; an experiment without results says so.
    """
    lines = []
    for name in EXPERIMENTS:
        source = results / name
        if any((source / f).is_file() for f in ("results.parquet", "results.csv")):
            lines.append(experiment_finding(source))
        else:
            lines.append(f"- **`{name}`**: not run yet (`python -m bench -m experiment={name}`).\n")
    return "".join(lines)


def replace_block(text: str, block: str) -> str:
    """``text`` with the part between the findings markers replaced by ``block``.

    Raises:
        ValueError: If the markers are missing.
    """
    pattern = re.compile(re.escape(START) + r"\n.*?" + re.escape(END), flags=re.S)
    if not pattern.search(text):
        raise ValueError(f"no {START} ... {END} block found")
    return pattern.sub(lambda _: f"{START}\n{block}{END}", text, count=1)


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--write FILE`` regenerates the block, ``--check FILE`` verifies it."""
    parser = argparse.ArgumentParser(prog="python -m bench.report.findings")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", type=Path, metavar="FILE")
    mode.add_argument("--check", type=Path, metavar="FILE")
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    args = parser.parse_args(argv)
    path = args.write or args.check
    text = path.read_text(encoding="utf-8")
    updated = replace_block(text, summary(args.results))
    if args.check:
        if updated != text:
            print(f"{path}: the findings block is stale; run --write {path}", file=sys.stderr)
            return 1
        print(f"{path}: the findings block is current")
        return 0
    atomic_write(path, lambda handle: handle.write(updated))
    print(f"wrote the findings block of {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
