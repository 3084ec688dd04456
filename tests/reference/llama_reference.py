#!/usr/bin/python3
"""Float64 NumPy reference forward pass of a Llama-family model.

Written from the architecture (Llama 2/3, Mistral without sliding window,
Qwen2 with q/k/v bias), independent of scripts/make_tiny_model.py: it has its
own safetensors reader and reads everything from config.json and
generation_config.json. The C++ engine is checked against it.

API:
  load_model(dir) -> Model
  forward(model, token_ids) -> logits [len, vocab] float64 (full causal pass)
  greedy_generate(model, prompt_ids, max_tokens, eos_ids=None,
                  ignore_eos=False, penalties=None)
      -> list of generated ids (EOS included)
  apply_penalties(logits_row, prompt_ids, output_ids, penalties)
      -> the row after logit_bias and the repetition, frequency and presence
         penalties (vLLM v1's order)

CLI (used by the C++ tests; keep it stable):
  llama_reference.py logits --model DIR --tokens 1,2,3 --out PATH
      writes little-endian float64 [num_tokens * vocab] (row-major) to PATH
      and prints "shape <num_tokens> <vocab>".
  llama_reference.py generate --model DIR --tokens 1,2,3 --max-tokens N
      [--ignore-eos]
      prints the generated ids comma-separated on one line.
  llama_reference.py generate-batch --model DIR --requests FILE.json
      FILE.json: [{"tokens": [..], "max_tokens": N, "ignore_eos": bool,
                   "repetition_penalty": R, "frequency_penalty": F,
                   "presence_penalty": P, "logit_bias": {"id": bias}}, ...]
      (the penalty keys optional) prints a JSON list of lists of generated
      ids.

Run with Debian's /usr/bin/python3 (numpy is all it needs).
"""

import argparse
import dataclasses
import glob
import json
import math
import os
import sys

import numpy as np

# ---------------------------------------------------------------------------
# safetensors


def _decode(raw, dtype):
  if dtype == "F32":
    return np.frombuffer(raw, dtype="<f4").astype(np.float64)
  if dtype == "F16":
    return np.frombuffer(raw, dtype="<f2").astype(np.float64)
  if dtype == "BF16":
    # bfloat16 is the upper half of a float32.
    halves = np.frombuffer(raw, dtype="<u2").astype(np.uint32)
    return (halves << 16).view(np.float32).astype(np.float64)
  if dtype == "F64":
    return np.frombuffer(raw, dtype="<f8").astype(np.float64)
  # Integer tensors (quantized checkpoints' codes, zero points, group
  # indices) stay integers: quantized_reference.py unpacks them.
  if dtype == "I32":
    return np.frombuffer(raw, dtype="<i4").astype(np.int64)
  if dtype == "I64":
    return np.frombuffer(raw, dtype="<i8").astype(np.int64)
  if dtype == "I8":
    return np.frombuffer(raw, dtype="i1").astype(np.int64)
  if dtype == "BOOL":  # An EAGLE-3 head's t2d.
    return np.frombuffer(raw, dtype="u1").astype(np.int64)
  if dtype == "F8_E4M3":
    # FP8 codes stay bytes: quantized_reference.py decodes them.
    return np.frombuffer(raw, dtype="u1").astype(np.int64)
  raise ValueError(f"unsupported safetensors dtype {dtype}")


def read_safetensors(path):
  """Returns {name: float64 array} of one safetensors file."""
  with open(path, "rb") as f:
    blob = f.read()
  header_len = int.from_bytes(blob[:8], "little")
  header = json.loads(blob[8:8 + header_len].decode("utf-8"))
  data = memoryview(blob)[8 + header_len:]
  tensors = {}
  for name, info in header.items():
    if name == "__metadata__":
      continue
    begin, end = info["data_offsets"]
    values = _decode(data[begin:end], info["dtype"])
    tensors[name] = values.reshape(info["shape"])
  return tensors


def read_model_weights(model_dir):
  """Reads all weights of a model directory, single-file or sharded."""
  index_path = os.path.join(model_dir, "model.safetensors.index.json")
  if os.path.exists(index_path):
    with open(index_path) as f:
      weight_map = json.load(f)["weight_map"]
    files = sorted(set(weight_map.values()))
  else:
    weight_map = None
    files = sorted(os.path.basename(p) for p in
                   glob.glob(os.path.join(model_dir, "*.safetensors")))
  if not files:
    raise FileNotFoundError(f"no .safetensors files in {model_dir}")
  weights = {}
  for fname in files:
    for name, array in read_safetensors(os.path.join(model_dir, fname)).items():
      if name in weights:
        raise ValueError(f"tensor {name} appears in more than one file")
      if weight_map is not None and weight_map.get(name) != fname:
        raise ValueError(f"tensor {name} found in {fname}, index says "
                         f"{weight_map.get(name)}")
      weights[name] = array
  if weight_map is not None and set(weight_map) != set(weights):
    raise ValueError("index lists tensors that are not in the shards")
  return weights


# ---------------------------------------------------------------------------
# model


@dataclasses.dataclass
class Model:
  config: dict
  weights: dict
  eos_ids: list
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  vocab_size: int
  eps: float
  inv_freq: np.ndarray  # [head_dim / 2], after rope scaling
  # Projection prefix -> what a W8A8 format does to its input (x -> the
  # quantized-dequantized x), set by quantized_reference.py.
  input_quant: dict = dataclasses.field(default_factory=dict)
  # (k, v, layer) -> (k, v) as the KV cache holds them (after rotary), or
  # None for a cache that holds them exactly; set by quantized_reference.py
  # for --kv-cache-dtype fp8.
  kv_cache: object = None


def _as_list(value):
  if value is None:
    return []
  return list(value) if isinstance(value, (list, tuple)) else [value]


def rope_inv_freq(head_dim, theta, scaling):
  """Inverse frequencies of the rotary embedding, with HF rope scaling."""
  inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64)
                             / head_dim)
  if not scaling:
    return inv_freq
  kind = scaling.get("rope_type", scaling.get("type"))
  if kind in (None, "default"):
    return inv_freq
  factor = float(scaling["factor"])
  if kind == "linear":
    # Positions divided by factor == frequencies divided by factor.
    return inv_freq / factor
  if kind == "llama3":
    low = float(scaling["low_freq_factor"])
    high = float(scaling["high_freq_factor"])
    old_len = float(scaling["original_max_position_embeddings"])
    low_freq_wavelen = old_len / low
    high_freq_wavelen = old_len / high
    wavelen = 2 * math.pi / inv_freq
    # Long wavelengths are slowed by factor, short ones kept, and the band in
    # between interpolated smoothly.
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return np.where(medium, smoothed, scaled)
  raise ValueError(f"unsupported rope scaling {kind}")


def load_model(model_dir):
  with open(os.path.join(model_dir, "config.json")) as f:
    config = json.load(f)
  eos_ids = _as_list(config.get("eos_token_id"))
  gen_path = os.path.join(model_dir, "generation_config.json")
  if os.path.exists(gen_path):
    with open(gen_path) as f:
      for eos in _as_list(json.load(f).get("eos_token_id")):
        if eos not in eos_ids:
          eos_ids.append(eos)
  num_heads = config["num_attention_heads"]
  head_dim = config.get("head_dim") or config["hidden_size"] // num_heads
  weights = read_model_weights(model_dir)
  if config.get("tie_word_embeddings", False) or "lm_head.weight" not in weights:
    weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
  return Model(
      config=config, weights=weights, eos_ids=eos_ids,
      num_layers=config["num_hidden_layers"], num_heads=num_heads,
      num_kv_heads=config.get("num_key_value_heads") or num_heads,
      head_dim=head_dim, vocab_size=config["vocab_size"],
      eps=config.get("rms_norm_eps", 1e-6),
      inv_freq=rope_inv_freq(head_dim, config.get("rope_theta", 10000.0),
                             config.get("rope_scaling")))


def rms_norm(x, weight, eps):
  return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def apply_rope(x, positions, inv_freq):
  """HF rotate-half rotary embedding. x: [T, heads, head_dim]."""
  angles = positions[:, None].astype(np.float64) * inv_freq[None, :]
  cos = np.concatenate([np.cos(angles)] * 2, axis=-1)[:, None, :]
  sin = np.concatenate([np.sin(angles)] * 2, axis=-1)[:, None, :]
  half = x.shape[-1] // 2
  rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
  return x * cos + rotated * sin


def _linear(model, x, prefix):
  if prefix in model.input_quant:
    x = model.input_quant[prefix](x)
  y = x @ model.weights[prefix + ".weight"].T
  bias = model.weights.get(prefix + ".bias")
  return y if bias is None else y + bias


def attention(model, x, layer):
  pre = f"model.layers.{layer}.self_attn."
  t = x.shape[0]
  nh, nkv, hd = model.num_heads, model.num_kv_heads, model.head_dim
  positions = np.arange(t)
  q = _linear(model, x, pre + "q_proj").reshape(t, nh, hd)
  k = _linear(model, x, pre + "k_proj").reshape(t, nkv, hd)
  v = _linear(model, x, pre + "v_proj").reshape(t, nkv, hd)
  q = apply_rope(q, positions, model.inv_freq)
  k = apply_rope(k, positions, model.inv_freq)
  if model.kv_cache is not None:
    k, v = model.kv_cache(k, v, layer)
  # GQA: query head h reads kv head h // (nh / nkv).
  group = nh // nkv
  k = np.repeat(k, group, axis=1)
  v = np.repeat(v, group, axis=1)
  scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
  future = np.triu(np.ones((t, t), dtype=bool), k=1)
  scores = np.where(future[None], -np.inf, scores)
  scores -= scores.max(axis=-1, keepdims=True)
  probs = np.exp(scores)
  probs /= probs.sum(axis=-1, keepdims=True)
  out = np.einsum("hqk,khd->qhd", probs, v).reshape(t, nh * hd)
  return _linear(model, out, pre + "o_proj")


def mlp(model, x, layer):
  pre = f"model.layers.{layer}.mlp."
  gate = _linear(model, x, pre + "gate_proj")
  up = _linear(model, x, pre + "up_proj")
  silu = gate / (1.0 + np.exp(-gate))
  return _linear(model, silu * up, pre + "down_proj")


def forward(model, token_ids):
  """Full causal forward pass; returns logits [len(token_ids), vocab]."""
  ids = np.asarray(token_ids, dtype=np.int64)
  if ids.ndim != 1 or ids.size == 0:
    raise ValueError("token_ids must be a non-empty 1-D sequence")
  if ids.min() < 0 or ids.max() >= model.vocab_size:
    raise ValueError("token id outside the vocabulary")
  w = model.weights
  x = w["model.embed_tokens.weight"][ids]
  for layer in range(model.num_layers):
    pre = f"model.layers.{layer}."
    x = x + attention(model, rms_norm(x, w[pre + "input_layernorm.weight"],
                                      model.eps), layer)
    x = x + mlp(model, rms_norm(x, w[pre + "post_attention_layernorm.weight"],
                                model.eps), layer)
  x = rms_norm(x, w["model.norm.weight"], model.eps)
  return x @ w["lm_head.weight"].T


PENALTY_KEYS = ("repetition_penalty", "frequency_penalty", "presence_penalty",
                "logit_bias")


def apply_penalties(row, prompt_ids, output_ids, penalties):
  """vLLM v1's logits processing, written out from its definition.

  penalties: dict with any of repetition_penalty (1 or absent = off),
  frequency_penalty, presence_penalty (0 = off) and logit_bias ({id: bias},
  keys int or decimal strings). In order: the bias added; then every token
  seen in the prompt or the output has a positive logit divided by the
  repetition penalty and a negative one multiplied; then each output token's
  logit loses frequency_penalty x its count and presence_penalty once.
  """
  out = np.array(row, dtype=np.float64)
  for token, bias in (penalties.get("logit_bias") or {}).items():
    out[int(token)] += float(bias)
  repetition = float(penalties.get("repetition_penalty") or 1.0)
  if repetition != 1.0:
    for token in set(prompt_ids) | set(output_ids):
      out[token] = (out[token] / repetition if out[token] > 0
                    else out[token] * repetition)
  frequency = float(penalties.get("frequency_penalty") or 0.0)
  presence = float(penalties.get("presence_penalty") or 0.0)
  counts = {}
  for token in output_ids:
    counts[token] = counts.get(token, 0) + 1
  for token, count in counts.items():
    out[token] -= frequency * count + presence
  return out


def greedy_generate(model, prompt_ids, max_tokens, eos_ids=None,
                    ignore_eos=False, penalties=None):
  """Greedy decoding by full recomputation each step.

  Stops after emitting a token in eos_ids (default: the model's), which is
  included in the output as vLLM does, unless ignore_eos. Ties go to the
  lowest id. With `penalties` (see apply_penalties), the argmax is taken
  after them, as vLLM's greedy does.
  """
  eos = set(model.eos_ids if eos_ids is None else eos_ids)
  tokens = list(prompt_ids)
  generated = []
  for _ in range(max_tokens):
    row = forward(model, tokens)[-1]
    if penalties:
      row = apply_penalties(row, prompt_ids, generated, penalties)
    next_id = int(np.argmax(row))
    generated.append(next_id)
    tokens.append(next_id)
    if not ignore_eos and next_id in eos:
      break
  return generated


def log_softmax(logits):
  """Row-wise log_softmax in float64, stable."""
  x = np.asarray(logits, dtype=np.float64)
  shifted = x - x.max(axis=-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def prompt_logprobs(model, token_ids, top):
  """vLLM's prompt logprobs: for each prompt position p >= 1, the
  log-probability of token_ids[p] under the raw logits of row p - 1, and the
  `top` most likely tokens there (descending, lowest id first on ties).

  Returns a list of len(token_ids) - 1 dicts {token_id, logprob, top:
  [[id, logprob], ...]}.
  """
  logprobs = log_softmax(forward(model, token_ids))
  entries = []
  for p in range(1, len(token_ids)):
    row = logprobs[p - 1]
    order = np.argsort(-row, kind="stable")[:top]
    entries.append({"token_id": int(token_ids[p]),
                    "logprob": float(row[token_ids[p]]),
                    "top": [[int(i), float(row[i])] for i in order]})
  return entries


# ---------------------------------------------------------------------------
# CLI


def _parse_tokens(text):
  return [int(t) for t in text.split(",") if t.strip()]


def main(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  sub = parser.add_subparsers(dest="command", required=True)
  p_logits = sub.add_parser("logits")
  p_logits.add_argument("--model", required=True)
  p_logits.add_argument("--tokens", required=True)
  p_logits.add_argument("--out", required=True)
  p_gen = sub.add_parser("generate")
  p_gen.add_argument("--model", required=True)
  p_gen.add_argument("--tokens", required=True)
  p_gen.add_argument("--max-tokens", type=int, required=True)
  p_gen.add_argument("--ignore-eos", action="store_true")
  p_batch = sub.add_parser("generate-batch")
  p_batch.add_argument("--model", required=True)
  p_batch.add_argument("--requests", required=True)
  p_prompt = sub.add_parser("prompt-logprobs")
  p_prompt.add_argument("--model", required=True)
  p_prompt.add_argument("--tokens", required=True)
  p_prompt.add_argument("--top", type=int, default=0)
  args = parser.parse_args(argv)

  model = load_model(args.model)
  if args.command == "logits":
    logits = forward(model, _parse_tokens(args.tokens))
    logits.astype("<f8").tofile(args.out)
    print(f"shape {logits.shape[0]} {logits.shape[1]}")
  elif args.command == "prompt-logprobs":
    print(json.dumps(prompt_logprobs(model, _parse_tokens(args.tokens), args.top)))
  elif args.command == "generate":
    out = greedy_generate(model, _parse_tokens(args.tokens), args.max_tokens,
                          ignore_eos=args.ignore_eos)
    print(",".join(str(t) for t in out))
  else:
    with open(args.requests) as f:
      requests = json.load(f)
    results = [greedy_generate(
        model, r["tokens"], r["max_tokens"],
        ignore_eos=bool(r.get("ignore_eos", False)),
        penalties={k: r[k] for k in PENALTY_KEYS if k in r})
               for r in requests]
    print(json.dumps(results))


if __name__ == "__main__":
  main(sys.argv[1:])
