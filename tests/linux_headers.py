"""AMD definitions from the Linux kernel's source (Debian's `linux-source-6.1`, installed by
scripts/setup.sh), extracted once per machine into a cache directory, and a small C oracle:
`evaluate(headers, {key: C expression})` compiles the expressions against those headers with
gcc and returns their values, so tests compare our encoders with AMD's macros.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

TARBALL = Path("/usr/src/linux-source-6.1.tar.xz")
AMD = "drivers/gpu/drm/amd"
WANTED = (
    f"{AMD}/amdgpu/soc15d.h", f"{AMD}/amdgpu/nvd.h",
    f"{AMD}/amdgpu/vega10_sdma_pkt_open.h", f"{AMD}/amdgpu/navi10_sdma_pkt_open.h",
    f"{AMD}/amdgpu/sdma_v6_0_0_pkt_open.h",
    f"{AMD}/include/asic_reg/gc/gc_9_4_2_offset.h", f"{AMD}/include/asic_reg/gc/gc_11_0_0_offset.h",
    f"{AMD}/include/aldebaran_ip_offset.h", f"{AMD}/include/sienna_cichlid_ip_offset.h",
    f"{AMD}/include/soc15_hw_ip.h",
)


def headers_dir() -> Path:
    """The directory holding WANTED (relative paths kept); skips when the package is absent."""
    if not TARBALL.exists():
        pytest.skip(f"{TARBALL} is missing: install Debian's linux-source-6.1 "
                    "(scripts/setup.sh does) for AMD's packet and register headers")
    stat = TARBALL.stat()
    key = hashlib.sha256(f"{stat.st_size}:{stat.st_mtime_ns}:{WANTED}".encode()).hexdigest()[:12]
    root = Path(tempfile.gettempdir()) / f"amdgpu-direct-linux-headers-{key}"
    if (root / "complete").exists():
        return root
    staging = Path(tempfile.mkdtemp(prefix="linux-headers-"))
    prefix = "linux-source-6.1/"
    with tarfile.open(TARBALL, "r:xz") as tar:
        for member in tar:  # one pass through the archive
            name = member.name[len(prefix):] if member.name.startswith(prefix) else member.name
            if name in WANTED and member.isfile():
                target = staging / name
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(member)
                assert src is not None
                target.write_bytes(src.read())
    missing = [w for w in WANTED if not (staging / w).exists()]
    assert not missing, f"{TARBALL} lacks {missing}"
    (staging / "complete").write_text("ok\n")
    try:
        os.replace(staging, root)
    except OSError:  # another process finished first
        shutil.rmtree(staging, ignore_errors=True)
    return root


def evaluate(headers: list[str], expressions: dict[str, str], tmp: Path,
             prelude: str = "") -> dict[str, int]:
    """The value of each C expression (unsigned 64-bit) with `headers` included."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: the C oracle cannot be built")
    root = headers_dir()
    lines = ["#include <stdio.h>", "#include <stdint.h>", prelude]
    lines += [f'#include "{root / h}"' for h in headers]
    lines.append("int main(void) {")
    for key, expr in expressions.items():
        lines.append(f'  printf("%s %llu\\n", "{key}", (unsigned long long)({expr}));')
    lines.append("  return 0;\n}")
    src = tmp / "oracle.c"
    src.write_text("\n".join(lines))
    exe = tmp / "oracle"
    done = subprocess.run(["gcc", "-w", "-o", str(exe), str(src)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=30)
    return {k: int(v) for k, v in (line.split() for line in out.stdout.splitlines())}
