"""Host cost of the Vulkan backend's dispatch paths, and chain-100 end to end vs IREE.

    .venv/bin/python benchmarks/bench_vulkan.py [--quick] [--device N] [--no-iree]
        [--bundle-dir DIR]   # saves the compiled kernels there, or reuses them

Per dispatch path (bda, push_descriptors, descriptor_sets; those the device offers):
  1. immediate dispatch: host time of one `dev.dispatch(x+1)` call on an idle device
     (median), and back-to-back throughput (calls per second, includes back-pressure);
  2. command-buffer replay, N = 100 and 5000 dependent x+1 dispatches (barrier after each):
     host time of `dev.submit(cb, bindings)` with the same buffers and with new buffers
     every time; baseline measured in the same run: re-recording the command buffer
     (record + finalize + submit) every time. Ratio = baseline / replay.
  3. chain-100 end to end: 100 dependent x+1 dispatches on 4096 floats with compute->compute
     barriers, submit + wait (median); side by side with IREE's own C runtime (iree.runtime,
     driver "vulkan") running the same program compiled by iree-compile with the same
     Vulkan target flags (one vmfb per ABI), when that works on the device.
Goal: BDA cached replay of 5000 dispatches <= 100 us host time.

    .venv/bin/python benchmarks/bench_vulkan.py --variants [--quick] [--bundle-dir DIR]

compares the replay-latency settings of `amdgpu.vulkan.sync.Tuning` on chain-100 instead,
per path, back to back in interleaved rounds: the former behaviour ("legacy": barriers with
compute and transfer on both sides, blocking host wait, no bind elision), each setting
changed alone, the defaults, and three diagnostic recordings under the defaults whose
results are not checked: without barriers (the floor), with execution-only barriers (no
memory dependency, not a valid ordering), and with the same bindings on every dispatch
(nothing to rebind). Other valid forms of the same dependencies, results checked: one
global VkMemoryBarrier2 (COMPUTE stages, or ALL_COMMANDS), the Vulkan 1.0 call, events,
chain-100 split into 2 or 4 command buffers (a dev.submit each, or all in one
vkQueueSubmit2), and, a diagnostic of another workload, two independent chain-100s
interleaved between the same barriers (200 dispatches); and the descriptor paths' buffer
barriers without the execution-only barrier beside them (not valid: synchronization
validation reports a write after read). Per variant: chain-100 submit + wait (median), the
host's submit share, chain-1 (the fixed cost), and the slope (chain-100 - chain-1) / 99 =
GPU time per dispatch.

The kernels come from IREE (compiler.iree.compile_mlir, target "portable"), so nothing here
depends on lavapipe; any Vulkan 1.3 device works.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

# The validation layer (when installed) would dominate host costs: keep it off here.
os.environ.setdefault("AMDGPU_VULKAN_VALIDATION", "0")

from amdgpu.vulkan import VulkanDevice, list_devices  # noqa: E402
from compiler.iree import compile_mlir, iree_compile_path, vulkan_device_flags  # noqa: E402

N_FLOATS = 4096


def addone_mlir() -> str:
    return (
        f"func.func @addone(%x: tensor<{N_FLOATS}xf32>) -> tensor<{N_FLOATS}xf32> {{\n"
        f"  %c = arith.constant dense<1.0> : tensor<{N_FLOATS}xf32>\n"
        f"  %r = arith.addf %x, %c : tensor<{N_FLOATS}xf32>\n"
        f"  return %r : tensor<{N_FLOATS}xf32>\n}}\n"
    )


def chain_mlir(n: int) -> str:
    """n dependent x+1 steps; optimization barriers keep IREE from fusing them."""
    t = f"tensor<{N_FLOATS}xf32>"
    lines = [
        f"func.func @chain(%x: {t}) -> {t} {{",
        f"  %c = arith.constant dense<1.0> : {t}",
        f"  %v0 = util.optimization_barrier %x : {t}",
    ]
    for i in range(n):
        lines.append(f"  %a{i} = arith.addf %v{i}, %c : {t}")
        lines.append(f"  %v{i + 1} = util.optimization_barrier %a{i} : {t}")
    lines.append(f"  return %v{n} : {t}\n}}\n")
    return "\n".join(lines)


def median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def fmt_us(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.2f} ms" if value >= 10000 else f"{value:.1f} us"


class PathBench:
    def __init__(self, index: int, path: str, compiled, quick: bool):
        self.dev = VulkanDevice(index, path=path)
        self.path = path
        self.quick = quick
        dispatch = compiled.program["dispatches"][0]
        self.kernel = self.dev.load(compiled).kernel(dispatch["kernel"])
        self.grid = [
            c * w
            for c, w in zip(dispatch["workgroup_count"], dispatch["workgroup_size"], strict=False)
        ]
        self.results: dict[str, float | None] = {}

    def buffers(self, count: int):
        return [self.dev.buffer(np.zeros(N_FLOATS, np.float32)) for _ in range(count)]

    def record(self, n: int):
        cb = self.dev.command_buffer()
        s0, s1 = cb.binding(0), cb.binding(1)
        for i in range(n):
            src, dst = (s0, s1) if i % 2 == 0 else (s1, s0)
            cb.dispatch(self.kernel, self.grid, args=(src, dst))
            cb.barrier()
        return cb.finalize()

    def immediate(self) -> None:
        a, b = self.buffers(2)
        reps = 30 if self.quick else 200
        samples = []
        for _ in range(reps):
            t = time.perf_counter()
            p = self.dev.dispatch(self.kernel, self.grid, args=(a, b))
            samples.append(time.perf_counter() - t)
            p.wait()
        self.results["immediate_us"] = median_us(samples[reps // 10 :])
        t = time.perf_counter()
        for _ in range(reps):
            p = self.dev.dispatch(self.kernel, self.grid, args=(a, b))
        p.wait()
        self.results["immediate_rate"] = reps / (time.perf_counter() - t)
        expected = np.ones(N_FLOATS, np.float32)
        if not np.array_equal(b.to_numpy(np.float32), expected):
            raise SystemExit(f"{self.path}: immediate x+1 gave wrong results")

    def replay(self, n: int) -> None:
        reps = (3 if n > 1000 else 10) if self.quick else (30 if n > 1000 else 50)
        cb = self.record(n)
        a, b = self.buffers(2)
        self.dev.submit(cb, [a, b]).wait(120)
        out = a if n % 2 == 0 else b
        if out.to_numpy(np.float32)[0] != n:
            raise SystemExit(
                f"{self.path}: chain of {n} gave {out.to_numpy(np.float32)[0]}, not {n}"
            )
        same = []
        for _ in range(reps):
            t = time.perf_counter()
            p = self.dev.submit(cb, [a, b])
            same.append(time.perf_counter() - t)
            p.wait(120)
        fresh = []
        for _ in range(reps):
            c, d = self.buffers(2)
            t = time.perf_counter()
            p = self.dev.submit(cb, [c, d])
            fresh.append(time.perf_counter() - t)
            p.wait(120)
            c.free()
            d.free()
        # The driver's share: the same recorded VkCommandBuffer through the lane alone
        # (vkQueueSubmit2 with pre-built structs), no binding work.
        raw = []
        self.dev.submit(cb, [a, b]).wait(120)  # live buffers in the instance used below
        instance = next(
            i for pool in cb._instances.values() for i in pool if i.handle == cb.last_handle
        )
        lane = self.dev._timeline(0)  # the backend's own lane: no argument checks
        for _ in range(reps):
            t = time.perf_counter()
            p = lane.submit(instance.command_buffer)
            raw.append(time.perf_counter() - t)
            p.wait(120)
        self.results[f"raw{n}_us"] = median_us(raw)
        rerecord = []
        for _ in range(max(2, reps // 5)):
            t = time.perf_counter()
            cb2 = self.record(n)
            p = self.dev.submit(cb2, [a, b])
            rerecord.append(time.perf_counter() - t)
            p.wait(120)
            cb2.release()
        self.results[f"replay{n}_same_us"] = median_us(same)
        self.results[f"replay{n}_new_us"] = median_us(fresh)
        self.results[f"rerecord{n}_us"] = median_us(rerecord)
        self.results[f"records{n}"] = cb.record_count
        cb.release()

    def chain(self, n: int = 100) -> None:
        reps = 10 if self.quick else 50
        cb = self.record(n)
        a, b = self.buffers(2)
        samples = []
        for _ in range(reps):
            t = time.perf_counter()
            self.dev.submit(cb, [a, b]).wait(120)
            samples.append(time.perf_counter() - t)
        self.results["chain100_us"] = median_us(samples)
        # Ping-pong with an even n ends in `a`, which grows by n per replay.
        if n % 2 == 0 and a.to_numpy(np.float32)[0] != n * reps:
            raise SystemExit(
                f"{self.path}: chain-{n} gave {a.to_numpy(np.float32)[0]}, not {n * reps}"
            )

    def close(self) -> None:
        self.dev.close()


LEGACY = {"barrier": "full", "spin_us": 0.0, "elide": False}


# Diagnostic recordings (results not checked): what the barriers and the rebinding cost.
NO_BARRIERS = "no barriers"
EXECUTION_ONLY = "execution-only barriers"  # no memory dependency: not a valid ordering
SAME_BINDINGS = "same bindings"  # every dispatch x -> y: nothing to rebind between them
# Other forms of the same dependency, recorded in place of each barrier (results checked):
GLOBAL_READ = "one global barrier"  # VkMemoryBarrier2 COMPUTE->COMPUTE, write -> read only
SYNC1 = "vkCmdPipelineBarrier"  # the Vulkan 1.0 call, VkMemoryBarrier write -> read
EVENTS = "events"  # vkCmdSetEvent2 then vkCmdWaitEvents2 (and a reset) per barrier
ALL_STAGES = "one global barrier, ALL_COMMANDS"  # ALL_COMMANDS both sides, memory w -> r|w
# Diagnostic (results not checked): the narrow recording without the execution-only
# VkMemoryBarrier2 beside its buffer-range barriers. Not a valid ordering: the Khronos
# synchronization validation reports the write after read of the buffer read before
BUFFER_ALONE = "buffer barriers alone"
SPLIT = "split into {} submits"  # chain-100 recorded as k command buffers, dev.submit each
ONE_SUBMIT = "{} command buffers, one vkQueueSubmit2"  # the same parts in one submit
# Diagnostic (another workload, results checked): two independent chain-100s on two pairs
# of buffers, step i of both between the same two barriers (200 dispatches, 100 barriers)
INTERLEAVED = "two chains interleaved"
CHECKED = ("chain", GLOBAL_READ, SYNC1, EVENTS, ALL_STAGES, INTERLEAVED)


class _RecordingLib:
    """vk.lib while recording a diagnostic variant: vkCmdPipelineBarrier2 recorded as
    `kind` (SYNC1, EVENTS or BUFFER_ALONE); everything else passes through."""

    def __init__(self, lib, device, kind: str):
        self._lib, self._dev, self._kind = lib, device, kind
        self.events: list = []

    def __getattr__(self, name):
        return getattr(self._lib, name)

    def vkCmdPipelineBarrier2(self, cb, info):
        from amdgpu.vulkan.instance import vk

        ffi, lib = vk.ffi, self._lib
        compute = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
        if self._kind == BUFFER_ALONE:
            if info.bufferMemoryBarrierCount and info.memoryBarrierCount == 1 and \
                    not info.pMemoryBarriers[0].srcAccessMask | \
                    info.pMemoryBarriers[0].dstAccessMask:
                alone = ffi.new("VkDependencyInfo*", info[0])
                alone.memoryBarrierCount = 0
                alone.pMemoryBarriers = ffi.NULL
                self.events.append(alone)
                info = alone
            lib.vkCmdPipelineBarrier2(cb, info)
            return
        if self._kind == SYNC1:
            mb = ffi.new("VkMemoryBarrier*")
            mb.sType = vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER
            mb.srcAccessMask = vk.VK_ACCESS_SHADER_WRITE_BIT
            mb.dstAccessMask = vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT
            self.events.append(mb)
            lib.vkCmdPipelineBarrier(cb, compute, compute, 0, 1, mb, 0, ffi.NULL, 0, ffi.NULL)
            return
        event = ffi.new("VkEvent*")
        create = ffi.new("VkEventCreateInfo*")
        create.sType = vk.VK_STRUCTURE_TYPE_EVENT_CREATE_INFO
        lib.vkCreateEvent(self._dev.handle, create, ffi.NULL, event)
        self.events.append(event)
        lib.vkCmdSetEvent2(cb, event[0], info)
        lib.vkCmdWaitEvents2(cb, 1, event, info)
        lib.vkCmdResetEvent2(cb, event[0], vk.VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT)

    def destroy(self) -> None:
        from amdgpu.vulkan.instance import vk

        for e in self.events:
            if vk.ffi.typeof(e).cname == "VkEvent *":
                self._lib.vkDestroyEvent(self._dev.handle, e[0], vk.ffi.NULL)


def tuning_variants(dev) -> list[tuple[str, dict, str]]:
    """(name, Tuning changes, recording kind) per variant; the defaults are dev.tuning's."""
    defaults = dict(vars(dev.tuning))
    variants = [
        ("legacy", LEGACY, "chain"),
        ("barrier=compute", {**LEGACY, "barrier": "compute"}, "chain"),
        ("barrier=tight", {**LEGACY, "barrier": "tight"}, "chain"),
        ("elide", {**LEGACY, "elide": True}, "chain"),
        ("spin=30us", {**LEGACY, "spin_us": 30.0}, "chain"),
        ("spin=300us", {**LEGACY, "spin_us": 300.0}, "chain"),
        ("spin=1000us", {**LEGACY, "spin_us": 1000.0}, "chain"),
        ("simultaneous_use=0", {**LEGACY, "simultaneous_use": False}, "chain"),
        ("buffer_memory=device", {**LEGACY, "buffer_memory": "device"}, "chain"),
    ]
    if dev.path == "bda":
        variants.append(("bda_table=host", {**LEGACY, "table_memory": "host"}, "chain"))
    variants.append(("barrier=narrow", {**LEGACY, "barrier": "narrow"}, "chain"))
    variants.append(("defaults", defaults, "chain"))
    for mode in ("tight", "full"):
        if defaults["barrier"] != mode:
            variants.append((f"defaults, barrier={mode}", {**defaults, "barrier": mode}, "chain"))
    variants.append(
        ("defaults, buffer_memory=device", {**defaults, "buffer_memory": "device"}, "chain")
    )
    variants.append(("defaults, no barriers (floor)", defaults, NO_BARRIERS))
    variants.append(("defaults, execution-only barriers", {**defaults, "barrier": "tight"},
                     EXECUTION_ONLY))
    variants.append(("defaults, same bindings", defaults, SAME_BINDINGS))
    for kind in (GLOBAL_READ, SYNC1, EVENTS, ALL_STAGES):
        variants.append((f"defaults, {kind}", {**defaults, "barrier": "tight"}, kind))
    if dev.path != "bda" and defaults["barrier"] == "narrow":  # (bda: no buffer barriers)
        variants.append((f"defaults, {BUFFER_ALONE}", defaults, BUFFER_ALONE))
    for k in (2, 4):
        variants.append((f"defaults, {SPLIT.format(k)}", defaults, SPLIT.format(k)))
    variants.append((f"defaults, {ONE_SUBMIT.format(4)}", defaults, ONE_SUBMIT.format(4)))
    variants.append((f"defaults, {INTERLEAVED}", defaults, INTERLEAVED))
    return variants


def _parts(kind: str) -> int:
    """How many command buffers a SPLIT or ONE_SUBMIT kind records chain-100 as (else 1)."""
    for form in (SPLIT, ONE_SUBMIT):
        head, tail = form.split("{}")
        if kind.startswith(head) and kind.endswith(tail):
            return int(kind[len(head):len(kind) - len(tail)])
    return 1


class _OneSubmit:
    """Several recorded VkCommandBuffers in one vkQueueSubmit2 on a lane (its timeline
    signaled once, after all of them; each part ends in its recording's last barrier)."""

    def __init__(self, lane, handles: list):
        from amdgpu.vulkan.instance import vk

        ffi = vk.ffi
        self.vk, self.lane = vk, lane
        self.infos = ffi.new("VkCommandBufferSubmitInfo[]", len(handles))
        for info, handle in zip(self.infos, handles, strict=True):
            info.sType = vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_SUBMIT_INFO
            info.commandBuffer = handle
        self.signal = ffi.new("VkSemaphoreSubmitInfo*")
        self.signal.sType = vk.VK_STRUCTURE_TYPE_SEMAPHORE_SUBMIT_INFO
        self.signal.semaphore = lane.semaphore
        self.signal.stageMask = vk.VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT
        self.info = ffi.new("VkSubmitInfo2*")
        self.info.sType = vk.VK_STRUCTURE_TYPE_SUBMIT_INFO_2
        self.info.commandBufferInfoCount = len(handles)
        self.info.pCommandBufferInfos = self.infos
        self.info.signalSemaphoreInfoCount = 1
        self.info.pSignalSemaphoreInfos = self.signal

    def submit(self):
        from amdgpu.vulkan import TimelinePoint

        lane = self.lane
        if lane.submitted > lane.reached:  # (every replay here is waited for first)
            lane.wait(lane.submitted, 10)
        with lane.queue_lock:
            value = lane.submitted + 1
            self.signal.value = value
            result = self.vk.lib.vkQueueSubmit2(lane.queue, 1, self.info, self.vk.ffi.NULL)
            if result != 0:
                raise SystemExit(f"vkQueueSubmit2 of {self.info.commandBufferInfoCount} "
                                 f"command buffers returned {result}")
            lane.submitted = value
        return TimelinePoint(lane.index, value, lane)


def memory_types(dev) -> list[str]:
    props = dev.memory_properties
    names = {1: "DEVICE_LOCAL", 2: "HOST_VISIBLE", 4: "HOST_COHERENT", 8: "HOST_CACHED"}
    out = []
    for i in range(props.memoryTypeCount):
        t = props.memoryTypes[i]
        flags = "|".join(n for bit, n in names.items() if t.propertyFlags & bit) or "0"
        heap = props.memoryHeaps[t.heapIndex]
        out.append(f"{i}:{flags}(heap {t.heapIndex}, {heap.size >> 20} MiB)")
    return out


class VariantBench(PathBench):
    """chain-100 and chain-1 per tuning variant on one device, interleaved rounds."""

    def chain_cb(self, n: int, kind: str):
        cb = self.dev.command_buffer()
        s0, s1 = cb.binding(0), cb.binding(1)
        s2, s3 = (cb.binding(2), cb.binding(3)) if kind == INTERLEAVED else (None, None)
        for i in range(n):
            src, dst = (s0, s1) if i % 2 == 0 or kind == SAME_BINDINGS else (s1, s0)
            cb.dispatch(self.kernel, self.grid, args=(src, dst))
            if kind == INTERLEAVED:  # the second chain's step i, independent of the first's
                cb.dispatch(self.kernel, self.grid, args=(s2, s3) if i % 2 == 0 else (s3, s2))
            if kind != NO_BARRIERS:
                cb.barrier()
        return cb.finalize()

    def chain_parts(self, n: int, kind: str, bufs) -> tuple[list, Any]:
        """chain-n as _parts(kind) command buffers, each with the bindings that continue the
        ping-pong where the last part left it; and how one replay of it is submitted (a
        function returning the last TimelinePoint)."""
        a, b, c, d = bufs
        k = _parts(kind)
        if n % k:
            raise SystemExit(f"chain-{n} does not split into {k} parts")
        size = n // k
        parts = [(self.chain_cb(size, kind), [a, b] if (j * size) % 2 == 0 else [b, a])
                 for j in range(k)]
        if kind == INTERLEAVED:
            parts = [(parts[0][0], [a, b, c, d])]
        dev = self.dev
        if kind.startswith(ONE_SUBMIT.split("{}")[0]):
            handles = []
            for cb, bindings in parts:  # each part's instance bound to its bindings
                dev.submit(cb, bindings).wait(10)
                handles.append(_handle(cb))
            one = _OneSubmit(dev._timeline(0), handles)
            return [cb for cb, _ in parts], one.submit

        def submit():
            for cb, bindings in parts:
                point = dev.submit(cb, bindings)
            return point

        return [cb for cb, _ in parts], submit

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._proxies: list = []
        self._keep: list = []

    def close(self) -> None:
        self.dev.synchronize()
        for proxy in self._proxies:
            proxy.destroy()
        self._proxies = []
        super().close()

    def execution_only_barrier(self, memory: bool = False, all_stages: bool = False):
        """COMPUTE -> COMPUTE with no accesses, or (memory) storage write -> storage read;
        (all_stages) ALL_COMMANDS -> ALL_COMMANDS, memory write -> memory read and write."""
        from amdgpu.vulkan.instance import vk

        mb = vk.ffi.new("VkMemoryBarrier2*")
        mb.sType = vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER_2
        mb.srcStageMask = mb.dstStageMask = vk.VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT
        if memory:
            mb.srcAccessMask = vk.VK_ACCESS_2_SHADER_STORAGE_WRITE_BIT
            mb.dstAccessMask = vk.VK_ACCESS_2_SHADER_STORAGE_READ_BIT
        if all_stages:
            mb.srcStageMask = mb.dstStageMask = vk.VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT
            mb.srcAccessMask = vk.VK_ACCESS_2_MEMORY_WRITE_BIT
            mb.dstAccessMask = vk.VK_ACCESS_2_MEMORY_READ_BIT | vk.VK_ACCESS_2_MEMORY_WRITE_BIT
        info = vk.ffi.new("VkDependencyInfo*")
        info.sType = vk.VK_STRUCTURE_TYPE_DEPENDENCY_INFO
        info.memoryBarrierCount = 1
        info.pMemoryBarriers = mb
        self._keep.append((mb, info))
        return info

    def run(self, rounds: int, reps: int, only: set[str] | None = None) -> list[str]:
        dev = self.dev
        defaults = dict(vars(dev.tuning))
        cases = []
        for name, changes, kind in tuning_variants(dev):
            if only is not None and name not in only:
                continue
            vars(dev.tuning).update(defaults)
            vars(dev.tuning).update(changes)
            if kind in (EXECUTION_ONLY, GLOBAL_READ, EVENTS, ALL_STAGES):
                info = self.execution_only_barrier(kind != EXECUTION_ONLY, kind == ALL_STAGES)
                dev.dependency_info = lambda before, after, info=info: info
            from amdgpu.vulkan.instance import vk

            lib = vk.lib
            if kind in (SYNC1, EVENTS, BUFFER_ALONE):
                vk.lib = proxy = _RecordingLib(lib, dev, kind)
                self._proxies.append(proxy)
            bufs = self.buffers(6)  # chain-100 (a, b; an interleaved chain's c, d), chain-1
            try:
                # records the instances under these settings (one replay)
                longs, submit = self.chain_parts(100, kind, bufs[:4])
                one_submit = kind.startswith(ONE_SUBMIT.split("{}")[0])
                if not one_submit:  # (its parts were each submitted once to bind them)
                    submit().wait(10)
                short = self.chain_cb(1, "chain" if _parts(kind) > 1 or kind == INTERLEAVED
                                      else kind)
                dev.submit(short, bufs[4:]).wait(10)
            finally:
                vk.lib = lib
            vars(dev).pop("dependency_info", None)
            table = ""
            for pool in longs[0]._instances.values():
                for inst in pool:
                    if inst.table_allocation is not None:
                        table = f" table in type {inst.table_allocation.memory_type}"
            cases.append(
                {
                    "name": name,
                    "tuning": dict(vars(dev.tuning)),
                    "kind": kind,
                    "longs": longs,
                    "go": submit,
                    "short": short,
                    "bufs": bufs,
                    "dispatches": 200 if kind == INTERLEAVED else 100,
                    "runs": 1,
                    "total": [],
                    "submit": [],
                    "one": [],
                    "table": table,
                }
            )
        for _ in range(rounds):
            for case in cases:
                vars(dev.tuning).update(case["tuning"])
                go, short, ends = case["go"], case["short"], case["bufs"][4:]
                for _ in range(reps):
                    t0 = time.perf_counter()
                    point = go()
                    t1 = time.perf_counter()
                    point.wait(10)
                    t2 = time.perf_counter()
                    case["submit"].append(t1 - t0)
                    case["total"].append(t2 - t0)
                case["runs"] += reps
                for _ in range(max(5, reps // 3)):
                    t0 = time.perf_counter()
                    dev.submit(short, ends).wait(10)
                    case["one"].append(time.perf_counter() - t0)
        vars(dev.tuning).update(defaults)
        lines = []
        for case in cases:
            total, one = median_us(case["total"]), median_us(case["one"])
            ends = [case["bufs"][0]] + ([case["bufs"][2]] if case["kind"] == INTERLEAVED else [])
            got = [e.to_numpy(np.float32) for e in ends]
            right = all(bool((a == 100.0 * case["runs"]).all()) for a in got)
            check = "ok" if right else "WRONG"
            if case["kind"] == SAME_BINDINGS:
                check = "diagnostic"
            elif case["kind"] not in CHECKED and _parts(case["kind"]) == 1:
                check = "right (by luck)" if right else "wrong, as it may be"
            elif not right:
                raise SystemExit(f"{self.path} {case['name']}: chain-100 gave "
                                 f"{[a[0] for a in got]} (WRONG)")
            n = case["dispatches"]
            what = "chain-100" if n == 100 else "2 x chain-100"
            lines.append(
                f"[{self.path}] {case['name']:<44} {what} {fmt_us(total):>9} "
                f"({total / n:.2f} us/dispatch); submit {fmt_us(median_us(case['submit']))}, "
                f"chain-1 {fmt_us(one)}, slope {(total - one) / (n - 1):.2f} us/dispatch; "
                f"{check}{case['table']}"
            )
            for cb in case["longs"]:
                cb.release()
            case["short"].release()
        return lines


def queue_families(dev) -> list[str]:
    from amdgpu.vulkan.instance import vk

    names = {1: "GRAPHICS", 2: "COMPUTE", 4: "TRANSFER"}
    out = []
    for i, f in enumerate(vk.vkGetPhysicalDeviceQueueFamilyProperties(dev.physical.handle)):
        flags = "|".join(n for bit, n in names.items() if f.queueFlags & bit) or hex(f.queueFlags)
        out.append(f"{i}:{flags} x{f.queueCount}")
    return out


def run_variants(args, paths: list[str], compiled) -> int:
    from amdgpu.vulkan.instance import vk

    rounds, reps = (2, 20) if args.quick else (8, 150)
    if args.rounds:
        rounds = args.rounds
    runs: list[tuple[str, dict, str, set | None]] = [(path, {}, path, None) for path in paths]
    # descriptor_sets with sets baked at record time instead of update-after-bind ones
    runs.append(
        (
            "descriptor_sets",
            {"AMDGPU_VULKAN_UPDATE_AFTER_BIND": "0"},
            "descriptor_sets, baked sets",
            None,
        )
    )
    # The other queue families with compute (the default is a compute-only one)
    probe = VulkanDevice(args.device)
    families = vk.vkGetPhysicalDeviceQueueFamilyProperties(probe.physical.handle)
    others = [
        i
        for i, f in enumerate(families)
        if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT and i != probe.queue_family
    ]
    print(f"queue families: {', '.join(queue_families(probe))}; default {probe.queue_family}")
    probe.close()
    few = {"legacy", "spin=1000us", "defaults", "defaults, no barriers (floor)"}
    if args.only:
        few = {name.strip() for name in args.only.split(";")}
        runs = [(path, env, label, few) for path, env, label, _ in runs]
    for family in others if not args.only or args.families else ():
        for path in paths:
            label = f"{path}, queue family {family}"
            runs.append((path, {"AMDGPU_VULKAN_QUEUE_FAMILY": str(family)}, label, few))
    for path, env, label, only in runs:
        saved = {name: os.environ.get(name) for name in env}
        os.environ.update(env)
        try:
            bench = VariantBench(args.device, path, compiled, args.quick)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        if "AMDGPU_VULKAN_UPDATE_AFTER_BIND" in env and not bench.dev.physical.update_after_bind:
            bench.close()  # the same as the plain descriptor_sets run
            continue
        bench.path = label
        try:
            if path == paths[0] and not env:
                print("memory types: " + ", ".join(memory_types(bench.dev)))
                print(f"default tuning: {vars(bench.dev.tuning)}")
            for line in bench.run(rounds, reps, only):
                print(line, flush=True)
        finally:
            bench.close()
    return 0


def _timed_replays(dev, cb, reps: int, bindings_of, free: bool) -> float:
    """Median host time of dev.submit(cb, bindings_of(i)), each replay waited for (and
    its buffers freed, with `free`) outside the timing."""
    samples = []
    for i in range(reps):
        bindings = bindings_of(i)
        t = time.perf_counter()
        p = dev.submit(cb, bindings)
        samples.append(time.perf_counter() - t)
        p.wait(120)
        if free:
            for b in bindings:
                b.free()
    return median_us(samples)


def _raw_submits(dev, cb, bindings, reps: int) -> float:
    """Median host time of the lane's vkQueueSubmit2 of cb's recorded buffer alone (each
    waited for outside the timing), after one dev.submit that binds `bindings`."""
    dev.submit(cb, bindings).wait(120)
    lane = dev._timeline(0)
    handle = _handle(cb)
    raw = []
    for _ in range(reps):
        t = time.perf_counter()
        p = lane.submit(handle)
        raw.append(time.perf_counter() - t)
        p.wait(120)
    return median_us(raw)


def replay_host(args, paths: list[str], compiled) -> int:
    """Host time of one replay of an n-dispatch chain, per path: the same buffers each time,
    four pairs of buffers in turn, a new pair each time (allocated and freed around the
    call, outside the timing), and the recorded VkCommandBuffer submitted alone (the
    driver's share); median of --reps, each replay waited for outside the timing."""
    n, reps = args.replay_host, args.reps
    for path in paths:
        bench = PathBench(args.device, path, compiled, True)
        try:
            dev = bench.dev
            cb = bench.record(n)
            pairs = [bench.buffers(2) for _ in range(4)]
            dev.submit(cb, pairs[0]).wait(120)
            out = {
                "same": _timed_replays(dev, cb, reps, lambda i, p=pairs: p[0], False),
                "4 pairs in turn": _timed_replays(dev, cb, reps,
                                                  lambda i, p=pairs: p[i % 4], False),
                "new": _timed_replays(dev, cb, reps, lambda i, b=bench: b.buffers(2), True),
            }
            dev.submit(cb, pairs[0]).wait(120)
            inst = next(i for pool in cb._instances.values() for i in pool
                        if i.handle == cb.last_handle)
            lane = dev._timeline(0)
            raw = []
            for _ in range(reps):
                t = time.perf_counter()
                p = lane.submit(inst.command_buffer)
                raw.append(time.perf_counter() - t)
                p.wait(120)
            out["submit alone"] = median_us(raw)
            # Does the driver's submit depend on where the recording's memory came from?
            # (The lead's full run, which had recorded and freed 5000-dispatch buffers
            # first, saw 10 us; a fresh process 67-86 us.) The same chain recorded again
            # while the first lives, then once more after both were freed.
            cb2 = bench.record(n)
            out["submit alone, a second recording"] = _raw_submits(dev, cb2, pairs[0], reps)
            cb.release()
            cb2.release()
            cb = bench.record(n)
            out["submit alone, recorded after two were freed"] = _raw_submits(
                dev, cb, pairs[0], reps)
            a = pairs[0][0].to_numpy(np.float32)[0]
            # every replay bound to pairs[0] adds n (an even chain ends in its first buffer)
            want = n * (4 + 4 * reps + -(-reps // 4)) if n % 2 == 0 else a
            print(f"[{path}] replay of {n}: " + ", ".join(
                f"{k} {fmt_us(v)}" for k, v in out.items()) + f" (median of {reps}; "
                f"records {cb.record_count}; a[0] = {a:.0f}, "
                f"{'ok' if a == want else f'WRONG, expected {want}'})", flush=True)
            cb.release()
        finally:
            bench.close()
    return 0


class _Submit10:
    """vkQueueSubmit (Vulkan 1.0) of one command buffer on a lane's queue, signalling the
    lane's timeline with a VkTimelineSemaphoreSubmitInfo: the same submission as the
    lane's vkQueueSubmit2, through the older entry point."""

    def __init__(self, lane):
        from amdgpu.vulkan.instance import vk

        ffi = vk.ffi
        self.vk, self.lane = vk, lane
        self.values = ffi.new("uint64_t[1]")
        self.sems = ffi.new("VkSemaphore[1]", [lane.semaphore])
        self.cbs = ffi.new("VkCommandBuffer[1]")
        self.timeline = ffi.new("VkTimelineSemaphoreSubmitInfo*")
        self.timeline.sType = vk.VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO
        self.timeline.signalSemaphoreValueCount = 1
        self.timeline.pSignalSemaphoreValues = self.values
        self.info = ffi.new("VkSubmitInfo*")
        self.info.sType = vk.VK_STRUCTURE_TYPE_SUBMIT_INFO
        self.info.pNext = self.timeline
        self.info.commandBufferCount = 1
        self.info.pCommandBuffers = self.cbs
        self.info.signalSemaphoreCount = 1
        self.info.pSignalSemaphores = self.sems

    def submit(self, command_buffer) -> int:
        lane = self.lane
        value = lane.submitted + 1
        self.values[0] = value
        self.cbs[0] = command_buffer
        with lane.queue_lock:
            result = self.vk.lib.vkQueueSubmit(lane.queue, 1, self.info, self.vk.ffi.NULL)
        if result != 0:
            raise SystemExit(f"vkQueueSubmit returned {result}")
        lane.submitted = value
        return value


class _DriverClock:
    """While entered, vkQueueSubmit2 is called through a wrapper that notes when the
    driver's call began and ended (perf_counter): the rest of a submit's host time is ours."""

    def __init__(self):
        from amdgpu.vulkan.instance import vk

        self.vk, self.real = vk, vk.lib
        self.entered = self.left = 0.0
        clock, real = self, vk.lib

        class Lib:
            def __getattr__(self, name):
                return getattr(real, name)

            @staticmethod
            def vkQueueSubmit2(*args):
                clock.entered = time.perf_counter()
                result = real.vkQueueSubmit2(*args)
                clock.left = time.perf_counter()
                return result

        self.lib = Lib()

        try:  # the compiled submit (fast_submit.c) notes its own driver call's times
            from amdgpu.vulkan.fast_submit import MODULE
        except ImportError:  # a tree without it
            MODULE = None
        self.compiled = MODULE

    def __enter__(self):
        self.vk.lib = self.lib
        if self.compiled is not None:
            self.compiled.set_driver_clock(True)
            self.before = self.compiled.driver_clock()

    def __exit__(self, *exc):
        self.vk.lib = self.real
        if self.compiled is not None:
            self.compiled.set_driver_clock(False)
            times = self.compiled.driver_clock()
            if times != self.before:  # the call went through the compiled submit
                self.entered, self.left = times


def vk_ffi():
    from amdgpu.vulkan.instance import vk

    return vk.ffi


def _handle(cb):
    """The VkCommandBuffer of a command buffer's last submission."""
    return next(i for pool in cb._instances.values() for i in pool
                if i.handle == cb.last_handle).command_buffer


def submit_forms(args, compiled) -> int:
    """Issue 31: why the driver's own vkQueueSubmit2 of a recorded 10,000-dispatch buffer
    took 67-69 us in one call and 10 us in another. The same recorded VkCommandBuffer is
    submitted alone (no binding work) under each condition, interleaved in --rounds rounds
    of --reps, median host time of the submit call:
    - drained, blocking wait: the last replay waited for as the backend does (spin
      `tuning.spin_us`, then vkWaitSemaphores sleeps): the vk2 / lead figure;
    - drained, spin wait: polled to completion, the thread never sleeps (CPU idle states);
    - drained, then 5 ms host busy / 5 ms host sleep: the GPU idle for 5 ms before it;
    - pending: submitted again at once while the previous replay still runs (a second
      submission of the same SIMULTANEOUS_USE buffer, waiting on the first: a driver may
      copy or patch a pending buffer);
    - recorded without SIMULTANEOUS_USE, drained;
    - vkQueueSubmit (1.0) instead of vkQueueSubmit2, drained;
    - 100 and 1000 dispatches, drained: does the submit grow with the buffer?
    - with 2000 more live buffers on the device (residency tracking?), drained.
    Then `dev.submit` of the full replay (same buffers) with the blocking and the spin
    wait. Each replay's result is checked once at the end."""
    n, reps, rounds = args.submit_forms, args.reps, args.rounds or 2
    for path in [p for p in (args.paths or "bda").split(",") if p]:
        bench = PathBench(args.device, path, compiled, True)
        try:
            _submit_forms_on(bench, path, n, reps, rounds, args.forms)
        finally:
            bench.close()
    return 0


def _submit_forms_on(bench, path: str, n: int, reps: int, rounds: int,
                     only: str | None = None) -> None:
    dev = bench.dev
    lane = dev._timeline(0)
    pair = bench.buffers(2)
    spin_default = dev.tuning.spin_us
    cbs = {}
    sizes: dict = {}  # VkCommandBuffer address -> its dispatches
    added = [0]  # x+1 steps that reached a[0]: each replay of an even chain adds its size
    for label, size, simultaneous in (("sim", n, True), ("plain", n, False),
                                      ("100", 100, True), ("1000", 1000, True)):
        dev.tuning.simultaneous_use = simultaneous
        cb = bench.record(size)
        dev.submit(cb, pair).wait(120)
        added[0] += size
        cbs[label] = (cb, _handle(cb))
        sizes[int(vk_ffi().cast("uintptr_t", cbs[label][1]))] = size
    dev.tuning.simultaneous_use = True
    old = _Submit10(lane)

    def spin_wait(value):
        dev.tuning.spin_us = 1e8
        lane.wait(value, 120)
        dev.tuning.spin_us = spin_default

    def count(handle, times=1):
        added[0] += times * sizes[int(vk_ffi().cast("uintptr_t", handle))]

    def drained(handle, wait="block", idle=None):
        count(handle)
        t = time.perf_counter()
        p = lane.submit(handle)
        took = time.perf_counter() - t
        if wait == "spin":
            spin_wait(p.value)
        else:
            p.wait(120)
        if idle == "busy":
            end = time.perf_counter() + 0.005
            while time.perf_counter() < end:
                pass
        elif idle == "sleep":
            time.sleep(0.005)
        return took

    def pending(handle):
        count(handle, 2)
        lane.submit(handle)
        t = time.perf_counter()
        p = lane.submit(handle)
        took = time.perf_counter() - t
        p.wait(120)
        return took

    def dev_pending():
        # dev.submit of the replay while the previous one still runs (back to back, as a
        # loop of replays goes): it takes another recorded instance of the same buffers
        added[0] += 2 * n
        dev.submit(cbs["sim"][0], pair)
        t = time.perf_counter()
        p = dev.submit(cbs["sim"][0], pair)
        took = time.perf_counter() - t
        spin_wait(p.value)
        return took

    def v10(handle):
        count(handle)
        t = time.perf_counter()
        value = old.submit(handle)
        took = time.perf_counter() - t
        lane.wait(value, 120)
        return took

    def replay(wait):
        added[0] += n
        t = time.perf_counter()
        p = dev.submit(cbs["sim"][0], pair)
        took = time.perf_counter() - t
        spin_wait(p.value) if wait == "spin" else p.wait(120)
        return took

    clock = _DriverClock()
    split: dict[str, list[float]] = {}

    def split_submit(how, delay_us=0.0):
        # dev.submit (how "dev") or the lane's submit alone ("lane"), drained (spin wait),
        # split around the one vkQueueSubmit2 it makes: our Python before it, the driver's
        # call, our Python after it
        added[0] += n
        if delay_us:
            end = time.perf_counter() + delay_us * 1e-6
            while time.perf_counter() < end:
                pass
        with clock:
            t = time.perf_counter()
            p = dev.submit(cbs["sim"][0], pair) if how == "dev" else lane.submit(h)
            took = time.perf_counter() - t
        name = f"{n}, {how}.submit split (spin)" + (f", {delay_us:g} us busy first"
                                                     if delay_us else "")
        for part, value in (("before the driver call", clock.entered - t),
                            ("the driver call", clock.left - clock.entered),
                            ("after the driver call", t + took - clock.left)):
            split.setdefault(f"{name}: {part}", []).append(value)
        spin_wait(p.value)
        return took

    thrash = (np.ones(16 << 20, np.float32), np.empty(16 << 20, np.float32))

    def cold(how):
        # the submit right after the host copied 64 MB (its caches then hold none of our
        # objects): does a cold host make our Python (dev) cost more than the lane's?
        added[0] += n
        np.copyto(thrash[1], thrash[0])
        t = time.perf_counter()
        p = dev.submit(cbs["sim"][0], pair) if how == "dev" else lane.submit(h)
        took = time.perf_counter() - t
        spin_wait(p.value)
        return took

    def probe():
        # a fixed piece of pure Python (the fast path's binding check, 5 times): is the host
        # slower right after a replay's wait than in a loop?
        t = time.perf_counter()
        for _ in range(5):
            tuple(b.address for b in pair)
            all(x is y for x, y in zip(pair, pair, strict=False))
        return time.perf_counter() - t

    def probe_after_wait():
        added[0] += n
        spin_wait(lane.submit(h).value)
        return probe()

    h = cbs["sim"][1]
    forms = {
        f"{n}, drained, blocking wait": lambda: drained(h),
        f"{n}, drained, spin wait": lambda: drained(h, "spin"),
        f"{n}, drained (spin), then 5 ms host busy": lambda: drained(h, "spin", "busy"),
        f"{n}, drained (spin), then 5 ms host sleep": lambda: drained(h, "spin", "sleep"),
        f"{n}, pending (resubmitted while the last runs)": lambda: pending(h),
        f"{n}, no SIMULTANEOUS_USE, drained (spin)":
            lambda: drained(cbs["plain"][1], "spin"),
        f"{n}, vkQueueSubmit 1.0, drained (spin)": lambda: v10(h),
        "100, drained (spin)": lambda: drained(cbs["100"][1], "spin"),
        "1000, drained (spin)": lambda: drained(cbs["1000"][1], "spin"),
        f"{n}, dev.submit same buffers, blocking wait": lambda: replay("block"),
        f"{n}, dev.submit same buffers, spin wait": lambda: replay("spin"),
        f"{n}, dev.submit pending (resubmitted while the last runs)": dev_pending,
        f"{n}, dev.submit split (spin)": lambda: split_submit("dev"),
        f"{n}, lane.submit split (spin)": lambda: split_submit("lane"),
        f"{n}, dev.submit split (spin), 200 us busy first":
            lambda: split_submit("dev", 200.0),
        f"{n}, dev.submit after a 64 MB host copy (cold caches)": lambda: cold("dev"),
        f"{n}, lane.submit after a 64 MB host copy (cold caches)": lambda: cold("lane"),
        "a pure-Python probe, right after a replay's spin wait": probe_after_wait,
        "the same probe, in a loop": probe,
    }
    live = f"{n}, drained (spin), 2000 more live buffers"
    if only:  # --forms: those whose name holds one of these pieces
        pieces = [p for p in only.split(";") if p]
        forms = {k: f for k, f in forms.items() if any(p in k for p in pieces)}
        live = live if any(p in live for p in pieces) else ""
    samples: dict[str, list[float]] = {k: [] for k in forms}
    for _ in range(rounds):
        for name, fn in forms.items():
            fn()  # one unmeasured: the state the last form left
            for key, values in split.items():
                if key.startswith(name + ":"):
                    values.pop()
            samples[name].extend(fn() for _ in range(reps))
    if live:
        extra = bench.buffers(2000)
        samples[live] = [drained(h, "spin") for _ in range(reps)]
        for b in extra:
            b.free()
    dev.synchronize(120)
    samples.update(split)
    a = pair[0].to_numpy(np.float32)[0]
    ok = a == added[0]
    for name, xs in samples.items():
        q = np.percentile(np.array(xs) * 1e6, [10, 50, 90])
        print(f"[{path}] submit {name}: median {q[1]:.1f} us (p10 {q[0]:.1f}, "
              f"p90 {q[2]:.1f}, n={len(xs)})", flush=True)
    print(f"[{path}] a[0] = {a:.0f} ({'ok' if ok else f'WRONG, expected {added[0]}'}); "
          f"spin_us default {spin_default:g}", flush=True)
    for cb, _h in cbs.values():
        cb.release()


def compile_vmfb(n: int, abi: str, vmfb: Path) -> str:
    """Compile chain-n for IREE's runtime with the same Vulkan flags; '' or the problem."""
    source = vmfb.with_suffix(".mlir")
    source.write_text(chain_mlir(n))
    try:
        cmd = [iree_compile_path(), str(source), *vulkan_device_flags(abi), "-o", str(vmfb)]
    except Exception as error:  # noqa: BLE001 - no compiler installed
        return f"iree-compile unavailable: {error}"
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        return f"iree-compile failed: {done.stderr.strip().splitlines()[-1:]}"
    return ""


def load_or_compile_addone(workdir: Path, bundle_dir: Path | None):
    """The x+1 kernel bundle: from --bundle-dir (made by --save-bundles) or compiled now."""
    from compiler.bundle import KernelBundle, Variant

    if bundle_dir is not None and (bundle_dir / "addone.bundle").exists():
        return KernelBundle.load(bundle_dir / "addone.bundle"), "loaded"
    (workdir / "addone.mlir").write_text(addone_mlir())
    result = compile_mlir(workdir / "addone.mlir", vulkan_abis=("descriptors", "bda"))
    bundle = KernelBundle(
        "addone",
        "bench",
        [Variant(v.kind, v.target, v.abi, v.data, v.info) for v in result.variants],
        result.program,
    )
    if bundle_dir is not None:
        bundle_dir.mkdir(parents=True, exist_ok=True)
        bundle.save(bundle_dir / "addone.bundle")
        for abi in ("descriptors", "bda"):
            problem = compile_vmfb(100, abi, bundle_dir / f"chain100_{abi}.vmfb")
            if problem:
                print(f"  {abi} vmfb: {problem}")
    return bundle, "compiled"


def iree_chain(index: int, n: int, quick: bool, workdir: Path) -> dict[str, float | str]:
    """chain-n through IREE's C runtime (iree.runtime, driver "vulkan"), per ABI."""
    out: dict[str, float | str] = {}
    try:
        import iree.runtime as rt
    except ImportError as error:
        return {"error": f"iree.runtime not importable: {error}"}
    for abi in ("descriptors", "bda"):
        vmfb = workdir / f"chain{n}_{abi}.vmfb"
        problem = compile_vmfb(n, abi, vmfb) if not vmfb.exists() else ""
        if problem:
            out[abi] = problem
            continue
        try:
            config = rt.Config(f"vulkan://{index}" if index else "vulkan")
            ctx = rt.SystemContext(config=config)
            ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb.read_bytes()))
            fn = ctx.modules.module["chain"]
            x = rt.asdevicearray(config.device, np.zeros(N_FLOATS, np.float32))
            fn(x)  # warm up (pipeline creation)
            samples = []
            for _ in range(3 if quick else 10):
                t = time.perf_counter()
                fn(x)
                samples.append(time.perf_counter() - t)
            out[abi] = median_us(samples)
        except Exception as error:  # noqa: BLE001 - report whatever IREE raised
            out[abi] = f"iree.runtime failed: {str(error).splitlines()[0][:120]}"
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--no-iree", action="store_true", help="skip IREE's runtime")
    parser.add_argument(
        "--variants",
        action="store_true",
        help="compare the replay-latency settings (amdgpu.vulkan.sync.Tuning) on chain-100",
    )
    parser.add_argument("--only", help="--variants: only these (names separated by ;)")
    parser.add_argument("--rounds", type=int, help="--variants: interleaved rounds")
    parser.add_argument("--replay-host", type=int, metavar="N",
                        help="only the host time of replaying an N-dispatch chain, per path")
    parser.add_argument("--reps", type=int, default=200,
                        help="--replay-host, --submit-forms: replays")
    parser.add_argument("--submit-forms", type=int, metavar="N",
                        help="only the driver's submit of a recorded N-dispatch chain under "
                        "several conditions (issue 31; see submit_forms)")
    parser.add_argument("--forms", help="--submit-forms: only the forms whose name holds "
                        "one of these ';'-separated pieces (e.g. 'dev.submit;lane.submit')")
    parser.add_argument("--paths", help="--submit-forms (default bda), --replay-host "
                        "(default all): the paths, comma-separated")
    parser.add_argument("--families", action="store_true",
                        help="--variants --only: run them on the other queue families too")
    parser.add_argument(
        "--replay-sizes", default="100,5000",
        help="dispatches per replayed command buffer (comma-separated; 100 and 5000 always)",
    )
    parser.add_argument(
        "--bundle-dir",
        type=Path,
        help="use (or, when empty, save) the compiled kernels there: for machines without "
        "iree-compile",
    )
    args = parser.parse_args()

    reports = list_devices()
    if args.device >= len(reports) or not reports[args.device].available:
        print(f"no usable Vulkan device vulkan:{args.device}: {reports}")
        return 1
    report = reports[args.device]
    print(
        f"device: {report.spec} {report.name} (Vulkan {report.versions['api']}, "
        f"{report.versions['driver']})"
    )
    paths = [p for p in ("bda", "push_descriptors") if report.paths[p].available]
    paths.append("descriptor_sets")
    for p, cap in report.paths.items():
        if not cap.available:
            print(f"  path {p} unavailable: {cap.reason}")

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        t = time.perf_counter()
        compiled, how = load_or_compile_addone(workdir, args.bundle_dir)
        print(f"{how} x+1 ({N_FLOATS} floats) for both ABIs in {time.perf_counter() - t:.1f} s")
        if args.variants:
            return run_variants(args, paths, compiled)
        if args.replay_host:
            chosen = [p for p in (args.paths or "").split(",") if p]
            return replay_host(args, [p for p in paths if p in chosen] if chosen else paths,
                               compiled)
        if args.submit_forms:
            return submit_forms(args, compiled)
        if args.bundle_dir is not None:
            for vmfb in args.bundle_dir.glob("chain100_*.vmfb"):
                (workdir / vmfb.name).write_bytes(vmfb.read_bytes())

        results: dict[str, dict] = {}
        results_spin_us = 0.0
        sizes = sorted({100, 5000, *(int(v) for v in args.replay_sizes.split(",") if v)})
        for path in paths:
            bench = PathBench(args.device, path, compiled, args.quick)
            results_spin_us = bench.dev.tuning.spin_us
            try:
                bench.immediate()
                for n in sizes:
                    bench.replay(n)
                bench.chain(100)
            finally:
                bench.close()
            results[path] = bench.results
            r = bench.results
            print(
                f"[{path}] immediate {fmt_us(r['immediate_us'])} "
                f"({r['immediate_rate']:.0f}/s back-to-back); "
                f"replay100 {fmt_us(r['replay100_new_us'])}, "
                f"replay5000 {fmt_us(r['replay5000_new_us'])}, "
                f"chain-100 {fmt_us(r['chain100_us'])}",
                flush=True,
            )
        iree = {} if args.no_iree else iree_chain(args.device, 100, args.quick, workdir)

    print()
    print("summary (host time per call, median; new = new buffers bound on each replay)")
    header = (
        f"{'path':<17}{'immediate':>11}{'replay100':>11}{'(same)':>10}{'re-record':>11}"
        f"{'ratio':>7}{'replay5000':>12}{'(same)':>10}{'re-record':>11}{'ratio':>8}"
        f"{'chain-100':>11}"
    )
    print(header)
    for path, r in results.items():
        ratio100 = r["rerecord100_us"] / r["replay100_new_us"]
        ratio5000 = r["rerecord5000_us"] / r["replay5000_new_us"]
        print(
            f"{path:<17}{fmt_us(r['immediate_us']):>11}{fmt_us(r['replay100_new_us']):>11}"
            f"{fmt_us(r['replay100_same_us']):>10}{fmt_us(r['rerecord100_us']):>11}"
            f"{ratio100:>6.0f}x{fmt_us(r['replay5000_new_us']):>12}"
            f"{fmt_us(r['replay5000_same_us']):>10}{fmt_us(r['rerecord5000_us']):>11}"
            f"{ratio5000:>7.0f}x{fmt_us(r['chain100_us']):>11}"
        )
    if iree:
        print("IREE C runtime (iree.runtime, same chain-100 program, per call):")
        for abi, value in iree.items():
            text = fmt_us(value) if isinstance(value, float) else value
            print(f"  {abi:<12} {text}")
            best = min(r["chain100_us"] for r in results.values())
            if isinstance(value, float):
                print(f"  {'':<12} amdgpu-direct best chain-100 is {value / best:.1f}x faster")
    print(
        "driver share of replay5000 (the recorded VkCommandBuffer submitted alone): "
        + ", ".join(f"{p} {fmt_us(r['raw5000_us'])}" for p, r in results.items())
    )
    per_dispatch = {p: r["chain100_us"] / 100 for p, r in results.items()}
    best = min(per_dispatch, key=per_dispatch.get)
    print(
        "goal: chain-100 <= 2 us per dispatch end to end (submit + wait): "
        + ", ".join(f"{p} {v:.2f} us" for p, v in per_dispatch.items())
        + f" ({'met' if per_dispatch[best] <= 2.0 else 'NOT met'} by the best, {best}; "
        f"host wait spins {results_spin_us:.0f} us before blocking)"
    )
    for n in sizes:
        if n > 5000:
            print(f"replay of {n} dispatches, new buffers: " + ", ".join(
                f"{p} {fmt_us(r[f'replay{n}_new_us'])} (same buffers "
                f"{fmt_us(r[f'replay{n}_same_us'])}, submit alone {fmt_us(r[f'raw{n}_us'])})"
                for p, r in results.items()))
    if "bda" in results and 10000 in sizes:
        bda = results["bda"]["replay10000_new_us"]
        print(f"goal: BDA replay of 10000 dispatches <= 12.4 us host time (IREE): "
              f"{fmt_us(bda)} ({'met' if bda <= 12.4 else 'NOT met'})")
    if "bda" in results:
        bda = results["bda"]["replay5000_new_us"]
        verdict = "met" if bda <= 100 else "NOT met"
        print(
            f"goal: BDA cached replay of 5000 dispatches <= 100 us host time: {fmt_us(bda)} "
            f"({verdict}; records={results['bda']['records5000']})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
