"""PM4 command buffers on the HSA path: a finalized command buffer as a resident PM4
indirect buffer (IB), replayed with ONE AQL packet.

At finalize (`Pm4Program.build`), the dispatch-only segment of a command buffer becomes one
PM4 stream (packets.pm4 builders, checked against the Linux kernel's soc15d.h / nvd.h):

- per dispatch the shader registers from the kernel descriptor: COMPUTE_PGM_LO/HI (the
  entry >> 8), COMPUTE_PGM_RSRC1/2/3 (RSRC2.LDS_SIZE from the group segment + dynamic LDS,
  512-byte granules), COMPUTE_START_* = 0 and COMPUTE_NUM_THREAD_X/Y/Z (the workgroup),
  written only when they differ from the dispatch before; COMPUTE_TMPRING_SIZE and
  COMPUTE_RESOURCE_LIMITS 0 once (no scratch: kernels that need it stay on AQL);
- the user SGPRs the descriptor's enable bits ask for, in their order (private segment
  buffer: zeros, no scratch; dispatch ptr: an AQL packet image of this dispatch kept beside
  the kernargs; queue ptr: the lane's queue; kernarg segment ptr: this dispatch's block of
  the prepublished kernargs; dispatch id: its index; flat scratch init: zeros; private
  segment size: 0) through SET_SH_REG COMPUTE_USER_DATA_0..;
- DISPATCH_DIRECT with workgroup counts (thread counts with USE_THREAD_DIMENSIONS and
  PARTIAL_TG_EN where the grid is not a multiple of the workgroup), CS_W32_EN for wave32;
- between dependent dispatches (a recorded barrier) EVENT_WRITE CS_PARTIAL_FLUSH and an
  agent-scope ACQUIRE_MEM (IREE's pm4_barrier: PM4 has no per-dispatch barrier bit);
- at the end RELEASE_MEM (end of pipe, system-scope write-back) writing the GPU clock into
  the program's `completed_at` slot: the device time of the last completed replay.

A replay (`Pm4Program.submit`) on a lane publishes ROCr's AMD_AQL_FORMAT_PM4_IB vendor
packet (barrier bit, system-scope fences, the lane's timeline signal as its completion
signal) that jumps to an *instance*: one kernarg-pool allocation holding the IB, the
kernargs (the template with every binding site patched) and the packet images. Instances
are kept per (lane, binding table) like the AQL path's KeptInstance: a table bound before
replays with no host write at all; a new table takes a new instance (up to MAX_INSTANCES)
or re-patches an idle one of the lane in ONE vectorized numpy write (u64 sites; one more
per narrower parameter width). When every instance of the lane is in flight the replay
takes the AQL path (same results), so a replay never waits on the device.

Which targets replay through PM4 (`mode="auto"`, the default; `dev.command_buffer(mode=
"pm4" | "aql")` or AMDGPU_COMMAND_BUFFER=pm4|aql|auto choose): CDNA gfx9 (gfx908, gfx90a,
gfx94x, gfx950). IREE's AMDGPU driver records the same DISPATCH_DIRECT command buffers for
CDNA (its capability set "CDNA": PM4_IB, EVENT_WRITE, SET_SH_REG, ACQUIRE_MEM with the gfx9
layout, DISPATCH_DIRECT) and ROCr sends PM4 through this packet on gfx9+; on RDNA (gfx11,
gfx12) the packets exist too (IREE's "RDNA" set) but gfx12's command processor bypasses GL2
for its memory reads and nothing here has run on RDNA hardware, so AQL stays the default
there and PM4 is opt-in. gfx1250 (extended dispatch packets) stays on AQL.

A command buffer PM4 cannot express (host fill/copy operations, grid parameters, a kernel
with scratch or with an unsupported user-SGPR enable, an IB past 0xFFFFF dwords) replays on
AQL under "auto"; under "pm4" finalize refuses it in one line. A dispatch timer (per-dispatch
device times need AQL packets) also sends replays to the AQL path.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

import packets
from amdgpu.buffer import Buffer
from amdgpu.device import TimelinePoint
from amdgpu.hsa_backend.command_segments import KARG_WORD, RING_SLACK, RecordedDispatch, Segment
from amdgpu.hsa_backend.tracing import announce_all
from ground.errors import DeviceError, KernelArgumentError
from packets import pm4

MODES = ("auto", "pm4", "aql")
ENV = "AMDGPU_COMMAND_BUFFER"
# CDNA targets whose replays take PM4 under "auto" (IREE's CDNA predicate: gfx9.0.8+, gfx9.4+)
PM4_BY_DEFAULT = ("gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950")
MAX_INSTANCES = 8  # resident instances per program (over its lanes)
LDS_GRANULE = 512  # COMPUTE_PGM_RSRC2.LDS_SIZE unit
_LDS_MASK = 0x1FF << 15
_PROPS_SUPPORTED = 0x7F | (1 << 10)  # the seven user-SGPR enables and wavefront_size32
_NARROW = {2: np.uint16, 4: np.uint32}
_M32 = np.uint64(0xFFFF_FFFF)


def default_mode(target: str) -> tuple[str, str]:
    """("pm4" | "aql", why) for `mode="auto"` on `target`."""
    t = target.split(":")[0]
    if t in PM4_BY_DEFAULT:
        return "pm4", (f"{t} is CDNA: IREE records DISPATCH_DIRECT command buffers for its "
                       "command processor through ROCr's PM4_IB packet")
    if t == "gfx1250":
        return "aql", "gfx1250 dispatches through extended AQL packets"
    try:
        fam = pm4.family_of(t)
    except ValueError:
        return "aql", f"packets.pm4 has no register table for {t}"
    why = (f"{t} ({fam}) replays PM4 only when asked (mode='pm4'): no RDNA hardware has "
           "run it here")
    if fam == "gfx12":
        why += ", and gfx12's command processor reads bypass GL2 (IREE's capability table)"
    return "aql", why


def resolve_mode(requested: str | None, target: str) -> tuple[str, str]:
    """The command buffer's path ("pm4" or "aql") and why ("auto: ..." where the target
    chose): `requested` (None: the AMDGPU_COMMAND_BUFFER variable, else "auto")."""
    where = "mode"
    if requested is None:
        requested = os.environ.get(ENV) or "auto"
        where = ENV
    if requested not in MODES:
        raise KernelArgumentError(
            f"command buffer {where}={requested!r}: use one of {', '.join(MODES)}")
    if requested == "auto":
        path, why = default_mode(target)
        return path, f"auto: {why}"
    return requested, f"{where}={requested}"


def kernel_refusal(kernel: Any, family: str) -> str | None:
    """Why `kernel` cannot be a PM4 dispatch here (None: it can)."""
    d = kernel.info.descriptor
    name = kernel.name
    if kernel.private_segment_size or d.enable_private_segment or d.uses_dynamic_stack:
        return (f"kernel {name!r} uses scratch (private segment {kernel.private_segment_size} "
                "bytes): a PM4 dispatch would need the queue's scratch setup")
    if d.kernel_code_properties & ~_PROPS_SUPPORTED & 0xFFFF:
        return (f"kernel {name!r} has kernel_code_properties 0x{d.kernel_code_properties:x}, "
                "enables a PM4 dispatch does not set up")
    if d.wavefront_size32 and family == "gfx9":
        return f"kernel {name!r} is wave32, which gfx9 does not run"
    entry = kernel.kernel_object + d.kernel_code_entry_byte_offset
    if entry & 0xFF:
        return f"kernel {name!r} starts at 0x{entry:x}, not 256-byte aligned (COMPUTE_PGM_LO)"
    return None


class Pm4Unsupported(Exception):
    """What keeps a command buffer off PM4 (its text is the reason)."""


class Pm4Instance:
    """One resident copy of a program for one lane and binding table. `block` / `view`:
    its PM4_IB packet as a one-packet block whose header is INVALID (QueueLane.submit_block
    stores the real one, the program's header_list[0], last): the fields hotpath.c's
    compiled submit reads from a kept instance, so a replay of a table bound before is the
    compiled short way with a one-packet block."""

    __slots__ = ("address", "memory", "packet", "value", "lane", "kernargs", "ib_bytes",
                 "block", "view", "signal", "buffer")

    def __init__(self, buffer: Buffer, memory: np.ndarray, packet: bytes, lane: Any,
                 kernargs: np.ndarray, ib_bytes: memoryview):
        # a root Buffer of the device: close() frees it, and once the program is dropped
        # it goes back when the lanes completed what was submitted (dropped-buffer reaping)
        self.buffer = buffer
        self.address = buffer.address
        self.memory = memory
        self.packet = packet  # the PM4_IB AQL packet: all a replay publishes
        self.value = 0  # the lane's latest submission that reads it
        self.lane = lane
        self.kernargs = kernargs  # uint8 view of its kernarg template copy
        self.ib_bytes = ib_bytes  # for packet-trace (the record's payload)
        self.signal = lane.signal
        block = np.frombuffer(bytearray(packet), packets.PACKET)
        block.view(np.uint32)[0] = packets.INVALID_HEADER
        self.block = block
        self.view = memoryview(block.view(np.uint8)).cast("B")


class Pm4Program:
    """A finalized segment as a PM4 stream plus its relocations, and its instances."""

    def __init__(self, device: Any, seg: Segment, run: Sequence[RecordedDispatch]):
        self.device = device
        self.target = device.target
        self.family = pm4.family_of(self.target)
        self.seg = seg
        self.dispatches = len(run)
        self._lock = threading.Lock()
        # (lane, table) -> instance, least recently used first. With header_list and the
        # last_* fields, this program stands as the command buffer's one segment (`_only`)
        # for hotpath.c's compiled submit (see Pm4Instance).
        self.instances: dict[tuple, Pm4Instance] = {}
        self.last_block: Any = None
        self.last_rows: Any = None
        self._build(run)
        self.header_list = [int(np.frombuffer(
            pm4.pm4_ib_aql_packet(0, 1), np.uint32)[0])]  # header | PM4_IB << 16

    # --- finalize: the stream and its relocations ----------------------------------------
    def _build(self, run: Sequence[RecordedDispatch]) -> None:
        fam = self.family
        seg = self.seg
        words: list[int] = []
        rel_words: list[int] = []  # dword index of a lo word (hi follows) ...
        rel_offsets: list[int] = []  # ... and the instance offset its address points at
        queue_words: list[int] = []  # lo words of the lane's queue address
        # the instance layout: IB | kernargs (64-aligned) | packet images | completed_at
        # (the IB's size is known only once it is built: the offsets are relocations)
        words += pm4.set_sh_reg(fam, "COMPUTE_TMPRING_SIZE", 0)
        words += pm4.set_sh_reg(fam, "COMPUTE_RESOURCE_LIMITS", 0)
        last_prog: list[int] | None = None
        last_block: tuple | None = None
        image_rows: list[int] = []
        kernarg_rel: list[tuple[int, int]] = []  # (dword index, kernarg offset)
        image_rel: list[tuple[int, int]] = []  # (dword index, image index)
        barrier = [*pm4.event_write(pm4.EventType.CS_PARTIAL_FLUSH,
                                    pm4.EVENT_INDEX_PARTIAL_FLUSH),
                   *pm4.acquire_mem(fam, pm4.acquire_agent_flags(fam))]
        # what repeats is built once: per kernel its user-SGPR layout, per shape its setup
        # and DISPATCH_DIRECT packets (a command buffer of 10,000 dispatches has a few)
        layouts: dict[int, tuple] = {}
        progs: dict[tuple, list[int]] = {}
        blocks: dict[tuple, list[int]] = {}
        launches: dict[tuple, list[int]] = {}
        offsets = seg.kernarg_offsets.tolist()
        for i, d in enumerate(run):
            k = d.kernel
            layout = layouts.get(id(k))
            if layout is None:
                layout = layouts[id(k)] = self._user_layout(k)
            head, n_user, image_at, queue_at, kernarg_at, id_at, wave32 = layout
            key = (id(k), d.dynamic_lds)
            prog = progs.get(key)
            if prog is None:
                prog = progs[key] = self._program_packets(k, d.dynamic_lds)
            if i and d.barrier:  # wait for the dispatches before, then see their writes
                words += barrier
            if prog is not last_prog:
                words += prog
                last_prog = prog
            if d.block != last_block:
                setup = blocks.get(d.block)
                if setup is None:
                    setup = blocks[d.block] = pm4.set_sh_reg(fam, "COMPUTE_START_X", 0, 0, 0,
                                                             *d.block)
                words += setup
                last_block = d.block
            if n_user:
                at = len(words) + 2  # USER_DATA_0's dword
                words += head
                user_start = len(words)
                words += [0] * n_user
                if image_at >= 0:  # dispatch ptr: this dispatch's AQL packet image
                    image_rel.append((at + image_at, len(image_rows)))
                    image_rows.append(i)
                if queue_at >= 0:  # queue ptr: the lane's hsa_queue_t
                    queue_words.append(at + queue_at)
                if kernarg_at >= 0:  # kernarg segment ptr: this dispatch's block
                    kernarg_rel.append((at + kernarg_at, int(offsets[i])))
                if id_at >= 0:  # dispatch id: its index
                    words[user_start + id_at] = i
            shape = (d.grid, d.block, wave32)
            launch = launches.get(shape)
            if launch is None:
                g, b = d.grid, d.block
                if all(g[a] % b[a] == 0 for a in range(3)):
                    counts = tuple(g[a] // b[a] for a in range(3))
                    init = pm4.initiator(wave32=wave32)
                else:  # partial workgroups: thread counts, as an AQL grid is
                    counts = g
                    init = pm4.initiator(wave32=wave32, use_thread_dimensions=True) | (
                        pm4.INITIATOR_PARTIAL_TG_EN)
                launch = launches[shape] = pm4.dispatch_direct(counts[0], counts[1],
                                                               counts[2], init)
            words += launch
        release_at = len(words) + 3  # RELEASE_MEM's address lo dword
        words += pm4.release_mem(fam, 0, data_sel=pm4.DataSel.GPU_CLOCK,
                                 event=pm4.EventType.CACHE_FLUSH_AND_INV_TS_EVENT,
                                 event_index=pm4.EVENT_INDEX_END_OF_PIPE,
                                 cache_flags=pm4.release_system_flags(fam))
        if len(words) > pm4.IB_SIZE_MASK:
            raise Pm4Unsupported(f"the PM4 buffer would be {len(words)} dwords, past one "
                                 f"indirect buffer's {pm4.IB_SIZE_MASK}: record fewer "
                                 "dispatches per command buffer")
        ib_bytes = 4 * len(words)
        self.kernarg_offset = (ib_bytes + 63) & ~63
        size = seg.template.size
        self.kernarg_size = size
        self.image_offset = (self.kernarg_offset + size + RING_SLACK + 63) & ~63
        self.stamp_offset = self.image_offset + 64 * len(image_rows)
        self.nbytes = self.stamp_offset + 64
        for at, off in kernarg_rel:
            rel_words.append(at)
            rel_offsets.append(self.kernarg_offset + off)
        for at, n in image_rel:
            rel_words.append(at)
            rel_offsets.append(self.image_offset + 64 * n)
        rel_words.append(release_at)
        rel_offsets.append(self.stamp_offset)
        self.ib = np.array(words, np.uint32)
        self.rel_words = np.array(rel_words, np.int64)
        self.rel_offsets = np.array(rel_offsets, np.uint64)
        self.queue_words = np.array(queue_words, np.int64)
        self.image_rows = np.array(image_rows, np.int64)

    def _user_layout(self, k: Any) -> tuple:
        """A kernel's user SGPRs in the order its enable bits give them: (SET_SH_REG header
        pair, count, then the index of the dispatch ptr, queue ptr, kernarg ptr, dispatch
        id among them (-1: absent), wave32). The private segment buffer (4), flat scratch
        init (2) and private segment size (1) are zeros: no scratch on this path."""
        desc = k.info.descriptor
        props = desc.kernel_code_properties
        n = 0
        where = {}
        for bit, size, name in ((1, 4, ""), (2, 2, "image"), (4, 2, "queue"),
                                (8, 2, "kernarg"), (16, 2, "id"), (32, 2, ""), (64, 1, "")):
            if props & bit:
                if name:
                    where[name] = n
                n += size
        if n > 16:
            raise Pm4Unsupported(f"kernel {k.name!r} needs {n} user SGPRs "
                                 "(COMPUTE_USER_DATA_0..15)")
        head = pm4.set_sh_reg(self.family, "COMPUTE_USER_DATA_0", *([0] * n))[:2] if n else []
        wave32 = self.family != "gfx9" and desc.wavefront_size32
        return (head, n, where.get("image", -1), where.get("queue", -1),
                where.get("kernarg", -1), where.get("id", -1), wave32)

    def _program_packets(self, k: Any, dynamic_lds: int) -> list[int]:
        """COMPUTE_PGM_LO/HI and RSRC1/2/3 for a kernel (RSRC2.LDS_SIZE for its group
        segment plus the dispatch's dynamic LDS)."""
        fam = self.family
        desc = k.info.descriptor
        pgm = (k.kernel_object + desc.kernel_code_entry_byte_offset) >> 8
        granules = -(-(k.group_segment_size + dynamic_lds) // LDS_GRANULE)
        rsrc2 = (desc.compute_pgm_rsrc2 & ~_LDS_MASK) | (granules << 15)
        return [*pm4.set_sh_reg(fam, "COMPUTE_PGM_LO", pgm & 0xFFFF_FFFF, pgm >> 32),
                *pm4.set_sh_reg(fam, "COMPUTE_PGM_RSRC1", desc.compute_pgm_rsrc1, rsrc2),
                *pm4.set_sh_reg(fam, "COMPUTE_PGM_RSRC3", desc.compute_pgm_rsrc3)]

    # --- instances -----------------------------------------------------------------------
    def _new_instance(self, lane: Any, table: tuple) -> Pm4Instance:
        dev = self.device
        p = dev.provider
        address = p.memory_pool_allocate(dev.kernarg_pool, self.nbytes)
        buffer = Buffer(dev, address, self.nbytes, handle=address)
        p.agents_allow_access([dev.agent.handle], address)
        memory = p.host_view(address, self.nbytes)
        memory.fill(0)
        ib = self.ib.copy()
        at = np.uint64(address) + self.rel_offsets
        ib[self.rel_words] = (at & _M32).astype(np.uint32)
        ib[self.rel_words + 1] = (at >> np.uint64(32)).astype(np.uint32)
        if self.queue_words.size:
            q = int(lane.queue.handle)
            ib[self.queue_words] = q & 0xFFFF_FFFF
            ib[self.queue_words + 1] = q >> 32
        memory[: ib.nbytes] = ib.view(np.uint8)
        seg = self.seg
        k0 = self.kernarg_offset
        kernargs = memory[k0: k0 + self.kernarg_size]
        kernargs[:] = seg.template
        if self.image_rows.size:  # AQL packet images for the kernels' dispatch ptr
            block = seg.block[: seg.dispatches].copy()
            hdr = block.view(np.uint32).reshape(len(block), 16)
            hdr[:, 0] = seg.headers[: seg.dispatches]
            w = block.view(np.uint64).reshape(len(block), 8)
            np.add(seg.kernarg_offsets, np.uint64(address + k0), out=w[:, KARG_WORD])
            w[:, 7] = 0  # no completion signal: an image, never queued
            rows = block[self.image_rows]
            memory[self.image_offset: self.image_offset + rows.nbytes] = rows.view(np.uint8)
        self.patch(kernargs, table)
        packet = pm4.pm4_ib_aql_packet(address, len(ib), completion_signal=lane.signal)
        return Pm4Instance(buffer, memory, packet, lane, kernargs,
                           memoryview(memory[: ib.nbytes]))

    def patch(self, kernargs: np.ndarray, table: tuple) -> None:
        """Every binding (and parameter) site of the resident kernargs for `table`: the u64
        sites in one vectorized write, each narrower width in one more."""
        seg = self.seg
        values = np.array(table, np.uint64)
        if seg.site_words.size:
            kernargs.view(np.uint64)[seg.site_words] = values[seg.site_binding] + seg.site_offset
        for width, index, src in seg.narrow_sites:
            kernargs.view(_NARROW[width])[index] = values[src]

    def _instance_for(self, lane: Any, table: tuple) -> Pm4Instance | None:
        """The kept instance for (lane, table), made or re-patched now; None when every
        instance of the lane is in flight and no new one may be made."""
        key = (lane, table)
        instances = self.instances
        inst = instances.pop(key, None)
        if inst is None:
            if len(instances) < MAX_INSTANCES:
                inst = self._new_instance(lane, table)
            else:  # re-patch the least recently used idle instance of this lane
                done = lane.completed()
                for old_key, old in instances.items():
                    if old.lane is lane and old.value <= done:
                        inst = old
                        del instances[old_key]
                        break
                if inst is None:
                    return None
                self.patch(inst.kernargs, table)
        instances[key] = inst  # the most recently used goes last
        return inst

    # --- replay --------------------------------------------------------------------------
    def submit(self, lane: Any, table: tuple, wait: Sequence[TimelinePoint],
               sink: Any) -> TimelinePoint | None:
        """One replay on `lane` with the binding/parameter `table`: one PM4_IB AQL packet
        (after the wait packets, if any). None: take the AQL path (every instance of the
        lane in flight). Called under the command buffer's replay lock."""
        if lane.device.target != self.target:  # hsa_backend.submission checks the device
            raise DeviceError(
                f"this PM4 buffer was recorded for {self.target} ({self.family} registers "
                f"and packets); lane {lane.index} is a {lane.device.target} queue: record "
                "the command buffer on that device")
        inst = self._instance_for(lane, table)
        if inst is None:
            return None
        pre, proxies = lane.prepare_waits(wait) if wait else (None, None)
        with lane.aql as value:  # the lock, the timeline value; the counter moves on success
            if pre is not None:
                lane.publish_block(pre)
            if sink is not None:  # packet-trace: the IB rides as the record's payload
                announce_all(sink, self.seg.kernels)
                lane.publish(inst.packet, kernarg=bytes(inst.ib_bytes))
            else:
                lane.submit_block(inst.view, self.header_list[0])  # one copy, one header
            if proxies:
                lane.hold_proxies(value, proxies)
            inst.value = value
        return TimelinePoint(lane.index, value, lane)

    # --- views for tools and tests -------------------------------------------------------
    @property
    def dwords(self) -> int:
        return int(self.ib.size)

    def stream(self, lane: Any = None) -> np.ndarray:
        """The PM4 dwords of the most recently used instance (of `lane`), or the
        unrelocated stream when there is none."""
        for inst in reversed(list(self.instances.values())):
            if lane is None or inst.lane is lane:
                return np.frombuffer(inst.ib_bytes, np.uint32).copy()
        return self.ib.copy()

    def completed_at(self, lane: Any = None) -> int:
        """The GPU clock the RELEASE_MEM at the end wrote for the latest completed replay
        of the most recently used instance (of `lane`); 0 before any."""
        for inst in reversed(list(self.instances.values())):
            if lane is None or inst.lane is lane:
                o = self.stamp_offset
                return int(inst.memory[o: o + 8].view(np.uint64)[0])
        return 0


def build_program(device: Any, seg: Segment, run: Sequence[RecordedDispatch],
                  has_host_ops: bool) -> Pm4Program:
    """The PM4 program of a command buffer's one dispatch segment; Pm4Unsupported (its
    text the reason) when PM4 cannot replay it."""
    target = device.target
    try:
        family = pm4.family_of(target)
    except ValueError as exc:
        raise Pm4Unsupported(str(exc)) from None
    if target == "gfx1250":
        raise Pm4Unsupported("gfx1250 dispatches through extended AQL packets")
    if has_host_ops:
        raise Pm4Unsupported("it holds host fill/copy operations (several segments)")
    if not run:
        raise Pm4Unsupported("it records no dispatch")
    if seg.grid_words.size:
        raise Pm4Unsupported("its grid sizes are parameters (the IB holds workgroup counts)")
    for d in run:
        why = kernel_refusal(d.kernel, family)
        if why:
            raise Pm4Unsupported(why)
    return Pm4Program(device, seg, run)


def foreign_message(cb: Any, device: Any) -> str:
    """The one line for a command buffer submitted to a device it was not recorded on
    (a PM4 buffer says which target its packets are for)."""
    program = getattr(cb, "pm4_program", None)
    if program is not None and program.target != getattr(device, "target", None):
        return (f"this command buffer's PM4 buffer was recorded for {program.target} "
                f"({program.family} registers and packets); {device.spec} is "
                f"{getattr(device, 'target', '?')}: record the command buffer on this device")
    return "this command buffer was recorded on another device: record it here"
