"""Skip only when a compiler toolchain is really absent, never because a compile failed.

A test that wraps `compiler.compile(...)` in `except Exception: pytest.skip(...)` turns a
compiler regression into a skip; these checks look for the tool alone, so the compile that
follows runs unguarded and its failure fails the test.
"""

from __future__ import annotations

import pytest

from amdgpu.errors import CompileError


def require_clang() -> None:
    """Skip when the ziglang wheel (clang and ld.lld for OpenCL C) is not installed."""
    from compiler.clang import zig_path

    try:
        zig_path()
    except CompileError as exc:
        pytest.skip(f"no clang for OpenCL C: {exc}")


def require_iree() -> None:
    """Skip when IREE's compiler (iree-base-compiler) is not installed."""
    from compiler.iree import iree_compile_path

    try:
        iree_compile_path()
    except CompileError as exc:
        pytest.skip(f"no iree-compile: {exc}")
