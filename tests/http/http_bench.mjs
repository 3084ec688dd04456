// HTTP twin of pagoda-bench (which drives gRPC): concurrent clients on
// keep-alive connections send POST /v1/completions with token-id prompts of
// --prompt-len tokens, --max-tokens greedy tokens each (ignore_eos), whole
// or streamed; prints requests/s, output tokens/s and TTFT p50/p99 (streamed)
// per concurrency level. Not a ctest: a measuring tool.
//
//   node tests/http/http_bench.mjs PORT [--concurrency 1,16,64,256]
//       [--rounds 2] [--prompt-len 32] [--max-tokens 64] [--stream]
import http from "node:http";

const args = process.argv.slice(2);
const port = Number(args[0]);
const flag = (name, fallback) => {
  const i = args.indexOf(`--${name}`);
  return i < 0 ? fallback : args[i + 1];
};
const levels = flag("concurrency", "1,16,64,256").split(",").map(Number);
const rounds = Number(flag("rounds", "2"));
const promptLen = Number(flag("prompt-len", "32"));
const maxTokens = Number(flag("max-tokens", "64"));
const stream = args.includes("--stream");
const vocab = 300;

function request(agent, body) {
  return new Promise((resolve) => {
    const start = performance.now();
    let ttft = null;
    let text = "";
    const req = http.request({ host: "127.0.0.1", port, path: "/v1/completions", method: "POST", agent,
      headers: { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) } }, (res) => {
      res.setEncoding("utf8");
      res.on("data", (chunk) => {
        if (ttft === null) ttft = performance.now() - start;
        text += chunk;
      });
      res.on("end", () => {
        let tokens = 0;
        if (res.statusCode === 200) {
          if (stream) {
            const last = text.lastIndexOf('"usage"');
            tokens = last < 0 ? 0 : JSON.parse(text.slice(text.lastIndexOf("data: {", last) + 6).split("\n")[0]).usage.completion_tokens;
          } else {
            tokens = JSON.parse(text).usage.completion_tokens;
          }
        }
        resolve({ ok: res.statusCode === 200, tokens, ttft });
      });
    });
    req.on("error", () => resolve({ ok: false, tokens: 0, ttft: null }));
    req.end(body);
  });
}

const percentile = (sorted, p) => sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))];
console.log(`HTTP ${stream ? "streamed" : "whole"}: prompt ${promptLen} tokens, ${maxTokens} output tokens, ${rounds} rounds per client`);
console.log("concurrency requests errors  out_tok  wall_s   req/s  out_tok/s ttft_p50_ms ttft_p99_ms");
for (const concurrency of [0, ...levels]) {  // 0: one warm-up request.
  const agent = new http.Agent({ keepAlive: true, maxSockets: Math.max(1, concurrency) });
  const total = concurrency === 0 ? 1 : concurrency * rounds;
  let next = 0;
  let errors = 0;
  let tokens = 0;
  const ttfts = [];
  const start = performance.now();
  await Promise.all(Array.from({ length: Math.max(1, concurrency) }, async (_, c) => {
    for (let round = 0; next < total; ++round) {
      ++next;
      const prompt = Array.from({ length: promptLen }, (_, i) => 3 + (i * 31 + c * 7 + round * 13) % (vocab - 3));
      const body = JSON.stringify({ model: "tiny", prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true,
        stream, ...(stream ? { stream_options: { include_usage: true } } : {}) });
      const result = await request(agent, body);
      if (!result.ok) ++errors;
      tokens += result.tokens;
      if (result.ttft !== null) ttfts.push(result.ttft);
    }
  }));
  const wall = (performance.now() - start) / 1000;
  agent.destroy();
  if (concurrency === 0) continue;
  ttfts.sort((a, b) => a - b);
  console.log(`${String(concurrency).padStart(11)} ${String(total).padStart(8)} ${String(errors).padStart(6)} ${String(tokens).padStart(8)} ` +
    `${wall.toFixed(2).padStart(7)} ${(total / wall).toFixed(1).padStart(7)} ${(tokens / wall).toFixed(0).padStart(10)} ` +
    `${(stream ? percentile(ttfts, 0.5).toFixed(2) : "-").padStart(11)} ${(stream ? percentile(ttfts, 0.99).toFixed(2) : "-").padStart(11)}`);
}
