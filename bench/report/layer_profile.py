"""The per-layer probe in words and as a table (README of ``fair_table7_probe``, Findings).

Generated from the results table, ``references.csv`` and the committed ``geometry.json``
(:mod:`bench.results.layer_profile`, :mod:`bench.results.geometry`); nothing typed by hand.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from bench.report.context import pvalue
from bench.results.geometry import geometry_rows
from bench.results.layer_profile import last_layer_drop, paper_last_drop, profile_rows

#: Below this paired p the last layer's drop is called real.
ALPHA = 0.05


def _f(value: float, digits: int = 1) -> str:
    return "–" if pd.isna(value) else f"{value:.{digits}f}"


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
    parts = []
    for _, d in drops.iterrows():
        where = f"layer {d['last'] - 1}"
        text = (
            f"A frozen linear probe on each single layer of {d['encoder']} reads best at "
            f"layer {d['peak']} ({_f(d['peak_mean'])} dev F1); the last layer (layer "
            f"{d['last']}) reads "
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
        paper = paper_last_drop(refs)
        if pd.notna(paper):
            text += (
                f", where BERT-base's last layer is {_f(-paper)} points below its "
                "second-to-last with a BiLSTM in the paper's Table 7"
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
