#!/usr/bin/env bash
# The GPU check, as one script to run on a machine with an NVIDIA GPU:
#
#   tools/device-check.sh            configure and build for this GPU, run the
#                                    device tests, print one summary
#
# Environment: BUILD_DIR (default build-device), JOBS (default: number of cores).
# It needs the packages of `tools/setup.sh deps` and the CUDA toolkit; it
# installs nothing (device machines may have no network) and says what is
# missing instead.
#
# What it checks today (issue 21 is in progress): the host/device block
# decoders against the reference, device dequantization and matmul (the
# decode kernel at 1-8 inputs, cuBLAS for prompts) against kernels::ref, and
# RMSNorm, RoPE and SwiGLU against plain CPU loops, the router against the
# host's choice. The
# device forward pass and its benchmarks are not written yet; the summary
# says so rather than reporting them.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build-device}
jobs=${JOBS:-$(nproc)}
summary=()
say() { summary+=("$*"); echo "device-check: $*"; }
finish() {
  echo
  echo "==== device-check summary ===="
  printf '%s\n' "${summary[@]}"
  exit "$1"
}

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  say "no NVIDIA GPU visible (nvidia-smi): nothing to check"
  finish 2
fi
gpu=$(nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader | head -1)
say "GPU: $gpu"
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || { say "no nvcc on PATH or in /usr/local/cuda/bin"; finish 2; }
say "nvcc: $("$nvcc" --version | tail -1)"

missing=()
for tool in cmake ninja g++; do command -v "$tool" >/dev/null || missing+=("$tool"); done
[ ${#missing[@]} -eq 0 ] || { say "missing build tools: ${missing[*]} (tools/setup.sh deps installs them)"; finish 2; }

start=$(date +%s)
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOELSP_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="$arch" >"$build.configure.log" 2>&1; then
  tail -30 "$build.configure.log"
  say "configure FAILED (sm_$arch); log: $build.configure.log"
  finish 1
fi
if ! ninja -C "$build" -j "$jobs" test_cuda >"$build.build.log" 2>&1; then
  tail -40 "$build.build.log"
  say "build FAILED; log: $build.build.log"
  finish 1
fi
say "built test_cuda for sm_$arch in $(($(date +%s) - start)) s"

out=$("$build/tests/test_cuda" 2>&1)
rc=$?
echo "$out"
say "test_cuda: $(echo "$out" | grep -E '^(All tests passed|test cases:)' | tail -1) (exit $rc)"
echo "$out" | grep -q "device comparison skipped" && say "WARNING: the device tests skipped: the GPU was not usable"
say "device forward pass and GPU benchmarks: not implemented yet (issue 21)"
finish $rc
