#!/usr/bin/env bash
# Train moelsp's small tool-calling agent model and write it into the repository:
#   tools/train-agent-model/run.sh [WORK_DIR]      # default WORK_DIR: /tmp/moelsp-agent-train
# About 70 minutes on the 2-core development machine (MINUTES=42 and COPY_MINUTES=25 of training).
# It starts from the committed default model (models/moelsp-default.gguf), whose
# tokenizer tools/train-default-model re-makes piece for piece (about a minute).
# Debian packages only; Debian's /usr/bin/python3.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=${1:-/tmp/moelsp-agent-train}
py=/usr/bin/python3
template="$repo/tests/data/templates/Qwen3-Coder.jinja"

need=(python3-torch python3-numpy python3-sentencepiece python3-jinja2 libpython3.11-stdlib
      libpython3.11-testsuite libboost1.81-dev libopenblas0-pthread libtcmalloc-minimal4)
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

export OMP_WAIT_POLICY=PASSIVE
export LD_PRELOAD=libtcmalloc_minimal.so.4
mkdir -p "$work"
# The default model's corpus and tokenizer: file contents, fillers, and the vocabulary the weights speak.
(cd "$repo/tools/train-default-model" && $py corpus.py "$work" && $py tokenizer.py "$work")
cd "$here"
$py train_agent.py "$work" --init-gguf "$repo/models/moelsp-default.gguf" --template "$template" \
  --minutes "${MINUTES:-42}" --lr 1e-3 --warmup 30
# The second phase teaches copying: the first phase's model makes the right calls but garbles the
# line it quotes, so text answers weigh 3x and each prompt carries two to four rounds.
$py train_agent.py "$work" --resume --template "$template" --minutes "${COPY_MINUTES:-25}" --lr 5e-4 --warmup 20 \
  --answer-weight 3 --rounds 2,3,4,4 --seed 8 --log agent_train_log_copy.jsonl
$py finish_agent.py "$work" "$repo" --template "$template"
unset LD_PRELOAD
# The real agent CLIs against it (tests/agents/run_agents.py, as the test command runs it).
if [ -x "$repo/build/cli/moelsp" ]; then
  $py "$repo/tests/agents/run_agents.py" --moelsp "$repo/build/cli/moelsp" -m "$repo/models/moelsp-agent.gguf" --slim
fi
