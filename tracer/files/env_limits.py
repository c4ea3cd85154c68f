"""A limit the user sets in the environment (``TRACER_MAX_INFLATED_MB``, ``TRACER_SQLITE_MAX_SECONDS`` ...): a
number of 0 or more, 0 meaning no limit; anything else (unset, not a number, negative) leaves the default."""

from __future__ import annotations

import os


def env_limit(name: str) -> float | None:
    """The number ``name`` holds, 0 or more (0: no limit); None where it holds none, and the default applies."""
    raw = os.environ.get(name)
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if value >= 0 else None
