"""gfx1250's long branches: `s_add_pc_i64 .LBB0_3-.Lpost_addpc0` jumps to the address after
itself plus the signed 64-bit operand (clang 22's branch relaxation, forced here with
-amdgpu-s-branch-bits=4 so that a short kernel has them: a forward branch over the loop and
the loop's backward edge). The kernel runs with the loop taken (n=5) and skipped (n=2)
against the same arithmetic in Python."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from hsa.virtual.gfx11.testing import Harness, build_code_object

pytestmark = pytest.mark.isa_gfx12

SOURCE = Path(__file__).parent / "data" / "isa" / "gfx1250_long_branch.cl"
M32 = 0xFFFFFFFF


def _assembly() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "k.s"
        run = subprocess.run(
            [sys.executable, "-m", "ziglang", "clang", "-target", "amdgcn-amd-amdhsa",
             "-mcpu=gfx1250", "-mcode-object-version=5", "-cl-std=CL2.0", "-nogpulib",
             "-cl-no-stdinc", "-O2", "-mllvm", "-amdgpu-s-branch-bits=4", "-S", "-o",
             str(out), str(SOURCE)], capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        return out.read_text()


def _reference(x: int, n: int) -> int:
    if n > 3:
        for k in range(n):
            x = (x * 3 + k) & M32
            x ^= x >> 7
            x = (x + k * 5) & M32
            x = ((x << 3) | (x >> 29)) & M32
            x = (x - 0x9E3779B9) & M32
    return x


def test_s_add_pc_i64_branches_forward_and_back():
    asm = _assembly()
    assert asm.count("s_add_pc_i64") >= 2, "clang no longer relaxes these branches"
    h = Harness("gfx1250")
    code = h.load(build_code_object(asm, "assembler", mcpu="gfx1250"))
    start = np.arange(64, dtype=np.uint32) * np.uint32(2654435761)
    for n in (5, 2):
        buf = h.buffer(start)
        h.dispatch(code, "lb", (64,), (64,), [buf, n])
        got = h.read(buf, np.uint32, 64).tolist()
        assert got == [_reference(int(x), n) for x in start], n
