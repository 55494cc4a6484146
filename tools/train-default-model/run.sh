#!/usr/bin/env bash
# Train moelsp's default model end to end and write it into the repository:
#   tools/train-default-model/run.sh [WORK_DIR]
# About 100 minutes on the 2-core development machine (90 of them training:
# MINUTES=85 for the main phase, FIM_MINUTES=5 for the second). Debian packages only; Debian's /usr/bin/python3.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=${1:-/tmp/moelsp-train}
py=/usr/bin/python3

# python3-torch 1.13, numpy, sentencepiece: the trainer; libpython3.11-stdlib,
# libpython3.11-testsuite, libboost1.81-dev: the corpus; libopenblas0-pthread:
# a fast BLAS for torch's fp32 paths (the reference BLAS is 10x slower);
# libtcmalloc-minimal4: 1.3x faster training than glibc malloc here.
need=(python3-torch python3-numpy python3-sentencepiece libpython3.11-stdlib libpython3.11-testsuite
      libboost1.81-dev libopenblas0-pthread libtcmalloc-minimal4)
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

export OMP_WAIT_POLICY=PASSIVE  # spinning OpenMP threads collapse throughput when anything else runs
export LD_PRELOAD=libtcmalloc_minimal.so.4
cd "$here"
mkdir -p "$work"
$py corpus.py "$work"
$py tokenizer.py "$work"
$py train.py "$work" --minutes "${MINUTES:-85}"
# A short second phase, FIM-heavier at a low learning rate: the main phase
# leaves a 12 M model weak at conditioning the middle on the prefix's end.
$py train.py "$work" --resume --minutes "${FIM_MINUTES:-5}" --mix 0.45,0.45,0.10 --lr 3e-4 --log train_log_fim.jsonl
$py finish.py "$work" "$repo"
unset LD_PRELOAD
# The engine must agree with the trainer (the same check tests/test_default_model.cpp makes).
if [ -x "$repo/build/server/moelsp" ]; then
  "$repo/build/server/moelsp" perplexity -m "$repo/models/moelsp-default.gguf" -f "$work/heldout.txt" 2>/dev/null
fi
