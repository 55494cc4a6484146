#!/usr/bin/env bash
# Runs one real-editor client test against the moelsp binary. A missing
# client program is a failure, not a skip: the README's set-up installs them.
#   run_client_test.sh node|nvim|emacs MOELSP_BINARY TEST_DATA_DIR CLIENT_DIR
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
esac
echo "unknown client test $kind" >&2
exit 1
