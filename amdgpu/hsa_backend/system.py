"""One HSA provider per system, shared by the devices opened on it.

"rocr" is the real runtime (every ROCr GPU agent is a device of it); "virtual:gfx1100,..."
is one virtual system whose GPU agents are devices of it; "emulated:4xgfx90a" the real
ROCr over the emulated driver with that many GPU nodes. Devices of one system share
memory and signals, so cross-device copies and cross-lane waits between them work. The
provider shuts down when the last device of its system closes.
"""

from __future__ import annotations

import threading
from typing import Any

_lock = threading.Lock()
_systems: dict[str, list[Any]] = {}  # key -> [provider, refcount]


def _create(key: str) -> Any:
    if key == "rocr":
        from hsa.emulated import refuse_system_rocr
        from hsa.rocr import RocrProvider

        refuse_system_rocr()  # this process's ROCr may run over the emulated driver
        return RocrProvider()
    if key.startswith("emulated:"):
        from hsa.emulated import EmulatedProvider
        from hsa.virtual.topology import expand_gpus

        gpus = expand_gpus(key.split(":", 1)[1].split(","))  # "gfx90a" or "4xgfx90a"
        return EmulatedProvider(node=gpus)
    if key.startswith("virtual:"):
        from hsa.virtual import VirtualProvider

        return VirtualProvider(gpus=tuple(key.split(":", 1)[1].split(",")))
    raise ValueError(f"unknown HSA system {key!r}")


def acquire(key: str) -> Any:
    """The provider of system `key`, created on first use (raises HsaUnavailable etc.)."""
    with _lock:
        entry = _systems.get(key)
        if entry is None:
            entry = _systems[key] = [_create(key), 0]
        entry[1] += 1
        return entry[0]


def release(key: str) -> None:
    with _lock:
        entry = _systems.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] > 0:
            return
        del _systems[key]
    entry[0].shut_down()


def peek(key: str) -> Any | None:
    """The provider if some device holds it open (no new reference)."""
    with _lock:
        entry = _systems.get(key)
        return entry[0] if entry else None
