#!/usr/bin/env bash
# Train moelsp's default model end to end and write it into the repository:
#   tools/train-default-model/run.sh [WORK_DIR]
# About 210 minutes on the 2-core development machine (200 of them training:
# MINUTES=85 for the main phase, FIM_MINUTES=5 for the second, EDITOR_MINUTES=30
# for the third, REPO_MINUTES=80 for the fourth). Debian packages only; Debian's /usr/bin/python3.
# Each phase starts from the one before's checkpoint (WORK_DIR/ckpt.pt), so a
# run interrupted between phases goes on with the next (run its remaining
# train.py lines by hand, each with --resume).
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
# The third phase teaches the cursor: every FIM row one example cut and fitted
# as the language server asks (rest of a line, a block's lines), three in four
# in suffix-prefix-middle order, which the FIM benchmark measured as better
# for this model, so the GGUF declares it (moelsp.fim_order) and the server
# uses it; the middle's tokens weigh 3x in a token-level loss.
$py train.py "$work" --resume --minutes "${EDITOR_MINUTES:-30}" --fim-style editor --mix 0.30,0.60,0.10 \
  --spm-share 0.75 --middle-weight 3 --lr 5e-4 --warmup 100 --log train_log_editor.jsonl
# The fourth phase teaches other files: the context grows to 1,024 tokens and
# most FIM rows carry snippets of other files of the same project ahead of the
# FIM tokens, chosen and spelled as the server sends them (repo_examples.py);
# half put the cursor where the cross-file benchmark does, a fifth carry no
# context.
$py train.py "$work" --resume --minutes "${REPO_MINUTES:-80}" --ctx 1024 --fim-style repo --fim-rows 12000 \
  --mix 0.25,0.65,0.10 --spm-share 0.75 --middle-weight 3 --lr 4e-4 --warmup 50 --log train_log_repo.jsonl
$py finish.py "$work" "$repo" --fim-order "${FIM_ORDER:-spm}"
unset LD_PRELOAD
# The engine must agree with the trainer (the same check tests/test_default_model.cpp makes).
if [ -x "$repo/build/cli/moelsp" ]; then
  "$repo/build/cli/moelsp" perplexity -m "$repo/models/moelsp-default.gguf" -f "$work/heldout.txt" 2>/dev/null
fi
# The FIM benchmark in both orders, to check which the file should declare.
if [ -x "$repo/build/bench/moelsp_bench_fim" ]; then
  for order in psm spm; do "$repo/build/bench/moelsp_bench_fim" --order $order --show 0 2>/dev/null | tail -4; done
fi
