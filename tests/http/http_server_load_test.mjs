// The HTTP server under load and hostile clients, against a real
// pagoda-server on loopback: keep-alive latency; vLLM's serving-benchmark
// shape (256 concurrent streaming clients on keep-alive connections, 2,000
// completions, 0 errors, the batch at --max-num-seqs) while 1,000 idle
// keep-alive connections are held and /health is polled every 100 ms, each
// poll answered within 100 ms; a slowloris of drip-fed headers and
// endless chunked bodies, a chunked body over the limit answered 413 as it
// crosses it, the connection limit, and a second server on a busy port.
// Every loop is bounded and every socket is closed before the end.
//
//   node tests/http/http_server_load_test.mjs SERVER_BINARY WORKER_BINARY
// Prints the measurements and "N passed, N failed"; exits non-zero on any failure.
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";

const [serverBinary, workerBinary] = process.argv.slice(2);
const repo = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const maxNumSeqs = 64;

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

function makeModel() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagoda_http_load_"));
  const made = spawnSync(process.env.PAGODA_PYTHON3 || "/usr/bin/python3", [
    path.join(repo, "scripts/make_tiny_model.py"), "--out", dir, "--vocab-size", "300",
    "--hidden-size", "32", "--intermediate-size", "64", "--num-layers", "1", "--num-heads", "2",
    "--tokenizer"], { encoding: "utf8" });
  if (made.status !== 0) throw new Error(`make_tiny_model failed: ${made.stderr}`);
  return dir;
}

// Starts a server; resolves with it once it listens, or with its exit code
// and stderr if it exits first.
function startServer(modelDir, extraArgs) {
  const child = spawn(serverBinary, [
    "--model", modelDir, "--served-model-name", "tiny", "--port", "0",
    // Blocks for 64 sequences of the load's 64-token answers at once.
    "--num-gpu-blocks-override", "1200", "--block-size", "4", "--max-num-seqs", String(maxNumSeqs),
    "--worker-binary", workerBinary, ...extraArgs], { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (data) => { stderr = (stderr + data).slice(-4000); });
  const ports = {};
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("server did not start")), 60000);
    readline.createInterface({ input: child.stdout }).on("line", (line) => {
      const [key, value] = line.split(" ");
      if (key === "PAGODA_HTTP_LISTENING") ports.http = Number(value);
      if (key === "PAGODA_METRICS_LISTENING") ports.metrics = Number(value);
      if (key === "PAGODA_SERVER_LISTENING") {
        clearTimeout(timer);
        resolve({ child, ports });
      }
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve({ child, exitCode: code, stderr });
    });
  });
}

function rssMiB(pid) {
  const status = fs.readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+)/.exec(status)[1]) / 1024;
}

// One GET on a fresh connection; resolves with its status and time in ms.
function timedGet(port, urlPath) {
  const start = performance.now();
  return new Promise((resolve) => {
    const req = http.get({ host: "127.0.0.1", port, path: urlPath, agent: false, timeout: 5000 }, (res) => {
      res.resume();
      res.on("end", () => resolve({ status: res.statusCode, ms: performance.now() - start }));
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", () => resolve({ status: 0, ms: performance.now() - start }));
  });
}

// Polls /health every 100 ms, each on a fresh connection, from another
// process (this one's event loop is busy driving the load): `count` times,
// or with `count` 0 until `stop()` is called. `done` resolves with the
// number of polls, the slowest time and the failures.
function startHealthPoller(port, count) {
  const script = `
import http.client, select, sys, time
slowest, bad, polls = 0.0, 0, 0
while ${count} == 0 or polls < ${count}:
    polls += 1
    start = time.perf_counter()
    try:
        c = http.client.HTTPConnection("127.0.0.1", ${port}, timeout=5)
        c.request("GET", "/health")
        status = c.getresponse().status
        c.close()
    except Exception:
        status = 0
    slowest = max(slowest, (time.perf_counter() - start) * 1000)
    bad += status != 200
    if select.select([sys.stdin], [], [], 0.1)[0]:  # Our parent closed stdin: stop.
        break
print(polls, slowest, bad)
`;
  const child = spawn(process.env.PAGODA_PYTHON3 || "/usr/bin/python3", ["-c", script]);
  let out = "";
  child.stdout.on("data", (d) => { out += d; });
  const done = new Promise((resolve) => {
    child.on("exit", () => {
      const [polls, slowest, bad] = out.trim().split(" ").map(Number);
      resolve({ polls, slowest, bad: Number.isFinite(bad) ? bad : Math.max(count, 1) });
    });
  });
  return { done, stop: () => child.stdin.end() };
}

function pollHealth(port, count) {
  return startHealthPoller(port, count).done;
}

// One streamed completion on `agent`'s keep-alive connections; true if it
// was answered 200 and its stream ended with a finish reason and [DONE].
function streamCompletion(port, agent, maxTokens) {
  const body = JSON.stringify({ model: "tiny", prompt: "hi", max_tokens: maxTokens, ignore_eos: true,
    temperature: 0, stream: true });
  return new Promise((resolve) => {
    const req = http.request({ host: "127.0.0.1", port, path: "/v1/completions", method: "POST", agent,
      headers: { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) } }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (chunk) => { text += chunk; });
      res.on("end", () => resolve(res.statusCode === 200 && text.includes('"finish_reason":"length"') &&
        text.trimEnd().endsWith("data: [DONE]")));
      res.on("error", () => resolve(false));
    });
    req.on("error", () => resolve(false));
    req.end(body);
  });
}

// The largest pagoda_batch_size seen, read every 100 ms until `stop()`.
function watchBatchSize(metricsPort) {
  let largest = 0;
  let stopped = false;
  const done = (async () => {
    while (!stopped) {
      const text = await new Promise((resolve) => {
        http.get({ host: "127.0.0.1", port: metricsPort, path: "/metrics", agent: false }, (res) => {
          let data = "";
          res.on("data", (d) => { data += d; });
          res.on("end", () => resolve(data));
        }).on("error", () => resolve(""));
      });
      const m = /^pagoda_batch_size\{[^}]*\} (\S+)$/m.exec(text);
      if (m) largest = Math.max(largest, Number(m[1]));
      await sleep(100);
    }
    return largest;
  })();
  return { done, stop: () => { stopped = true; } };
}

// Opens a raw connection; resolves once connected.
function connect(port) {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: "127.0.0.1", port }, () => resolve(socket));
    socket.on("error", reject);
  });
}

// Sends `request` on `socket` and resolves with the first response's text
// (headers and whatever body came with them) or "" if the socket closes.
function exchange(socket, request) {
  return new Promise((resolve) => {
    let data = "";
    const onData = (chunk) => {
      data += chunk;
      if (data.includes("\r\n\r\n")) {
        socket.off("data", onData);
        resolve(data);
      }
    };
    socket.on("data", onData);
    socket.once("close", () => resolve(data));
    socket.write(request);
  });
}

const modelDir = makeModel();
const server = await startServer(modelDir, ["--http-port", "-1", "--metrics-port", "-1"]);
const port = server.ports.http;
const sockets = [];
try {
  // Keep-alive: a 1-token request on a reused connection.
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const body = JSON.stringify({ prompt: "hello", max_tokens: 1, temperature: 0 });
  const latencies = [];
  for (let i = 0; i < 60; ++i) {
    const start = performance.now();
    const status = await new Promise((resolve, reject) => {
      const req = http.request({ host: "127.0.0.1", port, path: "/v1/completions", method: "POST", agent,
        headers: { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) } }, (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode));
      });
      req.on("error", reject);
      req.end(body);
    });
    if (i >= 10) latencies.push(performance.now() - start);  // After warm-up.
    check(status === 200, "keep-alive request", status);
  }
  agent.destroy();
  latencies.sort((a, b) => a - b);
  const p50 = latencies[Math.floor(latencies.length / 2)];
  console.log(`keep-alive 1-token latency: p50 ${p50.toFixed(2)} ms, max ${latencies.at(-1).toFixed(2)} ms`);
  check(p50 < 10, "keep-alive 1-token latency under 10 ms", `${p50} ms`);

  // 1,000 idle keep-alive connections, each after one request.
  for (let i = 0; i < 1000; ++i) {
    const socket = await connect(port);
    sockets.push(socket);
  }
  const answers = await Promise.all(sockets.map((s) => exchange(s, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")));
  check(answers.every((a) => a.startsWith("HTTP/1.1 200")), "1,000 keep-alive connections answered",
    answers.find((a) => !a.startsWith("HTTP/1.1 200")));
  const idleRss = rssMiB(server.child.pid);
  // While they idle: vLLM's serving-benchmark shape, 256 clients each
  // streaming one completion after another on its keep-alive connection,
  // 2,000 in all (more if that takes under 3 s, so that /health is polled
  // at least 20 times whatever the host's speed), while /health is polled
  // every 100 ms from start to end.
  const clients = 256;
  const total = 2000;
  const loadAgent = new http.Agent({ keepAlive: true, maxSockets: clients });
  const poller = startHealthPoller(port, 0);
  const batch = watchBatchSize(server.ports.metrics);
  const loadStart = performance.now();
  let issued = 0;
  let streamErrors = 0;
  await Promise.all(Array.from({ length: clients }, async () => {
    while (issued < total || performance.now() - loadStart < 3000) {
      ++issued;
      if (!(await streamCompletion(port, loadAgent, 64))) ++streamErrors;
    }
  }));
  const loadSeconds = (performance.now() - loadStart) / 1000;
  poller.stop();
  batch.stop();
  const loadPolls = await poller.done;
  const largestBatch = await batch.done;
  loadAgent.destroy();
  console.log(`${issued} streams from ${clients} clients beside 1,000 idle connections in ${loadSeconds.toFixed(1)} s: ` +
    `${streamErrors} errors, largest batch ${largestBatch}; /health polled ${loadPolls.polls} times, ` +
    `slowest ${loadPolls.slowest.toFixed(1)} ms`);
  check(issued >= total && streamErrors === 0, `${issued} streams from ${clients} clients complete`,
    `${streamErrors} errors`);
  check(loadPolls.polls >= 20 && loadPolls.bad === 0 && loadPolls.slowest < 100,
    "/health within 100 ms at every poll under 256 streams beside 1,000 idle connections", JSON.stringify(loadPolls));
  check(largestBatch === maxNumSeqs, "the batch reaches --max-num-seqs through HTTP alone", largestBatch);

  // Slowloris: 1,000 connections drip-feeding headers, 100 endless chunked
  // bodies; /health stays fast and memory bounded.
  for (const socket of sockets) socket.write("GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ");
  const bodies = [];
  for (let i = 0; i < 100; ++i) {
    const socket = await connect(port);
    socket.on("data", () => {});
    socket.write("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    bodies.push(socket);
  }
  const chunk = `400\r\n${"x".repeat(1024)}\r\n`;
  const drip = setInterval(() => {
    for (const socket of sockets) if (!socket.destroyed) socket.write("a");
    for (const socket of bodies) if (!socket.destroyed) socket.write(chunk);
  }, 100);
  const lorisPolls = await pollHealth(port, 20);
  clearInterval(drip);
  const lorisRss = rssMiB(server.child.pid);
  console.log(`/health under slowloris: slowest ${lorisPolls.slowest.toFixed(1)} ms; RSS idle ${idleRss.toFixed(1)} MiB, under attack ${lorisRss.toFixed(1)} MiB`);
  check(lorisPolls.bad === 0 && lorisPolls.slowest < 100, "/health within 100 ms under slowloris", JSON.stringify(lorisPolls));
  check(lorisRss - idleRss < 50, "RSS within 50 MB of idle under slowloris", `${idleRss} -> ${lorisRss}`);
  for (const socket of [...sockets, ...bodies]) socket.destroy();
  sockets.length = 0;

  // A chunked body that crosses the 4 MiB limit: 413 at once, although the
  // body never ends.
  const big = await connect(port);
  sockets.push(big);
  const reply = new Promise((resolve) => {
    let data = "";
    big.on("data", (d) => { data += d; if (data.includes("}}")) resolve(data); });
    big.on("close", () => resolve(data));
  });
  big.write("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  const piece = `10000\r\n${"y".repeat(0x10000)}\r\n`;
  let sent = 0;
  for (let i = 0; i < 80 && !big.destroyed; ++i) {  // 5 MiB at most.
    big.write(piece);
    sent += 0x10000;
    if (sent > (4 << 20)) break;
  }
  const crossedAt = performance.now();
  const tooLarge = await Promise.race([reply, sleep(3000).then(() => "no reply in 3 s")]);
  const took = performance.now() - crossedAt;
  check(tooLarge.startsWith("HTTP/1.1 413") && tooLarge.includes('"code":413'), "chunked body over the limit: 413",
    tooLarge.slice(0, 200));
  console.log(`413 for a chunked body ${took.toFixed(1)} ms after it crossed the limit`);
  check(took < 1000, "413 as soon as the limit is crossed", `${took} ms`);
  big.destroy();
  sockets.length = 0;

  // A second server on the same HTTP port exits 1 naming the port.
  const second = await startServer(modelDir, ["--http-port", String(port)]);
  if (second.exitCode === undefined) second.child.kill("SIGKILL");
  check(second.exitCode === 1 && second.stderr.includes(`:${port}`), "a second server on a busy port exits 1 naming it",
    `${second.exitCode} ${second.stderr.slice(-300)}`);
} finally {
  for (const socket of sockets) socket.destroy();
  server.child.kill("SIGTERM");
}

// The connection limit: one past it is refused at once; a freed slot serves.
const limited = await startServer(modelDir, ["--http-port", "-1", "--http-max-connections", "8"]);
try {
  const held = [];
  for (let i = 0; i < 8; ++i) {
    const socket = await connect(limited.ports.http);
    held.push(socket);
    await exchange(socket, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  const start = performance.now();
  const extra = await connect(limited.ports.http);
  const refusal = await Promise.race([exchange(extra, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"),
    sleep(3000).then(() => "no answer in 3 s")]);
  const ms = performance.now() - start;
  extra.destroy();
  check(refusal === "" || refusal.startsWith("HTTP/1.1 503"), "connection past the limit refused", refusal.slice(0, 100));
  check(ms < 1000, "refused at once", `${ms} ms`);
  held[0].destroy();
  // The slot is free once the server has seen the close: asked until then.
  let again = await timedGet(limited.ports.http, "/health");
  for (const deadline = performance.now() + 10000;
    again.status !== 200 && performance.now() < deadline;) {
    await sleep(20);
    again = await timedGet(limited.ports.http, "/health");
  }
  check(again.status === 200, "a freed slot serves again", again.status);
  for (const socket of held) socket.destroy();
} finally {
  limited.child.kill("SIGTERM");
}
fs.rmSync(modelDir, { recursive: true, force: true });
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
