#!/usr/bin/python3
"""Writes a tiny Hugging Face-format Llama-family model with random weights.

No weights can be downloaded here, so tests and the demo run on models made by
this script: config.json, generation_config.json, *.safetensors (optionally
sharded with model.safetensors.index.json) and, with --tokenizer, a
sentencepiece tokenizer.model trained locally with the `spm_train` CLI.

Weight names and shapes are exactly Hugging Face's (torch Linear layout
[out_features, in_features]). Initialisation keeps activations O(1) through
the layers and gives logits a spread of a few units, so greedy decoding is not
degenerate and near-ties between the top two tokens are rare.

Run with Debian's /usr/bin/python3 (numpy is all it needs):
  /usr/bin/python3 scripts/make_tiny_model.py --out models/tiny --num-layers 2
  /usr/bin/python3 scripts/make_tiny_model.py --preset demo --out models/demo
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "mistral": "MistralForCausalLM",
}

# Stored dtype name -> (safetensors dtype tag, torch_dtype string in config.json).
DTYPES = {
    "f32": ("F32", "float32"),
    "f16": ("F16", "float16"),
    "bf16": ("BF16", "bfloat16"),
}

PRESETS = {
    # The default model of the README run command.
    "demo": dict(arch="llama", vocab_size=512, tokenizer=True, hidden_size=256,
                 num_layers=4, num_heads=8, num_kv_heads=4,
                 intermediate_size=688, max_position_embeddings=2048,
                 dtype="f16"),
    # A bigger model for throughput benchmarks; no tokenizer (token ids only).
    "bench": dict(arch="llama", vocab_size=2048, tokenizer=False,
                  hidden_size=512, num_layers=8, num_heads=8, num_kv_heads=8,
                  intermediate_size=1376, dtype="f32"),
    # Tensor-parallel step times (scripts/bench_tensor_parallel.sh): the
    # layers dominate (hidden 1024, 16 heads, all splittable by 2 and 4).
    "tp": dict(arch="llama", vocab_size=2048, tokenizer=False,
               hidden_size=1024, num_layers=4, num_heads=16, num_kv_heads=16,
               intermediate_size=2816, max_position_embeddings=1024,
               dtype="f32"),
    # The shape the CPU worker is compared with llama.cpp on: 32.5 M
    # parameters, GQA 8 query / 2 KV heads.
    "b1": dict(arch="llama", vocab_size=8192, tokenizer=False,
               hidden_size=512, num_layers=8, num_heads=8, num_kv_heads=2,
               intermediate_size=1536, max_position_embeddings=2048,
               dtype="f32"),
    # A Llama-3.2-1B-shaped model (1.24 B parameters, tied embeddings), the
    # CPU worker's large benchmark: random bf16 weights, no tokenizer.
    "llama1b": dict(arch="llama", vocab_size=128256, tokenizer=False,
                    hidden_size=2048, num_layers=16, num_heads=32,
                    num_kv_heads=8, intermediate_size=8192,
                    max_position_embeddings=8192, rope_theta=500000.0,
                    tie_word_embeddings=True, dtype="bf16"),
}

# A few KB of varied plain English, written for this project, on which the
# tokenizer is trained. Varied enough that BPE reaches a 512-piece vocabulary.
CORPUS = """\
The quick brown fox jumps over the lazy dog.
A small language model can still tell a story if it is given a good prompt.
Every morning the baker opens the shop at six and sells warm bread to the neighbours.
The river runs past the old mill, under the stone bridge, and into the sea.
She wrote a letter to her grandmother and posted it on the way to school.
Computers store numbers as bits, and a byte holds eight of them.
The train to the city leaves from platform four at a quarter past nine.
In winter the lake freezes and children skate on it after lunch.
He planted tomatoes, beans and potatoes in the garden behind the house.
A good cup of tea needs fresh water, a warm pot and a little patience.
The library is quiet in the afternoon, when most students are in class.
Clouds gathered over the hills, and soon the first drops of rain began to fall.
The engineer measured the bridge twice before she signed the report.
Our cat sleeps on the windowsill and watches the birds in the tree outside.
The market sells apples, pears, cheese, honey and fresh flowers on Saturdays.
When the sun sets, the sky turns orange, then purple, then deep blue.
Please remember to close the door and turn off the lights when you leave.
The museum has a painting of a ship caught in a storm near a rocky coast.
Scientists study the stars to learn how the universe began and how it changes.
The children built a castle of sand and decorated it with shells.
A server answers requests from many clients and must never lose one of them.
Memory is divided into blocks so that no space is wasted between requests.
The scheduler decides which requests run in the next step of the engine.
Tokens are small pieces of text, such as words, parts of words or single letters.
The doctor asked him to breathe slowly and listened to his heart.
Mountains are cold at the top even in summer, and the air is thin.
My brother plays the guitar, and my sister sings in the choir.
The village holds a festival every autumn with music, games and dancing.
Farmers harvest wheat in late summer and store it in tall barns.
The old clock in the hall strikes twelve at noon and again at midnight.
Bees visit thousands of flowers to make a single jar of honey.
The captain steered the boat carefully between the rocks and the harbour wall.
Learning a new language takes time, practice and a lot of listening.
The recipe calls for two eggs, a cup of flour, some sugar and a pinch of salt.
At night the city lights reflect on the water like a field of stars.
The teacher explained the problem on the board and asked the class to try it.
Birds fly south in the autumn and return when the days grow longer.
We walked along the beach, collecting smooth stones and pieces of glass.
The factory makes bicycles, and each one is tested before it leaves.
A gentle wind moved the leaves, and the garden smelled of roses.
The pilot announced that the plane would land in twenty minutes.
Grandfather told stories about the war, the farm and the long journey west.
The shop on the corner sells newspapers, sweets and postcards of the town.
Water boils at one hundred degrees and freezes at zero.
The students wrote programs that sort lists, search trees and draw pictures.
After the storm, the fishermen repaired their nets and painted their boats.
The forest is full of tall pines, quiet paths and small streams.
Her favourite book is about a girl who sails around the world alone.
The orchestra tuned their instruments while the audience found their seats.
Each evening the family eats dinner together and talks about the day.
The astronaut looked back at the earth, blue and white and very small.
A map shows roads, rivers, towns and the borders between countries.
Running every day makes the heart stronger and the mind clearer.
The kitten chased a ball of wool across the kitchen floor.
Winter coats, warm boots and thick gloves keep us dry in the snow.
The bridge was closed for repairs, so we took the long road around the valley.
Her garden has lavender, mint, thyme and a small apple tree.
The museum guide spoke about kings, queens and the castles they built.
Yesterday it rained all day; today the sky is clear and bright.
Numbers like seven, eleven and thirteen are prime because nothing divides them.
The chef tasted the soup, added pepper, and served it with fresh bread.
Why do leaves change colour in the autumn? Because the green fades away.
How many people live in this city? Almost two million, the guide said.
Trains, buses and trams carry thousands of people to work every morning.
The lighthouse keeper climbed the stairs to light the lamp before dark.
Young owls learn to hunt by watching their parents at night.
"Welcome home," said her mother, opening the door with a smile.
The committee will meet on Monday to discuss the budget for next year.
Music drifted from the open window of the house across the street.
Once upon a time there lived a king who loved to count his gold.
The journey took three days by horse and cart across the plains.
Good software is tested, measured and explained, not only written.
He fixed the broken chair with glue, two nails and some patience.
The snow melted in spring, and the streams ran fast and full.
Our teacher says that reading every day is the best way to learn words.
"""


def parse_args(argv):
  # First pass only to find the preset, whose values become the defaults.
  pre = argparse.ArgumentParser(add_help=False)
  pre.add_argument("--preset", choices=sorted(PRESETS))
  known, _ = pre.parse_known_args(argv)

  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--preset", choices=sorted(PRESETS),
                 help="demo: the README model; bench: the benchmark model; "
                      "b1: the llama.cpp comparison model; llama1b: a "
                      "Llama-3.2-1B-shaped one (2.5 GB in bf16). "
                      "Other flags override the preset's values.")
  p.add_argument("--out", required=True, help="model directory to write")
  p.add_argument("--arch", choices=sorted(ARCHITECTURES), default="llama")
  p.add_argument("--vocab-size", type=int, default=256)
  p.add_argument("--hidden-size", type=int, default=64)
  p.add_argument("--intermediate-size", type=int, default=172)
  p.add_argument("--num-layers", type=int, default=2)
  p.add_argument("--num-heads", type=int, default=4)
  p.add_argument("--num-kv-heads", type=int, default=None,
                 help="default: --num-heads (MHA)")
  p.add_argument("--head-dim", type=int, default=None,
                 help="written to config.json as head_dim; default hidden/heads")
  p.add_argument("--max-position-embeddings", type=int, default=512)
  p.add_argument("--rope-theta", type=float, default=10000.0)
  p.add_argument("--rope-scaling", choices=["none", "linear", "llama3"],
                 default="none")
  p.add_argument("--rope-factor", type=float, default=4.0)
  p.add_argument("--rope-low-freq-factor", type=float, default=1.0)
  p.add_argument("--rope-high-freq-factor", type=float, default=4.0)
  # Small on purpose: with theta 1e4 and head_dim >= 8 the llama3 formula then
  # has frequencies in all three regions (kept, interpolated, divided).
  p.add_argument("--rope-original-max-position-embeddings", type=int,
                 default=64)
  p.add_argument("--tie-word-embeddings", action="store_true")
  p.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
  p.add_argument("--shards", type=int, default=1)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--rms-norm-eps", type=float, default=1e-5)
  p.add_argument("--bos-id", type=int, default=1)
  p.add_argument("--eos-id", type=int, default=2)
  p.add_argument("--tokenizer", action="store_true",
                 help="train a sentencepiece tokenizer (spm_train) of "
                      "--vocab-size pieces, with a chat template; needs "
                      "--bos-id 1 --eos-id 2")
  if known.preset:
    p.set_defaults(**PRESETS[known.preset])
  args = p.parse_args(argv)
  if args.num_kv_heads is None:
    args.num_kv_heads = args.num_heads
  return args


def validate(args):
  if args.num_heads % args.num_kv_heads != 0:
    sys.exit("--num-heads must be a multiple of --num-kv-heads")
  if args.head_dim is None and args.hidden_size % args.num_heads != 0:
    sys.exit("--hidden-size must be a multiple of --num-heads "
             "(or give --head-dim)")
  if head_dim_of(args) % 2 != 0:
    sys.exit("head_dim must be even for rotary embeddings")
  if args.shards < 1:
    sys.exit("--shards must be >= 1")
  for name in ("bos_id", "eos_id"):
    if not 0 <= getattr(args, name) < args.vocab_size:
      sys.exit(f"--{name.replace('_', '-')} must be inside the vocabulary")
  if args.tokenizer and (args.bos_id, args.eos_id) != (1, 2):
    sys.exit("--tokenizer uses sentencepiece's ids unk=0 bos=1 eos=2")


def head_dim_of(args):
  if args.head_dim is not None:
    return args.head_dim
  return args.hidden_size // args.num_heads


class Drawn:
  """One tensor, drawn from the shared generator only when it is written.

  Tensors are written in the order make_weights lists them, so each draws
  the same numbers as if all were drawn up front; drawing rows in chunks
  gives the same numbers too (numpy's Generator fills sequentially), and
  keeps a 1B-parameter model's memory to one chunk at a time.
  """

  CHUNK_ELEMENTS = 1 << 24

  def __init__(self, rng, shape, std=None, uniform=None):
    self.rng, self.shape, self.std, self.uniform = rng, tuple(shape), std, uniform
    self.size = math.prod(self.shape)

  def chunks(self):
    """Yields float32 arrays of whole rows, in order."""
    if self.uniform is not None:
      yield self.rng.uniform(*self.uniform, size=self.shape).astype(np.float32)
      return
    rows = self.shape[0]
    per_row = self.size // rows if rows else 0
    step = max(1, self.CHUNK_ELEMENTS // max(1, per_row))
    for first in range(0, rows, step):
      shape = (min(step, rows - first),) + self.shape[1:]
      yield (self.rng.standard_normal(shape) * self.std).astype(np.float32)


def weight_draws(args):
  """Returns {HF name: Drawn} in a fixed order, seeded by --seed.

  Scales: projections reading a normalised vector use std 1/sqrt(fan_in) so q,
  k, v, gate and up elements are ~N(0, 1) and attention scores ~N(0, 1) after
  the 1/sqrt(head_dim) scaling; o_proj and down_proj are halved so each layer
  adds O(0.5) per element to the residual stream; lm_head uses 3/sqrt(H) so the
  logits of a normalised state have std ~3 (top-2 gaps mostly well above
  f16 rounding).
  """
  rng = np.random.default_rng(args.seed)
  h, inter, v = args.hidden_size, args.intermediate_size, args.vocab_size
  hd = head_dim_of(args)
  q_out, kv_out = args.num_heads * hd, args.num_kv_heads * hd

  def normal(shape, std):
    return Drawn(rng, shape, std=std)

  def norm_weight():
    # Random around 1 so a loader that forgets to apply it is caught.
    return Drawn(rng, (h,), uniform=(0.8, 1.2))

  w = {}
  # Tied: the embedding doubles as lm_head, so it takes lm_head's scale.
  embed_std = 3.0 / math.sqrt(h) if args.tie_word_embeddings else 1.0
  w["model.embed_tokens.weight"] = normal((v, h), embed_std)
  for i in range(args.num_layers):
    pre = f"model.layers.{i}."
    w[pre + "self_attn.q_proj.weight"] = normal((q_out, h), 1 / math.sqrt(h))
    w[pre + "self_attn.k_proj.weight"] = normal((kv_out, h), 1 / math.sqrt(h))
    w[pre + "self_attn.v_proj.weight"] = normal((kv_out, h), 1 / math.sqrt(h))
    if args.arch == "qwen2":
      w[pre + "self_attn.q_proj.bias"] = normal((q_out,), 0.5)
      w[pre + "self_attn.k_proj.bias"] = normal((kv_out,), 0.5)
      w[pre + "self_attn.v_proj.bias"] = normal((kv_out,), 0.5)
    w[pre + "self_attn.o_proj.weight"] = normal((h, q_out),
                                                0.5 / math.sqrt(q_out))
    w[pre + "mlp.gate_proj.weight"] = normal((inter, h), 1 / math.sqrt(h))
    w[pre + "mlp.up_proj.weight"] = normal((inter, h), 1 / math.sqrt(h))
    w[pre + "mlp.down_proj.weight"] = normal((h, inter),
                                             0.5 / math.sqrt(inter))
    w[pre + "input_layernorm.weight"] = norm_weight()
    w[pre + "post_attention_layernorm.weight"] = norm_weight()
  w["model.norm.weight"] = norm_weight()
  if not args.tie_word_embeddings:
    w["lm_head.weight"] = normal((v, h), 3.0 / math.sqrt(h))
  return w


def make_weights(args):
  """Returns {HF name: float32 array}: weight_draws' tensors, drawn now."""
  return {name: np.concatenate(list(drawn.chunks()))
          for name, drawn in weight_draws(args).items()}


def float32_to_bf16_bits(x):
  """Rounds float32 to bfloat16 (nearest, ties to even); returns uint16 bits."""
  bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
  bits = bits.astype(np.uint64)  # room for the carry of the rounding add
  rounding = ((bits >> 16) & 1) + 0x7FFF
  return ((bits + rounding) >> 16).astype(np.uint16)


def encode(array, dtype):
  """Returns the little-endian bytes of `array` stored as `dtype`."""
  if dtype == "f32":
    return array.astype("<f4").tobytes()
  if dtype == "f16":
    return array.astype("<f2").tobytes()
  return float32_to_bf16_bits(array).astype("<u2").tobytes()


def write_safetensors(path, tensors, dtype):
  """Writes {name: Drawn} to `path` in the safetensors format.

  Layout: 8-byte little-endian header length, a JSON header mapping each name
  to dtype/shape/data_offsets (relative to the data area), padded with spaces
  to a multiple of 8 bytes so the data area is 8-byte aligned, then the data.
  """
  tag = DTYPES[dtype][0]
  elem = 4 if dtype == "f32" else 2
  header = {"__metadata__": {"format": "pt"}}
  offset = 0
  for name, tensor in tensors.items():
    header[name] = {"dtype": tag, "shape": list(tensor.shape),
                    "data_offsets": [offset, offset + tensor.size * elem]}
    offset += tensor.size * elem
  header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
  header_bytes += b" " * (-len(header_bytes) % 8)
  with open(path, "wb") as f:
    f.write(len(header_bytes).to_bytes(8, "little"))
    f.write(header_bytes)
    for tensor in tensors.values():
      for chunk in tensor.chunks():
        f.write(encode(chunk, dtype))
  return offset


def split_into_shards(names, sizes, num_shards):
  """Splits `names` (in order) into `num_shards` non-empty contiguous groups of
  roughly equal byte size."""
  if num_shards > len(names):
    sys.exit(f"--shards {num_shards} exceeds the {len(names)} tensors")
  total = sum(sizes)
  groups = [[] for _ in range(num_shards)]
  acc = 0
  shard = 0
  for i, (name, size) in enumerate(zip(names, sizes)):
    remaining_names = len(names) - i
    remaining_shards = num_shards - shard
    # Move on when this shard has its share, or when every later shard
    # needs one of the remaining tensors.
    if groups[shard] and shard + 1 < num_shards and (
        acc >= total * (shard + 1) / num_shards or
        remaining_names < remaining_shards):
      shard += 1
    groups[shard].append(name)
    acc += size
  return groups


def write_weights(out, weights, dtype, num_shards):
  # Stale weight files of an earlier run would be read as part of this model.
  for fname in os.listdir(out):
    if fname.endswith(".safetensors") or fname == "model.safetensors.index.json":
      os.remove(os.path.join(out, fname))
  if num_shards == 1:
    write_safetensors(os.path.join(out, "model.safetensors"), weights, dtype)
    return
  names = list(weights)
  elem = 4 if dtype == "f32" else 2
  sizes = [weights[n].size * elem for n in names]  # Drawn.size: elements.
  weight_map = {}
  total = 0
  for k, group in enumerate(split_into_shards(names, sizes, num_shards)):
    fname = f"model-{k + 1:05d}-of-{num_shards:05d}.safetensors"
    total += write_safetensors(os.path.join(out, fname),
                               {n: weights[n] for n in group}, dtype)
    for n in group:
      weight_map[n] = fname
  write_json(os.path.join(out, "model.safetensors.index.json"),
             {"metadata": {"total_size": total}, "weight_map": weight_map})


def rope_scaling_config(args):
  if args.rope_scaling == "none":
    return None
  if args.rope_scaling == "linear":
    # Both keys: "type" is the older Hugging Face spelling, "rope_type" newer.
    return {"rope_type": "linear", "type": "linear",
            "factor": args.rope_factor}
  return {"rope_type": "llama3", "type": "llama3", "factor": args.rope_factor,
          "low_freq_factor": args.rope_low_freq_factor,
          "high_freq_factor": args.rope_high_freq_factor,
          "original_max_position_embeddings":
              args.rope_original_max_position_embeddings}


def model_config(args):
  cfg = {
      "architectures": [ARCHITECTURES[args.arch]],
      "model_type": args.arch,
      "vocab_size": args.vocab_size,
      "hidden_size": args.hidden_size,
      "intermediate_size": args.intermediate_size,
      "num_hidden_layers": args.num_layers,
      "num_attention_heads": args.num_heads,
      "num_key_value_heads": args.num_kv_heads,
      "hidden_act": "silu",
      "max_position_embeddings": args.max_position_embeddings,
      "rms_norm_eps": args.rms_norm_eps,
      "rope_theta": args.rope_theta,
      "rope_scaling": rope_scaling_config(args),
      "tie_word_embeddings": args.tie_word_embeddings,
      "bos_token_id": args.bos_id,
      "eos_token_id": args.eos_id,
      "torch_dtype": DTYPES[args.dtype][1],
      "attention_bias": args.arch == "qwen2",
  }
  if args.head_dim is not None:
    cfg["head_dim"] = args.head_dim
  if args.arch == "qwen2":
    cfg["use_sliding_window"] = False
  if args.arch == "mistral":
    cfg["sliding_window"] = None  # Pagoda supports Mistral without it.
  return cfg


# Llama 2's chat layout (without its BOS, which the tokenizer adds), so that
# /v1/chat/completions works on every model made with --tokenizer.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}<<SYS>>\n{{ message['content'] }}\n<</SYS>>\n\n"
    "{% elif message['role'] == 'user' %}[INST] {{ message['content'] }} [/INST]"
    "{% else %} {{ message['content'] }}{{ eos_token }}{% endif %}"
    "{% endfor %}")


def write_json(path, obj):
  with open(path, "w") as f:
    json.dump(obj, f, indent=2)
    f.write("\n")


def train_tokenizer(out, vocab_size):
  """Trains a BPE sentencepiece model on CORPUS into out/tokenizer.model."""
  if shutil.which("spm_train") is None:
    sys.exit("spm_train not found: install Debian's sentencepiece package")
  with tempfile.TemporaryDirectory() as tmp:
    corpus = os.path.join(tmp, "corpus.txt")
    with open(corpus, "w") as f:
      f.write(CORPUS)
    # Relative names: the trainer spec stored in the model records them, and
    # a temporary path would make the file differ from run to run.
    cmd = ["spm_train", "--input=corpus.txt", "--model_prefix=tokenizer",
           f"--vocab_size={vocab_size}", "--model_type=bpe",
           "--character_coverage=1.0", "--num_threads=1",
           "--unk_id=0", "--bos_id=1", "--eos_id=2", "--pad_id=-1",
           "--minloglevel=2"]
    # Byte fallback makes any prompt encodable without <unk>, but needs 256
    # byte pieces; smaller vocabularies go without it.
    if vocab_size >= 384:
      cmd.append("--byte_fallback=true")
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
    if result.returncode != 0:
      sys.exit(f"spm_train failed:\n{result.stderr[-2000:]}")
    shutil.copy(os.path.join(tmp, "tokenizer.model"),
                os.path.join(out, "tokenizer.model"))
  write_json(os.path.join(out, "tokenizer_config.json"), {
      "tokenizer_class": "LlamaTokenizer", "add_bos_token": True,
      "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
      "unk_token": "<unk>", "chat_template": CHAT_TEMPLATE})


def main(argv):
  args = parse_args(argv)
  validate(args)
  os.makedirs(args.out, exist_ok=True)
  write_json(os.path.join(args.out, "config.json"), model_config(args))
  write_json(os.path.join(args.out, "generation_config.json"),
             {"bos_token_id": args.bos_id, "eos_token_id": args.eos_id})
  write_weights(args.out, weight_draws(args), args.dtype, args.shards)
  if args.tokenizer:
    train_tokenizer(args.out, args.vocab_size)
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main(sys.argv[1:])
