"""A real Slurm on this machine, for tests and CI: Debian's munge, slurmctld and slurmd
(installed with apt-get when missing), one controller and two node daemons on localhost
(`lab1`, `lab2`: distinct NodeName and Port, which Debian's slurmd build allows), partition
`lab`. Everything lives in one folder: slurm.conf, state, spool, logs, pid files.

    python -m tools.hwlab.slurm_local start DIR    # prints SLURM_CONF=DIR/slurm.conf
    python -m tools.hwlab.slurm_local stop DIR

`stop` ends only the daemons this folder's pid files name (and munged if `start` started it).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

PACKAGES = ("munge", "slurmctld", "slurmd", "slurm-client")
NODES = ("lab1", "lab2")
PARTITION = "lab"


class SlurmSetupError(RuntimeError):
    """The local cluster could not be installed or started; the message says which step."""


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def install() -> None:
    if all(shutil.which(b) for b in ("munged", "slurmctld", "slurmd", "sbatch", "sinfo")):
        return
    if os.geteuid() != 0:
        raise SlurmSetupError("Slurm is not installed and this is not root: apt-get install "
                              + " ".join(PACKAGES))
    r = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", *PACKAGES],
                       capture_output=True, text=True, timeout=900,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["?"]
        raise SlurmSetupError(f"apt-get install {' '.join(PACKAGES)} failed: {tail[0]}")


def write_conf(folder: Path) -> Path:
    ctld, slurmd_port, *node_ports = _free_ports(2 + len(NODES))
    user = "root" if os.geteuid() == 0 else os.environ.get("USER", "root")
    nodes = "\n".join(
        f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={p} CPUs=1 "
        f"RealMemory=1000 State=UNKNOWN" for n, p in zip(NODES, node_ports, strict=True))
    conf = folder / "slurm.conf"
    conf.write_text(f"""\
ClusterName=hwlab
SlurmctldHost=localhost
SlurmctldPort={ctld}
SlurmdPort={slurmd_port}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool-%n
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd-%n.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
{nodes}
PartitionName={PARTITION} Nodes={','.join(NODES)} Default=YES MaxTime=30 State=UP
""")
    (folder / "state").mkdir(exist_ok=True)
    return conf


def _munge_works() -> bool:
    try:
        cred = subprocess.run(["munge", "-n"], capture_output=True, timeout=10)
        return cred.returncode == 0 and subprocess.run(
            ["unmunge"], input=cred.stdout, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _run(cmd: list[str], env: dict) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    if r.returncode != 0:
        raise SlurmSetupError(f"{' '.join(cmd)} exited {r.returncode}: "
                              f"{(r.stderr or r.stdout).strip()[-300:]}")


def start(folder: str | Path, timeout_s: float = 60.0) -> Path:
    """Install when missing, write the conf, start munged (if none answers), slurmctld and
    the node daemons; return once sinfo shows every node idle. Returns slurm.conf's path."""
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    install()
    conf = write_conf(folder)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    if not _munge_works():
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown("/run/munge", "munge", "munge")
        _run(["munged", "--force"], env)  # it daemonizes; its pid file is /run/munge/munged.pid
        (folder / "started-munged").write_text("yes\n")
    _run(["slurmctld", "-f", str(conf)], env)
    for node in NODES:
        _run(["slurmd", "-f", str(conf), "-N", node], env)
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        r = subprocess.run(["sinfo", "-h", "-N", "-p", PARTITION, "-o", "%N %t"],
                           capture_output=True, text=True, timeout=30, env=env)
        last = (r.stdout or r.stderr).strip()
        states = dict(line.split() for line in r.stdout.splitlines() if line.strip())
        if sorted(states) == sorted(NODES) and all(s == "idle" for s in states.values()):
            return conf
        time.sleep(0.5)
    stop(folder)
    raise SlurmSetupError(f"the local Slurm did not come up in {timeout_s:.0f} s (sinfo: "
                          f"{last or 'nothing'}); see the logs in {folder}")


def _kill_pidfile(path: Path) -> None:
    try:
        pid = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop(folder: str | Path) -> None:
    folder = Path(folder)
    for node in NODES:
        _kill_pidfile(folder / f"slurmd-{node}.pid")
    _kill_pidfile(folder / "slurmctld.pid")
    if (folder / "started-munged").exists():
        _kill_pidfile(Path("/run/munge/munged.pid"))
        (folder / "started-munged").unlink()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: python -m tools.hwlab.slurm_local start|stop DIR", file=sys.stderr)
        return 2
    try:
        if argv[0] == "start":
            print(f"SLURM_CONF={start(argv[1])}")
        else:
            stop(argv[1])
    except (SlurmSetupError, OSError, subprocess.TimeoutExpired) as e:
        print(f"slurm_local: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
