"""A reader of C UAPI headers (kfd_ioctl.h, amdgpu_drm.h) independent of the code under test,
and a gcc oracle: `c_layout` compiles a program against a header and returns what C says
about its structs (sizeof, each reachable member's offsetof and size) and constants.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def read_structs(text: str) -> dict[str, list[str]]:
    """struct name -> the names offsetof can reach (members of anonymous unions/structs
    count as the struct's own), in declaration order."""
    text = _strip_comments(text)
    out: dict[str, list[str]] = {}
    for m in re.finditer(r"^struct (\w+) \{", text, flags=re.M):
        depth, i, start = 1, m.end(), m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        out[m.group(1)] = _members(text[start:i - 1])
    return out


def _members(body: str) -> list[str]:
    names: list[str] = []
    depth, inner, pos = 0, "", 0
    for tok in re.finditer(r"[{};]", body):
        chunk = body[pos:tok.start()]
        pos = tok.end()
        if tok.group() == "{":
            depth += 1
            if depth == 1:
                inner = ""
            else:
                inner += chunk + "{"
            continue
        if depth >= 1 and tok.group() == ";":
            inner += chunk + ";"
            continue
        if tok.group() == "}":
            depth -= 1
            if depth == 0:
                if not body[pos:].split(";")[0].strip():  # "};": anonymous, its members
                    names.extend(_members(inner))  # are ours ("} name;": name is ours)
            else:
                inner += chunk + "}"
            continue
        decl = chunk.strip()
        if decl and not decl.startswith("}"):
            m = re.search(r"(\w+)\s*((?:\[[^\]]*\]\s*)*)$", decl)
            if m and m.group(2).strip() != "[]":  # a flexible array member has no size
                names.append(m.group(1))
    return names


def read_defines(text: str) -> set[str]:
    text = _strip_comments(text)
    names = set(re.findall(r"^#define\s+(\w+)\s+\S", text, flags=re.M))
    for body in re.findall(r"enum\s+\w*\s*\{(.*?)\}", text, flags=re.S):
        names.update(re.findall(r"^\s*(\w+)\s*(?:=|,|$)", body, flags=re.M))
    return {n for n in names if not n.endswith("_H_INCLUDED")}


def c_layout(work: Path, include: str, structs: dict[str, list[str]], constants: list[str],
             flags: tuple[str, ...] = ()) -> tuple[dict[str, dict[str, tuple[int, int]]],
                                                   dict[str, int]]:
    """Compile `#include <include>` under `work` (with -I work and `flags`) and read back
    {struct: {"-": (0, sizeof), field: (offset, size)}} and {constant: value (as long long)}."""
    lines = ["#include <stdio.h>", "#include <stddef.h>", f"#include <{include}>",
             "int main(void) {"]
    for name, fields in structs.items():
        lines.append(f'printf("S {name} - 0 %zu\\n", sizeof(struct {name}));')
        for f in fields:
            lines.append(f'printf("S {name} {f} %zu %zu\\n", offsetof(struct {name}, {f}), '
                         f"sizeof(((struct {name} *)0)->{f}));")
    for n in constants:
        lines.append(f'printf("C {n} %lld\\n", (long long)({n}));')
    lines += ["return 0;", "}"]
    (work / "oracle.c").write_text("\n".join(lines) + "\n")
    exe = work / "oracle"
    built = subprocess.run(["gcc", "-I", str(work), *flags, "-o", str(exe),
                            str(work / "oracle.c")], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    layout: dict[str, dict[str, tuple[int, int]]] = {}
    values: dict[str, int] = {}
    for line in out.splitlines():
        kind, *rest = line.split()
        if kind == "S":
            layout.setdefault(rest[0], {})[rest[1]] = (int(rest[2]), int(rest[3]))
        else:
            values[rest[0]] = int(rest[1])
    return layout, values


def sid_file(relpath: str) -> Path | None:
    """`relpath` inside a finished Debian sid ROCm root filesystem (bash scripts/rocm6.sh
    --build; one that is still being built has no recipe file yet), or None."""
    import glob

    for root in sorted(glob.glob("/var/cache/amdgpu-direct/rocm6-sid-*"), reverse=True):
        if Path(root, "etc/amdgpu-direct-recipe").exists() and Path(root, relpath).exists():
            return Path(root, relpath)
    return None
