"""tracer: how PyTorch work runs in parallel across GPUs, CUDA streams and the CPU.

``tracer.profile()`` and ``tracer.handler()`` (tracer/api.py) record from inside a program; they are imported
on first use, so ``import tracer`` stays light (no torch, no pandas).
"""

from __future__ import annotations

from typing import Any

__all__ = ["handler", "profile"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tracer import api

        return getattr(api, name)
    raise AttributeError(f"module 'tracer' has no attribute {name!r}")
