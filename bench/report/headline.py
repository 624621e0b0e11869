"""Section 1: the verdict under equal budget.

Per task × encoder × freezing strategy (× training size, for a learning curve; such
settings are named with their size): the winning head (best mean main metric on the
reporting split), its margin over every other head paired by seed with a Student-t
interval, the paired t-test Holm-corrected over *every* comparison the headline shows
(winner vs each other head, all settings together), the significance tier, the runs
that failed against the best constant prediction, and, above all that, the budget every
head had, in words (:mod:`bench.report.budget`). Expected validation performance against
the number of trials follows when the sweep ran a search.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

import bench.report.figures as figures
from bench.report.budget import (
    budget_lines,
    dev_selected,
    missing_heads,
    tuning_seconds,
    unequal_settings,
)
from bench.report.context import (
    ReportContext,
    constant_cell,
    points,
    pvalue,
    short_metric,
    threshold_name,
)
from bench.report.devices import device_caveat
from bench.report.html import Section, bullet_list, esc, figure, paragraph, table
from bench.report.per_example import N_RESAMPLES, per_example_row
from bench.report.preset_grid import unrun_text
from bench.report.style import svg_data_uri, task_title
from bench.results import stats
from bench.results.curves import freeze_text
from bench.results.stats import ALPHA
from bench.results.studies import HEADLINE, comparisons_words, family_of, holm_families
from bench.results.tables import (
    interval_text,
    paired_runs_text,
    paired_test_name,
    unequal_seeds_text,
)

#: One verdict: a task × encoder × freezing strategy × training size.
SETTING = stats.SETTING_KEYS
HEADLINE_COLUMNS = [
    *SETTING,
    "freeze_shown",
    "metric",
    "n_heads",
    "winner",
    "winner_mean",
    "winner_t_low",
    "winner_t_high",
    "winner_failed",
    "winner_runs",
    "winner_n",
    "runner_up",
    "runner_mean",
    "runner_n",
    "margin",
    "ci_low",
    "ci_high",
    "sim_low",
    "sim_high",
    "sim_confidence",
    "n_pairs",
    "design",
    "unequal_seeds",
    "p",
    "p_holm",
    "n_comparisons",
    "tier",
    "significant",
    "tied",
    "untested",
    "best_constant",
    "baseline",
    "threshold",
    "vs_constant",
    "reason",
    "behind",
    "family",
]
#: Points of the expected-validation-performance table (trials tried).
EVP_TRIALS = (1, 2, 3, 6, 10)


def headline_comparisons(ctx: ReportContext) -> pd.DataFrame:
    """Winner vs every other head of every setting, Holm-corrected over each family.

    The headline is one family; each study of the experiment's preset (``ctx.studies``,
    :mod:`bench.results.studies`) is its own.

    Returns:
        :func:`bench.results.stats.compare_heads` rows oriented as winner − other, with
        ``family`` and the ``p_holm_all``, ``n_comparisons_all`` and ``significance`` of
        :func:`bench.results.stats.holm_all` within it (empty when no setting has two heads).
    """
    rows = stats.leader_comparisons(ctx.cells, ctx.comparisons)
    return rows if rows.empty else holm_families(rows, ctx.studies)


def families(
    frame: pd.DataFrame, shown: pd.DataFrame
) -> list[tuple[str, pd.DataFrame, pd.DataFrame]]:
    """A verdict split by family, the headline first, then each study in the preset's order.

    Args:
        frame: :func:`headline_frame` (its ``family``).
        shown: :func:`headline_comparisons` (its ``family``).

    Returns:
        ``(family, its frame rows, its comparisons)`` for each family with a setting.
    """
    names = [HEADLINE] + [f for f in dict.fromkeys(frame["family"]) if f != HEADLINE]
    out = []
    for name in names:
        part = frame[frame["family"] == name]
        if part.empty:
            continue
        mine = shown[shown["family"] == name] if "family" in shown else shown
        out.append((str(name), part, mine))
    return out


def family_in(rows: pd.DataFrame | pd.Series | dict) -> str:
    """The family of verdict or comparison rows (:data:`HEADLINE` where they name none)."""
    if isinstance(rows, pd.DataFrame):
        found = rows["family"].dropna() if "family" in rows else pd.Series(dtype=object)
        return str(found.iloc[0]) if len(found) else HEADLINE
    value = rows.get("family")
    return str(value) if isinstance(value, str) and value else HEADLINE


def study_label(ctx: ReportContext, family: str) -> str:
    """A study's heading, with its seeds and trials from the data.

    Returns:
        ``Full fine-tuning study (5 seeds, 4 trials; not part of the headline)``.
    """
    cells = ctx.cells[(family_of(ctx.cells, ctx.studies) == family) & (ctx.cells["n_runs"] > 0)]
    parts = [_count_range(cells["n_runs"].astype(int).tolist(), "seed")]
    records = [c for c in ctx.inputs.cells if isinstance(c, dict)]
    if records:
        where = pd.DataFrame([c.get("cell") or {} for c in records])
        trials = [
            int((c.get("search") or {}).get("trials") or 0)
            for c, mine in zip(records, family_of(where, ctx.studies) == family, strict=True)
            if mine
        ]
        if any(trials):
            parts.append(_count_range(trials, "trial"))
    return f"{family[:1].upper()}{family[1:]} ({', '.join(parts)}; not part of the headline)"


def _count_range(values: list[int], unit: str) -> str:
    """``5 seeds``, ``3–5 seeds`` (the spread of a count over cells)."""
    low, high = min(values, default=0), max(values, default=0)
    span = f"{low}" if low == high else f"{low}–{high}"
    return f"{span} {unit}{'' if high == 1 else 's'}"


def headline_frame(ctx: ReportContext, shown: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per setting: the winner, its margin over the runner-up, how sure, failures.

    Args:
        ctx: The report context.
        shown: :func:`headline_comparisons` (computed when not given).

    Returns:
        Columns :data:`HEADLINE_COLUMNS`. ``freeze_shown`` is the freezing label as shown
        (with the training size where a setting ran at several: ``frozen, 400 examples``,
        :meth:`~bench.report.context.ReportContext.freeze_text`).
        ``margin``/``ci_low``/``ci_high`` are the mean
        paired difference over the runner-up and its per-comparison 95% Student-t interval;
        ``sim_low``/``sim_high`` its simultaneous 95% interval over the same
        ``n_comparisons`` as Holm's (Bonferroni, each at ``sim_confidence`` = 1 − α/m:
        :func:`bench.results.stats.simultaneous_interval`), the one shown beside
        ``p_holm``; ``p`` the paired
        t-test, ``p_holm`` Holm over all ``n_comparisons`` headline comparisons; ``tied``
        the heads tested and not significantly below the winner, ``untested`` those
        without a test (comma-separated, :func:`setting_ties`); ``winner_n``/``runner_n``
        the runs with a score of each, and ``unequal_seeds`` what the two average on the
        runs they share where that is fewer than either has
        (:func:`bench.results.tables.unequal_seeds_text`, ``""`` otherwise); ``vs_constant``
        how the winner's mean stands against ``threshold``, its runs' failure threshold
        (:func:`bench.results.stats.against_threshold`): a setting whose best mean is
        :data:`~bench.results.stats.NOT_ABOVE` it has no winner (:func:`has_winner`).
    """
    shown = headline_comparisons(ctx) if shown is None else shown
    rows = []
    for keys, group in ctx.cells.groupby(SETTING, sort=True):
        ranked = stats.ranked_heads(group)
        if ranked.empty:
            continue
        best = ranked.iloc[0]
        row = dict(zip(SETTING, keys, strict=True))
        row.update(
            freeze_shown=ctx.freeze_text(row),
            metric=best["metric"],
            n_heads=len(ranked),
            winner=best["head_label"],
            winner_mean=best["mean"],
            winner_t_low=best["t_low"],
            winner_t_high=best["t_high"],
            winner_failed=int(best["n_failed"]),
            winner_runs=int(best["n_runs"]),
            winner_n=int(best["n"]),
            runner_up=None,
            runner_mean=np.nan,
            runner_n=0,
            margin=np.nan,
            ci_low=np.nan,
            ci_high=np.nan,
            sim_low=np.nan,
            sim_high=np.nan,
            sim_confidence=np.nan,
            n_pairs=0,
            design="",
            unequal_seeds="",
            p=np.nan,
            p_holm=np.nan,
            n_comparisons=0,
            tier="",
            significant=False,
            tied="",
            untested="",
            best_constant=best["best_constant"],
            baseline=best["baseline"],
            threshold=best["threshold"],
            vs_constant=stats.against_threshold(best["mean"], best["t_low"], best["threshold"]),
            reason="only one head",
            behind="",
            family=HEADLINE,
        )
        if len(ranked) > 1:
            runner = ranked.iloc[1]
            row.update(
                runner_up=runner["head_label"],
                runner_mean=runner["mean"],
                runner_n=int(runner["n"]),
            )
            mine = shown
            for column, value in zip(SETTING, keys, strict=True):
                mine = mine[mine[column] == value]
            ties = setting_ties(shown, row)
            row.update(
                tied=", ".join(ties.tied),
                untested=", ".join(ties.untested),
                behind=", ".join(ties.behind),
            )
            pair = mine[mine["head_b"] == runner["head_label"]]
            if pair.empty or int(pair.iloc[0]["n_pairs"]) == 0:
                row["reason"] = "no seed that both heads completed"
            else:
                r = pair.iloc[0]
                row.update(
                    margin=r["diff"],
                    ci_low=r["t_low"],
                    ci_high=r["t_high"],
                    sim_low=r.get("sim_low", np.nan),
                    sim_high=r.get("sim_high", np.nan),
                    sim_confidence=r.get("sim_confidence", np.nan),
                    n_pairs=int(r["n_pairs"]),
                    design=r["design"] if isinstance(r.get("design"), str) else "",
                    unequal_seeds=unequal_seeds_text(r, int(best["n"]), int(runner["n"])),
                    p=r["p"],
                    p_holm=r["p_holm_all"],
                    n_comparisons=int(r["n_comparisons_all"]),
                    tier=_tier(r),
                    reason=r["reason"] if isinstance(r["reason"], str) else "",
                )
                row["significant"] = bool(r["ahead"])
        rows.append(row)
    frame = pd.DataFrame(rows, columns=HEADLINE_COLUMNS)
    frame["family"] = family_of(frame, ctx.studies)
    return frame


class Ties(NamedTuple):
    """The heads a setting's winner by mean is not shown to beat (:func:`setting_ties`).

    Attributes:
        tied: Tested, and not significantly different from the winner after Holm.
        untested: Without a test (too few paired seeds, constant differences).
        behind: Significantly *ahead of* the winner on the seeds both ran, after Holm
            (possible where the heads have unequal seed sets: :func:`stats.holm_all`).
    """

    tied: list[str]
    untested: list[str]
    behind: list[str]


def setting_ties(shown: pd.DataFrame, row: pd.Series | dict) -> Ties:
    """The heads a setting's winner is not shown to beat: tied, untested, or ahead of it.

    Args:
        shown: :func:`headline_comparisons` (winner − other, Holm within its family).
        row: Anything with the :data:`SETTING` keys (a :func:`headline_frame` row).

    Returns:
        :class:`Ties`, each list in the table's order: the other heads whose comparison
        has a p but no significant difference after Holm (a tie by the headline's own
        test), those without a test, and those significantly ahead of the winner by mean
        on the paired seeds (a significant difference with the winner behind: not a tie).
    """
    if shown.empty:
        return Ties([], [], [])
    mine = shown
    for column in SETTING:
        mine = mine[mine[column] == row[column]]
    tested = mine["p"].notna()
    ahead = mine["ahead"].astype(bool)
    holm = pd.to_numeric(mine["p_holm_all"], errors="coerce")
    behind = tested & ~ahead & (holm < ALPHA)
    return Ties(
        tied=[str(h) for h in mine[tested & ~ahead & ~behind]["head_b"]],
        untested=[str(h) for h in mine[~tested]["head_b"]],
        behind=[str(h) for h in mine[behind]["head_b"]],
    )


def _tier(r: pd.Series) -> str:
    """A leader comparison's tier, marked where the significant side is the other head's."""
    tier = str(r["significance"])
    if pd.notna(r["p_holm_all"]) and r["p_holm_all"] < ALPHA and not r["ahead"]:
        return f"{tier} (behind)"
    return tier


def has_winner(frame: pd.DataFrame) -> pd.Series:
    """Per :func:`headline_frame` row: whether its best head's mean beats a constant.

    A setting whose best mean is at or below its failure threshold (the best constant
    prediction) names no winner: the order of its heads is an order among failures.
    """
    return frame["vs_constant"] != stats.NOT_ABOVE


def no_winner_text(frame: pd.DataFrame) -> str:
    """The settings without a winner, in words (``RTE frozen; RTE full``); empty if none."""
    return "; ".join(
        f"{task_title(r['task'])} {r['freeze_shown']}"
        for _, r in frame[~has_winner(frame)].iterrows()
    )


def _threshold(r: pd.Series) -> str:
    return threshold_name(r["best_constant"], r["baseline"])


def _failures(r: pd.Series) -> str:
    if not r["winner_failed"]:
        return ""
    return (
        f" {r['winner']} itself failed in {r['winner_failed']} of {r['winner_runs']} runs "
        f"(crashed, diverged, or at or below {_threshold(r)})."
    )


def _opening(r: pd.Series, where: str, mean: str) -> tuple[str, str]:
    """A verdict's first clause, and what links it to the lead over the runner-up.

    A best mean at or below the failure threshold names no winner (:func:`has_winner`); a
    winner whose t-interval reaches the threshold is named with that caveat. The winner
    *beats* the runner-up only when it is significantly ahead; otherwise it *leads*.
    """
    unit = short_metric(r["metric"])
    constant = f"{_threshold(r)} ({points(r['threshold'])} {unit})"
    if r["vs_constant"] == stats.NOT_ABOVE:
        return (
            f"{where}: no head's mean beats {constant}, so this setting has no winner; the best "
            f"mean is {r['winner']}'s {mean}",
            ", which leads",
        )
    beats = "beats" if r["significant"] else "leads"
    if r["vs_constant"] == stats.INTERVAL_REACHES:
        return (
            f"{where}: {r['winner']} scores {mean}, an interval that reaches {constant}",
            f", and {beats}",
        )
    return f"{where}: {r['winner']} scores {mean}", f" and {beats}"


def headline_sentence(r: pd.Series, multi_encoder: bool) -> str:
    """The plain-words verdict of one setting.

    The margin over the runner-up is stated with its simultaneous interval and Holm's p,
    each naming the family they are adjusted over (:func:`margin_evidence`); a paired
    margin over fewer runs than either head has says what the two average on the runs
    they share (the means beside it are over all of each head's runs); a winner that
    beats its runner-up but not every other head names those it is not shown to beat.
    """
    where = task_title(r["task"]) + (f" ({r['encoder']})" if multi_encoder else "")
    where += f", {r['freeze_shown']}"
    unit = short_metric(r["metric"])
    spread = interval_text(r["winner_t_low"], r["winner_t_high"])
    mean = f"{points(r['winner_mean'])} {unit} (95% t-interval {spread})"
    opening, link = _opening(r, where, mean)
    if not isinstance(r["runner_up"], str):
        return f"{opening}; {r['reason']}." + _failures(r)
    if pd.isna(r["margin"]) or r["n_pairs"] < 2:
        gap = r["winner_mean"] - r["runner_mean"]
        return (
            f"{opening}{link} {r['runner_up']} by {points(gap)} "
            f"points on {int(r['n_pairs'])} paired seed{'s' if r['n_pairs'] != 1 else ''}: too "
            "few for an interval or a test." + _failures(r)
        )
    if r["reason"]:
        text = (
            f"{opening}{link} {r['runner_up']} by {points(r['margin'])} points "
            f"({_paired_runs(r)}; no test: {r['reason']})."
        )
    elif r["margin"] <= 0:
        gap = r["winner_mean"] - r["runner_mean"]
        text = (
            f"{opening}{link} {r['runner_up']} by {points(gap)} points over all their runs, "
            f"but on the {paired_runs_text(r['n_pairs'], r['design'])} that both completed "
            f"it is behind by {points(-r['margin'])} points ({margin_evidence(r)})."
        )
        return text + _failures(r)
    else:
        text = (
            f"{opening}{link} {r['runner_up']} by {points(r['margin'])} points "
            f"({_paired_runs(r)}; {margin_evidence(r)}"
        )
        if r["significant"]:
            text += f", {r['tier']}{holm_beyond_bonferroni(r)})."
        else:
            text += ", not significant)."
    return text + _tie_text(r) + _failures(r)


def _tie_text(r: pd.Series) -> str:
    """After a verdict: the other heads its winner is not shown to beat, and by which test.

    Args:
        r: A :func:`headline_frame` row (``tied``, ``untested``, ``significant``,
            ``n_comparisons``, ``design``).

    Returns:
        `` Not distinguishable from the winner (...): a, b.``, prefixed with what it does
        beat where it beats the runner-up; ``""`` when it beats every other head.
    """
    untested = r.get("untested")
    untested = untested if isinstance(untested, str) else ""
    behind = r.get("behind")
    behind = behind if isinstance(behind, str) else ""
    if not r["tied"] and not untested and not behind:
        return ""
    m = int(r["n_comparisons"])
    family = f"Holm over the same {m}" if m > 1 else "no correction: one comparison"
    best = "the winner" if r["vs_constant"] != stats.NOT_ABOVE else r["winner"]
    text = ""
    if r["tied"]:
        lead = (
            f" It beats its runner-up but not every other head: still not distinguishable "
            f"from {best}"
            if r["significant"]
            else f" Not distinguishable from {best}"
        )
        text += f"{lead} ({_test_name(r)}, {family}): {r['tied']}."
    if untested:
        text += f" Not tested against {best} (no test on their paired seeds): {untested}."
    if behind:
        text += (
            f" Significantly ahead of {best} on the seeds both ran ({_test_name(r)}, "
            f"{family}): {behind}."
        )
    return text


def comparison_noun(family: str, plural: bool = False) -> str:
    """One of a family's comparisons: ``headline comparison``, ``comparison of the study``."""
    noun = "comparisons" if plural else "comparison"
    return f"headline {noun}" if family == HEADLINE else f"{noun} of the study"


def every_comparison(family: str) -> str:
    """``every headline comparison``, or for a study ``every comparison of the study``."""
    return f"every {comparison_noun(family)}"


def simultaneous_words(m: int, family: str = HEADLINE) -> str:
    """The adjustment of a margin's interval in words, with the family it is adjusted over.

    Args:
        m: The comparisons with a test that Holm corrects together (``n_comparisons``).
        family: Whose comparisons (:data:`~bench.results.studies.HEADLINE` or a study).

    Returns:
        ``simultaneous 95% interval over all 28 headline comparisons (Bonferroni)`` (a
        study: ``over the study's 8 comparisons``), or for a family of one, ``95%
        t-interval`` (there is nothing to adjust).
    """
    own = comparison_noun(family)
    if m < 1:
        return f"interval (none: no {own} has a test)"
    if m == 1:
        return f"95% t-interval (the only {own} with a test)"
    return f"simultaneous 95% interval over {comparisons_words(family, m)} (Bonferroni)"


def margin_evidence(r: pd.Series) -> str:
    """A margin's simultaneous interval and Holm's p, as a verdict states them.

    Args:
        r: A :func:`headline_frame` row with a test.

    Returns:
        ``simultaneous 95% interval over all 28 headline comparisons (Bonferroni): 0.0 to
        1.0; paired t-test, Holm over the same 28: p = 0.12``.
    """
    m = int(r["n_comparisons"])
    family = f"the same {m}" if m > 1 else "that one"
    return (
        f"{simultaneous_words(m, family_in(r))}: {interval_text(r['sim_low'], r['sim_high'])}; "
        f"{_test_name(r)}, Holm over {family}: p = {pvalue(r['p_holm'])}"
    )


def holm_beyond_bonferroni(r: pd.Series) -> str:
    """Why a Holm-significant margin can have a simultaneous interval that reaches 0.

    Args:
        r: A :func:`headline_frame` row (``sim_low``, ``sim_high``).

    Returns:
        ``"; Holm's step-down test is significant where ..."`` when the interval reaches
        0, else ``""`` (call it only for a significant margin).
    """
    low, high = r["sim_low"], r["sim_high"]
    if pd.isna(low) or pd.isna(high) or not low <= 0 <= high:
        return ""
    return "; Holm's step-down test is significant where the Bonferroni interval still reaches 0"


def _paired_runs(r: pd.Series) -> str:
    """``10 paired seeds`` or ``25 paired runs (5 seeds × 5 orders, crossed)``.

    With what the two heads average on them where that is fewer runs than either has.
    """
    text = paired_runs_text(r["n_pairs"], r.get("design"))
    unequal = r.get("unequal_seeds")
    return f"{text}, {unequal}" if isinstance(unequal, str) and unequal else text


def _test_name(r: pd.Series) -> str:
    """The test behind a verdict's p: the paired t-test, or its crossed-design form."""
    return paired_test_name(r.get("design"))


def test_words(rows: pd.DataFrame) -> str:
    """The headline test in words: the paired t-test, and its crossed form where it ran.

    Args:
        rows: :func:`headline_frame` or comparison rows (with ``design``).
    """
    crossed = "design" in rows and rows["design"].fillna("").astype(str).ne("").any()
    text = "paired t-test over seeds"
    if crossed:
        text += (
            " (runs that cross seeds with batch orders: with seed and order effects, "
            "Satterthwaite df)"
        )
    return text


def tested_phrase(shown: pd.DataFrame) -> str:
    """The Holm count in words, naming the comparisons without a test (too few seeds).

    Holm corrects only the comparisons that have a p-value; the phrase counts those, so it
    agrees with ``n_comparisons_all`` of :func:`bench.results.stats.holm_all`.
    """
    tested = int(shown["p"].notna().sum()) if not shown.empty else 0
    untested = len(shown) - tested
    family = family_in(shown)
    if not tested:  # nothing to correct (one seed per head, as in quick)
        return f"no comparison ({comparisons_words(family, untested)} had too few paired seeds)"
    text = comparisons_words(family, tested)
    if untested:
        text += f" with a test ({untested} more had too few paired seeds for one)"
    return text


def at_a_glance(frame: pd.DataFrame, shown: pd.DataFrame, heads: int | None = None) -> str:
    """One sentence: which head wins most settings, and how many wins are significant.

    Settings whose best mean does not beat the best constant prediction win for no head
    (:func:`has_winner`); they are named. Settings where fewer than ``heads`` heads have a
    score are counted and named: their winner is the best of those that ran.

    Args:
        frame: :func:`headline_frame`.
        shown: :func:`headline_comparisons`.
        heads: The experiment's number of heads (default: the most any setting has).
    """
    won = frame[has_winner(frame)]
    wins = won["winner"].value_counts()
    ranking = "; ".join(f"{head} {count}" for head, count in wins.items())
    text = f"Best head by mean in {len(frame)} settings: {ranking or 'none'}. "
    if len(won) < len(frame):
        text = (
            f"Best head by mean, where it beats the best constant prediction ({len(won)} of "
            f"{len(frame)} settings): {ranking or 'none'}. No head's mean beats it in "
            f"{no_winner_text(frame)}, so "
            + ("that setting names" if len(frame) - len(won) == 1 else "those settings name")
            + " no winner. "
        )
    every = int(frame["n_heads"].max()) if heads is None else heads
    partial = frame[frame["n_heads"] < every]
    if not partial.empty:
        names = "; ".join(
            f"{task_title(r['task'])} {r['freeze_shown']} ({int(r['n_heads'])} of {every})"
            for _, r in partial.iterrows()
        )
        text += (
            f"{len(partial)} of these settings compare fewer than all {every} heads, so their "
            f"winner is the best of the heads that ran: {names}. "
        )
    if shown.empty:
        return text + "No setting has two heads to compare."
    significant = int(shown["ahead"].astype(bool).sum())
    tested = int(shown["p"].notna().sum())
    which = comparison_noun(family_in(shown), plural=True)
    text += (
        f"In {significant} of the {tested} tested {which} (each winner against "
        f"every other head of its setting, paired t-test, Holm over {tested_phrase(shown)}) "
        f"the winner is significantly ahead at α = {ALPHA}; "
    )
    return text + lead_count_text(frame, shown) + "."


def ahead_of_all(frame: pd.DataFrame, shown: pd.DataFrame) -> pd.Series:
    """Per :func:`headline_frame` row: whether its winner is ahead of every other head.

    Significantly ahead of its runner-up, and :func:`setting_ties` empty.

    Args:
        frame: :func:`headline_frame`.
        shown: :func:`headline_comparisons`.

    Returns:
        A boolean Series on ``frame``'s index; False where the setting has no winner.
    """
    clear = frame["significant"].astype(bool) & has_winner(frame)
    return pd.Series(
        [
            bool(ok) and not any(setting_ties(shown, r))
            for ok, (_, r) in zip(clear, frame.iterrows(), strict=True)
        ],
        index=frame.index,
        dtype=bool,
    )


def lead_count_text(
    frame: pd.DataFrame, shown: pd.DataFrame, family: str = "", code: bool = False
) -> str:
    """How often the winner is significantly ahead of its runner-up, and of every head.

    The settings where it is ahead of its runner-up but not of every other head are named
    with the heads they still tie with.

    A winner significantly ahead of its runner-up can still be tied with a head ranked
    below it (fewer paired seeds, or a noisier difference): that setting counts for the
    runner-up, not for "every other head".

    Args:
        frame: :func:`headline_frame`.
        shown: :func:`headline_comparisons`.
        family: Words naming the test and the Holm family, put in brackets right after
            the first claim (``""``: none).
        code: Backquote head names (Markdown).

    Returns:
        ``the winner is significantly ahead of its runner-up in 2 of 7 settings and of
        every other head of its setting in 1 of those (STS-B frozen); in RTE full it still
        ties with heads ranked below its runner-up: last4_concat, pooler-random`` (no
        final full stop).
    """
    q = "`" if code else ""
    runner = frame[frame["significant"].astype(bool) & has_winner(frame)]
    every = ahead_of_all(frame, shown)
    names = [f"{task_title(r['task'])} {r['freeze_shown']}" for _, r in frame[every].iterrows()]
    k, j = len(runner), len(names)
    text = "the winner is significantly ahead of its runner-up"
    text += f" ({family})" if family else ""
    text += f" in {k} of {len(frame)} settings"
    if k == 0:
        return text + ", so of every other head in none"
    if j == k:
        return text + (
            f", and of every other head of its setting in {'that one' if k == 1 else 'each'} "
            f"({', '.join(names)})"
        )
    text += f" and of every other head of its setting in {j} of those"
    text += f" ({', '.join(names)})" if names else ""
    for _, r in runner[~every[runner.index]].iterrows():
        tied, untested, behind = setting_ties(shown, r)
        parts = []
        if tied:
            parts.append(
                "it still ties with heads ranked below its runner-up: "
                + ", ".join(f"{q}{h}{q}" for h in tied)
            )
        if untested:
            parts.append(
                "it is not told apart from "
                + ", ".join(f"{q}{h}{q}" for h in untested)
                + " (no test on their paired seeds)"
            )
        if behind:
            parts.append(
                "on the seeds both ran it is significantly behind "
                + ", ".join(f"{q}{h}{q}" for h in behind)
            )
        text += f"; in {task_title(r['task'])} {r['freeze_shown']} " + " and ".join(parts)
    return text


def wins_table(frame: pd.DataFrame, heads: list[str], ran: dict[str, int]) -> str:
    """Per head: settings won, won significantly, settings it ran in, mean winning margin.

    A setting without a winner (:func:`has_winner`) counts for no head.
    """
    rows = []
    for head in heads:
        won = frame[(frame["winner"] == head) & has_winner(frame)]
        rows.append(
            [
                head,
                len(won),
                int(won["significant"].sum()),
                ran.get(head, 0),
                points(won["margin"].mean()) if won["margin"].notna().any() else "",
            ]
        )
    return table(
        ["Head", "Settings won", "Won significantly", "Settings it ran in", "Mean margin (points)"],
        rows,
        caption="How often each head is the best (by mean over seeds) in a task × encoder × "
        "freezing setting; 'significantly' = ahead of the runner-up after Holm's correction "
        + (
            f"over {comparisons_words(family_in(frame), family_size(frame))}"
            if family_size(frame)
            else f"(none here: no {comparison_noun(family_in(frame))} has a test)"
        )
        + " (a winner can still be tied with a head ranked below the runner-up: the verdicts "
        "name those). "
        "A setting whose best mean does not beat the best constant prediction counts for no "
        "head.",
        numeric=[1, 2, 3, 4],
    )


def budget_parts(ctx: ReportContext) -> list[str]:
    """The budget box: what every head was allowed, and what breaks the comparison."""
    cells = ctx.inputs.cells
    lines = budget_lines(cells)
    if not lines:
        return [paragraph("Budget: not recorded (no cells.json beside the results).", "warning")]
    parts = [
        paragraph("The budget every head had, per freezing strategy:", "budget"),
        bullet_list(lines),
    ]
    seconds, trainings = tuning_seconds(cells)
    if trainings:
        parts.append(
            paragraph(
                f"Tuning cost: {trainings} trial trainings, {seconds / 3600:.2f} h of wall time, "
                "shared by each setting's seeds.",
                "note",
            )
        )
    unequal = unequal_settings(cells)
    if unequal:
        parts.append(
            paragraph(
                "Unequal budgets: in these settings the heads were not tuned alike, so a win "
                "may be the budget's, not the head's: " + "; ".join(unequal),
                "warning",
            )
        )
    missing = missing_heads(cells)
    if missing:
        parts.append(
            paragraph(
                "Not every head ran everywhere: these settings' verdicts compare fewer heads "
                "than the experiment has: " + "; ".join(missing),
                "warning",
            )
        )
    devices = device_caveat(cells)
    if devices is not None:
        parts.append(paragraph(devices, "warning"))
    unrun = unrun_text(ctx.inputs.table, str(ctx.inputs.launch.get("command") or ""))
    if unrun:
        parts.append(paragraph(f"Not run yet: {unrun}", "warning"))
    on_dev = dev_selected(cells)
    if on_dev:
        parts.append(
            paragraph(
                f"Selected on dev: {on_dev} of {len(cells)} cells chose their epoch on the "
                "split they report (selection=dev). Their scores are optimistic and favour "
                "noisy heads; the 'Selection' column marks them.",
                "warning",
            )
        )
    commits = sorted(
        {str((c.get("git") or {}).get("commit")) for c in cells if isinstance(c, dict)}
    )
    dirty = sum(1 for c in cells if isinstance(c, dict) and (c.get("git") or {}).get("dirty"))
    if len(commits) > 1 or dirty:
        parts.append(
            paragraph(
                f"Mixed code: these cells ran at {len(commits)} commits "
                f"({', '.join(c[:10] for c in commits)}), {dirty} from a modified working tree. "
                "A reference experiment is re-run at one clean commit.",
                "warning",
            )
        )
    return parts


def _selection_of(ctx: ReportContext) -> dict[tuple[str, str, str], str]:
    """Per setting: the selection mode(s) of its cells (``heldout``, ``dev`` or both)."""
    found: dict[tuple[str, str, str], set[str]] = {}
    for c in ctx.inputs.cells:
        if not isinstance(c, dict):
            continue
        cell = c.get("cell") or {}
        key = (str(cell.get("task")), str(cell.get("encoder")), str(cell.get("freeze_label")))
        mode = str(((c.get("config") or {}).get("selection") or {}).get("name", "dev"))
        found.setdefault(key, set()).add(mode)
    return {k: "+".join(sorted(v)) for k, v in found.items()}


def runs_cell(n_pairs: object, design: object) -> str:
    """A table's count of paired runs (``10``), with the crossed grid where there is one."""
    count = str(int(n_pairs))  # type: ignore[call-overload]
    return f"{count} ({design})" if isinstance(design, str) and design else count


def family_size(frame: pd.DataFrame) -> int:
    """Holm's m of a :func:`headline_frame` (0 when no setting has a test)."""
    counts = pd.to_numeric(frame["n_comparisons"], errors="coerce")
    return int(counts.max()) if counts.notna().any() else 0


def simultaneous_header(m: int) -> str:
    """A table's column of simultaneous intervals, naming the family and the method."""
    if m <= 1:
        return "95% t-interval"
    return f"Simultaneous 95% interval (Bonferroni over m = {m})"


def margin_header(frame: pd.DataFrame) -> str:
    """The verdict table's margin-interval column, naming the family and the method."""
    m = family_size(frame)
    if m <= 1:
        return "Margin 95% t-interval"
    return f"Margin, simultaneous 95% interval (Bonferroni over m = {m})"


def _simultaneous_text(m: int) -> str:
    level = 100 * stats.simultaneous_confidence(m, ALPHA)
    return (
        f"Bonferroni over the m = {m} comparisons Holm corrects, each a t-interval at "
        f"1 − {ALPHA}/{m} = {level:.2f}% from the same t statistic, standard error and df "
        f"as p; together the intervals cover their true differences with probability at "
        f"least {100 * (1 - ALPHA):.0f}%. One that excludes 0 is always significant after "
        f"Holm (its raw p is below {ALPHA}/m); Holm's step-down test can also be "
        "significant where it still reaches 0."
    )


def simultaneous_caption(m: int) -> str:
    """What a simultaneous interval is, for a table's caption (empty for m <= 1)."""
    return f"Simultaneous interval: {_simultaneous_text(m)}" if m > 1 else ""


def margin_caption(frame: pd.DataFrame) -> str:
    """The verdict table's note on its margin interval (see :func:`simultaneous_caption`)."""
    m = family_size(frame)
    if m < 1:
        return "Margin interval: none, no comparison has a test."
    if m == 1:
        return "Margin interval: the 95% t-interval of the one comparison with a test."
    return f"Margin interval: simultaneous, {_simultaneous_text(m)}"


def verdict_table(ctx: ReportContext, frame: pd.DataFrame) -> str:
    """The verdict per setting as a table."""
    selection = _selection_of(ctx)
    rows = [
        [
            task_title(r["task"]),
            r["encoder"],
            r["freeze_shown"],
            short_metric(r["metric"]),
            r["winner"],
            points(r["winner_mean"]),
            interval_text(r["winner_t_low"], r["winner_t_high"]),
            r["runner_up"] or "",
            points(r["runner_mean"]),
            points(r["margin"]),
            interval_text(r["sim_low"], r["sim_high"]),
            runs_cell(r["n_pairs"], r["design"]),
            pvalue(r["p"]),
            pvalue(r["p_holm"]),
            r["tier"],
            "yes" if r["significant"] else "no",
            f"{r['winner_failed']}/{r['winner_runs']}",
            points(r["best_constant"]),
            points(r["baseline"]),
            constant_cell(r["vs_constant"]),
            selection.get((str(r["task"]), str(r["encoder"]), str(r["freeze_label"])), "dev"),
        ]
        for _, r in frame.iterrows()
    ]
    return table(
        [
            "Task",
            "Encoder",
            "Freeze",
            "Metric",
            "Winner",
            "Winner mean",
            "Winner 95% t-interval",
            "Runner-up",
            "Runner-up mean",
            "Margin",
            margin_header(frame),
            "Seeds",
            "p",
            "p (Holm)",
            "Tier",
            "Significant",
            "Winner failed",
            "Best constant",
            "Majority",
            "Beats the constant",
            "Selection",
        ],
        rows,
        caption="Winner and runner-up per setting (reporting split, ×100). p: "
        f"{test_words(frame)}; p (Holm): corrected over {every_comparison(family_in(frame))}; "
        f"tier: *** < 0.001, ** < 0.01, * < 0.05, n.s. otherwise. {margin_caption(frame)} "
        "The per-comparison (unadjusted) 95% t-intervals are in the table of "
        f"{every_comparison(family_in(frame))} below. Winner failed: its runs that "
        "crashed, diverged or scored at or below the best constant prediction. Beats the "
        "constant: whether the winner's mean and its whole t-interval are above the best "
        "constant prediction; 'no' means the setting has no winner.",
        numeric=[5, 8, 9, 11, 12, 13, 17, 18],
        css="headline",
    )


def comparisons_table(ctx: ReportContext, shown: pd.DataFrame) -> str:
    """Every headline comparison: winner − other head, intervals, p, Holm, tier."""
    m = int(shown["n_comparisons_all"].max()) if not shown.empty else 0
    rows = [
        [
            task_title(r["task"]) + (f" ({r['encoder']})" if ctx.multi_encoder else ""),
            ctx.freeze_text(r),
            r["head_a"],
            r["head_b"],
            points(r["diff"]),
            interval_text(r.get("sim_low", np.nan), r.get("sim_high", np.nan)),
            interval_text(r["t_low"], r["t_high"]),
            interval_text(r["ci_low"], r["ci_high"])
            + (f" ({r['ci_method']})" if isinstance(r["ci_method"], str) else ""),
            runs_cell(r["n_pairs"], r.get("design")),
            pvalue(r["p"]),
            pvalue(r["p_holm_all"]),
            r["significance"],
        ]
        for _, r in shown.iterrows()
    ]
    return table(
        [
            "Task",
            "Freeze",
            "Winner",
            "Other head",
            "Difference",
            simultaneous_header(m),
            "95% t-interval (this comparison alone, unadjusted)",
            "95% bootstrap interval (this comparison alone, unadjusted)",
            "Seeds",
            "p",
            "p (Holm, all)",
            "Tier",
        ],
        rows,
        caption=f"{every_comparison(family_in(shown)).capitalize()}; Holm (1979) over "
        f"{tested_phrase(shown)}. "
        "Difference: mean over seeds of winner − other (×100). "
        + (f"{simultaneous_caption(m)} " if m > 1 else "")
        + "The t and bootstrap intervals are each comparison's own 95% intervals, not "
        "adjusted for the others: one of them can exclude 0 where Holm's p is not "
        "significant.",
        numeric=[4, 8, 9, 10],
    )


def evp_trials_parts(ctx: ReportContext) -> list[str]:
    """Expected best selection score against the number of trials, per head (Dodge et al.)."""
    trials = ctx.inputs.trials
    if trials.empty:
        return []
    evp = stats.evp_from_trials(trials)
    if evp.empty:
        return []
    fig = figures.evp_trial_curves(evp, ctx.palette, ctx.multi_encoder)
    rows = []
    for keys, group in evp.groupby(stats.GROUP_KEYS, sort=True):
        task, encoder, head, freeze, size = keys
        by_n = group.set_index("n_trials")
        rows.append(
            [
                task_title(task) + (f" ({encoder})" if ctx.multi_encoder else ""),
                freeze_text(task, encoder, freeze, size, ctx.sized),
                head,
                int(by_n["trials"].iloc[0]),
                int(by_n["failed_trials"].iloc[0]),
                *[
                    points(by_n.at[n, "expected_max"]) if n in by_n.index else ""
                    for n in EVP_TRIALS
                ],
            ]
        )
    parts = [
        "<h3>Expected performance against the tuning budget</h3>",
        paragraph(
            "What a practitioner who tries n of these configurations and keeps the best should "
            "expect (Dodge et al. 2019): the expected maximum selection-slice score of n trials "
            "drawn from each head's trials, exact over their empirical distribution. A head "
            "that wins only at the full budget needs the tuning; one that wins at n = 1 does not."
        ),
    ]
    if fig is not None:
        parts.append(
            figure(
                svg_data_uri(fig),
                "Expected best selection score against number of trials, per head",
                "Lines: expected best of n trials; bands: ± one standard deviation.",
            )
        )
    parts.append(
        table(
            ["Task", "Freeze", "Head", "Trials", "Failed", *[f"n = {n}" for n in EVP_TRIALS]],
            rows,
            caption="Expected best selection-slice score (×100) after n trials; empty beyond "
            "the budget.",
            numeric=[3, 4, 5, 6, 7, 8, 9],
        )
    )
    return parts


def per_example_parts(ctx: ReportContext, frame: pd.DataFrame) -> list[str]:
    """Winner vs runner-up, paired bootstrap over dev examples, from the predictions."""
    predictions = ctx.inputs.predictions
    if predictions.empty:
        return []
    rows = []
    for _, r in frame.iterrows():
        found = per_example_row(predictions, r)
        if found is None:
            continue
        rows.append(
            [
                task_title(r["task"]) + (f" ({r['encoder']})" if ctx.multi_encoder else ""),
                r["freeze_shown"],
                r["winner"],
                r["runner_up"],
                points(found["diff"]),
                interval_text(found["low"], found["high"]),
                pvalue(found["p"]),
                int(found["n_examples"]),
                f"{int(found['seeds_a'])} / {int(found['seeds_b'])}",
            ]
        )
    if not rows:
        return []
    return [
        table(
            [
                "Task",
                "Freeze",
                "Winner",
                "Runner-up",
                "Difference",
                "95% interval (unadjusted)",
                "p (bootstrap, unadjusted)",
                "Examples",
                "Seeds",
            ],
            rows,
            caption="The same margin seen across dev examples instead of seeds: a paired "
            f"bootstrap ({N_RESAMPLES:,} resamples of the examples, the same for both heads "
            "and every seed) of the mean-over-seeds metric difference, from the committed "
            "predictions. Unadjusted: each row's 95% percentile interval and p stand alone, "
            f"with no correction for the {len(rows)} rows here or for the headline's "
            "comparisons (neither Holm nor Bonferroni), so an interval that excludes 0 is not "
            "a significant verdict; read the rows as a check of each margin across examples. "
            "Sentence tasks only.",
            numeric=[4, 6, 7],
        )
    ]


def headline_section(ctx: ReportContext) -> Section:
    """Build section 1."""
    title = "1. Verdict under equal budget: which head wins?"
    frame = headline_frame(ctx)
    if frame.empty:
        return Section(
            "headline", title, "\n".join([*budget_parts(ctx), paragraph("No successful runs.")])
        )
    shown = headline_comparisons(ctx)
    every = int(ctx.cells["head_label"].nunique())
    split = families(frame, shown)
    parts: list[str] = []
    for family, mine, compared in split:
        lead = paragraph(at_a_glance(mine, compared, every), "lead")
        if family == HEADLINE:
            parts += [lead, *budget_parts(ctx)]
        else:
            parts += [] if parts else budget_parts(ctx)
            parts += [f"<h3>{esc(study_label(ctx, family))}</h3>", lead]
        parts += _family_parts(ctx, family, mine, compared)
    parts += per_example_parts(ctx, frame)
    for family, mine, _ in split:
        parts += _forest_parts(ctx, family, mine)
    parts += evp_trials_parts(ctx)
    return Section("headline", title, "\n".join(parts))


def _family_parts(
    ctx: ReportContext, family: str, frame: pd.DataFrame, shown: pd.DataFrame
) -> list[str]:
    """One family's verdicts: sentences, verdict table, wins (in its settings), comparisons."""
    scored = ctx.cells[(ctx.cells["n"] > 0) & (family_of(ctx.cells, ctx.studies) == family)]
    parts = [
        bullet_list([headline_sentence(r, ctx.multi_encoder) for _, r in frame.iterrows()]),
        verdict_table(ctx, frame),
        wins_table(
            frame,
            [h for h in ctx.palette.heads if h in set(ctx.cells["head_label"])],
            scored.groupby("head_label").size().to_dict(),
        ),
    ]
    if not shown.empty:
        parts.append(comparisons_table(ctx, shown))
    return parts


def _forest_parts(ctx: ReportContext, family: str, frame: pd.DataFrame) -> list[str]:
    """One family's forest plot of the winners' margins (none when nothing to draw)."""
    fig = figures.margin_forest(frame, ctx.palette, ctx.multi_encoder)
    if fig is None:
        return []
    which = "" if family == HEADLINE else f" ({study_label(ctx, family)})"
    return [
        figure(
            svg_data_uri(fig),
            f"Forest plot of the winning head's margin per setting{which}",
            "Margin of the best head over the runner-up with its "
            + simultaneous_words(family_size(frame), family)
            + "; a filled dot is significant after Holm's correction over the same "
            "comparisons, a hollow one is not. A bar that clears 0 always has a filled "
            "dot; a filled dot's bar can still reach 0 (Holm rejects more than Bonferroni).",
        )
    ]
