"""``python -m tracer`` — the same as the ``tracer`` command."""

from tracer.cli import run

run()
