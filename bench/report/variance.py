"""The report's variance section: initialisation against batch order, failure origins.

How much of each head's spread is initialisation, how much batch order, and where its
failures come from.

It decomposes the settings whose runs cross training seeds with order seeds
(``experiment=variance_seeds``; crossed as :func:`bench.results.variance.run_grid` says:
a complete grid of at least 2 × 2); the numbers and their definitions are
:mod:`bench.results.variance`. Where runs have order seeds of their own that vary but no
setting crosses them with its seeds (each run's order seed is its seed), the section is
one sentence saying why there is nothing to separate; without such runs it is left out.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from bench.report.context import ReportContext, points, pvalue
from bench.report.html import Section, figure, paragraph, table
from bench.report.style import Palette, grid, ordered, svg_data_uri, task_title
from bench.results.curves import size_text, whole_number
from bench.results.stats import WHOLE_SPLIT
from bench.results.variance import (
    ALPHA,
    CROSSED,
    FROM_SEED,
    NOT_CROSSED,
    ORDER_IS_SEED,
    order_designs,
    variance_table,
)

TITLE = "8. Where the variance comes from"
HEADER = [
    "head",
    "grid",
    "mean",
    "SD",
    "SD init",
    "SD order",
    "SD resid.",
    "init %",
    "order %",
    "p init",
    "p order",
    "failed",
    "failures from",
]
#: The components in the order drawn, with their colours.
COMPONENTS = (
    ("share_init", "initialisation (seed)", "#0072B2"),
    ("share_order", "batch order (order_seed)", "#E69F00"),
    ("share_resid", "residual (interaction)", "#BBBBBB"),
)
_SETTING = ["task", "encoder", "freeze_label", "train_size"]


def setting_title(keys: tuple, multi_encoder: bool) -> str:
    """``SST-2, frozen, 2,000 examples`` (the encoder too when the report has several).

    Args:
        keys: (task, encoder, freeze label, training size).
        multi_encoder: Whether to name the encoder.
    """
    task, encoder, freeze, size = keys
    parts = [task_title(task), *([encoder] if multi_encoder else []), freeze]
    if whole_number(size) != WHOLE_SPLIT:
        parts.append(size_text(size))
    return ", ".join(parts)


def _percent(share: float) -> str:
    return "" if pd.isna(share) else f"{100 * share:.0f}"


def variance_rows(group: pd.DataFrame, palette: Palette) -> list[list[object]]:
    """One table row per head of a setting (heads in the report's order)."""
    order = ordered(group["head_label"], palette.heads)
    rows: list[list[object]] = []
    for head in order:
        r = group[group["head_label"] == head].iloc[0]
        grid_text = f"{int(r['n_init'])}×{int(r['n_order'])}"
        if int(r["runs_left_out"]):
            grid_text += f" (−{int(r['runs_left_out'])})"
        rows.append(
            [
                head,
                grid_text,
                points(r["mean"]),
                points(r["sd_total"], 2),
                points(r["sd_init"], 2),
                points(r["sd_order"], 2),
                points(r["sd_resid"], 2),
                _percent(r["share_init"]),
                _percent(r["share_order"]),
                pvalue(r["p_init"]),
                pvalue(r["p_order"]),
                f"{int(r['failures'])}",
                "" if pd.isna(r["failure_origin"]) else str(r["failure_origin"]),
            ]
        )
    return rows


def shares_figure(frame: pd.DataFrame, palette: Palette, multi_encoder: bool) -> Figure | None:
    """Stacked bars of each head's variance shares, one panel per setting.

    Args:
        frame: :func:`~bench.results.variance.variance_table` rows.
        palette: Report palette (head order).
        multi_encoder: Whether to name the encoder in panel titles.

    Returns:
        The figure, or None when no head has a decomposition.
    """
    frame = frame.dropna(subset=["share_init"])
    if frame.empty:
        return None
    settings = list(frame.groupby(_SETTING, sort=True))
    fig, axes = grid(len(settings), columns=2, width=4.2, height=0.5 + 0.45 * 6)
    for ax, (keys, group) in zip(axes, settings, strict=True):
        heads = ordered(group["head_label"], palette.heads)
        by_head = group.set_index("head_label").loc[heads]
        left = pd.Series(0.0, index=heads)
        for column, _, colour in COMPONENTS:
            values = by_head[column].fillna(0.0) * 100
            ax.barh(heads, values, left=left, color=colour, height=0.6)
            left = left + values
        ax.set_xlim(0, 100)
        ax.invert_yaxis()
        ax.set_xlabel("share of the head's score variance (%)")
        ax.set_title(setting_title(keys, multi_encoder))
    handles = [Patch(color=colour, label=label) for _, label, colour in COMPONENTS]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles))
    fig.suptitle("Variance components per head: initialisation vs batch order")
    return fig


def separable(frame: pd.DataFrame) -> pd.Series:
    """Which rows of :func:`~bench.results.variance.variance_table` have a decomposition.

    A head's runs decompose when, after the incomplete seeds and order seeds are left out,
    at least two seeds remain crossed with at least two order seeds.

    Args:
        frame: :func:`~bench.results.variance.variance_table` rows.

    Returns:
        A boolean per row.
    """
    n_init = pd.to_numeric(frame["n_init"], errors="coerce").fillna(0)
    n_order = pd.to_numeric(frame["n_order"], errors="coerce").fillna(0)
    return (n_init >= 2) & (n_order >= 2)


def not_crossed_text(runs: pd.DataFrame) -> str:
    """Why no head's variance can be split into initialisation and batch order.

    Args:
        runs: :func:`bench.results.stats.run_values` rows of the report.

    Returns:
        One sentence: the seed and the batch order were not varied independently (each
        run's order seed its seed, or the seeds and order seeds form no grid of 2 × 2:
        :func:`bench.results.variance.order_design`).
    """
    designs = order_designs(runs)
    own = designs.loc[designs["design"] != FROM_SEED, "design"]
    how = (
        "every run's batch order seed is its training seed"
        if not own.empty and bool((own == ORDER_IS_SEED).all())
        else "no head has two training seeds that each ran with the same two order seeds"
    )
    return (
        f"Seed and batch order were not varied independently here ({how}), so their shares "
        "of the variance cannot be separated; a crossed design, every training seed with "
        "every order seed (experiment=variance_seeds), can."
    )


#: Designs whose order seeds vary from run to run without forming a grid: the report says
#: why their variance cannot be split (a single order seed for every run varies nothing).
VARIED_NOT_CROSSED = (ORDER_IS_SEED, NOT_CROSSED)


def left_out_text(frame: pd.DataFrame, designs: pd.DataFrame, ctx: ReportContext) -> list[str]:
    """The settings, or heads of a setting, with order seeds of their own but no decomposition.

    Args:
        frame: :func:`~bench.results.variance.variance_table` rows.
        designs: :func:`~bench.results.variance.order_designs` of the report's runs.
        ctx: The report context (head order, whether to name encoders).

    Returns:
        One entry per setting: its title when none of its heads decomposes, else the title
        and the heads that do not.
    """
    own = designs[designs["design"] != FROM_SEED]
    ok = frame[separable(frame)] if not frame.empty else frame
    decomposed = set(zip(*(ok[k] for k in [*_SETTING, "head_label"]), strict=True))
    out = []
    for keys, group in own.groupby(_SETTING, sort=True):
        heads = ordered(
            (h for h in group["head_label"] if (*keys, h) not in decomposed), ctx.palette.heads
        )
        if len(heads) == len(group):
            out.append(setting_title(keys, ctx.multi_encoder))
        elif heads:
            out.append(f"{setting_title(keys, ctx.multi_encoder)}: {', '.join(heads)}")
    return out


def variance_section(ctx: ReportContext) -> Section | None:
    """The decomposition per head and setting, a figure of the shares, the failure origins.

    Returns:
        The section; one sentence saying why when no head's runs are crossed
        (:func:`bench.results.variance.run_grid`) but some have order seeds of their own
        that vary (each run's order seed is its seed); None when neither.
    """
    frame = variance_table(ctx.inputs.table)
    designs = order_designs(ctx.runs)
    ok = separable(frame)
    if not ok.any():
        if designs["design"].isin([CROSSED, *VARIED_NOT_CROSSED]).any():
            return Section("variance", TITLE, paragraph(not_crossed_text(ctx.runs), "note"))
        return None
    left_out = left_out_text(frame, designs, ctx)
    frame = frame[ok]
    parts = [
        paragraph(
            "Each head's runs cross training seeds (head initialisation and dropout masks) "
            "with order seeds (the training batch order), one run per pair. A two-way analysis "
            "of variance without replication splits the variance of the scores (×100) into an "
            "initialisation component, a batch-order component and a residual (their "
            "interaction, which one run per pair cannot tell from other noise): random-effects "
            "moment estimates, truncated at zero, shown as standard deviations and as shares of "
            "their sum; p: the F test of each factor against the residual. 'Failures from' "
            "applies the same test to the 0/1 failure indicator (a run at or below the best "
            "constant prediction): 'initialisation' when some initialisations fail whatever "
            "the order, 'batch order' when some orders fail whatever the initialisation, 'not "
            "separable' when the failures follow neither (level 0.05, an approximation on a 0/1 "
            "outcome). Grid: initialisation seeds × order seeds used (−n: runs left out to make "
            "the grid complete).",
            "note",
        )
    ]
    if left_out:
        parts.append(
            paragraph(
                "Not shown, because their seeds and order seeds form no grid of at least "
                f"2 × 2 and so their shares cannot be separated: {'; '.join(left_out)}.",
                "note",
            )
        )
    for keys, group in frame.groupby(_SETTING, sort=True):
        parts.append(
            table(
                HEADER,
                variance_rows(group, ctx.palette),
                caption=setting_title(keys, ctx.multi_encoder)
                + f": {group['metric'].iloc[0]} on {group['split'].iloc[0]}.",
                numeric=list(range(2, len(HEADER) - 1)),
            )
        )
    fig = shares_figure(frame, ctx.palette, ctx.multi_encoder)
    if fig is not None:
        parts.append(
            figure(
                svg_data_uri(fig),
                "Stacked bars: each head's variance shares, initialisation, order, residual",
                "Shares of each head's score variance: initialisation (seed), batch order "
                "(order_seed) and the residual, from the table above.",
            )
        )
    return Section("variance", TITLE, "\n".join(parts))


#: How the Findings sentence words each failure origin, in the order it names them
#: (:data:`bench.results.variance.ORIGINS`; ``none`` is not named).
ORIGIN_WORDS = (
    ("initialisation", "from initialisation"),
    ("batch order", "from batch order"),
    ("both", "from both initialisation and batch order"),
    ("not separable", "not separable"),
    ("every run", "every run failed"),
)


def _where(r: pd.Series, frame: pd.DataFrame) -> str:
    """``MRPC``, with the encoder, freezing and size where the frame has several."""
    where = [task_title(r["task"])]
    if frame["encoder"].nunique() > 1:
        where.append(str(r["encoder"]))
    if frame["freeze_label"].nunique() > 1:
        where.append(str(r["freeze_label"]))
    if frame["train_size"].nunique() > 1 and whole_number(r["train_size"]) != WHOLE_SPLIT:
        where.append(size_text(r["train_size"]))
    return ", ".join(where)


def origins_text(frame: pd.DataFrame) -> str:
    """Every failure origin the decomposition found, with the heads it names.

    Args:
        frame: :func:`~bench.results.variance.variance_table` rows with a decomposition.

    Returns:
        ``from initialisation: `a` on MRPC; from batch order: `b` on MRPC; not
        separable: `c`, `d` on MRPC``: one part per origin that some head's failures
        have (:func:`bench.results.variance.failure_origin`), "" when none has one.
    """
    parts = []
    for origin, words in ORIGIN_WORDS:
        places: dict[str, list[str]] = {}
        for _, r in frame[frame["failure_origin"] == origin].iterrows():
            places.setdefault(_where(r, frame), []).append(f"`{r['head_label']}`")
        if places:
            named = " and ".join(
                f"{', '.join(heads)} on {where}" for where, heads in places.items()
            )
            parts.append(f"{words}: {named}")
    return "; ".join(parts)


def variance_sentence(table: pd.DataFrame) -> str | None:
    """One Findings sentence: the median shares, and where each head's failures come from.

    Args:
        table: A tidy results table.

    Returns:
        The sentence, or None when no setting crosses seeds with order seeds.
    """
    frame = variance_table(table).dropna(subset=["share_init"])
    if frame.empty:
        return None
    n_init = int(frame["n_init"].median())
    n_order = int(frame["n_order"].median())
    text = (
        f"Variance sources ({len(frame)} head settings, {n_init} initialisations × {n_order} "
        f"batch orders each): initialisation takes a median "
        f"{_percent(frame['share_init'].median())}% of a head's score variance, batch order "
        f"{_percent(frame['share_order'].median())}%, the residual "
        f"{_percent(frame['share_resid'].median())}%"
    )
    dominant = frame[frame["share_init"] > frame["share_order"]]
    text += f"; initialisation outweighs order in {len(dominant)} of {len(frame)}"
    failing = frame[frame["failures"] > 0]
    text += f"; {len(failing)} of {len(frame)} head settings had failed runs"
    origins = origins_text(frame)
    if origins:
        text += f", traced by F tests of the 0/1 failure indicator (level {ALPHA:g}) — {origins}"
    return text + "."
