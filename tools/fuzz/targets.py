"""Fuzz targets: one function per reader of untrusted bytes, `target(data) -> None`.

A target feeds `data` to the project's API the way a user's file or a caller's bytes would
reach it. A project error (`ground.errors.AmdgpuError`: CodeObjectError, BundleError,
TraceFormatError, ...) is the promised answer to bad input and is swallowed; anything else
escaping (struct.error, IndexError, a RecursionError, ...) is a finding, and so is a hang
(the runner's per-input timeout) or a crash of the interpreter.

The targets import nothing of atheris, so a regression test replays a saved input by
calling the same function (tests/test_fuzz_regressions.py). `python -m tools.fuzz` runs
them under atheris (coverage-guided, libFuzzer).
"""

from __future__ import annotations

import io
import os
import struct
import tempfile
from collections.abc import Callable

from ground.errors import AmdgpuError

# --- the code-object reader ------------------------------------------------------------------


def codeobject(data: bytes) -> None:
    """hsa.abi.codeobject.read_code_object, then every fact a caller reads from the result."""
    from hsa.abi.codeobject import read_code_object

    try:
        co = read_code_object(data)
    except AmdgpuError:
        return
    try:  # a processor without a table here reads, but has no TargetId: a project error
        _ = co.target
    except AmdgpuError:
        pass
    _ = co.processor, co.image_size
    for info in co.kernels.values():
        _ = info.explicit_args, info.hidden_args, info.hidden_args_offset
        _ = info.kernel_code_address
        for seg in co.segments[:4]:  # reads inside the segments the reader accepted
            try:
                co.read(seg.vaddr, min(seg.memsz, 64))
            except AmdgpuError:
                pass


# --- the loader: dev.load on the virtual system, and each kernel's kernarg packing -----------
_DEVICE = None


def _virtual_device():
    global _DEVICE
    if _DEVICE is None:
        import amdgpu

        _DEVICE = amdgpu.open("amdgpu:virtual")
    return _DEVICE


def _placeholder_args(layout) -> list:
    """Arguments of the right kinds for a layout: what a correct caller passes."""
    out: list = []
    for a in layout.explicit:
        if a.kind == "buffer":
            out.append(0x1000)
        elif a.kind == "value":
            out.append(0.0 if a.is_float else 0)
        elif a.kind == "bytes":
            out.append(bytes(a.size))
        else:
            out.append(None)  # dynamic_lds: the driver fills it
    return out


def loader(data: bytes) -> None:
    """dev.load(data) on amdgpu:virtual (the reader, the virtual loader, each kernel's
    kernarg layout), then each kernel's kernarg block packed as a dispatch packs it; the
    executable is unloaded again."""
    dev = _virtual_device()
    try:
        exe = dev.load(data)
    except AmdgpuError:
        return
    try:
        for kernel in exe.kernels.values():
            layout = kernel.layout
            block = bytearray(layout.size)
            try:
                layout.pack_into(block, 0, _placeholder_args(layout), (64, 1, 1), (64, 1, 1), 1)
                layout.hidden_bytes((64, 1, 1), (64, 1, 1), 1)
            except AmdgpuError:
                pass
    finally:
        exe.destroy()
        dev._executables.remove(exe)


# --- kernel bundles and clang offload bundles -----------------------------------------------


def bundle(data: bytes) -> None:
    """KernelBundle.from_bytes (the kernel cache's format) and KernelBundle.from_code_objects
    (code objects and clang offload bundles from other compilers), then variant lookups."""
    from compiler.bundle import KernelBundle

    for read in (KernelBundle.from_bytes, KernelBundle.from_code_objects):
        try:
            b = read(data)
        except AmdgpuError:
            continue
        _ = b.describe(), b.targets
        for target in ("gfx1100", "gfx942:sramecc+:xnack-", "vulkan"):
            try:
                v = b.variant_for(target)
            except AmdgpuError:
                continue
            if v.kind == "hsaco":
                try:
                    v.code_object()
                except AmdgpuError:
                    pass


# --- traces ------------------------------------------------------------------------------------


def trace(data: bytes) -> None:
    """packets.trace's reader (records expanded and not) and packet-trace's chunked scanner
    over the same bytes."""
    from packets.trace.reader import TraceReader
    from tools.packet_trace.scan import scan

    for expand in (True, False):
        try:
            for _record in TraceReader(io.BytesIO(data), expand):
                pass
        except AmdgpuError:
            pass
    fd, path = tempfile.mkstemp(suffix=".aqltrace", dir=_scratch())
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            for _chunk in scan(path, chunk_bytes=4096):
                pass
        except AmdgpuError:
            pass
    finally:
        os.remove(path)


def _scratch() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") else None


# --- kernel arguments: metadata the reader accepts packs without a foreign error ------------


class _Bytes:
    """Consumes fuzzer bytes as small integers (0 once they run out)."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def int(self, size: int) -> int:
        chunk = self.data[self.pos:self.pos + size]
        self.pos += size
        return int.from_bytes(chunk.ljust(size, b"\0"), "little")

    def pick(self, options: list):
        return options[self.int(1) % len(options)]


_TYPE_NAMES = [None, "float", "int", "uint", "char", "half", "double", "long", "float4",
               "struct S", "size_t"]


def kernargs(data: bytes) -> None:
    """Argument records built from the bytes: when the code-object reader's checks accept
    them, KernargLayout must build and pack a block for any dispatch shape (the promise
    behind refusing bad metadata at load: no struct.error at dispatch)."""
    from amdgpu.hsa_backend.kernargs import KernargLayout
    from hsa.abi.codeobject.metadata import VALUE_KINDS, KernelArg, check_arg_layout

    kinds = sorted(VALUE_KINDS)
    src = _Bytes(data)
    args = []
    for _ in range(src.int(1) % 24):
        kind = src.pick(kinds)
        args.append(KernelArg(
            name=None, type_name=src.pick(_TYPE_NAMES), offset=src.int(1), size=src.int(1) % 33,
            value_kind=kind, address_space=src.pick([None, "global", "local", "constant"]),
            actual_access=None, is_hidden=kind.startswith("hidden_")))
    segment = src.int(2)
    align = src.pick([1, 2, 4, 8, 16, 3, 0])
    version = src.pick([4, 5, 6])
    try:
        check_arg_layout(args, segment, align, version, "kernel 'fuzz'")
        layout = KernargLayout("fuzz", args, segment, align)
    except AmdgpuError:
        return
    grid = (src.int(2) + 1, src.int(1) + 1, 1)
    block = (src.int(1) % 64 + 1, 1, 1)
    try:
        layout.pack(_placeholder_args(layout), grid, block, 2)
        layout.hidden_bytes(grid, block, 2)
    except AmdgpuError:
        pass


# --- the emulated kernel's /dev/kfd request decoder --------------------------------------


def kfd_ioctl(data: bytes) -> None:
    """hsa.emulated.abi.decode(request) and the argument struct from the caller's bytes
    (shorter zero-filled, longer cut), as the emulated kernel's ioctl entry reads them."""
    try:
        from hsa.emulated import abi
    except ImportError:  # not on this branch yet
        return
    if len(data) < 4:
        return
    (request,) = struct.unpack_from("<I", data)
    found = abi.decode(request)
    if found is None:
        return
    args = found.struct.from_user(data[4:4 + found.user_size])
    again = found.struct.from_user(args.to_bytes())
    if again.to_bytes() != args.to_bytes():
        raise AssertionError(f"{found.name}: the struct does not read back its own bytes")


TARGETS: dict[str, Callable[[bytes], None]] = {
    "codeobject": codeobject,
    "loader": loader,
    "bundle": bundle,
    "trace": trace,
    "kernargs": kernargs,
    "kfd_ioctl": kfd_ioctl,
}

#: The project packages whose code atheris instruments for coverage.
INSTRUMENTED = ("ground", "packets", "hsa", "compiler", "amdgpu", "tools.packet_trace")
