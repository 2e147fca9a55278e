"""HsaDevice's transfers: the host staging buffer behind reads and writes, copies
(synchronous, async on a lane, peer to peer) and fills, by the copy engine or the blit
kernels of the library."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import packets
from amdgpu.buffer import Buffer, HostBuffer
from amdgpu.device import TimelinePoint
from amdgpu.fill import check_fill_length, fill_pattern
from amdgpu.hsa_backend.command_buffer import fill_word
from amdgpu.hsa_backend.executable import HsaKernel
from amdgpu.hsa_backend.lanes import QueueLane
from amdgpu.hsa_backend.parts import DeviceParts
from ground.errors import DeviceError


class DeviceTransfers(DeviceParts):
    def _check_peers(self, dst: Buffer, src: Buffer, what: str) -> None:
        """A buffer of another device (copy_async, peer-to-peer copy) must be a peer's
        after enable_peer_access, or host memory of this system."""
        for buf in (dst, src):
            owner = buf.device
            if owner is self:
                continue
            if getattr(owner, "provider", None) is not self.provider:
                raise DeviceError(
                    f"{what}: {buf!r} belongs to another system than {self.spec}: copy "
                    f"through the host (to_numpy, then write)"
                )
            if isinstance(buf.root, HostBuffer):  # host memory: every agent may reach it
                self._share_with(buf, [self.agent.handle])
                continue
            if not self.can_access_peer(owner):
                raise DeviceError(
                    f"{what}: {buf!r} is on {owner.spec}, which {self.spec} has no peer "
                    f"access to: call dev.enable_peer_access(peer) first (hwlab devices "
                    f"lists the links)"
                )

    def _copy_async(self, dst: Buffer, src: Buffer, nbytes: int, lane: int,
                    wait: Sequence[TimelinePoint]) -> TimelinePoint:
        """One lane submission done by the copy engine (hsa_amd_memory_async_copy): its
        dependencies are a proxy for the lane's earlier work and one for each waited point
        on another lane; its completion signal is waited on by a barrier-AND that carries
        the lane's timeline signal, so the lane stays in order and its count exact."""
        self._check_open()
        ln = self._timeline(lane)
        ln.check()
        deps: list[int] = []  # other lanes' proxies: prepared outside this lane's lock
        for point in wait:
            tl = point.timeline
            if tl is ln or point.done():
                continue
            if not isinstance(tl, QueueLane) or tl.provider is not self.provider:
                point.wait(self.default_timeout)  # another backend or system: host wait
                continue
            tl.check()
            deps.append(tl.proxy_after())
        done = self.signal_pool.take(1)
        p = self.provider
        dst_agent = self._buffer_agent(dst)
        src_agent = self._buffer_agent(src)
        gpus = [a for a in (dst_agent, src_agent) if a != self.cpu_agent]
        if len(set(gpus)) > 1:  # peer to peer: each agent must reach both buffers
            self._share_with(dst, gpus)
            self._share_with(src, gpus)
        last = packets.barrier_and_batch(
            dep_signals=(done,), completion_signal=ln.signal, barrier=True, count=1
        ).view(packets.PACKET)
        with ln.aql as value:  # the lane's proxy, the copy and its timeline value: one step
            if ln.completed() < value - 1:
                mine = self.signal_pool.take(1)
                ln.publish(
                    packets.barrier_and(dep_signals=(), completion_signal=mine, barrier=True)
                )
                deps.append(mine)
            try:
                p.memory_async_copy(dst.address, dst_agent, src.address, src_agent, nbytes,
                                    deps, done)
            except BaseException:
                self.signal_pool.give([done])  # the proxies stay out of the pool: still live
                raise
            ln.hold_proxies(value, [*deps, done])
            ln.publish_block(last)
        return TimelinePoint(ln.index, value, ln)

    def _staging(self, nbytes: int) -> np.ndarray:
        if nbytes > self._staging_size:
            p = self.provider
            if self._staging_address:
                p.memory_pool_free(self._staging_address)
            size = max(nbytes, 1 << 20)
            self._staging_address = p.memory_pool_allocate(self.host_pool, size)
            p.agents_allow_access([self.agent.handle], self._staging_address)
            self._staging_size = size
        return self.provider.host_view(self._staging_address, nbytes)

    def _write_bytes(self, buf: Buffer, offset: int, data: np.ndarray) -> None:
        self._settle()
        with self._staging_lock:
            self._staging(data.size)[:] = data
            self.provider.memory_copy(buf.address + offset, self._staging_address, data.size,
                                      dst_agent=self._buffer_agent(buf),
                                      src_agent=self.cpu_agent)

    def _read_bytes(self, buf: Buffer, offset: int, nbytes: int) -> np.ndarray:
        self._settle()
        with self._staging_lock:
            view = self._staging(nbytes)
            self.provider.memory_copy(self._staging_address, buf.address + offset, nbytes,
                                      dst_agent=self.cpu_agent,
                                      src_agent=self._buffer_agent(buf))
            return view.copy()

    def _fill_now(self, address: int, nbytes: int, value: Any) -> None:
        """Host-side fill (the lanes are idle): a pattern in staging, then memory_copy."""
        pattern = fill_pattern(value)
        check_fill_length(pattern, nbytes)
        with self._staging_lock:
            view = self._staging(nbytes)
            view.reshape(-1, pattern.size)[:] = pattern
            self.provider.memory_copy(address, self._staging_address, nbytes)

    def copy(
        self,
        dst: Buffer,
        src: Buffer,
        nbytes: int | None = None,
        lane: int = 0,
        wait: Sequence[TimelinePoint] = (),
    ) -> TimelinePoint:
        """Copy `nbytes` from src to dst. On one device with 4-byte aligned ranges it is the
        library `copy` kernel on `lane` (ordered like a dispatch); otherwise (another
        device of the same system, no kernels) the host copies after waiting for the lanes."""
        nbytes = self.check_copy(dst, src, nbytes)
        other = src.device if src.device is not self else dst.device
        if other is not self and getattr(other, "provider", None) is self.provider:
            # peer to peer on the copy engine, after all the work submitted to the peer
            self.check_wait(wait)
            after = [other._point(i) for i in range(other.lanes)]
            return self.copy_async(dst, src, nbytes, lane=lane, wait=[*wait, *after])
        if (
            src.device is self
            and dst.device is self
            and nbytes
            and not (nbytes | dst.address | src.address) % 4
        ):
            blits = self.blit_kernels()
            if blits is not None:
                n = nbytes // 4
                args = (dst, src, np.uint32(n))
                return self.dispatch(blits["copy"], n, 256, args, lane=lane, wait=wait)
        for point in wait:
            point.wait(self.default_timeout)
        self._settle()
        if other is not self:  # another system: through the host
            data = src.to_numpy()[:nbytes]
            dst.write(data)
            return self._point(lane)
        self.provider.memory_copy(dst.address, src.address, nbytes,
                                  dst_agent=self._buffer_agent(dst),
                                  src_agent=self._buffer_agent(src))
        return self._point(lane)

    def fill(
        self,
        dst: Buffer,
        value: Any,
        nbytes: int | None = None,
        lane: int = 0,
        wait: Sequence[TimelinePoint] = (),
    ) -> TimelinePoint:
        """Fill with a 1-, 2- or 4-byte pattern (the library `fill` kernel where it can do
        it exactly, else on the host after waiting for the lanes)."""
        pattern, nbytes = self.check_fill(dst, value, nbytes)
        word = fill_word(pattern, nbytes, dst)
        blits = self.blit_kernels() if word is not None else None
        if blits is not None:
            n = nbytes // 4
            args = (dst, word, np.uint32(n))
            return self.dispatch(blits["fill"], n, 256, args, lane=lane, wait=wait)
        for point in wait:
            point.wait(self.default_timeout)
        self._settle()
        self._fill_now(dst.address, nbytes, bytes(pattern))
        return self._point(lane)

    @property
    def runs_kernels(self) -> bool:
        """False only on a virtual agent whose ISA family has no executor yet."""
        try:
            from hsa.abi.targets import lookup

            family = lookup(self.target).family
        except Exception:  # noqa: BLE001 - an unknown target: assume a real agent
            return True
        cap = self.capabilities.get(f"executor:{family}")
        return True if cap is None else cap.available

    def blit_kernels(self) -> dict[str, HsaKernel] | None:
        """The compiler library's `fill` and `copy` kernels for this agent (compiled once,
        cached on disk), or None where kernels cannot run or be built here; fills and
        copies then run on the host."""
        if self._blits is None:
            with self._blits_lock:  # other threads wait for the whole set, never half of it
                if self._blits is None:
                    blits: dict[str, HsaKernel] = {}
                    if self.runs_kernels:
                        try:
                            import compiler

                            for name in ("fill", "copy"):
                                bundle = compiler.compile(name, targets=[self.target])
                                blits[name] = self.load(bundle).kernel(name)
                        except Exception:  # noqa: BLE001 - no clang, no variant: host fallback
                            blits = {}
                    self._blits = blits
        return self._blits or None
