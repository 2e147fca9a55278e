"""The gfx11 (RDNA3, gfx1100) ISA executor of the virtual AMD system.

Importing this package registers the executor as family "gfx11" with
`hsa.virtual.executor.register_executor`. One shared executor instance keeps the decoded
programs cached across dispatches.
"""

from __future__ import annotations

from hsa.virtual.executor import register_executor
from hsa.virtual.isa.executor import Gfx11Executor

_SHARED: Gfx11Executor | None = None


def shared_executor() -> Gfx11Executor:
    """The process-wide gfx11 executor (its program cache is shared by every dispatch)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = Gfx11Executor()
    return _SHARED


register_executor("gfx11", shared_executor)

__all__ = ["Gfx11Executor", "shared_executor"]
