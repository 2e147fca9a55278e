"""The virtual system's agents and their memory pools, as records: what the provider
creates and the queues and loader are handed (they never reach back into the provider)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hsa.provider import AgentInfo, PoolInfo


@dataclass
class Pool:
    """A memory pool of an agent and the bytes allocated from it."""

    info: PoolInfo
    used: int = 0


@dataclass
class Agent:
    """A CPU or GPU agent: its HSA info, ISA family, LDS size and pools."""

    info: AgentInfo
    family: str = ""  # "gfx11" for a GPU; "" for the CPU
    lds_size: int = 0
    pools: list[Pool] = field(default_factory=list)
