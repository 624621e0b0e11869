"""``python -m bench.results.tables SOURCE --style glue|table7|heads|all [-o OUT]``.

Writes ``<style>.md``, ``.tex`` and ``.html`` from the frames and prints the Markdown: ``heads``
the answer and every verdict, ``glue`` GLUE's layout, ``table7`` BERT's Table 7 (CoNLL-2003).
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from operator import methodcaller
from pathlib import Path
from typing import Any, NamedTuple, TypeAlias

import numpy as np
import pandas as pd
from pandas.io.formats.style import Styler

from bench.atomic import atomic_write
from bench.axes.freezing import freeze_rank
from bench.data.text_lines import read_text
from bench.errors import HeadbenchError
from bench.results import display, frames, stats
from bench.results.collect import collect, has_table, read_results, read_table
from bench.results.curves import size_key, size_text
from bench.results.predictions import predictions_table, read_predictions
from bench.results.references import load_references
from bench.results.rescore import verified
from bench.results.run_records import last_launch, provenance_records, read_launch_log
from bench.results.table7_agreement import TABLE7_TASK, selection_rows

STYLES = ("glue", "table7", "heads")
#: GLUE's tasks in its leaderboard's order (the frames hold the dev split: MNLI matched).
GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")
#: LaTeX for the symbols the texts use (cells: after pandas has escaped LaTeX's specials).
SYMBOLS = {"±": r"$\pm$", "−": "$-$", "–": "--", "×": r"$\times$", "▲": r"$\blacktriangle$"}
SYMBOLS |= {"†": r"\dag{}", "‡": r"\ddag{}"}
TEX, CAPTION_TEX = str.maketrans(SYMBOLS), str.maketrans(SYMBOLS | {"%": r"\%"})
HTML_HEAD = '<!DOCTYPE html><html lang="en"><meta charset="utf-8"><title>{}</title><body>'
LATEX: dict[str, Any] = {"hrules": True, "position_float": "centering", "convert_css": True}
CAPTIONS = {
    "heads": f"Mean ±95% interval ×100; bold: best; {display.BEATS_ALL} better than every other "
    f"head; {display.NO_HEAD_LEARNED} none above the best constant; {display.CLIPPED} clipped.",
    "verdicts": "Every pair of heads of a setting, read 'A is better than B' and so on: the "
    "interval is the one the verdict uses; Holm's p is within the family.",
    "glue": "Dev sets, main metric ×100: mean ±95% interval (seeds, failed runs); bold: best "
    "of its column; Avg: rows with every task; published: a metric in parentheses differs.",
    "table7": "CoNLL-2003 dev F1 ×100, frozen features into a BiLSTM: ours (mean ±95% "
    "interval) beside BERT-base's (Devlin et al. 2019, Table 7); compare ranks, not levels.",
}


class Part(NamedTuple):
    """One table: its cells and where they are bold."""

    title: str
    caption: str
    frame: pd.DataFrame
    bold: pd.DataFrame | None = None


Document = tuple[str, str, list[Part]]  #: A style's title, a line above its tables, the tables.
Frame: TypeAlias = pd.DataFrame


def heads_document(table: Frame, scores: Frame, comparisons: Frame, refs: Frame) -> Document:
    """The answer table and every comparison's verdict, as the report and README show them."""
    frame, (best, _) = display.answer_frame(scores), display.answer_marks(scores)
    answer = Part("Which head?", CAPTIONS["heads"], frame, best)
    verdicts = Part("Verdicts", CAPTIONS["verdicts"], display.verdict_frame(comparisons, scores))
    parts = [answer, verdicts][: 1 + bool(len(comparisons))]
    return "Heads × settings", display.takeaway(scores, comparisons), parts


def glue_document(table: Frame, scores: Frame, comparisons: Frame, refs: Frame) -> Document:
    """GLUE's layout: tasks as columns in its order, with the published RoBERTa-base rows."""
    rows = scores[scores["task"].isin(GLUE_TASKS)].copy()
    tasks = [t for t in GLUE_TASKS if t in set(rows["task"])]
    if not tasks:
        return "GLUE dev results", "No GLUE results.", []
    sized = rows.groupby(["encoder", "freeze_label"])["train_size"].transform("nunique") > 1
    size = rows["freeze_label"] + ", " + rows["train_size"].map(size_text)
    rows["Freeze"] = rows["freeze_label"].where(~sized, size)
    failed = rows["n_failed"].map(lambda k: f", {k} failed)" if k else ")")
    rows["cell"] = rows.apply(display.score_text, axis=1) + " (n=" + rows["n"].astype(str) + failed
    heads = {h: i for i, h in enumerate(display.heads_in_order(rows))}
    keys = {"head_label": lambda h: heads[h], "freeze_label": freeze_rank, "train_size": size_key}
    rows = rows.sort_values(["encoder", *keys], key=lambda c: c.map(keys.get(str(c.name), str)))
    metric, short = rows.groupby("task")["metric"].first(), display.METRIC_NAMES.get
    name = {t: f"{display.TASK_NAMES[t]} ({short(m, m)})" for t, m in metric.items()}
    index, values = ["encoder", "head_label", "Freeze"], ["cell", "mean"]
    wide = rows.pivot_table(values, index, "task", aggfunc="first", sort=False)
    means = wide["mean"].reindex(columns=tasks).astype(float)
    cells = wide["cell"].reindex(columns=tasks).rename(columns=name).rename_axis(columns=None)
    if len(tasks) > 1:
        means["Avg"] = means.mean(axis=1, skipna=False)
        cells["Avg"] = means["Avg"].map(display.points).where(means["Avg"].notna())
    frame = cells.reset_index().rename(columns={"encoder": "Encoder", "head_label": "Head"})
    frame.insert(0, "Source", "ours")
    published = refs[(refs["setting"] == "finetune") & (refs["split"] == "dev")]
    for model, group in published[published["task"].isin(tasks)].groupby("model"):
        row = {"Source": f"published: {group['source'].iloc[0]}", "Encoder": model}
        row |= {"Head": "its own", "Freeze": "full"}
        for r in group.itertuples():
            other = f" ({short(str(r.metric), str(r.metric))})"
            row[name[r.task]] = f"{r.value:.1f}{'' if r.metric == metric[r.task] else other}"
        frame.loc[len(frame)] = pd.Series(row)
    bold = pd.DataFrame(False, index=frame.index, columns=frame.columns)
    bold.iloc[: len(means), 4:] = (means == means.max()).to_numpy()
    return "GLUE dev results", "", [Part("", CAPTIONS["glue"], frame.fillna(""), bold)]


def table7_document(table: Frame, scores: Frame, comparisons: Frame, refs: Frame) -> Document:
    """Our frozen BiLSTM layer selections (``bilstm-<selection>``) beside Table 7's."""
    title = "BERT Table 7: CoNLL-2003 by layer selection"
    found = selection_rows(table, scores, refs).drop(columns=["mean", "low", "high", "n"])
    if found.empty:
        return title, "No frozen BiLSTM layer selections of Table 7 in these results.", []
    rows = found.merge(scores, on=[*frames.SETTING, "head_label"])
    model = str(refs.loc[refs["task"] == TABLE7_TASK, "model"].iloc[0])
    ours, diff = [display.score_text(r) for _, r in rows.iterrows()], rows["mean"] - rows["paper"]
    columns = {"Encoder": rows["encoder"], "Training": rows["train_size"].map(size_text)}
    columns |= {"Layers": rows["paper_row"], "Ours": ours, "Rank": rows["rank"].map("{:g}".format)}
    columns |= {model: rows["paper"].map(display.points)}
    columns |= {f"Rank ({model})": rows["paper_rank"].map("{:g}".format)}
    columns |= {"Ours − paper": diff.map(lambda v: display.points(v, True))}
    frame = pd.DataFrame(columns)
    bold = pd.DataFrame(False, index=frame.index, columns=frame.columns)
    bold["Ours"], bold[model] = rows["rank"] == 1, rows["paper_rank"] == 1
    return title, "", [Part("", CAPTIONS["table7"], frame, bold)]


#: Each style's document: ``(table, scores, comparisons, refs) -> (title, lead, parts)``.
DOCUMENTS = {"glue": glue_document, "table7": table7_document, "heads": heads_document}


def _styler(part: Part, escape: str, uuid: str) -> Styler:
    """The part's frame as a pandas Styler: no index, cells and headers escaped, bold set."""
    symbols = (lambda text: str(text).translate(TEX)) if escape == "latex" else None
    styler = Styler(part.frame, uuid=uuid, cell_ids=False).hide(axis="index")
    styler = styler.format(symbols, escape=escape).format_index(symbols, escape=escape, axis=1)
    if part.bold is not None:
        css = np.where(part.bold.to_numpy(dtype=bool), "font-weight: bold;", "")
        styler = styler.apply(lambda _: css, axis=None)
    return styler


def to_markdown(doc: Document) -> str:
    """The document as Markdown (bold as ``**``), every text escaped."""
    escape = display.markdown_text
    out = [f"# {escape(doc[0])}", escape(doc[1])]
    for part in doc[2]:
        out += [f"## {escape(part.title)}" if part.title else "", escape(part.caption)]
        out.append(display.markdown_table(part.frame, part.bold))
    return "\n\n".join(text for text in out if text) + "\n"


def to_latex(doc: Document) -> str:
    """The document as LaTeX tables (``Styler.to_latex``; needs booktabs and amssymb)."""
    out = [f"% {doc[0]}: generated by bench.results.tables", f"% {doc[1]}" if doc[1] else ""]
    for k, part in enumerate(doc[2]):
        caption = part.caption.translate(CAPTION_TEX)
        out.append(_styler(part, "latex", f"t{k}").to_latex(caption=caption, **LATEX))
    return "\n".join(filter(None, out)).rstrip() + "\n"


def to_html(doc: Document) -> str:
    """The document as a small HTML page (``Styler.to_html``)."""
    e, (title, lead, parts) = html.escape, doc
    out = [HTML_HEAD.format(e(title)), f"<h1>{e(title)}</h1>", lead and f"<p>{e(lead)}</p>"]
    for k, part in enumerate(parts):
        out += [f"<h2>{e(part.title)}</h2>" if part.title else "", f"<p>{e(part.caption)}</p>"]
        out.append(_styler(part, "html", f"t{k}").to_html())
    return "\n".join([*filter(None, out), "</body></html>\n"])


def load(path: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """A source's normalised results table and frames (stored in its directory, else computed)."""
    if not path.exists():
        raise FileNotFoundError(f"no results or runs at {path}")
    folder, tabled = path.parent if path.is_file() else path, path.is_file() or has_table(path)
    table = stats.normalize_table(read_table(path) if tabled else collect([path], None))
    if (stored := frames.read_frames(folder)) is not None:
        return table, *stored
    command = str(last_launch(read_launch_log([folder])).get("command") or "")
    if tabled:
        known = folder / "cells.json"
        cells = json.loads(read_text(known)) if known.is_file() else []
        return table, *frames.from_results(table, read_predictions(folder), cells, command)
    results, predictions, _ = verified(read_results([path])[0])
    found, cells = predictions_table(predictions), provenance_records(results)
    return table, *frames.from_results(table, found, cells, command)


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m bench.results.tables SOURCE --style STYLE [-o OUT_DIR]``."""
    parser = argparse.ArgumentParser("python -m bench.results.tables", description=__doc__)
    parser.add_argument("source", type=Path, help="results.csv/.parquet, a results or runs dir")
    parser.add_argument("--style", required=True, choices=[*STYLES, "all"])
    parser.add_argument("-o", "--out", type=Path, help="output dir (default: the results dir)")
    args = parser.parse_args(argv)
    out = args.out or (args.source.parent if args.source.is_file() else args.source)
    try:
        table, scores, comparisons = load(args.source)
    except (FileNotFoundError, HeadbenchError, ValueError) as err:  # names the file and why
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    tasks = set(table["task"].dropna())  # ``all``: the styles with data in the table
    has = {"glue": bool(tasks & set(GLUE_TASKS)), "table7": TABLE7_TASK in tasks, "heads": tasks}
    for style in [s for s in STYLES if has[s]] if args.style == "all" else [args.style]:
        doc = DOCUMENTS[style](table, scores, comparisons, load_references())
        texts = {"md": to_markdown(doc), "tex": to_latex(doc), "html": to_html(doc)}
        for ext, text in texts.items():
            atomic_write(out / f"{style}.{ext}", methodcaller("write", text))
        print(f"{texts['md']}\nwrote {', '.join(f'{out / style}.{ext}' for ext in texts)}")


if __name__ == "__main__":
    main()
