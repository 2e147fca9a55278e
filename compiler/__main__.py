"""`python -m compiler <subcommand>`: tools over code objects and kernel bundles.

Each subcommand is one `add_<name>_command(subparsers)` function that registers its parser
and sets `func`; add a new one to SUBCOMMANDS. Errors print one line to stderr and exit 1;
`--debug` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from ground.errors import AmdgpuError, CodeObjectError, CompileError


# --------------------------------------------------------------------------------------------
# inspect
# --------------------------------------------------------------------------------------------
def _code_object_summary(co: Any) -> dict[str, Any]:
    return {
        "target_id": co.target_id,
        "code_object_version": co.code_object_version,
        "mach": co.mach,
        "e_flags": co.e_flags,
        "elf_type": "ET_REL" if co.is_relocatable else "ET_DYN",
        "generic_version": co.generic_version,
        "segments": [dataclasses.asdict(s) for s in co.segments],
        "relocations": len(co.relocations),
        "kernels": {
            name: {
                "symbol": k.symbol,
                "descriptor_address": k.descriptor_address,
                "kernarg_segment_size": k.kernarg_segment_size,
                "kernarg_segment_align": k.kernarg_segment_align,
                "group_segment_fixed_size": k.group_segment_fixed_size,
                "private_segment_fixed_size": k.private_segment_fixed_size,
                "wavefront_size": k.wavefront_size,
                "sgpr_count": k.sgpr_count,
                "vgpr_count": k.vgpr_count,
                "agpr_count": k.agpr_count,
                "max_flat_workgroup_size": k.max_flat_workgroup_size,
                "reqd_workgroup_size": k.reqd_workgroup_size,
                "uniform_work_group_size": k.uniform_work_group_size,
                "args": [dataclasses.asdict(a) for a in k.args],
                "descriptor": k.descriptor.fields(),
            }
            for name, k in co.kernels.items()
        },
    }


_DESCRIPTOR_ROWS = (
    "kernarg_size", "group_segment_fixed_size", "private_segment_fixed_size",
    "kernel_code_entry_byte_offset", "compute_pgm_rsrc1", "compute_pgm_rsrc2",
    "compute_pgm_rsrc3", "kernel_code_properties", "kernarg_preload", "wavefront_size32",
    "user_sgpr_count", "enable_sgpr_private_segment_buffer", "enable_sgpr_dispatch_ptr",
    "enable_sgpr_queue_ptr", "enable_sgpr_kernarg_segment_ptr", "enable_sgpr_dispatch_id",
    "enable_sgpr_flat_scratch_init", "enable_private_segment", "enable_sgpr_workgroup_id_x",
    "enable_sgpr_workgroup_id_y", "enable_sgpr_workgroup_id_z", "enable_vgpr_workitem_id",
    "granulated_workitem_vgpr_count", "granulated_wavefront_sgpr_count", "granulated_lds_size",
    "kernarg_preload_length",
)
_HEX_FIELDS = {"compute_pgm_rsrc1", "compute_pgm_rsrc2", "compute_pgm_rsrc3",
               "kernel_code_properties", "kernarg_preload"}


def _render_code_object(console: Any, co: Any, title: str) -> None:
    from rich.table import Table

    head = Table(title=title, show_header=False, box=None)
    head.add_row("target id", co.target_id)
    head.add_row("code object", f"v{co.code_object_version}"
                 + (f" (generic v{co.generic_version})" if co.generic_version else ""))
    head.add_row("e_flags", f"0x{co.e_flags:x} (EF_AMDGPU_MACH 0x{co.mach:x})")
    head.add_row("ELF type", "relocatable (.o)" if co.is_relocatable else "shared (linked)")
    head.add_row("segments", ", ".join(
        f"0x{s.vaddr:x}+0x{s.memsz:x} {'R' if s.flags & 4 else ''}{'W' if s.flags & 2 else ''}"
        f"{'X' if s.flags & 1 else ''}" for s in co.segments) or "none")
    head.add_row("relocations", str(len(co.relocations)))
    console.print(head)

    kt = Table(title="kernels")
    for col in ("name", "kernarg", "align", "LDS", "scratch", "wave", "SGPR", "VGPR",
                "max WG", "args (explicit+hidden)"):
        kt.add_column(col, justify="left" if col == "name" else "right")
    for k in co.kernels.values():
        kt.add_row(k.name, str(k.kernarg_segment_size), str(k.kernarg_segment_align),
                   str(k.group_segment_fixed_size), str(k.private_segment_fixed_size),
                   str(k.wavefront_size), str(k.sgpr_count), str(k.vgpr_count),
                   str(k.max_flat_workgroup_size),
                   f"{len(k.explicit_args)}+{len(k.hidden_args)}")
    console.print(kt)

    for k in co.kernels.values():
        at = Table(title=f"{k.name}: arguments")
        for col in ("offset", "size", "kind", "name", "type", "address space", "access"):
            at.add_column(col, justify="right" if col in ("offset", "size") else "left",
                          no_wrap=col == "kind")
        for a in k.args:
            style = "dim" if a.is_hidden else None
            at.add_row(str(a.offset), str(a.size), a.value_kind, a.name or "",
                       a.type_name or "", a.address_space or "", a.actual_access or "",
                       style=style)
        console.print(at)
        fields = k.descriptor.fields()
        dt = Table(title=f"{k.name}: kernel descriptor {k.symbol} @ 0x{k.descriptor_address:x}",
                   show_header=False)
        dt.add_column("field")
        dt.add_column("value", justify="right")
        for name in _DESCRIPTOR_ROWS:
            value = fields[name]
            dt.add_row(name, f"0x{value:x}" if name in _HEX_FIELDS else str(value))
        console.print(dt)


def _console() -> Any:
    """A rich console; wide when writing to a pipe or file so names are not cut."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=160)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": len(value)}
    return value


#: The largest file `inspect` reads: code objects are kilobytes, fat binaries megabytes.
MAX_INPUT_BYTES = 1 << 30


def read_input_file(path: Path, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes: a device (/dev/zero), a FIFO or
    a directory would be read until memory runs out or block, so they are refused first."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (regular files ignore it).
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a character device"
                        if stat.S_ISCHR(st.st_mode) else "a block device"
                        if stat.S_ISBLK(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                        else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
                raise CodeObjectError(f"cannot read {path}: it is {kind}, not a file; pass a "
                                      "code object (.hsaco/.co/.o) or a kernel bundle")
            if st.st_size > limit:
                raise CodeObjectError(
                    f"cannot read {path}: {st.st_size} bytes, more than the {limit >> 20} MiB "
                    "a code object or bundle may have; pass the code object itself")
            data = f.read(limit + 1)
    except IsADirectoryError:
        raise CodeObjectError(f"cannot read {path}: it is a directory, not a file; pass a "
                              "code object (.hsaco/.co/.o) or a kernel bundle") from None
    except OSError as exc:
        raise CodeObjectError(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > limit:  # grew while being read
        raise CodeObjectError(f"cannot read {path}: more than {limit >> 20} MiB")
    return data


def cmd_inspect(args: argparse.Namespace) -> int:
    from hsa.abi.codeobject import is_offload_bundle, read_code_object

    from .bundle import KernelBundle, is_bundle

    path = Path(args.file)
    data = read_input_file(path)

    if is_bundle(data) or is_offload_bundle(data):
        bundle = (KernelBundle.from_bytes(data) if is_bundle(data)
                  else KernelBundle.from_code_objects(data, path.name))
        parsed = [(v, read_code_object(v.data)) for v in bundle.variants if v.kind == "hsaco"]
        if args.json:
            doc = {
                "file": str(path), "kind": "bundle", "name": bundle.name,
                "source_hash": bundle.source_hash,
                "variants": [{"kind": v.kind, "target": v.target, "abi": v.abi,
                              "bytes": len(v.data), "info": v.info} for v in bundle.variants],
                "code_objects": {v.target: _code_object_summary(co) for v, co in parsed},
                "program": bundle.program,
            }
            print(json.dumps(_jsonable(doc), indent=2))
            return 0
        from rich.table import Table

        console = _console()
        vt = Table(title=f"bundle {bundle.name!r} ({path}) source {bundle.source_hash[:16]}")
        for col in ("kind", "target", "abi", "bytes"):
            vt.add_column(col)
        for v in bundle.variants:
            vt.add_row(v.kind, v.target, v.abi or "", str(len(v.data)))
        console.print(vt)
        if bundle.program:
            console.print(f"program: {len(bundle.program.get('dispatches', []))} dispatches")
        for v, co in parsed:
            _render_code_object(console, co, f"{v.target}")
        return 0

    co = read_code_object(data)
    if args.json:
        doc = {"file": str(path), "kind": "code_object"} | _code_object_summary(co)
        print(json.dumps(_jsonable(doc), indent=2))
        return 0
    _render_code_object(_console(), co, f"{path}")
    return 0


def add_inspect_command(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "inspect", parents=parents,
        help="show kernels, arguments and descriptors of a code object or bundle",
        description="Show the kernels, arguments and kernel-descriptor fields of an AMDGPU "
                    "code object (.hsaco/.co/.o) or a kernel bundle.")
    p.add_argument("file", help="code object or kernel bundle")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=cmd_inspect)


# --------------------------------------------------------------------------------------------
# compile (helper E)
# --------------------------------------------------------------------------------------------
def cmd_compile(args: argparse.Namespace) -> int:
    import time

    from . import compile as compile_source

    abis = tuple(a for a in args.abi.split(",") if a)
    start = time.perf_counter()
    bundle = compile_source(
        args.source, targets=args.target, abi=abis, code_object_version=args.cov,
        cache=False if args.no_cache else True, vulkan_target=args.vulkan_target,
    )
    out = Path(args.output) if args.output else Path(f"{bundle.name}.bundle")
    if out.is_dir():
        raise CompileError(f"-o {out} is a folder: name the bundle file (-o {out / out.name}"
                           f"{'' if out.suffix else '.bundle'}) or leave -o out")
    bundle.save(out)
    seconds = time.perf_counter() - start
    dispatches = ""
    if bundle.program:
        dispatches = f", {len(bundle.program['dispatches'])} dispatches"
    print(f"{out}: {bundle.name} -> {bundle.describe()}{dispatches} ({seconds:.1f} s)")
    return 0


def add_compile_command(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "compile", parents=parents,
        help="compile an .mlir/.cl source or library kernel into a kernel bundle",
        description="Compile an MLIR program (IREE: HSACO per AMD target, SPIR-V per Vulkan "
                    "ABI) or OpenCL C kernels (clang: HSACO) into a kernel bundle.")
    p.add_argument("source", help="a .mlir or .cl file, or a library kernel name (saxpy, "
                                  "chain_<N>, fill, ...)")
    p.add_argument("--target", "-t", default=None,
                   help="comma-separated targets: gfx names, aliases, target ids, 'vulkan' "
                        "(default: gfx950,gfx1250,gfx1100,gfx942,gfx1201,vulkan; Vulkan is "
                        "skipped for OpenCL C)")
    p.add_argument("-o", "--output", help="bundle file to write (default: NAME.bundle)")
    p.add_argument("--abi", default="descriptors,bda",
                   help="Vulkan dispatch ABIs (default: descriptors,bda)")
    p.add_argument("--cov", type=int, default=5, choices=(5, 6),
                   help="code object version (6: OpenCL C only)")
    p.add_argument("--vulkan-target", default=None,
                   help="IREE Vulkan target (default: portable)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the cache")
    p.set_defaults(func=cmd_compile)


#: One registration function per subcommand: f(subparsers, parents).
SUBCOMMANDS: list[Callable[[Any, list[argparse.ArgumentParser]], None]] = [
    add_inspect_command, add_compile_command,
]


class OneLineParser(argparse.ArgumentParser):
    """argparse with usage errors as one line (cause + next step) instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see {self.prog} --help\n")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the traceback on errors")
    parser = OneLineParser(prog="python -m compiler", parents=[common],
                                     description="amdgpu-direct compiler tools")
    parser.set_defaults(debug=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in SUBCOMMANDS:
        register(sub, [common])
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (AmdgpuError, OSError) as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
