"""The virtual node's topology: how many GPUs, their UUIDs, which are visible, and the links
between agents as ROCr reports them through hsa_amd_agent_memory_pool_get_info.

The link model follows what KFD's CRAT/topology gives ROCr on real nodes: a GPU reaches the
host over one PCIe hop (KFD's io-link weight 20); GPUs of one XGMI hive (the MI parts:
gfx90a, gfx942, gfx950 of the same target) reach each other over one XGMI hop (weight 15);
other GPU pairs go through the host, two PCIe hops (a NUMA distance of 40 in all). Bandwidths
are the nominal figures of the parts (MI300X: 64 GB/s per XGMI link; PCIe 4.0 x16: 32 GB/s),
for `hwlab devices`; the virtual copy engine does not slow copies down to them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

from hsa.provider import LinkInfo, LinkType

XGMI_TARGETS = ("gfx90a", "gfx942", "gfx950")
PCIE_WEIGHT = 20
XGMI_WEIGHT = 15
_PCIE: dict[str, Any] = dict(min_latency=1000, max_latency=2000, min_bandwidth=32000,
                             max_bandwidth=32000)
_XGMI: dict[str, Any] = dict(min_latency=400, max_latency=800, min_bandwidth=64000,
                             max_bandwidth=64000)
_COUNT_RE = re.compile(r"^([1-9][0-9]*)x(gfx[0-9a-f]+)$")
MAX_GPUS = 64


def expand_gpus(names: Sequence[str]) -> list[str]:
    """"8xgfx942" -> eight "gfx942"; other names unchanged."""
    out: list[str] = []
    for name in names:
        m = _COUNT_RE.match(name.strip())
        if m:
            out.extend([m.group(2)] * int(m.group(1)))
        else:
            out.append(name.strip())
    return out


def compact_gpus(gpus: Sequence[str]) -> str:
    """The spec text of a GPU list: "8xgfx942" for 8 equal targets, else comma-separated."""
    if len(gpus) > 1 and len(set(gpus)) == 1:
        return f"{len(gpus)}x{gpus[0]}"
    return ",".join(gpus)


def gpu_uuid(target: str, ordinal: int) -> str:
    """A stable UUID for GPU `ordinal` of a virtual node, in ROCr's format ("GPU-" and
    KFD's 64-bit unique id as 16 hex digits)."""
    digest = hashlib.blake2b(f"amdgpu-direct virtual {target} {ordinal}".encode(),
                             digest_size=8).digest()
    return "GPU-" + digest.hex()


def visible_gpus(uuids: Sequence[str], env: str | None) -> list[int]:
    """The ordinals ROCR_VISIBLE_DEVICES selects, in its order (all when unset). Tokens are
    ordinals or UUIDs; as in ROCr, parsing stops at the first token that names no GPU, and a
    GPU listed twice counts once."""
    if env is None:
        return list(range(len(uuids)))
    out: list[int] = []
    for token in env.split(","):
        token = token.strip()
        if token.isdigit() and int(token) < len(uuids):
            index = int(token)
        elif token.upper().startswith("GPU-") and token.lower() in (u.lower() for u in uuids):
            index = [u.lower() for u in uuids].index(token.lower())
        else:
            break
        if index not in out:
            out.append(index)
    return out


def xgmi_peers(a: str, b: str) -> bool:
    """Whether two GPUs of the node share an XGMI hive."""
    return a == b and a in XGMI_TARGETS


def gpu_to_host() -> list[LinkInfo]:
    return [LinkInfo(LinkType.PCIE, PCIE_WEIGHT, **_PCIE, atomic_32bit=True,
                     atomic_64bit=True, coherent=True)]


def gpu_to_gpu(a: str, b: str) -> list[LinkInfo]:
    if xgmi_peers(a, b):
        return [LinkInfo(LinkType.XGMI, XGMI_WEIGHT, **_XGMI, atomic_32bit=True,
                         atomic_64bit=True, coherent=True)]
    hop = LinkInfo(LinkType.PCIE, PCIE_WEIGHT, **_PCIE)
    return [hop, hop]
