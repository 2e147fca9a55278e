"""The measurements behind hwlab's level checks, through the driver's public API
(`amdgpu.open`, `Device`, `Buffer`, command buffers, `compiler.compile`).

Each check takes (device, params, lab_device) and returns `Measured`: figures by metric
(in the base units of tools/hwlab/levels.py: GB/s, us, GFLOPS, counts) and a detail line.
A check that cannot run on this device raises `Skip` with the reason. Every transfer and
kernel result is compared with what was sent or with numpy before a figure counts.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ground.errors import AmdgpuError
from tools.hwlab import kernels
from tools.hwlab.levels import size_text

WAIT_S = 300.0


class Skip(Exception):  # noqa: N818 - it is a verdict, not an error
    """The check does not apply to this device; the message says why."""


@dataclass
class Measured:
    figures: dict[str, Any]
    detail: str = ""
    extra: dict = field(default_factory=dict)  # e.g. a transfer matrix for the HTML report


def _median_s(fn, repeat: int) -> float:
    fn()  # warm: pipelines, staging, the copy engine
    times = []
    for _ in range(max(repeat, 1)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _gbps(nbytes: float, seconds: float) -> float:
    return nbytes / seconds / 1e9


# --- device facts -----------------------------------------------------------------------
def device_facts(lab_device, device=None) -> dict:
    """What a level file's `match` and `properties` compare: provider, backend, target,
    name, compute_units, wavefront, memory_gib, agents. Unknown facts are absent."""
    from amdgpu.selection import parse_spec

    spec = parse_spec(lab_device.spec)
    facts: dict[str, Any] = {"backend": lab_device.backend, "name": lab_device.name}
    if lab_device.backend == "vulkan":
        facts["provider"] = "vulkan"
        facts["target"] = "vulkan"
        return facts
    facts["provider"] = spec.provider
    facts["target"] = (lab_device.target or "").split(":")[0]
    if spec.gpus:
        facts["agents"] = len(spec.gpus)
    pools = [p for p in lab_device.topology.get("pools", []) if p.get("kind") == "coarse"]
    if pools:
        facts["memory_gib"] = round(pools[0]["bytes"] / (1 << 30), 1)
    agent = getattr(device, "agent", None)
    if agent is not None:
        facts["compute_units"] = int(agent.compute_units)
        facts["wavefront"] = int(agent.wavefront_size)
    return facts


def properties(device, params, lab_device) -> Measured:
    facts = device_facts(lab_device, device)
    shown = ", ".join(f"{k} {v}" for k, v in facts.items())
    return Measured(facts, shown)


# --- bandwidth ---------------------------------------------------------------------------
def hbm_bandwidth(device, params, lab_device) -> Measured:
    """STREAM's triad (a*x + y over f32) on device memory: 12 bytes per element."""
    n = int(params.get("bytes", 64 << 20)) // 12
    run = kernels.runner(device, kernels.triad_source(n))
    x = np.arange(n, dtype=np.float32) % 1024
    y = np.full(n, 3.0, np.float32)
    bufs = run.allocate([np.array(2.0, np.float32), x, y])
    try:
        seconds = _median_s(lambda: run.run_immediate(bufs).wait(WAIT_S),
                            int(params.get("repeat", 3)))
        out = run.read_outputs(bufs)[0]
        bad = int(np.count_nonzero(out != 2.0 * x + 3.0))
        if bad:
            raise AssertionError(f"triad over {n} elements: {bad} wrong result(s)")
    finally:
        bufs.free()
    return Measured({"bandwidth": _gbps(12 * n, seconds)},
                    f"triad over {n} f32 ({size_text(12 * n)} moved) in {seconds * 1e3:.2f} ms")


def host_bandwidth(device, params, lab_device) -> Measured:
    mode, direction = params.get("mode", "pinned"), params.get("direction", "h2d")
    n = int(params.get("bytes", 16 << 20))
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    buf = device.buffer(n)
    host = None
    try:
        if mode == "pinned":
            try:
                host = device.host_buffer(data)
            except AmdgpuError as e:
                raise Skip(f"{device.spec} has no pinned host buffers: {e}") from None
        if direction == "h2d":
            src = host if host is not None else data
            seconds = _median_s(lambda: buf.write_async(src, lane=1).wait(WAIT_S),
                                int(params.get("repeat", 3)))
            got = buf.to_numpy()
        else:
            buf.write(data)
            out = host if host is not None else np.empty(n, np.uint8)
            seconds = _median_s(lambda: buf.read_async(out, lane=1).result(WAIT_S),
                                int(params.get("repeat", 3)))
            got = host.array if host is not None else out
        bad = int(np.count_nonzero(np.asarray(got).view(np.uint8)[:n] != data))
        if bad:
            raise AssertionError(f"{direction} {mode}: {bad} of {n} bytes differ after the copy")
    finally:
        if host is not None:
            host.free()
        buf.free()
    return Measured({"bandwidth": _gbps(n, seconds)},
                    f"{direction} {mode} {size_text(n)} in {seconds * 1e3:.2f} ms")


def peer_specs(lab_device, pair: str | None) -> list[tuple[str, str]]:
    """The GPU pairs to measure from this device: (source spec, destination spec)."""
    from amdgpu.selection import parse_spec

    spec = parse_spec(lab_device.spec)
    if lab_device.backend != "hsa":
        raise Skip(f"{lab_device.spec}: Vulkan devices have no peer copies in this driver")
    if len(spec.gpus) > 1:  # a virtual or emulated node of several GPUs
        system = str(spec).rsplit(":", 1)[0]
        return [(str(spec), f"{system}:{i}") for i in range(len(spec.gpus)) if i != spec.index]
    if spec.provider == "rocr":
        from tools.hwlab.inventory import inventory

        others = [d.spec for d in inventory("") if d.backend == "hsa" and d.available
                  and d.spec.startswith("amdgpu:") and d.spec.split(":")[1].isdigit()
                  and d.spec != str(spec)]
        if not others:
            raise Skip(f"{lab_device.spec} is the only GPU agent here: no pair to measure")
        return [(str(spec), o) for o in others]
    if pair:
        return [(f"{pair}:0", f"{pair}:1")]
    raise Skip(f"{lab_device.spec} is a one-GPU system; the level file names no pair= node")


def _peer_copy(src_spec: str, dst_spec: str, n: int, repeat: int) -> float:
    import amdgpu

    a = amdgpu.open(src_spec)
    b = amdgpu.open(dst_spec)
    try:
        b.enable_peer_access(a)
        data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
        src, dst = a.buffer(data), b.buffer(n)
        seconds = _median_s(lambda: b.copy_async(dst, src, lane=1).wait(WAIT_S), repeat)
        bad = int(np.count_nonzero(dst.to_numpy() != data))
        if bad:
            raise AssertionError(f"{src_spec} -> {dst_spec}: {bad} of {n} bytes differ")
        src.free()
        dst.free()
        return _gbps(n, seconds)
    finally:
        b.close()
        a.close()


def peer_bandwidth(device, params, lab_device) -> Measured:
    n = int(params.get("bytes", 16 << 20))
    pairs = peer_specs(lab_device, params.get("pair"))  # type: ignore[arg-type]
    figures = {f"{s} -> {d}": _peer_copy(s, d, n, int(params.get("repeat", 3)))
               for s, d in pairs}
    worst = min(figures, key=figures.__getitem__)
    detail = "; ".join(f"{k}: {v:.3f} GB/s" for k, v in figures.items())
    return Measured({"bandwidth": figures[worst]},
                    f"slowest of {len(figures)} pair(s), {size_text(n)} each: {detail}",
                    {"pairs": figures})


# --- compute -----------------------------------------------------------------------------
def gemm(device, params, lab_device) -> Measured:
    dtype, n = str(params.get("dtype", "f32")), int(params.get("n", 128))
    try:
        run = kernels.runner(device, kernels.gemm_source(n, dtype))
    except AmdgpuError as e:  # e.g. a SPIR-V target without this dtype
        text = str(e).splitlines()[0]
        raise Skip(f"IREE cannot compile a {dtype} GEMM for {device.spec}: {text}") from None
    rng = np.random.default_rng(n)
    npdt = kernels.numpy_dtype(dtype)
    # small integers: every product and sum is exact in f16/bf16 inputs with f32 sums
    a = rng.integers(-2, 3, (n, n)).astype(npdt)
    b = rng.integers(-2, 3, (n, n)).astype(npdt)
    bufs = run.allocate([a, b])
    try:
        seconds = _median_s(lambda: run.run_immediate(bufs).wait(WAIT_S),
                            int(params.get("repeat", 3)))
        out = run.read_outputs(bufs)[0]
        want = a.astype(np.float32) @ b.astype(np.float32)
        bad = int(np.count_nonzero(out != want))
        if bad:
            raise AssertionError(f"{dtype} GEMM {n}x{n}: {bad} wrong element(s)")
    finally:
        bufs.free()
    return Measured({"throughput": 2 * n**3 / seconds / 1e9},
                    f"{dtype} {n}x{n}x{n} (f32 accumulate) in {seconds * 1e3:.2f} ms")


def dispatch_latency(device, params, lab_device) -> Measured:
    from tools.hwlab.bench import dispatch_latency as measure

    r = measure(device, int(params.get("repeat", 50)))
    return Measured({"round_trip": r["round_trip_us"]},
                    f"saxpy dispatch + wait, median of {int(params.get('repeat', 50))}; host "
                    f"submit {r['host_submit_us']:.1f} us")


def replay_cost(device, params, lab_device) -> Measured:
    from tools.hwlab.bench import replay_cost as measure

    n = int(params.get("dispatches", 16))
    r = measure(device, int(params.get("repeat", 20)), n)
    return Measured({"host_time": r["replay_host_us"]},
                    f"chain-{n} replayed: host time of one submit (immediate dispatch of the "
                    f"same {n}: {r['immediate_host_us']:.1f} us; replay round trip "
                    f"{r['replay_round_trip_us']:.1f} us)")


def stress(device, params, lab_device) -> Measured:
    """Triad dispatched for `seconds`, alternately immediate and replayed, every result
    read back and compared; a queue error (any driver error) ends the run and counts."""
    n = int(params.get("elements", 1 << 16))
    seconds = float(params.get("seconds", 3))
    run = kernels.runner(device, kernels.triad_source(n))
    x = (np.arange(n, dtype=np.float32) % 97) - 48
    y = np.full(n, 0.5, np.float32)
    want = 3.0 * x + y
    bufs = run.allocate([np.array(3.0, np.float32), x, y])
    dispatches = mismatches = errors = 0
    first_error = ""
    try:
        run.record()
        end = time.monotonic() + seconds
        batch = 0
        while time.monotonic() < end:
            try:
                step = run.replay if batch % 2 else run.run_immediate
                for _ in range(4):
                    point = step(bufs)
                    dispatches += 1
                point.wait(WAIT_S)
                mismatches += int(np.count_nonzero(run.read_outputs(bufs)[0] != want))
            except AmdgpuError as e:
                errors += 1
                first_error = str(e).splitlines()[0]
                break
            batch += 1
    finally:
        bufs.free()
    detail = f"{dispatches} triad dispatches over {n} f32 in {seconds:g} s, each batch checked"
    if first_error:
        detail += f"; stopped by: {first_error}"
    return Measured({"mismatches": mismatches, "queue_errors": errors,
                     "dispatches": dispatches}, detail)


def transfer_matrix(device, params, lab_device) -> Measured:
    from tools.hwlab.transfer_matrix import measure

    matrix = measure(lab_device, int(params.get("bytes", 4 << 20)),
                     int(params.get("repeat", 3)), params.get("pair"))  # type: ignore[arg-type]
    failed = [c for c in matrix.cells if "error" in c]
    if failed:
        raise AssertionError("; ".join(f"{c['src']} -> {c['dst']} ({c['executor']}) failed: "
                                       f"{c['error']}" for c in failed))
    return Measured({"min_bandwidth": matrix.min_bandwidth(), "mismatches": matrix.mismatches},
                    matrix.summary(), {"matrix": matrix.to_json()})


CHECK_FUNCTIONS = {
    "properties": properties,
    "hbm_bandwidth": hbm_bandwidth,
    "host_bandwidth": host_bandwidth,
    "peer_bandwidth": peer_bandwidth,
    "gemm": gemm,
    "dispatch_latency": dispatch_latency,
    "replay_cost": replay_cost,
    "stress": stress,
    "transfer_matrix": transfer_matrix,
}
