"""The virtual AMD system: an in-process HSA provider (`VirtualProvider`) with memory,
signals, AQL queues and their packet processor, a code-object loader, a copy engine, and
pluggable ISA executors (`hsa.virtual.executor`; gfx11 in `hsa.virtual.gfx11`)."""

from __future__ import annotations

__all__ = ["VirtualProvider", "VirtualQueue"]


def __getattr__(name: str):
    # Imported lazily so that `hsa.virtual.executor` and `hsa.virtual.memory` (used by the
    # ISA executors) do not pull in the whole provider.
    if name == "VirtualProvider":
        from hsa.virtual.provider import VirtualProvider

        return VirtualProvider
    if name == "VirtualQueue":
        from hsa.virtual.queues import VirtualQueue

        return VirtualQueue
    raise AttributeError(f"module 'hsa.virtual' has no attribute {name!r}")
