"""Shared fixtures: the real H200 traces in tests/data and a way to run the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture
def data_dir() -> Path:
    return DATA


def run_cli(*args: str, module: bool = False, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run tracer as a user would: the console script, or ``python -m tracer``."""
    exe = [sys.executable, "-m", "tracer"] if module else [str(Path(sys.executable).with_name("tracer"))]
    return subprocess.run([*exe, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)
