"""Headless Chromium as tracer drives it: the browser tests, `bench/dashboard.py` and its README screenshot.

One list of flags, because they matter: without the background-networking ones, Chromium keeps trying to reach
Google's hosts, which a machine with no network refuses many times a second.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Debian's chromium (`apt-get install chromium`), or whatever $TRACER_CHROMIUM names
CHROMIUM = Path(os.environ.get("TRACER_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
