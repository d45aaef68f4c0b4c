#!/usr/bin/env bash
# The main job: sets everything up (scripts/setup.sh), then trains GraphSAGE on the
# built-in synthetic graph. Arguments go to examples/train_sage.py (e.g. --size products).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${QUIVER_VENV:-$PWD/.venv}/bin/python" examples/train_sage.py "$@"
