#!/usr/bin/python3
"""Float64 reference of quantized Llama checkpoints: the exactly dequantized weights.

Unpacks each quantized projection of an AWQ (GEMM), GPTQ (gptq / gptq_v2,
sym or not, act-order g_idx) or compressed-tensors pack-quantized (symmetric)
checkpoint from the tensors as the publishers' tools store them, into the
dense float64 weight W[o, i] = (code - zero) * scale of its group, and runs
llama_reference.py's forward on those. Written from the formats'
definitions, independent of the C++ readers and of make_quantized_model.py's
packing helpers.

The W8A8 formats (compressed-tensors int-quantized: int8 weights [out, in]
times weight_scale, dynamic per-token int8 inputs; float-quantized and
vLLM's fp8: E4M3 weights times weight_scale, dynamic per-token or static
input_scale E4M3 inputs) also have their input quantization emulated: each
quantized projection's input x is replaced by q(x / s) * s before the
product, q rounding half to even (int8, saturated to [-128, 127]) or to the
nearest E4M3 value (saturated to +-448), s = max|x| / 127 or
max(max|x| / 448, 1 / (448 * 512)) per token row, or the static
input_scale (q/k/v and gate/up share their largest, as vLLM fuses them).
The weight-only formats (AWQ, GPTQ, pack-quantized) emulate the CPU
worker's default int8 inputs (its --cpu-weight-only-activations int8): each
quantized projection's input x becomes q(x / s) * s with one s for each
token row's inputs of each weight group (s = max|x| / 127 over them, q
rounding half to even, saturated to [-128, 127]; act-order groups gather
their inputs by g_idx). --cpu-weight-only-activations float32 leaves x as
it is: the checkpoint's own weight-only numerics.
--quantization fp8 over a dense checkpoint quantizes every decoder
projection per tensor at load (s = max|W| / 448 in float32, W / s in
float32 rounded to E4M3) with dynamic per-token FP8 inputs.
--kv-cache-dtype fp8 emulates an FP8 E4M3 KV cache: every cached key and
value (keys after rotary) becomes e4m3_round(k / k_scale) * k_scale (the
same with v_scale), the layer's scales read from the checkpoint under the
names vLLM loads (self_attn.k_scale / v_scale, else k_proj / v_proj
.output_scale, else self_attn.kv_scale for both; one of a pair serves
both), 1.0 where there are none.
With --tensor-parallel-size N the row-parallel projections (o_proj,
down_proj) quantize each of the N equal slices of a token row on its own,
as each rank does with its slice in vLLM (and in Pagoda); the weight-only
ones each group's inputs within each slice.

CLI (used by the C++ tests):
  Each command takes --quantization fp8 for online FP8 over a dense model
  and --tensor-parallel-size N (see above).
  quantized_reference.py generate --model DIR --tokens 1,2,3 --max-tokens N
      prints the greedy ids comma-separated (EOS ignored).
  quantized_reference.py logits --model DIR --tokens 1,2,3 --out PATH
      as llama_reference.py logits.
  quantized_reference.py generate-batch --model DIR --requests FILE.json
      FILE.json: [{"tokens": [..], "max_tokens": N}, ...]; prints a JSON list
      of each request's greedy ids (EOS ignored).
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_reference  # noqa: E402

# AutoAWQ stores output column 8j + c in the 4-bit field AWQ_FIELD[c] of word j.
AWQ_FIELD = (0, 4, 1, 5, 2, 6, 3, 7)


def fields(words, bits):
  """int words [..., n] -> their bits-wide fields [..., n, 32/bits], low bits first."""
  w = np.asarray(words, dtype=np.int64) & 0xFFFFFFFF
  shifts = np.arange(0, 32, bits, dtype=np.int64)
  return (w[..., None] >> shifts) & ((1 << bits) - 1)


def dequantize_awq(t, prefix, group_size):
  qweight, qzeros, scales = t[prefix + "qweight"], t[prefix + "qzeros"], t[prefix + "scales"]
  inp = qweight.shape[0]
  codes = fields(qweight, 4)[:, :, list(AWQ_FIELD)].reshape(inp, -1)  # [in, out]
  zeros = fields(qzeros, 4)[:, :, list(AWQ_FIELD)].reshape(qzeros.shape[0], -1)
  group = np.arange(inp) // (inp if group_size == -1 else group_size)
  return ((codes - zeros[group]) * scales[group]).T


def dequantize_gptq(t, prefix, q):
  bits = q["bits"]
  qweight, scales = t[prefix + "qweight"], t[prefix + "scales"]
  codes = fields(qweight.T, bits).reshape(qweight.shape[1], -1)  # [out, in]
  inp = codes.shape[1]
  if q.get("desc_act"):
    group = t[prefix + "g_idx"]
  else:
    group = np.arange(inp) // (inp if q["group_size"] == -1 else q["group_size"])
  if q.get("sym", True):
    zeros = np.full(scales.shape, float(1 << (bits - 1)))
  else:
    qzeros = t[prefix + "qzeros"]
    zeros = fields(qzeros, bits).reshape(qzeros.shape[0], -1).astype(np.float64)
    if q.get("checkpoint_format", "gptq") == "gptq":
      zeros += 1  # Format gptq stores zero points minus one.
  return (codes - zeros[group].T) * scales[group].T


def dequantize_ct(t, prefix, weights):
  bits = weights["num_bits"]
  packed, scale = t[prefix + "weight_packed"], t[prefix + "weight_scale"]
  out, inp = (int(d) for d in t[prefix + "weight_shape"])
  signed = fields(packed, bits).reshape(out, -1)[:, :inp] - (1 << (bits - 1))
  if weights.get("actorder") == "group":
    group = t[prefix + "weight_g_idx"]
  elif weights["strategy"] == "channel":
    group = np.zeros(inp, dtype=np.int64)
  else:
    group = np.arange(inp) // weights["group_size"]
  return signed * scale[:, group]


FP8_MAX = 448.0
FP8_MIN_TOKEN_SCALE = 1.0 / (FP8_MAX * 512.0)
# Projections vLLM runs as one product share a static input scale.
FUSED_WITH = {"k_proj": "q_proj", "v_proj": "q_proj", "up_proj": "gate_proj"}


def e4m3_value(codes):
  """FP8 E4M3 codes (bias 7, 3 mantissa bits) -> their float64 values."""
  b = np.asarray(codes, dtype=np.int64)
  exponent, mantissa = (b >> 3) & 15, b & 7
  magnitude = np.where(exponent == 0, mantissa * 2.0**-9,
                       (8 + mantissa) * np.exp2(exponent - 10.0))
  return np.where(b & 0x80, -magnitude, magnitude)


def e4m3_round(v):
  """The nearest E4M3 value to v, ties to even, saturated to +-448."""
  v = np.clip(np.asarray(v, dtype=np.float64), -FP8_MAX, FP8_MAX)
  _, e = np.frexp(np.abs(v))  # |v| = f * 2^e, f in [0.5, 1)
  step = np.exp2(np.maximum(e - 1, -6) - 3)  # Subnormals share 2^-9.
  return np.round(v / step) * step  # np.round: half to even.


def quantize_int8_rows(x):
  amax = np.abs(x).max(axis=-1, keepdims=True)
  scale = amax / 127.0
  safe = np.where(scale == 0, 1.0, scale)
  return np.clip(np.round(x / safe), -128, 127) * scale


def quantize_int8_groups(group):
  """x -> each row's inputs of each group (group[i] of input i) quantized as quantize_int8_rows."""
  group = np.asarray(group)
  masks = [group == g for g in np.unique(group)]

  def quantize(x):
    out = np.empty_like(x)
    for mask in masks:
      out[..., mask] = quantize_int8_rows(x[..., mask])
    return out

  return quantize


def weight_groups(t, prefix, method, q):
  """The group of each input feature of a weight-only module, as its format assigns them."""
  if method == "awq":
    inp, group_size = t[prefix + "qweight"].shape[0], q["group_size"]
  elif method == "gptq":
    inp, group_size = t[prefix + "qweight"].shape[0] * 32 // q["bits"], q["group_size"]
    if q.get("desc_act"):
      return np.asarray(t[prefix + "g_idx"])
  else:
    weights = next(iter(q["config_groups"].values()))["weights"]
    inp = int(t[prefix + "weight_shape"][1])
    if weights.get("actorder") == "group":
      return np.asarray(t[prefix + "weight_g_idx"])
    group_size = -1 if weights["strategy"] == "channel" else weights["group_size"]
  return np.arange(inp) // (inp if group_size == -1 else group_size)


def set_weight_only_input_quant(model, module, group, tp):
  if module.endswith(ROW_PARALLEL) and tp > 1:
    parts = [quantize_int8_groups(g) for g in np.split(group, tp)]
    model.input_quant[module] = lambda x: np.concatenate(
        [quantize(part) for quantize, part in zip(parts, np.split(x, tp, axis=-1))], axis=-1)
  else:
    model.input_quant[module] = quantize_int8_groups(group)


def quantize_fp8_rows(x):
  scale = np.maximum(np.abs(x).max(axis=-1, keepdims=True) / FP8_MAX, FP8_MIN_TOKEN_SCALE)
  return e4m3_round(x / scale) * scale


def quantize_fp8_static(scale):
  return lambda x: e4m3_round(x / scale) * scale


def dequantize_bytes(t, prefix, fp8):
  """int-quantized (I8) or FP8 (E4M3) weight [out, in] times its scale."""
  w = t[prefix + "weight"]
  values = e4m3_value(w) if fp8 else w.astype(np.float64)
  return values * np.reshape(t[prefix + "weight_scale"], (-1, 1))


def byte_scheme(q):
  """(fp8 weights?, input quantization: None, "token" or "static") of a config."""
  if q["quant_method"] == "fp8":
    return True, "static" if q.get("activation_scheme") == "static" else "token"
  group = next(iter(q["config_groups"].values()))
  fp8 = group["weights"]["type"] == "float"
  acts = group.get("input_activations")
  if not acts:
    return fp8, None
  return fp8, "token" if acts.get("dynamic") else "static"


ROW_PARALLEL = ("o_proj", "down_proj")


def per_rank(quantize, ranks):
  """quantize applied to each rank's slice of the input features."""
  return lambda x: np.concatenate([quantize(part) for part in np.split(x, ranks, axis=-1)],
                                  axis=-1)


def set_input_quant(model, modules, fp8, scheme, input_scales, tp=1):
  for module in modules:
    if scheme == "token":
      quantize = quantize_fp8_rows if fp8 else quantize_int8_rows
      if module.endswith(ROW_PARALLEL) and tp > 1:
        quantize = per_rank(quantize, tp)
      model.input_quant[module] = quantize
    elif scheme == "static":
      layer, name = module.rsplit(".", 1)
      lead = FUSED_WITH.get(name, name)
      fused = [m for m in modules if m.rsplit(".", 1)[0] == layer and
               FUSED_WITH.get(m.rsplit(".", 1)[1], m.rsplit(".", 1)[1]) == lead]
      model.input_quant[module] = quantize_fp8_static(max(input_scales[m] for m in fused))


def quantize_online_fp8(model, tp=1):
  """--quantization fp8: each decoder projection per tensor, f32 arithmetic."""
  t = model.weights
  modules = sorted(n[:-len(".weight")] for n in t
                   if n.startswith("model.layers.") and n.endswith("_proj.weight"))
  for module in modules:
    w = t[module + ".weight"].astype(np.float32)
    scale = np.float32(np.abs(w).max()) / np.float32(FP8_MAX)
    if scale == 0:
      scale = np.float32(1.0)
    t[module + ".weight"] = e4m3_round(w / scale) * np.float64(scale)
  set_input_quant(model, modules, True, "token", {}, tp)
  return model


def dequantize_byte_formats(model, q, tp):
  t = model.weights
  modules = sorted({name.rsplit(".", 1)[0] for name in t if name.endswith(".weight_scale")})
  fp8, scheme = byte_scheme(q)
  input_scales = {m: float(np.reshape(t[m + ".input_scale"], -1)[0])
                  for m in modules if m + ".input_scale" in t}
  for module in modules:
    w = dequantize_bytes(t, module + ".", fp8)
    for name in [n for n in t if n.startswith(module + ".")]:
      del t[name]
    t[module + ".weight"] = w
  set_input_quant(model, modules, fp8, scheme, input_scales, tp)
  return model


def dequantize(model, tp=1, weight_only_activations="int8"):
  """Replaces model.weights' quantized projections by dense float64 ones."""
  q = model.config["quantization_config"]
  method = q["quant_method"]
  t = model.weights
  if method == "fp8" or (method == "compressed-tensors" and q.get("format") in
                         ("int-quantized", "float-quantized", "naive-quantized")):
    return dequantize_byte_formats(model, q, tp)
  modules = sorted({name.rsplit(".", 1)[0] for name in t
                    if name.endswith((".qweight", ".weight_packed"))})
  for module in modules:
    prefix = module + "."
    if method == "awq":
      w = dequantize_awq(t, prefix, q["group_size"])
    elif method == "gptq":
      w = dequantize_gptq(t, prefix, q)
    elif method == "compressed-tensors":
      w = dequantize_ct(t, prefix, next(iter(q["config_groups"].values()))["weights"])
    else:
      raise ValueError(f"unknown quant_method {method}")
    if weight_only_activations == "int8":
      set_weight_only_input_quant(model, module, weight_groups(t, prefix, method, q), tp)
    for name in [n for n in t if n.startswith(prefix)]:
      del t[name]
    t[prefix + "weight"] = np.asarray(w, dtype=np.float64)
  return model


KV_SCALE_NAMES = (("k_scale", "v_scale"), ("k_proj.output_scale", "v_proj.output_scale"),
                  ("kv_scale", "kv_scale"))


def kv_cache_scales(weights, layer):
  """(k_scale, v_scale) of a layer, by the names vLLM reads; 1.0 without."""
  prefix = f"model.layers.{layer}.self_attn."
  for k_name, v_name in KV_SCALE_NAMES:
    k, v = weights.get(prefix + k_name), weights.get(prefix + v_name)
    if k is not None or v is not None:
      k = float(np.reshape(k if k is not None else v, -1)[0])
      v = float(np.reshape(v if v is not None else k, -1)[0])
      return k, v
  return 1.0, 1.0


def emulate_fp8_kv_cache(model):
  scales = [kv_cache_scales(model.weights, layer) for layer in range(model.num_layers)]

  def cached(k, v, layer):
    k_scale, v_scale = scales[layer]
    return e4m3_round(k / k_scale) * k_scale, e4m3_round(v / v_scale) * v_scale

  model.kv_cache = cached
  return model


def load_model(model_dir, quantization="", tp=1, kv_cache_dtype="auto",
               weight_only_activations="int8"):
  model = llama_reference.load_model(model_dir)
  if kv_cache_dtype == "fp8":
    emulate_fp8_kv_cache(model)
  if "quantization_config" not in model.config:
    return quantize_online_fp8(model, tp) if quantization == "fp8" else model
  return dequantize(model, tp, weight_only_activations)


def greedy_with_margins(model, prompt, max_tokens):
  """Greedy tokens (as greedy_generate, EOS ignored) with, at every step, the
  runner-up token and the top logit's lead over it: where the lead is
  within an FP8 rounding's reach, a server's f32 arithmetic may pick the
  runner-up, and the tests accept that as a near tie."""
  tokens, out, runner_up, margins = list(prompt), [], [], []
  for _ in range(max_tokens):
    row = llama_reference.forward(model, tokens)[-1]
    order = np.argsort(-row, kind="stable")
    out.append(int(order[0]))
    runner_up.append(int(order[1]))
    margins.append(float(row[order[0]] - row[order[1]]))
    tokens.append(int(order[0]))
  return {"tokens": out, "runner_up": runner_up, "margins": margins}


def main(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("command", choices=("generate", "logits", "generate-batch"))
  parser.add_argument("--model", required=True)
  parser.add_argument("--tokens", default="")
  parser.add_argument("--requests")
  parser.add_argument("--max-tokens", type=int, default=1)
  parser.add_argument("--out")
  parser.add_argument("--quantization", default="")
  parser.add_argument("--tensor-parallel-size", type=int, default=1)
  parser.add_argument("--kv-cache-dtype", choices=("auto", "fp8"), default="auto")
  parser.add_argument("--cpu-weight-only-activations", choices=("int8", "float32"),
                      default="int8")
  parser.add_argument("--margins", action="store_true",
                      help="generate-batch: each request's tokens, and at every step the "
                      "runner-up token and the top logit's lead over it")
  args = parser.parse_args(argv)
  model = load_model(args.model, args.quantization, args.tensor_parallel_size,
                     args.kv_cache_dtype, args.cpu_weight_only_activations)
  tokens = [int(x) for x in args.tokens.split(",") if x.strip()]
  if args.command == "generate-batch":
    with open(args.requests) as f:
      requests = json.load(f)
    if args.margins:
      print(json.dumps([greedy_with_margins(model, r["tokens"], r["max_tokens"])
                        for r in requests]))
    else:
      print(json.dumps([llama_reference.greedy_generate(model, r["tokens"], r["max_tokens"],
                                                        ignore_eos=True) for r in requests]))
  elif args.command == "generate":
    out = llama_reference.greedy_generate(model, tokens, args.max_tokens, ignore_eos=True)
    print(",".join(str(x) for x in out))
  else:
    logits = llama_reference.forward(model, tokens)
    logits.astype("<f8").tofile(args.out)
    print(f"shape {logits.shape[0]} {logits.shape[1]}")


if __name__ == "__main__":
  main(sys.argv[1:])
