// Starts `moelsp serve` on a free port with the embedded model and waits
// until it has loaded (/health is 503 while it loads).
const assert = require('node:assert');
const { spawn } = require('node:child_process');

async function startServer(args) {
  const binary = process.env.MOELSP_BINARY;
  assert.ok(binary, 'MOELSP_BINARY must be set');
  const proc = spawn(binary, ['serve', '--port', '0', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  const port = await new Promise((resolve, reject) => {
    let err = '';
    proc.stderr.on('data', (d) => {
      err += d;
      const m = /listening on http:\/\/[\d.]+:(\d+)/.exec(err);
      if (m) resolve(Number(m[1]));
    });
    proc.on('exit', (code) => reject(new Error(`moelsp serve exited ${code}: ${err}`)));
  });
  for (let i = 0; i < 300; i++) {
    const r = await fetch(`http://127.0.0.1:${port}/health`).catch(() => null);
    if (r && r.status === 200) return { proc, port };
    await new Promise((res) => setTimeout(res, 200));
  }
  proc.kill('SIGTERM');
  throw new Error('the model did not load');
}

module.exports = { startServer };
