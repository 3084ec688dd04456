#!/usr/bin/python3
"""Float64 reference of quantized Llama checkpoints: the exactly dequantized weights.

Unpacks each quantized projection of an AWQ (GEMM), GPTQ (gptq / gptq_v2,
sym or not, act-order g_idx) or compressed-tensors pack-quantized (symmetric)
checkpoint from the tensors as the publishers' tools store them, into the
dense float64 weight W[o, i] = (code - zero) * scale of its group, and runs
llama_reference.py's forward on those. Written from the formats'
definitions, independent of the C++ readers and of make_quantized_model.py's
packing helpers.

CLI (used by the C++ tests):
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


def dequantize(model):
  """Replaces model.weights' quantized projections by dense float64 ones."""
  q = model.config["quantization_config"]
  method = q["quant_method"]
  t = model.weights
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
    for name in [n for n in t if n.startswith(prefix)]:
      del t[name]
    t[prefix + "weight"] = np.asarray(w, dtype=np.float64)
  return model


def load_model(model_dir):
  return dequantize(llama_reference.load_model(model_dir))


def main(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("command", choices=("generate", "logits", "generate-batch"))
  parser.add_argument("--model", required=True)
  parser.add_argument("--tokens", default="")
  parser.add_argument("--requests")
  parser.add_argument("--max-tokens", type=int, default=1)
  parser.add_argument("--out")
  args = parser.parse_args(argv)
  model = load_model(args.model)
  tokens = [int(x) for x in args.tokens.split(",") if x.strip()]
  if args.command == "generate-batch":
    with open(args.requests) as f:
      requests = json.load(f)
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
