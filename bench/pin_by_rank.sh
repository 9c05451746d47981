#!/bin/sh
# Runs a Loom node pinned to the CPU numbered like its rank (node 0 on CPU 0, node 1 on CPU 1, ...),
# so that two nodes never share a core. Use between loomrun and the program:
#   build/bin/loomrun -n 2 bench/pin_by_rank.sh build/bench/comm_pingpong
# (see bench/RESULTS.md for why: this VM's scheduler packs waking threads onto one vCPU).
cpus=$(nproc)
exec taskset -c "$(( ${LOOM_RANK:-0} % cpus ))" "$@"
