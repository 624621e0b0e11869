"""The report's calibration section: ECE, Brier, NLL and reliability diagrams per head.

Each score before and after temperature scaling; the diagrams pool the seeds. The section
appears only when the predictions carry class probabilities (GLUE classification cells made
since they were stored); the numbers come from :mod:`bench.results.calibration`, where the
definitions live.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from bench.report.context import ReportContext
from bench.report.html import Section, figure, paragraph, table
from bench.report.style import Palette, grid, ordered_freezes, svg_data_uri, task_title
from bench.results.calibration import (
    N_BINS,
    binning_text,
    calibration_summary,
    calibration_tables,
    has_probabilities,
    pooled_reliability,
)
from bench.results.curves import freeze_text, size_key, sized_settings, whole_number

TITLE = "7. Calibration"
#: The reliability diagrams' panels: one per setting and split (before / after scaling).
PANEL_KEYS = ["task", "encoder", "freeze_label", "train_size", "split"]


def definitions(n_bins: int = N_BINS) -> str:
    """What the columns mean, for the section's note."""
    return (
        f"ECE: expected calibration error over {binning_text(n_bins)}, each bin weighted by "
        "its share of the examples (×100). Brier: mean over examples of Σ_k (p_k − 1[y = k])², "
        "from 0 to 2 (twice scikit-learn's binary brier_score_loss). NLL: mean −ln p(label). "
        "After TS: the same after temperature scaling, softmax(logits / T) with one T > 0 per "
        "run fitted by minimising NLL on the selection slice held out from train, never on "
        "the reporting split; T leaves every prediction, hence accuracy, unchanged. "
        "Classification tasks only (no STS-B regression, no CoNLL token tasks)."
    )


def _mean_std(mean: float, std: float, scale: float = 1.0, digits: int = 3) -> str:
    """``mean ± std`` (only the mean with one seed; empty when missing)."""
    if pd.isna(mean):
        return ""
    if pd.isna(std):
        return f"{scale * mean:.{digits}f}"
    return f"{scale * mean:.{digits}f} ± {scale * std:.{digits}f}"


def summary_rows(summary: pd.DataFrame, palette: Palette) -> list[list[object]]:
    """One table row per freezing strategy and head of one task, encoder and split.

    A setting that ran at several training sizes has a row per size, its size shown.
    """
    freezes = ordered_freezes(summary["freeze_label"])
    heads = palette.heads
    sized = sized_settings(summary)

    def key(row: pd.Series) -> tuple[int, float, int, str]:
        head = str(row["head_label"])
        rank = heads.index(head) if head in heads else len(heads)
        return freezes.index(str(row["freeze_label"])), size_key(row["train_size"]), rank, head

    rows = []
    for _, r in sorted(summary.iterrows(), key=lambda ir: key(ir[1])):
        shown = freeze_text(r["task"], r["encoder"], r["freeze_label"], r["train_size"], sized)
        rows.append(
            [
                shown,
                r["head_label"],
                f"{int(r['seeds'])}" + ("" if r["scaled_seeds"] == r["seeds"] else "*"),
                _mean_std(r["accuracy_mean"], r["accuracy_std"], 100, 1),
                _mean_std(r["ece_mean"], r["ece_std"], 100, 1),
                _mean_std(r["ece_ts_mean"], r["ece_ts_std"], 100, 1),
                _mean_std(r["brier_mean"], r["brier_std"]),
                _mean_std(r["brier_ts_mean"], r["brier_ts_std"]),
                _mean_std(r["nll_mean"], r["nll_std"]),
                _mean_std(r["nll_ts_mean"], r["nll_ts_std"]),
                _mean_std(r["temperature_mean"], r["temperature_std"], 1, 2),
            ]
        )
    return rows


HEADER = [
    "Freeze",
    "Head",
    "Seeds",
    "Acc. (%)",
    "ECE (%)",
    "ECE after TS (%)",
    "Brier",
    "Brier after TS",
    "NLL",
    "NLL after TS",
    "T",
]


def largest_sizes(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows at the largest training size of each setting (the whole split counts largest).

    A learning curve's reliability diagrams would fill pages, one per size: the report
    draws its largest size (the tables list every size). ``train_size`` is returned as
    whole numbers (:func:`bench.results.curves.whole_number`).
    """
    frame = frame.assign(train_size=[whole_number(v) for v in frame["train_size"]])
    if frame.empty:
        return frame
    order = frame["train_size"].map(size_key)
    keys = [frame[k] for k in ("task", "encoder", "freeze_label")]
    largest = order.groupby(keys).transform("max")
    return frame[order == largest]


def reliability_diagram(
    points: pd.DataFrame, palette: Palette, multi_encoder: bool
) -> Figure | None:
    """Accuracy against confidence per bin, one line per head, before and after scaling.

    Args:
        points: :func:`~bench.results.calibration.pooled_reliability` rows.
        palette: Report palette.
        multi_encoder: Whether to name the encoder in panel titles.

    Returns:
        The figure (two panels per setting and split: before, after; a learning curve at
        its largest training size, :func:`largest_sizes`), or None without data.
    """
    if points.empty:
        return None
    sized = sized_settings(points)
    points = largest_sizes(points)
    freezes = palette.freezes
    settings = sorted(
        {tuple(k) for k in points[PANEL_KEYS].itertuples(index=False)},
        key=lambda k: (
            str(k[0]),
            str(k[1]),
            freezes.index(k[2]) if k[2] in freezes else len(freezes),
            size_key(k[3]),
            str(k[4]),
        ),
    )
    fig, axes = grid(2 * len(settings), columns=2, width=3.8, height=3.4)
    for i, (task, encoder, freeze, size, split) in enumerate(settings):
        where = (
            (points["task"] == task)
            & (points["encoder"] == encoder)
            & (points["freeze_label"] == freeze)
            & (points["train_size"] == size)
            & (points["split"] == split)
        )
        name = f"{task_title(task)} · {encoder}" if multi_encoder else task_title(task)
        freeze = freeze_text(task, encoder, freeze, size, sized)
        for ax, scaled in zip(axes[2 * i : 2 * i + 2], (False, True), strict=True):
            ax.plot([0, 1], [0, 1], color="#888", lw=0.8, ls="--")
            shown = points[where & (points["scaled"] == scaled)]
            for head, curve in shown.groupby("head_label", sort=True):
                curve = curve.sort_values("bin")
                ax.plot(
                    curve["confidence"],
                    curve["accuracy"],
                    color=palette.colour(str(head)),
                    marker="o",
                    ms=3.5,
                    lw=1.2,
                )
            if shown.empty:
                ax.text(0.5, 0.5, "no selection slice:\nnot scaled", ha="center", va="center")
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1)
            ax.set_xlabel("confidence (top-class probability)")
            ax.set_ylabel("accuracy")
            when = "after temperature scaling" if scaled else "as trained"
            ax.set_title(f"{name} · {freeze} · {split}\n{when}")
    heads = [h for h in palette.heads if h in set(points["head_label"])]
    handles = [Patch(color=palette.colour(h), label=h) for h in heads]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 8))
    fig.suptitle(
        f"Reliability: accuracy against confidence in {N_BINS} equal-width bins,\n"
        "examples pooled over seeds (dashed: perfect calibration)"
    )
    return fig


def calibration_section(ctx: ReportContext) -> Section | None:
    """ECE, Brier and NLL per head before and after temperature scaling, and reliability.

    Returns:
        The section, or None when no prediction carries class probabilities.
    """
    predictions = ctx.inputs.predictions
    if not has_probabilities(predictions):
        return None
    runs, bins = calibration_tables(predictions)
    if runs.empty:
        return None
    summary = calibration_summary(runs)
    parts = [paragraph(definitions(), "note")]
    unscaled = int(runs["temperature"].isna().sum())
    if unscaled == len(runs):
        parts.append(
            paragraph(
                "Temperature scaling is unavailable here: no run has a selection slice held "
                "out from train (selection=dev, or predictions stored before the slice's), "
                "and it is never fitted on the reporting split.",
                "warning",
            )
        )
    elif unscaled:
        parts.append(
            paragraph(
                f"{unscaled} of {len(runs)} runs have no selection slice (selection=dev): "
                "they are left out of the after-TS columns (* beside their seed count).",
                "warning",
            )
        )
    groups = summary.groupby(["task", "encoder", "split"], sort=True)
    for (task, encoder, split), group in groups:
        parts.append(
            table(
                HEADER,
                summary_rows(group, ctx.palette),
                caption=f"{task_title(task)}, encoder {encoder}, {split}: mean ± std over "
                "seeds; ECE and accuracy ×100.",
                numeric=list(range(2, len(HEADER))),
            )
        )
    fig = reliability_diagram(pooled_reliability(bins), ctx.palette, ctx.multi_encoder)
    if fig is not None:
        parts.append(
            figure(
                svg_data_uri(fig),
                "Reliability diagrams per head, before and after temperature scaling",
                f"Mean accuracy against mean confidence in each of {N_BINS} equal-width "
                "confidence bins with examples, all seeds' examples pooled (after scaling: each "
                "run at its own temperature). Points under the diagonal: overconfident."
                + (
                    " A setting that ran at several training sizes is drawn at its largest."
                    if sized_settings(bins)
                    else ""
                ),
            )
        )
    return Section("calibration", TITLE, "\n".join(parts))
