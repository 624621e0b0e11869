"""Where each head of a comparison trained, and the settings whose heads did not share a device.

Heads are compared within a setting (task, encoder, freezing strategy, training size), seed
by seed. A cell trained again on another device need not give the same score (the
self-check of ``fair_heads_gpu`` re-trained GPU cells on a CPU: ``selfcheck.json``), so a
setting whose heads trained on different devices compares devices as well as heads. This
module reads each cell's recorded ``hardware`` (``cells.json``) and names such settings,
with which heads and seeds ran where; a setting whose cells all share one device is not
named. The budget box (:func:`bench.report.budget.budget_lines`) and the README's Findings
(:mod:`bench.report.findings`) say it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from bench.report.style import task_title
from bench.results.curves import size_key, size_text, whole_number
from bench.results.reproduction import seed_text
from bench.results.selfcheck_record import device_name

#: A setting: task, encoder, freezing label, training size (``stats.WHOLE_SPLIT``: whole split).
Setting = tuple[str, str, str, int]
#: What ``device_name`` says of a cell that did not record its hardware.
NOT_RECORDED = "not recorded"
#: Libraries that compute the numbers: where a mixed setting's cells ran different versions
#: of one, its device line names them too (another device usually brings other versions).
NUMERIC_LIBRARIES = ("torch", "transformers")


@dataclass(frozen=True)
class MixedSetting:
    """A setting whose cells trained on more than one device.

    Attributes:
        setting: ``(task, encoder, freeze_label, train_size)``.
        heads: Per head, per device, the seeds it trained there (sorted).
        name: The setting in words (``MRPC frozen``; with the encoder when the experiment
            has several, with the training size when the setting ran at several).
    """

    setting: Setting
    heads: dict[str, dict[str, list[int]]]
    name: str


def _setting(record: dict[str, Any]) -> Setting:
    """A ``cells.json`` record's setting: the cell's size, else its config's."""
    cell = record.get("cell") or {}
    data = (record.get("config") or {}).get("data") or {}
    return (
        str(cell.get("task")),
        str(cell.get("encoder")),
        str(cell.get("freeze_label")),
        whole_number(cell.get("train_size", data.get("train_size"))),
    )


def devices_by_setting(
    cells: Iterable[dict[str, Any]],
) -> dict[Setting, dict[str, dict[str, list[int]]]]:
    """Per setting, per head, per device: the seeds of its cells that trained there.

    Only cells that finished (``status`` ``ok``, or no status) count: the others are in no
    comparison.

    Args:
        cells: ``cells.json`` records (``cell`` and ``hardware``).

    Returns:
        ``{setting: {head_label: {device: sorted seeds}}}``; a device is
        :func:`bench.results.selfcheck_record.device_name` (``not recorded`` for older cells).
    """
    found: dict[Setting, dict[str, dict[str, set[int]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(set))
    )
    for record in cells:
        if not isinstance(record, dict) or record.get("status", "ok") != "ok":
            continue
        cell = record.get("cell") or {}
        seed = cell.get("seed")
        device = device_name(record.get("hardware"))
        seeds = found[_setting(record)][str(cell.get("head_label"))][device]
        if seed is not None:
            seeds.add(int(seed))
    return {
        setting: {head: {d: sorted(s) for d, s in by.items()} for head, by in heads.items()}
        for setting, heads in found.items()
    }


def versions_by_setting(cells: Iterable[dict[str, Any]]) -> dict[Setting, dict[str, set[str]]]:
    """Per setting, per library of :data:`NUMERIC_LIBRARIES`: the versions its cells ran.

    Only finished cells count, as in :func:`devices_by_setting`; a cell without a version
    record adds nothing.

    Args:
        cells: ``cells.json`` records (``cell`` and ``versions``).

    Returns:
        ``{setting: {library: versions}}``.
    """
    found: dict[Setting, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for record in cells:
        if not isinstance(record, dict) or record.get("status", "ok") != "ok":
            continue
        versions = record.get("versions") or {}
        for library in NUMERIC_LIBRARIES:
            if versions.get(library):
                found[_setting(record)][library].add(str(versions[library]))
    return {setting: dict(by) for setting, by in found.items()}


def versions_text(versions: dict[str, set[str]]) -> str:
    """The libraries whose versions differ, e.g. ``torch 2.11.0 and 2.13.0+cpu``; "" if none."""
    parts = [
        f"{library} {' and '.join(sorted(versions[library]))}"
        for library in NUMERIC_LIBRARIES
        if len(versions.get(library, ())) > 1
    ]
    return ", ".join(parts)


def mixed_settings(cells: Iterable[dict[str, Any]]) -> list[MixedSetting]:
    """The settings whose cells did not all train on one device, in task order.

    Args:
        cells: ``cells.json`` records.

    Returns:
        One :class:`MixedSetting` per such setting; empty when every setting's cells share
        a device (or none recorded one).
    """
    found = devices_by_setting(cells)
    encoders = {encoder for _, encoder, _, _ in found}
    sizes: dict[tuple[str, str, str], set[int]] = defaultdict(set)
    for task, encoder, freeze, size in found:
        sizes[(task, encoder, freeze)].add(size)
    out = []
    for setting in sorted(found, key=lambda s: (s[0], s[1], s[2], size_key(s[3]))):
        heads = found[setting]
        if len({device for by in heads.values() for device in by}) < 2:
            continue
        task, encoder, freeze, size = setting
        name = task_title(task) + (f" ({encoder})" if len(encoders) > 1 else "") + f" {freeze}"
        if len(sizes[(task, encoder, freeze)]) > 1:  # one size of a learning curve
            name += f", {size_text(size)}"
        out.append(MixedSetting(setting=setting, heads=heads, name=name))
    return out


def _on(device: str) -> str:
    """``on NVIDIA H200``; ``with no device recorded`` for cells that predate the record."""
    return "with no device recorded" if device == NOT_RECORDED else f"on {device}"


def _names(heads: list[str], code: bool) -> str:
    """Head labels joined, in backticks for Markdown."""
    return ", ".join(f"`{h}`" if code else h for h in heads)


def describe_devices(heads: dict[str, dict[str, list[int]]], code: bool = False) -> str:
    """Which heads and seeds of one setting trained where, compactly.

    The device most heads trained on entirely is said last, as ``the other heads on ...``;
    a head split across devices names its seeds on each.

    Args:
        heads: Per head, per device, its seeds (:func:`devices_by_setting`'s value).
        code: Put head labels in backticks (Markdown).

    Returns:
        E.g. ``last4_concat on CPU (AVX512), the other heads on NVIDIA H200`` or
        ``last4_concat seeds 1-5 on NVIDIA H200 and 6-10 on CPU (AVX512), the other heads
        on NVIDIA H200``.
    """
    whole: dict[str, list[str]] = defaultdict(list)  # device -> heads entirely on it
    split: dict[tuple[tuple[str, tuple[int, ...]], ...], list[str]] = defaultdict(list)
    for head in sorted(heads):
        by = heads[head]
        if len(by) == 1:
            whole[next(iter(by))].append(head)
        else:
            profile = tuple(sorted(((d, tuple(s)) for d, s in by.items()), key=lambda p: p[1]))
            split[profile].append(head)
    cells = Counter({d: sum(len(heads[h][d]) for h in hs) for d, hs in whole.items()})
    base = (
        max(whole, key=lambda d: (len(whole[d]), cells[d], d != NOT_RECORDED, d))
        if whole and (len(whole) > 1 or split)
        else None
    )
    parts = [f"{_names(hs, code)} {_on(d)}" for d, hs in sorted(whole.items()) if d != base]
    for profile, hs in split.items():
        seeds = " and ".join(
            f"{'seeds ' if i == 0 else ''}{seed_text(list(s))} {_on(d)}"
            for i, (d, s) in enumerate(profile)
        )
        if not whole and len(split) == 1:
            parts.append(f"every head: {seeds}")
        else:
            parts.append(f"{_names(hs, code)} {seeds}")
    if base is not None:
        others = whole[base]
        if len(others) == 1:
            parts.append(f"{_names(others, code)} {_on(base)}")
        else:
            parts.append(f"the other heads {_on(base)}")
    return ", ".join(parts)


def device_lines(cells: Iterable[dict[str, Any]], code: bool = False) -> list[str]:
    """One line per setting whose heads did not all train on one device (empty: all did).

    Args:
        cells: ``cells.json`` records.
        code: Put head labels in backticks (Markdown).

    Returns:
        Lines such as ``MRPC frozen: last4_concat on CPU (AVX512), the other heads on
        NVIDIA H200 (torch 2.11.0 and 2.13.0+cpu among its cells)``: the libraries of
        :data:`NUMERIC_LIBRARIES` whose versions differ within the setting are named too.
    """
    cells = list(cells)
    versions = versions_by_setting(cells)
    lines = []
    for m in mixed_settings(cells):
        line = f"{m.name}: {describe_devices(m.heads, code)}"
        differ = versions_text(versions.get(m.setting, {}))
        lines.append(line + (f" ({differ} among its cells)" if differ else ""))
    return lines


def device_caveat(cells: Iterable[dict[str, Any]], code: bool = False) -> str | None:
    """One sentence naming every setting whose heads trained on different devices.

    Args:
        cells: ``cells.json`` records.
        code: Put head labels in backticks (Markdown).

    Returns:
        The sentence (ending with a full stop), or None when every setting's cells share a
        device.
    """
    lines = device_lines(cells, code)
    if not lines:
        return None
    n = len(lines)
    which = "this setting" if n == 1 else f"these {n} settings"
    return (
        f"Not the same device for every head: in {which} the heads compared trained on "
        "different devices (with different library versions where named), and a cell "
        "trained again on another device need not give the same score, so a win there may "
        "be the device's: " + "; ".join(lines) + "."
    )
