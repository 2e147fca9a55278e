"""Loading and launching foreign code objects in tests (not a test module: test modules
import this instead of each other).

`DATA` is the committed fixture directory (tests/data/codeobjects, see its README) and
`TRITON` its manifest's Triton kernels; `hip_entries` unpacks one of its hipcc bundles.
`load_kernel` wraps one code object in a bundle and loads it; `triton_launch` launches a
Triton kernel as Triton's own launcher does, from the facts its fixture manifest records
for it (num_warps, warp_size, shared, the scratch sizes); `launch_triton_fixture` does that
for a fixture named in the manifest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data" / "codeobjects"
MANIFEST = json.loads((DATA / "manifest.json").read_text())
TRITON = MANIFEST["triton"]["kernels"]


def hip_entries(name: str) -> dict[str, bytes]:
    """{bundle entry id: code object} of the hipcc offload bundle `name` in DATA."""
    from hsa.abi.codeobject import read_offload_bundle

    return read_offload_bundle((DATA / name).read_bytes())


def load_kernel(dev: Any, data: bytes, name: str) -> Any:
    """The kernel `name` of the code object `data`, loaded on `dev`."""
    from compiler.bundle import KernelBundle, Variant

    bundle = KernelBundle(name, "00" * 32)
    bundle.add(Variant.from_code_object(data))
    return dev.load(bundle).kernel(name)


def triton_launch(dev: Any, data: bytes, facts: dict, programs: tuple[int, ...], args: tuple,
                  *, dynamic_lds: int | None = None, wait_s: float = 60) -> None:
    """`programs` workgroups of num_warps waves, `shared` bytes of dynamic LDS (unless
    `dynamic_lds` says otherwise), two null scratch pointers after the user's arguments."""
    assert facts["global_scratch_size"] == 0 and facts["profile_scratch_size"] == 0
    kernel = load_kernel(dev, data, facts["kernel"])
    block = facts["num_warps"] * facts["warp_size"]
    grid = (programs[0] * block, *programs[1:])
    blocks = (block,) + (1,) * (len(programs) - 1)
    lds = facts["shared"] if dynamic_lds is None else dynamic_lds
    dev.dispatch(kernel, grid if len(programs) > 1 else grid[0],
                 blocks if len(programs) > 1 else block, (*args, 0, 0),
                 dynamic_lds=lds).wait(wait_s)


def launch_triton_fixture(dev: Any, name: str, programs: tuple[int, ...], args: tuple,
                          **kw: Any) -> None:
    """Launch the Triton fixture `name` of DATA as Triton's launcher would."""
    triton_launch(dev, (DATA / name).read_bytes(), TRITON[name], programs, args, **kw)
