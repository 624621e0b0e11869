"""The HTML report: sections, numbers, figures, escaping, self-containment (parsed, not grepped)."""

from __future__ import annotations

import base64
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import pytest
from bs4 import BeautifulSoup
from scipy import stats as sps
from scipy.stats import ttest_rel
from statsmodels.stats.multitest import multipletests

from bench.report import build_report
from bench.results.collect import collect
from bench.results.run_records import log_launch_event

ROOT = Path(__file__).resolve().parents[1]
EVIL = "<script>alert(1)</script>"
SECTIONS = [
    "answer-section",
    "verdicts",
    "budget",
    "seed-spread",
    "cost",
    "layers",
    "curves",
    "provenance",
]
WITH_FIGURES = ["answer-section", "seed-spread", "cost", "curves"]
SST2_BASELINE = 0.509
# sst2 dev accuracy per (head label, freeze) and seed 1..3; None = the run crashed/diverged.
SST2 = {
    ("linear", "frozen"): [0.70, 0.72, 0.74],
    ("bilstm", "frozen"): [0.80, 0.83, 0.86],
    (EVIL, "frozen"): [0.60, 0.61, 0.62],
    ("linear", "full"): [0.85, 0.86, 0.87],
    ("bilstm", "full"): [0.86, 0.88, 0.90],
    (EVIL, "full"): [None, None, 0.50],  # seed 1 failed, seed 2 diverged, seed 3 at baseline
}
# conll2003 (dev, test) entity F1 per layer choice, seeds 1..2; finetune = linear, full.
CONLL = {
    ("bilstm", "frozen", "last"): [(0.80, 0.78), (0.82, 0.79)],
    ("bilstm", "frozen", "concat_last4"): [(0.86, 0.84), (0.88, 0.85)],
    ("linear", "full", None): [(0.90, 0.88), (0.91, 0.89)],
}
TRAIN_S = 10.0  # every synthetic run "trained" for 10 s (+ seed)


def _result(task, head_label, freeze, seed, best, status="ok", layers=None, reason=None):
    head = "linear" if head_label in ("linear", EVIL) else "bilstm"
    main = "accuracy" if task == "sst2" else "f1"
    dev = (best or {}).get("dev", {}).get(main)
    history = []
    if dev is not None:  # two epochs, the second is the best
        history = [
            {"epoch": 0, "step": 10, "dev": {main: dev - 0.05}, "train_loss": 0.7},
            {"epoch": 1, "step": 20, "dev": {main: dev}, "train_loss": 0.5},
        ]
    baseline = (
        {"dev": {"metrics": {"accuracy": SST2_BASELINE}}}
        if task == "sst2"
        else {split: {"metrics": {"f1": 0.0}} for split in ("dev", "test")}
    )
    return {
        # Hand-made in the layout before predictions were part of the result (schema 1):
        # collected with a "not re-scored" note instead of refused.
        "schema": 1,
        "cell": {
            "task": task,
            "encoder": "tiny_bert",
            "head": head,
            "head_label": head_label,
            "layers": layers,
            "freeze": freeze,
            "freeze_label": freeze,
            "seed": seed,
        },
        "status": status,
        "reason": reason,
        "main_metric": main,
        "config_hash": f"hash-{task}-{head_label}-{freeze}-{layers}-{seed}",
        "config": {
            "task": {"name": task},
            "head": {"name": head, "label": head_label},
            "freeze": {"name": freeze},
            "seed": seed,
            "optim": {"head_lr": 0.001},
        },
        "history": history,
        "best": {"epoch": 1, "metrics": best} if best else None,
        "baseline": baseline,
        "params": {"trainable": 1000 if freeze == "frozen" else 50_000},
        "train_time_s": TRAIN_S + seed,
        "wall_time_s": TRAIN_S + seed + 1,
        "finished_at": f"2026-11-21T10:00:0{seed}.000000Z",
        "git": {"commit": "abc123", "dirty": False},
        "versions": {"torch": "2.13.0+cpu", "headbench": None},
        "hardware": {"cpu_count": 2, "gpu": None},
    }


def write_synthetic_sweep(sweep: Path) -> list[dict]:
    """Result files of a small sweep (as train.run writes them) and a launch log."""
    log_launch_event(sweep, "launch", command="python -m bench -m task=sst2,conll2003 seed=1,2,3")
    results = []
    for (head, freeze), values in SST2.items():
        for seed, value in enumerate(values, start=1):
            if value is None:
                status = "failed" if seed == 1 else "diverged"
                reason = "RuntimeError: boom" if seed == 1 else "non-finite loss at step 3"
                results.append(_result("sst2", head, freeze, seed, None, status, reason=reason))
            else:
                results.append(_result("sst2", head, freeze, seed, {"dev": {"accuracy": value}}))
    for (head, freeze, layers), values in CONLL.items():
        for seed, (dev, test) in enumerate(values, start=1):
            label = f"{head}-{layers}" if layers else head
            best = {"dev": {"f1": dev}, "test": {"f1": test}}
            results.append(_result("conll2003", label, freeze, seed, best, layers=layers))
    for i, res in enumerate(results):
        c = res["cell"]
        run_dir = sweep / c["task"] / f"cell{i}" / f"seed={c['seed']}"
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "result.json").write_text(json.dumps(res))
    log_launch_event(sweep, "skip", cell_path="sst2/x/frozen/seed=1", state="done")
    return results


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    write_synthetic_sweep(root / "runs")
    collect([root / "runs"], root / "results")
    out = build_report(root / "results", root / "reports" / "synthetic.html")
    return out, BeautifulSoup(out.read_text(encoding="utf-8"), "html.parser")


def _section(soup, sid):
    section = soup.find("section", id=sid)
    assert section is not None, sid
    return section


def _table_rows(table):
    return [
        [td.get_text() for td in tr.find_all("td")] for tr in table.find("tbody").find_all("tr")
    ]


def _table_with(section, *headers):
    for table in section.find_all("table"):
        found = [th.get_text() for th in table.find("thead").find_all("th")]
        if all(h in found for h in headers):
            return found, _table_rows(table)
    raise AssertionError(f"no table with {headers}")


def test_every_section_is_there_with_an_embedded_svg_figure(report):
    _, soup = report
    assert [s["id"] for s in soup.find_all("section")] == SECTIONS
    for sid in WITH_FIGURES:
        images = _section(soup, sid).select("figure > img")
        assert images, f"section {sid} has no figure"
        for img in images:
            prefix = "data:image/svg+xml;base64,"
            assert img["src"].startswith(prefix) and img["alt"]
            svg = ElementTree.fromstring(base64.b64decode(img["src"][len(prefix) :]))
            assert svg.tag.endswith("svg")
            assert not [e for e in svg.iter() if e.tag.endswith("script")]


def test_the_page_is_self_contained_and_written_atomically(report):
    path, soup = report
    assert not soup.find_all("script") and not soup.find_all("link") and not soup.find_all("iframe")
    sources = [t.get("src") for t in soup.find_all(src=True)]
    assert sources and all(s.startswith("data:") for s in sources)
    assert not [t for t in soup.find_all(href=True) if not t["href"].startswith("#")]
    assert sorted(p.name for p in path.parent.iterdir()) == ["synthetic.html"]  # no temp file left
    assert stat.S_IMODE(path.stat().st_mode) & 0o044  # readable by others, like any report


def test_a_report_built_again_from_the_same_results_differs_only_in_its_time(report):
    """Figures' clip-path and marker ids come from their content, not a random salt."""
    path, _ = report
    again = build_report(path.parent.parent / "results", path.parent.parent / "again.html")
    first, second = (p.read_text(encoding="utf-8") for p in (path, again))
    assert "clip-path" in base64.b64decode(first.split("base64,", 1)[1].split('"', 1)[0]).decode()
    generated = re.compile(r"Generated [^ <]+ by")
    assert generated.search(first)
    assert generated.sub("", first) == generated.sub("", second)
    again.unlink()


def _half(values, confidence=0.95):
    x = np.asarray(values, dtype=float)
    return sps.t.ppf(0.5 + confidence / 2, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size)


def test_the_answer_table_comes_first_with_independent_numbers(report):
    _, soup = report
    first = soup.find("section")
    assert first["id"] == "answer-section" and first.find("table")["id"] == "answer"
    header, rows = _table_with(first, "Setting", "Best constant")
    by_setting = {r[0].rstrip(" †"): dict(zip(header, r, strict=True)) for r in rows}
    frozen = by_setting["SST-2 frozen"]
    for head in ("linear", "bilstm", EVIL):
        values = SST2[(head, "frozen")]
        # no predictions in these results: the seeds are the only noise counted
        text = f"{100 * np.mean(values):.1f}±{100 * _half(values):.1f}"
        assert frozen[head].startswith(text), head
    best = first.find("table").find_all("td", class_="best")
    assert {td.get_text().split("±")[0] for td in best} >= {"83.0"}  # bilstm frozen in bold
    assert frozen["Best constant"] == f"{100 * SST2_BASELINE:.1f}"
    words = first.find("p", class_="lead").get_text().split()
    assert len(words) <= 40


def test_every_verdict_and_its_holm_p_match_scipy_and_statsmodels(report):
    _, soup = report
    section = _section(soup, "verdicts")
    header, rows = _table_with(section, "A", "B", "Holm p", "Verdict")
    every = {(r[0], r[2], r[3]): dict(zip(header, r, strict=True)) for r in rows}
    # the pairs with a test, Holm'd together (one family: no studies); SST-2 full against
    # EVIL has one paired seed and CoNLL frozen constant differences: no test
    frozen, full = ("SST-2 frozen", "frozen"), ("SST-2 full", "full")
    pairs = {
        (name, a, b): (SST2[(a, freeze)], SST2[(b, freeze)])
        for (name, freeze), (a, b) in (
            (frozen, ("linear", "bilstm")),
            (frozen, ("linear", EVIL)),
            (frozen, ("bilstm", EVIL)),
            (full, ("linear", "bilstm")),
        )
    }
    raw = {k: ttest_rel(a, b).pvalue for k, (a, b) in pairs.items()}
    conll = [v[0] for v in CONLL[("bilstm", "frozen", "last")]]
    concat = [v[0] for v in CONLL[("bilstm", "frozen", "concat_last4")]]
    holm = dict(zip(raw, multipletests(list(raw.values()), method="holm")[1], strict=True))
    for key, p in holm.items():
        row = every[key]
        assert row["Holm p"] == f"{p:.2g}", key
        d = np.subtract(*pairs[key]).mean()
        expected = "inconclusive" if p >= 0.05 else ("better" if d > 0 else "worse")
        assert row["Verdict"] == expected and row["A − B"] == f"{100 * d:+.1f}", key
    untested = every[("CoNLL-2003 frozen", "bilstm-concat_last4", "bilstm-last")]
    gap = 100 * (np.mean(concat) - np.mean(conll))
    assert untested["Holm p"] == "–" and untested["A − B"] == f"{gap:+.1f}"
    assert untested["Verdict"].startswith("inconclusive (no spread")
    # one p per comparison on the page: only the every-comparison table shows p-values
    p_tables = [t for t in soup.find_all("table") if "Holm p" in t.get_text()]
    assert len(p_tables) == 1


def test_seed_spread_counts_failed_runs_per_cell(report):
    _, soup = report
    header, rows = _table_with(_section(soup, "seed-spread"), "Failed", "Why")
    by = {(r[2], r[1]): dict(zip(header, r, strict=True)) for r in rows}
    evil = by[(EVIL, "full")]
    assert evil["Runs"] == "3" and evil["Failed"] == "3"
    assert set(evil["Why"].split(", ")) == {"1 failed", "1 diverged", "1 at or below baseline"}
    ok = by[("bilstm", "frozen")]
    values = SST2[("bilstm", "frozen")]
    assert ok["Failed"] == "0" and ok["Median"] == f"{100 * np.median(values):.1f}"
    assert ok["SD"] == f"{100 * np.std(values, ddof=1):.1f}"


def _brute_force_expected_max(values, n):
    """Mean of max over every ordered n-tuple drawn with replacement (independent of stats)."""
    import itertools

    maxima = [max(t) for t in itertools.product(values, repeat=n)]
    return float(np.mean(maxima)), float(np.std(maxima))


def test_expected_validation_performance_matches_brute_force_enumeration(report):
    _, soup = report
    section = _section(soup, "seed-spread")
    header, rows = _table_with(section, "Seeds", "n = 3", "Best seen")
    by_setting = {(r[2], r[1]): dict(zip(header, r, strict=True)) for r in rows}
    for (head, freeze), values in [
        (("bilstm", "frozen"), [0.80, 0.83, 0.86]),
        (("linear", "full"), [0.85, 0.86, 0.87]),
    ]:
        row = by_setting[(head, freeze)]
        assert row["Seeds"] == "3" and row["Best seen"] == f"{100 * max(values):.1f}"
        for n in (1, 3):
            mean, std = _brute_force_expected_max(values, n)
            assert row[f"n = {n}"] == f"{100 * mean:.1f} ± {100 * std:.2f}"
    evil_full = by_setting[(EVIL, "full")]  # two runs without a score: one draw left
    assert evil_full["Seeds"] == "1" and evil_full["n = 1"] == "50.0 ± 0.00"


def test_cost_section_marks_the_pareto_front(report):
    _, soup = report
    header, rows = _table_with(_section(soup, "cost"), "Front: parameters", "Front: time")
    front = {(r[0], r[2], r[1]): dict(zip(header, r, strict=True)) for r in rows}
    # sst2: bilstm/frozen (1,000 params) and bilstm/full (best score) are on the front;
    # linear/frozen is dominated by bilstm/frozen (same cost, higher score).
    assert front[("SST-2", "bilstm", "frozen")]["Front: parameters"] == "yes"
    assert front[("SST-2", "bilstm", "full")]["Front: parameters"] == "yes"
    assert ("SST-2", "linear", "frozen") not in front


def test_layer_section_shows_our_choices_beside_the_paper(report):
    _, soup = report
    header, rows = _table_with(_section(soup, "layers"), "paper row", "paper", "mean")
    by = {r[1]: dict(zip(header, r, strict=True)) for r in rows}
    concat = [v[0] for v in CONLL[("bilstm", "frozen", "concat_last4")]]
    assert by["Concat Last Four Hidden"]["mean"] == f"{100 * np.mean(concat):.1f}"
    assert by["Concat Last Four Hidden"]["paper"] == "96.1"
    assert by["Last Hidden"]["paper"] == "94.9"


def test_learning_curves_table_has_the_per_epoch_means(report):
    _, soup = report
    header, rows = _table_with(_section(soup, "curves"), "Epoch 1", "Epoch 2")
    row = next(
        dict(zip(header, r, strict=True)) for r in rows if r[2] == "bilstm" and r[1] == "frozen"
    )
    values = SST2[("bilstm", "frozen")]  # two epochs per run, the first 5 points lower
    assert row["Epoch 1"] == f"{100 * np.mean(values) - 5:.1f}"
    assert row["Epoch 2"] == f"{100 * np.mean(values):.1f}"


def test_provenance_counts_statuses_and_names_the_command(report):
    _, soup = report
    section = _section(soup, "provenance")
    _, status = _table_with(section, "status", "cells")
    counts = {r[0]: int(r[1]) for r in status}
    n_ok = sum(v is not None for v in np.concatenate(list(SST2.values()))) + 6
    assert counts["ok"] == n_ok and counts["failed"] == 1 and counts["diverged"] == 1
    assert counts["skipped (newest launch)"] == 1
    _, facts = _table_with(section, "item", "value")
    facts = dict(facts)
    assert facts["command (newest launch)"] == "python -m bench -m task=sst2,conll2003 seed=1,2,3"
    seeds = [
        s
        for values in list(SST2.values()) + list(CONLL.values())
        for s in range(1, len(values) + 1)
    ]
    hours = sum(TRAIN_S + s for s in seeds) / 3600
    assert facts["training hours"] == f"{hours:.2f}"
    assert section.find("details") is not None  # per-cell configs, collapsed


def test_labels_with_markup_are_text_never_markup(report):
    path, soup = report
    assert not soup.find_all("script")
    cells = [td.get_text() for td in soup.find_all("td")]
    assert EVIL in cells  # shown literally in the tables
    assert EVIL not in path.read_text(encoding="utf-8")  # only ever in escaped form


def test_a_multirun_directory_gives_the_same_answer_as_its_results(report, tmp_path):
    write_synthetic_sweep(tmp_path / "runs")
    out = build_report(tmp_path / "runs", tmp_path / "direct.html")
    direct = BeautifulSoup(out.read_text(encoding="utf-8"), "html.parser")
    _, soup = report
    for sid, headers in (("answer-section", ("Setting",)), ("verdicts", ("Holm p",))):
        assert _table_with(_section(direct, sid), *headers) == _table_with(
            _section(soup, sid), *headers
        )


def _report_cli(*args: str) -> subprocess.CompletedProcess:
    """``python -m bench.report ARGS`` in a subprocess (one BLAS thread)."""
    return subprocess.run(
        [sys.executable, "-m", "bench.report", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )


def test_cli_writes_the_report_and_names_a_missing_source(tmp_path):
    write_synthetic_sweep(tmp_path / "runs")
    out = tmp_path / "r.html"
    proc = _report_cli(str(tmp_path / "runs"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.is_file() and f"wrote {out}" in proc.stdout
    missing = tmp_path / "nowhere"
    proc = _report_cli(str(missing))
    assert proc.returncode != 0 and str(missing) in proc.stderr


def test_a_sweep_without_launch_log_takes_its_command_from_hydras_multirun_yaml(tmp_path):
    from omegaconf import OmegaConf

    from bench.results.run_records import last_launch, read_launch_log

    sweep = tmp_path / "old_sweep"
    sweep.mkdir()
    overrides = ["experiment=cpu_heads", "task=cola", "head.label=a b"]
    OmegaConf.save({"hydra": {"overrides": {"task": overrides}}}, sweep / "multirun.yaml")
    launch = last_launch(read_launch_log([sweep]))
    assert launch["command"] == "python -m bench -m experiment=cpu_heads task=cola 'head.label=a b'"
    assert launch["launches"] == 1 and launch["skipped"] == 0


def test_a_result_without_config_hash_is_reported_not_a_crash(tmp_path):
    """Older or hand-made results carry no config hash: the report names them and goes on."""
    runs = tmp_path / "runs"
    write_synthetic_sweep(runs)
    path = sorted(runs.rglob("result.json"))[0]
    result = json.loads(path.read_text())
    del result["config_hash"]
    path.write_text(json.dumps(result))
    collect([runs], tmp_path / "results")
    for source in (runs, tmp_path / "results"):  # a multirun dir, and its collected results
        out = tmp_path / f"{source.name}.html"
        proc = _report_cli(str(source), "-o", str(out))
        assert proc.returncode == 0, proc.stderr[-2000:]
        soup = BeautifulSoup(out.read_text(encoding="utf-8"), "html.parser")
        _, problems = _table_with(_section(soup, "provenance"), "result file problem")
        notes = " ".join(r[0] for r in problems)
        run_dir = os.path.relpath(path.parent, ROOT)
        assert "no 'config_hash'" in notes and (str(path) in notes or run_dir in notes), notes
        header, rows = _table_with(_section(soup, "provenance"), "hash", "status")
        hashes = [r[header.index("hash")] for r in rows]
        assert hashes.count("–") == 1  # shown as absent, the others as hashes
