"""Small HTML builders for the report; every piece of text passes through :func:`esc`."""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd


def esc(value: object) -> str:
    """HTML-escape any value's text (quotes included: safe in attributes too)."""
    return html.escape(str(value), quote=True)


@dataclass
class Section:
    """One report section.

    Attributes:
        id: Anchor id (fixed by the report, never from data).
        title: Heading text.
        body: HTML fragment (already escaped).
    """

    id: str
    title: str
    body: str


def paragraph(text: str, css: str = "") -> str:
    """A ``<p>`` of escaped text."""
    cls = f' class="{esc(css)}"' if css else ""
    return f"<p{cls}>{esc(text)}</p>"


def figure(uri: str, alt: str, caption: str) -> str:
    """A ``<figure>`` with an embedded image (a ``data:`` URI) and its caption."""
    if not uri.startswith("data:image/"):
        raise ValueError("report figures must be embedded data: URIs")
    return (
        f'<figure><img src="{esc(uri)}" alt="{esc(alt)}">'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


def details(summary: str, body: str) -> str:
    """A collapsed ``<details>`` block (readable without JavaScript)."""
    return f"<details><summary>{esc(summary)}</summary>{body}</details>"


def frame_table(
    frame: pd.DataFrame,
    caption: str = "",
    formats: Mapping[str, str | Callable[[Any], str]] | None = None,
    table_id: str = "",
    css: str = "",
    classes: pd.DataFrame | None = None,
) -> str:
    """A data frame as an HTML table, rendered by pandas' ``Styler`` (cells escaped).

    Args:
        frame: The rows to show; its columns are the header, its index is not shown.
        caption: One short sentence above the table.
        formats: Per column, a format string (``"{:.1f}"``) or a function of the value.
        table_id: The table's ``id`` (fixed by the report, never from data), or none.
        css: CSS class of the table.
        classes: CSS classes per cell (the frame's shape), for the page's style sheet.

    Returns:
        The fragment, wrapped so that it scrolls on a narrow screen.
    """
    styler = frame.style.format(dict(formats or {}), na_rep="–", escape="html")
    styler = styler.format_index(escape="html", axis=1).hide(axis="index")
    if caption:
        styler = styler.set_caption(esc(caption))
    if classes is not None:
        styler = styler.set_td_classes(
            classes.set_axis(frame.index).set_axis(frame.columns, axis=1)
        )
    styler = styler.set_uuid(table_id or "t")
    ident = f' id="{esc(table_id)}"' if table_id else ""
    cls = f' class="{esc(css)}"' if css else ""
    body = styler.to_html(exclude_styles=classes is None)
    body = body.replace('<style type="text/css">\n</style>\n', "")
    body = body.replace("<table", f"<table{ident}{cls}", 1)
    if classes is not None:  # Styler's own id on the table: the report's id is the one above
        body = body.replace(
            f'<table{ident}{cls} id="T_{table_id or "t"}"', f"<table{ident}{cls}", 1
        )
    return f'<div class="scroll">{body}</div>'
