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

import pandas as pd

from bench.atomic import atomic_write
from bench.report.context import build_context, points, pvalue, short_metric, threshold_name
from bench.report.headline import (
    has_winner,
    headline_comparisons,
    headline_frame,
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
    size_range,
    size_text,
)
from bench.results.predictions import read_predictions

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
    winners = []
    for freeze, group in frame.groupby("freeze_label", sort=False):
        per_task = ", ".join(
            f"{task_title(r['task'])}"
            + (f" ({size_text(r['train_size'])})" if r["freeze_shown"] != freeze else "")
            + _winner_text(r)
            for _, r in group.iterrows()
        )
        winners.append(f"{freeze}: {per_task}")
    clear = frame[frame["significant"] & has_winner(frame)]
    text = (
        f"- **`{name}`** ({what_ran(ctx)}) Best head by mean — " + "; ".join(winners) + ". "
        f"The winner is significantly ahead of the runner-up in {len(clear)} of {len(frame)} "
        f"settings (paired t-test over seeds, Holm over {tested_phrase(shown)}; a tier marks "
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
    failed = int(pd.to_numeric(ctx.runs["failed"]).sum())
    text += f". {failed} of {len(ctx.runs)} runs failed against the best constant prediction."
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
    best = []
    for freeze, group in summary.groupby("freeze_label", sort=False):
        lowest = group.sort_values("ece_mean").groupby(["task", "encoder"], sort=True).head(1)
        per_task = ", ".join(
            f"{task_title(r['task'])}{f' {r.encoder}' if several else ''} `{r['head_label']}` "
            f"{points(r['ece_mean'])}"
            for _, r in lowest.sort_values(["task", "encoder"]).iterrows()
        )
        best.append(f"{freeze}: {per_task}")
    text = (
        f"Calibration on {split} (ECE ×100 over {N_BINS} equal-width confidence bins, "
        "mean over seeds): lowest — " + "; ".join(best)
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
