"""OpenCL C -> AMDGPU code objects (HSACO) with the clang and ld.lld of the `ziglang` wheel.

The wheel's `zig` binary is a multi-call driver: `zig clang ...` is clang 22 and
`zig ld.lld ...` is LLVM's linker, so we call it directly instead of `python -m ziglang`
(which costs a Python start-up per call). One source builds once per target id:

    zig clang -x cl -cl-std=CL2.0 -target amdgcn-amd-amdhsa -mcpu=<target id> -nogpulib
              -cl-no-stdinc -O2 -mcode-object-version=<4|5|6> -include amdgpu_opencl.h -c SRC
    zig ld.lld -shared OBJ -o OUT.hsaco

`-cl-no-stdinc` because the wheel ships no OpenCL headers: the work-item functions, barrier
and atomics come from compiler/kernels/amdgpu_opencl.h, which wraps AMDGPU builtins and the
code object v5 hidden arguments. `-nogpulib`: no ROCm device libraries. Code object v5 is
the default because ROCr older than 6.3 loads nothing newer; v6 on request.

Diagnostics: clang's own text, with the source path as given, becomes a CompileError whose
one-line message names the first error as `file:line:col: error: ...`; the full text is on
the exception's `diagnostics` attribute.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from ground.errors import CompileError

__all__ = [
    "HEADER",
    "CODE_OBJECT_VERSIONS",
    "zig_path",
    "clang_version",
    "compile_opencl",
    "first_error",
]

#: The built-in OpenCL header force-included into every OpenCL C compile.
HEADER = Path(__file__).with_name("kernels") / "amdgpu_opencl.h"
CODE_OBJECT_VERSIONS = (4, 5, 6)

# clang 20+ emits a callable copy of every OpenCL kernel (__clang_ocl_kern_imp_<name>); a
# kernel with a __local array then gets this backend warning for that copy, which nothing
# calls. It has no -W flag, so we drop it from the warnings we report.
_BENIGN_WARNINGS = ("local memory global used by non-kernel function",)
_DIAG = re.compile(
    r"^(?P<loc>[^\s:][^:]*:\d+:\d+): (?P<kind>fatal error|error|warning): (?P<msg>.*)$"
)
_TIMEOUT_S = 120


@functools.cache
def zig_path() -> Path:
    """The `zig` binary of the installed `ziglang` wheel (its clang and ld.lld)."""
    try:
        import ziglang
    except ImportError:
        raise CompileError(
            "the `ziglang` package is not installed; run `pip install ziglang` "
            "(it provides clang and ld.lld for OpenCL C)"
        ) from None
    path = Path(ziglang.__file__).with_name("zig")
    if not path.exists():
        raise CompileError(f"ziglang is installed but {path} is missing; reinstall ziglang")
    return path


@functools.cache
def clang_version() -> str:
    """'clang 22.1.8' (the version string that goes into cache keys)."""
    out = _run([str(zig_path()), "clang", "--version"], what="clang --version").stdout
    match = re.search(r"clang version (\S+)", out)
    return f"clang {match.group(1)}" if match else out.splitlines()[0].strip()


def _run(argv: Sequence[str], *, what: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            list(argv), capture_output=True, text=True, errors="replace",  # may quote non-UTF-8
            timeout=_TIMEOUT_S, cwd=cwd, check=False,
        )
    except subprocess.TimeoutExpired:
        raise CompileError(f"{what} took more than {_TIMEOUT_S} s; simplify the source") from None
    except OSError as exc:
        raise CompileError(f"cannot run {what}: {exc}; reinstall ziglang") from None


def first_error(diagnostics: str) -> str | None:
    """The first `file:line:col: error: message` line of clang's output, or None."""
    for line in diagnostics.splitlines():
        match = _DIAG.match(line.strip())
        if match and match.group("kind") != "warning":
            return f"{match.group('loc')}: error: {match.group('msg')}"
    return None


def _warnings(diagnostics: str) -> list[str]:
    found = []
    for line in diagnostics.splitlines():
        match = _DIAG.match(line.strip())
        if match and match.group("kind") == "warning":
            if not any(b in match.group("msg") for b in _BENIGN_WARNINGS):
                found.append(f"{match.group('loc')}: warning: {match.group('msg')}")
    return list(dict.fromkeys(found))


def _compile_error(tool: str, target: str, diagnostics: str) -> CompileError:
    first = first_error(diagnostics)
    count = sum(
        1 for line in diagnostics.splitlines()
        if (m := _DIAG.match(line.strip())) and m.group("kind") != "warning"
    )
    if first:
        more = f" (+{count - 1} more)" if count > 1 else ""
        text = f"{tool} ({target}): {first}{more}; fix the source and compile again"
    else:
        last = next((ln for ln in reversed(diagnostics.splitlines()) if ln.strip()), "failed")
        text = f"{tool} ({target}) failed: {last.strip()}"
    err = CompileError(text)
    err.diagnostics = diagnostics  # type: ignore[attr-defined]
    return err


def compile_opencl(
    source: str | os.PathLike,
    target: str,
    *,
    code_object_version: int = 5,
    defines: dict[str, str | int] | None = None,
    include_dirs: Iterable[str | os.PathLike] = (),
    extra_flags: Sequence[str] = (),
    warnings: list[str] | None = None,
) -> bytes:
    """Compile one OpenCL C file for one target id ("gfx1100", "gfx942:xnack-") to HSACO bytes.

    `warnings`, when given, receives clang's warnings as one-line strings. Raises
    CompileError carrying clang's diagnostics (file:line of the source as given).
    """
    path = _source(source, "OpenCL source", code_object_version)
    flags = [
        "-x", "cl", "-cl-std=CL2.0",
        "-target", "amdgcn-amd-amdhsa", f"-mcpu={target}",
        "-nogpulib", "-cl-no-stdinc", "-O2",
        f"-mcode-object-version={code_object_version}",
        f"-DAMDGPU_DIRECT_COV={code_object_version}",
        "-include", str(HEADER),
    ]
    for name, value in (defines or {}).items():
        flags.append(f"-D{name}={value}")
    for directory in include_dirs:
        flags.append(f"-I{directory}")
    flags.extend(extra_flags)
    return _compile_and_link(flags, path, target, warnings)


def compile_llvm_ir(source: str | os.PathLike, target: str, *,
                    code_object_version: int = 5) -> bytes:
    """Compile one LLVM IR file (.ll, triple amdgcn-amd-amdhsa) for one target id to HSACO
    bytes: for what no OpenCL builtin reaches (e.g. the llvm.amdgcn.image.atomic.*
    intrinsics). Raises CompileError carrying clang's diagnostics."""
    path = _source(source, "LLVM IR source", code_object_version)
    flags = ["-x", "ir", "-target", "amdgcn-amd-amdhsa", f"-mcpu={target}", "-nogpulib", "-O2",
             f"-mcode-object-version={code_object_version}"]
    return _compile_and_link(flags, path, target, None)


def _source(source: str | os.PathLike, kind: str, code_object_version: int) -> Path:
    """The source file's path, once the version is one clang emits and the file exists."""
    if code_object_version not in CODE_OBJECT_VERSIONS:
        raise CompileError(
            f"code object version {code_object_version} is not supported; use 4, 5 or 6"
        )
    path = Path(source)
    if not path.is_file():
        raise CompileError(f"{kind} {str(path)!r} does not exist; check the path")
    return path


def _compile_and_link(flags: list[str], path: Path, target: str,
                      warnings: list[str] | None) -> bytes:
    zig = str(zig_path())
    with tempfile.TemporaryDirectory(prefix="amdgpu-clang-") as tmp:
        obj = os.path.join(tmp, "kernel.o")
        out = os.path.join(tmp, "kernel.hsaco")
        done = _run([zig, "clang", *flags, "-c", str(path), "-o", obj], what="clang")
        if done.returncode != 0 or not os.path.exists(obj):
            raise _compile_error("clang", target, done.stderr + done.stdout)
        if warnings is not None:
            warnings.extend(_warnings(done.stderr))
        linked = _run([zig, "ld.lld", "-shared", obj, "-o", out], what="ld.lld")
        if linked.returncode != 0 or not os.path.exists(out):
            raise _compile_error("ld.lld", target, linked.stderr + linked.stdout)
        return Path(out).read_bytes()
