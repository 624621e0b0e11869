"""The README's Findings block and every results README are generated from the committed
results, are current, and say what an independent computation says."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from scipy.stats import ttest_rel

from bench.report import findings, readme
from bench.report.context import build_context
from bench.report.findings import END, START, main, replace_block, summary
from bench.report.headline import at_a_glance, has_winner, headline_comparisons, headline_frame
from bench.report.inputs import load_inputs
from conftest import ROOT, holm_reference

README = ROOT / "README.md"
RESULTS = ROOT / "results"
COMMITTED = sorted(p.parent for p in RESULTS.glob("*/results.csv"))


def test_the_readme_block_is_what_the_committed_results_give():
    text = README.read_text(encoding="utf-8")
    block = text.split(START + "\n", 1)[1].split(END, 1)[0]
    assert block == summary(RESULTS)


@pytest.mark.parametrize("source", COMMITTED, ids=lambda p: p.name)
def test_every_results_readme_is_generated_and_current(source):
    assert (source / "README.md").read_text(encoding="utf-8") == readme.experiment_readme(source)


def _verdicts(table: pd.DataFrame) -> tuple[dict, int, int]:
    """Winner per setting and the significant-win count, from results.csv alone."""
    main = table[(table.split == "dev") & (table.metric == table.main_metric)]
    main = main[main.status == "ok"]
    winners, pvalues, runner_index = {}, [], {}
    for (task, freeze), rows in main.groupby(["task", "freeze_label"]):
        wide = rows.pivot_table(index="seed", columns="head_label", values="value")
        means = wide.mean().sort_values(ascending=False, kind="stable")
        ranked = sorted(means.index, key=lambda h: (-round(means[h], 12), h))
        winner = ranked[0]
        winners[(task, freeze)] = (winner, means[winner])
        for other in ranked[1:]:
            pair = wide[[winner, other]].dropna()
            d = np.round(pair[winner] - pair[other], 12)
            if len(pair) < 2 or np.all(d == d.iloc[0]):
                continue  # no test (bench says why)
            if other == ranked[1]:
                runner_index[(task, freeze)] = len(pvalues)
            pvalues.append(ttest_rel(pair[winner], pair[other]).pvalue)
    holm = holm_reference(np.asarray(pvalues))
    significant = sum(1 for i in runner_index.values() if holm[i] < 0.05)
    return winners, significant, len(pvalues)


def _best_heads(finding: str) -> str:
    """The lists of best heads of a Findings bullet (after each family, before its counts).

    The headline's list, then each study's (``... study (...): best head by mean, ...``).
    """
    parts = finding.split("est head by mean, with its verdict against the other heads")[1:]
    return "; ".join(p.split(") — ", 1)[1].split(". The winner", 1)[0] for p in parts)


def _headline_only(table: pd.DataFrame) -> pd.DataFrame:
    """fair_heads' headline settings: not its full fine-tuning study (tests/test_studies.py)."""
    return table[table.freeze_label != "full"]


def _study_only(table: pd.DataFrame) -> pd.DataFrame:
    """fair_heads' full fine-tuning study, its own Holm family."""
    return table[table.freeze_label == "full"]


def _best_constants(table: pd.DataFrame) -> dict:
    """The best constant prediction's dev score per (task, freeze), from results.csv alone."""
    main = table[(table.split == "dev") & (table.metric == table.main_metric)]
    return main.groupby(["task", "freeze_label"])["best_constant"].first().to_dict()


@pytest.mark.skipif(not (RESULTS / "fair_heads" / "results.csv").is_file(), reason="not run")
@pytest.mark.parametrize("name", ["fair_heads", "fair_heads_gpu"])
def test_a_setting_whose_best_mean_does_not_beat_the_best_constant_names_no_winner(name):
    source = RESULTS / name
    table = pd.read_csv(source / "results.csv")
    winners, _, _ = _verdicts(table)
    constant = _best_constants(table)
    below = {k for k, (_, mean) in winners.items() if mean <= constant[k]}
    assert below == {("rte", "frozen")}  # every head of frozen RTE is under 52.7, the majority
    text = (source / "README.md").read_text(encoding="utf-8")
    verdict = text.split("## Verdict", 1)[1].split("\n\n", 2)[1]
    assert sum("has no winner" in line for line in verdict.splitlines()) == len(below)
    for line in verdict.splitlines():
        task = line.removeprefix("- ").split(",", 1)[0]
        key = ({"SST-2": "sst2", "STS-B": "stsb"}.get(task, task.lower()), "frozen")
        if "no winner" in line:
            assert key in below and line.startswith(f"- {task}, frozen: no head's mean beats")
            assert f"{100 * constant[key]:.1f} acc" in line
        elif key in winners and "frozen" in line.split(":", 1)[0]:
            assert key not in below
    ctx = build_context(load_inputs(source))
    frame = headline_frame(ctx)
    glance = at_a_glance(frame, headline_comparisons(ctx))
    won = {(r.task, r.freeze_label) for r in frame.itertuples()} - below
    assert f"({len(won)} of {len(frame)} settings)" in glance
    assert "No head's mean beats it in RTE frozen, so that setting names no winner" in glance
    wins = frame[has_winner(frame)]["winner"].value_counts()
    assert wins.sum() == len(won)


@pytest.mark.skipif(not (RESULTS / "fair_heads" / "results.csv").is_file(), reason="not run")
def test_the_fair_heads_finding_matches_an_independent_computation():
    table = pd.read_csv(RESULTS / "fair_heads" / "results.csv")
    winners, _, _ = _verdicts(table)
    text = findings.experiment_finding(RESULTS / "fair_heads")
    constant = _best_constants(table)
    for (task, freeze), (winner, mean) in winners.items():
        title = {"sst2": "SST-2", "mrpc": "MRPC", "rte": "RTE", "cola": "CoLA", "stsb": "STS-B"}
        if mean <= constant[(task, freeze)]:
            assert f"{title[task]} no winner (best `{winner}` {100 * mean:.1f}, not above" in text
        else:
            assert f"{title[task]} `{winner}` {100 * mean:.1f}" in text
    head, significant, n_shown = _verdicts(_headline_only(table))
    assert f"a tier marks those) in {significant} of {len(head)} settings" in text
    assert f"Holm over all {n_shown} headline comparisons" in text
    study, significant, n_study = _verdicts(_study_only(table))
    assert (
        f"Holm over the study's {n_study} comparisons; a tier marks those) in {significant} of "
        f"{len(study)} settings and of every other head of its setting"
    ) in text


def test_check_fails_on_a_stale_block_and_write_repairs_it(tmp_path):
    """The check/write mechanics, on a results directory with nothing run (three summaries
    of the committed results would take a minute and a half; the test above compares the
    committed README's block with them once)."""
    results = tmp_path / "results"
    results.mkdir()
    copy = tmp_path / "README.md"
    stale = replace_block(README.read_text(encoding="utf-8"), "- an old number: 42.0\n")
    copy.write_text(stale, encoding="utf-8")
    assert main(["--check", str(copy), "--results", str(results)]) == 1
    assert copy.read_text(encoding="utf-8") == stale  # a check writes nothing
    assert main(["--write", str(copy), "--results", str(results)]) == 0
    assert main(["--check", str(copy), "--results", str(results)]) == 0
    assert copy.read_text(encoding="utf-8") == replace_block(stale, summary(results))
    assert "not run yet" in summary(results)


def test_a_results_readme_check_fails_when_stale_and_write_repairs_it(tmp_path):
    source = tmp_path / "quick"
    source.mkdir()
    for path in (RESULTS / "quick").iterdir():
        if path.is_file() and path.name != "README.md":
            (source / path.name).write_bytes(path.read_bytes())
    generated = (RESULTS / "quick" / "README.md").read_text(encoding="utf-8")
    (source / "README.md").write_text(generated + "\nbilstm 99.9\n", encoding="utf-8")
    assert readme.main([str(source), "--check"]) == 1
    assert readme.main([str(source)]) == 0
    assert readme.main([str(source), "--check"]) == 0


def test_a_readme_written_by_hand_is_never_overwritten(tmp_path, capsys):
    source = tmp_path / "quick"
    source.mkdir()
    for path in (RESULTS / "quick").iterdir():
        if path.is_file() and path.name != "README.md":
            (source / path.name).write_bytes(path.read_bytes())
    mine = "# quick\n\nMy notes on this sweep: bilstm 99.9\n"
    (source / "README.md").write_text(mine, encoding="utf-8")
    assert readme.main([str(source)]) == 1
    assert (source / "README.md").read_text(encoding="utf-8") == mine
    err = capsys.readouterr().err
    assert f"{source / 'README.md'} was not generated by headbench" in err
    assert "move it away" in err
    (source / "README.md").unlink()  # moved away: generated there
    assert readme.main([str(source)]) == 0
    assert readme.main([str(source), "--check"]) == 0


def test_missing_cells_counts_the_absent_head_seed_pairs_of_each_setting():
    rows = [
        (task, "minilm", head, freeze, seed)
        for task, freeze, heads, seeds in [
            ("sst2", "frozen", ("linear", "bilstm"), (1, 2, 3)),
            ("rte", "frozen", ("linear",), (1, 2)),  # bilstm × 3 seeds and linear seed 3 absent
            ("sst2", "full", ("linear",), (1, 2)),
            ("rte", "full", ("linear",), (1,)),  # seed 2 absent
        ]
        for head in heads
        for seed in seeds
    ]
    runs = pd.DataFrame(rows, columns=["task", "encoder", "head_label", "freeze_label", "seed"])
    # Brute force: the cross product under each freezing strategy, minus what is there.
    present = set(rows)
    expected = 0
    for freeze in ("frozen", "full"):
        mine = [r for r in rows if r[3] == freeze]
        for task in {r[0] for r in mine}:
            for head in {r[2] for r in mine}:
                for seed in {r[4] for r in mine}:
                    expected += (task, "minilm", head, freeze, seed) not in present
    assert readme.missing_cells(runs) == expected == 5
    assert readme.missing_cells(runs[runs["task"] == "sst2"]) == 0


def test_the_holm_count_names_only_the_comparisons_with_a_test():
    from bench.report.headline import tested_phrase

    shown = pd.DataFrame({"p": [0.01, np.nan, 0.2]})
    assert tested_phrase(shown) == (
        "all 2 headline comparisons with a test (1 more had too few paired seeds for one)"
    )
    assert tested_phrase(shown.dropna()) == "all 2 headline comparisons"
    none = pd.DataFrame({"p": [np.nan] * 6})  # quick: one seed per head, no test anywhere
    assert tested_phrase(none) == (
        "no comparison (all 6 headline comparisons had too few paired seeds)"
    )


def test_planned_cells_are_matched_to_results_by_their_path_under_the_sweep():
    planned = ["sst2/m/linear/frozen/seed=1", "sst2/m/linear/frozen/seed=2", "rte/m/x/full/seed=1"]
    run_dirs = ["results/e/runs/sst2/m/linear/frozen/seed=1", "/abs/runs/rte/m/x/full/seed=1/"]
    assert readme.planned_done(planned, run_dirs) == 2
    # a path that merely ends with the same characters is not the same cell
    assert readme.planned_done(["m/linear/frozen/seed=1"], ["x/sst2m/linear/frozen/seed=1"]) == 0


def test_the_launch_summary_unions_the_plans_of_every_launch():
    from bench.results.run_records import last_launch

    records = [
        {"event": "launch", "command": "a", "time": "t1"},  # logged before plans were recorded
        {"event": "launch", "command": "b", "time": "t2", "planned": ["x/seed=1", "x/seed=2"]},
        {"event": "skip", "cell_path": "x/seed=1"},
        {"event": "launch", "command": "c", "time": "t3", "planned": ["y/seed=1", "x/seed=2"]},
    ]
    summary = last_launch(records)
    assert summary["planned"] == ["x/seed=1", "x/seed=2", "y/seed=1"]
    assert summary["command"] == "c" and summary["launches"] == 3 and summary["skipped"] == 0


GPU = RESULTS / "fair_heads_gpu"
TITLE = {"sst2": "SST-2", "mrpc": "MRPC", "rte": "RTE", "cola": "CoLA", "stsb": "STS-B"}


@pytest.fixture(scope="module")
def gpu_finding() -> str:
    return findings.experiment_finding(GPU)


@pytest.mark.skipif(not (GPU / "results.csv").is_file(), reason="fair_heads_gpu not run")
def test_a_setting_where_only_some_heads_ran_says_so_where_its_best_head_is_named(gpu_finding):
    table = pd.read_csv(GPU / "results.csv")
    main = table[(table.split == "dev") & (table.metric == table.main_metric)]
    heads = main.groupby(["task", "freeze_label"])["head_label"].nunique()
    every = main["head_label"].nunique()
    partial = heads[heads < every]
    assert dict(partial) == {("rte", "full"): 2}  # linear and pooler-random only
    winners, _, _ = _verdicts(table)
    best = _best_heads(gpu_finding)
    for (task, freeze), (winner, mean) in winners.items():
        named = f"{TITLE[task]} `{winner}` {100 * mean:.1f}"
        if (task, freeze) in partial.index:
            n = int(partial[(task, freeze)])
            note = best.split(f"{freeze}: {named} (", 1)[1].split(")", 1)[0]
            assert note.endswith(f"only {n} of {every} heads ran")
        elif named in best:
            assert "heads ran" not in best.split(named, 1)[1].split(")", 1)[0]
    assert best.count(" heads ran") == len(partial)
    assert (
        f"{len(partial)} of the {len(winners)} settings compares fewer than the {every} heads "
        f'(marked "only ... of {every} heads"): its winner is the best of the heads that ran '
        f"there, not of all {every}."
    ) in gpu_finding


@pytest.mark.skipif(not (GPU / "results.csv").is_file(), reason="fair_heads_gpu not run")
def test_the_findings_name_the_settings_whose_heads_trained_on_different_devices(gpu_finding):
    from bench.report.devices import device_caveat

    cells = load_inputs(GPU).cells
    caveat = device_caveat(cells, code=True)
    assert caveat is not None and caveat in gpu_finding
    assert "MRPC frozen: `last4_concat` on CPU (AVX512), the other heads on NVIDIA H200" in caveat
    assert "RTE frozen: `last4_concat` seeds 1-5 on NVIDIA H200 and 6-10 on CPU" in caveat
    assert "Not the same device" not in findings.experiment_finding(RESULTS / "curves_sst2_rte")


@pytest.mark.skipif(
    not (RESULTS / "curves_sst2_rte" / "predictions.parquet").is_file(), reason="not run"
)
def _learned(table: pd.DataFrame) -> set:
    """(task, freeze, size, head) whose mean dev main score beats the best constant."""
    main = table[(table.split == "dev") & (table.metric == table.main_metric)]
    main = main[main.status == "ok"].assign(train_size=main["train_size"].fillna(0))
    keys = ["task", "freeze_label", "train_size", "head_label"]
    grouped = main.groupby(keys).agg(mean=("value", "mean"), constant=("best_constant", "first"))
    return {k for k, r in grouped.iterrows() if r["mean"] > r["constant"] + 1e-6}


def _freeze_part(text: str, freeze: str) -> str:
    """The part of a per-freezing-strategy list that belongs to ``freeze``."""
    part = text.split(f"{freeze}: ", 1)[1]
    for other in ("frozen", "full"):
        part = part.split(f"; {other}: ", 1)[0]
    return part


def test_the_calibration_sentence_names_every_size_of_a_learning_curve():
    from bench.results.calibration import calibration_tables
    from bench.results.predictions import read_predictions

    source = RESULTS / "curves_sst2_rte"
    runs = calibration_tables(read_predictions(source))[0]
    runs = runs[runs["split"] == "dev"]
    means = runs.groupby(["task", "freeze_label", "train_size", "head_label"])["ece"].mean()
    sentence = findings.calibration_finding(source)
    assert sentence is not None
    lowest = sentence.split("lowest per setting", 1)[1].split(" — ", 1)[1]
    lowest = lowest.split("; tied:", 1)[0]
    settings = means.groupby(level=[0, 1, 2])
    # only heads whose mean main score (accuracy here) beats the best constant count
    learned = _learned(pd.read_csv(source / "results.csv"))
    named_settings = [
        k for k, g in settings if any((*k, h) in learned for h in g.index.get_level_values(3))
    ]
    assert len(settings) == 14 and len(named_settings) == 9 == lowest.count(" examples) `")
    for (task, freeze, size), group in settings:
        eligible = group[
            [(task, freeze, size, h) in learned for h in group.index.get_level_values(3)]
        ]
        part = _freeze_part(lowest, freeze)
        if eligible.empty:
            assert f"{TITLE[task]} ({int(size):,} examples)" in part.split("none in ", 1)[1]
            continue
        head = eligible.idxmin()[3]
        named = f"{TITLE[task]} ({int(size):,} examples) `{head}` {100 * eligible.min():.1f}"
        assert named in part, named
    # one size per setting: no size is named
    gpu = findings.calibration_finding(GPU)
    assert gpu is not None and "examples)" not in gpu


@pytest.mark.skipif(not (RESULTS / "fair_heads_gpu" / "results.csv").is_file(), reason="not run")
def test_the_glance_names_the_settings_where_not_every_head_ran():
    table = pd.read_csv(RESULTS / "fair_heads_gpu" / "results.csv")
    ok = table[(table["status"] == "ok") & (table["split"] == "dev")]
    ran = ok.groupby(["task", "freeze_label"])["head_label"].nunique()
    every = table["head_label"].nunique()
    partial = ran[ran < every]
    assert not partial.empty  # the experiment is partial: full RTE has only some heads
    ctx = build_context(load_inputs(RESULTS / "fair_heads_gpu"))
    glance = at_a_glance(headline_frame(ctx), headline_comparisons(ctx), every)
    assert f"{len(partial)} of these settings compare fewer than all {every} heads" in glance
    for (task, freeze), n in partial.items():
        title = {"sst2": "SST-2", "mrpc": "MRPC", "rte": "RTE", "cola": "CoLA", "stsb": "STS-B"}
        assert f"{title[task]} {freeze} ({n} of {every})" in glance


FAIR = RESULTS / "fair_heads"


@pytest.fixture(scope="module")
def fair_finding() -> str:
    return findings.experiment_finding(FAIR)


def _leader_tests(table: pd.DataFrame) -> dict:
    """Per (task, freeze): winner, and per other head (raw p, Holm p over all, a, b)."""
    main = table[(table.split == "dev") & (table.metric == table.main_metric)]
    main = main[main.status == "ok"]
    found, pvalues, keys = {}, [], []
    for (task, freeze), rows in main.groupby(["task", "freeze_label"]):
        wide = rows.pivot_table(index="seed", columns="head_label", values="value")
        ranked = sorted(wide.columns, key=lambda h: (-round(wide[h].mean(), 12), h))
        found[(task, freeze)] = {"winner": ranked[0], "others": {}}
        for other in ranked[1:]:
            pair = wide[[ranked[0], other]].dropna()
            test = ttest_rel(pair[ranked[0]], pair[other])
            found[(task, freeze)]["others"][other] = [test, pair[ranked[0]] - pair[other]]
            pvalues.append(test.pvalue)
            keys.append(((task, freeze), other))
    for (setting, other), p in zip(keys, holm_reference(np.asarray(pvalues)), strict=True):
        found[setting]["others"][other].append(p)
    return {"settings": found, "m": len(pvalues)}


@pytest.mark.skipif(not (FAIR / "results.csv").is_file(), reason="not run")
def test_the_findings_name_the_heads_each_best_head_ties_with(fair_finding):
    table = pd.read_csv(FAIR / "results.csv")
    computed = _leader_tests(_headline_only(table))
    computed["settings"].update(_leader_tests(_study_only(table))["settings"])
    best = _best_heads(fair_finding)
    constant = _best_constants(table)
    for (task, freeze), found in computed["settings"].items():
        winner = found["winner"]
        mean = table[
            (table.task == task)
            & (table.freeze_label == freeze)
            & (table.head_label == winner)
            & (table.split == "dev")
            & (table.metric == table.main_metric)
        ]["value"].mean()
        if mean <= constant[(task, freeze)]:
            continue  # no winner: nothing is named best
        tied = [
            other
            for other, (_, d, p_holm) in found["others"].items()
            if not (p_holm < 0.05 and d.mean() > 0)
        ]
        part = best.split(f"{freeze}: ", 1)[1]
        text = part.split(f"{TITLE[task]} `{winner}` {100 * mean:.1f}", 1)[1]
        note = text.split(")", 1)[0] if text.startswith(" (") else ""
        if tied:
            assert "tied with" in note, (task, freeze)
            named = note.split("tied with ", 1)[1].split(";", 1)[0]
            assert sorted(h.strip(" `") for h in named.split(",")) == sorted(tied)
        else:
            assert "tied with" not in note, (task, freeze)
    # MRPC frozen: the best mean is not significantly ahead of any head: a tie with all four
    assert "MRPC `last4_concat` 82.0 (tied with `bilstm`, `linear`, `mean_linear`, " in best


@pytest.mark.skipif(not (FAIR / "results.csv").is_file(), reason="not run")
def test_the_margin_beside_holms_p_is_the_simultaneous_interval_in_readme_and_findings(
    fair_finding,
):
    table = pd.read_csv(FAIR / "results.csv")
    computed = _leader_tests(_headline_only(table))  # the full fine-tuning study is apart
    m = computed["m"]
    assert m == _verdicts(_headline_only(table))[2]
    mrpc = computed["settings"][("mrpc", "frozen")]
    test, _, p_holm = mrpc["others"]["linear"]
    one = test.confidence_interval(0.95)
    sim = test.confidence_interval(1 - 0.05 / m)
    # the audit's case: the per-comparison interval excludes 0, Holm's p does not reject
    assert one.low > 0 and p_holm >= 0.05 and sim.low < 0
    text = readme.experiment_readme(FAIR)
    line = next(x for x in text.splitlines() if x.startswith("- MRPC, frozen:"))
    assert (
        f"simultaneous 95% interval over all {m} headline comparisons (Bonferroni): "
        f"{100 * sim.low:.1f} to {100 * sim.high:.1f}"
    ) in line
    assert f"{100 * one.low:.1f} to {100 * one.high:.1f}" not in line
    assert f"p = {p_holm:.2g}, not significant" in line
    row = next(x for x in text.splitlines() if x.startswith("| MRPC | frozen |"))
    assert f"| {100 * sim.low:.1f} to {100 * sim.high:.1f} |" in row
    assert f"Margin, simultaneous 95% interval (Bonferroni over m = {m})" in text
    # the Findings' largest significant margin: STS-B frozen, with its simultaneous interval
    stsb = computed["settings"][("stsb", "frozen")]["others"]["bilstm"][0]
    big = stsb.confidence_interval(1 - 0.05 / m)
    assert (
        f"simultaneous 95% interval over all {m} headline comparisons (Bonferroni): "
        f"{100 * big.low:.1f} to {100 * big.high:.1f}"
    ) in fair_finding


CURVES = RESULTS / "curves_sst2_rte"


@pytest.mark.skipif(not (CURVES / "predictions.parquet").is_file(), reason="not run")
def test_the_best_calibrated_head_is_named_with_its_accuracy_and_never_at_chance():
    from bench.results.calibration import calibration_tables
    from bench.results.predictions import read_predictions

    runs = calibration_tables(read_predictions(CURVES))[0]
    runs = runs[(runs["split"] == "dev")]
    table = pd.read_csv(CURVES / "results.csv")
    learned = _learned(table)
    sentence = findings.calibration_finding(CURVES)
    assert sentence is not None
    full = sentence.split("full: ", 1)[1]
    # full SST-2, 100 examples: the lowest ECE of all is linear's, near chance; its accuracy
    # is stated, and its standing against the best constant prediction (50.9)
    at100 = runs[(runs.freeze_label == "full") & (runs.train_size == 100)]
    by_head = at100.groupby("head_label")[["ece", "accuracy"]].mean()
    assert by_head["ece"].idxmin() == "linear"
    acc = 100 * by_head.loc["linear", "accuracy"]
    dev = table[(table.split == "dev") & (table.metric == "accuracy") & (table.status == "ok")]
    base = 100 * dev[dev.task == "sst2"]["best_constant"].iloc[0]
    lin = dev[(dev.freeze_label == "full") & (dev.train_size == 100) & (dev.head_label == "linear")]
    low = sps.t.interval(0.95, len(lin) - 1, loc=lin.value.mean(), scale=sps.sem(lin.value))[0]
    assert acc < base + 2 and 100 * low < base < acc  # above the constant, not shown to be
    assert (
        f"SST-2 (100 examples) `linear` {100 * by_head.loc['linear', 'ece']:.1f} at {acc:.1f} "
        f"acc (the 95% t-interval of its acc reaches the best constant prediction, {base:.1f}: "
        "calibration there says little"
    ) in full
    # no head at or below the best constant prediction is ever named best-calibrated
    lowest = sentence.split("lowest per setting", 1)[1].split("; tied:", 1)[0]
    for (task, freeze, size, head), _ in runs.groupby(
        ["task", "freeze_label", "train_size", "head_label"]
    ):
        if (task, freeze, size, head) not in learned:
            named = f"{TITLE[task]} ({int(size):,} examples) `{head}` "
            assert named not in _freeze_part(lowest, freeze), named
    assert "none in RTE (100 examples)" in lowest  # frozen RTE: no head learned
    # every named head comes with its accuracy
    named = re.findall(r"`[\w-]+` \d+\.\d", lowest)
    assert len(named) == 9 == len(re.findall(r"`[\w-]+` \d+\.\d at \d+\.\d acc", lowest))
