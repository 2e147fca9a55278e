#!/usr/bin/env bash
# Prepares a fresh Debian 12 machine for amdgpu-direct: the Debian packages the project
# needs (only those missing) and a .venv with the package and its test extras.
# A second run with nothing changed installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(mesa-vulkan-drivers libvulkan1 vulkan-validationlayers libhsa-runtime64-1 libhsa-runtime-dev libhsakmt1 rocminfo rocm-smi hipcc llvm-19 gcc
    linux-source-6.1)  # AMD's PM4/SDMA/register headers: the oracle of tests/test_packets_pm4.py

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "setup: amdgpu-direct needs Python >= 3.11 as '$PYTHON' (set PYTHON=/path/to/python3.11)" >&2
    exit 1
fi
# The compiled dispatch hot path (amdgpu/hsa_backend/hotpath.c) needs Python's headers.
"$PYTHON" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null || DEBIAN_PACKAGES+=(python3-dev)
# Debian's own python3 makes virtual environments only with python3-venv installed.
"$PYTHON" -c 'import ensurepip, venv' 2>/dev/null || DEBIAN_PACKAGES+=(python3-venv)

missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        echo "setup: missing Debian packages: ${missing[*]}; run 'sudo apt-get install ${missing[*]}' or run make as root" >&2
        exit 1
    fi
    echo "setup: installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

[[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
# The stamp names the hash of pyproject.toml: the install reruns only when it changed.
stamp=".venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [[ ! -f $stamp ]]; then
    echo "setup: installing amdgpu-direct and its test and model extras into .venv (log: .venv/pip-install.log)"
    if ! { .venv/bin/python -m pip install -q --upgrade pip &&
           .venv/bin/python -m pip install -q -e '.[test,models]'; } >.venv/pip-install.log 2>&1; then
        tail -n 20 .venv/pip-install.log >&2
        echo "setup: pip install failed; the whole log is .venv/pip-install.log" >&2
        exit 1
    fi
    rm -f .venv/.installed-*
    touch "$stamp"
fi

# The emulated AMD kernel (amdgpu:emulated, scripts/emulated.sh): the preloaded shim and the
# device server's helper, built with gcc into build/emulated/ (rebuilt when a source changed).
.venv/bin/python -c "from hsa.emulated.build import main; main()"
# The HSA backend's compiled immediate-dispatch hot path (build/hotpath/; rebuilt only when
# amdgpu/hsa_backend/hotpath.c changed; without it the backend runs the same steps in Python).
.venv/bin/python -c "from amdgpu.hsa_backend.hotpath import main; main()"
# The Vulkan backend's compiled same-buffers replay (build/vulkan/; rebuilt only when
# amdgpu/vulkan/fast_submit.c changed; without it CommandBuffer runs the same steps in Python).
.venv/bin/python -c "from amdgpu.vulkan.fast_submit import main; main()"
