"""Timestamps in one format for every file headbench writes."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def utc_now(timestamp: float | None = None) -> str:
    """An ISO 8601 UTC time (now, or of a POSIX timestamp), sortable as text.

    Args:
        timestamp: Seconds since the epoch; None = now.
    """
    moment = datetime.fromtimestamp(time.time() if timestamp is None else timestamp, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
