"""llvm-readelf-19 as an oracle for code-object metadata (not a test module: the reader's
tests and the foreign-object tests import it).

`llvm_readelf_metadata(path)` runs `llvm-readelf-19 --notes` and parses the YAML subset it
prints for AMDGPU metadata (maps, lists, scalars) into plain dicts and lists.
"""

from __future__ import annotations

import subprocess


def _scalar(text: str):
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text, 0)
    except ValueError:
        return text


def _parse_yaml_block(lines: list[tuple[int, str]], i: int, indent: int):
    """The YAML subset llvm-readelf prints for AMDGPU metadata: maps, lists, scalars."""
    if lines[i][1].startswith("- "):
        items = []
        while i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("- "):
            rest = lines[i][1][2:]
            if ":" in rest and not rest.startswith("'"):
                lines[i] = (indent + 2, rest)  # the item's first key, one level deeper
                value, i = _parse_yaml_block(lines, i, indent + 2)
            else:
                value, i = _scalar(rest), i + 1
            items.append(value)
        return items, i
    out = {}
    while i < len(lines) and lines[i][0] == indent and not lines[i][1].startswith("- "):
        key, _, rest = lines[i][1].partition(":")
        i += 1
        if rest.strip():
            out[key] = _scalar(rest)
        elif i < len(lines) and (lines[i][0] > indent or lines[i][1].startswith("- ")):
            out[key], i = _parse_yaml_block(lines, i, lines[i][0])
        else:
            out[key] = None
    return out, i


def llvm_readelf_metadata(path) -> dict:
    text = subprocess.run(["llvm-readelf-19", "--notes", str(path)], capture_output=True,
                          text=True, check=True).stdout
    body = text.split("---\n", 1)[1].split("\n...", 1)[0]
    lines = [(len(ln) - len(ln.lstrip(" ")), ln.strip()) for ln in body.splitlines()
             if ln.strip()]
    meta, _ = _parse_yaml_block(lines, 0, 0)
    return meta
