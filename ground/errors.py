"""The one exception hierarchy of amdgpu-direct.

This module imports nothing of the project, so every layer (packets, compiler, hsa,
amdgpu, tools) may import it without pulling in the driver. Every error the project raises
on purpose derives from `AmdgpuError`; a CLI prints `str(error)` as one line (cause and
next step) and exits non-zero.
"""

from __future__ import annotations

from typing import TypeVar as _TypeVar  # (private: amdgpu.errors re-exports the public names)


class AmdgpuError(Exception):
    """Root of every error amdgpu-direct raises on purpose."""


# --- packets -----------------------------------------------------------------------------
class PacketError(AmdgpuError, ValueError):
    """A packet field is out of range or inconsistent (dims, sizes, scopes, signals)."""


class QueueFullError(AmdgpuError):
    """No room in a ring before the timeout: the consumer did not advance the read index."""


class TraceFormatError(AmdgpuError):
    """A trace file is truncated, corrupt, or of an unknown version."""


# --- compiler ----------------------------------------------------------------------------
class CodeObjectError(AmdgpuError, ValueError):
    """A code object cannot be read: not ELF, not AMDGPU, bad metadata, ..."""


class CompileError(AmdgpuError):
    """A compiler (clang, IREE) rejected a source; the message carries its diagnostics."""


class BundleError(AmdgpuError):
    """A kernel bundle has no variant for the requested target, or is corrupt."""


# --- hsa ---------------------------------------------------------------------------------
class HsaError(AmdgpuError):
    """An HSA call failed. `status` is the hsa_status_t value, `text` ROCr's own words."""

    def __init__(self, status: int, text: str, call: str | None = None):
        self.status = int(status)
        self.text = text
        self.call = call
        where = f"{call}: " if call else ""
        super().__init__(f"{where}{text} (HSA status 0x{self.status:x})")


class HsaUnavailable(HsaError):
    """The HSA runtime cannot be used here (no library, no /dev/kfd, no GPU agent)."""


class QueueError(HsaError):
    """A queue entered its error state (memory fault, illegal instruction, bad packet)."""


class MemoryFault(HsaError):
    """A kernel or copy touched memory outside any allocation, or not mapped for the agent."""

    def __init__(self, status: int, text: str, address: int = 0, call: str | None = None):
        self.address = address
        super().__init__(status, text, call)


class IllegalInstruction(HsaError):
    """The ISA executor met an instruction it does not know or cannot run."""


class SignalTimeout(HsaError):
    """A wait on a signal or timeline did not complete before its timeout."""


# --- driver ------------------------------------------------------------------------------
class DeviceError(AmdgpuError):
    """An unknown device spec, or a backend that is not available for it."""


class DeviceLost(DeviceError):
    """The device cannot run work in this process any more: after a GPU memory fault the
    amdgpu kernel driver evicts the process's queues on that GPU for good (ROCr reports one
    fault per process). The message names the fault; open the device in a new process."""


class BufferStateError(DeviceError, BufferError):
    """A buffer handed to a dispatch, submit or copy cannot be used there: it was freed
    (the message says where), or it belongs to a closed device or to one this device cannot
    reach (the message names the owner)."""


class KernelArgumentError(AmdgpuError, TypeError):
    """A dispatch got the wrong number or kind of arguments for its kernel."""


class VulkanError(AmdgpuError):
    """A Vulkan call failed or no suitable Vulkan device exists."""


class BufferRangeError(AmdgpuError, ValueError):
    """A buffer read, write or view reaches outside the buffer."""



_E = _TypeVar("_E", bound=BaseException)


def without_frames(error: _E) -> _E:
    """`error`, and the errors it chains (__cause__, __context__), without their tracebacks:
    for an error an object keeps, to raise or quote later. A traceback holds every frame the
    error passed through and their locals (the raising thread's objects, the ISA executor's
    wave state: megabytes); kept by an object those frames reach, the error is a reference
    cycle that only the full collector frees, minutes later (issue 35: each device a soak
    closed under a fault kept its memory until then). Its message is all a caller gets."""
    seen: set[int] = set()
    chain: list[BaseException | None] = [error]
    while chain:
        e = chain.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        e.__traceback__ = None
        chain += [e.__cause__, e.__context__]
    return error
