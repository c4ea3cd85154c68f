"""One exception family for everything tracer reports to its user.

Library code raises these; only the CLI turns them into a one-line message on stderr and exit code 2.
"""

from __future__ import annotations

import os


class TracerError(Exception):
    """Base of every error tracer reports: a file (or other subject) and what is wrong with it."""

    def __init__(self, subject: str | os.PathLike[str], problem: str) -> None:
        self.subject = str(subject)
        self.problem = problem
        super().__init__(f"{self.subject}: {problem}" if self.subject else problem)


class TraceFormatError(TracerError):
    """The input exists but is not a trace tracer can read (or is damaged)."""


class InputNotFoundError(TracerError):
    """The input path does not exist or cannot be read."""


class ToolMissingError(TracerError):
    """An external tool (nsys, a GPU) that this operation needs is not available here."""


class UsageError(TracerError):
    """The command was asked for something inconsistent (a bad parameter, an existing output ...)."""
