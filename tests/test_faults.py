"""Bad input gets one clear message, a non-zero exit and no files; sweeps record it per cell.

Each case runs the real command line in a fresh process (``python -m bench ...``) and
checks what the user sees: the exit status, the key named in the message with the valid
choices, and that nothing was written (no run directory, no result file).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.model.tiny import build_tiny_model
from conftest import ROOT

FAST = ["encoder=tiny_bert", "seed=1", "data.train_size=32", "trainer.max_epochs=1"]


def _bench(
    tmp_path: Path, *args: str, python: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    # cwd is the empty tmp_path, so anything written relative to it would be seen.
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}
    return subprocess.run(
        [sys.executable, *python, "-m", "bench", *args, f"runs_dir={tmp_path}/runs"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def _incomplete_encoder(tmp_path: Path) -> Path:
    """A model directory with config.json and weights but no tokenizer files."""
    source = Path(build_tiny_model("bert"))
    target = tmp_path / "no_tokenizer"
    target.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(source / name, target / name)
    return target


CONFIG_CASES = {
    # case: (overrides, what the message must contain)
    "unknown group option": (["head=foo"], ["Could not find 'head/foo'", "linear", "bilstm"]),
    "misspelled key": (["data.batchsize=8"], ["data.batchsize"]),
    # Hydra's hint for the line above is to add the key with '+': a misspelling still
    "misspelled key added with +": (
        ["+data.batchsize=8"],
        ["+data.batchsize", "did you mean data.batch_size=... (without +)"],
    ),
    "a flag misspelled": (["+forse=true"], ["+forse", "did you mean +force=..."]),
    "a yes/no word for a flag": (["+force=no"], ["force='no'", "true or false"]),
    "a yes/no word for a head option": (
        ["head=last4_concat", "head.mlp=no"],
        ["head.mlp='no'", "true or false"],
    ),
    "dropout of one or more": (["head.dropout=1.5"], ["head.dropout=1.5", "below 1"]),
    "a search budget that is not a count": (
        ["search=random", "search.trials=abc"],
        ["search.trials='abc'", "an integer, at least 0"],
    ),
    "wrong type": (["data.batch_size=abc"], ["data.batch_size='abc'", "must be an integer"]),
    "negative learning rate": (["optim.head_lr=-1"], ["optim.head_lr=-1", "at least 0"]),
    "pooler init=pretrained, untrained pooler": (
        ["head=pooler", "head.init=pretrained"],
        ["head.init=pretrained", "pooler='untrained'", "head.init=random"],
    ),
    "top_k above the depth": (["freeze=top_k", "freeze.k=9"], ["freeze.k=9", "1..4"]),
    "unknown freezing option": (["freeze.name=thaw"], ["freeze.name='thaw'", "frozen", "full"]),
    "head option on the wrong task": (
        ["task=conll2003", "head.pool=mean"],
        ["head.pool='mean'", "token task", "head.pool=null"],
    ),
    "layer index out of range": (["head.layers=[9]"], ["head.layers", "-5..-1"]),
    "max_length above the position limit": (
        ["data.max_length=4096"],
        ["data.max_length=4096", "position limit", "1..512"],
    ),
    "unknown allocator setting": (
        ["runtime.malloc=jemalloc"],
        ["runtime.malloc='jemalloc'", "tuned", "default"],
    ),
    "loss check interval below one": (
        ["runtime.loss_check_steps=0"],
        ["runtime.loss_check_steps=0", "at least 1"],
    ),
    "encoder directory missing": (
        ["encoder.source=/nonexistent/model"],
        ["encoder directory /nonexistent/model does not exist"],
    ),
}


@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_a_bad_config_exits_2_names_the_key_and_writes_nothing(tmp_path, case):
    overrides, expected = CONFIG_CASES[case]
    proc = _bench(tmp_path, *FAST, *overrides)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    for text in expected:
        assert text in proc.stderr, (text, proc.stderr[-2000:])
    assert proc.stderr.count("error") == 1  # one message, not a traceback
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no runs/, no outputs/


# Refused by composition or by a check that reads only the config: the answer comes before
# torch, transformers and Lightning are imported (most of the time a start takes).
# case: (arguments, what the message names)
LIGHT_REFUSALS = {
    "unknown group option": ([*FAST, "head=foo"], "head/foo"),
    "negative learning rate": ([*FAST, "optim.head_lr=-1"], "optim.head_lr=-1"),
    "unknown allocator setting": ([*FAST, "runtime.malloc=jemalloc"], "runtime.malloc"),
    "a sweep with a bad seed": (["-m", "encoder=tiny_bert", "seed=1,-1"], "seed=-1"),
}
HEAVY_MODULES = ("torch", "transformers", "lightning", "torchmetrics", "matplotlib")


@pytest.mark.parametrize("case", sorted(LIGHT_REFUSALS))
def test_a_command_refused_by_its_config_exits_before_importing_torch(tmp_path, case):
    args, named = LIGHT_REFUSALS[case]
    proc = _bench(tmp_path, *args, python=("-X", "importtime"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert [line for line in lines if "error" in line and named in line], proc.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
    assert "bench.run.cli" in imported  # importtime did report this process's imports
    assert imported.isdisjoint(HEAVY_MODULES), sorted(imported.intersection(HEAVY_MODULES))


def test_the_encoder_check_reads_the_config_and_tokenizer_without_model_classes(tmp_path):
    """A refusal by the encoder check loads no model code: its config and tokenizer only."""
    proc = _bench(tmp_path, *FAST, "data.max_length=4096", python=("-X", "importtime"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    # the limit comes from the encoder's config.json: it was read
    assert [line for line in lines if "data.max_length=4096" in line and "(512)" in line]
    imported = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
    assert "transformers.modeling_utils" not in imported  # every model class is built on it
    assert "lightning" not in imported


def test_an_encoder_without_tokenizer_files_is_refused_before_training(tmp_path):
    model = _incomplete_encoder(tmp_path)
    proc = _bench(tmp_path, *FAST, f"encoder.source={model}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "cannot load tokenizer" in proc.stderr and str(model) in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_in_a_sweep_a_bad_cell_is_recorded_failed_and_the_others_run(data_dir, tmp_path):
    proc = _bench(
        tmp_path,
        "-m",
        *FAST,
        "freeze=top_k",
        "freeze.k=1,9",
        f"data.dir={data_dir}",
        f"results_dir={tmp_path}/results",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {
        path.parent.parent.name: json.loads(path.read_text())
        for path in (tmp_path / "runs").rglob("result.json")
    }
    assert results["top1"]["status"] == "ok"
    assert results["top9"]["status"] == "failed"
    assert results["top9"]["reason"].startswith("ConfigError: freeze.k=9 for top_k")
    assert "train_time_s" not in results["top9"]  # refused before any loading or training


def test_a_single_class_prediction_is_flagged_degenerate_with_its_histogram():
    from bench.data.tasks import get_task
    from bench.results.degenerate import prediction_summary

    sst2, conll, stsb = get_task("sst2"), get_task("conll2003"), get_task("stsb")
    one_class = {"dev": {"idx": [0, 1, 2], "label": [0, 1, 1], "pred": [1, 1, 1]}}
    summary = prediction_summary(sst2, one_class)
    assert summary == {
        "split": "dev",
        "degenerate": True,
        "histogram": {"negative": 0, "positive": 3},
    }
    mixed = {"dev": {"idx": [0, 1], "label": [0, 1], "pred": [0, 1]}, "test": one_class["dev"]}
    assert prediction_summary(sst2, mixed)["degenerate"] is False  # the selection split counts
    all_o = {"dev": {"idx": [0, 1], "label": [[1, 2], [0]], "pred": [[0, 0], [0]]}}
    summary = prediction_summary(conll, all_o)
    assert summary["degenerate"] is True and summary["histogram"]["O"] == 3
    constant = {"dev": {"idx": [0, 1], "label": [1.0, 4.0], "pred": [2.5, 2.5]}}
    assert prediction_summary(stsb, constant) == {
        "split": "dev",
        "degenerate": True,
        "min": 2.5,
        "max": 2.5,
    }


# --- files: a SIGKILL never leaves a file that a later step reads as valid ------------------

KILL_BEFORE_PUBLISH = """
import os, signal, sys
sys.path.insert(0, {root!r})
import bench.atomic, bench.results.collect
def die(*args, **kwargs):  # the process dies with the new content written but not published
    os.kill(os.getpid(), signal.SIGKILL)
os.replace = die
{body}
"""


def _run_killed_at_rename(body: str, cwd: Path) -> None:
    """Run ``body`` in a fresh process whose ``os.replace`` kills it; check it was killed."""
    script = KILL_BEFORE_PUBLISH.format(root=str(ROOT), body=body)
    path = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == -9, proc.stderr[-2000:]  # killed, at the rename


WRITERS = {
    "result.json (atomic_write_json)": (
        "result.json",
        "bench.atomic.atomic_write_json({out!r}, {{'status': 'ok', 'new': True}})",
    ),
    "results table (collect)": (
        "results.csv",
        "from test_report import write_synthetic_sweep\n"
        "from pathlib import Path\n"
        "write_synthetic_sweep(Path({tmp!r}) / 'runs')\n"
        "bench.results.collect.collect([Path({tmp!r}) / 'runs'], Path({out!r}).parent)",
    ),
    "HTML report (build_report)": (
        "report.html",
        "from test_report import write_synthetic_sweep\n"
        "from pathlib import Path\n"
        "from bench.report import build_report\n"
        "write_synthetic_sweep(Path({tmp!r}) / 'runs')\n"
        "build_report(Path({tmp!r}) / 'runs', {out!r})",
    ),
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_writer_killed_before_publishing_leaves_the_old_file_intact(tmp_path, writer):
    name, body = WRITERS[writer]
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / name
    out.write_text("OLD COMPLETE CONTENT\n")
    _run_killed_at_rename(body.format(out=str(out), tmp=str(tmp_path)), tmp_path)
    assert out.read_text() == "OLD COMPLETE CONTENT\n"  # readers still see the old file
    leftovers = [p.name for p in out_dir.iterdir() if p.name not in (name, ".collect.lock")]
    assert all(n.startswith(".") and n.endswith(".tmp") for n in leftovers), leftovers


# --- security hygiene ------------------------------------------------------------------------


def _calls(name: str) -> list[tuple[str, ast.Call]]:
    found = []
    for path in sorted((ROOT / "bench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called == name:
                    found.append((f"{path.relative_to(ROOT)}:{node.lineno}", node))
    return found


def test_no_eval_and_every_torch_load_is_weights_only():
    builtin = [w for n in ("eval", "exec") for w, c in _calls(n) if isinstance(c.func, ast.Name)]
    assert builtin == []  # module.eval() (eval mode) is a method, not the builtin
    for where, call in _calls("load"):
        if isinstance(call.func, ast.Attribute) and getattr(call.func.value, "id", "") == "torch":
            flags = {k.arg: getattr(k.value, "value", None) for k in call.keywords}
            assert flags.get("weights_only") is True, where


def test_trust_remote_code_is_off_unless_an_encoder_config_sets_it(compose_cfg):
    for path in sorted((ROOT / "conf" / "encoder").glob("*.yaml")):
        cfg = compose_cfg(f"encoder={path.stem}", "seed=1")
        assert cfg.encoder.trust_remote_code is False, path.name
    from bench.model.encoders import _tokenizer_kwargs

    assert _tokenizer_kwargs({"name": "x"})["trust_remote_code"] is False


def test_two_sweeps_collecting_into_one_results_dir_leave_a_consistent_table(tmp_path):
    """Both collects succeed; the table's CSV, Parquet and history come from one of them.

    Each replaces the other's cells on purpose (``--replace``; without it the later of two
    sweeps with other runs directories is refused, ``test_collect_faults.py``): what is
    tested here is that the lock keeps every output of a results directory from one collect.
    """
    from test_report import write_synthetic_sweep

    from bench.results.collect import read_history, read_table

    write_synthetic_sweep(tmp_path / "a")
    write_synthetic_sweep(tmp_path / "b")
    for res in (tmp_path / "b").rglob("result.json"):  # sweep b: other numbers
        data = json.loads(res.read_text())
        for metrics in (data.get("best") or {}).get("metrics", {}).values():
            for key in metrics:
                metrics[key] = 0.123
        res.write_text(json.dumps(data))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out = tmp_path / "results"
    for _ in range(3):
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench.results.collect",
                    str(tmp_path / s),
                    "-o",
                    str(out),
                    "--replace",
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for s in ("a", "b")
        ]
        assert [p.wait(timeout=300) for p in procs] == [0, 0]
        csv_values = sorted(read_table(out / "results.csv")["value"].dropna().round(6).unique())
        parquet_values = sorted(
            read_table(out / "results.parquet")["value"].dropna().round(6).unique()
        )
        assert csv_values == parquet_values  # the two formats agree
        from_b = csv_values == [0.123]
        assert from_b or 0.123 not in csv_values  # one sweep's table, not a mix
        assert len(read_history(out)) > 0
        assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


def test_a_cache_writer_killed_before_publishing_leaves_no_entry_that_is_read(tmp_path):
    body = (
        "import torch\n"
        "from bench.cache.keys import FeatureKey\n"
        "from bench.cache.store import FeatureStore, FlatStates\n"
        "key = FeatureKey('enc', 'w', 't', 'sst2', 'train', 2, 0, 16, 'in', (4,), 'float32')\n"
        f"store = FeatureStore({str(tmp_path / 'cache')!r})\n"
        "store.save(key, FlatStates(torch.ones(3, 1, 4), torch.tensor([[0, 1], [1, 2]])))\n"
    )
    _run_killed_at_rename(body, tmp_path)
    import torch

    from bench.cache.keys import FeatureKey
    from bench.cache.store import FeatureStore, FlatStates

    key = FeatureKey("enc", "w", "t", "sst2", "train", 2, 0, 16, "in", (4,), "float32")
    store = FeatureStore(tmp_path / "cache")
    assert not store.path(key).exists() and store.load(key, 2) is None  # nothing served
    leftovers = [p.name for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert leftovers and all(n.startswith(".") and n.endswith(".tmp") for n in leftovers)
    built = FlatStates(torch.ones(3, 1, 4), torch.tensor([[0, 1], [1, 2]]))
    flat, layers = store.get_layers(key, [4], 2, lambda _: built)  # the next cell builds it
    assert layers == [4] and torch.equal(flat.states, built.states)
