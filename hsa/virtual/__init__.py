"""The virtual AMD system: an in-process HSA provider (`VirtualProvider`) with memory,
signals, AQL queues and their packet processor, a code-object loader, a copy engine, and
pluggable ISA executors (`hsa.virtual.executor`; gfx11 in `hsa.virtual.gfx11`)."""

from __future__ import annotations

from hsa.virtual.provider import VirtualProvider
from hsa.virtual.queues import VirtualQueue

__all__ = ["VirtualProvider", "VirtualQueue"]
