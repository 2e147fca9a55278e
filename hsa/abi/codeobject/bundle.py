"""Clang offload bundles (`hipcc --genco`): entries read, one AMDGPU object unwrapped."""

from __future__ import annotations

import struct

from ground.errors import CodeObjectError

from .elf import _unpack

_OFFLOAD_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
_COMPRESSED_OFFLOAD_MAGIC = b"CCOB"


# --------------------------------------------------------------------------------------------
# Offload bundles (hipcc --genco)
# --------------------------------------------------------------------------------------------
def is_offload_bundle(data: bytes) -> bool:
    """Does `data` start like a clang offload bundle (plain or compressed)?"""
    return data.startswith((_OFFLOAD_MAGIC, _COMPRESSED_OFFLOAD_MAGIC))


def read_offload_bundle(data: bytes) -> dict[str, bytes]:
    """Entries of a clang offload bundle, {bundle entry id: bytes}. Entry ids look like
    "hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-"."""
    if data[:4] == _COMPRESSED_OFFLOAD_MAGIC:
        raise CodeObjectError(
            "compressed clang offload bundle (CCOB): unbundle it first with "
            "`clang-offload-bundler --unbundle` or rebuild without --offload-compress"
        )
    if not data.startswith(_OFFLOAD_MAGIC):
        raise CodeObjectError("not a clang offload bundle (no __CLANG_OFFLOAD_BUNDLE__ magic)")
    pos = len(_OFFLOAD_MAGIC)
    (count,) = _unpack(struct.Struct("<Q"), data, pos, "offload bundle header")
    pos += 8
    if count > 4096:
        raise CodeObjectError(f"corrupt offload bundle: {count} entries claimed")
    entries: dict[str, bytes] = {}
    for _ in range(count):
        offset, size, id_len = _unpack(struct.Struct("<QQQ"), data, pos, "offload bundle entry")
        pos += 24
        if pos + id_len > len(data):
            raise CodeObjectError(f"truncated offload bundle: entry id at offset 0x{pos:x}")
        entry_id = data[pos:pos + id_len].decode("utf-8", "replace")
        pos += id_len
        if offset + size > len(data):
            raise CodeObjectError(
                f"truncated offload bundle: entry {entry_id!r} at offset 0x{offset:x} "
                f"size {size} runs past the end ({len(data)} bytes)"
            )
        entries[entry_id] = bytes(data[offset:offset + size])
    return entries


def _unwrap_offload_bundle(data: bytes) -> bytes:
    entries = read_offload_bundle(data)
    gpu = {k: v for k, v in entries.items() if "amdgcn" in k and v}
    if len(gpu) == 1:
        return next(iter(gpu.values()))
    if not gpu:
        raise CodeObjectError(
            f"clang offload bundle holds no AMDGPU code object (entries: {', '.join(entries)})"
        )
    raise CodeObjectError(
        f"clang offload bundle holds {len(gpu)} AMDGPU code objects "
        f"({', '.join(gpu)}); pick one with hsa.abi.codeobject.read_offload_bundle"
    )

