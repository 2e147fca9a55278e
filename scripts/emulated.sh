#!/usr/bin/env bash
# Runs CMD on this machine's ROCm over the emulated AMD kernel driver:
#   bash scripts/emulated.sh CMD ARGS...      e.g.  bash scripts/emulated.sh rocminfo
# It sets the one environment a program needs (the same for C, HIP and Python programs):
#   LD_PRELOAD=<repo>/build/emulated/libamdgpu_kfd.so   the emulated kernel (/dev/kfd, the
#                                                       render nodes and the driver's sysfs)
#   AMDGPU_EMULATED_NODE=${AMDGPU_EMULATED_NODE:-gfx90a} the node: a mix of gfx90a, gfx942,
#                                                       gfx950, gfx1100, gfx1201 ("2xgfx942,gfx1201")
# and starts the node's device server (python -m hsa.emulated.server) unless one runs; it
# exits after 30 s without clients. Its log: /tmp/amdgpu-emulated-<uid>/<node>/server.log.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if (($# == 0)); then
    echo "usage: bash scripts/emulated.sh CMD ARGS... (runs CMD over the emulated AMD kernel)" >&2
    exit 2
fi
python=$root/.venv/bin/python
[[ -x $python ]] || python=python3
shim=$root/build/emulated/libamdgpu_kfd.so
PYTHONPATH=$root "$python" -c "from hsa.emulated.build import main; main()" >/dev/null
export AMDGPU_EMULATED_NODE=${AMDGPU_EMULATED_NODE:-gfx90a}
PYTHONPATH=$root "$python" -m hsa.emulated.server --daemon --if-absent
# tinygrad's AMD backend calls mmap through its own dlopen'ed handle of libc, which
# LD_PRELOAD does not interpose; its LIBC_PATH names the library to load: the shim (whose
# other libc symbols resolve to libc's)
export LIBC_PATH=${LIBC_PATH:-$shim}
case ":${LD_PRELOAD:-}:" in
    *":$shim:"*) ;;
    *) export LD_PRELOAD=$shim${LD_PRELOAD:+:$LD_PRELOAD} ;;
esac
exec "$@"
