"""A wave that spin-waits on memory with s_sleep lets the other waves of its dispatch run.

HIP 6's grid.sync() (hipcc 7, every target) is such a loop: each workgroup's first wave adds
itself to a counter in the cooperative launch's workspace, then sleeps and reloads it until
the last one has arrived. The executor runs the lowest-pc group of waves first; a spinning
group stayed lowest forever and the waves it waited for never ran (the kernel hung until the
step limit). At s_sleep the group now gives the others a turn. Both layouts are checked: the
waiting workgroup's code placed before and after the releasing workgroup's.
"""

from __future__ import annotations

import numpy as np
import pytest

from hsa.virtual.gfx11.testing import Harness, build_code_object

pytestmark = [pytest.mark.hsa_virtual]

SOURCE = """
#define GROUP __builtin_amdgcn_workgroup_id_x()
#define LANE __builtin_amdgcn_workitem_id_x()
#define LOAD(p) __scoped_atomic_load_n(p, __ATOMIC_ACQUIRE, __MEMORY_SCOPE_DEVICE)
#define STORE(p, v) __scoped_atomic_store_n(p, v, __ATOMIC_RELEASE, __MEMORY_SCOPE_DEVICE)
// group 0 waits for group 1's flag (its code first), or group 1 for group 0's (second)
kernel void waiter_first(global int* flag, global int* out) {
  if (GROUP == 0) {
    if (LANE == 0) {
      int spins = 0;
      while (LOAD(flag) == 0) {
        __builtin_amdgcn_s_sleep(1);
        spins++;
      }
      out[0] = 7;
      out[1] = spins > 0;
    }
  } else if (LANE == 0) {
    STORE(flag, 1);
  }
}
kernel void waiter_second(global int* flag, global int* out) {
  if (GROUP == 0) {
    if (LANE == 0) STORE(flag, 1);
  } else if (LANE == 0) {
    int spins = 0;
    while (LOAD(flag) == 0) {
      __builtin_amdgcn_s_sleep(1);
      spins++;
    }
    out[0] = 7;
    out[1] = spins > 0;
  }
}
"""


@pytest.mark.parametrize("target", ["gfx1100", "gfx942", "gfx1201"])
def test_spin_wait_with_s_sleep_lets_the_releasing_wave_run(target):
    h = Harness(target)
    code = h.load(build_code_object(SOURCE, "cl", mcpu=target))
    waited = []
    for kernel in ("waiter_first", "waiter_second"):
        flag = h.buffer(np.zeros(1, np.int32))
        out = h.buffer(np.zeros(2, np.int32))
        h.dispatch(code, kernel, (128,), (64,), [flag, out])
        got = h.read(out, np.int32, 2)
        assert got[0] == 7, (kernel, got)
        waited.append(int(got[1]))
    # in at least one layout the waiter really spun (ran before its releaser)
    assert any(waited), waited
