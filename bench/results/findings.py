"""The README's Findings, generated from the committed reference results.

Every number in the summary comes from ``results/<experiment>/results.csv`` through
:mod:`bench.results.stats`; nothing is typed by hand. The README holds the output between
two markers, and a test checks that it is current::

    python -m bench.results.findings --write README.md   # regenerate the block
    python -m bench.results.findings --check README.md   # exit 1 if it is stale
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

import pandas as pd

from bench.atomic import atomic_write
from bench.results import stats
from bench.results.collect import read_table

START, END = "<!-- findings:start -->", "<!-- findings:end -->"
ROOT = Path(__file__).resolve().parents[2]


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


def best_head_counts(table: pd.DataFrame) -> tuple[Counter[str], int]:
    """How often each head label has the best mean dev main metric, over task × freezing.

    Returns:
        The win count per head label and the number of settings.
    """
    cells = stats.cell_stats(table)
    winners = cells.loc[cells.groupby(["task", "encoder", "freeze_label"])["mean"].idxmax()]
    return Counter(winners["head_label"]), len(winners)


def best_layer_choice(table: pd.DataFrame, freeze: str) -> tuple[str, float, str, float]:
    """The best and the worst head label (layer choice) for one freezing, by mean dev metric.

    Returns:
        ``(best label, its mean, worst label, its mean)``.
    """
    cells = stats.cell_stats(table)
    rows = cells[cells["freeze_label"] == freeze].sort_values("mean")
    best, worst = rows.iloc[-1], rows.iloc[0]
    return best["head_label"], best["mean"], worst["head_label"], worst["mean"]


def summary(results: Path = ROOT / "results") -> str:
    """The Findings block: one sentence per reference experiment, numbers from its table.

    Args:
        results: The directory holding ``cpu_heads/``, ``cpu_stability/``,
            ``layers_sst2/`` and ``cpu_table7/``.

    Returns:
        Markdown bullet lines.
    """
    lines = []
    wins, settings = best_head_counts(read_table(results / "cpu_heads"))
    head, count = wins.most_common(1)[0]
    lines.append(
        f"- **`{head}` has the best mean in {count} of {settings} task × freezing settings** "
        f"of `cpu_heads` (MiniLM, 5 GLUE tasks, 500 examples, 3 seeds; dev main metric)."
    )
    compared = stats.compare_heads(read_table(results / "cpu_stability"))
    significant = compared[compared["p"] < 0.05].sort_values("p")
    if len(significant):
        row = significant.iloc[0]
        lines.append(
            f"- **With 10 seeds, {len(significant)} of {len(compared)} head differences in "
            f"`cpu_stability` {'reaches' if len(significant) == 1 else 'reach'} p < 0.05** "
            "(exact paired Wilcoxon); the clearest: "
            f"{row['task'].upper()} {row['freeze_label']}, `{row['head_a']}` − "
            f"`{row['head_b']}` = {100 * row['diff']:+.1f} points "
            f"(95% CI {100 * row['ci_low']:+.1f} to {100 * row['ci_high']:+.1f}, "
            f"p = {row['p']:.4f})."
        )
    for freeze in ("frozen", "full"):
        best, best_mean, worst, worst_mean = best_layer_choice(
            read_table(results / "layers_sst2"), freeze
        )
        lines.append(
            f"- **Which layer (SST-2, {freeze})**: `{best}` is best ({_pct(best_mean)} "
            f"accuracy), `{worst}` worst ({_pct(worst_mean)}) in `layers_sst2`."
        )
    table7 = read_table(results / "cpu_table7")
    frozen = table7[table7["freeze_label"] == "frozen"]
    best, best_mean, worst, worst_mean = best_layer_choice(frozen, "frozen")
    lines.append(
        f"- **BERT's Table 7 at CPU scale** (`cpu_table7`, CoNLL-2003 dev entity F1, frozen "
        f"features into a BiLSTM): `{best}` is best ({_pct(best_mean)}), `{worst}` worst "
        f"({_pct(worst_mean)})."
    )
    return "\n".join(lines) + "\n"


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
    parser = argparse.ArgumentParser(prog="python -m bench.results.findings")
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
