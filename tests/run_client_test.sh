#!/usr/bin/env bash
# Runs one real-editor client test against the moelsp binary. A missing
# client program is a failure, not a skip: the README's set-up installs them.
#   run_client_test.sh KIND MOELSP_BINARY TEST_DATA_DIR CLIENT_DIR
# KIND: node, nvim, emacs (the protocol through each editor's own LSP client);
# nvim-plugin, nvim-spec, emacs-plugin, vim9, helix, vscode (the clients in editor-clients/).
set -euo pipefail
kind=$1 binary=$2 data=$3 dir=$4
export MOELSP_BINARY=$binary MOELSP_TEST_DATA=$data
need() { command -v "$1" >/dev/null || { echo "client test: '$1' is not installed (tools/setup.sh installs it)" >&2; exit 1; }; }
case "$kind" in
  node)
    need node
    [ -d "$dir/node_modules/vscode-jsonrpc" ] || { echo "client test: run npm ci in $dir (tools/setup.sh does)" >&2; exit 1; }
    exec node --test "$dir/"
    ;;
  nvim)
    need nvim
    exec timeout 120 nvim --headless -u NONE -c "luafile $dir/nvim_client.lua"
    ;;
  emacs)
    need emacs
    exec timeout 120 emacs -q --batch -l "$dir/eglot_client.el"
    ;;
  nvim-plugin)
    need nvim
    exec timeout 150 nvim --headless -u NONE -c "set rtp+=$dir/../nvim" -c "luafile $dir/nvim_plugin_test.lua"
    ;;
  nvim-spec)
    need nvim
    exec timeout 120 nvim --headless -u NONE -c "luafile $dir/nvim_spec_test.lua"
    ;;
  emacs-plugin)
    need emacs
    exec timeout 150 emacs -q --batch -l "$dir/moelsp_el_test.el"
    ;;
  vim9)
    need vim
    exec timeout 180 /usr/bin/python3 "$dir/run_vim9_test.py"
    ;;
  helix)
    exec timeout 120 /usr/bin/python3 "$dir/helix_config_test.py"
    ;;
  vscode)
    exec "$dir/../vscode/e2e/run.sh" "$binary"
    ;;
esac
echo "unknown client test $kind" >&2
exit 1
