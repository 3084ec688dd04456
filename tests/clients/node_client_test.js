'use strict';
// The Node client (clients/node) against a real pagoda-server: unary,
// streaming, cancellation, typed errors, health. Run by ctest as
// `node --test tests/clients/node_client_test.js` with PAGODA_BIN_DIR set.

const {test, before, after} = require('node:test');
const assert = require('node:assert');
const {spawn, execFileSync} = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const readline = require('node:readline');
const net = require('node:net');

const repo = path.join(__dirname, '..', '..');
const pagoda = require(path.join(repo, 'clients', 'node'));
const binDir = process.env.PAGODA_BIN_DIR || path.join(repo, 'build', 'bin');

let tmp;
let server;
let address;

before(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pagoda-node-'));
  const model = path.join(tmp, 'model');
  execFileSync('/usr/bin/python3', [path.join(repo, 'scripts', 'make_tiny_model.py'), '--out',
    model, '--num-layers', '2', '--tokenizer'], {stdio: 'ignore'});
  server = spawn(path.join(binDir, 'pagoda-server'), ['--model', model, '--port', '0',
    '--served-model-name', 'tiny', '--cpu-kv-cache-space', '0.05'],
  {stdio: ['ignore', 'pipe', 'ignore']});
  const lines = readline.createInterface({input: server.stdout});
  const port = await new Promise((resolve, reject) => {
    lines.on('line', (line) => {
      const m = /^PAGODA_SERVER_LISTENING (\d+)/.exec(line);
      if (m) resolve(Number(m[1]));
    });
    server.on('exit', (code) => reject(new Error(`pagoda-server exited ${code}`)));
  });
  address = `127.0.0.1:${port}`;
});

after(async () => {
  server.kill('SIGTERM');
  await new Promise((resolve) => server.on('exit', resolve));
  fs.rmSync(tmp, {recursive: true, force: true});
});

test('unary and stream agree', async () => {
  const client = new pagoda.Client(address, {timeoutMs: 60000});
  const result = await client.generate({tokenIds: [1, 5, 9], maxTokens: 8, ignoreEos: true,
    logprobs: 1});
  assert.strictEqual(result.promptTokenCount, 3);
  assert.strictEqual(result.outputs[0].tokenIds.length, 8);
  assert.strictEqual(result.outputs[0].finishReason, 'length');
  assert.strictEqual(result.outputs[0].logprobs.length, 8);
  const streamed = [];
  const reasons = [];
  for await (const delta of client.stream({tokenIds: [1, 5, 9], maxTokens: 8, ignoreEos: true})) {
    streamed.push(...delta.tokenIds);
    reasons.push(delta.finishReason);
  }
  assert.deepStrictEqual(streamed, result.outputs[0].tokenIds);
  assert.strictEqual(reasons.at(-1), 'length');
  const text = await client.generate({prompt: 'hello world', maxTokens: 4});
  assert.strictEqual(typeof text.outputs[0].text, 'string');
  client.close();
});

test('cancel a stream', async () => {
  const client = new pagoda.Client(address);
  const stream = client.stream({tokenIds: [1, 5, 9], maxTokens: 4000, ignoreEos: true});
  let received = 0;
  for await (const delta of stream) {
    received += delta.tokenIds.length;
    if (received >= 3) stream.cancel();
  }
  assert.ok(received >= 3 && received < 4000, `received ${received}`);
  assert.strictEqual(await client.health(), 'SERVING');
  client.close();
});

test('typed errors', async () => {
  const client = new pagoda.Client(address, {timeoutMs: 60000});
  await assert.rejects(client.generate({tokenIds: [1, 1000000]}), pagoda.InvalidArgumentError);
  await assert.rejects(async () => {
    for await (const _ of client.stream({tokenIds: [1], temperature: -1})) { /* none */ }
  }, pagoda.InvalidArgumentError);
  // 20 ms: the CPU worker can finish a whole 512-token context in a few hundred.
  const hurried = new pagoda.Client(address, {timeoutMs: 20});
  await assert.rejects(hurried.generate({tokenIds: [1], maxTokens: 4000, ignoreEos: true}),
      pagoda.DeadlineExceededError);
  hurried.close();
  assert.throws(() => client.stream({prompt: 'x', tokenIds: [1]}), TypeError);
  const port = await new Promise((resolve) => {
    const probe = net.createServer().listen(0, '127.0.0.1', () => {
      const p = probe.address().port;
      probe.close(() => resolve(p));
    });
  });
  const nobody = new pagoda.Client(`127.0.0.1:${port}`, {timeoutMs: 2000});
  await assert.rejects(nobody.health(), (e) => e instanceof pagoda.UnavailableError ||
      e instanceof pagoda.DeadlineExceededError);
  nobody.close();
  client.close();
});

test('health and model info', async () => {
  const client = new pagoda.Client(address, {timeoutMs: 60000});
  assert.strictEqual(await client.health(), 'SERVING');
  const info = await client.modelInfo();
  assert.strictEqual(info.model_name, 'tiny');
  assert.strictEqual(info.vocab_size, 256);
  client.close();
});
