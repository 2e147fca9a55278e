"""A transfer matrix in TransferBench's spirit: every source x destination over host memory
(pinned, pageable) and each GPU's device memory, on each copy executor the device has, every
transfer validated byte for byte.

Executors (TransferBench's names in brackets):
  dma      hsa_amd_memory_async_copy through `copy_async` / `write_async` / `read_async`: the
           copy engines (SDMA on a GPU that has them; the virtual system's copy thread) [DMA]
  kernel   the driver's blit kernel (`Device.copy` between buffers of one device, host
           buffers included: a GPU kernel reading or writing pinned host memory) [GFX]
  staged   a pageable numpy array through the driver's pinned staging buffer
  copy cmd vkCmdCopyBuffer on Vulkan devices (`Device.copy`)
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ground.errors import AmdgpuError
from tools.hwlab.levels import size_text

if TYPE_CHECKING:
    from amdgpu.device import Device

WAIT_S = 300.0
HOST_PINNED, HOST_PAGEABLE = "host pinned", "host pageable"


@dataclass
class Matrix:
    endpoints: list[str]
    nbytes: int
    cells: list[dict] = field(default_factory=list)  # {src, dst, executor, gbps|error, bad}

    @property
    def mismatches(self) -> int:
        return sum(c.get("bad", 0) for c in self.cells)

    def min_bandwidth(self) -> float:
        figures = [c["gbps"] for c in self.cells if "gbps" in c]
        return min(figures) if figures else 0.0

    def summary(self) -> str:
        timed = [c for c in self.cells if "gbps" in c]
        failed = [c for c in self.cells if "error" in c]
        if not timed:
            return f"no transfer ran: {failed[0]['error'] if failed else 'no endpoints'}"
        slow = min(timed, key=lambda c: c["gbps"])
        fast = max(timed, key=lambda c: c["gbps"])
        text = (f"{len(timed)} transfers of {size_text(self.nbytes)} over {len(self.endpoints)} "
                f"endpoints, all validated ({self.mismatches} byte(s) wrong); slowest "
                f"{slow['src']} -> {slow['dst']} ({slow['executor']}) {slow['gbps']:.3g} GB/s, "
                f"fastest {fast['src']} -> {fast['dst']} ({fast['executor']}) "
                f"{fast['gbps']:.3g} GB/s")
        if failed:
            text += f"; {len(failed)} could not run: " + "; ".join(
                f"{c['src']} -> {c['dst']} ({c['executor']}): {c['error']}" for c in failed)
        return text

    def to_json(self) -> dict:
        return {"endpoints": self.endpoints, "bytes": self.nbytes,
                "bytes_text": size_text(self.nbytes),
                "executors": sorted({c["executor"] for c in self.cells}),
                "cells": self.cells}


def _median_s(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(max(repeat, 1)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def gpu_specs(lab_device, pair: str | None) -> list[str]:
    """The GPUs of the matrix: this one and its peers (a virtual one-GPU device with a pair
    node: that node's two agents instead)."""
    from amdgpu.selection import parse_spec

    spec = parse_spec(lab_device.spec)
    if lab_device.backend != "hsa":
        return [lab_device.spec]
    if len(spec.gpus) > 1:
        system = str(spec).rsplit(":", 1)[0]
        return [f"{system}:{i}" for i in range(len(spec.gpus))]
    if spec.provider == "rocr":
        from tools.hwlab.inventory import inventory

        return [str(spec)] + [d.spec for d in inventory("") if d.backend == "hsa"
                              and d.available and d.spec.startswith("amdgpu:")
                              and d.spec.split(":")[1].isdigit() and d.spec != str(spec)]
    if pair:
        return [f"{pair}:0", f"{pair}:1"]
    return [lab_device.spec]


class _Runner:
    def __init__(self, devices: dict[str, Device], nbytes: int, repeat: int):
        self.devices = devices
        self.n = nbytes
        self.repeat = repeat
        self.data = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)

    def cell(self, matrix: Matrix, src: str, dst: str, executor: str, run, check) -> None:
        """run(): one transfer, waited for; check(): the destination's bytes."""
        entry: dict = {"src": src, "dst": dst, "executor": executor}
        try:
            seconds = _median_s(run, self.repeat)
            got = np.asarray(check()).view(np.uint8)[: self.n]
            entry["bad"] = int(np.count_nonzero(got != self.data))
            entry["gbps"] = self.n / seconds / 1e9
        except AmdgpuError as e:
            entry["error"] = str(e).splitlines()[0]
        matrix.cells.append(entry)


def measure(lab_device, nbytes: int, repeat: int = 3, pair: str | None = None) -> Matrix:
    import amdgpu

    specs = gpu_specs(lab_device, pair)
    names = {s: f"gpu{i}" for i, s in enumerate(specs)}
    matrix = Matrix([HOST_PINNED, HOST_PAGEABLE, *names.values()], nbytes)
    opened = {s: amdgpu.open(s) for s in specs}
    r = _Runner(opened, nbytes, repeat)
    try:
        for s, dev in opened.items():
            _host_cells(r, matrix, names[s], dev)
            _device_cells(r, matrix, names[s], dev)
        for s, a in opened.items():  # peers: the destination's copy engine pulls
            for t, b in opened.items():
                if s != t:
                    _peer_cell(r, matrix, names[s], names[t], a, b)
    finally:
        for dev in reversed(list(opened.values())):
            dev.close()
    return matrix


def _host_cells(r: _Runner, m: Matrix, gpu: str, dev: Device) -> None:
    n, data = r.n, r.data
    buf = dev.buffer(n)
    out = np.empty(n, np.uint8)
    try:
        pinned = dev.host_buffer(data)
    except AmdgpuError:
        pinned = None
    vulkan = dev.backend == "vulkan"
    try:
        # pageable: staged through the driver's pinned buffer
        r.cell(m, HOST_PAGEABLE, gpu, "staged", lambda: buf.write_async(data, lane=1).wait(WAIT_S),
               buf.to_numpy)
        r.cell(m, gpu, HOST_PAGEABLE, "staged",
               lambda: buf.read_async(out, lane=1).result(WAIT_S), lambda: out)
        if pinned is None:
            return
        if vulkan:
            back = dev.host_buffer(n)
            r.cell(m, HOST_PINNED, gpu, "copy cmd",
                   lambda: dev.copy(buf, pinned, lane=1).wait(WAIT_S), buf.to_numpy)
            r.cell(m, gpu, HOST_PINNED, "copy cmd",
                   lambda: dev.copy(back, buf, lane=1).wait(WAIT_S), lambda: back.array)
            back.free()
            return
        back = dev.host_buffer(n)
        r.cell(m, HOST_PINNED, gpu, "dma",
               lambda: dev.copy_async(buf, pinned, lane=1).wait(WAIT_S), buf.to_numpy)
        r.cell(m, gpu, HOST_PINNED, "dma",
               lambda: dev.copy_async(back, buf, lane=1).wait(WAIT_S), lambda: back.array)
        back.array[:] = 0
        r.cell(m, HOST_PINNED, gpu, "kernel",
               lambda: dev.copy(buf, pinned, lane=0).wait(WAIT_S), buf.to_numpy)
        r.cell(m, gpu, HOST_PINNED, "kernel",
               lambda: dev.copy(back, buf, lane=0).wait(WAIT_S), lambda: back.array)
        back.free()
    finally:
        if pinned is not None:
            pinned.free()
        buf.free()


def _device_cells(r: _Runner, m: Matrix, gpu: str, dev: Device) -> None:
    src, dst = dev.buffer(r.data), dev.buffer(r.n)
    try:
        if dev.backend == "vulkan":
            r.cell(m, gpu, gpu, "copy cmd", lambda: dev.copy(dst, src, lane=1).wait(WAIT_S),
                   dst.to_numpy)
            return
        r.cell(m, gpu, gpu, "dma", lambda: dev.copy_async(dst, src, lane=1).wait(WAIT_S),
               dst.to_numpy)
        dst.write(np.zeros(r.n, np.uint8))
        r.cell(m, gpu, gpu, "kernel", lambda: dev.copy(dst, src, lane=0).wait(WAIT_S),
               dst.to_numpy)
    finally:
        src.free()
        dst.free()


def _peer_cell(r: _Runner, m: Matrix, a_name: str, b_name: str, a: Device,
               b: Device) -> None:
    try:
        b.enable_peer_access(a)
    except AmdgpuError as e:
        m.cells.append({"src": a_name, "dst": b_name, "executor": "dma",
                        "error": str(e).splitlines()[0]})
        return
    src, dst = a.buffer(r.data), b.buffer(r.n)
    try:
        r.cell(m, a_name, b_name, "dma", lambda: b.copy_async(dst, src, lane=1).wait(WAIT_S),
               dst.to_numpy)
    finally:
        src.free()
        dst.free()
