"""Our HSA dispatch against HIP's module launch on the same emulated GPU, same kernel, same
run: the host cost of getting one kernel launch to the GPU.

    python benchmarks/bench_hip_emulated.py [--launches N] [--replay N]

Both run on amdgpu:emulated: Debian's real ROCr 5.2.3 over the emulated AMD driver, and
Debian's libamdhip64 5.2.3 (through ctypes) over the same ROCr. The kernel is
a one-line fill (out[i] = value + i) for gfx90a, code object v4 (HIP 5.2 loads no v5);
saxpy_hidden's grid-stride loop does not finish as v4 on the gfx9 executor yet.

- ours: `dev.dispatch(kernel, n, 256, args)` of an amdgpu:emulated device (kernarg block,
  AQL packet, ROCr queue write index, doorbell);
- HIP: `hipModuleLaunchKernel(f, grid, block, 0, NULL, params, NULL)` on the null stream;
- replay: one submit of a recorded command buffer of N dispatches (ours only).

While a loop is timed the emulated device holds every doorbell (`EmulatedDevice.hold`), so
no kernel runs and no device thread competes with the publisher: the figures are host time
only. Then the device is released and both results are checked (y = a*x + y).

Needs hsa/virtual's gfx9 executor (the emulated GPU runs gfx90a code); without it, one line
says so and nothing is measured.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.hwlab.hip_launch import measure  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=500)
    ap.add_argument("--replay", type=int, default=5000)
    ap.add_argument("--target", default="gfx90a",
                    help="the emulated GPU (gfx942 etc. need ROCr 6.4: scripts/rocm6.sh)")
    opts = ap.parse_args(argv)
    r = measure(opts.launches, opts.replay, opts.target)
    if "skipped" in r:
        print(f"bench_hip_emulated: skipped: {r['skipped']}")
        return 0
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    from hsa.emulated import this_rocr

    rocr = this_rocr()
    print(f"amdgpu:emulated ({rocr.describe() if rocr else 'ROCr'} + HIP over the emulated "
          f"driver), {os.cpu_count()} cores, load {load}; kernel fill {r['target']}, "
          f"{r['launches']} launches")
    print(f"  our dispatch        {r['ours_us']:8.2f} us host per launch   results ok: "
          f"{r['ours_ok']}")
    print(f"  hipModuleLaunchKernel {r['hip_us']:6.2f} us host per launch   results ok: "
          f"{r['hip_ok']}")
    print(f"  HIP / ours          x{r['hip_us'] / r['ours_us']:.2f}")
    if "hip_python_us" in r:
        print(f"  hip-python hipModuleLaunchKernel {r['hip_python_us']:8.2f} us host per launch"
              f"   results ok: {r['hip_python_ok']}")
        print(f"  hip-python / ours   x{r['hip_python_us'] / r['ours_us']:.2f}")
    print(f"  replay of {r['replay']} dispatches: {r['replay_us'] / 1000:.2f} ms per submit "
          f"({r['replay_us'] / r['replay']:.3f} us per dispatch)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
