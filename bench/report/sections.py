"""Sections 2–6: heads × freezing, seed spread, cost vs score, layer choices, learning curves."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

import bench.report.figures as figures
from bench.report.context import ReportContext, points, short_metric
from bench.report.html import Section, esc, figure, paragraph, table
from bench.report.layer_profile import profile_sentence
from bench.report.style import svg_data_uri, task_title
from bench.results import stats
from bench.results.curves import freeze_text, whole_number
from bench.results.references import lookup
from bench.results.render import html_table

if TYPE_CHECKING:
    from matplotlib.figure import Figure
from bench.results.geometry import geometry_rows
from bench.results.table7_agreement import TABLE7_ROWS, TABLE7_TASK
from bench.results.tables import GLUE_COLUMNS, build

GLUE_TASKS = {task for task, _, _ in GLUE_COLUMNS}


def _figure_or_note(fig: Figure | None, alt: str, caption: str) -> str:
    if fig is None:
        return paragraph("Nothing to plot for this source.", "note")
    return figure(svg_data_uri(fig), alt, caption)


# --------------------------------------------------------------------------- 2. heads × freezing


def heads_section(ctx: ReportContext) -> Section:
    """Grouped bars per task and the paper-style tables of ``python -m bench.results.tables``."""
    parts = [
        _figure_or_note(
            figures.heads_bars(ctx.cells, ctx.palette, ctx.multi_encoder),
            "Grouped bar charts of the main metric per head and freezing strategy",
            "Bars: mean over seeds; error bars: 95% bootstrap CI of the mean (none with one "
            "seed); dashed line: majority-class baseline. Failed runs are counted against the "
            "best constant prediction, which can be higher: the tables below show both.",
        )
    ]
    styles = ["heads"] + (["glue"] if GLUE_TASKS & set(ctx.inputs.table["task"]) else [])
    for style in styles:
        doc = build(ctx.inputs.table, style, ctx.inputs.refs)
        parts.append(f"<h3>{esc(doc.title)}</h3>")
        parts += [paragraph(note, "note") for note in doc.notes]
        parts += [f'<div class="scroll">{html_table(t, heading="h4")}</div>' for t in doc.tables]
    return Section("heads-freezing", "2. Heads × freezing", "\n".join(p for p in parts if p))


# --------------------------------------------------------------------------- 3. seed spread


def _reasons(group: pd.DataFrame) -> str:
    counts = group.loc[group["failed"], "fail_reason"].value_counts()
    return ", ".join(f"{n} {reason}" for reason, n in counts.items())


def spread_rows(ctx: ReportContext) -> list[list[object]]:
    """One row per setting: runs, failed runs and why, spread of the scores."""
    rows = []
    for keys, group in sorted(
        ctx.runs.groupby(stats.GROUP_KEYS), key=lambda kg: ctx.sort_key(kg[0])
    ):
        task, encoder, head, freeze, size = keys
        values = group["value"].dropna()
        rows.append(
            [
                task_title(task),
                encoder,
                head,
                freeze_text(task, encoder, freeze, size, ctx.sized),
                short_metric(group["metric"].iloc[0]),
                len(group),
                int(group["failed"].sum()),
                _reasons(group),
                points(values.min()) if len(values) else "",
                points(values.median()) if len(values) else "",
                points(values.max()) if len(values) else "",
                points(values.std(ddof=1), 2) if len(values) > 1 else "",
                " ".join(
                    points(v) if pd.notna(v) else "–" for v in group.sort_values("seed")["value"]
                ),
            ]
        )
    return rows


def spread_section(ctx: ReportContext) -> Section:
    """Every seed per cell, failed runs marked and counted."""
    runs = ctx.runs
    n_failed = int(runs["failed"].sum())
    rows = spread_rows(ctx)
    parts = [
        paragraph(
            f"{n_failed} of {len(runs)} runs failed: they crashed or diverged (no score), or "
            "scored at or below the best constant prediction (the best score one answer given "
            "to every example reaches on the split: at least the majority-class baseline, 0 "
            "for a correlation; the majority-class baseline where the results record no best "
            "constant) — the 'F1 = 0' collapse. Failed runs stay in the statistics when they "
            "have a score."
        ),
        _figure_or_note(
            figures.seed_strips(runs, ctx.palette, ctx.multi_encoder),
            "Strip plots of every seed per head and freezing strategy",
            "One point per seed over a box (quartiles); failed runs in vermilion.",
        ),
        table(
            [
                "Task",
                "Encoder",
                "Head",
                "Freeze",
                "Metric",
                "Runs",
                "Failed",
                "Why",
                "Min",
                "Median",
                "Max",
                "Std",
                "Per seed",
            ],
            rows,
            caption="Seed spread per cell (dev, ×100); rows with failed runs are highlighted.",
            numeric=[5, 6, 8, 9, 10, 11],
            row_classes=["failed" if r[6] else "" for r in rows],
        ),
    ]
    parts += evp_parts(ctx)
    return Section(
        "seed-spread",
        "3. Seed spread, failed runs and expected validation performance",
        "\n".join(parts),
    )


EVP_SEEDS = (1, 3, 5, 10)


def evp_rows(ctx: ReportContext, evp: pd.DataFrame) -> list[list[object]]:
    """One row per setting: expected best score after 1, 3, 5 and 10 seeds; best seen."""
    best = ctx.runs.groupby(stats.GROUP_KEYS)["value"].max()
    rows = []
    for keys, group in sorted(evp.groupby(stats.GROUP_KEYS), key=lambda kg: ctx.sort_key(kg[0])):
        task, encoder, head, freeze, size = keys
        by_n = group.set_index("n_seeds")
        n_max = int(by_n.index.max())
        cells = [
            f"{points(by_n.at[n, 'expected_max'])} ± {points(by_n.at[n, 'expected_max_std'], 2)}"
            if n in by_n.index
            else ""
            for n in EVP_SEEDS
        ]
        shown = freeze_text(task, encoder, freeze, size, ctx.sized)
        rows.append([task_title(task), encoder, head, shown, n_max, *cells, points(best[keys])])
    return rows


def evp_parts(ctx: ReportContext) -> list[str]:
    """Expected validation performance by number of seeds (Dodge et al. 2019), if N >= 2."""
    evp = stats.expected_validation_performance(ctx.inputs.table)
    fig = figures.evp_curves(evp, ctx.palette, ctx.multi_encoder)
    if fig is None:
        return []
    rows = evp_rows(ctx, evp)
    return [
        "<h3>Expected validation performance</h3>",
        paragraph(
            "What a practitioner who tries n seeds and keeps the best should expect (Dodge et al."
            " 2019, 'Show your work'): the expected maximum of n draws from each setting's "
            "observed dev scores, exact over the empirical distribution, with its standard "
            "deviation. Runs without a score (crashed, diverged) are left out; failed runs "
            "with a score count. A head that wins at n = 1 but not at n = 10 is a head whose "
            "advantage is luck of the seed."
        ),
        figure(
            svg_data_uri(fig),
            "Expected best dev score against number of seeds, per head and freezing strategy",
            "Lines: expected best of n seeds; bands: ± one standard deviation of that best; "
            "solid = full fine-tuning, dashed = other strategies.",
        ),
        table(
            [
                "Task",
                "Encoder",
                "Head",
                "Freeze",
                "Seeds",
                *[f"n = {n}" for n in EVP_SEEDS],
                "Best seen",
            ],
            rows,
            caption="Expected best dev score (×100) after n seeds ± its standard deviation; "
            "empty where fewer seeds ran.",
            numeric=[4, 5, 6, 7, 8, 9],
        ),
    ]


# --------------------------------------------------------------------------- 4. cost vs score


def cost_frame(ctx: ReportContext) -> pd.DataFrame:
    """Per setting: mean score, mean trainable parameters and training time, Pareto flags."""
    per_run = ctx.inputs.table.drop_duplicates(subset=stats.RUN_KEYS)
    costs = per_run.groupby(stats.GROUP_KEYS)[["trainable_params", "train_time_s"]].mean()
    frame = ctx.cells.merge(costs.reset_index(), on=stats.GROUP_KEYS, how="left")
    frame["pareto_params"] = False
    frame["pareto_time"] = False
    for _, group in figures.panels(frame):
        frame.loc[group.index, "pareto_params"] = figures.pareto_mask(
            group["trainable_params"], group["mean"]
        )
        frame.loc[group.index, "pareto_time"] = figures.pareto_mask(
            group["train_time_s"], group["mean"]
        )
    return frame


def cost_section(ctx: ReportContext) -> Section:
    """Score against trainable parameters and training time, with the Pareto front."""
    frame = cost_frame(ctx)
    front = frame[frame["pareto_params"] | frame["pareto_time"]]
    rows = [
        [
            task_title(r["task"]),
            r["encoder"],
            r["head_label"],
            ctx.freeze_text(r),
            points(r["mean"]),
            f"{r['trainable_params']:,.0f}" if pd.notna(r["trainable_params"]) else "",
            f"{r['train_time_s']:.1f}" if pd.notna(r["train_time_s"]) else "",
            " + ".join(
                n for n, f in (("parameters", r["pareto_params"]), ("time", r["pareto_time"])) if f
            ),
        ]
        for _, r in front.iterrows()
    ]
    parts = [
        paragraph(
            "A setting is on the Pareto front when no other setting of the same task scores "
            "at least as well for less: fewer trainable parameters (left) or less training "
            "time per run (right). Times are wall-clock seconds of training on the machine "
            "that ran the cell (see Provenance)."
        ),
        _figure_or_note(
            figures.cost_scatter(frame, ctx.palette, ctx.multi_encoder),
            "Scatter plots of score against trainable parameters and training time",
            "Mean dev score per setting against its cost; outlined points and the dashed step "
            "form the Pareto front.",
        ),
        table(
            [
                "Task",
                "Encoder",
                "Head",
                "Freeze",
                "Mean",
                "Trainable params",
                "Train s",
                "Pareto-optimal in",
            ],
            rows,
            caption="Pareto-optimal settings per task (dev, ×100).",
            numeric=[4, 5, 6],
        ),
    ]
    return Section("cost", "4. Cost vs score", "\n".join(parts))


# --------------------------------------------------------------------------- 5. layer analysis


def layer_frame(ctx: ReportContext) -> pd.DataFrame:
    """Bars of the layer figure: ours (dev/test) and published numbers per layer choice.

    A layer group is a (task, encoder, head, freeze) with at least two layer choices;
    a fine-tuned linear-head cell of the same task and encoder is added as ``finetune``
    (BERT's Table 7 layout).
    """
    table = ctx.inputs.table
    splits = [s for s in ("dev", "test") if (table["split"] == s).any()]
    per_split = {s: stats.cell_stats(table, split=s) for s in splits}
    dev = per_split["dev"] if "dev" in per_split else pd.DataFrame()
    rows = []
    if dev.empty:
        return pd.DataFrame()
    for (task, encoder, head, freeze), group in dev.groupby(["task", "encoder", "head", "freeze"]):
        choices = group["layers"].dropna()
        if choices.nunique() < 2:
            continue
        name = f"{head} · {freeze}"
        fine = dev[
            (dev["task"] == task)
            & (dev["encoder"] == encoder)
            & (dev["freeze"] == "full")
            & (dev["head"] == "linear")
        ]
        # Table 7's reference row: the one fine-tuned linear cell of the task, if that is
        # what it is (a sweep of layer choices under fine-tuning is a group of its own).
        members = [("finetune", fine.iloc[0])] if len(fine) == 1 and freeze != "full" else []
        paper_order = [name for name, _ in TABLE7_ROWS]
        layer_rows = sorted(
            ((str(r["layers"]), r) for _, r in group.iterrows()),
            key=lambda item: (
                paper_order.index(item[0]) if item[0] in paper_order else len(paper_order),
                item[0],
            ),
        )
        members += layer_rows
        for choice, r in members:
            for split in splits:
                s = per_split[split]
                hit = s[
                    (s["task"] == task)
                    & (s["encoder"] == encoder)
                    & (s["head_label"] == r["head_label"])
                    & (s["freeze_label"] == r["freeze_label"])
                ]
                if hit.empty:
                    continue
                h = hit.iloc[0]
                rows.append(
                    {
                        "task": task,
                        "encoder": encoder,
                        "group": name,
                        "choice": choice,
                        "series": f"ours, {split}",
                        "value": h["mean"],
                        "err_low": h["mean"] - h["min"],
                        "err_high": h["max"] - h["mean"],
                        "metric": h["metric"],
                        "n": h["n"],
                    }
                )
            refs = ctx.inputs.refs
            for _, ref in refs[(refs["task"] == task) & (refs["setting"] == choice)].iterrows():
                found = lookup(refs, ref["encoder"], task, choice, ref["split"])
                if found.empty or ref["metric"] != r["metric"]:
                    continue
                rows.append(
                    {
                        "task": task,
                        "encoder": encoder,
                        "group": name,
                        "choice": choice,
                        "series": f"{ref['model']} ({ref['source']}), {ref['split']}",
                        "value": ref["value"] / 100,
                        "err_low": 0.0,
                        "err_high": 0.0,
                        "metric": ref["metric"],
                        "n": np.nan,
                    }
                )
    return pd.DataFrame(rows)


def layer_section(ctx: ReportContext) -> Section:
    """Score by layer choice with the paper's numbers beside ours (when the sweep has them)."""
    frame = layer_frame(ctx)
    title = "5. Layer analysis"
    if frame.empty:
        return Section(
            "layers",
            title,
            paragraph(
                "This sweep has no layer choices (every cell of a head and freezing strategy "
                "reads the same layers), so there is nothing to compare here. Sweep "
                "head.layers (e.g. experiment=bert_table7) to fill this section."
            ),
        )
    parts = [
        paragraph(
            "Score by layer choice, frozen features into the same head, with a fine-tuned "
            "linear head as the reference row, as in BERT's Table 7. Published numbers are "
            "for the encoder named in the legend: where it differs from ours, compare the "
            "pattern across layer choices, not the absolute level."
        ),
        _figure_or_note(
            figures.layer_bars(frame, ctx.multi_encoder),
            "Bar charts of the score by layer choice with published numbers",
            "Ours: mean over seeds, error bars min–max; grey: published numbers.",
        ),
    ]
    profile = profile_sentence(ctx.inputs.table, ctx.inputs.refs, ctx.inputs.geometry)
    if profile is not None:  # a per-layer probe: what it and the geometry show
        parts.append(f"<h3>Layer profile</h3>{paragraph(profile)}")
        if ctx.inputs.geometry is not None:
            geo = geometry_rows(ctx.inputs.geometry)
            parts.append(
                table(
                    ["Layer", "Sentence share", "Word-to-sentence cosine", "Cross-sentence cosine"],
                    [
                        [
                            int(g["layer"]),
                            f"{g['sentence_share']:.3f}",
                            f"{g['word_to_sentence_cos']:.3f}",
                            f"{g['anisotropy']:.3f}",
                        ]
                        for _, g in geo.iterrows()
                    ],
                    caption=(
                        "Geometry of each layer's word states on the selection slice "
                        "(python -m bench.run.geometry): the share of their variance between "
                        "sentences, and mean cosines of a word to its sentence's mean and "
                        "of two words of different sentences."
                    ),
                    numeric=[0, 1, 2, 3],
                )
            )
    if TABLE7_TASK in set(frame["task"]):
        doc = build(ctx.inputs.table, "table7", ctx.inputs.refs)
        parts.append(f"<h3>{esc(doc.title)}</h3>")
        parts += [f'<div class="scroll">{html_table(t, heading="h4")}</div>' for t in doc.tables]
    ours = frame[frame["series"].str.startswith("ours")]
    rows = [
        [
            task_title(r["task"]),
            r["encoder"],
            r["group"],
            r["choice"],
            r["series"],
            points(r["value"]),
            "" if pd.isna(r["n"]) else int(r["n"]),
        ]
        for _, r in ours.iterrows()
    ]
    parts.append(
        table(
            ["Task", "Encoder", "Group", "Layers", "Series", "Mean", "Seeds"],
            rows,
            caption="Mean score by layer choice (×100).",
            numeric=[5, 6],
        )
    )
    return Section("layers", title, "\n".join(parts))


# --------------------------------------------------------------------------- 6. learning curves


def curve_frame(ctx: ReportContext) -> pd.DataFrame:
    """Per-epoch dev values of each task's main metric, with the run keys."""
    history = ctx.inputs.history
    if history.empty:
        return history
    main = ctx.inputs.table.dropna(subset=["main_metric"]).drop_duplicates("task")
    wanted = dict(zip(main["task"], main["main_metric"], strict=True))
    keep = (history["split"] == "dev") & (history["metric"] == history["task"].map(wanted))
    frame = history[keep].copy()
    frame["train_size"] = [whole_number(v) for v in frame["train_size"]]  # NA: whole split
    return frame


def curves_section(ctx: ReportContext) -> Section:
    """Dev main metric after each epoch, per setting."""
    frame = curve_frame(ctx)
    if frame.empty:
        return Section(
            "curves",
            "6. Learning curves",
            paragraph(
                "No per-epoch history in this source (results collected before "
                "history.csv existed, or no cell finished an epoch)."
            ),
        )
    epochs = sorted(frame["epoch"].dropna().astype(int).unique())
    rows = []
    groups = frame.groupby(stats.GROUP_KEYS)
    for (task, encoder, head, freeze, size), group in sorted(
        groups, key=lambda kg: ctx.sort_key(kg[0])
    ):
        means = group.groupby("epoch")["value"].mean()
        rows.append(
            [
                task_title(task),
                encoder,
                head,
                freeze_text(task, encoder, freeze, size, ctx.sized),
                group["seed"].nunique(),
                *[points(means.get(e, np.nan)) for e in epochs],
            ]
        )
    parts = [
        _figure_or_note(
            figures.learning_curves(frame, ctx.palette, ctx.multi_encoder),
            "Learning curves of the dev main metric per epoch",
            "Line: mean over seeds; band: min–max over seeds; colour = head, line style and "
            "marker = freezing strategy.",
        ),
        table(
            ["Task", "Encoder", "Head", "Freeze", "Seeds", *[f"Epoch {e + 1}" for e in epochs]],
            rows,
            caption="Mean dev main metric after each epoch (×100).",
            numeric=list(range(4, 5 + len(epochs))),
        ),
    ]
    return Section("curves", "6. Learning curves", "\n".join(parts))
