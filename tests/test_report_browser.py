"""The report opened in a real headless Chromium: no console errors, a non-blank page.

Needs Debian's ``chromium`` (``nox -s tests`` installs it); Playwright drives that
browser, nothing is downloaded. Deselect with ``-m 'not browser'`` on a machine without it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from test_report import EVIL, write_synthetic_sweep

from bench.report import build_report

pytestmark = pytest.mark.browser
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# As the machine's own probe starts it: root needs --no-sandbox; the network is closed.
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    write_synthetic_sweep(root / "runs")
    return build_report(root / "runs", root / "report.html")


def _blank(path: Path) -> bool:
    pixels = np.asarray(Image.open(path).convert("L"), dtype=float)
    return pixels.std() < 1.0  # one flat colour


@pytest.mark.parametrize("width", [1280, 400])
def test_report_renders_without_console_errors_and_is_not_blank(page_file, tmp_path, width):
    assert CHROMIUM, "chromium is not installed (apt-get install chromium; nox -s tests does it)"
    from playwright.sync_api import sync_playwright

    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": width, "height": 900})
        page.on(
            "console",
            lambda m: (
                problems.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None
            ),
        )
        page.on("pageerror", lambda err: problems.append(f"pageerror: {err}"))
        page.on("requestfailed", lambda req: problems.append(f"request failed: {req.url}"))
        requests: list[str] = []
        page.on("request", lambda req: requests.append(req.url))
        page.goto(page_file.as_uri(), wait_until="load")
        shot = tmp_path / f"report_{width}.png"
        page.screenshot(path=str(shot), full_page=True)
        images = page.eval_on_selector_all(
            "img", "els => els.map(e => [e.complete, e.naturalWidth])"
        )
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        scripts = page.eval_on_selector_all("script", "els => els.length")
        body_text = page.inner_text("body")
        browser.close()
    assert problems == []
    assert [u for u in requests if not u.startswith(("file:", "data:"))] == []  # no fetches
    assert images and all(done and w > 0 for done, w in images)  # every figure decoded
    assert overflow <= 0, f"the page scrolls sideways by {overflow}px at {width}px"
    assert scripts == 0 and EVIL in body_text  # the label is text, not a script
    assert not _blank(shot)
    size = Image.open(shot).size
    assert size[0] == width and size[1] > 2000  # the whole report, not just a header
