#!/usr/bin/env python3
"""Float64 NumPy reference of an EAGLE-3 speculative-decoding head.

The head as vLLM's Eagle3LlamaForCausalLM loads it and its EagleProposer
runs it. The target keeps the residual stream entering three of its layers
(config "eagle_aux_hidden_state_layer_ids", default (2, L // 2, L - 3); id j
is the input of layer j, 0 the embedding), concatenated [3H]. The head's row
at position p reads (token p + 1, hidden p), where hidden p is fc(aux p) once
the target verified p, and the head's own pre-norm output of the row before
while it drafts. Its first layer ("midlayer.*", or "layers.0.*") feeds
concat(input_layernorm(embed(token)), hidden_norm(hidden)) [2H] to q/k/v,
with the hidden as the residual (hidden_norm(hidden) when the config says
"norm_before_residual": true, as vLLM's layer does). A head of
num_hidden_layers N > 1 runs "layers.1.*" .. "layers.<N-1>.*" after it as
plain Llama decoder layers (q/k/v read [H], the pre-norm residual stream
continuing). The last layer's output goes through its own final "norm" and
"lm_head" over draft_vocab_size ids, draft id d being target id d + d2t[d].
Embeddings are the head's "embed_tokens" when it has them, the target's
otherwise. t2d is present and unused. With "eagle_config":
{"use_aux_hidden_state": false} the head has no fc and the target keeps no
aux layers: hidden p is the target's final-normed hidden state at p, as an
EAGLE-1 head's feature (vLLM's combine_hidden_states passes it as it is).

Subcommands:
  make      one EAGLE-3 head (as variants' "good") from --source into --out;
            --num-layers N for a head of N layers (as "two_layers"), --no-aux
            for one without fc (as "no_aux").
  variants  turns a tiny one-layer Llama (--source) into EAGLE-3 heads under
            --out, each in <name>/model: "good", "own_embed" (with its own
            embed_tokens), "norm_before_residual" (good's weights with that
            flag), "two_layers" (good's first layer and a second, random
            one), "no_aux" (good's weights without fc, use_aux_hidden_state
            false), "no_d2t" (a head without d2t: draft id d is target
            id d, as in vLLM), and heads a loader must refuse: no_fc,
            fc_shape (fc.weight [H, 2H]), no_hidden_norm, d2t_range (a draft
            id mapped past the target's vocabulary), default_layers (no
            layer ids: the default is out of a 2-layer target's range).
  propose   per --tokens (repeatable), the k greedy drafts after those tokens
            (the last is the step's input), every earlier one verified.
  simulate  greedy speculative decoding of --tokens, k drafts a step,
            --max-tokens new tokens: JSON {"tokens", "accepted"}.
  near-target  a head from --target's own weights whose drafts are mostly
            the target's greedy tokens (make_near_target) into --out.
  coupling  after --tokens at temperature 1: JSON {"p": the target's
            distribution, "agree": the probability that the head's first
            draft is accepted when it and the target draw by Gumbel-max
            with the same noise, "independent": the same for independent
            draws}.
"""

import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eagle_reference  # noqa: E402
import llama_reference as ref  # noqa: E402

DRAFT_VOCAB = 40
AUX_LAYERS = [1, 0, 1]


def write_safetensors(path, tensors):
  """tensors: {name: (safetensors dtype, numpy array)}."""
  numpy_types = {"F32": "<f4", "I64": "<i8", "BOOL": "u1"}
  header, blobs, offset = {}, [], 0
  for name, (dtype, array) in tensors.items():
    blob = np.ascontiguousarray(array, dtype=numpy_types[dtype]).tobytes()
    header[name] = {"dtype": dtype, "shape": list(array.shape),
                    "data_offsets": [offset, offset + len(blob)]}
    offset += len(blob)
    blobs.append(blob)
  raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
  raw += b" " * (-len(raw) % 8)
  with open(path, "wb") as f:
    f.write(len(raw).to_bytes(8, "little"))
    f.write(raw)
    for blob in blobs:
      f.write(blob)


def later_layer(rng, layer0, index):
  """Layer `index` > 0 of a multi-layer head: layer 0's shapes with q/k/v
  reading [H], random weights and norms far from ones."""
  hidden = layer0["post_attention_layernorm.weight"].shape[0]
  tensors = {}
  for name, w in layer0.items():
    if name == "hidden_norm.weight":
      continue  # Only the first layer reads the hidden state.
    shape = (w.shape[0], hidden) if name.startswith("self_attn.") and (
        name.split(".")[1] in ("q_proj", "k_proj", "v_proj")) and w.ndim == 2 else w.shape
    if name.endswith("norm.weight"):
      tensors[f"layers.{index}.{name}"] = rng.uniform(0.2, 3.0, shape)
    else:
      tensors[f"layers.{index}.{name}"] = rng.standard_normal(shape) / math.sqrt(shape[-1])
  return tensors


def make_head(source, out, target_vocab, seed, own_embed=False, fc_cols=3,
              drop=(), d2t_shift=0, layer_ids=AUX_LAYERS, norm_before_residual=False,
              num_layers=1, use_aux=True):
  weights = ref.read_model_weights(source)
  with open(os.path.join(source, "config.json")) as f:
    config = json.load(f)
  hidden = config["hidden_size"]
  rng = np.random.default_rng(seed)
  f32 = {}
  for name, w in weights.items():
    if name.startswith("model.layers.0."):
      f32["midlayer." + name[len("model.layers.0."):]] = w
  # q/k/v read [2H]; every norm far from ones so a loader that skips one
  # gives other drafts.
  for proj in ("q_proj", "k_proj", "v_proj"):
    rows = f32[f"midlayer.self_attn.{proj}.weight"].shape[0]
    f32[f"midlayer.self_attn.{proj}.weight"] = (
        rng.standard_normal((rows, 2 * hidden)) / math.sqrt(2 * hidden))
  for norm in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
    f32[f"midlayer.{norm}.weight"] = rng.uniform(0.2, 3.0, hidden)
  f32["norm.weight"] = rng.uniform(0.2, 3.0, hidden)
  f32["fc.weight"] = (rng.standard_normal((hidden, fc_cols * hidden))
                      / math.sqrt(fc_cols * hidden))
  f32["lm_head.weight"] = rng.standard_normal((DRAFT_VOCAB, hidden))
  if own_embed:
    f32["embed_tokens.weight"] = rng.standard_normal((target_vocab, hidden))
  # Drawn after good's weights, so two_layers shares good's first layer.
  layer0 = {n[len("midlayer."):]: w for n, w in f32.items() if n.startswith("midlayer.")}
  extra_rng = np.random.default_rng(seed + 1000)
  for index in range(1, num_layers):
    f32.update(later_layer(extra_rng, layer0, index))
  if not use_aux:
    del f32["fc.weight"]
  kept = np.sort(rng.choice(target_vocab, DRAFT_VOCAB, replace=False))
  d2t = kept - np.arange(DRAFT_VOCAB)
  d2t[-1] += d2t_shift
  t2d = np.zeros(target_vocab, dtype=bool)
  t2d[kept] = True
  tensors = {n: ("F32", w) for n, w in f32.items()}
  tensors["d2t"] = ("I64", d2t)
  tensors["t2d"] = ("BOOL", t2d)
  for name in drop:
    tensors.pop(name, None)
  config.update(architectures=["LlamaForCausalLMEagle3"], vocab_size=target_vocab,
                draft_vocab_size=DRAFT_VOCAB)
  config.pop("eagle_aux_hidden_state_layer_ids", None)
  if layer_ids is not None:
    config["eagle_aux_hidden_state_layer_ids"] = layer_ids
  if norm_before_residual:
    config["norm_before_residual"] = True
  config["num_hidden_layers"] = num_layers
  if not use_aux:
    config["eagle_config"] = {"use_aux_hidden_state": False}
    config.pop("eagle_aux_hidden_state_layer_ids", None)
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, "config.json"), "w") as f:
    json.dump(config, f)
  write_safetensors(os.path.join(out, "model.safetensors"), tensors)


def make_near_target(target_dir, out, gain=6.0):
  """A head built from the target's own weights whose greedy drafts are
  mostly the target's greedy tokens. Its row p must run the target at
  position p + 1, whose input is token p + 1: the row's token. A head's
  layer 0 sees that token only through input_layernorm(embed) [H] in its
  q/k/v, never in its residual stream, so layer 0 copies it there: q, k
  = gain * the token half (input norm ones), v and o identity, attention
  per head then (nearly) the row itself, the MLP zero, the residual from
  the hidden zero (hidden_norm zero with norm_before_residual; the fc
  selects the last aux hidden state, then unused). Layers 1.. are the
  target's layers, each KV head repeated for its query heads (the head is
  multi-head), then the target's final norm and lm_head over the whole
  vocabulary (d2t zero). Row j sits at position j, so RoPE sees the
  target's offsets; what differs from the target is token 0, absent, and
  the residual's embedding, normalised."""
  w = ref.read_model_weights(target_dir)
  with open(os.path.join(target_dir, "config.json")) as f:
    config = json.load(f)
  hidden = config["hidden_size"]
  vocab = config["vocab_size"]
  heads = config["num_attention_heads"]
  kv_heads = config.get("num_key_value_heads") or heads
  head_dim = hidden // heads
  eye = np.eye(hidden)
  zero = np.zeros((hidden, hidden))
  f32 = {
      "midlayer.self_attn.q_proj.weight": np.concatenate([gain * eye, zero], axis=1),
      "midlayer.self_attn.k_proj.weight": np.concatenate([gain * eye, zero], axis=1),
      "midlayer.self_attn.v_proj.weight": np.concatenate([eye, zero], axis=1),
      "midlayer.self_attn.o_proj.weight": eye,
      "midlayer.mlp.gate_proj.weight": w["model.layers.0.mlp.gate_proj.weight"],
      "midlayer.mlp.up_proj.weight": w["model.layers.0.mlp.up_proj.weight"],
      "midlayer.mlp.down_proj.weight": np.zeros_like(w["model.layers.0.mlp.down_proj.weight"]),
      "midlayer.input_layernorm.weight": np.ones(hidden),
      "midlayer.post_attention_layernorm.weight": np.ones(hidden),
      "midlayer.hidden_norm.weight": np.zeros(hidden),
      "fc.weight": np.concatenate([zero, zero, eye], axis=1),
      "norm.weight": w["model.norm.weight"],
      "lm_head.weight": w.get("lm_head.weight", w["model.embed_tokens.weight"]),
  }
  # Query head h reads KV head h // (heads / kv_heads).
  repeat = [h // (heads // kv_heads) for h in range(heads)]
  for name, weight in w.items():
    if not name.startswith("model.layers."):
      continue
    layer, rest = name[len("model.layers."):].split(".", 1)
    if rest.split(".")[-2] in ("k_proj", "v_proj"):
      weight = np.concatenate([weight[k * head_dim:(k + 1) * head_dim] for k in repeat])
    f32[f"layers.{int(layer) + 1}.{rest}"] = weight
  tensors = {n: ("F32", v) for n, v in f32.items()}
  tensors["d2t"] = ("I64", np.zeros(vocab, dtype=np.int64))
  tensors["t2d"] = ("BOOL", np.ones(vocab, dtype=bool))
  config.update(architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=vocab,
                norm_before_residual=True, eagle_aux_hidden_state_layer_ids=[1, 1, 0],
                num_hidden_layers=config["num_hidden_layers"] + 1, num_key_value_heads=heads,
                tie_word_embeddings=False)
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, "config.json"), "w") as f:
    json.dump(config, f)
  write_safetensors(os.path.join(out, "model.safetensors"), tensors)


def make_variants(args):
  def out(name):
    return os.path.join(args.out, name, "model")
  vocab = args.target_vocab
  make_head(args.source, out("good"), vocab, args.seed)
  make_head(args.source, out("own_embed"), vocab, args.seed + 1, own_embed=True)
  # good's weights: only the residual differs.
  make_head(args.source, out("norm_before_residual"), vocab, args.seed,
            norm_before_residual=True)
  make_head(args.source, out("two_layers"), vocab, args.seed, num_layers=2)
  make_head(args.source, out("no_aux"), vocab, args.seed, use_aux=False)
  make_head(args.source, out("no_fc"), vocab, 0, drop=["fc.weight"])
  make_head(args.source, out("fc_shape"), vocab, 0, fc_cols=2)
  make_head(args.source, out("no_hidden_norm"), vocab, 0,
            drop=["midlayer.hidden_norm.weight"])
  make_head(args.source, out("no_d2t"), vocab, 0, drop=["d2t"])
  make_head(args.source, out("d2t_range"), vocab, 0, d2t_shift=vocab)
  make_head(args.source, out("default_layers"), vocab, 0, layer_ids=None)


def load_head(head_dir):
  """The head as a reference Model, "midlayer.*" named model.layers.0.*
  and "layers.<i>.*" model.layers.<i>.*."""
  with open(os.path.join(head_dir, "config.json")) as f:
    config = json.load(f)
  weights = ref.read_safetensors(os.path.join(head_dir, "model.safetensors"))
  def renamed_one(name):
    if name.startswith("midlayer."):
      return "model.layers.0." + name[len("midlayer."):]
    return "model." + name if name.startswith("layers.") else name
  renamed = {renamed_one(n): w for n, w in weights.items()}
  num_heads = config["num_attention_heads"]
  head_dim = config.get("head_dim") or config["hidden_size"] // num_heads
  return ref.Model(
      config=config, weights=renamed, eos_ids=[],
      num_layers=config.get("num_hidden_layers", 1),
      num_heads=num_heads,
      num_kv_heads=config.get("num_key_value_heads") or num_heads,
      head_dim=head_dim, vocab_size=config["vocab_size"],
      eps=config.get("rms_norm_eps", 1e-6),
      inv_freq=ref.rope_inv_freq(head_dim, config.get("rope_theta", 10000.0),
                                 config.get("rope_scaling")))


def layer_ids(head, target):
  ids = head.config.get("eagle_aux_hidden_state_layer_ids")
  n = target.num_layers
  return ids if ids else [2, n // 2, n - 3]


def target_aux(target, ids, aux_layers):
  """[len(ids), 3H]: the residual stream entering each aux layer."""
  w = target.weights
  x = w["model.embed_tokens.weight"][np.asarray(ids, dtype=np.int64)]
  entering = []
  for layer in range(target.num_layers):
    entering.append(x)
    pre = f"model.layers.{layer}."
    x = x + ref.attention(target, ref.rms_norm(
        x, w[pre + "input_layernorm.weight"], target.eps), layer)
    x = x + ref.mlp(target, ref.rms_norm(
        x, w[pre + "post_attention_layernorm.weight"], target.eps), layer)
  return np.concatenate([entering[i] for i in aux_layers], axis=-1)


def head_outputs(head, target, tokens, hiddens):
  """Pre-norm outputs of rows 0..m-1 (positions 0..m-1), causal."""
  w = head.weights
  embed = w.get("embed_tokens.weight", target.weights["model.embed_tokens.weight"])
  e = embed[np.asarray(tokens, dtype=np.int64)]
  h = np.asarray(hiddens)
  pre = "model.layers.0."
  h_normed = ref.rms_norm(h, w[pre + "hidden_norm.weight"], head.eps)
  x = np.concatenate([ref.rms_norm(e, w[pre + "input_layernorm.weight"], head.eps), h_normed],
                     axis=-1)
  # vLLM's norm_before_residual: the residual is the normed hidden.
  skip = h_normed if head.config.get("norm_before_residual", False) else h
  residual = skip + ref.attention(head, x, 0)
  residual = residual + ref.mlp(head, ref.rms_norm(
      residual, w[pre + "post_attention_layernorm.weight"], head.eps), 0)
  # Later layers: plain pre-norm Llama layers over the residual stream.
  for layer in range(1, head.num_layers):
    pre = f"model.layers.{layer}."
    residual = residual + ref.attention(head, ref.rms_norm(
        residual, w[pre + "input_layernorm.weight"], head.eps), layer)
    residual = residual + ref.mlp(head, ref.rms_norm(
        residual, w[pre + "post_attention_layernorm.weight"], head.eps), layer)
  return residual


def draft_to_target_offsets(head):
  """d2t, or zeros when the head has none (vLLM's default: draft id d is
  target id d)."""
  if "d2t" in head.weights:
    return head.weights["d2t"].astype(np.int64)
  return np.zeros(head.weights["lm_head.weight"].shape[0], dtype=np.int64)


def draft_token(head, out):
  logits = ref.rms_norm(out, head.weights["norm.weight"], head.eps) @ head.weights["lm_head.weight"].T
  d = int(np.argmax(logits))
  return d + int(draft_to_target_offsets(head)[d])


def propose(head, target, ids, k):
  """k greedy drafts after ids (ids[-1] is the step's input token)."""
  tokens = list(ids[1:])
  if "fc.weight" in head.weights:
    aux = target_aux(target, ids, layer_ids(head, target))
    hiddens = list(aux[:-1] @ head.weights["fc.weight"].T)
  else:  # use_aux_hidden_state false: the target's final-normed states.
    hiddens = list(eagle_reference.target_hidden(target, ids)[:-1])
  drafts = []
  for _ in range(k):
    out = head_outputs(head, target, tokens, hiddens)[-1]
    drafts.append(draft_token(head, out))
    tokens.append(drafts[-1])
    hiddens.append(out)
  return drafts


def first_draft_probs(head, target, ids):
  """q over the target's vocabulary: the head's temperature-1 distribution
  of the first draft after ids (every position verified)."""
  tokens = list(ids[1:])
  if "fc.weight" in head.weights:
    aux = target_aux(target, ids, layer_ids(head, target))
    hiddens = list(aux[:-1] @ head.weights["fc.weight"].T)
  else:
    hiddens = list(eagle_reference.target_hidden(target, ids)[:-1])
  out = head_outputs(head, target, tokens, hiddens)[-1]
  logits = ref.rms_norm(out, head.weights["norm.weight"], head.eps) @ head.weights["lm_head.weight"].T
  draft = np.exp(logits - logits.max())
  q = np.zeros(target.vocab_size)
  q[np.arange(len(draft)) + draft_to_target_offsets(head)] = draft / draft.sum()
  return q


def coupling(head, target, ids):
  """At temperature 1 after ids: the target's distribution p of the next
  token, and the probability that the head's first draft is accepted when
  both draw by Gumbel-max with the same noise (the worker's coupling):
  P(argmax(log p + G) == argmax(log q + G)) = sum_x 1 / sum_y max(p_y / p_x,
  q_y / q_x), since x wins both iff G_x - G_y >= log of that max for every
  y; and, for contrast, sum_x p_x q_x, independent draws'."""
  logits = ref.forward(target, ids)[-1]
  p = np.exp(logits - logits.max())
  p /= p.sum()
  q = first_draft_probs(head, target, ids)
  both = (p > 0) & (q > 0)
  agree = sum(1.0 / np.maximum(p / p[x], q / q[x]).sum() for x in np.flatnonzero(both))
  return {"p": [float(v) for v in p], "agree": float(agree), "independent": float(p @ q)}


def main(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  sub = parser.add_subparsers(dest="command", required=True)
  p_make = sub.add_parser("make")
  p_make.add_argument("--source", required=True)
  p_make.add_argument("--target-vocab", type=int, required=True)
  p_make.add_argument("--out", required=True)
  p_make.add_argument("--seed", type=int, default=7)
  p_make.add_argument("--num-layers", type=int, default=1)
  p_make.add_argument("--no-aux", action="store_true",
                      help="use_aux_hidden_state false (no fc), as variants' no_aux")
  p_coupling = sub.add_parser("coupling")
  p_coupling.add_argument("--target", required=True)
  p_coupling.add_argument("--head", required=True)
  p_coupling.add_argument("--tokens", required=True)
  p_near = sub.add_parser("near-target")
  p_near.add_argument("--target", required=True)
  p_near.add_argument("--out", required=True)
  p_near.add_argument("--gain", type=float, default=6.0)
  p_variants = sub.add_parser("variants")
  p_variants.add_argument("--source", required=True)
  p_variants.add_argument("--target-vocab", type=int, required=True)
  p_variants.add_argument("--out", required=True)
  p_variants.add_argument("--seed", type=int, default=7)
  eagle_reference.add_draft_commands(sub)
  args = parser.parse_args(argv)
  if args.command == "make":
    make_head(args.source, args.out, args.target_vocab, args.seed, num_layers=args.num_layers,
              use_aux=not args.no_aux)
    return
  if args.command == "coupling":
    ids = [int(t) for t in args.tokens.split(",")]
    print(json.dumps(coupling(load_head(args.head), ref.load_model(args.target), ids)))
    return
  if args.command == "near-target":
    make_near_target(args.target, args.out, args.gain)
    return
  if args.command == "variants":
    make_variants(args)
    return
  eagle_reference.run_draft_command(args, load_head, propose)


if __name__ == "__main__":
  main(sys.argv[1:])
