#!/usr/bin/python3
"""Random PEFT LoRA adapters for the tiny test models, and their float64
reference: the base weights merged with each update, W + scale * B @ A.

The adapter directory is written as PEFT's save_pretrained writes it:
adapter_config.json (LoraConfig.to_dict's keys) and adapter_model.safetensors
with one tensor per update matrix named
  base_model.model.model.layers.{L}.self_attn.{q,k,v,o}_proj.lora_{A,B}.weight
  base_model.model.model.layers.{L}.mlp.{gate,up,down}_proj.lora_{A,B}.weight
A [r, in_features], B [out_features, r]. The targets embed_tokens and lm_head
are the model's, not a layer's:
  base_model.model.model.embed_tokens.lora_embedding_{A,B}  A [r, vocab], B [hidden, r]
  base_model.model.lm_head.lora_{A,B}.weight                A [r, hidden], B [vocab, r]
(an embedding maps a one-hot token to a hidden row: its weight, [vocab,
hidden], gains (B @ A).T). PEFT starts B at zero; here both are random so
that every update changes the output. PEFT's trainable_token_indices (a list
for embed_tokens, or {"embed_tokens": [...], "lm_head": [...]}) replace whole
rows of those weights for the listed tokens, after the LoRA updates (the
order vLLM applies them in), with the rows of
  base_model.model.model.embed_tokens.token_adapter.trainable_tokens_delta
  base_model.model.lm_head.token_adapter.trainable_tokens_delta   [n, hidden]
(PEFT's name; they are whole rows); a tied model's head is its embedding, so
it takes the embedding's rows.

Run with Debian's /usr/bin/python3 from the repo root:
  tests/reference/lora_reference.py make --base models/tiny --out /tmp/a \
      --rank 4 --alpha 8 --targets q_proj,v_proj --dtype bf16 \
      [--trainable-tokens 3,9 | --trainable-tokens 'embed_tokens:3,9;lm_head:5']
  tests/reference/lora_reference.py merged-linear --base models/tiny \
      --adapter /tmp/a --layer 1 --module v_proj --inputs x.f64 --out y.f64
  tests/reference/lora_reference.py merged-weight --base models/tiny \
      --adapter /tmp/a --name lm_head.weight --out w.f64
  tests/reference/lora_reference.py prompt-logprobs --base models/tiny \
      --adapter /tmp/a --tokens 1,2,3 --next 2,3,9
  tests/reference/lora_reference.py generate --base models/tiny \
      --adapter /tmp/a --tokens 1,2,3 --max-tokens 8
  tests/reference/lora_reference.py greedy-batch --base models/tiny \
      --requests '[{"adapter": "/tmp/a", "tokens": [1, 2, 3]}, {"tokens": [4]}]' \
      --max-tokens 8
The last prints, as JSON, each request's greedy tokens (EOS ignored) and
each token's float64 log-probability, under the base model merged with its
adapter (none: the base model), in one process.
"""

import argparse
import json
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "scripts"))

import llama_reference as ref  # noqa: E402
import make_tiny_model as maker  # noqa: E402

MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
           "down_proj")


def parent_of(module):
  return "self_attn" if module in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"


def base_name(layer, module):
  """The base projection's HF name, without ".weight"."""
  return f"model.layers.{layer}.{parent_of(module)}.{module}"


def peft_name(layer, module, matrix):
  """PEFT's saved name of lora_A or lora_B (adapter name dropped)."""
  return f"base_model.model.{base_name(layer, module)}.lora_{matrix}.weight"


def linear_shape(config, module):
  """[out_features, in_features] of a projection."""
  hidden = config["hidden_size"]
  heads = config["num_attention_heads"]
  head_dim = config.get("head_dim") or hidden // heads
  q = heads * head_dim
  kv = (config.get("num_key_value_heads") or heads) * head_dim
  inter = config["intermediate_size"]
  return {"q_proj": (q, hidden), "k_proj": (kv, hidden), "v_proj": (kv, hidden),
          "o_proj": (hidden, q), "gate_proj": (inter, hidden),
          "up_proj": (inter, hidden), "down_proj": (hidden, inter)}[module]


EMBED = "base_model.model.model.embed_tokens.lora_embedding_"


def vocabulary_shape(config, target):
  """[out, in] of embed_tokens (one-hot token to hidden) or lm_head."""
  hidden, vocab = config["hidden_size"], config["vocab_size"]
  return (hidden, vocab) if target == "embed_tokens" else (vocab, hidden)


def vocabulary_name(target, matrix):
  """PEFT's saved name of embed_tokens' or lm_head's lora_A or lora_B."""
  if target == "embed_tokens":
    return EMBED + matrix
  return f"base_model.model.lm_head.lora_{matrix}.weight"


TOKEN_ROWS = {
    "model.embed_tokens":
        "base_model.model.model.embed_tokens.token_adapter.trainable_tokens_delta",
    "lm_head": "base_model.model.lm_head.token_adapter.trainable_tokens_delta",
}


def parse_trainable_tokens(text):
  """The --trainable-tokens value as trainable_token_indices: "3,9" a list,
  "embed_tokens:3,9;lm_head:5" a module map; None for ""."""
  if not text:
    return None
  if ":" not in text:
    return [int(t) for t in text.split(",")]
  indices = {}
  for part in text.split(";"):
    module, ids = part.split(":")
    indices[module] = [int(t) for t in ids.split(",")]
  return indices


def token_row_modules(indices):
  """{HF module name: ids} of a trainable_token_indices value."""
  if indices is None:
    return {}
  if isinstance(indices, list):
    return {"model.embed_tokens": indices}
  return {("lm_head" if key.endswith("lm_head") else "model.embed_tokens"): ids
          for key, ids in indices.items()}


def peft_config(rank, alpha, targets, use_rslora, base_model, trainable_tokens=None):
  """LoraConfig.to_dict() as PEFT writes it, defaults included."""
  return {
      "alpha_pattern": {}, "auto_mapping": None,
      "base_model_name_or_path": base_model, "bias": "none",
      "fan_in_fan_out": False, "inference_mode": True,
      "init_lora_weights": True, "layer_replication": None,
      "layers_pattern": None, "layers_to_transform": None,
      "loftq_config": {}, "lora_alpha": alpha, "lora_dropout": 0.0,
      "megatron_config": None, "megatron_core": "megatron.core",
      "modules_to_save": None, "peft_type": "LORA", "r": rank,
      "rank_pattern": {}, "revision": None, "target_modules": list(targets),
      "task_type": "CAUSAL_LM", "trainable_token_indices": trainable_tokens,
      "use_dora": False, "use_rslora": use_rslora,
  }


class Fixed:
  """A drawn array in the shape make_tiny_model's writer takes."""

  def __init__(self, array):
    self.array, self.shape, self.size = array, array.shape, array.size

  def chunks(self):
    yield self.array


def make_adapter(base_dir, out, rank, alpha, targets, dtype="f32",
                 use_rslora=False, seed=0, trainable_tokens=None):
  """Writes a random PEFT adapter for the model in `base_dir` to `out`."""
  with open(os.path.join(base_dir, "config.json")) as f:
    config = json.load(f)
  rng = np.random.default_rng(seed)
  tensors = {}

  def draw(out_features, in_features, a_name, b_name, in_scale):
    # Sized so that scale * B @ A moves the outputs by O(0.1) of the base's.
    a = rng.standard_normal((rank, in_features)) / math.sqrt(in_scale)
    b = rng.standard_normal((out_features, rank)) * 0.2 / math.sqrt(rank)
    tensors[a_name] = Fixed(a.astype(np.float32))
    tensors[b_name] = Fixed(b.astype(np.float32))

  layer_targets = [t for t in targets if t in MODULES]
  for layer in range(config["num_hidden_layers"]):
    for module in layer_targets:
      out_features, in_features = linear_shape(config, module)
      draw(out_features, in_features, peft_name(layer, module, "A"),
           peft_name(layer, module, "B"), in_features)
  for target in (t for t in targets if t not in MODULES):
    out_features, in_features = vocabulary_shape(config, target)
    # A token picks one column of an embedding's A: no 1/sqrt(in) there.
    draw(out_features, in_features, vocabulary_name(target, "A"),
         vocabulary_name(target, "B"),
         1 if target == "embed_tokens" else in_features)
  base = ref.load_model(base_dir).weights
  for module, ids in token_row_modules(trainable_tokens).items():
    # Rows as large as the weight's own, so each replaced token moves.
    spread = float(np.std(base[module + ".weight"]))
    rows = rng.standard_normal((len(ids), config["hidden_size"])) * spread
    tensors[TOKEN_ROWS[module]] = Fixed(rows.astype(np.float32))
  os.makedirs(out, exist_ok=True)
  maker.write_safetensors(os.path.join(out, "adapter_model.safetensors"),
                          tensors, dtype)
  with open(os.path.join(out, "adapter_config.json"), "w") as f:
    json.dump(peft_config(rank, alpha, targets, use_rslora, base_dir,
                          trainable_tokens), f, indent=2, sort_keys=True)


def read_adapter(adapter_dir):
  """(scale, {base projection name: float64 B @ A}, {module: (ids, rows)})
  of a PEFT adapter."""
  with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
    config = json.load(f)
  rank, alpha = config["r"], config["lora_alpha"]
  scale = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
  tensors = ref.read_safetensors(
      os.path.join(adapter_dir, "adapter_model.safetensors"))
  prefix, suffix = "base_model.model.", ".lora_A.weight"
  deltas = {}
  for name, a in tensors.items():
    if name.endswith(suffix):
      module = name[len(prefix):-len(suffix)]
      b = tensors[name[:-len(suffix)] + ".lora_B.weight"]
      deltas[module] = b @ a
  if EMBED + "A" in tensors:
    deltas["model.embed_tokens"] = (tensors[EMBED + "B"] @ tensors[EMBED + "A"]).T
  token_rows = {module: (ids, tensors[TOKEN_ROWS[module]]) for module, ids in
                token_row_modules(config.get("trainable_token_indices")).items()}
  return scale, deltas, token_rows


def merged_weights(weights, adapter_dir):
  """A copy of {HF name: float64} with W + scale * B @ A for each update,
  then the trainable tokens' rows in place of theirs (a tied head's too)."""
  scale, deltas, token_rows = read_adapter(adapter_dir)
  tied = weights.get("lm_head.weight") is weights.get("model.embed_tokens.weight")
  merged = dict(weights)
  for module, delta in deltas.items():
    merged[module + ".weight"] = weights[module + ".weight"] + scale * delta
  for module, (ids, rows) in token_rows.items():
    tied_head = ["lm_head"] if tied and module == "model.embed_tokens" else []
    for name in (f"{m}.weight" for m in [module, *tied_head] if f"{m}.weight" in merged):
      replaced = merged[name].copy()
      replaced[ids] = rows
      merged[name] = replaced
  return merged


def greedy_batch(base_dir, requests, max_tokens):
  """[{"tokens", "logprobs"}] for each {"tokens", "adapter"?} request."""
  model = ref.load_model(base_dir)
  base_weights = model.weights
  results = []
  for request in requests:
    adapter = request.get("adapter")
    model.weights = (merged_weights(base_weights, adapter) if adapter
                     else base_weights)
    tokens = list(request["tokens"])
    generated, logprobs = [], []
    for _ in range(max_tokens):
      row = ref.log_softmax(ref.forward(model, tokens)[-1])
      next_id = int(np.argmax(row))
      generated.append(next_id)
      logprobs.append(float(row[next_id]))
      tokens.append(next_id)
    results.append({"tokens": generated, "logprobs": logprobs})
  model.weights = base_weights
  return results


def main(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  sub = parser.add_subparsers(dest="command", required=True)
  p_make = sub.add_parser("make")
  p_make.add_argument("--base", required=True)
  p_make.add_argument("--out", required=True)
  p_make.add_argument("--rank", type=int, required=True)
  p_make.add_argument("--alpha", type=float, required=True)
  p_make.add_argument("--targets", required=True)
  p_make.add_argument("--dtype", choices=sorted(maker.DTYPES), default="f32")
  p_make.add_argument("--rslora", action="store_true")
  p_make.add_argument("--seed", type=int, default=0)
  p_make.add_argument("--trainable-tokens", default="")
  p_lin = sub.add_parser("merged-linear")
  p_gen = sub.add_parser("generate")
  for p in (p_lin, p_gen):
    p.add_argument("--base", required=True)
    p.add_argument("--adapter", required=True)
  p_lin.add_argument("--layer", type=int, required=True)
  p_lin.add_argument("--module", choices=MODULES, required=True)
  p_lin.add_argument("--inputs", required=True)
  p_lin.add_argument("--out", required=True)
  p_gen.add_argument("--tokens", required=True)
  p_gen.add_argument("--max-tokens", type=int, required=True)
  p_weight = sub.add_parser("merged-weight")
  p_weight.add_argument("--base", required=True)
  p_weight.add_argument("--adapter")
  p_weight.add_argument("--name", required=True)
  p_weight.add_argument("--out", required=True)
  p_prompt = sub.add_parser("prompt-logprobs")
  p_prompt.add_argument("--base", required=True)
  p_prompt.add_argument("--adapter")
  p_prompt.add_argument("--tokens", required=True)
  p_prompt.add_argument("--next", required=True)
  p_batch = sub.add_parser("greedy-batch")
  p_batch.add_argument("--base", required=True)
  p_batch.add_argument("--requests", required=True)
  p_batch.add_argument("--max-tokens", type=int, required=True)
  args = parser.parse_args(argv)

  if args.command == "make":
    targets = [t for t in args.targets.split(",") if t]
    make_adapter(args.base, args.out, args.rank, args.alpha, targets,
                 args.dtype, args.rslora, args.seed,
                 parse_trainable_tokens(args.trainable_tokens))
  elif args.command == "greedy-batch":
    print(json.dumps(greedy_batch(args.base, json.loads(args.requests),
                                  args.max_tokens)))
  elif args.command == "prompt-logprobs":
    # Row i's float64 log-probability of next[i] after tokens[:i + 1],
    # under the merged model, as JSON.
    model = ref.load_model(args.base)
    if args.adapter:
      model.weights = merged_weights(model.weights, args.adapter)
    tokens = [int(t) for t in args.tokens.split(",")]
    rows = ref.forward(model, tokens)
    print(json.dumps([float(ref.log_softmax(rows[i])[int(t)])
                      for i, t in enumerate(args.next.split(","))]))
  elif args.command == "merged-weight":
    # One weight of the model (lm_head.weight too when tied), merged with
    # the adapter's update when one is given, float64 row-major.
    weights = ref.load_model(args.base).weights
    if args.adapter:
      weights = merged_weights(weights, args.adapter)
    weights[args.name].astype("<f8").tofile(args.out)
  elif args.command == "merged-linear":
    # y = x @ (W + scale * B @ A).T, x read as float64 [rows, in].
    merged = merged_weights(ref.read_model_weights(args.base), args.adapter)
    w = merged[base_name(args.layer, args.module) + ".weight"]
    x = np.fromfile(args.inputs, dtype="<f8").reshape(-1, w.shape[1])
    (x @ w.T).astype("<f8").tofile(args.out)
  else:
    model = ref.load_model(args.base)
    model.weights = merged_weights(model.weights, args.adapter)
    tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    out = ref.greedy_generate(model, tokens, args.max_tokens)
    print(",".join(str(t) for t in out))


if __name__ == "__main__":
  main(sys.argv[1:])
