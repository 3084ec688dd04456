#!/usr/bin/python3
"""Makes a tiny random quantized Llama checkpoint, as the publishers' tools write it.

Runs scripts/make_tiny_model.py for a dense f32 model, then quantizes every
decoder projection (q/k/v/o, gate/up/down; never lm_head) with round-to-
nearest min/max per group and writes it in one of these formats, tensor
names, dtypes, layouts and bit packing exactly as the tools save them:

  awq       AutoAWQ GEMM: qweight [in, out/8] int32, qzeros [in/G, out/8]
            int32, eight 4-bit fields a word in AutoAWQ's order
            (0, 2, 4, 6, 1, 3, 5, 7), scales [in/G, out] f16.
  gptq      AutoGPTQ / GPTQModel: qweight [in/p, out] int32 packed along the
            input, qzeros [G, out/p] int32 packed along the output (stored
            minus one for checkpoint_format gptq, as they are for gptq_v2),
            scales [G, out] f16, g_idx [in] int32 (act-order: a random
            permutation stands in for the Hessian order; q/k/v share it, as
            do gate/up, since they see the same input).
  ct        compressed-tensors pack-quantized, symmetric: weight_packed
            [out, in/p] int32 (values + 2^(bits-1), packed along the input
            from the low bits), weight_scale [out, G] f16, weight_shape [2]
            int64, weight_g_idx [in] int32 with actorder group.
  ct-w8a8   compressed-tensors int-quantized W8A8 (llm-compressor's
            W8A8 scheme): weight [out, in] int8, weight_scale [out, 1] f16
            (max|row| / 127), inputs dynamic per token.
  ct-fp8    compressed-tensors float-quantized: weight [out, in] F8_E4M3,
            weight_scale [out, 1] (--weight-strategy channel) or [1]
            (tensor) f32 (max|W| / 448); inputs dynamic per token, static
            (input_scale [1] f32) or none (--activations).
  dense     no quantization (for online --quantization fp8).
  fp8       vLLM's fp8 (AutoFP8 / llm-compressor "fp8" export): weight
            F8_E4M3, weight_scale [] f32 per tensor, input_scale [] f32 with
            --activations static (activation_scheme static, else dynamic).

Usage: make_quantized_model.py --out DIR --format awq|gptq|ct|ct-w8a8|ct-fp8|fp8
  [--bits 4|8] [--group-size G|-1] [--sym] [--desc-act] [--v2] [--seed S]
  [--weight-strategy channel|tensor] [--activations dynamic|static|none]
  [--ignore MODULE]  (compressed-tensors: left dense, in the ignore list)
  [--kv-scales]  (an FP8 KV cache's per-layer self_attn.k_scale and v_scale,
                 [] f32, as llm-compressor's kv_cache_scheme writes them;
                 compressed-tensors configs gain the kv_cache_scheme)
  [--drop NAME] [--as-f32 NAME]  (broken checkpoints for error tests)
  [any make_tiny_model.py flag after --]

Independent of the C++ readers; tests/reference/quantized_reference.py
unpacks what this writes (its own code) into the float64 weights the
reference forward runs.
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import llama_reference  # noqa: E402
import quantized_reference as qref  # noqa: E402  (E4M3 rounding and values)

PROJECTIONS = {"self_attn": ("q_proj", "k_proj", "v_proj", "o_proj"),
               "mlp": ("gate_proj", "up_proj", "down_proj")}
# Projections that read the same input share an act-order permutation.
SHARED_INPUT = {"k_proj": "q_proj", "v_proj": "q_proj", "up_proj": "gate_proj"}
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def pack_along_rows(values, bits, order=None):
  """Packs uint codes [rows, cols] along axis 1 into int32 [rows, cols*bits/32].

  Field f of word j (bits f*bits up) holds column j*p + order[f]."""
  p = 32 // bits
  rows, cols = values.shape
  order = order or tuple(range(p))
  words = np.zeros((rows, cols // p), dtype=np.uint32)
  for f in range(p):
    words |= values[:, order[f]::p].astype(np.uint32) << np.uint32(bits * f)
  return words.view(np.int32)


def group_members(g_idx, groups):
  return [np.nonzero(g_idx == g)[0] for g in range(groups)]


def minmax_asym(w, members, maxq):
  """Per (out, group) scale and integer zero, as AutoAWQ / GPTQ asym."""
  out = w.shape[0]
  scales = np.zeros((out, len(members)))
  zeros = np.zeros((out, len(members)))
  for g, idx in enumerate(members):
    lo = np.minimum(w[:, idx].min(axis=1), 0)
    hi = np.maximum(w[:, idx].max(axis=1), 0)
    scales[:, g] = np.maximum(hi - lo, 1e-5) / maxq
    zeros[:, g] = np.clip(np.round(-lo / scales[:, g]), 0, maxq)
  return scales, zeros


def quantize(w, g_idx, scales, zeros, maxq):
  q = np.zeros(w.shape, dtype=np.int64)
  for i in range(w.shape[1]):
    g = g_idx[i]
    q[:, i] = np.clip(np.round(w[:, i] / scales[:, g]) + zeros[:, g], 0, maxq)
  return q


def f16(x):
  return np.asarray(x, dtype=np.float16)


def awq_tensors(w, args):
  out, inp = w.shape
  gs = inp if args.group_size == -1 else args.group_size
  g_idx = np.arange(inp) // gs
  scales, zeros = minmax_asym(w, group_members(g_idx, inp // gs), 15)
  scales = f16(scales).astype(np.float64)  # Stored f16: quantize with those.
  q = quantize(w, g_idx, scales, zeros, 15)
  return {"qweight": pack_along_rows(q.T, 4, AWQ_ORDER),
          "qzeros": pack_along_rows(zeros.T.astype(np.int64), 4, AWQ_ORDER),
          "scales": f16(scales.T)}


def gptq_tensors(w, args, perm):
  out, inp = w.shape
  bits = args.bits
  maxq = (1 << bits) - 1
  gs = inp if args.group_size == -1 else args.group_size
  groups = inp // gs
  g_idx = np.arange(inp) // gs
  if args.desc_act:
    inverse = np.argsort(perm)
    g_idx = inverse // gs  # Input i was quantized at position inverse[i].
  members = group_members(g_idx, groups)
  if args.sym:
    scales = np.zeros((out, groups))
    for g, idx in enumerate(members):
      absmax = np.maximum(np.abs(w[:, idx]).max(axis=1), 1e-5)
      scales[:, g] = 2 * absmax / maxq
    zeros = np.full((out, groups), float((maxq + 1) // 2))
  else:
    scales, zeros = minmax_asym(w, members, maxq)
    if not args.v2:
      # Format gptq stores zero - 1 in a bits-wide field; a zero of 0 would
      # wrap (GPTQ's historical quirk), so keep zeros >= 1 there.
      zeros = np.maximum(zeros, 1)
  scales = f16(scales).astype(np.float64)
  q = quantize(w, g_idx, scales, zeros, maxq)
  stored_zeros = zeros.astype(np.int64) - (0 if args.v2 else 1)
  # qweight [in/p, out]: the codes [out, in] packed along the input.
  return {"qweight": pack_along_rows(q, bits).T.copy(),
          "qzeros": pack_along_rows(stored_zeros.T.copy(), bits),
          "scales": f16(scales.T),
          "g_idx": g_idx.astype(np.int32)}


def ct_tensors(w, args, perm):
  out, inp = w.shape
  bits = args.bits
  half = 1 << (bits - 1)
  gs = inp if args.group_size == -1 else args.group_size
  groups = inp // gs
  g_idx = np.arange(inp) // gs
  if args.desc_act:
    g_idx = np.argsort(perm) // gs
  scales = np.zeros((out, groups))
  for g, idx in enumerate(group_members(g_idx, groups)):
    absmax = np.maximum(np.abs(w[:, idx]).max(axis=1), 1e-5)
    scales[:, g] = absmax / ((2 * half - 1) / 2)
  scales = f16(scales).astype(np.float64)
  signed = np.zeros(w.shape, dtype=np.int64)
  for i in range(inp):
    signed[:, i] = np.clip(np.round(w[:, i] / scales[:, g_idx[i]]), -half, half - 1)
  tensors = {"weight_packed": pack_along_rows(signed + half, bits),
             "weight_scale": f16(scales),
             "weight_shape": np.array([out, inp], dtype=np.int64)}
  if args.desc_act:
    tensors["weight_g_idx"] = g_idx.astype(np.int32)
  return tensors


def e4m3_codes(values):
  """E4M3-representable float64 values -> their codes (the positive codes
  0x00..0x7E increase with their value; the sign is bit 7)."""
  positive = qref.e4m3_value(np.arange(0x7F))
  magnitude = np.abs(values)
  codes = np.searchsorted(positive, magnitude)
  assert np.array_equal(positive[codes], magnitude), "not E4M3 values"
  return (codes | (np.signbit(values) << 7)).astype(np.uint8)


def w8a8_tensors(w):
  scales = f16(np.maximum(np.abs(w).max(axis=1, keepdims=True), 1e-5) / 127).astype(np.float64)
  return {"weight": np.clip(np.round(w / scales), -128, 127).astype(np.int8),
          "weight_scale": f16(scales)}


def fp8_tensors(w, args, rng):
  per_tensor = args.format == "fp8" or args.weight_strategy == "tensor"
  amax = np.abs(w).max() if per_tensor else np.abs(w).max(axis=1, keepdims=True)
  scales = np.asarray(np.maximum(amax, 1e-5) / qref.FP8_MAX, dtype=np.float32)
  codes = e4m3_codes(qref.e4m3_round(w / scales.astype(np.float64)))
  scalar_shape = () if args.format == "fp8" else (1,)
  tensors = {"weight": codes,
             "weight_scale": scales.reshape(scalar_shape) if per_tensor else scales}
  if args.activations == "static":
    # A calibrated scale stands in: inputs up to 2..6 in magnitude.
    tensors["input_scale"] = np.full(scalar_shape, rng.uniform(2, 6) / qref.FP8_MAX,
                                     dtype=np.float32)
  return tensors


def input_activations(args):
  if args.activations == "none":
    return None
  dynamic = args.activations == "dynamic"
  return {"num_bits": 8, "type": "float" if args.format == "ct-fp8" else "int",
          "symmetric": True, "dynamic": dynamic, "strategy": "token" if dynamic else "tensor",
          "observer": None if dynamic else "minmax"}


def quantization_config(args):
  if args.format == "fp8":
    return {"quant_method": "fp8", "activation_scheme":
            "static" if args.activations == "static" else "dynamic", "ignored_layers": ["lm_head"]}
  if args.format in ("ct-w8a8", "ct-fp8"):
    fp8 = args.format == "ct-fp8"
    weights = {"num_bits": 8, "type": "float" if fp8 else "int", "symmetric": True,
               "strategy": args.weight_strategy if fp8 else "channel", "dynamic": False,
               "observer": "minmax"}
    return {"quant_method": "compressed-tensors",
            "format": "float-quantized" if fp8 else "int-quantized",
            "quantization_status": "compressed", "ignore": ["lm_head"] + args.ignore,
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": input_activations(args),
                                          "output_activations": None}}}
  if args.format == "awq":
    return {"quant_method": "awq", "bits": 4, "group_size": args.group_size,
            "zero_point": True, "version": "gemm", "modules_to_not_convert": None}
  if args.format == "gptq":
    return {"quant_method": "gptq", "bits": args.bits, "group_size": args.group_size,
            "desc_act": args.desc_act, "sym": args.sym, "lm_head": False,
            "checkpoint_format": "gptq_v2" if args.v2 else "gptq"}
  weights = {"num_bits": args.bits, "type": "int", "symmetric": True,
             "strategy": "channel" if args.group_size == -1 else "group",
             "group_size": None if args.group_size == -1 else args.group_size,
             "actorder": "group" if args.desc_act else None,
             "dynamic": False, "observer": "minmax"}
  return {"quant_method": "compressed-tensors", "format": "pack-quantized",
          "quantization_status": "compressed", "ignore": ["lm_head"],
          "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                        "input_activations": None,
                                        "output_activations": None}}}


def write_safetensors(path, tensors):
  # uint8 arrays here are only ever FP8 codes.
  tags = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16",
          np.dtype(np.int32): "I32", np.dtype(np.int64): "I64", np.dtype(np.int8): "I8",
          np.dtype(np.uint8): "F8_E4M3"}
  header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
  for name, array in tensors.items():
    raw = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
    header[name] = {"dtype": tags[array.dtype], "shape": list(array.shape),
                    "data_offsets": [offset, offset + len(raw)]}
    blobs.append(raw)
    offset += len(raw)
  text = json.dumps(header, separators=(",", ":")).encode()
  text += b" " * (-len(text) % 8)
  with open(path, "wb") as f:
    f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def main(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", required=True)
  parser.add_argument("--format", choices=("awq", "gptq", "ct", "ct-w8a8", "ct-fp8", "fp8", "dense"),
                      required=True)
  parser.add_argument("--weight-strategy", choices=("channel", "tensor"), default="channel")
  parser.add_argument("--activations", choices=("dynamic", "static", "none"), default="dynamic")
  parser.add_argument("--ignore", action="append", default=[])
  parser.add_argument("--bits", type=int, choices=(4, 8), default=4)
  parser.add_argument("--group-size", type=int, default=32)
  parser.add_argument("--sym", action="store_true")
  parser.add_argument("--desc-act", action="store_true")
  parser.add_argument("--v2", action="store_true")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--kv-scales", action="store_true")
  parser.add_argument("--drop", action="append", default=[])
  parser.add_argument("--as-f32", action="append", default=[])
  parser.add_argument("maker_flags", nargs="*")
  args = parser.parse_args(argv)
  subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "scripts", "make_tiny_model.py"),
                  "--out", args.out, "--seed", str(args.seed), "--dtype", "f32"]
                 + args.maker_flags, check=True, stdout=subprocess.DEVNULL)
  dense = llama_reference.read_model_weights(args.out)
  for name in os.listdir(args.out):
    if name.endswith(".safetensors") or name == "model.safetensors.index.json":
      os.remove(os.path.join(args.out, name))
  rng = np.random.default_rng(args.seed + 1)
  tensors, perms = {}, {}
  for name in sorted(dense):
    parts = name.split(".")
    module = name[:-len(".weight")]
    if (args.format != "dense" and len(parts) == 6 and parts[4] in PROJECTIONS.get(parts[3], ()) and parts[5] == "weight"
        and module not in args.ignore):
      w = dense[name]
      key = (parts[2], SHARED_INPUT.get(parts[4], parts[4]))
      perm = perms.setdefault(key, rng.permutation(w.shape[1]))
      made = (awq_tensors(w, args) if args.format == "awq" else
              gptq_tensors(w, args, perm) if args.format == "gptq" else
              w8a8_tensors(w) if args.format == "ct-w8a8" else
              fp8_tensors(w, args, rng) if args.format in ("ct-fp8", "fp8") else
              ct_tensors(w, args, perm))
      for suffix, array in made.items():
        tensors[f"{module}.{suffix}"] = array
    else:
      tensors[name] = dense[name].astype(np.float32)
  if args.kv_scales:
    layers = sorted({int(n.split(".")[2]) for n in tensors if n.startswith("model.layers.")})
    for layer in layers:
      for which in ("k", "v"):
        tensors[f"model.layers.{layer}.self_attn.{which}_scale"] = np.array(
            rng.uniform(0.005, 0.05), dtype=np.float32)
  for name in args.drop:
    del tensors[name]
  for name in args.as_f32:
    tensors[name] = tensors[name].astype(np.float32)
  write_safetensors(os.path.join(args.out, "model.safetensors"), tensors)
  config_path = os.path.join(args.out, "config.json")
  with open(config_path) as f:
    config = json.load(f)
  if args.format != "dense":
    config["quantization_config"] = quantization_config(args)
    if args.kv_scales and config["quantization_config"]["quant_method"] == "compressed-tensors":
      config["quantization_config"]["kv_cache_scheme"] = {
          "num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False,
          "symmetric": True}
  with open(config_path, "w") as f:
    json.dump(config, f, indent=2)


if __name__ == "__main__":
  main(sys.argv[1:])
