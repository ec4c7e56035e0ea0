#!/usr/bin/env bash
# Install everything Strata's build, tests, benchmarks and soft-RoCE harness
# need on Debian 12. Idempotent: when every package is present it does nothing.
set -euo pipefail

packages=(
  # build
  build-essential cmake pkg-config clang-format
  libibverbs-dev librdmacm-dev ibverbs-providers rdma-core
  libisal-dev libjemalloc-dev libssl-dev zlib1g-dev libopenblas-dev
  # tests: unit tests, the Promela model, launchers, sanitizers and fuzzers
  libcmocka-dev spin openmpi-bin libopenmpi-dev clang libclang-rt-14-dev
  python3
  # soft-RoCE harness (a Debian kernel with rdma_rxe booted in QEMU; kmod's
  # depmod indexes the modules of a kernel package unpacked without
  # installing it)
  qemu-system-x86 busybox-static cpio iproute2 ibverbs-utils rdmacm-utils
  perftest xz-utils zstd kmod
  # benchmarks and the training driver
  iperf3 gnuplot-nox dataset-fashion-mnist hyperfine
  # the Python package's tests, examples and benchmarks (PyTorch)
  python3-torch python3-torchvision python3-pytest
  # the Slurm harness (tests/multihost/slurm starts its own daemons)
  slurmctld slurmd slurm-client munge
  # scripts/fresh-machine-check.sh
  debootstrap
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || {
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  }
  sudo=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
# No package may start a service while installing (munge, slurmctld and
# slurmd would): the Slurm harness starts its own daemons, in the emulated
# hosts, with its own key and configuration. A policy-rc.d that answers 101
# ("action forbidden") stops invoke-rc.d and deb-systemd-invoke; one that
# is already there (containers have one) is left alone.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\n# install-deps.sh: no service starts while installing\nexit 101\n' |
    "${sudo[@]}" tee /usr/sbin/policy-rc.d >/dev/null
  "${sudo[@]}" chmod 755 /usr/sbin/policy-rc.d
  trap '"${sudo[@]}" rm -f /usr/sbin/policy-rc.d' EXIT
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
