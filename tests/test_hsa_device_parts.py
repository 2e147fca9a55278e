"""HsaDevice is its parts (amdgpu/hsa_backend/{memory,transfers,loading,submission}.py over
parts.py): every call one part makes on another is defined by a part, each public method
of the device comes from the part of its concern, and a part imports no other part."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from amdgpu.hsa_backend import loading, memory, submission, transfers
from amdgpu.hsa_backend.device import HsaDevice
from amdgpu.hsa_backend.parts import DeviceParts

PARTS = {memory: memory.DeviceMemory, transfers: transfers.DeviceTransfers,
         loading: loading.DeviceLoading, submission: submission.DeviceSubmission}


def test_every_call_between_parts_is_defined_by_a_part():
    stubs = [n for n, f in vars(DeviceParts).items()
             if inspect.isfunction(f) and "NotImplementedError" in inspect.getsource(f)]
    assert len(stubs) >= 5  # the walker found the declared calls
    for name in stubs:
        owner = next(c for c in HsaDevice.__mro__ if name in vars(c))
        assert owner in PARTS.values(), f"{name} resolves to {owner.__name__}, a stub"


def test_each_public_method_comes_from_the_part_of_its_concern():
    where = {"buffer": memory.DeviceMemory, "pin": memory.DeviceMemory,
             "enable_peer_access": memory.DeviceMemory, "copy": transfers.DeviceTransfers,
             "fill": transfers.DeviceTransfers, "_copy_async": transfers.DeviceTransfers,
             "_check_peers": transfers.DeviceTransfers, "links": memory.DeviceMemory,
             "can_access_peer": memory.DeviceMemory,
             "load": loading.DeviceLoading, "dispatch": submission.DeviceSubmission,
             "submit": submission.DeviceSubmission, "barrier": submission.DeviceSubmission,
             "time_dispatches": submission.DeviceSubmission}
    for name, part in where.items():
        owner = next(c for c in HsaDevice.__mro__ if name in vars(c))
        assert owner is part, f"{name} is defined in {owner.__name__}, not {part.__name__}"


def test_no_part_imports_another():
    names = {m.__name__ for m in PARTS}
    for module in PARTS:
        tree = ast.parse(Path(module.__file__).read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not (imported & (names - {module.__name__})), module.__name__
