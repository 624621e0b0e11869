"""Paper-style tables: stored Markdown, LaTeX structure, HTML escaping, the CLI, references."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from bench.results import render, stats, tables
from bench.results.references import load_references, lookup

EXPECTED = Path(__file__).parent / "expected"
RESULTS = Path(__file__).resolve().parents[1] / "results"
REGENERATE = os.environ.get("HEADBENCH_REGENERATE_EXPECTED") == "1"  # then review the diff


def _cell(
    task,
    encoder,
    head_label,
    freeze,
    seed,
    metrics,
    *,
    head=None,
    layers=None,
    main,
    baseline=None,
    status="ok",
    splits=("dev",),
):
    base = {
        "task": task,
        "encoder": encoder,
        "head": head or head_label.split("-")[0],
        "head_label": head_label,
        "layers": layers,
        "freeze": freeze,
        "freeze_label": freeze,
        "seed": seed,
        "status": status,
        "main_metric": main,
        "best_epoch": 1,
        "trainable_params": 1000,
        "train_time_s": 1.0,
        "reason": None if status == "ok" else "x",
        "run_dir": f"runs/{task}/{encoder}/{head_label}/{freeze}/seed={seed}",
    }
    if status != "ok":
        return [{**base, "split": None, "metric": None, "value": None, "baseline": None}]
    baseline = baseline or {}
    return [
        {
            **base,
            "split": split,
            "metric": m,
            "value": v + (0.01 if split != "dev" else 0.0),
            "baseline": baseline.get(m),
        }
        for split in splits
        for m, v in metrics.items()
    ]


def small_results() -> pd.DataFrame:
    """A known small results set covering all three styles and the awkward cases."""
    rows = []
    acc = {"accuracy": 0.5}
    sst2 = {  # head -> freeze -> per-seed accuracy (None: the run crashed)
        "linear": {"frozen": [0.70, 0.72, 0.71], "full": [0.80, 0.82, 0.81]},
        "pooler-random": {"frozen": [0.69, 0.50, 0.70], "full": [0.83, 0.84, None]},
        "bilstm": {"frozen": [0.76, 0.77, 0.75], "full": [0.81, 0.80, 0.82]},
    }
    for head, by_freeze in sst2.items():
        for freeze, values in by_freeze.items():
            for seed, v in enumerate(values, start=1):
                status = "ok" if v is not None else "diverged"
                rows += _cell(
                    "sst2",
                    "minilm",
                    head,
                    freeze,
                    seed,
                    {"accuracy": v},
                    main="accuracy",
                    baseline=acc,
                    status=status,
                )
    for seed, v in enumerate([0.85, 0.86], start=1):  # STS-B: correlations, no baseline
        rows += _cell(
            "stsb",
            "minilm",
            "linear",
            "full",
            seed,
            {"pearson": v, "spearman": v - 0.01},
            main="pearson",
        )
    # roberta_base with RoBERTa's own head, fine-tuned: compared with the published numbers
    for seed, (f1, a) in enumerate([(0.91, 0.88), (0.92, 0.89), (0.90, 0.87)], start=1):
        rows += _cell(
            "mrpc",
            "roberta_base",
            "pooler-random",
            "full",
            seed,
            {"f1": f1, "accuracy": a},
            main="f1",
            baseline={"f1": 0.81, "accuracy": 0.68},
        )
        rows += _cell(
            "mnli",
            "roberta_base",
            "pooler-random",
            "full",
            seed,
            {"accuracy": 0.86 + seed / 100},
            main="accuracy",
            baseline={"accuracy": 0.35},
            splits=("dev", "dev_mismatched"),
        )
    # Table 7: fine-tune (linear, full) and frozen BiLSTM over several layer choices
    f1 = {
        "finetune": [0.93, 0.94],
        "embeddings": [0.80, 0.82],
        "last": [0.90, 0.91],
        "concat_last4": [0.915, 0.925],
        "-2": [0.905, 0.905],
    }
    for setting, values in f1.items():
        head, freeze, label = (
            ("linear", "full", "linear")
            if setting == "finetune"
            else ("bilstm", "frozen", f"bilstm-{setting}")
        )
        for seed, v in enumerate(values, start=1):
            rows += _cell(
                "conll2003",
                "minilm",
                label,
                freeze,
                seed,
                {"f1": v, "precision": v, "recall": v},
                head=head,
                layers=None if setting == "finetune" else setting,
                main="f1",
                splits=("dev", "test"),
            )
    rows += _cell(
        "conll2003",
        "minilm",
        "bilstm-sum_all",
        "frozen",
        1,
        {},
        head="bilstm",
        layers="sum_all",
        main="f1",
        status="failed",
    )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("style", tables.STYLES)
def test_markdown_matches_stored_file(style):
    text = render.to_markdown(tables.build(small_results(), style))
    path = EXPECTED / f"{style}.md"
    if REGENERATE:
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def test_heads_table_content():
    doc = tables.build(small_results(), "heads")
    sst2 = next(t for t in doc.tables if t.title == "sst2 — minilm")
    assert sst2.header == ["Head", "frozen", "full"]
    assert [r[0] for r in sst2.rows] == ["linear", "pooler-random", "bilstm"]
    # bilstm wins frozen; pooler-random full has one diverged seed and one at the baseline
    assert (2, 1) in sst2.bold and (1, 2) in sst2.bold and len(sst2.bold) == 2
    assert sst2.rows[1][1] == "63.0 ± 11.3 (n=3, 1 failed)"
    assert sst2.rows[1][2] == "83.5 ± 0.7 (n=2, 1 failed)"
    # these synthetic results record no best constant: the baseline is the threshold
    assert sst2.notes[0] == (
        "Majority-class baseline: 50.0 (these results record no best constant prediction: "
        "runs at or below the baseline count as failed)."
    )
    assert any("Holm-adjusted over all 6 headline comparisons" in n for n in sst2.notes)
    stsb = next(t for t in doc.tables if t.title == "stsb — minilm")
    assert stsb.notes[0] == tables.NO_BASELINE


def test_the_heads_note_shows_the_simultaneous_interval_of_its_holm_family():
    """bilstm − linear, frozen SST-2, 3 paired seeds. The note's family is the headline's:
    each setting's best head against each other head of its setting, every table together.
    Here: SST-2 frozen (bilstm vs linear, pooler-random) and full (pooler-random vs linear,
    bilstm), CoNLL-2003 frozen (concat_last4 vs -2 and embeddings; vs last the differences
    are constant: no test): m = 6. The interval is scipy's paired t-interval at 1 − 0.05/6,
    Holm's p is checked by hand, and the family is named in the note.
    """
    doc = tables.build(small_results(), "heads")
    sst2 = next(t for t in doc.tables if t.title == "sst2 — minilm")
    note = next(n for n in sst2.notes if n.startswith("frozen: bilstm − linear"))
    bilstm, linear = np.array([0.76, 0.77, 0.75]), np.array([0.70, 0.72, 0.71])
    m = 6
    test = scipy.stats.ttest_rel(bilstm, linear)
    ci = test.confidence_interval(confidence_level=1 - 0.05 / m)
    assert ci.low < 0 < ci.high
    expected = f"Bonferroni: −{-100 * ci.low:.1f} to +{100 * ci.high:.1f};"
    assert f"simultaneous 95% t-interval over all {m} headline comparisons" in note
    assert expected in note
    others = [  # the other five p-values of the family
        scipy.stats.ttest_rel([0.76, 0.77, 0.75], [0.69, 0.50, 0.70]).pvalue,
        scipy.stats.ttest_rel([0.83, 0.84], [0.80, 0.82]).pvalue,
        scipy.stats.ttest_rel([0.83, 0.84], [0.81, 0.80]).pvalue,
        scipy.stats.ttest_rel([0.915, 0.925], [0.905, 0.905]).pvalue,
        scipy.stats.ttest_rel([0.915, 0.925], [0.80, 0.82]).pvalue,
    ]
    ranked = sorted([test.pvalue, *others])
    holm = max(min(1.0, (m - i) * p) for i, p in enumerate(ranked[: ranked.index(test.pvalue) + 1]))
    assert f"Holm-adjusted over all {m} headline comparisons: p = {holm:.3g} (n.s.)" in note
    assert any(f"all {m} headline comparisons" in n for n in doc.notes)


def test_glue_reference_and_delta_use_the_reference_metric():
    doc = tables.build(small_results(), "glue")
    (t,) = doc.tables
    # no row has every task, so there is no average column
    assert t.header[3:] == [
        "SST-2 (acc)",
        "MRPC (F1)",
        "STS-B (Pearson)",
        "MNLI-m (acc)",
        "MNLI-mm (acc)",
    ]
    published = next(r for r in t.rows if r[1] == "published")
    delta = next(r for r in t.rows if r[1].startswith("Δ"))
    mrpc, mnli = t.header.index("MRPC (F1)"), t.header.index("MNLI-m (acc)")
    assert published[mrpc] == "90.2 (acc)"  # the reference is accuracy, our column F1
    assert delta[mrpc] == "−2.2"  # our mean accuracy 88.0 - 90.2, not F1
    assert published[mnli] == "87.6" and delta[mnli] == "+0.4"  # 88.0 - 87.6
    assert published[t.header.index("MNLI-mm (acc)")] == ""  # no published mismatched


def test_table7_rows_in_paper_order_with_deltas():
    doc = tables.build(small_results(), "table7")
    (t,) = doc.tables
    assert [r[0] for r in t.rows] == [
        "finetune",
        "embeddings",
        "last",
        "concat_last4",
        "sum_all",
        "-2",
    ]
    assert t.rows[0][2:5] == ["93.5 ± 0.7 (n=2)", "96.4", "−2.9"]
    assert t.rows[4][2:5] == ["— (n=0, 1 failed)", "95.5", ""]
    assert t.rows[0][5] == "94.5 ± 0.7 (n=2)"  # test split
    assert "differ" in t.caption and "minilm" in t.caption


def _latex_tables(tex: str) -> list[str]:
    return re.findall(r"\\begin\{tabular\}.*?\\end\{tabular\}", tex, flags=re.S)


@pytest.mark.parametrize("style", tables.STYLES)
def test_latex_is_balanced_and_rectangular(style):
    tex = render.to_latex(tables.build(small_results(), style))
    unescaped = re.sub(r"\\[{}]", "", tex)
    depth = 0
    for ch in unescaped:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        assert depth >= 0
    assert depth == 0
    assert tex.count(r"\begin{table}") == tex.count(r"\end{table}") >= 1
    for block in _latex_tables(tex):
        spec = re.match(r"\\begin\{tabular\}\{([lr]+)\}", block).group(1)
        rows = [line for line in block.splitlines() if line.endswith(r"\\")]
        assert rows
        for line in rows:
            assert len(re.findall(r"(?<!\\)&", line)) == len(spec) - 1, line


def test_labels_are_escaped_in_every_format():
    table = small_results()
    table.loc[table["head_label"] == "bilstm", "head_label"] = "<script>x|y</script> 5%_&#"
    doc = tables.build(table, "heads")
    page = render.to_html(doc)
    assert "<script>" not in page and "&lt;script&gt;x|y&lt;/script&gt; 5%_&amp;#" in page
    md = render.to_markdown(doc)
    assert r"\<script\>x\|y\</script\> 5%\_&#" in md
    for block in md.split("\n\n"):  # every row of a table has as many cells as its header
        lines = block.splitlines()
        if lines and all(line.startswith("| ") for line in lines):
            assert len({line.count("|") - line.count(r"\|") for line in lines}) == 1
    tex = render.to_latex(doc)
    assert r"\textless{}script\textgreater{}x\textbar{}y\textless{}/script\textgreater{}" in tex
    assert r" 5\%\_\&\#" in tex


def test_cli_writes_all_three_files(tmp_path, capsys):
    src = tmp_path / "results"
    src.mkdir()
    small_results().to_csv(src / "results.csv", index=False)
    out = tmp_path / "out"
    tables.main([str(src), "--style", "heads", "-o", str(out)])
    assert sorted(p.name for p in out.iterdir()) == ["heads.html", "heads.md", "heads.tex"]
    assert (out / "heads.md").read_text(encoding="utf-8") == (EXPECTED / "heads.md").read_text(
        encoding="utf-8"
    )
    assert "# Heads × freezing" in capsys.readouterr().out
    tables.main([str(src / "results.csv"), "--style", "all"])  # default: beside the CSV
    assert {p.name for p in src.iterdir()} >= {
        f"{s}.{e}" for s in tables.STYLES for e in ("md", "tex", "html")
    }


def test_cli_collects_a_runs_directory(tmp_path):
    import json

    run = tmp_path / "runs" / "sst2" / "minilm" / "linear" / "frozen" / "seed=1"
    run.mkdir(parents=True)
    result = {
        "cell": {
            "task": "sst2",
            "encoder": "minilm",
            "head": "linear",
            "head_label": "linear",
            "layers": None,
            "freeze": "frozen",
            "freeze_label": "frozen",
            "seed": 1,
        },
        "status": "ok",
        "main_metric": "accuracy",
        "best": {"epoch": 0, "metrics": {"dev": {"accuracy": 0.75}}},
        "baseline": {"dev": {"metrics": {"accuracy": 0.5}}},
    }
    (run / "result.json").write_text(json.dumps(result), encoding="utf-8")
    tables.main([str(tmp_path / "runs"), "--style", "heads", "-o", str(tmp_path / "out")])
    assert "75.0 (n=1)" in (tmp_path / "out" / "heads.md").read_text(encoding="utf-8")


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
    assert len(lookup(refs, "roberta_base", "mrpc", "finetune")) == 1
    bad = refs.copy()
    bad["value"] = bad["value"].astype(str)
    bad.loc[0, "value"] = "961"
    bad.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ValueError, match="percentage"):
        load_references(tmp_path / "bad.csv")
    pd.concat([refs, refs.iloc[:1]]).to_csv(tmp_path / "dup.csv", index=False)
    with pytest.raises(ValueError, match="duplicate"):
        load_references(tmp_path / "dup.csv")


def test_freeze_columns_run_from_least_to_most_trained():
    """top_k cells are labelled top<k>; they sit between frozen and full, by k."""
    from bench.axes.freezing import freeze_rank

    labels = ["full", "top12", "top2", "frozen", "lora", "custom"]
    expected = ["frozen", "lora", "top2", "top12", "full", "custom"]
    assert sorted(labels, key=freeze_rank) == expected


@pytest.mark.parametrize(
    ("constant", "baseline", "metric", "says", "never"),
    [
        (
            0.527,
            0.473,
            "accuracy",
            [
                "Majority-class baseline: 47.3",
                "best constant prediction: 52.7",
                "at or below the best constant count as failed",
            ],
            [],
        ),
        (
            0.509,
            0.509,
            "accuracy",
            ["Majority-class baseline = best constant prediction: 50.9"],
            [],
        ),
        (
            float("nan"),
            0.5,
            "accuracy",
            [
                "Majority-class baseline: 50.0",
                "record no best constant",
                "at or below the baseline count as failed",
            ],
            ["; best constant prediction"],
        ),
        (
            0.0,
            float("nan"),
            "pearson",
            ["No majority-class baseline for a correlation", "best constant prediction: 0.0"],
            [],
        ),
        (float("nan"), float("nan"), "pearson", [tables.NO_BASELINE], []),
        (
            float("nan"),
            float("nan"),
            "f1",
            ["No majority-class baseline or best constant", "status only"],
            [],
        ),
    ],
)
def test_threshold_note_names_what_failures_are_counted_against(
    constant, baseline, metric, says, never
):
    group = pd.DataFrame({"best_constant": [constant, constant], "baseline": [baseline, baseline]})
    note = tables.threshold_note(group, metric)
    for text in says:
        assert text in note
    for text in never:
        assert text not in note


def test_the_legend_counts_failures_against_the_best_constant():
    assert "at or below the best constant prediction" in tables.LEGEND
    assert "at or below the majority-class baseline" not in tables.LEGEND


@pytest.mark.skipif(
    not (RESULTS / "curves_sst2_rte" / "results.parquet").is_file(), reason="not committed"
)
def test_a_table_whose_failures_exceed_its_majority_baseline_shows_the_best_constant():
    """RTE on 100 training examples: the training majority is the dev split's minority.

    Its failed runs are counted against the best constant (the dev majority share), above
    the majority-class baseline; the table must show the number the count used.
    """
    table = tables.load_source(RESULTS / "curves_sst2_rte")
    runs = stats.run_values(table)
    cells = stats.cell_stats(table)
    differ = cells[
        (cells["best_constant"].round(3) != cells["baseline"].round(3)) & cells["baseline"].notna()
    ]
    assert not differ.empty  # the committed results hold such a setting
    doc = tables.build(table, "heads")
    counted = {"best constant": 0, "baseline": 0}
    for (task, encoder, size), group in differ.groupby(["task", "encoder", "train_size"]):
        title = f"{task} — {encoder} — {size:,} examples"
        (t,) = [t for t in doc.tables if t.title == title]
        constant, baseline = group["best_constant"].iloc[0], group["baseline"].iloc[0]
        assert f"Majority-class baseline: {tables.pct(baseline)}" in t.notes[0]
        assert f"best constant prediction: {tables.pct(constant)}" in t.notes[0]
        # the failed counts in the cells are runs at or below the best constant (or without
        # a score), not at or below the majority-class baseline
        setting = runs[
            (runs["task"] == task) & (runs["encoder"] == encoder) & (runs["train_size"] == size)
        ]
        below = (setting["status"] != "ok") | (setting["value"] <= constant + stats.BASELINE_ATOL)
        assert int(setting["failed"].sum()) == int(below.sum())
        counted["best constant"] += int(below.sum())
        counted["baseline"] += int(
            ((setting["status"] != "ok") | (setting["value"] <= baseline)).sum()
        )
    assert counted["best constant"] > counted["baseline"]  # the label makes a difference


@pytest.mark.parametrize("kind", ["missing", "empty", "not_a_results_table"])
def test_tables_and_report_name_a_bad_source_in_one_line_with_exit_2(tmp_path, capsys, kind):
    from bench.report.__main__ import main as report_main
    from bench.results.tables import main as tables_main

    source = tmp_path / "source"
    if kind == "empty":
        source.mkdir()
    elif kind == "not_a_results_table":
        source = tmp_path / "bad.csv"
        source.write_text("a,b\n1,2\n", encoding="utf-8")
    for run in (
        lambda: tables_main([str(source), "--style", "heads", "-o", str(tmp_path / "out")]),
        lambda: report_main([str(source), "-o", str(tmp_path / "r.html")]),
    ):
        with pytest.raises(SystemExit) as exit_info:
            run()
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "Traceback" not in err
        assert str(source.name) in err or "required columns" in err
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "out").exists()
