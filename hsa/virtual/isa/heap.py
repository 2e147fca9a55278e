"""Keep freed heap memory in the process while the executor runs.

A wide instruction makes numpy temporaries of megabytes (a wave64 saxpy over 2^20 lanes
makes 8 MB ones). glibc serves those from the heap but gives the top of it back to the
kernel once more than its trim threshold is free, so the next temporary page-faults its
memory in again: ~10,000 faults and a third of a saxpy's CPU time. Raising the mmap and
trim thresholds keeps that memory mapped (the process keeps its peak heap instead). Done
once, when the first executor is made; a no-op without glibc, or with
AMDGPU_VIRTUAL_KEEP_HEAP=0 in the environment.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

MMAP_THRESHOLD = 64 << 20  # larger blocks (whole batch state) still get their own mapping
TRIM_THRESHOLD = 512 << 20  # free heap kept before it is returned
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc <malloc.h>
_done = False


def keep_freed_memory() -> bool:
    """Set glibc's thresholds once; True if they are set (now or before)."""
    global _done
    if _done:
        return True
    if os.environ.get("AMDGPU_VIRTUAL_KEEP_HEAP", "1") == "0":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    _done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _done
