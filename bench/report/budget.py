"""Budget, search and seeds per setting, and whether each search was adequate (``cells.json``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from bench.report.context import ReportContext
from bench.report.html import Section, details, frame_table
from bench.results import adequacy, stats
from bench.results.adequacy import setting_of

SETTING = list(stats.SETTING_KEYS)
#: The learning rate of each freezing family (the fixed one without a search).
LR = {"frozen": "frozen_head_lr", "finetune": "encoder_lr"}


def shown(frame: pd.DataFrame) -> pd.DataFrame:
    """A frame as a table shows it: headers with spaces, the whole training split as ``all``."""
    if "train_size" in frame:
        frame = frame.assign(train_size=frame["train_size"].replace({stats.WHOLE_SPLIT: "all"}))
    return frame.rename(columns=lambda c: str(c).replace("_", " "))


def _g(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def cell_budgets(cells: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per cell: setting, head, seed, budget, selected learning rate, edge, last epoch."""
    rows = []
    for record in cells:
        config, found = record.get("config") or {}, record.get("search") or {}
        search, cell = config.get("search") or {}, record.get("cell") or {}
        trials = int(search.get("trials") or 0) if search.get("name", "none") != "none" else 0
        trials = int(found.get("trials") or trials)  # trained: the grid's size, not its cap
        family = "frozen" if (config.get("freeze") or {}).get("name") == "frozen" else "finetune"
        space = ((search.get("space") or {}).get(family) or {}) if trials else {}
        key = next((k for k in space if k.endswith("_lr")), LR[family])
        lr = (found.get("selected_config") or {}).get(key, (config.get("optim") or {}).get(key))
        selection, chosen = config.get("selection") or {}, record.get("selection") or {}
        size, best = chosen.get("size", selection.get("size")), chosen.get("best_epoch")
        epochs = (config.get("trainer") or {}).get("max_epochs")
        grid = " × ".join(f"{k} ∈ {{{', '.join(map(_g, v))}}}" for k, v in space.items())
        held = f"held out ({size})" if selection.get("name") == "heldout" else "dev"
        edge = adequacy.is_edge(key, lr, space[key]) if key in space else None
        last = bool(adequacy.unstopped(best, epochs, chosen.get("stopped_early")))
        row = {"head_label": str(cell.get("head_label")), "seed": cell.get("seed")}
        row |= {"space": grid or f"none ({key} {_g(lr)})", "trials": trials, "selection": held}
        row |= {"max_epochs": epochs, "tuning_s": float(found.get("train_time_s") or 0.0)}
        row |= {"lr_key": key, "lr": lr, "at_edge": edge, "last_epoch": last}
        rows.append(setting_of(record) | row)
    return pd.DataFrame(rows)


def budget_frame(budgets: pd.DataFrame) -> pd.DataFrame:
    """Per setting and budget: its heads, seeds and tuning minutes (two rows: unequal budgets)."""
    keys = [*SETTING, "space", "trials", "selection", "max_epochs"]
    tuning = (
        budgets.drop_duplicates([*SETTING, "head_label"])
        .groupby(keys, dropna=False)["tuning_s"]
        .sum()
    )
    heads = ("head_label", lambda h: ", ".join(sorted(set(h))))
    found = budgets.groupby(keys, dropna=False).agg(heads=heads, seeds=("seed", "nunique"))
    return found.join(tuning.div(60).rename("tuning_min")).reset_index()


def adequacy_frame(budgets: pd.DataFrame) -> pd.DataFrame:
    """Per setting × searched head: selected learning rates, at the grid's edge, last epochs."""
    found = budgets[budgets["trials"] > 0].groupby([*SETTING, "head_label", "lr_key"])
    return found.agg(
        lr=("lr", lambda v: ", ".join(sorted({_g(x) for x in v}))),
        at_edge=("at_edge", "any"),
        last_epoch=("last_epoch", "sum"),
        runs=("seed", "size"),
    ).reset_index()


def budget_section(ctx: ReportContext) -> Section | None:
    """The budget per setting and the adequacy of each head's search; None without cells.

    The adequacy line and table are :func:`bench.results.adequacy.adequacy`'s (the scores
    frame's ``adequate`` and ``edge``), with every option's choices counted.
    """
    cells = [c for c in ctx.inputs.cells if isinstance(c, dict)]
    budgets = cell_budgets(cells)
    if budgets.empty:
        return None
    frame, searched = budget_frame(budgets), adequacy_frame(budgets)
    verdicts = adequacy.adequacy(cells)
    caption = (
        f"{len(frame[SETTING].drop_duplicates())} settings; "
        f"{frame.duplicated(SETTING).sum()} gave their heads unequal budgets (two rows)."
    )
    parts = [frame_table(shown(frame), caption, {"tuning min": "{:.1f}"})]
    line = adequacy.summary(verdicts)
    if line:
        caption = f"{line[0].upper()}{line[1:]}."
        if len(searched):
            caption += (
                f" {searched['at_edge'].sum()} of {len(searched)} heads selected a learning rate "
                f"at its grid's edge; {searched['last_epoch'].sum()} of {searched['runs'].sum()} "
                "runs selected their last allowed epoch."
            )
        parts.append(details(caption, frame_table(shown(verdicts))))
    return Section("budget", "Budget, search and seeds", "\n".join(parts))
