"""The last section, provenance: command, configs, code, libraries, hardware, cost."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import bench.report.figures as figures
from bench.axes.optional import leaf_dir
from bench.report.context import ReportContext
from bench.report.html import Section, details, figure, paragraph, pre, table
from bench.report.style import svg_data_uri
from bench.results import stats

STATUSES = ("ok", "failed", "diverged")


def flatten(config: Any, prefix: str = "") -> dict[str, str]:
    """Dotted keys → JSON-encoded leaf values (``{"a": {"b": 1}}`` → ``{"a.b": "1"}``)."""
    if isinstance(config, dict) and config:
        out: dict[str, str] = {}
        for key, value in config.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): json.dumps(config, default=str)}


def config_split(cells: list[dict[str, Any]]) -> tuple[dict[str, str], list[str]]:
    """Keys whose value is the same in every cell (with it), and the keys that vary."""
    flat = [flatten(c.get("config") or {}) for c in cells]
    keys = sorted(set().union(*flat)) if flat else []
    common, varying = {}, []
    for key in keys:
        values = {f.get(key, "(absent)") for f in flat}
        if len(values) == 1:
            common[key] = values.pop()
        else:
            varying.append(key)
    return common, varying


def _cell_path(cell: dict[str, Any]) -> str:
    """The cell's path below the sweep, optional axes as its run directory has them."""
    c = cell.get("cell") or {}
    config = cell.get("config")
    axes = config.get("axes") if isinstance(config, dict) else None
    leaf = leaf_dir(c.get("seed"), c.get("order_seed"), c.get("train_size"), axes)
    return "/".join(str(c.get(k)) for k in ("task", "encoder", "head_label", "freeze_label")) + (
        f"/{leaf}"
    )


def status_counts(ctx: ReportContext) -> dict[str, int]:
    """Cells by status, plus those the newest launch skipped and result file problems."""
    per_cell = ctx.inputs.table.drop_duplicates(subset=[*stats.RUN_KEYS, "layers"])
    counts = Counter(per_cell["status"].fillna("unknown"))
    out = {s: int(counts.pop(s, 0)) for s in STATUSES}
    out.update({s: int(n) for s, n in counts.items()})
    out["skipped (last launch)"] = int(ctx.inputs.launch.get("skipped") or 0)
    out["result file problems (listed below)"] = len(ctx.inputs.problems)
    return out


def _distinct(cells: list[dict[str, Any]], key: str) -> list[tuple[str, int]]:
    counter = Counter(json.dumps(c.get(key), sort_keys=True, default=str) for c in cells)
    return counter.most_common()


def provenance_section(ctx: ReportContext) -> Section:
    """Build the provenance section (the last one)."""
    inputs, cells = ctx.inputs, ctx.inputs.cells
    per_run = inputs.table.drop_duplicates(subset=[*stats.RUN_KEYS, "layers"])
    train_s = float(per_run["train_time_s"].sum(skipna=True))
    wall_s = sum(float(c.get("wall_time_s") or 0.0) for c in cells)
    launch = inputs.launch
    parts = [
        table(
            ["", ""],
            [
                ["Source", inputs.source],
                [
                    "Command (newest launch)",
                    launch.get("command") or "not recorded (no launch log)",
                ],
                ["Launched at", launch.get("time") or "–"],
                ["Launches recorded", launch.get("launches", 0)],
                ["Cells", len(per_run)],
                ["Training time, all cells", f"{train_s / 60:.1f} min ({train_s / 3600:.2f} h)"],
                ["Wall time, all cells", f"{wall_s / 60:.1f} min" if cells else "not recorded"],
            ],
            caption="Where these numbers come from.",
        ),
        table(
            ["Status", "Cells"],
            list(status_counts(ctx).items()),
            caption="Cells by status: ok / failed (an exception, recorded with its reason) / "
            "diverged (NaN or inf loss); skipped = already done when the newest launch ran.",
            numeric=[1],
        ),
    ]
    if inputs.problems:
        parts.append(pre("\n".join(inputs.problems)))
    if cells:
        code = [
            [
                json.loads(v).get("commit", "?") if v != "null" else "?",
                str(json.loads(v).get("dirty")) if v != "null" else "?",
                n,
            ]
            for v, n in _distinct(cells, "git")
        ]
        parts.append(
            table(["Git commit", "Dirty", "Cells"], code, caption="Code version.", numeric=[2])
        )
        versions: Counter[tuple[str, str]] = Counter()
        for c in cells:
            for lib, version in (c.get("versions") or {}).items():
                versions[(lib, str(version))] += 1
        parts.append(
            table(
                ["Library", "Version", "Cells"],
                [[lib, v, n] for (lib, v), n in sorted(versions.items())],
                caption="Library versions (a library listed twice changed during the sweep).",
                numeric=[2],
            )
        )
        hardware = [
            [", ".join(f"{k}={v}" for k, v in json.loads(h).items()) if h != "null" else "?", n]
            for h, n in _distinct(cells, "hardware")
        ]
        parts.append(table(["Hardware", "Cells"], hardware, caption="Machines.", numeric=[1]))
        common, varying = config_split(cells)
        parts.append(
            details(
                f"Configuration shared by all {len(cells)} cells ({len(common)} keys)",
                table(
                    ["Key", "Value"],
                    sorted(common.items()),
                    caption="Resolved config, common part.",
                ),
            )
        )
        flat = {_cell_path(c): flatten(c.get("config") or {}) for c in cells}
        rows = [
            [
                path,
                c.get("status"),
                str(c.get("config_hash") or "–")[:12],  # older results have none
                *[flat[path].get(k, "") for k in varying],
            ]
            for path, c in sorted(zip(flat, cells, strict=True))
        ]
        parts.append(
            details(
                f"Per-cell configuration: the {len(varying)} keys that vary",
                table(
                    ["Cell", "Status", "Config hash", *varying],
                    rows,
                    caption="Varying config keys per cell.",
                ),
            )
        )
    else:
        parts.append(
            paragraph(
                "No per-cell provenance (cells.json) in this source: re-collect "
                "the run directories with python -m bench.results.collect.",
                "note",
            )
        )
    fig = figures.compute_bars(per_run[[*stats.RUN_KEYS, "train_time_s"]], ctx.palette)
    if fig is not None:
        parts.append(
            figure(
                svg_data_uri(fig),
                "Stacked bars of training time per task and freezing strategy",
                "Training minutes summed over seeds, stacked by head.",
            )
        )
    failed = per_run[per_run["status"].isin(["failed", "diverged"])]
    if not failed.empty:
        parts.append(
            table(
                ["Cell", "Status", "Reason"],
                [
                    ["/".join(str(r[k]) for k in stats.RUN_KEYS), r["status"], r["reason"]]
                    for _, r in failed.iterrows()
                ],
                caption="Cells that did not finish, with the recorded reason.",
            )
        )
    return Section("provenance", "7. Provenance", "\n".join(parts))
