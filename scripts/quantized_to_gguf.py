#!/usr/bin/python3
"""Writes a Llama checkpoint's exactly dequantized weights as a GGUF file.

For scripts/bench_vs_llamacpp.sh: llama.cpp gets the same weights Pagoda
serves. Each quantized projection (AWQ, or compressed-tensors int-quantized
W8A8) is dequantized by tests/reference/quantized_reference.py's own
functions, W[o, i] = (code - zero) * scale, and stored as F32 (exact for
4-bit codes times f16 scales), for llama-quantize to turn into Q4_0 / Q8_0.
The embedding (tied LM head) is stored as BF16, rounded to nearest even as
`pagoda-server --dtype bfloat16` rounds it; norms as F32.

The file is written with llama.cpp's own GGUF library (its gguf-py, given
by --gguf-py), in the layout llama.cpp's convert_hf_to_gguf.py writes for a
LlamaForCausalLM: the same tensor names, q/k rows permuted into llama.cpp's
rope order, the same metadata keys. The converter itself is not used: it
needs torch and a tokenizer, and the benchmark model has neither; the GGUF
gets a minimal SentencePiece-style vocabulary instead (<unk>, <s>, </s>, the
256 byte pieces, then placeholder pieces), which token-id benchmarks never
read.

Usage: quantized_to_gguf.py --model DIR --out FILE.gguf --gguf-py DIR
"""

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
import quantized_reference  # noqa: E402

NUMPY_DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64,
                "I8": np.int8, "U8": np.uint8, "BF16": np.uint16}
LAYER_TENSORS = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


def read_tensors(model_dir):
  """{name: array} over every safetensors file, memory-mapped (BF16 as f32)."""
  tensors = {}
  for fname in sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors")):
    path = os.path.join(model_dir, fname)
    with open(path, "rb") as f:
      header_len = int.from_bytes(f.read(8), "little")
      header = json.loads(f.read(header_len))
    for name, info in header.items():
      if name == "__metadata__":
        continue
      begin, end = info["data_offsets"]
      array = np.memmap(path, dtype=NUMPY_DTYPES[info["dtype"]], mode="r",
                        offset=8 + header_len + begin, shape=tuple(info["shape"]))
      if info["dtype"] == "BF16":
        array = (array.astype(np.uint32) << 16).view(np.float32)
      tensors[name] = array
  return tensors


def dense_weight(tensors, module, quant):
  """The module's weight [out, in] as float32, dequantized where quantized."""
  prefix = module + "."
  if prefix + "qweight" in tensors:
    w = quantized_reference.dequantize_awq(tensors, prefix, quant["group_size"])
  elif prefix + "weight_scale" in tensors:
    w = quantized_reference.dequantize_bytes(tensors, prefix, fp8=False)
  else:
    w = tensors[prefix + "weight"]
  return np.ascontiguousarray(w, dtype=np.float32)


def rope_permute(w, heads):
  """HF's rotate-half q/k rows into llama.cpp's interleaved order (as its converter)."""
  return w.reshape(heads, 2, w.shape[0] // heads // 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)


def bf16_bytes(w):
  """float32 -> bfloat16 rounded to nearest even, as raw bytes [rows, 2 * cols]."""
  bits = np.ascontiguousarray(w, dtype=np.float32).view(np.uint32).astype(np.uint64)
  rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
  return rounded.view(np.uint8).reshape(w.shape[0], -1)


def plan(config, tensors):
  """[(gguf name, shape, producer)] in file order; BF16 shapes in bytes."""
  quant = config.get("quantization_config", {})
  heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
  hidden, inter = config["hidden_size"], config["intermediate_size"]
  head_dim = config.get("head_dim") or hidden // heads
  shapes = {"input_layernorm": (hidden,), "post_attention_layernorm": (hidden,),
            "self_attn.q_proj": (heads * head_dim, hidden),
            "self_attn.k_proj": (kv_heads * head_dim, hidden),
            "self_attn.v_proj": (kv_heads * head_dim, hidden),
            "self_attn.o_proj": (hidden, heads * head_dim), "mlp.gate_proj": (inter, hidden),
            "mlp.up_proj": (inter, hidden), "mlp.down_proj": (hidden, inter)}
  embed = (config["vocab_size"], 2 * hidden)
  items = [("token_embd.weight", embed,
            lambda: bf16_bytes(tensors["model.embed_tokens.weight"]))]
  for layer in range(config["num_hidden_layers"]):
    for hf, gg in LAYER_TENSORS.items():
      module = f"model.layers.{layer}.{hf}"

      def make(module=module, hf=hf):
        if hf.endswith("layernorm"):
          return np.ascontiguousarray(tensors[module + ".weight"], dtype=np.float32)
        w = dense_weight(tensors, module, quant)
        if hf == "self_attn.q_proj":
          return rope_permute(w, heads)
        return rope_permute(w, kv_heads) if hf == "self_attn.k_proj" else w
      items.append((f"blk.{layer}.{gg}.weight", shapes[hf], make))
  items.append(("output_norm.weight", (hidden,),
                lambda: np.ascontiguousarray(tensors["model.norm.weight"], dtype=np.float32)))
  if not config.get("tie_word_embeddings", False):
    items.append(("output.weight", embed, lambda: bf16_bytes(tensors["lm_head.weight"])))
  return items


def write_metadata(writer, gguf, config):
  heads = config["num_attention_heads"]
  head_dim = config.get("head_dim") or config["hidden_size"] // heads
  vocab = config["vocab_size"]
  writer.add_name("pagoda-bench-llama")
  writer.add_context_length(config["max_position_embeddings"])
  writer.add_embedding_length(config["hidden_size"])
  writer.add_block_count(config["num_hidden_layers"])
  writer.add_feed_forward_length(config["intermediate_size"])
  writer.add_head_count(heads)
  writer.add_head_count_kv(config["num_key_value_heads"])
  writer.add_rope_dimension_count(head_dim)
  writer.add_rope_freq_base(float(config.get("rope_theta", 10000.0)))
  writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-5)))
  writer.add_vocab_size(vocab)
  writer.add_file_type(gguf.LlamaFileType.ALL_F32)
  pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
  pieces += [f"piece{i}" for i in range(vocab - len(pieces))]
  types = ([gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
           + [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * (vocab - 259))
  writer.add_tokenizer_model("llama")
  writer.add_token_list(pieces[:vocab])
  writer.add_token_scores([0.0] * vocab)
  writer.add_token_types(types[:vocab])
  writer.add_bos_token_id(1)
  writer.add_eos_token_id(2)


def main(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--model", required=True)
  parser.add_argument("--out", required=True)
  parser.add_argument("--gguf-py", required=True, help="llama.cpp's gguf-py directory")
  args = parser.parse_args(argv)
  sys.path.insert(0, args.gguf_py)
  import gguf  # noqa: E402  (llama.cpp's, from --gguf-py)

  with open(os.path.join(args.model, "config.json")) as f:
    config = json.load(f)
  tensors = read_tensors(args.model)
  items = plan(config, tensors)
  writer = gguf.GGUFWriter(args.out, "llama")
  write_metadata(writer, gguf, config)
  # Shapes from the config first (the header precedes the data), then one
  # tensor at a time, so the whole model is never in memory.
  for name, shape, _ in items:
    bf16 = name in ("token_embd.weight", "output.weight")
    dtype = np.dtype(np.uint8 if bf16 else np.float32)
    writer.add_tensor_info(name, shape, dtype, int(np.prod(shape)) * dtype.itemsize,
                           raw_dtype=gguf.GGMLQuantizationType.BF16 if bf16 else None)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_ti_data_to_file()
  for name, shape, make in items:
    array = make()
    if array.shape != shape:
      raise ValueError(f"{name}: shape {array.shape}, expected {shape}")
    writer.write_tensor_data(array)
  writer.close()


if __name__ == "__main__":
  main(sys.argv[1:])
