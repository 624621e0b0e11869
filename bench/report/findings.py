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
from bench.report.context import (
    ReportContext,
    build_context,
    points,
    pvalue,
    short_metric,
    threshold_name,
)
from bench.report.devices import device_caveat
from bench.report.headline import (
    families,
    family_in,
    has_winner,
    headline_comparisons,
    headline_frame,
    holm_beyond_bonferroni,
    lead_count_text,
    setting_ties,
    simultaneous_words,
    study_label,
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
    calibration_tables,
    has_probabilities,
)
from bench.results.collect import read_table
from bench.results.curves import (
    CURVE_KEYS,
    change_verdict,
    changes_text,
    leaders_of,
    size_key,
    size_range,
    size_text,
    with_headline,
)
from bench.results.predictions import read_predictions
from bench.results.stats import SETTING_KEYS
from bench.results.studies import HEADLINE
from bench.results.tables import interval_text

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
    text = f"- **`{name}`** ({what_ran(ctx)})"
    for family, mine, compared in families(frame, shown):
        if family != HEADLINE:
            text += f" {study_label(ctx, family)}:"
        text += _family_finding(ctx, mine, compared, family != HEADLINE)
    partial = int((frame["n_heads"] < every).sum())
    if partial:  # only experiments where some heads did not run everywhere
        text += f" {partial_count_text(partial, len(frame), every)}"
    devices = device_caveat(ctx.inputs.cells, code=True)
    if devices is not None:  # only settings whose heads trained on different devices
        text += f" {devices}"
    failed = int(pd.to_numeric(ctx.runs["failed"]).sum())
    text += f" {failed} of {len(ctx.runs)} runs failed against the best constant prediction."
    calibration = calibration_sentence(ctx.inputs.predictions, table=ctx.inputs.table)
    if calibration is not None:  # only results whose predictions carry probabilities
        text += f" {calibration}"
    curves = curves_sentence(leaders_of(ctx.cells, ctx.comparisons), ctx.multi_encoder, shown)
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


def _family_finding(
    ctx: ReportContext, frame: pd.DataFrame, shown: pd.DataFrame, study: bool
) -> str:
    """One family's part of a findings bullet: its winners, the count, the largest margin.

    Args:
        ctx: The report context.
        frame: The family's :func:`bench.report.headline.headline_frame` rows.
        shown: Its :func:`bench.report.headline.headline_comparisons` rows.
        study: Whether the family is a study (its sentence starts in lower case).

    Returns:
        `` Best head by mean, with its verdict ... — frozen: ...; full: .... The winner is
        significantly ahead ... .`` (with a leading space).
    """
    every = int(ctx.cells["head_label"].nunique())
    ran = ctx.cells.groupby(list(SETTING_KEYS), sort=False)["head_label"].nunique()
    winners = []
    for freeze, group in frame.groupby("freeze_label", sort=False):
        per_task = ", ".join(
            f"{task_title(r['task'])}"
            + (f" ({size_text(r['train_size'])})" if r["freeze_shown"] != freeze else "")
            + _winner_text(
                r,
                shown,
                partial_note(int(r["n_heads"]), int(ran[tuple(r[k] for k in SETTING_KEYS)]), every),
            )
            for _, r in group.iterrows()
        )
        winners.append(f"{freeze}: {per_task}")
    clear = frame[frame["significant"] & has_winner(frame)]
    family = f"{test_words(frame)}, Holm over {tested_phrase(shown)}"
    counts = lead_count_text(frame, shown, f"{family}; a tier marks those", code=True)
    text = (
        f" {'b' if study else 'B'}est head by mean, with its verdict against the "
        f"other heads of its setting ({family}) — " + "; ".join(winners) + ". "
        f"{counts[0].upper()}{counts[1:]}"
    )
    if not clear.empty:
        top = clear.sort_values("margin", ascending=False).iloc[0]
        text += (
            f"; the largest margin over a runner-up: {task_title(top['task'])} "
            f"{top['freeze_shown']}, `{top['winner']}` over `{top['runner_up']}` by "
            f"{points(top['margin'])} {short_metric(top['metric'])} points "
            f"({simultaneous_words(int(top['n_comparisons']), family_in(top))}: "
            f"{interval_text(top['sim_low'], top['sim_high'])}; "
            f"Holm's p = {pvalue(top['p_holm'])}{holm_beyond_bonferroni(top)})"
        )
    return text + "."


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
    note = partial_note(scored, ran, every)
    return f" ({note})" if note else ""


def partial_note(scored: int, ran: int, every: int) -> str:
    """:func:`partial_text` without its brackets (``only 2 of 5 heads ran``, or ``""``)."""
    if scored >= every:
        return ""
    verb = "ran" if ran <= scored else "have a score"
    return f"only {scored} of {every} heads {verb}"


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


def _winner_text(r: pd.Series, shown: pd.DataFrame, partial: str = "") -> str:
    """One setting's best head after its name, with the heads it is not shown to beat.

    A best mean is a tie, not a finding, where the headline's own test (paired t-test,
    Holm over every headline comparison) does not put it ahead: the heads it ties with are
    named (:func:`bench.report.headline.setting_ties`), and those without a test (too few
    paired seeds) are named as not told apart.

    Args:
        r: A :func:`bench.report.headline.headline_frame` row.
        shown: :func:`bench.report.headline.headline_comparisons`.
        partial: :func:`partial_note` of the setting (``""`` when every head ran).

    Returns:
        `` `bilstm` 83.6 (*** over `mean_linear`)``, `` `last4_concat` 82.0 (tied with
        `linear`, `bilstm`)``, or why there is no winner.
    """
    constant = threshold_name(r["best_constant"], r["baseline"])
    if r["vs_constant"] == stats.NOT_ABOVE:
        return (
            f" no winner (best `{r['winner']}` {points(r['winner_mean'])}, not above "
            f"{constant} {points(r['threshold'])}" + (f"; {partial}" if partial else "") + ")"
        )
    notes = []
    if r["significant"]:
        notes.append(f"{r['tier']} over `{r['runner_up']}`")
    tied, untested, behind = setting_ties(shown, r)
    if behind:
        notes.append(
            "significantly behind " + ", ".join(f"`{h}`" for h in behind) + " on the seeds both ran"
        )
    if tied:
        notes.append("tied with " + ", ".join(f"`{h}`" for h in tied))
    if untested:
        notes.append(
            "not told apart from "
            + ", ".join(f"`{h}`" for h in untested)
            + " (no test: too few paired seeds)"
        )
    if r["vs_constant"] == stats.INTERVAL_REACHES:
        notes.append(f"its interval reaches {constant}")
    if partial:
        notes.append(partial)
    text = f" `{r['winner']}` {points(r['winner_mean'])}"
    return text + (f" ({'; '.join(notes)})" if notes else "")


def _led(head: str, low: int, high: int) -> str:
    """A head's run of sizes as the leader: ``at 100 examples``, ``from 100 to 400 examples``."""
    if low == high:
        return f"`{head}` at {size_text(low)}"
    return f"`{head}` from {size_range(low, high)}"


def _below_constant(curve: pd.DataFrame) -> str:
    """Where a curve's leader does not beat the best constant prediction (``""``: nowhere)."""
    below = curve[curve["leader_vs_constant"] == stats.NOT_ABOVE]["train_size"].tolist()
    if not below:
        return ""
    if len(below) == len(curve):
        return "no leader's mean beats the best constant prediction at any size"
    sizes = ", ".join(size_text(size) for size in below)
    return f"no leader's mean beats the best constant prediction at {sizes}"


def _sizes(sizes: list[object]) -> str:
    """Training sizes in words: ``100 examples``, ``100 examples and 2,000 examples``."""
    listed = [size_text(size) for size in sizes]
    return listed[0] if len(listed) == 1 else ", ".join(listed[:-1]) + " and " + listed[-1]


def curve_family(m: int) -> str:
    """A curve's Holm family in words: ``Holm over this curve's 24 comparisons``."""
    if m == 1:
        return "no correction (this curve's only comparison)"
    return f"Holm over this curve's {m} comparisons"


def _headline_disagrees(rows: pd.DataFrame, prefix: str, what: str) -> str:
    """Where the headline's family gives another verdict than a curve's, in words.

    Args:
        rows: :func:`bench.results.curves.with_headline` rows of one curve.
        prefix: ``margin`` (leader − runner-up) or ``change`` (leader − previous leader).
        what: The comparison in words (``lead``, ``change of lead``).

    Returns:
        ``over all 56 headline comparisons the lead at 2,000 examples is a tie`` (or
        ``... are ties``, ``... is significant``), ``""`` where they agree.
    """
    if "headline_comparisons" not in rows or rows["headline_comparisons"].isna().all():
        return ""
    tested = rows[rows[f"{prefix}_significant_all"].notna()]
    curve = tested[f"{prefix}_significant"].astype(bool)
    headline = tested[f"{prefix}_significant_all"].astype(bool)
    m = int(rows["headline_comparisons"].dropna().iloc[0])
    parts = []
    for verdict, differ in (("a tie", curve & ~headline), ("significant", ~curve & headline)):
        sizes = tested[differ]["train_size"].tolist()
        if sizes:
            noun = what if len(sizes) == 1 else what + "s"
            verb = "is" if len(sizes) == 1 else "are"
            shown = verdict if len(sizes) == 1 or verdict != "a tie" else "ties"
            parts.append(f"the {noun} at {_sizes(sizes)} {verb} {shown}")
    if not parts:
        return ""
    return f"over all {m} headline comparisons " + " and ".join(parts)


def _lead_ties(curve: pd.DataFrame) -> str:
    """Where a curve's leader is significantly ahead of its runner-up, naming the family.

    A leader by mean that the curve's own test (paired t-test, Holm over the curve's leader
    comparisons) does not put ahead of its runner-up ties with it there; sizes with a
    single head are not counted. Where the headline's family (every setting's comparisons
    together, :func:`bench.results.curves.with_headline`) gives a size another verdict,
    that is said too.

    Args:
        curve: :func:`bench.results.curves.curve_leaders` rows of one curve (with
            :func:`bench.results.curves.with_headline`'s columns, where known).

    Returns:
        ``with Holm over this curve's 20 comparisons, at no size significantly ahead of its
        runner-up: a tie at every size``, ``with Holm over this curve's 24 comparisons,
        significantly ahead of its runner-up only at 100 examples and 2,000 examples, tied
        at the other sizes; over all 56 headline comparisons the lead at 2,000 examples is
        a tie``, ``with ..., significantly ahead of its runner-up at every size``, or
        ``""`` when no size has a runner-up.
    """
    compared = curve[curve["runner_up"].apply(lambda v: isinstance(v, str))]
    if compared.empty:
        return ""
    ahead = compared[compared["margin_significant"].astype(bool)]
    if len(ahead) == len(compared):
        text = "significantly ahead of its runner-up at every size"
    elif ahead.empty:
        text = "at no size significantly ahead of its runner-up: a tie at every size"
    else:
        text = (
            f"significantly ahead of its runner-up only at {_sizes(ahead['train_size'].tolist())}"
            ", tied at the other sizes"
        )
    family = curve_family(int(compared["n_comparisons"].iloc[0]))
    other = _headline_disagrees(compared, "margin", "lead")
    return f"with {family}, {text}" + (f"; {other}" if other else "")


def curves_sentence(
    leaders: pd.DataFrame, multi_encoder: bool = False, shown: pd.DataFrame | None = None
) -> str | None:
    """One sentence on learning curves: the leader per curve, and each change of lead.

    A change is called significant only when the new leader is significantly ahead of the
    previous one at that size (:func:`bench.results.curves.curve_leaders`). Every verdict
    names its family, the curve's own comparisons; where the headline's family gives the
    same comparison another verdict, the sentence says so.

    Args:
        leaders: :func:`bench.results.curves.curve_leaders` rows of one experiment (a
            change of lead is stated with its simultaneous interval where it has one, else
            with its Holm p alone: never with the unadjusted interval).
        multi_encoder: Whether to name the encoder of each curve.
        shown: The headline's comparisons
            (:func:`bench.report.headline.headline_comparisons`), to compare verdicts
            with; None: not compared.

    Returns:
        The sentence, or None when no setting ran at two or more training sizes.
    """
    if leaders.empty:
        return None
    leaders = with_headline(leaders, shown)
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
        notes = [note for note in (_lead_ties(curve), _below_constant(curve)) if note]
        curves[-1] += f" ({'; '.join(notes)})" if notes else ""
        family = curve_family(int(curve["n_comparisons"].iloc[0]))
        for _, r in curve[curve["changed"].astype(bool)].iterrows():
            if pd.notna(r["change_p_holm"]):
                tier = r["change_tier"] if r["change_significant"] else "not significant"
                shown_interval = (
                    "simultaneous 95% interval "
                    f"{interval_text(r['change_sim_low'], r['change_sim_high'])}, "
                    if pd.notna(r.get("change_sim_low"))
                    else ""
                )
                other = _headline_disagrees(curve.loc[[r.name]], "change", "change of lead")
                detail = (
                    f"by {points(r['change'])} points ({shown_interval}"
                    f"{family}: p = {pvalue(r['change_p_holm'])}, {tier}"
                    + (f"; {other}" if other else "")
                    + ")"
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
            "seeds, Holm over each curve's leader comparisons"
            + (
                "; intervals simultaneous over the same comparisons, Bonferroni)"
                if "change_sim_low" in leaders
                else ")"
            )
            if changes
            else ""
        )
    )
    return text + (": " + "; ".join(changes) + "." if changes else ".")


#: A calibration setting: one task, encoder, freezing strategy and training size.
CALIBRATION_SETTING = ["task", "encoder", "freeze_label", "train_size"]
#: The metric of :func:`ece_table` (minus the ECE, so that a higher mean is better).
NEG_ECE = "neg_ece"


def calibration_sentence(
    predictions: pd.DataFrame, split: str = "dev", table: pd.DataFrame | None = None
) -> str | None:
    """One sentence on calibration: the best-calibrated head per setting, and scaling's effect.

    A head whose predictions are near chance can be well calibrated trivially (a constant
    confidence at the base rate has an ECE near 0), so the lowest ECE is looked for only
    among the heads that learned: those whose mean main score beats the best constant
    prediction by :func:`bench.results.stats.against_threshold` (the rule that counts
    failed runs and denies a setting a winner), each named with its accuracy. A head whose
    score's interval still reaches the constant is named with that caveat, and where no
    head's score beats it the sentence says that calibration says little there. Heads the
    lowest one is not shown to beat (the paired t-test of ECE over seeds, Holm over every
    comparison of the sentence, as the headline tests scores) are named as tied with it.
    Definitions and the temperature fit: :mod:`bench.results.calibration`.

    Args:
        predictions: ``predictions.parquet`` rows of one experiment.
        split: The reporting split described.
        table: The experiment's tidy results table, for each head's main score against
            the best constant prediction (:func:`score_standing`); without it every head
            counts and none is checked against a constant.

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
    lowest = lowest_ece(runs, score_standing(table, split) if table is not None else None)
    several = runs["encoder"].nunique() > 1
    every = int(runs["head_label"].nunique())
    best = []
    m = 0
    for freeze, group in lowest.groupby("freeze_label", sort=False):
        items, none = [], []
        for _, b in group.iterrows():
            name = f"{task_title(b['task'])}{' ' + str(b['encoder']) if several else ''}" + (
                f" ({size_text(b['train_size'])})" if b["sized"] else ""
            )
            if not isinstance(b["head"], str):
                none.append(name)
                continue
            m = max(m, int(b["n_comparisons"]))
            items.append(f"{name} `{b['head']}` {points(b['ece'])}{_ece_notes(b, every)}")
        if none:
            items.append(
                f"none in {', '.join(none)} (no head's mean score beats the best constant "
                "prediction: calibration there says little)"
            )
        best.append(f"{freeze}: {', '.join(items)}")
    text = (
        f"Calibration on {split} (ECE ×100 over {N_BINS} equal-width confidence bins, "
        "mean over seeds; the head's accuracy ×100 beside it): lowest per setting"
        + (
            " among the heads that learned, i.e. whose mean main score beats the best constant "
            "prediction (a head at chance can be calibrated trivially)"
            if table is not None
            else ""
        )
        + " — "
        + "; ".join(best)
    )
    if m:
        text += (
            f"; tied: not shown to differ from the lowest (paired t-test of ECE over seeds, "
            f"Holm over the {m} comparisons of each setting's lowest head with the others)"
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


def _ece_notes(b: pd.Series, every: int) -> str:
    """After a lowest-ECE head: its accuracy, and what qualifies it, in words."""
    text = f" at {points(b['accuracy'])} acc"
    notes = []
    if b["standing"] == stats.INTERVAL_REACHES:
        notes.append(
            f"the 95% t-interval of its {short_metric(b['score'])} reaches the best constant "
            f"prediction, {points(b['threshold'])}: calibration there says little"
        )
    if b["tied"]:
        notes.append(f"tied with {b['tied']}")
    if b["untested"]:
        notes.append(f"not told apart from {b['untested']} (no test: too few paired seeds)")
    if b.get("behind"):
        notes.append(f"significantly behind {b['behind']} on the seeds both ran")
    if b["left_out"]:
        notes.append(f"lower ECE only at chance, left out: {b['left_out']}")
    partial = partial_note(int(b["n_heads"]), int(b["n_heads"]), every)
    if partial:
        notes.append(partial)
    return text + (f" ({'; '.join(notes)})" if notes else "")


def score_standing(table: pd.DataFrame, split: str = "dev") -> pd.DataFrame:
    """Each head's mean main score against its failure threshold (the best constant prediction).

    The rule that counts failed runs and denies a setting a winner
    (:func:`bench.results.stats.against_threshold` of the task's main metric: accuracy for
    SST-2 and RTE, F1 for MRPC, MCC for CoLA).

    Args:
        table: Tidy results table.
        split: The reporting split.

    Returns:
        The :data:`~bench.results.stats.GROUP_KEYS`, ``metric``, ``threshold`` and
        ``standing`` (:data:`~bench.results.stats.ABOVE_THRESHOLD`,
        :data:`~bench.results.stats.INTERVAL_REACHES` or
        :data:`~bench.results.stats.NOT_ABOVE`).
    """
    cells = stats.cell_stats(table, split=split)
    cells["standing"] = [
        stats.against_threshold(mean, low, threshold)
        for mean, low, threshold in zip(
            cells["mean"], cells["t_low"], cells["threshold"], strict=True
        )
    ]
    return cells[[*stats.GROUP_KEYS, "metric", "threshold", "standing"]]


def ece_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Calibration runs as a tidy results table whose metric is minus the ECE.

    With it, :func:`bench.results.stats.compare_heads` tests ECE between heads exactly as
    the headline tests scores (paired by seed and batch order; crossed grids by the
    crossed analysis), and the best mean is the lowest ECE.

    Args:
        runs: :func:`bench.results.calibration.calibration_tables`' runs of one split.

    Returns:
        One row per run: the run keys, ``status`` ok, ``metric``/``main_metric``
        :data:`NEG_ECE` and ``value`` = −ECE.
    """
    keys = ["task", "encoder", "head", "head_label", "layers", "freeze", "freeze_label"]
    out = runs[[*keys, "seed", "train_size", "order_seed", "split"]].copy()
    return out.assign(status="ok", metric=NEG_ECE, main_metric=NEG_ECE, value=-runs["ece"])


def lowest_ece(runs: pd.DataFrame, standing: pd.DataFrame | None = None) -> pd.DataFrame:
    """The best-calibrated head that learned, per setting, and the heads tied with it.

    A setting is a task, encoder, freezing strategy and training size: a learning curve's
    minimum over its sizes would pick one size silently, so every size is its own setting
    (``sized``: named with its size where its task and encoder ran at several).

    Args:
        runs: :func:`bench.results.calibration.calibration_tables`' runs of one split.
        standing: :func:`score_standing`; heads whose mean main score is at or below the
            best constant prediction (:data:`~bench.results.stats.NOT_ABOVE`) are left out.
            None: every head counts.

    Returns:
        One row per setting, ordered by task, encoder and training size (the whole split
        last): the setting keys, ``sized``, ``n_heads`` (heads with probabilities),
        ``head`` (None where no head learned), ``ece``, ``accuracy`` (its mean accuracy),
        ``score`` (the main metric), ``threshold`` (its best constant prediction),
        ``standing`` (its main score against that), ``tied``, ``untested`` and ``behind``
        (backquoted head names, as :func:`bench.report.headline.setting_ties`),
        ``left_out`` (heads left out with a lower ECE, with their ECE and accuracy),
        ``n_comparisons`` (the Holm family of the ties: every setting's lowest head against
        each other head that learned).
    """
    table = stats.normalize_table(ece_table(runs))
    everyone = stats.cell_stats(table)
    everyone = everyone[everyone["n"] > 0]
    accuracy = stats.fill_axes(runs, ("train_size",)).groupby(stats.GROUP_KEYS)["accuracy"]
    everyone = everyone.merge(
        accuracy.mean().rename("accuracy").reset_index(), on=stats.GROUP_KEYS, how="left"
    )
    if standing is not None:
        everyone = everyone.merge(
            standing.rename(columns={"metric": "score", "threshold": "score_threshold"}),
            on=stats.GROUP_KEYS,
            how="left",
        )
    else:
        everyone = everyone.assign(score="", score_threshold=float("nan"), standing="")
    learned = everyone[everyone["standing"] != stats.NOT_ABOVE]
    keep = set(zip(*(learned[k] for k in stats.GROUP_KEYS), strict=True))
    runs_kept = table[[k in keep for k in zip(*(table[c] for c in stats.GROUP_KEYS), strict=True)]]
    comparisons = stats.compare_heads(runs_kept) if not runs_kept.empty else pd.DataFrame()
    shown = (
        stats.leader_comparisons(learned, comparisons) if not comparisons.empty else pd.DataFrame()
    )
    if not shown.empty:
        shown = stats.holm_all(shown)
    m = int(shown["n_comparisons_all"].iloc[0]) if not shown.empty else 0
    several = everyone.groupby(["task", "encoder"])["train_size"].nunique()
    rows = []
    for keys, group in everyone.groupby(CALIBRATION_SETTING, sort=False):
        setting = dict(zip(CALIBRATION_SETTING, keys, strict=True))
        ranked = stats.ranked_heads(group[group["standing"] != stats.NOT_ABOVE])
        row = {
            **setting,
            "sized": bool(several[(setting["task"], setting["encoder"])] > 1),
            "n_heads": int(group["head_label"].nunique()),
            "head": None,
            "ece": float("nan"),
            "accuracy": float("nan"),
            "score": "",
            "threshold": float("nan"),
            "standing": "",
            "tied": "",
            "untested": "",
            "behind": "",
            "left_out": "",
            "n_comparisons": m,
        }
        if not ranked.empty:
            top = ranked.iloc[0]
            tied, untested, behind = setting_ties(shown, top)
            lower = group[
                (group["standing"] == stats.NOT_ABOVE) & (-group["mean"] < -top["mean"])
            ].sort_values("mean", ascending=False)
            row.update(
                head=str(top["head_label"]),
                ece=-float(top["mean"]),
                accuracy=float(top["accuracy"]),
                score=str(top["score"]),
                threshold=float(top["score_threshold"]),
                standing=str(top["standing"]),
                tied=", ".join(f"`{h}`" for h in tied),
                untested=", ".join(f"`{h}`" for h in untested),
                behind=", ".join(f"`{h}`" for h in behind),
                left_out=", ".join(
                    f"`{r['head_label']}` {points(-r['mean'])} at {points(r['accuracy'])} acc"
                    for _, r in lower.iterrows()
                ),
            )
        rows.append(row)
    out = pd.DataFrame(rows)
    order = [
        (str(r["task"]), str(r["encoder"]), size_key(r["train_size"])) for _, r in out.iterrows()
    ]
    out["_order"] = order
    out = out.sort_values("_order", kind="stable").drop(columns="_order")
    return out.reset_index(drop=True)


def calibration_finding(source: Path, split: str = "dev") -> str | None:
    """:func:`calibration_sentence` of a results directory (``results/<experiment>``).

    Args:
        source: The results directory (its ``predictions.parquet`` and results table).
        split: The reporting split described.

    Returns:
        The sentence, or None when its predictions carry no class probabilities.
    """
    predictions = read_predictions(source)
    if not has_probabilities(predictions):
        return None
    has_table = any((source / f).is_file() for f in ("results.parquet", "results.csv"))
    table = stats.normalize_table(read_table(source)) if has_table else None
    return calibration_sentence(predictions, split, table)


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
