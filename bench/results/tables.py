"""Paper-style tables from the tidy results: Markdown, LaTeX and HTML.

``python -m bench.results.tables <results.csv | results dir | runs dir> --style glue|table7|heads``
writes ``<style>.md``, ``<style>.tex`` and ``<style>.html`` (atomically) and prints the
Markdown. Styles:

* ``heads`` — the headline table: per task and encoder, rows = heads, columns = freezing
  strategies, cells = main metric ``mean ± std (n=…, k failed)``, best per column bold,
  the majority-class baseline and the best constant prediction (what a failed run is
  counted against) and the paired test of the two best heads under the table, Holm-
  adjusted over the headline's family (:func:`headline_family`: every setting's best head
  against each other head of its setting, all tables together), so the adjusted p and the
  simultaneous interval are those of the report's and the README's verdicts. A study the
  experiment's preset names (:mod:`bench.results.studies`, read from the results' newest
  launch) is its own family, and its notes say so.
* ``glue`` — rows = encoder × head × freezing, columns = GLUE tasks in GLUE's order,
  an average column, and published RoBERTa-base dev numbers with deltas where they apply.
* ``table7`` — BERT's Table 7 (CoNLL-2003 dev F1 by layer choice, frozen features into a
  BiLSTM, vs. fine-tuning) with the paper's BERT-base numbers and the delta.

All numbers are ×100. Labels from the data are escaped for each format.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from bench.atomic import atomic_write
from bench.axes.freezing import freeze_rank
from bench.axes.heads import head_order
from bench.data.tasks import get_task
from bench.errors import HeadbenchError
from bench.results import stats
from bench.results.collect import collect, read_table
from bench.results.curves import size_key, size_text, sized_settings, split_by_size, whole_number
from bench.results.references import load_references, lookup
from bench.results.render import RENDERERS, Document, Table, to_markdown
from bench.results.studies import (
    HEADLINE,
    Study,
    comparisons_words,
    holm_families,
    results_studies,
)
from bench.results.table7_agreement import TABLE7_ROWS, TABLE7_TASK, agreement, agreement_sentence

STYLES = ("glue", "table7", "heads")
#: A row of the GLUE table: encoder, head, freezing label, and the training size where the
#: strategy ran at several (a learning curve; None elsewhere).
GlueRow = tuple[str, str, str, int | None]
GLUE_COLUMNS = [  # (task, split, header) in the GLUE leaderboard's order
    ("cola", "dev", "CoLA"),
    ("sst2", "dev", "SST-2"),
    ("mrpc", "dev", "MRPC"),
    ("stsb", "dev", "STS-B"),
    ("qqp", "dev", "QQP"),
    ("mnli", "dev", "MNLI-m"),
    ("mnli", "dev_mismatched", "MNLI-mm"),
    ("qnli", "dev", "QNLI"),
    ("rte", "dev", "RTE"),
    ("wnli", "dev", "WNLI"),
]
METRIC_NAMES = {
    "accuracy": "acc",
    "f1": "F1",
    "mcc": "MCC",
    "pearson": "Pearson",
    "spearman": "Spearman",
}
#: Head labels in table order, from the head registry (each preset, then its variants).
HEAD_ORDER = head_order()
# The fine-tuned setting the published GLUE numbers correspond to: RoBERTa's own head
# (dense + tanh + dropout + linear, randomly initialised) with the encoder trained.
GLUE_REFERENCE_SETTING = ("pooler-random", "full")
NO_BASELINE = (
    "No majority-class baseline for a correlation (constant predictions are uncorrelated); "
    "runs at or below 0 count as failed."
)
LEGEND = (
    "Cells: mean ± std over seeds (×100), n = seeds with a result; k failed = runs that "
    "errored, diverged or scored at or below the best constant prediction (the best score "
    "one answer given to every example reaches on that split: at least the majority-class "
    "baseline; 0 for a correlation; the majority-class baseline in results that record no "
    "best constant); ok runs at or below it stay in mean ± std."
)


# --------------------------------------------------------------------------- formatting


def pct(x: float) -> str:
    """A fraction as a percentage with one decimal (``—`` for NaN)."""
    return "—" if x is None or np.isnan(x) else f"{100 * x:.1f}"


def signed(x: float) -> str:
    """A signed number with one decimal and a true minus sign (``—`` for NaN)."""
    if x is None or np.isnan(x):
        return "—"
    return f"{x:+.1f}".replace("-", "−")


def interval_end(value: float, digits: int = 1, plus: bool = False) -> str:
    """One end of an interval, with enough decimals to show which side of 0 it is on.

    At ``digits`` decimals an end of 0.044 or −0.027 reads ``0.0``, which hides whether
    the interval excludes 0; such an end is written with two significant digits instead
    (``0.044``, ``-0.027``). Every interval of the tables' notes, the report's verdicts
    and the READMEs is written by this function (through :func:`interval_text`).

    Args:
        value: The end, in display units (points ×100 already).
        digits: Decimals shown normally.
        plus: The notes' style: a sign on every end and a true minus (``+0.044``,
            ``−0.027``); otherwise only a negative end is signed, with ``-``.

    Returns:
        The end as text; ``—`` for NaN or None.
    """
    if value is None or not np.isfinite(value):
        return "—"
    places = digits
    if value != 0 and float(f"{value:.{digits}f}") == 0:  # rounds to ±0 at this precision
        places = max(digits, 1 - math.floor(math.log10(abs(value))))
    text = f"{value:{'+' if plus else ''}.{places}f}"
    return text.replace("-", "−") if plus else text


def interval_text(
    low: float, high: float, scale: float = 100.0, digits: int = 1, plus: bool = False
) -> str:
    """An interval as ``low to high``, each end by :func:`interval_end`.

    Args:
        low: Its lower end.
        high: Its upper end.
        scale: Multiplies both ends first (100: [0, 1] scores shown as points ×100).
        digits: Decimals shown normally.
        plus: Sign both ends, with a true minus (the tables' notes).

    Returns:
        ``81.0 to 83.5``, ``0.044 to 0.6``, ``−0.027 to +1.0``; ``–`` when an end is
        undefined.
    """
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return "–"
    return (
        f"{interval_end(scale * float(low), digits, plus)} to "
        f"{interval_end(scale * float(high), digits, plus)}"
    )


def paired_runs_text(n_pairs: object, design: object) -> str:
    """The paired runs behind a comparison, in words.

    ``10 paired seeds``, or for runs that cross seeds with batch orders ``25 paired runs
    (5 seeds × 5 orders, crossed)``.

    Args:
        n_pairs: The pairs (:func:`bench.results.stats.compare_heads`' ``n_pairs``).
        design: Its ``design`` (:func:`bench.results.crossed.design_text`; empty or NaN
            where the runs are not crossed).
    """
    n = int(n_pairs)  # type: ignore[call-overload]
    if isinstance(design, str) and design:
        return f"{n} paired runs ({design}, crossed)"
    return f"{n} paired seed{'' if n == 1 else 's'}"


def paired_test_name(design: object) -> str:
    """The test behind a comparison's p, by its ``design``.

    The paired t-test, or for crossed runs its form with seed and order effects
    (:mod:`bench.results.crossed`).
    """
    if isinstance(design, str) and design:
        return "t-test with seed and order effects (Satterthwaite df)"
    return "paired t-test"


def cell_text(row: pd.Series | None) -> str:
    """``mean ± std (n=N, k failed)`` for one row of :func:`bench.results.stats.cell_stats`."""
    if row is None:
        return ""
    if row["n"] == 0:
        value = "—"
    elif np.isnan(row["std"]):
        value = pct(row["mean"])
    else:
        value = f"{pct(row['mean'])} ± {pct(row['std'])}"
    extra = f"n={row['n']}" + (f", {row['n_failed']} failed" if row["n_failed"] else "")
    return f"{value} ({extra})"


def metric_name(metric: str) -> str:
    """Short display name of a metric."""
    return METRIC_NAMES.get(metric, metric)


def _rank(value: str, preferred: Sequence[str]) -> tuple[int, str]:
    """Sort key: known names in the preferred order, then the rest alphabetically."""
    return (preferred.index(value) if value in preferred else len(preferred), str(value))


def _order(values: Sequence[str], preferred: Sequence[str]) -> list[str]:
    return sorted(values, key=lambda v: _rank(v, preferred))


def _bold_best(table: Table, col: int, means: Sequence[float], rows: Sequence[int]) -> None:
    """Bold the rows whose displayed mean equals the column's best (ties all bold; >= 2 rows)."""
    shown = {r: pct(m) for r, m in zip(rows, means, strict=True) if not np.isnan(m)}
    if len(shown) < 2:  # nothing to compare
        return
    best = max(float(v) for v in shown.values())
    table.bold.update((r, col) for r, v in shown.items() if float(v) == best)


# --------------------------------------------------------------------------- references


#: What a one-token head reads, by the encoder's summary token.
SUMMARY_WORDS = {"first": "the first token ([CLS] / <s>)", "last": "the last real token"}


def token_note(table: pd.DataFrame, task: str, encoder: str) -> str:
    """Which token the one-token heads (``linear``, ``pooler``, ``last4_concat``) read.

    Args:
        table: Normalised tidy results table (``summary_token`` column).
        task: The task (token tasks classify every token: no sentence).
        encoder: The encoder.

    Returns:
        A sentence for a table's caption, or ``""`` for a token task.
    """
    try:
        if get_task(task).kind == "token":
            return ""
    except KeyError:
        pass  # an unknown task is reported elsewhere; the encoder still read its token
    tokens = sorted(set(table.loc[table["encoder"] == encoder, "summary_token"].dropna()))
    read = " and ".join(SUMMARY_WORDS.get(t, t) for t in tokens) or SUMMARY_WORDS["first"]
    return f"One-token heads read {read}; bilstm and mean_linear read every token."


def _reference_note(refs: pd.DataFrame) -> str:
    first = refs.iloc[0]
    inferred = [r["task"] for _, r in refs.iterrows() if "inferred" in r["note"]]
    text = f"Published: {first['model']} — {first['source']} ({first['url']})."
    if inferred:
        text += f" Metric not stated by the source, inferred for: {', '.join(inferred)}."
    if any("unverified" in n for n in refs["note"]):
        text += " Some details are unverified; see the note column of bench/results/references.csv."
    return text


# --------------------------------------------------------------------------- heads


def family_note(m: int, studies: Sequence[tuple[str, int]] = ()) -> str:
    """The heads document's note on the notes under its tables: what they test, over what.

    ``""`` when no comparison has a test.

    Args:
        m: The comparisons with a test in the headline family (:func:`headline_family`).
        studies: Per study of the experiment (:mod:`bench.results.studies`) with a
            comparison, its name and its family's comparisons with a test: said apart.
    """
    if m < 1:
        return _studies_note(studies)
    family = comparisons_words(HEADLINE, m)
    interval = (
        f"its interval is simultaneous over the same {m} (Bonferroni)"
        if m > 1
        else "its interval is the 95% t-interval"
    )
    return (
        "Under each table, per freezing strategy: the best head by mean against the "
        "runner-up, paired by seed (crossed runs: by seed and batch order). Its p is "
        "Holm-adjusted over the headline family, every column's best head against each "
        f"other head of its column in every table here ({family} with a test), and "
        f"{interval}: the family of the report's and the README's verdicts, so a comparison "
        "has one adjusted p and one verdict wherever it is shown. The raw p and the Wilcoxon "
        "signed-rank p are unadjusted."
    ) + (f" {_studies_note(studies)}" if studies else "")


def _studies_note(studies: Sequence[tuple[str, int]]) -> str:
    """The note on the studies' notes: each is Holm-adjusted over its own family."""
    return " ".join(
        f"The {name}'s settings are not part of the headline: their notes are Holm-adjusted "
        f"over {comparisons_words(name, m)} with a test, and their intervals are simultaneous over "
        "the same."
        for name, m in studies
        if m > 0
    )


def unequal_seeds_text(pair: pd.Series, n_a: int, n_b: int, scale: float = 100.0) -> str:
    """Where a comparison pairs fewer runs than a head has: what the heads average on those.

    A table shows each head's mean over all its seeds; the paired difference is over the
    seeds both heads completed, so the two can disagree (``54.4`` and ``54.0`` in the
    table, a lead of ``0.1`` on the paired seeds).

    Args:
        pair: A :func:`bench.results.stats.compare_heads` row (``head_a``, ``head_b``,
            ``n_pairs``, ``design``, ``mean_a``, ``mean_b``: the means over the pairs).
        n_a: Runs with a score of ``head_a`` (:func:`bench.results.stats.cell_stats`' ``n``).
        n_b: The same of ``head_b``.
        scale: Multiplies the means (100: points ×100).

    Returns:
        ``fewer than linear's 10: on the 7 seeds both ran, pooler-random averages 54.4 and
        linear 54.3``, or ``""`` when the pairs are every run of both heads.
    """
    n = int(pair["n_pairs"])
    more = [(pair["head_a"], n_a), (pair["head_b"], n_b)]
    more = [(head, count) for head, count in more if count > n]
    if not more or n == 0:
        return ""
    crossed = isinstance(pair.get("design"), str) and bool(pair.get("design"))
    unit = "runs" if crossed else "seeds"
    fewer = " and ".join(f"{head}'s {count}" for head, count in more)
    return (
        f"fewer than {fewer}: on the {n} {unit} both ran, {pair['head_a']} averages "
        f"{scale * pair['mean_a']:.1f} and {pair['head_b']} {scale * pair['mean_b']:.1f}"
    )


def headline_family(
    cells: pd.DataFrame, comp: pd.DataFrame, studies: Sequence[Study] = ()
) -> pd.DataFrame:
    """Each setting's best head against every other head of it, Holm-corrected per family.

    The families of the report's verdict (:func:`bench.report.headline.headline_comparisons`)
    and of the README's, so the notes under the heads tables give the same adjusted p and
    simultaneous interval as they do: the headline, and each study apart
    (:func:`bench.results.studies.holm_families`).

    Args:
        cells: :func:`bench.results.stats.cell_stats` rows.
        comp: :func:`bench.results.stats.compare_heads` rows of the same table.
        studies: The experiment's studies (``()``: every setting is headline).

    Returns:
        :func:`bench.results.stats.leader_comparisons` with ``family`` and
        :func:`bench.results.stats.holm_all`'s columns per family (empty when no setting
        has two heads).
    """
    shown = stats.leader_comparisons(cells, comp)
    return shown if shown.empty else holm_families(shown, studies)


def _paired_note(shown: pd.DataFrame, best: pd.Series, runner: pd.Series) -> str | None:
    """A heads table's note: its column's best head against the runner-up.

    Args:
        shown: :func:`headline_family` of the document's table.
        best: The column's best head (:func:`bench.results.stats.cell_stats` row).
        runner: Its runner-up.

    Returns:
        The note, or None when the family has no such comparison.
    """
    if shown.empty:
        return None
    mask = (shown["head_a"] == best["head_label"]) & (shown["head_b"] == runner["head_label"])
    for column in stats.SETTING_KEYS:
        mask &= shown[column] == best[column]
    if not mask.any():
        return None
    row = shown[mask].iloc[0]
    freeze = best["freeze_label"]
    text = (
        f"{freeze}: {row['head_a']} − {row['head_b']} = {signed(100 * row['diff'])} over "
        f"{paired_runs_text(row['n_pairs'], row['design'])}"
    )
    unequal = unequal_seeds_text(row, int(best["n"]), int(runner["n"]))
    if unequal:
        text += f" ({unequal})"
    if row["reason"]:
        if pd.notna(row["ci_low"]):
            text += f"; 95% bootstrap CI {interval_text(row['ci_low'], row['ci_high'], plus=True)}"
        return text + f"; no test: {row['reason']}."
    m = int(row["n_comparisons_all"])
    family = comparisons_words(str(row.get("family", HEADLINE)), m)
    if pd.notna(row["sim_low"]):
        kind = "simultaneous 95% t-interval" if m > 1 else "95% t-interval"
        bonferroni = ", Bonferroni" if m > 1 else ""
        text += (
            f"; {kind} over {family}{bonferroni}: "
            f"{interval_text(row['sim_low'], row['sim_high'], plus=True)}"
        )
    wilcoxon = (
        f"Wilcoxon signed-rank p = {row['p_wilcoxon']:.3g}, unadjusted (smallest attainable "
        f"{row['p_wilcoxon_min']:.3g})"
        if not row["reason_wilcoxon"]
        else f"no Wilcoxon test: {row['reason_wilcoxon']}"
    )
    return (
        text + f"; {paired_test_name(row['design'])} p = {row['p']:.3g}, unadjusted; "
        f"Holm-adjusted over {family}: p = {row['p_holm_all']:.3g} ({row['significance']}); "
        f"{wilcoxon}."
    )


def _family_sizes(
    shown: pd.DataFrame, studies: Sequence[Study]
) -> tuple[int, list[tuple[str, int]]]:
    """The headline family's m, and each study's name and m (:func:`headline_family` rows)."""
    if shown.empty:
        return 0, []
    sizes = {str(f): int(g["n_comparisons_all"].iloc[0]) for f, g in shown.groupby("family")}
    return sizes.get(HEADLINE, 0), [(s.name, sizes[s.name]) for s in studies if s.name in sizes]


def _first(values: pd.Series) -> float:
    """The first finite value of a column (NaN when none)."""
    finite = values[np.isfinite(values.astype(float))]
    return float(finite.iloc[0]) if len(finite) else float("nan")


def threshold_note(group: pd.DataFrame, metric: str) -> str:
    """A heads table's note on its baselines and which one its failed runs are counted against.

    The count of failed runs uses :func:`bench.results.stats.failure_threshold`: the best
    constant prediction where the results record one, else the majority-class baseline,
    else 0 for a correlation. The note shows the majority-class baseline and, beside it, the
    best constant (with a training subset the majority class of the training labels can be
    the dev split's minority, so the two differ).

    Args:
        group: :func:`bench.results.stats.cell_stats` rows of one table (``baseline``,
            ``best_constant``).
        metric: The table's metric.

    Returns:
        One sentence, e.g. ``Majority-class baseline: 47.3; best constant prediction:
        52.7 (runs at or below the best constant count as failed).``
    """
    base, constant = _first(group["baseline"]), _first(group["best_constant"])
    if not np.isnan(constant):
        if np.isnan(base) and metric in stats.ZERO_THRESHOLD_METRICS:
            return (
                "No majority-class baseline for a correlation; best constant prediction: "
                f"{pct(constant)} (constant predictions are uncorrelated; runs at or below "
                "it count as failed)."
            )
        if np.isnan(base):
            return (
                f"Best constant prediction: {pct(constant)} (runs at or below it count as "
                f"failed); no majority-class baseline recorded for {metric_name(metric)}."
            )
        if pct(base) == pct(constant):
            return (
                f"Majority-class baseline = best constant prediction: {pct(constant)} (runs "
                "at or below it count as failed)."
            )
        return (
            f"Majority-class baseline: {pct(base)}; best constant prediction: "
            f"{pct(constant)} (runs at or below the best constant count as failed)."
        )
    if not np.isnan(base):
        return (
            f"Majority-class baseline: {pct(base)} (these results record no best constant "
            "prediction: runs at or below the baseline count as failed)."
        )
    if metric in stats.ZERO_THRESHOLD_METRICS:
        return NO_BASELINE
    return (
        f"No majority-class baseline or best constant prediction recorded for {metric}: "
        "failed runs are counted from their status only."
    )


def heads_document(
    table: pd.DataFrame, refs: pd.DataFrame, split: str = "dev", studies: Sequence[Study] = ()
) -> Document:
    """The headline heads × freezing tables, one per task and encoder.

    Args:
        table: Normalised tidy results table.
        refs: Reference numbers (:func:`bench.results.references.load_references`).
        split: Evaluation split.
        studies: The experiment's studies (:func:`bench.results.studies.results_studies`):
            their notes are adjusted over their own families.

    Returns:
        The document.
    """
    doc = Document("Heads × freezing", notes=[LEGEND])
    cells = stats.cell_stats(table, split=split)
    comp = stats.compare_heads(table, split=split)
    shown = headline_family(cells, comp, studies)
    note = family_note(*_family_sizes(shown, studies))
    if note:
        doc.notes.append(note)
    settings = sorted(
        split_by_size(cells, ["task", "encoder"]),  # a learning curve: a table per size
        key=lambda item: (
            _rank(item[0][0], [c[0] for c in GLUE_COLUMNS]),
            item[0][1],
            size_key(item[1]),
        ),
    )
    for (task, encoder), size, group in settings:
        heads = _order(group["head_label"].unique(), HEAD_ORDER)
        freezes = sorted(group["freeze_label"].unique(), key=freeze_rank)
        metric = group["metric"].iloc[0]
        t = Table(
            title=f"{task} — {encoder}" + ("" if size is None else f" — {size_text(size)}"),
            caption=f"{task}, {metric_name(metric)} on {split} (×100), encoder {encoder}: "
            f"rows are heads, columns freezing strategies. {token_note(table, task, encoder)}",
            header=["Head", *freezes],
            align=["l"] + ["r"] * len(freezes),
        )
        lookup_cell = {(r["head_label"], r["freeze_label"]): r for _, r in group.iterrows()}
        for head in heads:
            t.rows.append([head] + [cell_text(lookup_cell.get((head, f))) for f in freezes])
        for j, freeze in enumerate(freezes, start=1):
            present = [
                (i, lookup_cell[(h, freeze)])
                for i, h in enumerate(heads)
                if (h, freeze) in lookup_cell
            ]
            _bold_best(t, j, [r["mean"] for _, r in present], [i for i, _ in present])
            ranked = stats.ranked_heads(group[group["freeze_label"] == freeze])
            if len(ranked) >= 2:
                paired = _paired_note(shown, ranked.iloc[0], ranked.iloc[1])
                if paired:
                    t.notes.append(paired)
        t.notes.insert(0, threshold_note(group, metric))
        ref = lookup(refs, encoder, task, "finetune", split)
        if not ref.empty:
            head, freeze = GLUE_REFERENCE_SETTING
            r = ref.iloc[0]
            delta = _delta(table, r, encoder, task, split)
            text = f"Published {r['model']} fine-tuned: {r['value']:.1f} {metric_name(r['metric'])}"
            if not np.isnan(delta):
                text += f"; ours ({head}, {freeze}) on the same metric: Δ = {signed(delta)}"
            t.notes.append(text + ". " + _reference_note(ref))
        doc.tables.append(t)
    if not doc.tables:
        doc.notes.append("No results.")
    return doc


# --------------------------------------------------------------------------- glue


def glue_document(table: pd.DataFrame, refs: pd.DataFrame) -> Document:
    """GLUE-style table: tasks as columns, one row per encoder × head × freezing.

    Args:
        table: Normalised tidy results table.
        refs: Reference numbers.

    Returns:
        The document.
    """
    doc = Document("GLUE dev results", notes=[LEGEND])
    per_split = {s: stats.cell_stats(table, split=s) for s in ("dev", "dev_mismatched")}
    columns = []
    for task, split, name in GLUE_COLUMNS:
        sub = per_split[split]
        sub = sub[sub["task"] == task]
        if not sub.empty:
            columns.append((task, split, f"{name} ({metric_name(sub['metric'].iloc[0])})", sub))
    others = sorted(set(table["task"]) - {c[0] for c in GLUE_COLUMNS})
    if others:
        doc.notes.append(f"Not GLUE tasks, not shown: {', '.join(others)}.")
    if not columns:
        doc.notes.append("No GLUE results.")
        return doc
    # A freezing strategy that ran at several training sizes (a learning curve) has a row
    # per size; elsewhere the size is None and a row is as before.
    sized = {(e, f) for _, e, f in sized_settings(pd.concat([c[3] for c in columns]))}

    def row_key(r: pd.Series) -> GlueRow:
        encoder, freeze = r["encoder"], r["freeze_label"]
        size = whole_number(r["train_size"]) if (encoder, freeze) in sized else None
        return (encoder, r["head_label"], freeze, size)

    keys = sorted(
        {row_key(r) for *_, sub in columns for _, r in sub.iterrows()},
        key=lambda k: (k[0], _rank(k[1], HEAD_ORDER), freeze_rank(k[2]), size_key(k[3])),
    )
    lookups = [{row_key(r): r for _, r in c[3].iterrows()} for c in columns]
    found = {key: [lk.get(key) for lk in lookups] for key in keys}
    means = {
        key: [r["mean"] if r is not None and r["n"] else np.nan for r in rows]
        for key, rows in found.items()
    }
    avgs = {key: np.nan if np.isnan(m).any() else float(np.mean(m)) for key, m in means.items()}
    # an average only means something over >= 2 tasks and for rows that have all of them
    with_avg = len(columns) >= 2 and not np.isnan(list(avgs.values())).all()
    t = Table(
        title="",
        caption="GLUE dev sets, each task's main metric ×100"
        + (
            " (Avg: unweighted mean over the task columns, rows with every task only)."
            if with_avg
            else "."
        ),
        header=["Encoder", "Head", "Freeze", *[c[2] for c in columns]]
        + (["Avg"] if with_avg else []),
    )
    t.align = ["l", "l", "l"] + ["r"] * (len(t.header) - 3)
    for key in keys:
        avg = [pct(avgs[key])] if with_avg else []
        encoder, head, freeze, size = key
        shown = freeze if size is None else f"{freeze}, {size_text(size)}"
        t.rows.append([encoder, head, shown, *(cell_text(r) for r in found[key]), *avg])
    for j in range(len(columns)):
        _bold_best(t, 3 + j, [means[k][j] for k in keys], list(range(len(keys))))
    if with_avg:
        _bold_best(t, 3 + len(columns), [avgs[k] for k in keys], list(range(len(keys))))
    _glue_references(t, doc, keys, columns, table, refs)
    doc.tables.append(t)
    return doc


def _delta(table: pd.DataFrame, ref: pd.Series, encoder: str, task: str, split: str) -> float:
    """Ours minus published, on the reference's metric, for the reference's setting (NaN)."""
    head, freeze = GLUE_REFERENCE_SETTING
    ours = stats.cell_stats(table, metric=ref["metric"], split=split)
    ours = ours[
        (ours["task"] == task)
        & (ours["encoder"] == encoder)
        & (ours["head_label"] == head)
        & (ours["freeze_label"] == freeze)
    ]
    if ours.empty or ours["n"].iloc[0] == 0:
        return float("nan")
    return float(100 * ours["mean"].iloc[0] - ref["value"])


def _glue_references(
    t: Table,
    doc: Document,
    keys: list[GlueRow],
    columns: list[tuple[str, str, str, pd.DataFrame]],
    table: pd.DataFrame,
    refs: pd.DataFrame,
) -> None:
    """Append a published row and a delta row per encoder that has GLUE references."""
    head, freeze = GLUE_REFERENCE_SETTING
    for encoder in sorted({k[0] for k in keys}):
        found = [lookup(refs, encoder, task, "finetune", split) for task, split, _, _ in columns]
        if all(f.empty for f in found):
            continue
        used = pd.concat([f for f in found if not f.empty])
        ref_cells, delta_cells = [], []
        for (task, split, _, sub), ref in zip(columns, found, strict=True):
            if ref.empty:
                ref_cells.append("")
                delta_cells.append("")
                continue
            r = ref.iloc[0]
            main = sub["metric"].iloc[0]
            shown = "" if r["metric"] == main else f" ({metric_name(r['metric'])})"
            ref_cells.append(f"{r['value']:.1f}{shown}")
            delta = _delta(table, r, encoder, task, split)
            delta_cells.append("" if np.isnan(delta) else signed(delta))
        extra = [""] if t.header[-1] == "Avg" else []
        model = used["model"].iloc[0]
        t.rules.add(len(t.rows))
        t.rows.append([model, "published", "full", *ref_cells, *extra])
        if any(delta_cells):
            t.rows.append([encoder, f"Δ ours ({head}) − published", freeze, *delta_cells, *extra])
        doc.notes.append(
            f"{model}: published dev results of full fine-tuning with the model's own head "
            "(the RoBERTa paper reports dev medians of 5 runs; the README with the base numbers "
            "does not say); a metric in "
            "parentheses differs from our column's, and its delta uses our value of that "
            f"metric. {_reference_note(used)}"
        )


# --------------------------------------------------------------------------- table 7


def table7_document(table: pd.DataFrame, refs: pd.DataFrame) -> Document:
    """BERT Table 7 style: CoNLL-2003 F1 by layer choice, with the paper's numbers.

    Rows: fine-tune (``freeze=full``, ``head=linear``), then frozen features into the
    BiLSTM head by ``layers`` in the paper's order, then any other frozen BiLSTM layer
    choices found.

    Args:
        table: Normalised tidy results table.
        refs: Reference numbers.

    Returns:
        The document.
    """
    doc = Document("BERT Table 7: feature-based vs. fine-tuning on CoNLL-2003", notes=[LEGEND])
    dev = stats.cell_stats(table, split="dev")
    test = stats.cell_stats(table, split="test")
    dev, test = (d[d["task"] == TABLE7_TASK] for d in (dev, test))
    if dev.empty:
        doc.notes.append(f"No {TABLE7_TASK} results.")
        return doc
    paper = refs[(refs["task"] == TABLE7_TASK) & (refs["split"] == "dev")]
    paper = paper[paper["metric"] == "f1"]
    for encoder, group in dev.groupby("encoder", sort=True):
        tgroup = test[test["encoder"] == encoder]
        has_test = not tgroup.empty
        rows = _table7_rows(group)
        model = paper["model"].iloc[0] if not paper.empty else "paper"
        t = Table(
            title=encoder,
            caption=f"CoNLL-2003 NER, entity-level F1 ×100. Ours: encoder {encoder}, mean ± std "
            f"over seeds. Paper: {model} (Devlin et al. 2019, Table 7, dev F1)."
            + (
                ""
                if paper.empty or encoder == paper["encoder"].iloc[0]
                else f" The encoders differ ({encoder} vs. {model}): compare the pattern across "
                "rows, not the absolute numbers."
            ),
            header=["Layers", "Paper row", "Dev F1 (ours)", f"Dev F1 ({model})", "Δ"]
            + (["Test F1 (ours)"] if has_test else []),
            align=["l", "l", "r", "r", "r"] + (["r"] if has_test else []),
        )
        means = []
        for setting, paper_row, r in rows:
            ref = paper[paper["setting"] == setting]
            ref_value = ref["value"].iloc[0] if not ref.empty else np.nan
            delta = 100 * r["mean"] - ref_value if r["n"] else np.nan
            cells = [
                setting,
                paper_row,
                cell_text(r),
                "" if np.isnan(ref_value) else f"{ref_value:.1f}",
                "" if np.isnan(delta) else signed(delta),
            ]
            if has_test:
                tr = tgroup[
                    (tgroup["head_label"] == r["head_label"])
                    & (tgroup["freeze_label"] == r["freeze_label"])
                ]
                cells.append(cell_text(tr.iloc[0]) if not tr.empty else "")
            t.rows.append(cells)
            means.append(r["mean"] if r["n"] else np.nan)
        _bold_best(t, 2, means, list(range(len(means))))
        agree = agreement(table[table["encoder"] == encoder], refs)
        if not agree.empty:
            t.notes.append("Ordering of the frozen rows: " + agreement_sentence(agree.iloc[0]))
        if not paper.empty:
            t.notes.append(
                "Paper: fine-tuning approach vs. frozen BERT-base features into a two-layer "
                f"768-dim BiLSTM. {_reference_note(paper)}"
            )
        doc.tables.append(t)
    return doc


def _table7_rows(group: pd.DataFrame) -> list[tuple[str, str, pd.Series]]:
    """(setting, paper row name, stats row) in the paper's order, then extra layer choices."""
    names = dict(TABLE7_ROWS)
    out = []
    fine = group[(group["freeze"] == "full") & (group["head"] == "linear")]
    for _, r in fine.iterrows():
        label = "finetune" if len(fine) == 1 else f"finetune ({r['head_label']})"
        out.append((label, names["finetune"], r))
    frozen = group[(group["freeze"] == "frozen") & (group["head"] == "bilstm")]
    layers = frozen["layers"].fillna("default")
    for setting, paper_row in TABLE7_ROWS[1:]:
        for _, r in frozen[layers == setting].iterrows():
            out.append((setting, paper_row, r))
    for _, r in frozen[~layers.isin(names)].iterrows():
        out.append((str(r["layers"]) if pd.notna(r["layers"]) else "default", "", r))
    return out


# --------------------------------------------------------------------------- I/O


def load_source(path: str | Path) -> pd.DataFrame:
    """Load a results table from a file, a results directory or a runs directory.

    Args:
        path: ``results.csv``/``results.parquet``; a directory holding one of them
            (Parquet preferred); or a runs directory, collected with
            :func:`bench.results.collect.collect`.

    Returns:
        The normalised tidy table.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
    """
    path = Path(path)
    if path.is_file():
        return stats.normalize_table(read_table(path))
    if not path.is_dir():
        raise FileNotFoundError(path)
    for name in ("results.parquet", "results.csv"):
        if (path / name).is_file():
            return stats.normalize_table(read_table(path / name))
    return stats.normalize_table(collect([path], None))


def build(
    table: pd.DataFrame,
    style: str,
    refs: pd.DataFrame | None = None,
    studies: Sequence[Study] = (),
) -> Document:
    """Build the document of one style.

    Args:
        table: Tidy results table.
        style: One of :data:`STYLES`.
        refs: Reference numbers; default the packaged ones.
        studies: The experiment's studies (``heads``: their own Holm families).

    Returns:
        The document.

    Raises:
        ValueError: On an unknown style.
    """
    refs = load_references() if refs is None else refs
    table = stats.normalize_table(table)
    if style == "glue":
        return glue_document(table, refs)
    if style == "table7":
        return table7_document(table, refs)
    if style == "heads":
        return heads_document(table, refs, studies=studies)
    raise ValueError(f"unknown style {style!r}; choose from {', '.join(STYLES)}")


def write(doc: Document, out_dir: str | Path, style: str) -> list[Path]:
    """Write ``<style>.md``, ``<style>.tex`` and ``<style>.html`` atomically.

    Args:
        doc: The document.
        out_dir: Output directory (created).
        style: File stem.

    Returns:
        The written paths.
    """
    paths = []
    for ext, render in RENDERERS.items():
        text = render(doc)

        def write(handle: IO[Any], text: str = text) -> None:
            handle.write(text)

        paths.append(atomic_write(Path(out_dir) / f"{style}.{ext}", write))
    return paths


def applicable_styles(table: pd.DataFrame) -> list[str]:
    """The styles that have data in ``table`` (``all`` skips the empty ones)."""
    tasks = set(table["task"].dropna())
    has = {
        "glue": bool(tasks & {task for task, _, _ in GLUE_COLUMNS}),
        "table7": TABLE7_TASK in tasks,
        "heads": bool(tasks),
    }
    return [style for style in STYLES if has[style]]


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m bench.results.tables SOURCE --style STYLE [-o OUT_DIR]``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.results.tables",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("source", help="results.csv/.parquet, a results dir or a runs dir")
    parser.add_argument("--style", required=True, choices=[*STYLES, "all"])
    parser.add_argument(
        "-o",
        "--out",
        default=None,
        help="output directory (default: the directory of the results file, or SOURCE itself)",
    )
    args = parser.parse_args(argv)
    source = Path(args.source)
    out = Path(args.out) if args.out else (source.parent if source.is_file() else source)
    try:
        table = load_source(source)
        studies = results_studies(source.parent if source.is_file() else source)
    except (FileNotFoundError, HeadbenchError, ValueError) as err:  # names the file and why
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    refs = load_references()
    for style in applicable_styles(table) if args.style == "all" else (args.style,):
        doc = build(table, style, refs, studies)
        paths = write(doc, out, style)
        print(to_markdown(doc))
        print("wrote " + ", ".join(str(p) for p in paths))


if __name__ == "__main__":
    main()
