"""A tinygrad client of the emulated kernel (tests/test_tinygrad_kfd.py): tinygrad's AMD
backend opens /dev/kfd itself (its KFDIface: topology and ip_discovery from sysfs, its own
PM4 compute queue and SDMA queue, events), compiles with its LLVM path and runs, as on a
real GPU. Run under the shim with DEV=AMD:LLVM; argv says what to do:
  ops       a handful of ops (elementwise, reduce, matmul, a where/exp chain) vs numpy;
            prints "queue pm4|aql" and "ops ok"
  pool      two kernels realized together, which tinygrad compiles in its worker pool
            (spawned: vfork + exec) between two VRAM allocations; prints "pool yes|no",
            "ok var", "ok moments"
  bad-pm4   submits a PM4 stream with an undefined opcode on the compute queue and waits:
            tinygrad's KFD fault path must raise (prints "fault: <its message>")
"""

import os
import sys

import numpy as np


def ops() -> None:
    from tinygrad import Device, Tensor

    dev = Device[Device.DEFAULT]
    print("arch", dev.arch)
    print("queue", "aql" if dev.is_aql else "pm4")
    rng = np.random.default_rng(31)
    a = rng.standard_normal((33, 47)).astype(np.float32)
    b = rng.standard_normal((33, 47)).astype(np.float32)
    m = rng.standard_normal((47, 19)).astype(np.float32)
    ta, tb, tm = Tensor(a), Tensor(b), Tensor(m)
    checks = {
        "add_mul": ((ta + tb) * 3.0 - tb, (a + b) * 3.0 - b),
        "sum_axis": (ta.sum(axis=1), a.sum(axis=1)),
        "max": (ta.max(), a.max()),
        "matmul": (ta @ tm, a @ m),
        "where_exp": ((ta > tb).where(ta.exp(), tb.relu()), np.where(a > b, np.exp(a),
                                                                       np.maximum(b, 0))),
    }
    for name, (got, want) in checks.items():
        out = got.numpy()
        if not np.allclose(out, want, rtol=1e-4, atol=1e-4):
            raise SystemExit(f"{name}: max error {np.abs(out - want).max()}")
        print("ok", name)
    print("ops ok")


def pool() -> None:
    from tinygrad import Device, Tensor
    from tinygrad.engine import worker

    Device[Device.DEFAULT]
    rng = np.random.default_rng(7)
    x = rng.standard_normal((15, 25, 35)).astype(np.float32)
    tx = Tensor(x)
    var, moments = tx.var(), (tx * tx).sum(axis=2) - tx.sum(axis=2)
    Tensor.realize(var, moments)  # more than one kernel to compile: the pool compiles them
    print("pool", "yes" if worker.worker_pool is not None else "no")
    for name, got, want in (("var", var, x.var(ddof=1)),
                            ("moments", moments, (x * x).sum(axis=2) - x.sum(axis=2))):
        out = got.numpy()
        if not np.allclose(out, want, rtol=1e-4, atol=1e-4):
            raise SystemExit(f"{name}: max error {np.abs(out - want).max()}")
        print("ok", name)


def bad_pm4() -> None:
    from tinygrad import Device

    dev = Device[Device.DEFAULT]
    print("pid", os.getpid())
    q = dev.hw_compute_queue_t()
    q.q(dev.pm4.PACKET3(0x7E, 0), 0)  # opcode 0x7E: not a PM4 packet of the compute engine
    q.signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    try:
        dev.synchronize()
    except RuntimeError as exc:
        print("fault:", str(exc).splitlines()[0])
        return
    raise SystemExit("the malformed PM4 stream completed")


if __name__ == "__main__":
    {"ops": ops, "pool": pool, "bad-pm4": bad_pm4}[sys.argv[1]]()
