#!/usr/bin/env bash
# Runs a command in a Debian root filesystem that holds today's ROCm userspace (sid: ROCr
# 6.4.3 with its thunk inside, HIP 6.4.3, hipcc, rocminfo 7.2; or `--suite trixie`: ROCr
# 6.1.2 over libhsakmt 6.2.4) and a venv with hip-python and this project (the checkout,
# bind-mounted at /amdgpu-direct, not a copy):
#
#   bash scripts/rocm6.sh [--suite sid|trixie] CMD ARGS...
#   bash scripts/rocm6.sh rocminfo
#   bash scripts/rocm6.sh amdgpu-run saxpy --device amdgpu:emulated:gfx942
#
# The root filesystem is built on first use with debootstrap (about 6 minutes, 2.4 GB) and
# cached in $AMDGPU_ROCM6_CACHE (default /var/cache/amdgpu-direct), named by the hash of its
# recipe below: a changed recipe builds a new one; a changed list of the project's
# dependencies only reinstalls them. `--build` only builds, `--path` prints its
# directory (building it first). chroot needs root.
#
# The emulated kernel (issue 28) plugs in through one hook: scripts/emulated_env.sh, when it
# exists, is sourced on the host before the chroot; else scripts/emulated.sh (the emulated
# kernel's launcher) is run on the host with `env -0`, which starts the node's device server
# if none runs and prints the client environment (LD_PRELOAD of the shim, AMDGPU_*). Those
# variables go into the chroot with the checkout's paths rewritten to /amdgpu-direct (the
# shim, built with Debian 12's glibc, runs on sid's newer one). Without either the command
# runs against whatever /dev/kfd the host has. AMDGPU_EMULATED_NODE defaults to one gfx942.
set -euo pipefail
CHECKOUT=$(cd "$(dirname "$0")/.." && pwd)
MOUNTPOINT=/amdgpu-direct
CACHE=${AMDGPU_ROCM6_CACHE:-/var/cache/amdgpu-direct}
MIRROR=${AMDGPU_ROCM6_MIRROR:-http://deb.debian.org/debian}

die() { echo "rocm6.sh: $*" >&2; exit 2; }

suite=sid
mode=run
while (($#)); do
    case $1 in
        --suite) [[ $# -ge 2 ]] || die "--suite needs sid or trixie"; suite=$2; shift 2 ;;
        --suite=*) suite=${1#--suite=}; shift ;;
        --build) mode=build; shift ;;
        --path) mode=path; shift ;;
        --recipe) mode=recipe; shift ;;
        -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        --) shift; break ;;
        *) break ;;
    esac
done
case $suite in
    # hip-python starts at 6.2 on PyPI: trixie's HIP 5.7 has none
    sid) ROCM_PACKAGES="libhsa-runtime64-1 libamdhip64-6 libamdhip64-dev hipcc rocminfo"; HIP_PYTHON=1 ;;
    trixie) ROCM_PACKAGES="libhsa-runtime64-1 libamdhip64-dev hipcc rocminfo"; HIP_PYTHON=0 ;;
    *) die "unknown suite '$suite': use --suite sid (ROCr 6.4) or --suite trixie (ROCr 6.1)" ;;
esac
[[ $mode != run || $# -ge 1 ]] || die "no command given: bash scripts/rocm6.sh [--suite sid|trixie] CMD ARGS..."
[[ $(id -u) -eq 0 ]] || die "building and entering the ROCm root filesystem needs root (debootstrap, chroot, mount): run it as root or with sudo"

# The recipe: everything that decides the root filesystem's content. Its hash names it.
RECIPE="suite=$suite
debootstrap --variant=minbase $suite
apt: $ROCM_PACKAGES python3 python3-venv python3-pip python3-numpy python3-dev strace ltrace linux-libc-dev libdrm-dev pciutils kmod ca-certificates
venv /opt/venv --system-site-packages: hip-python matching the suite's HIP ($HIP_PYTHON)
recipe-version=4"
# The project's dependencies and console scripts (pyproject.toml) are not part of it: they
# are installed into the venv on first use and again when they change (a stamp names their
# hash), without rebuilding the rest.
# pytest (of the test extra) comes too: tests/test_rocm6_suites.py runs the project's own
# suites inside (hwlab run is pytest in-process).
PROJECT=$(python3 -c 'import sys, tomllib, json; p = tomllib.load(open(sys.argv[1], "rb"))["project"]; test = [d for d in p["optional-dependencies"]["test"] if d.startswith("pytest")]; print(json.dumps([p["dependencies"] + test, p["scripts"]], sort_keys=True))' "$CHECKOUT/pyproject.toml")
PROJECT_HASH=$(printf '%s' "$PROJECT" | sha256sum | cut -c1-12)
HASH=$(printf '%s' "$RECIPE" | sha256sum | cut -c1-12)
ROOT=$CACHE/rocm6-$suite-$HASH
[[ $mode != recipe ]] || { printf '%s\n' "$RECIPE"; exit 0; }

# The build's steps, run by a bash of their own (so that `set -e` holds in them) with
# ROOT_TMP, SUITE, ROCM_PACKAGES, HIP_PYTHON, MIRROR, CHECKOUT, MOUNTPOINT, RECIPE exported.
build_steps() {
    set -euo pipefail
    debootstrap --variant=minbase "$SUITE" "$ROOT_TMP" "$MIRROR"
    # apt inside: the index may be older than its Valid-Until; no recommends
    cat >"$ROOT_TMP/etc/apt/apt.conf.d/99amdgpu-direct" <<'EOF2'
Acquire::Check-Valid-Until "false";
APT::Install-Recommends "false";
EOF2
    cp /etc/resolv.conf "$ROOT_TMP/etc/resolv.conf"
    # pip inside trusts what the host trusts (a proxy's CA, say): the host's bundle
    cp /etc/ssl/certs/ca-certificates.crt "$ROOT_TMP/etc/host-ca-certificates.crt"
    local pip_env="PIP_CERT=/etc/host-ca-certificates.crt PIP_DISABLE_PIP_VERSION_CHECK=1"
    [[ -n ${PIP_INDEX_URL:-} ]] && pip_env+=" PIP_INDEX_URL=$PIP_INDEX_URL"
    unshare --mount --propagation private bash -ec '
        root=$1; shift
        mount -t proc proc "$root/proc"
        mount --rbind /dev "$root/dev"
        chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
            DEBIAN_FRONTEND=noninteractive bash -ec "$*"
    ' _ "$ROOT_TMP" "
        apt-get update -q
        apt-get install -y -q $ROCM_PACKAGES python3 python3-venv python3-pip python3-numpy \
            python3-dev strace ltrace linux-libc-dev libdrm-dev pciutils kmod ca-certificates
        apt-get clean
        python3 -m venv --system-site-packages /opt/venv
        if [ $HIP_PYTHON = 1 ]; then
            hip=\$(dpkg-query -W -f='\${Version}' libamdhip64-dev | sed -E 's/^([0-9]+)\.([0-9]+).*/\1.\2/')
            # the release for this HIP when the index has it, else the nearest newer one
            # (hip-python binds lazily: calls HIP 6.4 has work)
            env $pip_env /opt/venv/bin/pip install -q \"hip-python==\$hip.*\" ||
                env $pip_env /opt/venv/bin/pip install -q \"hip-python>=\$hip,<8\"
        fi
    "
    mkdir -p "$ROOT_TMP$MOUNTPOINT"
    printf '%s\n' "$RECIPE" >"$ROOT_TMP/etc/amdgpu-direct-recipe"
}

build_rootfs() {
    command -v debootstrap >/dev/null || {
        echo "rocm6.sh: installing debootstrap" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
    }
    local log=$ROOT.log
    export ROOT_TMP=$ROOT.partial SUITE=$suite ROCM_PACKAGES HIP_PYTHON MIRROR CHECKOUT \
        MOUNTPOINT RECIPE
    rm -rf "$ROOT_TMP"
    echo "rocm6.sh: building the $suite ROCm root filesystem in $ROOT (first use; a few minutes; log: $log)" >&2
    if ! bash -c "$(declare -f build_steps); build_steps" >"$log" 2>&1; then
        tail -n 15 "$log" >&2
        die "building the root filesystem failed (whole log: $log); fix the cause and run again"
    fi
    mv "$ROOT_TMP" "$ROOT"
    echo "rocm6.sh: built $ROOT" >&2
}

# The project inside is the checkout, mounted at $MOUNTPOINT when a command runs (a .pth
# file and console scripts that import it): never a copy. Its dependencies go into the venv.
refresh_project() {
    local log=$ROOT.log
    echo "rocm6.sh: installing the project's dependencies into $ROOT/opt/venv (log: $log)" >&2
    if ! python3 - "$PROJECT" "$ROOT" "$MOUNTPOINT" >>"$log" 2>&1 <<'EOF2'
import json, pathlib, sys
deps, scripts = json.loads(sys.argv[1])
root, mount = pathlib.Path(sys.argv[2]), sys.argv[3]
(root / "opt/venv/requirements-amdgpu-direct.txt").write_text("\n".join(deps) + "\n")
site = next((root / "opt/venv/lib").glob("python3*/site-packages"))
(site / "amdgpu_direct_checkout.pth").write_text(mount + "\n")
for name, target in scripts.items():
    module, func = target.split(":")
    script = root / "opt/venv/bin" / name
    script.write_text(f"#!/opt/venv/bin/python\nimport sys\nfrom {module} import {func}\nsys.exit({func}())\n")
    script.chmod(0o755)
EOF2
    then
        die "writing the venv's project files failed (log: $log)"
    fi
    cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/host-ca-certificates.crt"
    local pip_env="PIP_CERT=/etc/host-ca-certificates.crt PIP_DISABLE_PIP_VERSION_CHECK=1"
    [[ -n ${PIP_INDEX_URL:-} ]] && pip_env+=" PIP_INDEX_URL=$PIP_INDEX_URL"
    # env -i: the host's REQUESTS_CA_BUNDLE & co. would point pip at the chroot's own bundle
    # shellcheck disable=SC2086
    if ! chroot "$ROOT" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root $pip_env \
            /opt/venv/bin/pip install -q -r /opt/venv/requirements-amdgpu-direct.txt >>"$log" 2>&1; then
        tail -n 15 "$log" >&2
        die "installing the project's dependencies into the root filesystem failed (whole log: $log)"
    fi
    rm -f "$ROOT"/opt/venv/.project-*
    touch "$ROOT/opt/venv/.project-$PROJECT_HASH"
}

# One builder at a time; a second caller waits for the first one's root filesystem.
mkdir -p "$CACHE"
exec 9>"$ROOT.lock"
flock 9
[[ -f $ROOT/etc/amdgpu-direct-recipe ]] || build_rootfs
[[ -f $ROOT/opt/venv/.project-$PROJECT_HASH ]] || refresh_project
flock -u 9
[[ $mode == build ]] && exit 0
[[ $mode == path ]] && { echo "$ROOT"; exit 0; }

# The environment inside: the venv first, the emulated kernel's variables (the hook), a node.
export AMDGPU_EMULATED_NODE=${AMDGPU_EMULATED_NODE:-gfx942}
# AMDGPU_EMULATED_PYTHON: the Python the shim starts a device server with when a command
# inside opens a node other than AMDGPU_EMULATED_NODE (amdgpu-run --device
# amdgpu:emulated:gfx1100): the venv's (the checkout's .venv does not resolve inside)
inner_env=(PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME=/root
           TERM=${TERM:-dumb} AMDGPU_ROCM6_SUITE=$suite AMDGPU_EMULATED_PYTHON=/opt/venv/bin/python)
# The environment to pass in: this one, or the one the emulated kernel's hook gives a client
# (never exported here: the host's unshare, mount and chroot must not load the shim).
hook_env=$(mktemp)
if [[ -f $CHECKOUT/scripts/emulated_env.sh ]]; then
    bash -c 'source "$1" && env -0' _ "$CHECKOUT/scripts/emulated_env.sh" >"$hook_env" ||
        { rm -f "$hook_env"; die "scripts/emulated_env.sh failed; run it alone to see why"; }
elif [[ -f $CHECKOUT/scripts/emulated.sh ]]; then
    # the emulated kernel's launcher starts the node's device server on this host (its
    # socket is under /tmp, shared with the chroot) and runs its command with the client
    # environment: run `env -0` under it and keep that environment
    launcher=$CHECKOUT/scripts/emulated.sh
    bash "$launcher" env -0 >"$hook_env" ||
        { rm -f "$hook_env"; die "the emulated kernel did not start (bash scripts/emulated.sh env failed); run it alone to see why"; }
else
    env -0 >"$hook_env"
fi
while IFS= read -r -d '' kv; do
    name=${kv%%=*} value=${kv#*=}
    case $name in
        AMDGPU_*|HSA_*|HIP_*|ROCR_*|HSAKMT_*|LD_PRELOAD|LD_LIBRARY_PATH|PYTHON*|DEBUG_*)
            inner_env+=("$name=${value//$CHECKOUT/$MOUNTPOINT}") ;;
    esac
done <"$hook_env"
rm -f "$hook_env"

# A device server leaves after some idle seconds, and the shim cannot start one from inside
# the chroot (no host Python there): while the command runs, the launcher is asked again
# every 10 s (it starts a server only when none runs), so one is up whenever the command
# first opens /dev/kfd, e.g. after a long hipcc.
keepalive=
if [[ -n ${launcher:-} ]]; then
    # its own fds on /dev/null: a sleep left behind at exit must not hold the caller's
    # stdout/stderr pipes open (a caller reading them to EOF waited up to 10 s)
    (while sleep 10; do bash "$launcher" true || true; done) </dev/null >/dev/null 2>&1 &
    keepalive=$!
    trap 'kill "$keepalive" 2>/dev/null' EXIT
fi

# Private mounts: they vanish with the command, nothing is left mounted on the host.
status=0
unshare --mount --propagation private bash -ec '
    root=$1 checkout=$2 mountpoint=$3; shift 3
    mount -t proc proc "$root/proc"
    mount --rbind /sys "$root/sys"
    mount --rbind /dev "$root/dev"
    mount --bind /tmp "$root/tmp"
    mount --bind "$checkout" "$root$mountpoint"
    cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
    exec chroot "$root" /usr/bin/env -i "$@"
' _ "$ROOT" "$CHECKOUT" "$MOUNTPOINT" "${inner_env[@]}" bash -c 'cd '"$MOUNTPOINT"' 2>/dev/null; exec "$@"' _ "$@" || status=$?
exit "$status"
