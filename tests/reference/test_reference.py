"""Self-checks of the tiny-model maker and the float64 NumPy reference.

Run from the repo root with Debian's python (ctest does this):
  /usr/bin/python3 -m unittest discover -s tests/reference -p 'test_*.py' -v
"""

import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MAKER = os.path.join(REPO, "scripts", "make_tiny_model.py")
REFERENCE = os.path.join(HERE, "llama_reference.py")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "scripts"))

import llama_reference as ref  # noqa: E402
import make_tiny_model as maker  # noqa: E402

SMALL = ["--vocab-size", "32", "--hidden-size", "16", "--intermediate-size",
         "24", "--num-layers", "2", "--num-heads", "4", "--num-kv-heads", "2"]


class TempDirTest(unittest.TestCase):

  def setUp(self):
    self._tmp = tempfile.TemporaryDirectory()
    self.tmp = self._tmp.name

  def tearDown(self):
    self._tmp.cleanup()

  def make(self, name, *flags):
    out = os.path.join(self.tmp, name)
    result = subprocess.run([sys.executable, MAKER, "--out", out, *flags],
                            capture_output=True, text=True)
    self.assertEqual(result.returncode, 0, result.stderr)
    return out


def bf16_nearest_even(x32):
  """Independent bf16 rounding: choose the nearer of the two neighbouring
  bf16 values in float64 arithmetic, ties to the even mantissa."""
  bits = x32.astype(np.float32).view(np.uint32).astype(np.uint64)
  down_bits = bits & 0xFFFF0000
  up_bits = down_bits + 0x10000
  as_f64 = lambda b: b.astype(np.uint32).view(np.float32).astype(np.float64)
  down, up = as_f64(down_bits), as_f64(up_bits)
  x = x32.astype(np.float64)
  d_down, d_up = np.abs(x - down), np.abs(up - x)
  down_is_even = ((down_bits >> 16) & 1) == 0
  pick_down = (d_down < d_up) | ((d_down == d_up) & down_is_even)
  return np.where(pick_down, down, up)


class MakerFilesTest(TempDirTest):

  def expected_weights(self, flags):
    args = maker.parse_args(["--out", "unused", *flags])
    return maker.make_weights(args)

  def test_round_trip_every_dtype_and_sharding(self):
    flags = SMALL + ["--arch", "qwen2", "--seed", "7"]
    expected32 = self.expected_weights(flags)
    convert = {
        "f32": lambda a: a.astype(np.float64),
        "f16": lambda a: a.astype(np.float16).astype(np.float64),
        "bf16": bf16_nearest_even,
    }
    for dtype in ("f32", "f16", "bf16"):
      for shards in (1, 3):
        with self.subTest(dtype=dtype, shards=shards):
          out = self.make(f"{dtype}_{shards}", *flags, "--dtype", dtype,
                          "--shards", str(shards))
          got = ref.read_model_weights(out)
          self.assertEqual(set(got), set(expected32))
          for name, a in expected32.items():
            self.assertEqual(got[name].shape, a.shape, name)
            np.testing.assert_array_equal(got[name], convert[dtype](a), name)
          if dtype != "f32":  # rounding happened, but only a little
            emb = expected32["model.embed_tokens.weight"]
            diff = got["model.embed_tokens.weight"] - emb
            self.assertGreater(np.abs(diff).max(), 0)
            rel = 2.0**-8 if dtype == "bf16" else 2.0**-11
            self.assertTrue(np.all(np.abs(diff) <= np.abs(emb) * rel + 1e-7))
          files = sorted(f for f in os.listdir(out)
                         if f.endswith(".safetensors"))
          if shards == 1:
            self.assertEqual(files, ["model.safetensors"])
          else:
            self.assertEqual(files, [f"model-0000{k}-of-00003.safetensors"
                                     for k in (1, 2, 3)])
            with open(os.path.join(out, "model.safetensors.index.json")) as f:
              index = json.load(f)
            self.assertEqual(set(index["weight_map"]), set(expected32))
            self.assertEqual(set(index["weight_map"].values()), set(files))

  def test_safetensors_layout(self):
    out = self.make("m", *SMALL, "--dtype", "f16")
    path = os.path.join(out, "model.safetensors")
    with open(path, "rb") as f:
      blob = f.read()
    n = int.from_bytes(blob[:8], "little")
    self.assertEqual(n % 8, 0)
    header = json.loads(blob[8:8 + n])
    spans = sorted(v["data_offsets"] for k, v in header.items()
                   if k != "__metadata__")
    self.assertEqual(spans[0][0], 0)
    for (_, end), (begin, _) in zip(spans, spans[1:]):
      self.assertEqual(end, begin)  # contiguous, no gaps or overlaps
    self.assertEqual(8 + n + spans[-1][1], len(blob))
    for k, v in header.items():
      if k != "__metadata__":
        self.assertEqual(v["dtype"], "F16")
        self.assertEqual(v["data_offsets"][1] - v["data_offsets"][0],
                         2 * math.prod(v["shape"]))

  def test_bf16_rounds_to_nearest_even(self):
    def bits(x):
      return int(maker.float32_to_bf16_bits(np.array([x], np.float32))[0])
    self.assertEqual(bits(1.0), 0x3F80)
    self.assertEqual(bits(-2.0), 0xC000)
    self.assertEqual(bits(1 + 2**-8), 0x3F80)  # tie, down to even
    self.assertEqual(bits(1 + 3 * 2**-8), 0x3F82)  # tie, up to even
    self.assertEqual(bits(1 + 2**-8 + 2**-20), 0x3F81)  # above the tie
    self.assertEqual(bits(1 + 2**-8 - 2**-20), 0x3F80)  # below the tie

  def test_names_shapes_and_config(self):
    out = self.make("m", "--arch", "qwen2", "--vocab-size", "40",
                    "--hidden-size", "12", "--intermediate-size", "20",
                    "--num-layers", "2", "--num-heads", "4",
                    "--num-kv-heads", "2", "--head-dim", "8",
                    "--tie-word-embeddings", "--rope-theta", "500000",
                    "--rope-scaling", "llama3", "--rope-factor", "8",
                    "--rms-norm-eps", "1e-6", "--bos-id", "5", "--eos-id",
                    "6", "--max-position-embeddings", "99")
    w = ref.read_model_weights(out)
    expected = {"model.embed_tokens.weight": (40, 12),
                "model.norm.weight": (12,)}
    for i in range(2):
      p = f"model.layers.{i}."
      expected.update({
          p + "self_attn.q_proj.weight": (32, 12),
          p + "self_attn.k_proj.weight": (16, 12),
          p + "self_attn.v_proj.weight": (16, 12),
          p + "self_attn.q_proj.bias": (32,),
          p + "self_attn.k_proj.bias": (16,),
          p + "self_attn.v_proj.bias": (16,),
          p + "self_attn.o_proj.weight": (12, 32),
          p + "mlp.gate_proj.weight": (20, 12),
          p + "mlp.up_proj.weight": (20, 12),
          p + "mlp.down_proj.weight": (12, 20),
          p + "input_layernorm.weight": (12,),
          p + "post_attention_layernorm.weight": (12,)})
    self.assertEqual({k: v.shape for k, v in w.items()}, expected)
    norm = w["model.layers.0.input_layernorm.weight"]
    self.assertTrue(np.all((norm >= 0.8) & (norm <= 1.2)))
    self.assertGreater(norm.std(), 0.05)
    with open(os.path.join(out, "config.json")) as f:
      cfg = json.load(f)
    self.assertEqual(cfg["architectures"], ["Qwen2ForCausalLM"])
    self.assertEqual(cfg["head_dim"], 8)
    self.assertEqual(cfg["num_key_value_heads"], 2)
    self.assertTrue(cfg["tie_word_embeddings"])
    self.assertEqual(cfg["rope_theta"], 500000)
    self.assertEqual(cfg["rope_scaling"]["rope_type"], "llama3")
    self.assertEqual(cfg["rope_scaling"]["factor"], 8)
    self.assertEqual(cfg["rope_scaling"]["original_max_position_embeddings"],
                     64)
    self.assertEqual((cfg["bos_token_id"], cfg["eos_token_id"]), (5, 6))
    self.assertEqual(cfg["max_position_embeddings"], 99)
    self.assertEqual(cfg["rms_norm_eps"], 1e-6)
    with open(os.path.join(out, "generation_config.json")) as f:
      self.assertEqual(json.load(f)["eos_token_id"], 6)
    self.assertEqual(ref.load_model(out).eos_ids, [6])
    # Without --head-dim, config.json leaves it to be derived.
    out = self.make("plain", *SMALL)
    with open(os.path.join(out, "config.json")) as f:
      self.assertNotIn("head_dim", json.load(f))
    self.assertIn("lm_head.weight", ref.read_model_weights(out))

  def test_presets(self):
    args = maker.parse_args(["--preset", "demo", "--out", "x"])
    self.assertEqual(
        (args.arch, args.vocab_size, args.hidden_size, args.num_layers,
         args.num_heads, args.num_kv_heads, args.intermediate_size,
         args.max_position_embeddings, args.dtype, args.tokenizer),
        ("llama", 512, 256, 4, 8, 4, 688, 2048, "f16", True))
    args = maker.parse_args(["--preset", "bench", "--out", "x"])
    self.assertEqual(
        (args.vocab_size, args.hidden_size, args.num_layers, args.num_heads,
         args.num_kv_heads, args.intermediate_size, args.dtype,
         args.tokenizer),
        (2048, 512, 8, 8, 8, 1376, "f32", False))
    # Explicit flags override the preset.
    args = maker.parse_args(["--preset", "demo", "--out", "x",
                             "--num-layers", "1"])
    self.assertEqual(args.num_layers, 1)

  def test_same_seed_same_bytes(self):
    read = lambda d, f: open(os.path.join(d, f), "rb").read()
    a = self.make("a", *SMALL, "--seed", "4", "--tokenizer", "--vocab-size",
                  "200")
    b = self.make("b", *SMALL, "--seed", "4", "--tokenizer", "--vocab-size",
                  "200")
    c = self.make("c", *SMALL, "--seed", "5")
    self.assertEqual(read(a, "model.safetensors"), read(b, "model.safetensors"))
    self.assertEqual(read(a, "tokenizer.model"), read(b, "tokenizer.model"))
    self.assertNotEqual(read(a, "model.safetensors"),
                        read(c, "model.safetensors"))

  def test_rejects_bad_shapes(self):
    for flags in (["--num-heads", "4", "--num-kv-heads", "3"],
                  ["--hidden-size", "10", "--num-heads", "4"],
                  ["--head-dim", "5"], ["--eos-id", "999"]):
      with self.subTest(flags=flags):
        result = subprocess.run(
            [sys.executable, MAKER, "--out", os.path.join(self.tmp, "bad"),
             *flags], capture_output=True, text=True)
        self.assertNotEqual(result.returncode, 0)


class ExplicitLoopTest(TempDirTest):
  """The reference against a scalar, loop-by-loop forward written here."""

  @staticmethod
  def scalar_inv_freq(cfg, head_dim):
    theta = cfg["rope_theta"]
    scaling = cfg["rope_scaling"]
    freqs = []
    for i in range(head_dim // 2):
      f = theta ** (-(2.0 * i) / head_dim)
      if scaling and scaling["rope_type"] == "linear":
        f = f / scaling["factor"]
      elif scaling and scaling["rope_type"] == "llama3":
        factor = scaling["factor"]
        lo, hi = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / f
        if wavelen < old / hi:
          pass  # high frequency: kept
        elif wavelen > old / lo:
          f = f / factor  # low frequency: slowed
        else:
          s = (old / wavelen - lo) / (hi - lo)
          f = (1 - s) * f / factor + s * f
      freqs.append(f)
    return freqs

  def scalar_forward(self, model_dir, tokens):
    with open(os.path.join(model_dir, "config.json")) as f:
      cfg = json.load(f)
    w = {k: v.tolist() for k, v in ref.read_model_weights(model_dir).items()}
    hidden, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", hidden // nh)
    eps = cfg["rms_norm_eps"]
    inv_freq = self.scalar_inv_freq(cfg, hd)

    def matvec(m, x, bias=None):
      return [sum(r[j] * x[j] for j in range(len(x))) +
              (bias[i] if bias else 0.0) for i, r in enumerate(m)]

    def norm(x, g):
      inv = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
      return [x[i] * inv * g[i] for i in range(len(x))]

    def rope(vec, pos):
      half = hd // 2
      out = list(vec)
      for i in range(half):
        c, s = math.cos(pos * inv_freq[i]), math.sin(pos * inv_freq[i])
        out[i] = vec[i] * c - vec[i + half] * s
        out[i + half] = vec[i + half] * c + vec[i] * s
      return out

    xs = [list(w["model.embed_tokens.weight"][t]) for t in tokens]
    for layer in range(cfg["num_hidden_layers"]):
      p = f"model.layers.{layer}."
      get = lambda n: w.get(p + n)
      qs, ks, vs = [], [], []
      for pos, x in enumerate(xs):
        h = norm(x, get("input_layernorm.weight"))
        q = matvec(get("self_attn.q_proj.weight"), h,
                   get("self_attn.q_proj.bias"))
        k = matvec(get("self_attn.k_proj.weight"), h,
                   get("self_attn.k_proj.bias"))
        v = matvec(get("self_attn.v_proj.weight"), h,
                   get("self_attn.v_proj.bias"))
        qs.append([rope(q[a * hd:(a + 1) * hd], pos) for a in range(nh)])
        ks.append([rope(k[a * hd:(a + 1) * hd], pos) for a in range(nkv)])
        vs.append([v[a * hd:(a + 1) * hd] for a in range(nkv)])
      new_xs = []
      for t, x in enumerate(xs):
        concat = []
        for a in range(nh):
          kv = a // (nh // nkv)
          scores = [sum(qs[t][a][d] * ks[s][kv][d] for d in range(hd)) /
                    math.sqrt(hd) for s in range(t + 1)]
          top = max(scores)
          e = [math.exp(sc - top) for sc in scores]
          total = sum(e)
          concat += [sum(e[s] / total * vs[s][kv][d] for s in range(t + 1))
                     for d in range(hd)]
        attn = matvec(get("self_attn.o_proj.weight"), concat)
        x = [x[i] + attn[i] for i in range(hidden)]
        h = norm(x, get("post_attention_layernorm.weight"))
        g = matvec(get("mlp.gate_proj.weight"), h)
        u = matvec(get("mlp.up_proj.weight"), h)
        act = [g[i] / (1 + math.exp(-g[i])) * u[i] for i in range(len(g))]
        down = matvec(get("mlp.down_proj.weight"), act)
        new_xs.append([x[i] + down[i] for i in range(hidden)])
      xs = new_xs
    head = w.get("lm_head.weight")
    if cfg["tie_word_embeddings"]:
      head = w["model.embed_tokens.weight"]
    return np.array([matvec(head, norm(x, w["model.norm.weight"]))
                     for x in xs])

  def test_matches_scalar_loop(self):
    base = ["--vocab-size", "16", "--hidden-size", "8",
            "--intermediate-size", "12", "--num-layers", "2"]
    cases = {
        "llama_mha_plain": ["--num-heads", "2"],
        "qwen2_gqa_headdim_llama3": [
            "--arch", "qwen2", "--num-heads", "2", "--num-kv-heads", "1",
            "--head-dim", "6", "--rope-theta", "100", "--rope-scaling",
            "llama3", "--rope-factor", "8", "--rms-norm-eps", "1e-2"],
        "mistral_tied_linear_bf16": [
            "--arch", "mistral", "--num-heads", "4", "--num-kv-heads", "2",
            "--tie-word-embeddings", "--rope-scaling", "linear",
            "--rope-factor", "2.5", "--dtype", "bf16", "--rope-theta", "50"],
        "one_layer_one_head": ["--num-heads", "1", "--hidden-size", "4",
                               "--num-layers", "1"],
    }
    tokens = [3, 0, 15, 7, 7, 1]
    for name, flags in cases.items():
      with self.subTest(case=name):
        out = self.make(name, *base, *flags, "--seed", "3")
        want = self.scalar_forward(out, tokens)
        got = ref.forward(ref.load_model(out), tokens)
        self.assertEqual(got.shape, (len(tokens), 16))
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)

  def test_llama3_exercises_all_three_regions(self):
    # head_dim 8, theta 1e4, original 64: wavelengths 6.3 (kept), 62.8
    # (interpolated), 628 and 6283 (divided by the factor).
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    got = ref.rope_inv_freq(8, 10000.0, scaling)
    s = (64 / (2 * math.pi / 0.1) - 1) / 3
    want = [1.0, (1 - s) * 0.1 / 8 + s * 0.1, 0.01 / 8, 0.001 / 8]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    self.assertTrue(0 < s < 1)
    cfg = {"rope_theta": 10000.0, "rope_scaling": scaling}
    np.testing.assert_allclose(got, self.scalar_inv_freq(cfg, 8), rtol=1e-12)


class ModelPropertiesTest(TempDirTest):

  def test_causality(self):
    for arch in ("llama", "qwen2"):
      with self.subTest(arch=arch):
        model = ref.load_model(self.make(arch, *SMALL, "--arch", arch))
        tokens = [1, 5, 9, 30, 2, 2, 17, 4]
        full = ref.forward(model, tokens)
        for k in (1, 3, 7):
          np.testing.assert_allclose(ref.forward(model, tokens[:k]), full[:k],
                                     rtol=1e-12, atol=1e-12)
        # The last position does read the first token.
        changed = ref.forward(model, [6] + tokens[1:])
        self.assertGreater(np.abs(changed[-1] - full[-1]).max(), 1e-3)

  def test_gqa_equals_mha_with_duplicated_kv(self):
    out = self.make("gqa", *SMALL, "--arch", "qwen2", "--num-heads", "4",
                    "--num-kv-heads", "2", "--head-dim", "6")
    gqa = ref.load_model(out)
    group, hd = 2, 6

    def widen(model, expand):
      weights = dict(model.weights)
      for layer in range(model.num_layers):
        for proj in ("k_proj", "v_proj"):
          for kind in ("weight", "bias"):
            name = f"model.layers.{layer}.self_attn.{proj}.{kind}"
            a = weights[name]
            heads = a.reshape(2, hd, *a.shape[1:])
            weights[name] = expand(heads).reshape(4 * hd, *a.shape[1:])
      return dataclasses.replace(model, weights=weights, num_kv_heads=4)

    tokens = [4, 8, 15, 16, 23, 31]
    # Query head h reads kv head h // group: [kv0, kv0, kv1, kv1].
    mha = widen(gqa, lambda h: np.repeat(h, group, axis=0))
    np.testing.assert_allclose(ref.forward(mha, tokens),
                               ref.forward(gqa, tokens), rtol=1e-12,
                               atol=1e-12)
    # The other mapping ([kv0, kv1, kv0, kv1]) is a different model, so the
    # comparison above does pin the mapping down.
    wrong = widen(gqa, lambda h: np.concatenate([h, h], axis=0))
    self.assertGreater(
        np.abs(ref.forward(wrong, tokens) - ref.forward(gqa, tokens)).max(),
        1e-3)

  def test_rope_scaling_identities(self):
    tokens = list(range(1, 31))

    def logits(name, *flags):
      model = ref.load_model(self.make(name, *SMALL, "--head-dim", "8",
                                       "--seed", "11", *flags))
      return ref.forward(model, tokens)

    none = logits("none")
    same = {
        "linear_1": ["--rope-scaling", "linear", "--rope-factor", "1"],
        "llama3_1": ["--rope-scaling", "llama3", "--rope-factor", "1"],
        # Every wavelength is shorter than 1e9 / 4: nothing is scaled.
        "llama3_selects_nothing": [
            "--rope-scaling", "llama3", "--rope-factor", "8",
            "--rope-original-max-position-embeddings", "1000000000"],
    }
    for name, flags in same.items():
      with self.subTest(name=name):
        np.testing.assert_allclose(logits(name, *flags), none, rtol=1e-12,
                                   atol=1e-12)
    llama3 = logits("llama3_8", "--rope-scaling", "llama3", "--rope-factor",
                    "8")
    linear = logits("linear_8", "--rope-scaling", "linear", "--rope-factor",
                    "8")
    theta = logits("theta", "--rope-theta", "500")
    for other in (llama3, linear, theta):
      # Position 0 has no rotation; later positions must move.
      np.testing.assert_allclose(other[0], none[0], rtol=1e-12, atol=1e-12)
      self.assertGreater(np.abs(other[1:] - none[1:]).max(), 1e-3)
    self.assertGreater(np.abs(llama3 - linear).max(), 1e-3)

  def test_logits_spread_and_greedy_not_degenerate(self):
    out = self.make("demo_like", "--vocab-size", "512", "--hidden-size",
                    "256", "--num-layers", "4", "--num-heads", "8",
                    "--num-kv-heads", "4", "--intermediate-size", "688",
                    "--dtype", "f16")
    model = ref.load_model(out)
    tokens = list(range(3, 43))
    logits = ref.forward(model, tokens)
    self.assertTrue(np.all(np.isfinite(logits)))
    spread = logits.std(axis=1)
    self.assertTrue(np.all((spread > 1.0) & (spread < 8.0)), spread)
    top2 = np.sort(logits, axis=1)[:, -2:]
    self.assertGreater(np.median(top2[:, 1] - top2[:, 0]), 0.1)
    generated = ref.greedy_generate(model, [1, 17, 42], 24, ignore_eos=True)
    self.assertGreater(len(set(generated)), 8)


class GenerateTest(TempDirTest):

  def setUp(self):
    super().setUp()
    self.dir = self.make("m", *SMALL, "--seed", "5")
    self.model = ref.load_model(self.dir)

  def test_prompt_logprobs_score_each_next_token_under_its_row(self):
    prompt = [1, 4, 9, 4, 2]
    entries = ref.prompt_logprobs(self.model, prompt, top=3)
    self.assertEqual(len(entries), len(prompt) - 1)
    logits = ref.forward(self.model, prompt)
    for p, entry in enumerate(entries, start=1):
      row = logits[p - 1]
      expected = row[prompt[p]] - np.log(np.exp(row - row.max()).sum()) - row.max()
      self.assertEqual(entry["token_id"], prompt[p])
      self.assertAlmostEqual(entry["logprob"], expected, places=12)
      self.assertEqual([i for i, _ in entry["top"]],
                       list(np.argsort(-row, kind="stable")[:3]))
      self.assertGreaterEqual(entry["top"][0][1], entry["top"][1][1])
    self.assertEqual(ref.prompt_logprobs(self.model, prompt, top=0)[0]["top"],
                     [])

  def test_greedy_is_argmax_of_recomputed_forward(self):
    prompt = [1, 4, 9]
    generated = ref.greedy_generate(self.model, prompt, 10, ignore_eos=True)
    self.assertEqual(len(generated), 10)
    seq = prompt + generated
    logits = ref.forward(self.model, seq)
    for i, tok in enumerate(generated):
      row = logits[len(prompt) + i - 1]
      self.assertEqual(tok, int(np.argmax(row)))

  def test_eos_stops_and_is_included(self):
    prompt = [1, 4, 9]
    free = ref.greedy_generate(self.model, prompt, 8, ignore_eos=True)
    eos = free[2]
    first = free.index(eos)
    stopped = ref.greedy_generate(self.model, prompt, 8, eos_ids=[eos])
    self.assertEqual(stopped, free[:first + 1])
    ignored = ref.greedy_generate(self.model, prompt, 8, eos_ids=[eos],
                                  ignore_eos=True)
    self.assertEqual(ignored, free)

  def run_cli(self, *args):
    result = subprocess.run([sys.executable, REFERENCE, *args],
                            capture_output=True, text=True)
    self.assertEqual(result.returncode, 0, result.stderr)
    return result.stdout

  def test_cli(self):
    tokens = [1, 7, 3, 30]
    path = os.path.join(self.tmp, "logits.bin")
    out = self.run_cli("logits", "--model", self.dir, "--tokens", "1,7,3,30",
                       "--out", path)
    self.assertEqual(out.strip(), "shape 4 32")
    got = np.fromfile(path, dtype="<f8").reshape(4, 32)
    np.testing.assert_array_equal(got, ref.forward(self.model, tokens))

    out = self.run_cli("generate", "--model", self.dir, "--tokens", "1,7,3,30",
                       "--max-tokens", "6", "--ignore-eos")
    want = ref.greedy_generate(self.model, tokens, 6, ignore_eos=True)
    self.assertEqual(out.strip(), ",".join(map(str, want)))

    requests = [{"tokens": [1, 7, 3, 30], "max_tokens": 6, "ignore_eos": True},
                {"tokens": [5], "max_tokens": 3, "ignore_eos": False},
                {"tokens": [2, 2, 9], "max_tokens": 40, "ignore_eos": False}]
    req_path = os.path.join(self.tmp, "requests.json")
    with open(req_path, "w") as f:
      json.dump(requests, f)
    out = json.loads(self.run_cli("generate-batch", "--model", self.dir,
                                  "--requests", req_path))
    self.assertEqual(out, [ref.greedy_generate(self.model, r["tokens"],
                                               r["max_tokens"],
                                               ignore_eos=r["ignore_eos"])
                           for r in requests])

  def test_rejects_out_of_vocab_tokens(self):
    with self.assertRaises(ValueError):
      ref.forward(self.model, [1, 32])

  def test_penalties_by_hand(self):
    row = np.array([2.0, -1.0, 0.5, 3.0, -0.25])
    # Prompt saw 0 and 1; the output has 2 twice and 1 once.
    got = ref.apply_penalties(row, [0, 1], [2, 1, 2], {
        "logit_bias": {"3": -4.0, 4: 1.0},
        "repetition_penalty": 2.0,
        "frequency_penalty": 0.5,
        "presence_penalty": 0.25})
    # 0: 2/2; 1: -1*2 - 0.5*1 - 0.25; 2: 0.5/2 - 0.5*2 - 0.25;
    # 3: biased to -1, not seen; 4: biased to 0.75, not seen.
    np.testing.assert_allclose(got, [1.0, -2.75, -1.0, -1.0, 0.75])
    np.testing.assert_array_equal(
        ref.apply_penalties(row, [0, 1], [2], {}), row)

  def test_penalties_change_greedy_output_and_reach_the_cli(self):
    prompt = [3, 3, 7, 3, 7, 3]
    plain = ref.greedy_generate(self.model, prompt, 12, ignore_eos=True)
    penalties = {"repetition_penalty": 1.8, "frequency_penalty": 1.5,
                 "presence_penalty": 1.0, "logit_bias": {"5": 3.0}}
    penalized = ref.greedy_generate(self.model, prompt, 12, ignore_eos=True,
                                    penalties=penalties)
    self.assertNotEqual(plain, penalized)
    # Each step's token is the argmax of the penalized recomputed row.
    for i, token in enumerate(penalized):
      row = ref.forward(self.model, prompt + penalized[:i])[-1]
      self.assertEqual(token, int(np.argmax(
          ref.apply_penalties(row, prompt, penalized[:i], penalties))))
    req_path = os.path.join(self.tmp, "requests.json")
    with open(req_path, "w") as f:
      json.dump([dict(tokens=prompt, max_tokens=12, ignore_eos=True,
                      **penalties)], f)
    out = json.loads(self.run_cli("generate-batch", "--model", self.dir,
                                  "--requests", req_path))
    self.assertEqual(out, [penalized])


class TokenizerTest(TempDirTest):

  def spm(self, tool, model, text, *flags):
    result = subprocess.run([tool, "--model", model, *flags], input=text,
                            capture_output=True, text=True)
    self.assertEqual(result.returncode, 0, result.stderr)
    return result.stdout.strip()

  def test_trained_tokenizer_round_trips(self):
    for vocab in (512, 200):  # with and without byte fallback
      with self.subTest(vocab=vocab):
        out = self.make(f"tok{vocab}", *SMALL, "--vocab-size", str(vocab),
                        "--tokenizer")
        model = os.path.join(out, "tokenizer.model")
        self.assertTrue(os.path.isfile(model))
        vocab_out = subprocess.run(
            ["spm_export_vocab", f"--model={model}"], capture_output=True,
            text=True, check=True).stdout.splitlines()
        self.assertEqual(len(vocab_out), vocab)
        pieces = [line.split("\t")[0] for line in vocab_out]
        self.assertEqual(pieces[:3], ["<unk>", "<s>", "</s>"])
        with open(os.path.join(out, "config.json")) as f:
          cfg = json.load(f)
        self.assertEqual((cfg["bos_token_id"], cfg["eos_token_id"]), (1, 2))
        for text in ("The quick brown fox jumps over the lazy dog.",
                     "A warm morning in the garden, with bread and honey."):
          ids = self.spm("spm_encode", model, text, "--output_format=id")
          id_list = [int(t) for t in ids.split()]
          self.assertTrue(all(0 < i < vocab for i in id_list), id_list)
          self.assertLess(len(id_list), len(text))  # merges were learnt
          self.assertEqual(self.spm("spm_decode", model, ids,
                                    "--input_format=id"), text)

  def test_tokenizer_needs_sentencepiece_ids(self):
    result = subprocess.run(
        [sys.executable, MAKER, "--out", os.path.join(self.tmp, "bad"),
         "--tokenizer", "--eos-id", "5"], capture_output=True, text=True)
    self.assertNotEqual(result.returncode, 0)


if __name__ == "__main__":
  unittest.main()
