#!/usr/bin/env bash
# Quick start, step 1: install dependencies, build Loom (Release), run the demo job on 4 nodes.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release
cmake --build --preset release
echo
echo "== build/bin/loomrun -n 4 build/bin/loom_demo"
build/bin/loomrun -n 4 --timeout 60 build/bin/loom_demo
