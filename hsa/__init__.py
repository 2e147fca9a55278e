"""One HSA interface (`hsa.provider.HsaProvider`), two providers: `hsa.rocr` (ctypes over
libhsa-runtime64, real AMD GPUs) and `hsa.virtual` (an in-process virtual AMD system)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ground.errors import HsaError
from ground.status import HSA_STATUS_ERROR_INVALID_ARGUMENT
from hsa import status  # hsa.status.X, as before (the numbers live in ground.status)

if TYPE_CHECKING:
    from hsa.provider import HsaProvider

__all__ = ["open_provider", "status"]


def open_provider(name: str) -> HsaProvider:
    """A provider by name: "rocr", "virtual" or "virtual:gfx1100,gfx942" (GPU targets).

    Each provider module is imported only when asked for, so "virtual" never loads ROCr and
    "rocr" never builds the virtual system.
    """
    kind, _, options = name.strip().partition(":")
    kind = kind.lower()
    if kind == "rocr":
        if options:
            raise HsaError(
                HSA_STATUS_ERROR_INVALID_ARGUMENT,
                f"provider 'rocr' takes no options (got {name!r}); pick a GPU by agent instead",
                "open_provider",
            )
        from hsa.rocr import RocrProvider

        return RocrProvider()
    if kind == "virtual":
        from hsa.virtual import VirtualProvider

        gpus = [g.strip() for g in options.split(",") if g.strip()]
        return VirtualProvider(gpus=gpus) if gpus else VirtualProvider()
    raise HsaError(
        HSA_STATUS_ERROR_INVALID_ARGUMENT,
        f"unknown HSA provider {name!r}; use 'rocr', 'virtual' or 'virtual:gfx1100,...'",
        "open_provider",
    )
