"""Executables and kernels on the HSA path.

`load_bundle` picks the bundle's variant for the agent's ISA (`bundle.variant_for`), loads
it through the provider (code_object_reader -> executable -> load -> freeze -> symbol
"name.kd") and keeps `hsa.abi.codeobject` metadata per kernel, from which each Kernel gets
its `KernargLayout`.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

import numpy as np

from amdgpu.geometry import dim3, size_key
from amdgpu.hsa_backend.kernargs import KernargLayout
from amdgpu.hsa_backend.tracing import announce_all
from ground.errors import DeviceError, HsaError, KernelArgumentError, PacketError

_KARG_AND_SIGNAL = struct.Struct("<Q8xQ")  # kernarg_address@40, reserved2@48, completion@56
_KARG = struct.Struct("<Q")


class LaunchPlan(NamedTuple):
    """What every immediate dispatch of one kernel, shape and lane reuses (HsaKernel.launch
    builds it once and caches it). A tuple, so the compiled dispatch (hotpath.c) reads its
    fields by position: the order is part of that contract (`LAUNCH_*` there)."""

    size: int  # kernarg bytes of the launch
    explicit: Any  # struct.Struct of the explicit args, or None (no fast converter)
    fast: Any  # (args, owner token) -> explicit values; raises for anything unusual
    hidden_start: int  # byte offset of the hidden args in the kernarg block
    hidden: bytes  # the hidden args' bytes for this shape and lane
    words: memoryview  # the AQL packet template as u64 words (word 5 patched per dispatch)
    body: memoryview  # its 60 bytes after the header word
    header: int  # its header word (header | setup << 16)
    geometry: tuple  # (grid, block, dims), normalised
    lane: Any  # the QueueLane it publishes on
    publish: Any  # lane.dispatcher(...): the untraced publish step, (kernarg bytes) -> value
    key: Any  # its launch-cache key (grid, block, dynamic_lds, lane index[, cluster]) or None


class HsaKernel:
    """One kernel of a loaded executable: symbol facts, metadata and kernarg layout."""

    # the two attributes every immediate dispatch reads: slots, which the compiled hot path
    # (hotpath.c's Dispatch) reads at their offsets instead of looking them up by name
    __slots__ = ("device", "last", "__dict__", "__weakref__")

    def __init__(self, executable: HsaExecutable, info: Any, symbol: Any):
        self.executable = executable
        self.device = executable.device
        self.info = info  # hsa.abi.codeobject.KernelInfo
        self.symbol = symbol  # hsa.provider.KernelSymbol
        self.name = info.name
        self.kernel_object = symbol.kernel_object
        self.group_segment_size = max(symbol.group_segment_size, info.group_segment_fixed_size)
        self.private_segment_size = max(
            symbol.private_segment_size, info.private_segment_fixed_size
        )
        self.layout = KernargLayout.from_kernel(info)
        self.args = info.explicit_args
        self.workgroup_size = tuple(info.reqd_workgroup_size) if info.reqd_workgroup_size else None
        self.max_workgroup_size = info.max_flat_workgroup_size or 1024
        self._geometry: dict[Any, tuple] = {}
        self._packets: dict[Any, bytes] = {}
        self._launches: dict[Any, LaunchPlan] = {}
        # the last immediate dispatch's (args tuple, launch entry, kernarg bytes): one tuple,
        # replaced whole, so a thread never pairs one dispatch's args with another's bytes
        self.last: tuple = (None, None, b"", None)  # (args, launch, bytes, Lifetime.ends)
        # the trace sink this kernel's KERNEL_SYMBOL record went to last (a weakref; see
        # amdgpu.hsa_backend.tracing)
        self.trace_announced: Any = None
        # raw by-value structs may be mutable numpy records: never cache those args
        self.args_cacheable = all(a.kind != "bytes" for a in self.layout.explicit)

    def geometry(
        self, grid: Any, block: Any
    ) -> tuple[tuple[int, int, int], tuple[int, int, int], int]:
        """(grid xyz in work-items, block xyz, dims), checked; cached per (grid, block)."""
        gkey, bkey = size_key(grid), size_key(block)  # types told apart (True == 1)
        key = (gkey, bkey) if gkey is not None and (bkey is not None or block is None) else None
        if key is not None:
            cached = self._geometry.get(key)
            if cached is not None:
                return cached
        g = dim3(grid, "grid", self.name)
        dims = 1 if not isinstance(grid, (tuple, list)) else len(grid)
        if block is None:
            if self.workgroup_size is not None:
                b = self.workgroup_size
            else:
                b = {1: (256, 1, 1), 2: (16, 16, 1), 3: (8, 8, 4)}[dims]
                b = tuple(min(x, 1024) for x in b)
                limit = self.max_workgroup_size
                while b[0] * b[1] * b[2] > limit:
                    b = (max(b[0] // 2, 1), b[1], b[2])
        else:
            b = dim3(block, "block", self.name)
            dims = max(dims, 1 if not isinstance(block, (tuple, list)) else len(block))
        if b[0] * b[1] * b[2] > self.max_workgroup_size:
            raise KernelArgumentError(
                f"kernel {self.name!r}: block {b} has {b[0] * b[1] * b[2]} work-items, more "
                f"than its max_flat_workgroup_size {self.max_workgroup_size}: use a smaller block"
            )
        if self.workgroup_size is not None and b != self.workgroup_size:
            raise KernelArgumentError(
                f"kernel {self.name!r} requires workgroup size {self.workgroup_size}, got {b}: "
                f"pass block={self.workgroup_size} or leave it out"
            )
        for axis in range(3):
            if axis >= dims and (g[axis] != 1 or b[axis] != 1):
                dims = axis + 1
        result = (g, tuple(b), dims)
        if key is not None:
            self._geometry[key] = result
        return result

    def packet_template(self, grid, block, dims: int, dynamic_lds: int, signal: int,
                        cluster: Any = None) -> bytes:
        """The 64-byte dispatch packet with kernarg_address 0x10 (patched per dispatch):
        on gfx1250 the extended packet (workgroup clusters, size 1 unless `cluster` asks),
        elsewhere the classic one."""
        key = (grid, block, dims, dynamic_lds, signal, cluster)
        pkt = self._packets.get(key)
        if pkt is None and (cluster is not None or self.device.target == "gfx1250"):
            pkt = self._ext_packet(grid, block, dims, dynamic_lds, signal, cluster)
            if pkt is not None:
                self._packets[key] = pkt
        if pkt is None:
            import packets

            pkt = packets.kernel_dispatch(
                workgroup_size=block[:dims],
                grid_size=grid[:dims],
                dims=dims,
                private_segment_size=self.private_segment_size,
                group_segment_size=self.group_segment_size + dynamic_lds,
                kernel_object=self.kernel_object,
                kernarg_address=16,
                completion_signal=signal,
                barrier=True,
            )
            self._packets[key] = pkt
        return pkt

    def _ext_packet(self, grid, block, dims: int, dynamic_lds: int, signal: int,
                    cluster: Any) -> bytes | None:
        """gfx1250's extended dispatch packet, or None where the classic one must carry the
        dispatch: a grid of partial workgroups (the extended packet counts whole clusters of
        whole workgroups) with no clusters asked for."""
        import packets

        if self.device.target != "gfx1250":
            raise KernelArgumentError(
                f"kernel {self.name!r}: cluster={cluster!r} needs a gfx1250 device (workgroup "
                f"clusters), this is {self.device.target}: leave cluster out"
            )
        c = (1, 1, 1) if cluster is None else dim3(cluster, "cluster", self.name)
        whole = all(grid[a] % (block[a] * c[a]) == 0 for a in range(3))
        if not whole:
            if cluster is None:
                return None
            raise KernelArgumentError(
                f"kernel {self.name!r}: grid {grid} is not whole clusters of {c} workgroups of "
                f"{block}: make each grid dimension a multiple of block x cluster"
            )
        dims = max([dims] + [a + 1 for a in range(3) if c[a] != 1])
        try:
            return packets.ext_kernel_dispatch(
                workgroup_size=block[:dims],
                cluster_count=tuple(grid[a] // (block[a] * c[a]) for a in range(dims)),
                cluster_size=c[:dims],
                dims=dims,
                private_segment_size=self.private_segment_size,
                group_segment_size=self.group_segment_size + dynamic_lds,
                kernel_object=self.kernel_object,
                kernarg_address=16,
                completion_signal=signal,
                barrier=True,
            )
        except PacketError as exc:
            raise KernelArgumentError(f"kernel {self.name!r}: {exc}") from None

    def launch(self, grid: Any, block: Any, dynamic_lds: int, lane: Any,
               cluster: Any = None) -> LaunchPlan:
        """Everything an immediate dispatch of this shape on this lane reuses (a
        LaunchPlan), cached. `cluster` (gfx1250): workgroups per cluster.
        Cached under (grid, block, dynamic_lds, lane index[, cluster]): dispatch looks the
        entry up itself by the lane's index, before it resolves the lane."""
        if dynamic_lds.__class__ is not int:
            dynamic_lds = _lds_bytes(dynamic_lds, self.name)
        # The cache key tells types apart (1 == True == 1.0 as dict keys): only exact ints
        # and tuples of them are cached, the rest normalised every time (and refused).
        gkey, bkey = size_key(grid), size_key(block)
        key: Any = None
        if gkey is not None and (bkey is not None or block is None):
            if cluster is None:
                key = (gkey, bkey, dynamic_lds, lane.index)
            else:
                cluster = dim3(cluster, "cluster", self.name)
                key = (gkey, bkey, dynamic_lds, lane.index, cluster)
            entry = self._launches.get(key)
            if entry is not None:
                return entry
        elif cluster is not None:
            cluster = dim3(cluster, "cluster", self.name)
        g, b, dims = self.geometry(grid, block)
        layout = self.layout
        pkt = self.packet_template(g, b, dims, dynamic_lds, lane.signal, cluster)
        # The packet as a template the dispatch patches in place (kernarg_address, u64
        # word 5, under the lane's lock: the entry is per lane) and publishes as its 60
        # body bytes and the header word (Ring.publish_parts): no bytes built per dispatch.
        template = bytearray(pkt)
        words = memoryview(template).cast("Q")
        header = int.from_bytes(pkt[:4], "little")
        body = memoryview(template)[4:]
        publish = lane.dispatcher(layout.size, words, header)
        if layout._fast is not None:
            hidden = layout.hidden_bytes(g, b, dims, dynamic_lds, lane.queue.handle)
            entry = LaunchPlan(layout.size, layout.explicit_struct, layout._fast,
                               layout.hidden_start, hidden, words, body, header, (g, b, dims),
                               lane, publish, key)
        else:
            entry = LaunchPlan(layout.size, None, None, 0, b"", words, body, header,
                               (g, b, dims), lane, publish, key)
        if key is not None:
            if len(self._launches) > 1024:
                self._launches.clear()
            self._launches[key] = entry
        return entry

    def __repr__(self) -> str:
        return f"<Kernel {self.name} ({len(self.args)} args, kernarg {self.layout.size} B)>"


def _lds_bytes(value: Any, kernel: str) -> int:
    """Dynamic LDS bytes as an int (numpy ints taken; bools, floats, negatives refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise KernelArgumentError(
            f"kernel {kernel!r}: dynamic_lds is a non-negative int of bytes, got {value!r}"
        )
    return int(value)


class HsaExecutable:
    """A frozen executable on one agent, with its kernels by name."""

    def __init__(self, device: Any, handle: Any, code_object: Any, variant: Any = None):
        self.device = device
        self.handle = handle  # hsa.provider.Executable
        self.code_object = code_object
        self.variant = variant
        self.kernels: dict[str, HsaKernel] = {}

    def kernel(self, name: str) -> HsaKernel:
        key = name[:-3] if name.endswith(".kd") else name
        try:
            return self.kernels[key]
        except KeyError:
            raise DeviceError(
                f"no kernel {name!r} in this executable; it has: {', '.join(sorted(self.kernels))}"
            ) from None

    @property
    def names(self) -> list[str]:
        return sorted(self.kernels)

    def destroy(self) -> None:
        if self.handle is not None:
            self.device.provider.executable_destroy(self.handle)
            self.handle = None


def load_bundle(device: Any, bundle: Any) -> HsaExecutable:
    """Load `bundle` (a KernelBundle, a Variant, or code-object bytes) onto the device."""
    from hsa.abi.codeobject import read_code_object

    variant = None
    if isinstance(bundle, (bytes, bytearray, memoryview)):
        data = bytes(bundle)
    elif hasattr(bundle, "variant_for"):
        variant = bundle.variant_for(device.isa)  # BundleError names what it has
        data = variant.data
    elif hasattr(bundle, "data"):
        variant, data = bundle, bundle.data
    else:
        raise DeviceError(
            f"cannot load a {type(bundle).__name__}: pass a KernelBundle or code-object bytes"
        )
    co = read_code_object(data)
    p = device.provider
    reader = p.code_object_reader_create_from_memory(data)
    handle = None
    try:
        handle = p.executable_create()
        p.executable_load_agent_code_object(handle, device.agent.handle, reader)
        p.executable_freeze(handle)
        exe = HsaExecutable(device, handle, co, variant)
        for name, info in co.kernels.items():
            sym = p.executable_get_symbol_by_name(handle, info.symbol, device.agent.handle)
            exe.kernels[name] = HsaKernel(exe, info, sym)
    except BaseException:
        if handle is not None:  # a failed load gives its executable back
            try:
                p.executable_destroy(handle)
            except HsaError:
                pass
        raise
    finally:
        p.code_object_reader_destroy(reader)
    import packets

    sink = packets.trace.active_sink()
    if sink is not None:  # let packet-trace name the kernels behind kernel_object
        announce_all(sink, exe.kernels.values(), force=True)
    return exe
