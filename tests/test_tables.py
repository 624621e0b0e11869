"""Paper-style tables: every number recomputed from the runs (pandas, SciPy, statsmodels),
the stored frames shown as they are, the three files, escaping, the command line."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from bench.results import display, frames, stats, tables
from bench.results.references import load_references, lookup

ACC, F1 = {"accuracy": 0.5}, {"f1": 0.3}
#: (task, encoder, head_label, freeze, layers) -> dev values per seed (None: the run diverged).
RUNS: dict[tuple[str, str, str, str, str | None], list[float | None]] = {
    ("sst2", "minilm", "linear", "frozen", None): [0.70, 0.72, 0.71],
    ("sst2", "minilm", "pooler-random", "frozen", None): [0.69, 0.50, 0.70],
    ("sst2", "minilm", "bilstm", "frozen", None): [0.76, 0.78, 0.75],
    ("sst2", "minilm", "linear", "full", None): [0.80, 0.83, 0.81],
    ("sst2", "minilm", "pooler-random", "full", None): [0.83, 0.85, None],
    ("stsb", "minilm", "linear", "full", None): [0.85, 0.86, 0.84],
    ("mrpc", "minilm", "linear", "full", None): [0.81, 0.84, 0.82],
    ("mrpc", "roberta_base", "pooler-random", "full", None): [0.91, 0.92, 0.90],
    ("conll2003", "minilm", "bilstm-embeddings", "frozen", "embeddings"): [0.80, 0.82, 0.79],
    ("conll2003", "minilm", "bilstm-second_to_last", "frozen", "second_to_last"): [
        0.905,
        0.91,
        0.90,
    ],
    ("conll2003", "minilm", "bilstm-last", "frozen", "last"): [0.90, 0.92, 0.905],
    ("conll2003", "minilm", "bilstm-concat_last4", "frozen", "concat_last4"): [0.915, 0.93, 0.92],
}
MAIN = {"sst2": "accuracy", "stsb": "pearson", "mrpc": "f1", "conll2003": "f1"}
REFS = load_references()
BASELINE = {"sst2": ACC, "mrpc": F1, "conll2003": F1, "stsb": {}}


def results(runs: dict = RUNS) -> pd.DataFrame:
    """A tidy results table of ``runs`` (dev split, main metric)."""
    rows = []
    for (task, encoder, label, freeze, layers), values in runs.items():
        for seed, value in enumerate(values, start=1):
            rows.append(
                {
                    "task": task,
                    "encoder": encoder,
                    "head": label.split("-")[0],
                    "head_label": label,
                    "layers": layers,
                    "freeze": freeze,
                    "freeze_label": freeze,
                    "seed": seed,
                    "status": "ok" if value is not None else "diverged",
                    "reason": None if value is not None else "nan loss",
                    "main_metric": MAIN[task],
                    "split": "dev" if value is not None else None,
                    "metric": MAIN[task] if value is not None else None,
                    "value": value,
                    "baseline": BASELINE[task].get(MAIN[task]) if value is not None else None,
                    "run_dir": f"runs/{task}/{encoder}/{label}/{freeze}/seed={seed}",
                }
            )
    return stats.normalize_table(pd.DataFrame(rows))


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return results()


@pytest.fixture(scope="module")
def both(table) -> tuple[pd.DataFrame, pd.DataFrame]:
    return frames.from_results(table, pd.DataFrame(), [], "")


def md_tables(text: str) -> list[pd.DataFrame]:
    """The Markdown tables of a text, as frames of their cell texts."""
    out = []
    for block in re.findall(r"(?:^\|.*\|\n?)+", text, flags=re.M):
        lines = [[c.strip() for c in line.strip()[1:-1].split("|")] for line in block.splitlines()]
        out.append(pd.DataFrame(lines[2:], columns=lines[0]))
    return out


def expected_scores() -> pd.DataFrame:
    """Per head and setting, independently: the mean of its runs and the 95% t-interval."""
    rows = []
    for (task, encoder, label, freeze, _), values in RUNS.items():
        x = np.array([v for v in values if v is not None])
        se = x.std(ddof=1) / math.sqrt(len(x))
        half = sps.t.ppf(0.975, len(x) - 1) * se
        lo, hi = (-1.0, 1.0) if task == "stsb" else (0.0, 1.0)
        low, high = max(x.mean() - half, lo), min(x.mean() + half, hi)
        base = BASELINE[task].get(MAIN[task], 0.0)
        rows.append(
            dict(task=task, encoder=encoder, freeze_label=freeze, train_size=0, head_label=label)
            | dict(mean=x.mean(), se=se, low=low, high=high, clipped=hi < x.mean() + half)
            | dict(n=len(x), n_failed=len(values) - len(x) + int(sum(x <= base)))
        )
    return pd.DataFrame(rows)


def test_the_answer_cells_are_the_run_means_with_their_t_intervals(tmp_path, table, both):
    tables.main([_write(tmp_path, table, both), "--style", "heads", "-o", str(tmp_path / "o")])
    answer = md_tables((tmp_path / "o" / "heads.md").read_text(encoding="utf-8"))[0]
    answer["Setting"] = answer["Setting"].str.removesuffix(f" {display.NO_HEAD_LEARNED}")
    expected = expected_scores()
    names = display.setting_names(expected)
    checked = 0
    for _, r in expected.iterrows():
        key = tuple(r[k] for k in frames.SETTING)
        cell = answer.loc[answer["Setting"] == names[key], r["head_label"]].item()
        best = (
            r["mean"]
            == expected.loc[
                (expected[frames.SETTING] == pd.Series(key, index=frames.SETTING)).all(axis=1),
                "mean",
            ].max()
        )
        assert cell.startswith("**") == best
        assert cell.strip("*").removesuffix(f" {display.BEATS_ALL}") == display.score_text(r)
        checked += 1
    heads = answer.columns[2:-1]
    assert checked == len(RUNS) == (answer[heads] != "").to_numpy().sum()
    assert len(answer) == len(names)


def _write(tmp_path, table, both=None) -> str:
    folder = tmp_path / "results"
    folder.mkdir(exist_ok=True)
    table.to_csv(folder / "results.csv", index=False)
    for name, data in (frames.frame_files(*both) if both else {}).items():
        (folder / name).write_bytes(data)
    return str(folder)


def test_each_verdict_is_a_paired_t_test_with_holm_over_the_family(table, both):
    doc = tables.DOCUMENTS["heads"](table, *both, REFS)
    verdicts = md_tables(tables.to_markdown(doc))[1]
    pairs = []
    for (task, _, freeze), group in pd.DataFrame(
        [(*k[:2], k[3], k[2], v) for k, v in RUNS.items()],
        columns=["task", "encoder", "freeze", "head", "values"],
    ).groupby(["task", "encoder", "freeze"], sort=False):
        for i, a in group.iterrows():
            for _, b in group.loc[i + 1 :].iterrows():
                x = pd.DataFrame({"a": a["values"], "b": b["values"]}).dropna()
                test = sps.ttest_rel(x["a"], x["b"])
                pairs.append((task, freeze, a["head"], b["head"], x.a.mean() - x.b.mean(), test))
    holm = multipletests([p[-1].pvalue for p in pairs], method="holm")[1]
    assert len(verdicts) == len(pairs) == len(both[1])
    for (task, freeze, a, b, diff, _), p in zip(pairs, holm, strict=True):
        row = verdicts[(verdicts["A"].isin([a, b])) & (verdicts["B"].isin([a, b]))]
        row = row[row["Setting"].str.startswith(display.TASK_NAMES[task])]
        row = row[row["Setting"].str.contains(freeze)].iloc[0]
        sign = 1 if row["A"] == a else -1
        assert row["Holm p"] == display.p_text(p)
        assert row["A − B"] == display.points(sign * diff, True)
        assert row["Family"] == f"headline (m={len(pairs)})"
        verdict = "inconclusive" if p >= 0.05 else ("better" if sign * diff > 0 else "worse")
        assert row["Verdict"] == verdict


def test_stored_frames_are_shown_as_they_are(tmp_path, table, both, capsys):
    scores, comparisons = both[0].copy(), both[1].copy()
    scores.loc[0, ["mean", "low", "high"]] = [0.123, 0.1, 0.15]  # not what the runs give
    comparisons.loc[0, "p_holm"] = 0.0123
    folder = _write(tmp_path, table, (scores, comparisons))
    tables.main([folder, "--style", "heads"])
    text = (tmp_path / "results" / "heads.md").read_text(encoding="utf-8")
    assert text in capsys.readouterr().out  # printed as written
    stored = pd.read_csv(tmp_path / "results" / "comparisons.csv")
    verdicts = md_tables(text)[1]
    assert verdicts["Holm p"].tolist() == [display.p_text(p) for p in stored["p_holm"]]
    assert verdicts["Holm p"].iloc[0] == "0.012"
    assert "12.3±2.7" in [c.strip("*") for c in md_tables(text)[0].to_numpy().ravel()]


def test_glue_columns_rows_average_and_published_numbers(table, both):
    doc = tables.DOCUMENTS["glue"](table, *both, REFS)
    (glue,) = md_tables(tables.to_markdown(doc))
    assert glue.columns[4:].tolist() == ["SST-2 (acc)", "MRPC (F1)", "STS-B (Pearson)", "Avg"]
    keys = ["encoder", "head_label", "freeze_label", "task"]
    expected = expected_scores().set_index(keys).sort_index()
    ours = glue[glue["Source"] == "ours"]
    assert ours[["Encoder", "Head", "Freeze"]].to_numpy().tolist() == [
        ["minilm", "linear", "frozen"],
        ["minilm", "linear", "full"],
        ["minilm", "pooler-random", "frozen"],
        ["minilm", "pooler-random", "full"],
        ["minilm", "bilstm", "frozen"],
        ["roberta_base", "pooler-random", "full"],
    ]
    for column, task in zip(glue.columns[4:7], ("sst2", "mrpc", "stsb"), strict=True):
        best = expected.xs(task, level="task")["mean"].max()
        for _, row in ours.iterrows():
            key = (row["Encoder"], row["Head"], row["Freeze"], task)
            if key not in expected.index:
                assert row[column] == ""
                continue
            r = expected.loc[key]
            failed = f", {r['n_failed']} failed" if r["n_failed"] else ""
            text = f"{display.score_text(r)} (n={r['n']}{failed})"
            assert row[column] == (f"**{text}**" if r["mean"] == best else text)
    pooler = ours[(ours["Head"] == "pooler-random") & (ours["Encoder"] == "minilm")]
    assert pooler["SST-2 (acc)"].str.contains(r"\(n=\d, 1 failed\)").all()
    full = expected.xs(("minilm", "linear", "full"))["mean"]  # the one row with every task
    assert ours["Avg"].tolist() == ["", f"**{100 * full.mean():.1f}**", "", "", "", ""]
    published = glue[glue["Source"] != "ours"].iloc[0]
    refs = load_references()
    assert published["Source"] == f"published: {refs['source'].iloc[-1]}"
    assert published["Encoder"] == "RoBERTa-base"
    value = lookup(refs, "roberta_base", "sst2", "finetune")["value"].item()
    assert published["SST-2 (acc)"] == f"{value:.1f}"
    assert published["MRPC (F1)"] == "90.2 (acc)"  # the source's metric differs from ours
    assert published["Avg"] == ""


def test_glue_rows_of_a_learning_curve_carry_their_size(both):
    curve = results({("sst2", "minilm", "linear", "frozen", None): [0.7, 0.72, 0.71]})
    bigger = curve.assign(train_size=400, value=curve["value"] + 0.1)
    curve = stats.normalize_table(pd.concat([curve.assign(train_size=100), bigger]))
    doc = tables.DOCUMENTS["glue"](curve, *frames.from_results(curve, pd.DataFrame(), [], ""), REFS)
    (glue,) = md_tables(tables.to_markdown(doc))
    ours = glue[glue["Source"] == "ours"]
    assert ours["Freeze"].tolist() == ["frozen, 100 examples", "frozen, 400 examples"]
    assert ours["SST-2 (acc)"].str.startswith("**81.0").tolist() == [False, True]


def test_table7_beside_the_paper_in_its_order_with_the_difference(table, both):
    doc = tables.DOCUMENTS["table7"](table, *both, REFS)
    (t7,) = md_tables(tables.to_markdown(doc))
    paper = load_references().query("task == 'conll2003'").set_index("setting")["value"]
    order = ["embeddings", "second_to_last", "last", "concat_last4"]
    assert t7["Layers"].tolist() == [
        "Embeddings",
        "Second-to-Last Hidden",
        "Last Hidden",
        "Concat Last Four Hidden",
    ]
    expected = expected_scores().set_index("head_label")
    ours = [expected.loc[f"bilstm-{s}"] for s in order]
    means = pd.Series([r["mean"] for r in ours])
    assert t7["Ours"].str.strip("*").tolist() == [display.score_text(r) for r in ours]
    assert t7["Ours"].str.startswith("**").tolist() == (means == means.max()).tolist()
    assert t7["BERT-base"].str.strip("*").tolist() == [f"{paper[s]:.1f}" for s in order]
    assert t7["Ours − paper"].tolist() == [
        f"{100 * m - paper[s]:+.1f}" for m, s in zip(means, order, strict=True)
    ]
    assert t7["Rank"].tolist() == [f"{r:g}" for r in means.rank(ascending=False)]


def test_every_style_writes_its_three_files_and_prints_the_markdown(tmp_path, table, capsys):
    folder = _write(tmp_path, table)
    tables.main([folder + "/results.csv", "--style", "all"])  # default: beside the table
    out = capsys.readouterr().out
    for style in tables.STYLES:
        md, tex, page = (
            (tmp_path / "results" / f"{style}.{ext}").read_text(encoding="utf-8")
            for ext in ("md", "tex", "html")
        )
        assert md in out and f"wrote {folder}/{style}.md" in out
        assert tex.count(r"\begin{tabular}") == tex.count(r"\end{tabular}") == len(md_tables(md))
        assert page.count("<table") == len(md_tables(md))
        bold = sum(c.startswith("**") for t in md_tables(md) for c in t.to_numpy().ravel())
        styled = re.findall(r"#T_\w+_row\d+_col\d+", page)  # the cells with a CSS rule: bold
        assert bold and tex.count(r"\bfseries") == len(styled) == bold
        bare = re.sub(r"\\[{}%&#_$]", "", tex)  # balanced braces; no bare %, & or _ in text
        assert bare.count("{") == bare.count("}")
        assert not re.search(r"(?<!\\)[%_#]", "\n".join(tex.splitlines()[2:]))


def test_latex_and_html_escape_a_label(table):
    label = "<b>x</b> 5%_&#"
    odd = table.assign(head_label=table["head_label"].replace("bilstm", label))
    doc = tables.DOCUMENTS["heads"](odd, *frames.from_results(odd, pd.DataFrame(), [], ""), REFS)
    page, tex = tables.to_html(doc), tables.to_latex(doc)
    assert "<b>x</b>" not in page
    shown = ">&lt;b&gt;x&lt;/b&gt; 5%_&amp;#</"
    assert page.count(f"{shown}th>") == 1 and page.count(f"{shown}td>") == 2  # head, 2 pairs
    assert tex.count(r"<b>x</b> 5\%\_\&\#") == 3


def test_a_runs_directory_is_collected(tmp_path, capsys):
    run = tmp_path / "runs" / "sst2" / "minilm" / "linear" / "frozen" / "seed=1"
    run.mkdir(parents=True)
    cell = {"task": "sst2", "encoder": "minilm", "head": "linear", "head_label": "linear"}
    cell |= {"layers": None, "freeze": "frozen", "freeze_label": "frozen", "seed": 1}
    result = {
        "cell": cell,
        "status": "ok",
        "main_metric": "accuracy",
        "best": {"epoch": 0, "metrics": {"dev": {"accuracy": 0.75}}},
        "baseline": {"dev": {"metrics": {"accuracy": 0.5}}},
    }
    (run / "result.json").write_text(json.dumps(result), encoding="utf-8")
    tables.main([str(tmp_path / "runs"), "--style", "heads", "-o", str(tmp_path / "out")])
    answer = md_tables((tmp_path / "out" / "heads.md").read_text(encoding="utf-8"))[0]
    assert answer["linear"].tolist() == ["**75.0**"]  # one run: no interval


@pytest.mark.parametrize("kind", ["missing", "empty", "not_a_results_table"])
def test_tables_and_report_name_a_bad_source_in_one_line_with_exit_2(tmp_path, capsys, kind):
    from bench.report.__main__ import main as report_main

    source = tmp_path / "source"
    if kind == "empty":
        source.mkdir()
    elif kind == "not_a_results_table":
        source = tmp_path / "bad.csv"
        source.write_text("a,b\n1,2\n", encoding="utf-8")
    for run in (
        lambda: tables.main([str(source), "--style", "heads", "-o", str(tmp_path / "out")]),
        lambda: report_main([str(source), "-o", str(tmp_path / "r.html")]),
    ):
        with pytest.raises(SystemExit) as exit_info:
            run()
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "Traceback" not in err and err.count("\n") == 1
        assert str(source) in err or "required columns" in err
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "out").exists()


def test_references_load_and_validate(tmp_path):
    refs = load_references()
    t7 = refs[(refs["task"] == "conll2003") & (refs["split"] == "dev")]
    assert dict(zip(t7["setting"], t7["value"], strict=True)) == {
        "finetune": 96.4,
        "embeddings": 91.0,
        "second_to_last": 95.6,
        "last": 94.9,
        "sum_last4": 95.9,
        "concat_last4": 96.1,
        "sum_all": 95.5,
    }
    glue = refs[refs["encoder"] == "roberta_base"].set_index("task")["value"].to_dict()
    assert glue == {
        "mnli": 87.6,
        "qnli": 92.8,
        "qqp": 91.9,
        "rte": 78.7,
        "sst2": 94.8,
        "mrpc": 90.2,
        "cola": 63.6,
        "stsb": 91.2,
    }
    assert (refs["source"] != "").all() and refs["url"].str.startswith("https://").all()
    bad = refs.copy()
    bad["value"] = bad["value"].astype(str)
    bad.loc[0, "value"] = "961"
    bad.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ValueError, match="percentage"):
        load_references(tmp_path / "bad.csv")
    pd.concat([refs, refs.iloc[:1]]).to_csv(tmp_path / "dup.csv", index=False)
    with pytest.raises(ValueError, match="duplicate"):
        load_references(tmp_path / "dup.csv")
