#!/usr/bin/env python3
"""Writes a Llama-3-8B-shaped checkpoint with random bf16 weights, fast.

For the decode benchmark on the GPU machine (scripts/gpu_check.sh): 16 GB of
weights drawn with torch (on the GPU when there is one) and saved with
safetensors, one shard per layer, far quicker than make_tiny_model.py's NumPy
path at this size. config.json comes from make_tiny_model.py's model_config,
so both scripts describe models the same way. The weights' scales follow
make_tiny_model.py (projections std 1/sqrt(fan_in)), so activations stay in
range and timings are taken on realistic, non-zero data.

  python3 scripts/make_bench_model.py --out /tmp/llama3-8b-random [--num-layers 32]
"""

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tiny_model  # noqa: E402

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

LLAMA3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                 num_layers=32, num_heads=32, num_kv_heads=8,
                 max_position_embeddings=8192, rope_theta=500000.0)


def main(argv):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--out", required=True)
  p.add_argument("--num-layers", type=int, default=LLAMA3_8B["num_layers"])
  p.add_argument("--seed", type=int, default=0)
  args = p.parse_args(argv)

  tiny = make_tiny_model.parse_args(["--out", args.out])
  for key, value in LLAMA3_8B.items():
    setattr(tiny, key, value)
  tiny.num_layers = args.num_layers
  tiny.dtype = "bf16"
  tiny.head_dim = None
  os.makedirs(args.out, exist_ok=True)
  config = make_tiny_model.model_config(tiny)
  make_tiny_model.write_json(os.path.join(args.out, "config.json"), config)

  device = "cuda" if torch.cuda.is_available() else "cpu"
  gen = torch.Generator(device=device).manual_seed(args.seed)
  h, inter, v = tiny.hidden_size, tiny.intermediate_size, tiny.vocab_size
  head_dim = h // tiny.num_heads
  q_out, kv_out = tiny.num_heads * head_dim, tiny.num_kv_heads * head_dim

  def normal(shape, std):
    x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * std
    return x.to(torch.bfloat16).cpu()

  def norm_weight():
    x = torch.rand((h,), generator=gen, device=device) * 0.4 + 0.8
    return x.to(torch.bfloat16).cpu()

  weight_map = {}

  def save(tensors, name):
    save_file(tensors, os.path.join(args.out, name), metadata={"format": "pt"})
    for key in tensors:
      weight_map[key] = name

  save({"model.embed_tokens.weight": normal((v, h), 1.0),
        "model.norm.weight": norm_weight(),
        "lm_head.weight": normal((v, h), 3.0 / math.sqrt(h))}, "embed.safetensors")
  for layer in range(args.num_layers):
    pre = f"model.layers.{layer}."
    save({pre + "input_layernorm.weight": norm_weight(),
          pre + "post_attention_layernorm.weight": norm_weight(),
          pre + "self_attn.q_proj.weight": normal((q_out, h), 1 / math.sqrt(h)),
          pre + "self_attn.k_proj.weight": normal((kv_out, h), 1 / math.sqrt(h)),
          pre + "self_attn.v_proj.weight": normal((kv_out, h), 1 / math.sqrt(h)),
          pre + "self_attn.o_proj.weight": normal((h, q_out), 1 / math.sqrt(q_out)),
          pre + "mlp.gate_proj.weight": normal((inter, h), 1 / math.sqrt(h)),
          pre + "mlp.up_proj.weight": normal((inter, h), 1 / math.sqrt(h)),
          pre + "mlp.down_proj.weight": normal((h, inter), 1 / math.sqrt(inter))},
         f"layer{layer:02d}.safetensors")
  make_tiny_model.write_json(os.path.join(args.out, "model.safetensors.index.json"),
                             {"metadata": {}, "weight_map": weight_map})
  print(f"wrote {args.out}: {args.num_layers} layers, bf16, on {device}")


if __name__ == "__main__":
  main(sys.argv[1:])
