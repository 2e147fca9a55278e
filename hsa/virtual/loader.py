"""The code-object loader of the virtual AMD system (hsa_executable_* and the reader).

It does what ROCr's loader does for one agent: read the code object
(`hsa.abi.codeobject.read_code_object`), check its target id against the agent's
(xnack/sramecc any/on/off rules), map the PT_LOAD segments into one allocation that the
agent can access, apply the dynamic relocations (R_AMDGPU_RELATIVE64, R_AMDGPU_ABS64), and
publish each kernel as a symbol "name.kd" whose kernel_object is the loaded address of its
64-byte kernel descriptor.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ground.errors import CodeObjectError, HsaError
from ground.status import (
    HSA_STATUS_ERROR_FROZEN_EXECUTABLE,
    HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS,
    HSA_STATUS_ERROR_INVALID_AGENT,
    HSA_STATUS_ERROR_INVALID_CODE_OBJECT,
    HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER,
    HSA_STATUS_ERROR_INVALID_EXECUTABLE,
    HSA_STATUS_ERROR_INVALID_SYMBOL_NAME,
)
from hsa.provider import DeviceType, Executable, KernelSymbol

if TYPE_CHECKING:
    from hsa.virtual.memory import MemoryMap

R_AMDGPU_NONE = 0
R_AMDGPU_ABS32_LO = 1
R_AMDGPU_ABS32_HI = 2
R_AMDGPU_ABS64 = 3
R_AMDGPU_ABS32 = 6
R_AMDGPU_RELATIVE64 = 13
SEGMENT_ALIGN = 4096
SHN_ABS = 0xFFF1
ET_DYN = 3


@dataclass
class _Loaded:
    """One code object loaded for one agent."""

    agent: int
    base: int  # address of the mapping (segment vaddr 0)
    size: int
    kernels: dict[str, KernelSymbol]  # "name.kd" -> symbol
    names: dict[int, str]  # kernel_object -> kernel name (no .kd)


@dataclass
class _ExecutableState:
    exe: Executable
    loaded: list[_Loaded] = field(default_factory=list)


class CodeObjectLoader:
    """Readers and executables of one virtual system."""

    def __init__(self, memory: MemoryMap, agent_of: Callable[[int, str], Any],
                 device_pool_of: Callable[[int], int]) -> None:
        """`memory`: where loaded code lives; `agent_of(handle, call)`: the agent record
        (raising the provider's HsaError for a bad handle); `device_pool_of(agent)`: the
        pool its code segments come from."""
        self._memory = memory
        self._agent_of = agent_of
        self._device_pool_of = device_pool_of
        self._lock = threading.Lock()
        self._readers: dict[int, bytes] = {}
        self._executables: dict[int, _ExecutableState] = {}
        self._kernel_names: dict[int, str] = {}
        self._kernel_symbols: dict[int, KernelSymbol] = {}
        self._next_reader = 0x5EAD_0000_0001
        self._next_exe = 0xE7EC_0000_0001

    # --- readers -------------------------------------------------------------------------
    def reader_create(self, data: bytes) -> int:
        if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) == 0:
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_CODE_OBJECT,
                "code object is empty or not bytes; pass the .hsaco file's contents",
                "hsa_code_object_reader_create_from_memory",
            )
        with self._lock:
            handle = self._next_reader
            self._next_reader += 1
            self._readers[handle] = bytes(data)
        return handle

    def reader_destroy(self, reader: int) -> None:
        with self._lock:
            if self._readers.pop(reader, None) is None:
                raise _bad_reader(reader, "hsa_code_object_reader_destroy")

    # --- executables ---------------------------------------------------------------------
    def executable_create(self) -> Executable:
        with self._lock:
            handle = self._next_exe
            self._next_exe += 1
            exe = Executable(handle=handle)
            self._executables[handle] = _ExecutableState(exe)
        return exe

    def _state(self, exe: Executable, call: str) -> _ExecutableState:
        state = self._executables.get(getattr(exe, "handle", 0))
        if state is None:
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_EXECUTABLE,
                f"executable {exe!r} is not live; create it with executable_create and do "
                "not use it after executable_destroy",
                call,
            )
        return state

    def load(self, exe: Executable, agent: int, reader: int) -> None:
        call = "hsa_executable_load_agent_code_object"
        state = self._state(exe, call)
        if state.exe.frozen:
            raise HsaError(
                HSA_STATUS_ERROR_FROZEN_EXECUTABLE,
                "executable is frozen; load every code object before executable_freeze",
                call,
            )
        data = self._readers.get(reader)
        if data is None:
            raise _bad_reader(reader, call)
        ag = self._agent_of(agent, call)
        if ag.info.device_type != DeviceType.GPU:
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_AGENT,
                f"agent {ag.info.name} is not a GPU; load code objects for a GPU agent",
                call,
            )
        try:
            from hsa.abi.codeobject import read_code_object
        except ImportError as exc:  # pragma: no cover - depends on the compiler layer
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_CODE_OBJECT,
                f"hsa.abi.codeobject is not available ({exc}); install the project fully",
                call,
            ) from exc
        try:
            co = read_code_object(data)
        except CodeObjectError as exc:
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_CODE_OBJECT,
                f"cannot read the code object: {exc}",
                call,
            ) from exc
        if getattr(co, "elf_type", ET_DYN) != ET_DYN:
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_CODE_OBJECT,
                "code object is a relocatable object (.o), not a loadable one; link it with "
                "`ld.lld -shared`", call,
            )
        _check_target(co.target_id, ag.info.isa, call)
        loaded = self._map(co, ag.info.handle, call)
        with self._lock:
            state.loaded.append(loaded)
            self._kernel_names.update(loaded.names)
            for sym in loaded.kernels.values():
                self._kernel_symbols[sym.kernel_object] = sym
            if state.exe.agent is None:
                state.exe.agent = ag.info.handle
            if state.exe.agent == ag.info.handle:
                state.exe.kernels.update(loaded.kernels)

    def _map(self, co, agent: int, call: str) -> _Loaded:
        segments = [s for s in co.segments if s.memsz > 0]
        if not segments:
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_CODE_OBJECT, "code object has no PT_LOAD segment",
                call,
            )
        span = max(s.vaddr + s.memsz for s in segments)
        span = -(-span // SEGMENT_ALIGN) * SEGMENT_ALIGN
        memory = self._memory
        pool = self._device_pool_of(agent)
        alloc = memory.allocate(span, owner=agent, pool=pool, alignment=SEGMENT_ALIGN)
        base = alloc.base
        try:
            image = alloc.data
            raw = co.data
            for s in segments:
                if s.offset + s.filesz > len(raw) or s.filesz > s.memsz:
                    raise HsaError(
                        HSA_STATUS_ERROR_INVALID_CODE_OBJECT,
                        f"segment at vaddr 0x{s.vaddr:x} lies outside the file", call,
                    )
                image[s.vaddr : s.vaddr + s.filesz] = np.frombuffer(
                    raw, dtype=np.uint8, count=s.filesz, offset=s.offset
                )
            for r in co.relocations:
                _relocate(image, base, span, r, co.symbols, call)
            kernels: dict[str, KernelSymbol] = {}
            names: dict[int, str] = {}
            for name, k in co.kernels.items():
                kd_vaddr = k.descriptor_address
                if not 0 <= kd_vaddr <= span - 64:
                    raise HsaError(
                        HSA_STATUS_ERROR_INVALID_CODE_OBJECT,
                        f"kernel {name}: descriptor at 0x{kd_vaddr:x} is outside the loaded "
                        "segments", call,
                    )
                kd = k.descriptor
                symbol = k.symbol or f"{name}.kd"
                kernels[symbol] = KernelSymbol(
                    name=symbol,
                    kernel_object=base + kd_vaddr,
                    kernarg_segment_size=int(
                        k.kernarg_segment_size or getattr(kd, "kernarg_size", 0)
                    ),
                    kernarg_segment_alignment=int(k.kernarg_segment_align or 16),
                    group_segment_size=int(
                        k.group_segment_fixed_size or getattr(kd, "group_segment_fixed_size", 0)
                    ),
                    private_segment_size=int(
                        k.private_segment_fixed_size
                        or getattr(kd, "private_segment_fixed_size", 0)
                    ),
                )
                names[base + kd_vaddr] = name
        except BaseException:
            memory.free(base)
            raise
        return _Loaded(agent=agent, base=base, size=span, kernels=kernels, names=names)

    def freeze(self, exe: Executable) -> None:
        state = self._state(exe, "hsa_executable_freeze")
        if state.exe.frozen:
            raise HsaError(
                HSA_STATUS_ERROR_FROZEN_EXECUTABLE, "executable is already frozen",
                "hsa_executable_freeze",
            )
        state.exe.frozen = True

    def symbol(self, exe: Executable, name: str, agent: int) -> KernelSymbol:
        call = "hsa_executable_get_symbol_by_name"
        state = self._state(exe, call)
        self._agent_of(agent, call)
        for loaded in state.loaded:
            if loaded.agent == agent and name in loaded.kernels:
                return loaded.kernels[name]
        known = sorted({k for lo in state.loaded if lo.agent == agent for k in lo.kernels})
        hint = f"kernel symbols for this agent: {', '.join(known)}" if known else (
            "nothing is loaded for this agent")
        if known and not name.endswith(".kd") and f"{name}.kd" in known:
            hint = f"kernel symbols end in .kd: ask for {name}.kd"
        raise HsaError(
            HSA_STATUS_ERROR_INVALID_SYMBOL_NAME, f"no symbol {name!r}; {hint}", call
        )

    def destroy(self, exe: Executable) -> None:
        state = self._state(exe, "hsa_executable_destroy")
        with self._lock:
            del self._executables[state.exe.handle]
            for loaded in state.loaded:
                for ko in loaded.names:
                    self._kernel_names.pop(ko, None)
                    self._kernel_symbols.pop(ko, None)
        for loaded in state.loaded:
            try:
                self._memory.free(loaded.base)
            except KeyError:
                pass
        state.exe.kernels.clear()

    def kernel_name(self, kernel_object: int) -> str | None:
        return self._kernel_names.get(kernel_object)

    def kernel_symbol(self, kernel_object: int) -> KernelSymbol | None:
        return self._kernel_symbols.get(kernel_object)

    def release_all(self) -> None:
        for state in list(self._executables.values()):
            self.destroy(state.exe)
        self._readers.clear()


def _check_target(code_id: str, agent_id: str, call: str) -> None:
    from hsa.abi.targets import is_compatible

    try:
        ok = is_compatible(code_id, agent_id)
    except CodeObjectError as exc:
        raise HsaError(
            HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS,
            f"code object target {code_id!r} cannot run on agent {agent_id!r}: {exc}",
            call,
        ) from exc
    if not ok:
        same_processor = code_id.split(":")[0] == agent_id.split(":")[0]
        advice = (
            f"build with the agent's xnack/sramecc settings ({agent_id}) or leave them "
            "out ('any')" if same_processor else f"compile for {agent_id.split(':')[0]}"
        )
        raise HsaError(
            HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS,
            f"code object is for {code_id}, the agent is {agent_id}; {advice}",
            call,
        )


def _relocate(image: np.ndarray, base: int, span: int, r, symbols: dict, call: str) -> None:
    rtype = r.type
    if rtype == R_AMDGPU_NONE:
        return
    off = r.offset
    size = 8 if rtype in (R_AMDGPU_ABS64, R_AMDGPU_RELATIVE64) else 4
    if not 0 <= off <= span - size:
        raise HsaError(
            HSA_STATUS_ERROR_INVALID_CODE_OBJECT,
            f"relocation at 0x{off:x} is outside the loaded segments", call,
        )
    if rtype == R_AMDGPU_RELATIVE64:
        value = base + r.addend
    else:
        sym = symbols.get(r.symbol) if r.symbol else None
        if r.symbol and (sym is None or sym.shndx == 0):
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_CODE_OBJECT,
                f"relocation against undefined symbol {r.symbol!r}; the virtual loader links "
                "no external symbols, so build the code object self-contained",
                call,
            )
        if sym is not None and sym.shndx == SHN_ABS:
            s = sym.value
        else:
            s = base + (sym.value if sym is not None else r.symbol_value)
        value = s + r.addend
        if rtype == R_AMDGPU_ABS32_LO or rtype == R_AMDGPU_ABS32:
            value &= 0xFFFF_FFFF
        elif rtype == R_AMDGPU_ABS32_HI:
            value = (value >> 32) & 0xFFFF_FFFF
        elif rtype != R_AMDGPU_ABS64:
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_CODE_OBJECT,
                f"unsupported relocation type {rtype} at 0x{off:x}; the virtual loader "
                "handles R_AMDGPU_RELATIVE64 and R_AMDGPU_ABS64/32", call,
            )
    value &= (1 << (8 * size)) - 1
    image[off : off + size] = np.frombuffer(value.to_bytes(size, "little"), dtype=np.uint8)


def _bad_reader(reader: int, call: str) -> HsaError:
    return HsaError(
        HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER,
        f"code object reader 0x{reader:x} is not live; create it with "
        "code_object_reader_create_from_memory",
        call,
    )
