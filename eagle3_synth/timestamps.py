"""The one timestamp format of run files, run info and journal session names: UTC, ISO 8601."""

from __future__ import annotations

import time


def utc_timestamp(*, compact: bool = False) -> str:
    """Now in UTC: `2026-12-01T08:38:04Z`, or `20261201T083804Z` for file names."""
    return time.strftime("%Y%m%dT%H%M%SZ" if compact else "%Y-%m-%dT%H:%M:%SZ", time.gmtime())
