"""Small HTML builders for the report; every piece of text passes through :func:`esc`."""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from bench.report.style import svg_data_uri


def esc(value: object) -> str:
    """HTML-escape any value's text (quotes included: safe in attributes too)."""
    return html.escape(str(value), quote=True)


@dataclass
class Section:
    """One report section: anchor id (fixed by the report), heading, escaped HTML body."""

    id: str
    title: str
    body: str


def figure(uri: str, alt: str, caption: str) -> str:
    """A ``<figure>`` with an embedded image (a ``data:`` URI) and its caption."""
    if not uri.startswith("data:image/"):
        raise ValueError("report figures must be embedded data: URIs")
    return (
        f'<figure><img src="{esc(uri)}" alt="{esc(alt)}">'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


def embed(fig: Figure | None, alt: str, caption: str) -> str:
    """A matplotlib figure as an embedded :func:`figure` (closed); empty for None."""
    return "" if fig is None else figure(svg_data_uri(fig), alt, caption)


def details(summary: str, body: str) -> str:
    """A collapsed ``<details>`` block (readable without JavaScript)."""
    return f"<details><summary>{esc(summary)}</summary>{body}</details>"


def frame_table(
    frame: pd.DataFrame,
    caption: str = "",
    formats: Mapping[str, str | Callable[[Any], str]] | None = None,
    table_id: str = "",
    classes: pd.DataFrame | None = None,
) -> str:
    """A frame as an escaped HTML table (Styler): ``formats`` per column, ``classes`` per cell."""
    styler = frame.style.format(dict(formats or {}), na_rep="–", escape="html")
    styler = styler.format_index(escape="html", axis=1).hide(axis="index")
    if caption:
        styler = styler.set_caption(esc(caption))
    if classes is not None:
        styler = styler.set_td_classes(pd.DataFrame(classes.to_numpy(), frame.index, frame.columns))
    uuid = table_id or "t"  # Styler's id on the table (with classes) gives way to ours
    ident = f' id="{esc(table_id)}"' if table_id else ""
    body = styler.set_uuid(uuid).to_html(exclude_styles=classes is None)
    body = body.replace('<style type="text/css">\n</style>\n', "")
    body = body.replace(f'<table id="T_{uuid}"', "<table", 1).replace("<table", f"<table{ident}", 1)
    return f'<div class="scroll">{body}</div>'
