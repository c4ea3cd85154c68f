"""``python -m tracer`` and ``python -m tracer.record``: the two module entry points start and say who they are."""

from __future__ import annotations

import subprocess
import sys


def test_python_m_tracer_is_the_command() -> None:
    proc = subprocess.run([sys.executable, "-m", "tracer", "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("tracer "), proc.stderr


def test_python_m_tracer_record_is_record_without_the_cli() -> None:
    proc = subprocess.run([sys.executable, "-m", "tracer.record", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: python -m tracer.record ") and "--backend" in proc.stdout
    assert "typer" not in proc.stderr
