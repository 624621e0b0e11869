"""The report opened in a real headless Chromium: no console errors, a non-blank page, the
answer table on the first screen, figure text inside its figure, one p-value per comparison.

Needs Debian's ``chromium`` (``nox -s tests`` installs it); Playwright drives that
browser, nothing is downloaded. Deselect with ``-m 'not browser'`` on a machine without it.
"""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import numpy as np
import pytest
from bs4 import BeautifulSoup
from PIL import Image
from test_report import EVIL, write_synthetic_sweep

from bench.report import build_report

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "reports" / "fair_heads.html"

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


def _browser(p):
    return p.chromium.launch(executable_path=CHROMIUM, args=ARGS)


@pytest.mark.parametrize("source", ["synthetic", "committed"])
def test_the_answer_table_is_on_the_first_screen(page_file, source):
    assert CHROMIUM, "chromium is not installed (apt-get install chromium; nox -s tests does it)"
    from playwright.sync_api import sync_playwright

    path = page_file if source == "synthetic" else COMMITTED
    with sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(path.as_uri(), wait_until="load")
        box = page.locator("table#answer").bounding_box()
        plot = page.locator("#answer-section figure img").bounding_box()
        browser.close()
    assert box is not None and 0 <= box["y"] < 900, box
    assert plot is not None and plot["y"] < 900, plot  # the plot of every head beside it


def _svgs(path: Path) -> list[str]:
    prefix = "data:image/svg+xml;base64,"
    soup = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
    return [
        base64.b64decode(img["src"][len(prefix) :]).decode()
        for img in soup.find_all("img")
        if img["src"].startswith(prefix)
    ]


@pytest.mark.parametrize("source", ["synthetic", "committed"])
def test_no_figure_text_overflows_its_figure(page_file, tmp_path, source):
    assert CHROMIUM, "chromium is not installed (apt-get install chromium; nox -s tests does it)"
    from playwright.sync_api import sync_playwright

    svgs = _svgs(page_file if source == "synthetic" else COMMITTED)
    assert svgs
    outside = []
    with sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page()
        for i, svg in enumerate(svgs):
            file = tmp_path / f"figure{i}.svg"
            file.write_text(svg, encoding="utf-8")
            page.goto(file.as_uri(), wait_until="load")
            outside += page.evaluate(
                """() => {
                  const root = document.documentElement.getBoundingClientRect();
                  return [...document.querySelectorAll('text, g[id^="text_"]')]
                    .map(t => [t.textContent.trim(), t.getBoundingClientRect()])
                    .filter(([_, b]) => b.width > 0 && (b.left < root.left - 1 ||
                      b.top < root.top - 1 || b.right > root.right + 1 ||
                      b.bottom > root.bottom + 1))
                    .map(([text, b]) => text || `box at ${b.left},${b.top}`);
                }"""
            )
        browser.close()
    assert outside == []


@pytest.mark.parametrize("source", ["synthetic", "committed"])
def test_one_p_value_per_comparison_on_the_page(page_file, source):
    soup = BeautifulSoup(
        (page_file if source == "synthetic" else COMMITTED).read_text(encoding="utf-8"),
        "html.parser",
    )
    seen: dict[tuple, set[str]] = {}
    for table in soup.find_all("table"):
        header = [th.get_text() for th in table.find("thead").find_all("th")]
        if "Holm p" not in header:
            continue
        for tr in table.find("tbody").find_all("tr"):
            row = dict(zip(header, [td.get_text() for td in tr.find_all("td")], strict=True))
            key = (row["Setting"], *sorted((row["A"], row["B"])))
            seen.setdefault(key, set()).add(row["Holm p"])
    assert seen and all(len(ps) == 1 for ps in seen.values())
