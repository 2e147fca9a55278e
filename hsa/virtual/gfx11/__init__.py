"""The gfx11 (RDNA3, gfx1100) family of the virtual AMD system.

The decoder, opcode tables and listing live here; execution is the shared core in
`hsa.virtual.isa`. Importing this package registers the executor as family "gfx11" with
`hsa.virtual.executor.register_executor`. One shared executor instance keeps the decoded
programs cached across dispatches.
"""

from __future__ import annotations

from hsa.virtual.executor import register_executor
from hsa.virtual.gfx11 import decoder
from hsa.virtual.gfx11.semantics import compile_gfx11
from hsa.virtual.isa.executor import Executor, Family

GFX11 = Family("gfx11", decoder.decode_one, wave_sizes=(32, 64), compile=compile_gfx11)

_SHARED: Executor | None = None


def shared_executor() -> Executor:
    """The process-wide gfx11 executor (its program cache is shared by every dispatch)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = Executor(GFX11)
    return _SHARED


register_executor("gfx11", shared_executor, fresh=lambda: Executor(GFX11))

__all__ = ["GFX11", "shared_executor"]
