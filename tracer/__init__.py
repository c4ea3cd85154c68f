"""tracer: how PyTorch work runs in parallel across GPUs, CUDA streams and the CPU.

``tracer.profile()`` and ``tracer.handler()`` (tracer/record/api.py) record from inside a program; they are imported
on first use, so ``import tracer`` stays light (no torch, no pandas).
"""

from __future__ import annotations

from typing import Any

__all__ = ["handler", "profile"]

#: The one version source: pyproject.toml reads it (setuptools `dynamic`), and so do `tracer --version`, every
#: export's provenance and meta.json. Read from here, not from the installed metadata, it is right in a source
#: tree on PYTHONPATH too (the GPU machine runs tracer that way), where no metadata exists.
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tracer.record import api  # (on first use: `import tracer` stays light, the contract's one ignored import)

        return getattr(api, name)
    raise AttributeError(f"module 'tracer' has no attribute {name!r}")
