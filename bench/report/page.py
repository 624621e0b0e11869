"""Assemble the sections into one self-contained HTML page (no scripts, no fetches)."""

from __future__ import annotations

from collections.abc import Sequence

from bench.clock import utc_now
from bench.report.html import Section, esc

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;
  max-width:1180px;padding:0 16px 48px;color:#1a1a1a;line-height:1.45}
h1{font-size:1.6em;margin:0.8em 0 0.2em}h2{border-bottom:2px solid #0072B2;padding-bottom:4px;
  margin-top:2.2em}h3{margin-top:1.4em}h4{margin:1em 0 0.2em}
nav ul{columns:2;padding-left:0;list-style:none}
nav{background:#f4f7fa;padding:6px 14px;border-radius:6px}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:0.8em 0;font-size:0.86em;font-variant-numeric:tabular-nums}
td,th{padding:3px 8px;border-bottom:1px solid #e3e3e3;vertical-align:top}
th{border-bottom:2px solid #444;text-align:left;white-space:nowrap}.r{text-align:right}
caption{text-align:left;font-style:italic;padding:2px 0 6px;caption-side:top}
tr.failed td{background:#fdeee6}tr.rule td{border-top:1px solid #888}
table.headline td:nth-child(5){font-weight:600}
figure{margin:1em 0}figure img{max-width:100%;height:auto;display:block}
figcaption{font-size:0.85em;color:#444;margin-top:4px}
p.note{font-size:0.85em;color:#444}pre{white-space:pre-wrap;font-size:0.8em;background:#f6f6f6;
  padding:6px}
details{margin:0.6em 0}summary{cursor:pointer;font-weight:600}
ul li{margin:0.2em 0}
p.lead{font-size:1.08em;background:#eef5fb;border-left:4px solid #0072B2;padding:8px 12px}
p.budget{font-weight:600;margin-bottom:0.2em}
p.warning{background:#fdf3e6;border-left:4px solid #D55E00;padding:6px 12px}
@media (max-width:600px){nav ul{columns:1}body{padding:0 8px 32px}table{font-size:0.78em}}
"""


def render_page(title: str, subtitle: str, sections: Sequence[Section]) -> str:
    """The whole report as one HTML document."""
    nav = "".join(f'<li><a href="#{esc(s.id)}">{esc(s.title)}</a></li>' for s in sections)
    body = "\n".join(
        f'<section id="{esc(s.id)}">\n<h2>{esc(s.title)}</h2>\n{s.body}\n</section>'
        for s in sections
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head><body>\n"
        f"<header><h1>{esc(title)}</h1><p>{esc(subtitle)}</p>"
        f'<p class="note">Generated {esc(utc_now())} by python -m bench.report.</p></header>\n'
        f"<nav><ul>{nav}</ul></nav>\n{body}\n</body></html>\n"
    )
