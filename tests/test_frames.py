"""The statistics frames (bench/results/frames.py), recomputed independently.

The dev-example term is checked against brute-force leave-one-out scores from scikit-learn,
SciPy and seqeval; one committed family's p-values, Holm p-values and verdicts are
recomputed from results.csv and predictions.parquet with NumPy, SciPy and statsmodels.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from seqeval.metrics import f1_score as seqeval_f1
from seqeval.scheme import IOB2
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef
from statsmodels.stats.multitest import multipletests

from bench.results import frames, stats
from bench.results.studies import Margin, Study

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "fair_heads"


def _rows(task: str, labels, preds) -> pd.DataFrame:
    return pd.DataFrame(
        {"example": range(len(labels)), "label": [str(v) for v in labels], "pred": preds}
    ).assign(pred=lambda f: f["pred"].astype(str), token=-1)


@pytest.mark.parametrize(
    ("task", "metric", "score"),
    [
        ("sst2", "accuracy", accuracy_score),
        ("mrpc", "f1", lambda y, p: f1_score(y, p, pos_label="1", zero_division=0)),
        ("cola", "mcc", matthews_corrcoef),
    ],
)
def test_jackknife_is_leave_one_out_of_the_metric(task, metric, score):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, size=60)
    preds = np.where(rng.random(60) < 0.7, labels, 1 - labels)
    loo = frames.jackknife(task, metric, _rows(task, labels, preds))
    y, p = labels.astype(str), preds.astype(str)
    brute = [score(np.delete(y, i), np.delete(p, i)) for i in range(60)]
    np.testing.assert_allclose(loo, brute, atol=1e-12)


def test_jackknife_of_pearson_and_entity_f1():
    rng = np.random.default_rng(1)
    y = rng.uniform(0, 5, size=40)
    p = y + rng.normal(0, 1, size=40)
    rows = pd.DataFrame({"example": range(40), "label": y.astype(str), "pred": p.astype(str)})
    loo = frames.jackknife("stsb", "pearson", rows)
    brute = [sps.pearsonr(np.delete(y, i), np.delete(p, i))[0] for i in range(40)]
    np.testing.assert_allclose(loo, brute, atol=1e-9)

    gold = [["B-PER", "I-PER", "O"], ["B-LOC", "O"], ["O", "B-ORG", "I-ORG"], ["B-MISC"]]
    pred = [["B-PER", "O", "O"], ["B-LOC", "O"], ["O", "B-ORG", "I-ORG"], ["O"]]
    rows = pd.DataFrame(
        [
            {"example": s, "token": t, "label": g, "pred": q}
            for s, (gs, ps) in enumerate(zip(gold, pred, strict=True))
            for t, (g, q) in enumerate(zip(gs, ps, strict=True))
        ]
    )
    loo = frames.jackknife("conll2003", "f1", rows)
    brute = [
        seqeval_f1(gold[:i] + gold[i + 1 :], pred[:i] + pred[i + 1 :], mode="strict", scheme=IOB2)
        for i in range(len(gold))
    ]
    np.testing.assert_allclose(loo, brute, atol=1e-12)


def _runs(values: dict[str, list[float]], constant: float = 0.5) -> pd.DataFrame:
    rows = [
        {
            "task": "sst2",
            "encoder": "enc",
            "head": head,
            "head_label": head,
            "freeze": "frozen",
            "freeze_label": "frozen",
            "seed": seed,
            "status": "ok",
            "split": "dev",
            "metric": "accuracy",
            "main_metric": "accuracy",
            "value": v,
            "best_constant": constant,
        }
        for head, vs in values.items()
        for seed, v in enumerate(vs, start=1)
    ]
    return stats.run_values(pd.DataFrame(rows))


def test_verdicts_follow_the_declared_rules():
    rng = np.random.default_rng(2)
    base = rng.normal(0.80, 0.003, size=10)
    values = {
        "a": list(base),
        "b": list(base + 0.001 + rng.normal(0, 0.001, 10)),  # within a 1-point margin
        "c": list(base - 0.05 + rng.normal(0, 0.002, 10)),  # far below
    }
    runs = _runs(values)
    margin = [Margin("sst2", "accuracy", 1.0, "test")]
    scores, comps = frames.build(runs, pd.DataFrame(), (), margin, (), ["a", "b", "c"])
    verdict = {(r.head_a, r.head_b): r.verdict for r in comps.itertuples()}
    assert verdict == {("a", "b"): "equivalent", ("a", "c"): "better", ("b", "c"): "better"}
    ab = comps[(comps["head_a"] == "a") & (comps["head_b"] == "b")].iloc[0]
    assert (ab["shown"], ab["low"], ab["high"]) == ("90%", ab["low90"], ab["high90"])
    assert ab["min_margin"] == pytest.approx(max(abs(ab["low90"]), abs(ab["high90"])))
    # Holm over the family of three, from the raw p-values, with statsmodels
    np.testing.assert_allclose(comps["p_holm"], multipletests(comps["p"], method="holm")[1])
    assert scores.set_index("head_label").loc["a", "beats_all"] == np.False_  # ties with b
    # without a margin nothing is equivalent; below the best constant nothing is either
    _, plain = frames.build(runs, pd.DataFrame(), (), (), (), ["a", "b", "c"])
    assert "equivalent" not in set(plain["verdict"])
    _, low = frames.build(_runs(values, constant=0.9), pd.DataFrame(), (), margin, (), ["a", "b"])
    assert "equivalent" not in set(low["verdict"])


def test_an_anchor_is_scored_beside_the_heads_but_not_ranked_among_them():
    """An anchor (head=anchor) gets a score row, no comparison, no Holm share, never `best`."""
    rng = np.random.default_rng(3)
    values = {"a": list(0.80 + rng.normal(0, 0.003, 5)), "b": list(0.70 + rng.normal(0, 0.003, 5))}
    runs = _runs({**values, "anchor-mean": [0.9] * 5})
    runs.loc[runs["head_label"] == "anchor-mean", "head"] = "anchor"
    scores, comps = frames.build(runs, pd.DataFrame(), (), (), (), ["a", "b"])
    assert set(scores["head_label"]) == {"a", "b", "anchor-mean"}
    assert set(comps[["head_a", "head_b"]].to_numpy().ravel()) == {"a", "b"}
    assert comps["m"].tolist() == [1] and comps["p_holm"].tolist() == comps["p"].tolist()
    best = scores.set_index("head_label")["best"]
    assert best.to_dict() == {"a": True, "b": False, "anchor-mean": False}
    assert scores.set_index("head_label").loc["a", "beats_all"]  # better than b, the only head


def test_runs_on_other_devices_are_not_comparable_and_get_no_p():
    runs = _runs({"a": [0.8, 0.81, 0.82], "b": [0.7, 0.71, 0.72]})
    cells = [
        {"cell": {"task": "sst2", "encoder": "enc", "head_label": h, "freeze_label": "frozen",
                  "seed": s}, "hardware": {"gpu": "NVIDIA H200"} if h == "b" else {"cpu_count": 2},
         "git": {"commit": "x"}}
        for h in ("a", "b") for s in (1, 2, 3)
    ]  # fmt: skip
    _, comps = frames.build(runs, pd.DataFrame(), (), (), cells, ["a", "b"])
    row = comps.iloc[0]
    assert row["verdict"] == "not comparable" and row["reason"] == "device differ"
    assert math.isnan(row["p"]) and row["m"] == 0


def test_oriented_flips_sign_interval_and_direction():
    runs = _runs({"a": [0.8, 0.82, 0.85], "b": [0.6, 0.61, 0.6]})
    _, comps = frames.build(runs, pd.DataFrame(), (), (), (), ["a", "b"])
    back = frames.oriented(comps, "b", "a").iloc[0]
    row = comps.iloc[0]
    assert back["estimate"] == -row["estimate"] and back["verdict"] == "worse"
    assert (back["low"], back["high"]) == (-row["high"], -row["low"])
    assert (back["mean_a"], back["mean_b"]) == (row["mean_b"], row["mean_a"])


def _independent_study() -> pd.DataFrame:
    """The full fine-tuning study of the committed fair_heads (SST-2 and RTE, accuracy), from
    results.csv and predictions.parquet: the paired seed term plus the dev term s/√N of
    accuracy, Welch–Satterthwaite df, SciPy's t, statsmodels' Holm."""
    table = pd.read_csv(RESULTS / "results.csv")
    ok = table[(table["status"] == "ok") & (table["split"] == "dev")]
    ok = ok[ok["metric"] == ok["main_metric"]]
    study = ok[ok["freeze_label"] == "full"]
    preds = pd.read_parquet(RESULTS / "predictions.parquet")
    preds = preds[(preds["split"] == "dev") & (preds["freeze_label"] == "full")]
    rows = []
    for task, part in study.groupby("task"):
        wide = part.pivot_table(index="seed", columns="head_label", values="value")
        correct = preds[preds["task"] == task].assign(c=lambda f: (f["label"] == f["pred"]) * 1.0)
        c = correct.pivot_table(index=["head_label", "seed"], columns="example", values="c")
        heads = list(wide.columns)
        for i, a in enumerate(heads):
            for b in heads[i + 1 :]:
                d = (wide[a] - wide[b]).dropna()
                se_s = d.std(ddof=1) / math.sqrt(len(d))
                per_example = c.loc[a].loc[d.index].mean() - c.loc[b].loc[d.index].mean()
                se_d = per_example.std(ddof=1) / math.sqrt(len(per_example))
                se = math.hypot(se_s, se_d)
                df = se**4 / (se_s**4 / (len(d) - 1) + se_d**4 / (len(per_example) - 1))
                p = 2 * sps.t.sf(abs(d.mean()) / se, df)
                rows.append({"task": task, "pair": frozenset((a, b)), "p": p, "diff": d.mean(),
                             "se": se, "df": df})  # fmt: skip
    out = pd.DataFrame(rows)
    out["p_holm"] = multipletests(out["p"], method="holm")[1]
    return out


def test_one_committed_family_recomputed_independently():
    mine = _independent_study()
    committed = pd.read_csv(RESULTS / "comparisons.csv")
    study = committed[committed["family"] == "full fine-tuning study"].copy()
    study["pair"] = [frozenset(p) for p in zip(study["head_a"], study["head_b"], strict=True)]
    merged = study.merge(mine, on=["task", "pair"], suffixes=("", "_mine"))
    assert len(merged) == len(study) == len(mine) == 20
    np.testing.assert_allclose(np.abs(merged["estimate"]), np.abs(merged["diff"]), atol=1e-12)
    np.testing.assert_allclose(merged["se"], merged["se_mine"], rtol=1e-9)
    np.testing.assert_allclose(merged["df"], merged["df_mine"], rtol=1e-9)
    np.testing.assert_allclose(merged["p"], merged["p_mine"], rtol=1e-9)
    np.testing.assert_allclose(merged["p_holm"], merged["p_holm_mine"], rtol=1e-9)
    assert (merged["m"] == 20).all()
    # the verdicts, from the independent numbers: no pair here is equivalent at ±1 point
    # (its 90% interval is wider than the margin), so Holm alone decides
    half90 = sps.t.ppf(0.95, merged["df_mine"]) * merged["se_mine"]
    assert (half90 > 0.01).all()
    expected = np.where(
        merged["p_holm_mine"] < 0.05,
        np.where(merged["estimate"] > 0, "better", "worse"),
        "inconclusive",
    )
    assert merged["verdict"].tolist() == expected.tolist()


def test_committed_frames_are_the_frames_of_the_committed_results():
    table = pd.read_csv(RESULTS / "results.csv")
    preds = pd.read_parquet(RESULTS / "predictions.parquet")
    cells = json.loads((RESULTS / "cells.json").read_text())
    command = "python -m bench -m experiment=fair_heads"
    scores, comps = frames.from_results(table, preds, cells, command)
    for mine, name in ((scores, "scores"), (comps, "comparisons")):
        pd.testing.assert_frame_equal(
            mine.reset_index(drop=True),
            pd.read_parquet(RESULTS / f"{name}.parquet"),
            check_dtype=False,
        )


def test_studies_are_families_of_their_own():
    runs = _runs({"a": [0.8, 0.81, 0.83], "b": [0.7, 0.72, 0.71]})
    study = Study("the frozen study", (("freeze", ("frozen",)),))
    scores, comps = frames.build(runs, pd.DataFrame(), (study,), (), (), ["a", "b"])
    assert set(scores["family"]) == set(comps["family"]) == {"the frozen study"}
    assert comps.iloc[0]["m"] == 1
