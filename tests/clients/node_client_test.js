'use strict';
// The Node client (clients/node) against a real pagoda-server: unary,
// streaming, cancellation, typed errors, health, every request field. Run by ctest as
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

test('every request field reaches the server', async () => {
  const client = new pagoda.Client(address, {timeoutMs: 60000});
  const base = {tokenIds: [1, 5, 9, 5, 9], maxTokens: 8, ignoreEos: true};
  const tokens = async (options) => (await client.generate({...base, ...options})).outputs[0]
      .tokenIds;
  const several = await client.generate({...base, n: 3, bestOf: 4, temperature: 1, seed: 3});
  assert.deepStrictEqual(several.outputs.map((o) => o.index).sort(), [0, 1, 2]);
  const beams = await client.generate({...base, n: 2, useBeamSearch: true, lengthPenalty: 1,
    earlyStopping: true});
  assert.strictEqual(beams.outputs.length, 2);
  assert.deepStrictEqual(await tokens({logitBias: {77: 100}}), Array(8).fill(77));
  for (const t of await tokens({allowedTokenIds: [7, 9]})) assert.ok(t === 7 || t === 9, `${t}`);
  assert.notDeepStrictEqual(await tokens({logitBias: {77: 20}, frequencyPenalty: 2,
    presencePenalty: 2, repetitionPenalty: 2}), Array(8).fill(77));
  const plain = await tokens({});
  assert.deepStrictEqual(await tokens({stopTokenIds: [plain[2]], minTokens: 1, minP: 0.1,
    badWords: ['hello'], priority: 1}), plain.slice(0, plain.indexOf(plain[2]) + 1));
  const text = (await client.generate({prompt: 'hello world', maxTokens: 12, ignoreEos: true}))
      .outputs[0].text;
  const stop = text.slice(3, 5);
  const stopped = (await client.generate({prompt: 'hello world', maxTokens: 12, ignoreEos: true,
    stop: [stop], includeStopStrInOutput: true})).outputs[0];
  assert.strictEqual(stopped.finishReason, 'stop');
  assert.strictEqual(stopped.text, text.slice(0, text.indexOf(stop) + stop.length));
  const choice = await client.generate({prompt: 'pick', maxTokens: 8, choice: ['yes', 'no']});
  assert.ok(['yes', 'no'].includes(choice.outputs[0].text), choice.outputs[0].text);
  const regex = await client.generate({prompt: 'pick', maxTokens: 8, regex: '[ab]{3}'});
  assert.match(regex.outputs[0].text, /^[ab]{3}$/);
  for (const [options, field] of [
    [{presencePenalty: 3}, 'presence_penalty'], [{frequencyPenalty: -3}, 'frequency_penalty'],
    [{repetitionPenalty: 5}, 'repetition_penalty'], [{minP: 2}, 'min_p'],
    [{logitBias: {3: 500}}, 'logit_bias'], [{allowedTokenIds: [1000000]}, 'allowed_token_ids'],
    [{badWords: Array(1000).fill('x')}, 'bad_words'], [{priority: 1e8}, 'priority'],
    [{jsonSchema: {type: 'no such type'}}, 'json_schema']]) {
    await assert.rejects(client.generate({...base, ...options}),
        (e) => e instanceof pagoda.InvalidArgumentError && e.details.includes(field), field);
  }
  assert.throws(() => client.stream({...base, topQ: 1}), TypeError);
  const defaults = (await client.modelInfo()).sampling_defaults;
  // The tiny model's generation_config.json sets no sampling default: none in force.
  for (const field of ['temperature', 'top_k', 'top_p', 'min_p', 'repetition_penalty']) {
    assert.ok(!(field in defaults), `${field} reported as a default`);
  }
  client.close();
});
