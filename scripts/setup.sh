#!/usr/bin/env bash
# Installs the Debian packages hexisim needs, once: every package is checked with
# `dpkg -s` first, so a second run installs nothing and needs no network.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config clang-format
  clang libclang-rt-14-dev    # make fuzz: libFuzzer, ASan, UBSan
  libsimgrid-dev          # discrete-event simulator (3.32)
  libeigen3-dev           # matrices: bandwidth matrix, CPU kernels
  libboost-graph-dev      # graph algorithms in the scheduler
  libmetis-dev            # graph partitioning (HexiScale phase 1/2)
  coinor-libcbc-dev       # MILP solver (HexiSeq)
  libglpk-dev             # second MILP solver, exact ground truth
  nlohmann-json3-dev      # JSON files
  libcli11-dev            # command line
  libopenmpi-dev openmpi-bin  # engine ranks
  libgtest-dev libgmock-dev   # tests
  libbenchmark-dev        # bench/
  libopenblas0            # CPU kernels' float GEMMs (loaded at run time; Eigen without it),
                          # and Debian's torch needs it to import (without recommends)
  python3-torch python3-numpy # test oracle only (/usr/bin/python3)
  python3-matplotlib      # hexisim plot (scripts/plot.py, /usr/bin/python3)
  pybind11-dev python3-dev  # the Python module (build/python/hexisim)
  python3-pandas python3-pytest  # its DataFrames and tests (/usr/bin/python3)
  iproute2 iptables libnetfilter-queue-dev  # hexisim testbed: namespaces, tc, the NFQUEUE delayer
  util-linux iperf3 iputils-ping            # nsenter/unshare/chrt; hexisim testbed status
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "setup: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
