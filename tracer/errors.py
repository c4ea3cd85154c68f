"""One exception family for everything tracer reports to its user.

Library code raises these; only the CLI turns them into a one-line message on stderr and an exit code: 2 for
bad input or usage, 1 (:class:`OutputError`) when the input was fine but the output could not be written.
"""

from __future__ import annotations

import os


class TracerError(Exception):
    """Base of every error tracer reports: a file (or other subject) and what is wrong with it."""

    #: what the CLI exits with
    exit_code = 2

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


class OutputError(TracerError):
    """The output could not be written (a full disk, a quota, an I/O error): nothing half-written was left.

    Exit 1, not 2: the input and the command were fine, and the same command may succeed where there is room.
    """

    exit_code = 1
