#!/usr/bin/env bash
# The GPU check, as one script to run on a machine with an NVIDIA GPU
# (budget: 8 minutes on a fresh machine with an H200 and 16 cores):
#
#   tools/device-check.sh            configure and build for this GPU, run the
#                                    device tests, benchmark, print one summary
#
# Environment: BUILD_DIR (default build-device), JOBS (default: number of
# cores), WORK (default /tmp/moelsp-device-check: the synthetic models),
# PEER (optional: a llama-bench built with CUDA, compared with -ngl 99),
# SKIP_BENCH=1 (tests only), BUDGET_S (default 420: no model is made and no
# benchmark starts after this many seconds, so the summary always prints).
# It needs the packages of `tools/setup.sh deps` and the CUDA toolkit; it
# installs nothing (device machines may have no network) and says what is
# missing instead.
#
# What it runs:
#  1. test_cuda: the block decoders and the host entry points (dequantize,
#     matmul, RMSNorm, RoPE, SwiGLU, router) against kernels::ref;
#  2. test_gpu_device: every operation of the engine's CUDA device against the
#     host emulation and the references (matmul of every type at decode and
#     prompt widths, padded rows, paged attention over F32/F16 rows, router,
#     gather/scatter);
#  3. test_device_forward: the device forward pass of every reference model
#     (qwen3moe, Mixtral, deepseek2 in both MLA layouts, glm4moe, Q4_K_M and
#     Q8_0) against llama.cpp's logits, hybrid placement and shared prefixes,
#     on the emulation and on this GPU;
#  4. moelsp bench --backend cuda on synthetic 3 B-class models (qwen3moe-3b in
#     Q4_K_M and Q8_0, deepseek2-3b in Q4_K_M): prefill and decode tokens/s,
#     decode against the GPU's memory roofline; then hybrid (a quarter of the
#     experts resident, the rest on the CPU), the VRAM budget set by
#     --gpu-experts.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build-device}
jobs=${JOBS:-$(nproc)}
work=${WORK:-/tmp/moelsp-device-check}
summary=()
rc_all=0
say() { summary+=("$*"); echo "device-check: $*"; }
finish() {
  echo
  echo "==== device-check summary ===="
  printf '%s\n' "${summary[@]}"
  exit "$1"
}
t0=$(date +%s)
elapsed() { echo "$(($(date +%s) - t0)) s"; }

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

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOELSP_CUDA=ON -DMOELSP_BENCH=ON "${launcher[@]}" \
  -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="$arch" >"$build.configure.log" 2>&1; then
  tail -30 "$build.configure.log"
  say "configure FAILED (sm_$arch); log: $build.configure.log"
  finish 1
fi
targets=(test_cuda test_gpu_device test_device_forward moelsp moelsp_make_synthetic_model)
if ! ninja -C "$build" -j "$jobs" "${targets[@]}" >"$build.build.log" 2>&1; then
  grep -E "error|FAILED" "$build.build.log" | head -40
  say "build FAILED; log: $build.build.log"
  finish 1
fi
say "built ${targets[*]} for sm_$arch at $(elapsed)"

for t in test_cuda test_gpu_device test_device_forward; do
  out=$(timeout 240 "$build/tests/$t" 2>&1)
  rc=$?
  echo "$out" | tail -60
  say "$t: $(echo "$out" | grep -E '^(All tests passed|test cases:)' | tail -1) (exit $rc, at $(elapsed))"
  echo "$out" | grep -q "skipped" && say "WARNING: $t skipped its device comparisons: the GPU was not usable"
  [ "$rc" -eq 0 ] || rc_all=1
done
[ "${SKIP_BENCH:-0}" = 1 ] && finish $rc_all

mkdir -p "$work"
mk() {  # shape, type → path of the model (made once)
  local f16="$work/$1.f16.gguf" q="$work/$1.$2.gguf"
  [ "$(($(date +%s) - t0))" -gt "${BUDGET_S:-420}" ] && return 1
  [ -f "$f16" ] || "$build/bench/moelsp_make_synthetic_model" --shape "$1" -o "$f16" >/dev/null || return 1
  [ "$2" = f16 ] && { echo "$f16"; return; }
  [ -f "$q" ] || "$build/cli/moelsp" quantize -q "$f16" "$q" "$2" >/dev/null || return 1
  echo "$q"
}
budget=${BUDGET_S:-420}  # no new benchmark starts after this many seconds (the summary must print)
bench() {  # label, model, extra flags...
  local label=$1 model=$2
  shift 2
  if [ "$(($(date +%s) - t0))" -gt "$budget" ]; then
    say "bench $label: skipped (past the ${budget} s budget; BUDGET_S raises it)"
    return
  fi
  local peer=()
  [ -n "${PEER:-}" ] && peer=(--peer "$PEER")
  local out
  out=$(timeout 180 "$build/cli/moelsp" bench -m "$model" --backend cuda -t "$(nproc)" -p 512 -n 128 -r 3 -q \
    "${peer[@]}" "$@" 2>&1)
  local rc=$?
  echo "$out"
  [ "$rc" -eq 0 ] || { say "bench $label FAILED (exit $rc): $(echo "$out" | tail -1)"; rc_all=1; return; }
  say "bench $label: $(echo "$out" | grep -E '^pp512' | tr -s ' ') | $(echo "$out" | grep -E '^tg128' | tr -s ' ')"
  say "  $(echo "$out" | grep -oE 'GPU memory bandwidth.*' | cut -c1-160)"
  say "  $(echo "$out" | grep -E '^forward pass on' | cut -c1-160)"
}
for q in Q4_K_M Q8_0; do
  m=$(mk qwen3moe-3b "$q") || { say "making qwen3moe-3b $q FAILED"; rc_all=1; continue; }
  bench "qwen3moe-3b $q (all on the GPU)" "$m"
done
m=$(mk qwen3moe-3b Q4_K_M) && bench "qwen3moe-3b Q4_K_M hybrid (32 of 128 experts per layer on the GPU)" "$m" --gpu-experts 32
m=$(mk deepseek2-3b Q4_K_M) && bench "deepseek2-3b Q4_K_M (MLA, all on the GPU)" "$m"
say "done at $(elapsed)"
finish $rc_all
