"""amdgpu:emulated: the ROCm at hand (Debian 12's libhsakmt and libhsa-runtime64 5.2.3, or
inside scripts/rocm6.sh sid's ROCr 6.4.3, unmodified) over an emulated AMD kernel driver
whose GPU is the virtual AMD system.

The kernel boundary is emulated, not a library: `shim/kfd_shim.c` (preloaded with
LD_PRELOAD, see scripts/emulated.sh) answers /dev/kfd, the render nodes and the driver's
sysfs files, and forwards the ioctls to a device server process (`server.py`) that plays
the driver and the GPU. `EmulatedProvider` is a plain `RocrProvider` in a process that has
the shim: it names the node (AMDGPU_EMULATED_NODE) before ROCr's hsa_init opens /dev/kfd.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from ground.errors import HsaUnavailable
from ground.status import HSA_STATUS_ERROR_NOT_INITIALIZED
from hsa.provider import SignalCondition
from hsa.rocr.library import LibraryVersion, library_path, library_version, load_library
from hsa.rocr.provider import RocrProvider
from hsa.virtual import executor as executor_registry

from . import build, protocol

DEFAULT_ISA = "gfx90a"
TARGETS = ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201")  # what a node may hold
# of those, the oldest ROCr seen taking each one's agents (its ISA table): Debian 12's 5.2.3,
# trixie's 6.1.2, sid's 6.4.3 (scripts/rocm6.sh)
MIN_ROCR = {"gfx90a": (5, 2), "gfx942": (6, 1), "gfx1100": (6, 1), "gfx950": (6, 4),
            "gfx1201": (6, 4)}
SUPPORTED_ISAS = TARGETS
NEXT_STEP = "run it under scripts/emulated.sh (make test does), which preloads the emulated kernel"
_live_lock = threading.Lock()
_live = 0  # EmulatedProviders not shut down: while any is, this process's ROCr is emulated
_live_spec = ""  # the node those providers' ROCr was started with
_live_gpus = 0


def _unavailable(why: str) -> HsaUnavailable:
    return HsaUnavailable(HSA_STATUS_ERROR_NOT_INITIALIZED, why, "hsa_init")


def shim_loaded() -> bool:
    """Whether this process runs with the emulated kernel's shim (LD_PRELOAD)."""
    try:
        return bool(ctypes.CDLL(None).amdgpu_kfd_shim_version())
    except (AttributeError, OSError):
        return False


SPIN_US = 200  # how long the shim's signal wait looks (yielding) before it sleeps


def _shim_wait() -> Any:
    """The shim's amdgpu_kfd_shim_signal_wait, or None (an older shim)."""
    global _wait_fn
    if _wait_fn is False:
        try:
            fn: Any = ctypes.CDLL(None).amdgpu_kfd_shim_signal_wait
        except (AttributeError, OSError):
            fn = None
        else:
            fn.argtypes = [ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int64, ctypes.c_uint64,
                           ctypes.c_uint32, ctypes.POINTER(ctypes.c_int64)]
            fn.restype = ctypes.c_int
        _wait_fn = fn
    return _wait_fn


_wait_fn: Any = False


def runs_kernels() -> bool:
    """Whether the emulated GPU can run machine code: hsa/virtual has a gfx9 executor."""
    return executor_registry.has_executor("gfx9")


def node_spec(gpus: Sequence[str]) -> str:
    """("gfx942", "gfx942", "gfx1201") -> "2xgfx942,gfx1201" (runs of one target counted)."""
    parts: list[str] = []
    i = 0
    while i < len(gpus):
        j = i
        while j < len(gpus) and gpus[j] == gpus[i]:
            j += 1
        parts.append(gpus[i] if j - i == 1 else f"{j - i}x{gpus[i]}")
        i = j
    return ",".join(parts)


def _spec_for(targets: tuple[str, ...]) -> str:
    """The node's spec as AMDGPU_EMULATED_NODE spells it when that names the same node (its
    server is the one already running), else the compact form."""
    from .models import parse_node

    current = os.environ.get(protocol.NODE_ENV, "")
    try:
        if current and tuple(m.target for m in parse_node(current)) == targets:
            return current
    except Exception:  # a bad AMDGPU_EMULATED_NODE: the compact form of what was asked
        pass
    return node_spec(targets)


def this_rocr() -> LibraryVersion | None:
    """The ROCr this process loads (not initialised), or None when none loads."""
    try:
        return library_version(library_path(load_library()))
    except HsaUnavailable:
        return None


def check_rocr_takes(gpus: Sequence[str], rocr: LibraryVersion | None = None) -> None:
    """One line for a node the ROCr at hand (this process's unless given) cannot run; a ROCr
    of unknown version is left to say so itself."""
    for target in gpus:
        if target not in TARGETS:
            raise _unavailable(f"the emulated kernel offers {', '.join(TARGETS)}, not "
                               f"{target!r}")
    rocr = rocr if rocr is not None else this_rocr()
    if rocr is None or not rocr.rocm_tuple:
        return
    have = rocr.rocm_tuple[:2]
    for target in gpus:
        need = MIN_ROCR[target]
        if have < need:
            takes = [t for t in TARGETS if have >= MIN_ROCR[t]]
            raise _unavailable(
                f"{target} needs ROCr {need[0]}.{need[1]} or later (scripts/rocm6.sh runs "
                f"sid's ROCr 6.4.3); this process's ROCr {rocr.rocm_version} takes "
                f"{', '.join(takes) or 'none of them'} agents only")


class EmulatedProvider(RocrProvider):
    """ROCr over the emulated kernel: `EmulatedProvider(node=("gfx90a",) * 4)`, or the
    older `EmulatedProvider(isa="gfx90a", gpus=4)`."""

    driver = "emulated"
    # the device server runs the queues in another process: completion records of a packet
    # trace are the host's own, as on real ROCr
    records_completions = False

    def __init__(self, isa: str = DEFAULT_ISA, *, gpus: int = 1,
                 node: Sequence[str] | None = None, require_gpu: bool = True):
        global _live, _live_spec, _live_gpus
        targets = tuple(node) if node else (isa,) * gpus
        check_rocr_takes(targets)
        if not shim_loaded():
            raise _unavailable(f"amdgpu:emulated needs the emulated kernel in this process; "
                               f"{NEXT_STEP}")
        spec = _spec_for(targets)
        with _live_lock:
            # ROCr reads the topology once per process-wide hsa_init: while a provider holds
            # it, a different node cannot appear
            if _live and _live_spec != spec:
                raise _unavailable(
                    f"this process's ROCr runs over an emulated node of {_live_gpus} GPU(s) "
                    f"({_live_spec}), so it cannot also show {len(targets)} ({spec}); close "
                    "the amdgpu:emulated devices first, or open this node in a new process")
            _live += 1
            _live_spec, _live_gpus = spec, len(targets)
        self.gpus = len(targets)
        self.node = targets
        self.node_spec = spec  # the device server's node (protocol.run_dir, protocol.request)
        self._counted = True
        # The shim reads the node when ROCr's hsa_init opens /dev/kfd and the topology; the
        # process's own AMDGPU_EMULATED_NODE (what plain amdgpu:emulated means) is put back
        saved = os.environ.get(protocol.NODE_ENV)
        os.environ[protocol.NODE_ENV] = spec
        try:
            super().__init__(require_gpu=require_gpu)
        except BaseException:
            self._uncount()
            raise
        finally:
            if saved is None:
                os.environ.pop(protocol.NODE_ENV, None)
            else:
                os.environ[protocol.NODE_ENV] = saved

    def signal_wait(self, signal: int, condition: SignalCondition, compare: int,
                    timeout_s: float) -> int:
        """The shim's wait first (amdgpu_kfd_shim_signal_wait: it yields the CPU while it
        looks, where ROCr's own wait spins 200 us and keeps the device server off a busy
        host's cores), then ROCr's wait for what that one cannot take and for the timeout's
        report (a GPU memory fault during the wait, or SignalTimeout)."""
        wait = _shim_wait()
        if wait is not None:
            value = ctypes.c_int64()
            start = time.monotonic()
            ns = 2**63 if math.isinf(timeout_s) else max(0, int(timeout_s * 1e9))
            got = wait(signal, int(condition), compare, ns, SPIN_US, ctypes.byref(value))
            if got == 1:
                return value.value
            if got == 0:  # timed out: ROCr's wait reports it (and any fault) as always
                timeout_s = 0.0
            else:
                timeout_s = max(0.0, timeout_s - (time.monotonic() - start))
        return super().signal_wait(signal, condition, compare, timeout_s)

    def _uncount(self) -> None:
        global _live
        if not getattr(self, "_counted", False):
            return
        self._counted = False
        with _live_lock:
            _live -= 1

    def shut_down(self) -> None:
        try:
            super().shut_down()
        finally:
            self._uncount()


def refuse_system_rocr() -> None:
    """One process has one ROCr: while it runs over the emulated kernel, "amdgpu:N" (ROCr
    over a real /dev/kfd) cannot be opened in the same process."""
    if _live:
        raise _unavailable(
            "this process runs ROCr over the emulated AMD kernel (amdgpu:emulated), so its "
            "ROCr sees no real GPU; open amdgpu:N in a process that does not open "
            "amdgpu:emulated")


def unavailable_reason() -> str:
    """Why this process could not open amdgpu:emulated ("" when it could), without
    starting it: for amdgpu.devices()."""
    if not shim_loaded():
        return f"the emulated kernel is not loaded in this process; {NEXT_STEP}"
    if build.is_stale(build.devside_path()):
        return f"the emulated kernel's device server helper is not built; {build.NEXT_STEP}"
    return ""


__all__ = [
    "DEFAULT_ISA",
    "SUPPORTED_ISAS",
    "TARGETS",
    "EmulatedProvider",
    "check_rocr_takes",
    "this_rocr",
    "node_spec",
    "refuse_system_rocr",
    "runs_kernels",
    "shim_loaded",
    "unavailable_reason",
]
