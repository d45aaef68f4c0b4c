#!/usr/bin/env bash
# Sets up everything on a fresh Debian machine, idempotently: system packages, a virtual
# environment with the pinned torch and test tools, and the package itself (built with
# CMake, installed into the environment). Later runs reuse what is there.
#
#   bash scripts/setup.sh               what the main job needs (scripts/train.sh)
#   bash scripts/setup.sh --rdma-vm     also QEMU and a Linux kernel with rdma_rxe, for the
#                                       soft-RoCE guest of the RDMA tests (scripts/test.sh)
#
#   QUIVER_VENV      where the environment lives        (default: .venv in the repo)
#   QUIVER_BUILD_DIR the persistent CMake build folder  (default: build/py)
#   PYTHON           the interpreter to base it on      (default: python3)
#   QUIVER_SKIP_RDMA_VM=1  never install the soft-RoCE guest's packages (and test.sh skips
#                          the RDMA tests in the guest)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
VENV=${QUIVER_VENV:-$REPO/.venv}
BUILD_DIR=${QUIVER_BUILD_DIR:-$REPO/build/py}
PYTHON=${PYTHON:-python3}
RDMA_VM=0
for arg in "$@"; do
  case "$arg" in
    --rdma-vm) RDMA_VM=1 ;;
    *) echo "setup.sh: unknown argument $arg (see the header of scripts/setup.sh)" >&2; exit 2 ;;
  esac
done
[ "${QUIVER_SKIP_RDMA_VM:-0}" = 1 ] && RDMA_VM=0
mkdir -p "$REPO/build"

log() { printf '\n== %s\n' "$*"; }

need_apt=()
command -v g++ >/dev/null || need_apt+=(g++)
command -v cmake >/dev/null || need_apt+=(cmake)
command -v ninja >/dev/null || need_apt+=(ninja-build)
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
command -v ccache >/dev/null || need_apt+=(ccache)
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
# RDMA: verbs headers to build the RDMA transport, rdma-core to run it; with --rdma-vm,
# what scripts/rdma_vm.sh needs to give the tests a real device (soft-RoCE in a QEMU guest).
[ -f /usr/include/infiniband/verbs.h ] || need_apt+=(libibverbs-dev)
[ -e /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so ] || ls /usr/lib/*/libibverbs/librxe-* >/dev/null 2>&1 || need_apt+=(rdma-core ibverbs-providers)
if [ "$RDMA_VM" = 1 ]; then
  command -v qemu-system-x86_64 >/dev/null || need_apt+=(qemu-system-x86)
  ls /lib/modules/*/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko >/dev/null 2>&1 || need_apt+=(linux-image-amd64)
  [ -x /bin/busybox ] || need_apt+=(busybox-static)
  command -v cpio >/dev/null || need_apt+=(cpio)
  command -v rdma >/dev/null || need_apt+=(iproute2)
  command -v modprobe >/dev/null || need_apt+=(kmod)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing Debian packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  # The package manager's progress goes to a log (hundreds of lines); a summary here, and
  # the log's tail if it fails.
  apt_log="$REPO/build/setup-apt.log"
  started=$SECONDS
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
      --no-install-recommends "${need_apt[@]}"; } > "$apt_log" 2>&1; then
    tail -n 40 "$apt_log"
    echo "setup.sh: installing Debian packages failed (whole log: $apt_log)" >&2
    exit 1
  fi
  echo "installed in $((SECONDS - started)) s (log: $apt_log)"
fi

stamp="$VENV/.requirements.sha256"
want=$(sha256sum requirements-dev.txt | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "creating the virtual environment in $VENV (torch 2.11.0 and test tools)"
  # torch's wheels with their CUDA libraries take about 5 GiB once installed; say so plainly
  # rather than let pip fail half-way with ENOSPC.
  mkdir -p "$(dirname "$VENV")"
  free_kib=$(df -Pk "$(dirname "$VENV")" | awk 'NR == 2 { print $4 }')
  if [ "${free_kib:-0}" -lt $((7 * 1024 * 1024)) ]; then
    echo "setup.sh: the virtual environment needs about 7 GiB free at $(dirname "$VENV");" \
      "df says $((free_kib / 1024)) MiB (set QUIVER_VENV to put it elsewhere)" >&2
    exit 1
  fi
  started=$SECONDS
  "$PYTHON" -m venv "$VENV"
  # No wheel cache: it would hold a second copy of those gigabytes.
  "$VENV/bin/python" -m pip install -q --no-cache-dir --upgrade pip
  "$VENV/bin/python" -m pip install -q --no-cache-dir -r requirements-dev.txt
  echo "$want" > "$stamp"
  echo "created in $((SECONDS - started)) s"
fi

log "building and installing torch-quiver-ops (CMake build folder: $BUILD_DIR)"
started=$SECONDS
export PATH="$VENV/bin:$PATH"
command -v ccache >/dev/null && export CCACHE_DIR=${CCACHE_DIR:-$REPO/build/ccache}
"$VENV/bin/python" -m pip install -q --no-build-isolation --no-deps \
  -Cbuild-dir="$BUILD_DIR" -Ccmake.define.BUILD_TESTING=ON -Cbuild.verbose=false .
"$VENV/bin/python" -P -c 'import torch_quiver_ops as q, torch; print("torch-quiver-ops", q.__version__, "on torch", torch.__version__, "| CUDA kernels:", q.cuda_kernels_built())'
echo "built and installed in $((SECONDS - started)) s"
