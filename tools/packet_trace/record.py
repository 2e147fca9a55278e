"""`packet-trace record -o FILE -- COMMAND...`: run COMMAND with AMDGPU_TRACE=FILE (the
packets layer opens its trace writer from it at the first ring) and pass its exit status on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from rich.console import Console

from ground.errors import AmdgpuError, TraceFormatError

from .scan import scan


def summarize(path) -> tuple[int, int, str | None]:
    """(records, packets, format error or None) of a trace file."""
    records = packets = 0
    try:
        for chunk in scan(path, with_tails=False):
            records += chunk.records
            packets += int(chunk.packets.shape[0])
    except TraceFormatError as e:
        return records, packets, str(e)
    return records, packets, None


def _check_writable(given: str, path: str) -> None:
    """Before the command runs: `path` can be created as a regular file here (a stale
    trace there is removed, so it cannot pass for this run's). Otherwise the command would
    run, fail to open the trace and say so, and packet-trace would add its own line."""
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise AmdgpuError(f"cannot write {given}: folder {folder} does not exist; "
                          "create it or choose another -o path")
    if os.path.lexists(path) and not os.path.isfile(path):
        raise AmdgpuError(f"cannot write {given}: it exists and is not a regular file; "
                          "choose another -o path")
    try:
        if os.path.lexists(path):
            os.remove(path)
        with open(path, "xb"):
            pass
        os.remove(path)  # the command's trace writer creates it
    except OSError as e:
        raise AmdgpuError(f"cannot write {given}: {e.strerror}; choose another -o path"
                          ) from None


def run(args, console: Console) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise AmdgpuError("record needs a command: packet-trace record -o run.aqltrace -- CMD...")
    path = os.path.abspath(args.output)
    _check_writable(args.output, path)
    env = dict(os.environ, AMDGPU_TRACE=path)
    try:
        proc = subprocess.run(command, env=env)
    except FileNotFoundError:
        raise AmdgpuError(f"cannot run {command[0]!r}: no such program") from None
    code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        print(f"packet-trace: the command was killed by {name}", file=sys.stderr)
    if not os.path.exists(path):
        # A failed command said why itself: no guess after its error line, only the fact.
        why = (f"the command failed (exit status {code}) before it created a queue" if code
               else "the command created no queue/ring, or is not an amdgpu-direct program")
        console.print(f"packet-trace: no trace written to {args.output}: {why}",
                      highlight=False)
        return code
    records, packets, error = summarize(path)
    console.print(f"packet-trace: {args.output}: {records} records, {packets} packets "
                  f"(command exit status {code})", highlight=False)
    if error:
        console.print(f"packet-trace: {error}", highlight=False)
    return code
