"""The per-layer probe in words and as a table (README of ``fair_table7_probe``, Findings).

Generated from the results table, ``references.csv`` and the committed ``geometry.json``
(:mod:`bench.results.layer_profile`, :mod:`bench.results.geometry`); nothing typed by hand.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from bench.report.context import pvalue
from bench.results import stats
from bench.results.geometry import geometry_rows
from bench.results.layer_profile import last_layer_drop, profile_rows
from bench.results.table7_agreement import paper_last_gap

#: Below this paired p the last layer's drop is called real.
ALPHA = 0.05
#: Columns of :func:`peak_comparisons` (differences and intervals ×100).
PEAK_COLUMNS = [
    "encoder",
    "peak",
    "peak_mean",
    "layer",
    "mean",
    "diff",
    "sim_low",
    "sim_high",
    "n_pairs",
    "p",
    "p_holm",
    "n_comparisons",
    "ahead",
    "reason",
]


def _f(value: float, digits: int = 1) -> str:
    return "–" if pd.isna(value) else f"{value:.{digits}f}"


def _probe_cells(cells: pd.DataFrame) -> pd.DataFrame:
    """Frozen linear single-layer probes among ``cell_stats`` rows, with their ``layer``.

    The selection of :mod:`bench.results.layer_profile` (``head`` linear, ``freeze``
    frozen, ``layers`` one index).
    """
    probes = cells[
        (cells["head"] == "linear")
        & (cells["freeze"] == "frozen")
        & cells["layers"].astype(str).str.fullmatch(r"\d+")
        & (cells["n"] > 0)
    ].copy()
    probes["layer"] = probes["layers"].astype(int)
    return probes


def peak_comparisons(table: pd.DataFrame, split: str = "dev") -> pd.DataFrame:
    """Per encoder: the best single layer against each other layer, as the headline tests.

    The layer with the best mean is compared with every other layer by the headline's own
    test (:func:`bench.results.stats.compare_heads`: the paired t-test over seeds, or its
    crossed form), and all these comparisons, every encoder's together, are
    Holm-corrected (:func:`bench.results.stats.holm_all`), with their simultaneous 95%
    intervals over the same family. A layer the peak is not significantly ahead of reads
    as well as far as these runs can tell: a tie.

    Args:
        table: Tidy results table.
        split: The reporting split.

    Returns:
        Columns :data:`PEAK_COLUMNS`, one row per encoder and other layer (``diff`` = peak
        − layer, ×100 like the means and intervals; ``ahead``: the peak is significantly
        ahead after Holm; ``reason``: why there is no test), best other layer first.
    """
    probes = _probe_cells(stats.cell_stats(table, split=split))
    if probes.empty:
        return pd.DataFrame(columns=PEAK_COLUMNS)
    comparisons = stats.compare_heads(table, split=split)
    labels = set(probes["head_label"])
    comparisons = comparisons[
        comparisons["head_a"].isin(labels) & comparisons["head_b"].isin(labels)
    ]
    family = stats.leader_comparisons(probes, comparisons)
    if family.empty:
        return pd.DataFrame(columns=PEAK_COLUMNS)
    family = stats.holm_all(family)
    layer_of = dict(zip(probes["head_label"], probes["layer"], strict=True))
    mean_of = dict(zip(probes["head_label"], probes["mean"], strict=True))
    out = pd.DataFrame(
        {
            "encoder": family["encoder"],
            "peak": [layer_of[h] for h in family["head_a"]],
            "peak_mean": [100 * mean_of[h] for h in family["head_a"]],
            "layer": [layer_of[h] for h in family["head_b"]],
            "mean": [100 * mean_of[h] for h in family["head_b"]],
            "diff": 100 * family["diff"],
            "sim_low": 100 * family["sim_low"],
            "sim_high": 100 * family["sim_high"],
            "n_pairs": family["n_pairs"],
            "p": family["p"],
            "p_holm": family["p_holm_all"],
            "n_comparisons": family["n_comparisons_all"],
            "ahead": family["ahead"].astype(bool),
            "reason": family["reason"].fillna("").astype(str),
        }
    )
    out = out.sort_values(["encoder", "mean"], ascending=[True, False], kind="stable")
    return out[PEAK_COLUMNS].reset_index(drop=True)


def _and(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def peak_text(rows: pd.DataFrame) -> str:
    """Where one encoder's probe reads best: one layer, or a tie of layers, in words.

    Args:
        rows: :func:`peak_comparisons` rows of one encoder.

    Returns:
        What follows "reads best at": ``layer 3 (73.2 dev F1; every other layer
        significantly below it: ...)``, or for a tie ``layers 3 and 4, a tie: ...``.
    """
    first = rows.iloc[0]
    peak, m = int(first["peak"]), int(first["n_comparisons"])
    family = (
        f"paired t-test over seeds, Holm over the {m} comparison{'s' if m != 1 else ''} of "
        f"layer {peak} with each other layer"
    )
    tied = rows[~rows["ahead"] & (rows["reason"] == "")]
    untested = rows[rows["reason"] != ""]
    if tied.empty and untested.empty:
        return (
            f"layer {peak} ({_f(first['peak_mean'])} dev F1; every other layer significantly "
            f"below it: {family})"
        )
    several = len(tied) > 1
    if tied.empty:
        text = f"layer {peak} ({_f(first['peak_mean'])} dev F1)"
    else:
        layers = _and([str(v) for v in [peak, *(int(v) for v in tied["layer"])]])
        means = _and([_f(first["peak_mean"]), *(_f(v) for v in tied["mean"])])
        below = _and([str(int(v)) for v in tied["layer"]])
        bounds = zip(tied["sim_low"], tied["sim_high"], strict=True)
        intervals = _and([f"{_f(lo)} to {_f(hi)}" for lo, hi in bounds])
        text = (
            f"layers {layers}, a tie: {means} dev F1, layer{'s' if several else ''} {below} "
            f"reading {_and([_f(v) for v in tied['diff']])} points below layer {peak} "
            f"(simultaneous 95% interval{'s' if several else ''} over the {m} comparisons, "
            f"Bonferroni: {intervals}; {family}: p = "
            f"{_and([pvalue(v) for v in tied['p_holm']])})"
        )
    if not untested.empty:
        named = _and(
            [
                f"layer {int(v)} ({_f(mean)})"
                for v, mean in zip(untested["layer"], untested["mean"], strict=True)
            ]
        )
        text += (
            f"; with too few paired seeds for a test, layer {peak} is not told apart from "
            f"{named}: the difference is within what one run can tell apart"
        )
    if rows["ahead"].any():
        text += f"; every other layer reads significantly below layer {peak}"
    return text


def geometry_sentence(geometry: dict[str, Any] | None) -> str | None:
    """How the last layer's word states differ from the earlier layers' (one sentence).

    Args:
        geometry: A ``geometry.json`` payload, or None.

    Returns:
        The sentence, or None without a payload.
    """
    if geometry is None:
        return None
    rows = geometry_rows(geometry).set_index("layer")
    last = int(rows.index.max())
    earlier = rows.drop(index=last)
    top = int(earlier["sentence_share"].idxmax())
    return (
        f"Over the {geometry['words']:,} words of the {geometry['sentences']} held-out "
        f"sentences, the share of the word states' variance that their sentence shares is "
        f"{rows.loc[last, 'sentence_share']:.2f} at the last layer against at most "
        f"{earlier['sentence_share'].max():.2f} before it (layer {top}), while two words of "
        f"different sentences are at a mean cosine of {rows.loc[last, 'anisotropy']:.2f} "
        f"there against {rows.loc[last - 1, 'anisotropy']:.2f} at layer {last - 1}"
    )


def profile_sentence(
    table: pd.DataFrame, refs: pd.DataFrame, geometry: dict[str, Any] | None
) -> str | None:
    """The probe's profile and what it says about the last layer, in words.

    Args:
        table: Tidy results table.
        refs: Reference numbers.
        geometry: The committed ``geometry.json`` payload, or None.

    Returns:
        One paragraph (sentences ending with full stops), or None without a probe.
    """
    drops = last_layer_drop(table)
    if drops.empty:
        return None
    peaks = peak_comparisons(table)
    parts = []
    for _, d in drops.iterrows():
        where = f"layer {d['last'] - 1}"
        mine = peaks[peaks["encoder"] == d["encoder"]]
        best = (
            peak_text(mine)
            if not mine.empty
            else f"layer {d['peak']} ({_f(d['peak_mean'])} dev F1)"
        )
        text = (
            f"A frozen linear probe on each single layer of {d['encoder']} reads best at "
            f"{best}. The last layer (layer {d['last']}) reads "
        )
        if d["drop"] < 0:
            text += (
                f"{_f(-d['drop'])} points below {where} (95% t-interval of the difference "
                f"{_f(d['low'])} to {_f(d['high'])}, {d['n']} paired seeds, paired t-test "
                f"p = {pvalue(d['p'])})"
            )
        else:
            text += (
                f"no worse than {where} ({_f(d['drop'])} points, {d['n']} paired seeds, "
                f"p = {pvalue(d['p'])})"
            )
        paper = paper_last_gap(refs)
        if pd.notna(paper):
            text += (
                ": a linear probe's gap, not the paper's measure (its Table 7 reads layers "
                f"with a BiLSTM, which puts BERT-base's last layer {_f(-paper)} points below "
                "its second-to-last; the `fair_table7` experiment reads layers that way)"
            )
        parts.append(text + ".")
        real = d["drop"] < 0 and pd.notna(d["p"]) and d["p"] < ALPHA
        if geometry is not None:
            parts.append(f"{geometry_sentence(geometry)}.")
            shares = geometry_rows(geometry).set_index("layer")["sentence_share"]
            last = int(shares.index.max())
            pulled = shares.loc[last] > shares.drop(index=last).max()
            if real and pulled:
                parts.append(
                    "Both point the same way: the last layer's word states carry more of "
                    "their sentence's common part and less of their own, as training the "
                    "mean of the last layer's states to embed sentences would make them. "
                    f"The other candidate, {d['encoder']}'s {d['last']} layers against "
                    "BERT-base's 12, is not tested here: no second pretrained encoder is "
                    "available offline."
                )
            else:
                parts.append(
                    "The two do not point the same way, so they do not explain the last "
                    "layer's rank by the sentence-embedding objective."
                )
    return " ".join(parts)


def profile_section(
    table: pd.DataFrame, refs: pd.DataFrame, geometry: dict[str, Any] | None
) -> str:
    """The README section: the paragraph, then one row per layer ("" without a probe).

    Args:
        table: Tidy results table.
        refs: Reference numbers.
        geometry: The committed ``geometry.json`` payload, or None.

    Returns:
        A Markdown section.
    """
    text = profile_sentence(table, refs, geometry)
    if text is None:
        return ""
    profile = profile_rows(table)
    geo = geometry_rows(geometry).set_index("layer") if geometry is not None else None
    header = ["Encoder", "Layer", "Probe dev F1 (95% t-interval)", "Seeds"]
    if geo is not None:
        header += ["Sentence share", "Word-to-sentence cosine", "Cross-sentence cosine"]
    rows = []
    for _, r in profile.iterrows():
        row = [
            r["encoder"],
            f"{r['layer']}" + (" (embeddings)" if r["layer"] == 0 else ""),
            f"{_f(r['mean'])} ({_f(r['t_low'])} to {_f(r['t_high'])})",
            f"{r['n']}",
        ]
        if geo is not None:
            g = geo.loc[r["layer"]] if r["layer"] in geo.index else None
            row += (
                ["–"] * 3
                if g is None
                else [
                    f"{g['sentence_share']:.3f}",
                    f"{g['word_to_sentence_cos']:.3f}",
                    f"{g['anisotropy']:.3f}",
                ]
            )
        rows.append(row)
    lines = [
        "## Layer profile (what explains fair_table7's ordering)",
        "",
        text,
        "",
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---" for _ in header) + " |",
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
        "Dev entity F1 ×100 of the selected model per seed. Sentence share: the share of "
        "the word states' variance between sentences (0: none, 1: every word of a sentence "
        "alike); cosines: a word's state against its sentence's mean state, and two words "
        "of different sentences (anisotropy). Words read at their first sub-token on the "
        "selection slice (held out from train), by `python -m bench.run.geometry`"
        + (
            f" at `{str(geometry['git']['commit'])[:7]}`."
            if geometry is not None and (geometry.get("git") or {}).get("commit")
            else "."
        )
        if geo is not None
        else "Dev entity F1 ×100 of the selected model per seed. No geometry.json yet "
        "(`python -m bench.run.geometry results/<experiment>`).",
    ]
    return "\n".join(lines)
