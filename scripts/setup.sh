#!/usr/bin/env bash
# Sets up everything on a fresh Debian machine, idempotently: system packages, a virtual
# environment with the pinned torch and test tools, and the package itself (built with
# CMake, installed into the environment). Later runs reuse what is there.
#
#   QUIVER_VENV      where the environment lives        (default: .venv in the repo)
#   QUIVER_BUILD_DIR the persistent CMake build folder  (default: build/py)
#   PYTHON           the interpreter to base it on      (default: python3)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
VENV=${QUIVER_VENV:-$REPO/.venv}
BUILD_DIR=${QUIVER_BUILD_DIR:-$REPO/build/py}
PYTHON=${PYTHON:-python3}

log() { printf '\n== %s\n' "$*"; }

need_apt=()
command -v g++ >/dev/null || need_apt+=(g++)
command -v cmake >/dev/null || need_apt+=(cmake)
command -v ninja >/dev/null || need_apt+=(ninja-build)
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
command -v ccache >/dev/null || need_apt+=(ccache)
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing Debian packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

stamp="$VENV/.requirements.sha256"
want=$(sha256sum requirements-dev.txt | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "creating the virtual environment in $VENV (torch 2.11.0 and test tools)"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -r requirements-dev.txt
  echo "$want" > "$stamp"
fi

log "building and installing torch-quiver-ops (CMake build folder: $BUILD_DIR)"
export PATH="$VENV/bin:$PATH"
command -v ccache >/dev/null && export CCACHE_DIR=${CCACHE_DIR:-$REPO/build/ccache}
"$VENV/bin/python" -m pip install -q --no-build-isolation --no-deps \
  -Cbuild-dir="$BUILD_DIR" -Ccmake.define.BUILD_TESTING=ON -Cbuild.verbose=false .
"$VENV/bin/python" -P -c 'import torch_quiver_ops as q, torch; print("torch-quiver-ops", q.__version__, "on torch", torch.__version__, "| CUDA kernels:", q.cuda_kernels_built())'
