#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh machine: the CPU build of torch first (any
# other torch request would pull a multi-GB CUDA build), the package with its test extras, and
# the system tools the network-namespace, browser and launcher tests drive (Slurm with munge,
# OpenMPI's mpirun).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q torch==2.13.0
python -m pip install -q -e '.[test]'
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    missing=()
    for tool in ip:iproute2 iptables:iptables chromium:chromium slurmctld:slurm-wlm munged:munge \
        mpirun:openmpi-bin; do
        command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
fi
