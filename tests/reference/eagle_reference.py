#!/usr/bin/env python3
"""Float64 NumPy reference of an EAGLE(-1/2) speculative-decoding head.

The head as vLLM's EagleLlamaForCausalLM loads it and its EagleProposer runs
it: the head's row at position p reads (token p + 1, feature p), where the
feature is the target's final-normed hidden state at p (or, past the verified
tokens, the head's own output of the row before); the row's input is
fc(concat(embed(token), feature)) (+ fc.bias when the checkpoint has one),
then Llama decoder layers whose first has no input norm, and the output (the
residual stream, no final norm) gives logits through the target's lm_head.
The target's embed_tokens and lm_head are used; the head's own are ignored.

Subcommands:
  make      one EAGLE head (as variants' "good") from --source into --out;
            with --clone, one that is nearly the target itself (fc =
            [I | 0]: the row's input is its token's embedding; the
            target's layers, layer 0's input norm folded into q, k, v;
            no final norm): its row at p reads token p + 1 and predicts
            about what the target predicts after it, so its drafts are
            often right, as a trained head's.
  variants  turns a tiny Llama made by scripts/make_tiny_model.py (--source)
            into EAGLE head checkpoints under --out, each in <name>/model:
            its layers renamed "layers.<i>.*" (input norm kept in the file:
            a loader must ignore it), its embeddings, final norm and lm_head
            dropped, a random fc and fc bias added: "good"; and heads a
            loader must refuse: no_fc (fc.weight missing), fc_shape
            (fc.weight [hidden, hidden]), no_down_proj (a layer tensor
            missing), other_vocab (made over --vocab-source, a Llama of
            another vocabulary).
  propose   per --tokens (repeatable), one line: the k greedy drafts the head
            proposes after those tokens (the last one is the step's input
            token), every earlier position verified.
  simulate  greedy speculative decoding of --tokens with k drafts a step and
            --max-tokens new tokens (k shrinks to the room left, as the
            worker tests ask): JSON {"tokens", "accepted"}.
"""

import argparse
import json
import math
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_reference as ref  # noqa: E402


def write_f32_safetensors(path, tensors):
  header = {}
  offset = 0
  for name, array in tensors.items():
    nbytes = array.size * 4
    header[name] = {"dtype": "F32", "shape": list(array.shape),
                    "data_offsets": [offset, offset + nbytes]}
    offset += nbytes
  raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
  raw += b" " * (-len(raw) % 8)
  with open(path, "wb") as f:
    f.write(len(raw).to_bytes(8, "little"))
    f.write(raw)
    for array in tensors.values():
      f.write(np.ascontiguousarray(array, dtype="<f4").tobytes())


def make_head(source, out, seed, fc_bias=False, fc_shape=None, drop=()):
  weights = ref.read_model_weights(source)
  with open(os.path.join(source, "config.json")) as f:
    config = json.load(f)
  hidden = config["hidden_size"]
  rng = np.random.default_rng(seed)
  tensors = {name[len("model."):]: w for name, w in weights.items()
             if name.startswith("model.layers.")}
  # Layer 0's input norm stays in the file, far from ones, so a loader that
  # applies it (vLLM replaces it by an identity) gives other drafts.
  tensors["layers.0.input_layernorm.weight"] = rng.uniform(0.2, 3.0, hidden)
  fc_shape = fc_shape or [hidden, 2 * hidden]
  # Embedding rows are ~N(0, 1) and features normalised: both halves feed
  # the fc at a comparable scale.
  tensors["fc.weight"] = rng.standard_normal(fc_shape) / math.sqrt(fc_shape[1])
  if fc_bias:
    tensors["fc.bias"] = rng.standard_normal(fc_shape[0]) * 0.5
  for name in drop:
    tensors.pop(name, None)
  os.makedirs(out, exist_ok=True)
  shutil.copy(os.path.join(source, "config.json"), out)
  write_f32_safetensors(os.path.join(out, "model.safetensors"), tensors)


def make_clone_head(source, out):
  make_head(source, out, 0)
  path = os.path.join(out, "model.safetensors")
  tensors = ref.read_model_weights(out)
  source_weights = ref.read_model_weights(source)
  hidden = tensors["fc.weight"].shape[0]
  # The row's input is the embedding of its token; the feature is unused.
  tensors["fc.weight"] = np.concatenate([np.eye(hidden), np.zeros((hidden, hidden))], axis=1)
  # Layer 0 has no input norm in a head: its weight goes into q, k and v.
  norm = source_weights["model.layers.0.input_layernorm.weight"]
  for proj in ("q_proj", "k_proj", "v_proj"):
    name = f"layers.0.self_attn.{proj}.weight"
    tensors[name] = tensors[name] * norm[np.newaxis, :]
  write_f32_safetensors(path, tensors)


def make_variants(args):
  with open(os.path.join(args.source, "config.json")) as f:
    hidden = json.load(f)["hidden_size"]
  def out(name):
    return os.path.join(args.out, name, "model")
  make_head(args.source, out("good"), args.seed, fc_bias=True)
  make_head(args.source, out("no_fc"), 0, drop=["fc.weight"])
  make_head(args.source, out("fc_shape"), 0, fc_shape=[hidden, hidden])
  make_head(args.source, out("no_down_proj"), 0,
            drop=["layers.0.mlp.down_proj.weight"])
  make_head(args.vocab_source, out("other_vocab"), 0)


def target_hidden(target, ids):
  """The target's final-normed hidden states of every position."""
  w = target.weights
  x = w["model.embed_tokens.weight"][np.asarray(ids, dtype=np.int64)]
  for layer in range(target.num_layers):
    pre = f"model.layers.{layer}."
    x = x + ref.attention(target, ref.rms_norm(
        x, w[pre + "input_layernorm.weight"], target.eps), layer)
    x = x + ref.mlp(target, ref.rms_norm(
        x, w[pre + "post_attention_layernorm.weight"], target.eps), layer)
  return ref.rms_norm(x, w["model.norm.weight"], target.eps)


def load_head(head_dir):
  """The head as a reference Model whose layers are named model.layers.*."""
  with open(os.path.join(head_dir, "config.json")) as f:
    config = json.load(f)
  weights = ref.read_safetensors(os.path.join(head_dir, "model.safetensors"))
  renamed = {("model." + n if n.startswith("layers.") else n): w
             for n, w in weights.items()}
  num_heads = config["num_attention_heads"]
  head_dim = config.get("head_dim") or config["hidden_size"] // num_heads
  head = ref.Model(
      config=config, weights=renamed, eos_ids=[],
      num_layers=config["num_hidden_layers"], num_heads=num_heads,
      num_kv_heads=config.get("num_key_value_heads") or num_heads,
      head_dim=head_dim, vocab_size=config["vocab_size"],
      eps=config.get("rms_norm_eps", 1e-6),
      inv_freq=ref.rope_inv_freq(head_dim, config.get("rope_theta", 10000.0),
                                 config.get("rope_scaling")))
  return head


def head_outputs(head, target, tokens, features):
  """The head's outputs of rows 0..m-1 (positions 0..m-1), causal."""
  w = head.weights
  embedded = target.weights["model.embed_tokens.weight"][
      np.asarray(tokens, dtype=np.int64)]
  x = np.concatenate([embedded, np.asarray(features)], axis=-1) @ w["fc.weight"].T
  if "fc.bias" in w:
    x = x + w["fc.bias"]
  for layer in range(head.num_layers):
    pre = f"model.layers.{layer}."
    # vLLM's EAGLE layer 0 has an identity input norm.
    normed = x if layer == 0 else ref.rms_norm(
        x, w[pre + "input_layernorm.weight"], head.eps)
    x = x + ref.attention(head, normed, layer)
    x = x + ref.mlp(head, ref.rms_norm(
        x, w[pre + "post_attention_layernorm.weight"], head.eps), layer)
  return x


def propose(head, target, ids, k):
  """k greedy drafts after ids (ids[-1] is the step's input token)."""
  hidden = target_hidden(target, ids)
  tokens = list(ids[1:])
  features = list(hidden[:-1])
  drafts = []
  lm_head = target.weights["lm_head.weight"]
  for _ in range(k):
    out = head_outputs(head, target, tokens, features)[-1]
    drafts.append(int(np.argmax(out @ lm_head.T)))
    tokens.append(drafts[-1])
    features.append(out)
  return drafts


def simulate(head, target, prompt, k, max_tokens, propose_drafts=None):
  """Greedy speculative decoding with `propose_drafts` (this head's
  `propose` by default; eagle3_reference passes its own)."""
  propose_drafts = propose_drafts or propose
  greedy = ref.greedy_generate(target, prompt, max_tokens, ignore_eos=True)
  output = [greedy[0]]
  accepted = []
  while len(output) < max_tokens:
    room = max_tokens - len(output) - 1
    drafts = propose_drafts(head, target, prompt + output, min(k, room))
    a = 0
    while a < len(drafts) and drafts[a] == greedy[len(output) + a]:
      a += 1
    if drafts:
      accepted.append(a)
    output = greedy[:len(output) + a + 1]
  return {"tokens": output, "accepted": accepted}


def add_draft_commands(sub):
  """The `propose` and `simulate` subcommands, shared with eagle3_reference."""
  for name in ("propose", "simulate"):
    p = sub.add_parser(name)
    p.add_argument("--target", required=True)
    p.add_argument("--head", required=True)
    p.add_argument("--tokens", required=True, action="append")
    p.add_argument("--k", type=int, required=True)
    if name == "simulate":
      p.add_argument("--max-tokens", type=int, required=True)


def run_draft_command(args, load_head_dir, propose_drafts):
  """Prints `propose` or `simulate` for each --tokens, with the head that
  `load_head_dir` loads and its `propose_drafts`."""
  target = ref.load_model(args.target)
  head = load_head_dir(args.head)
  for tokens in args.tokens:
    ids = [int(t) for t in tokens.split(",")]
    if args.command == "propose":
      print(",".join(str(d) for d in propose_drafts(head, target, ids, args.k)))
    else:
      print(json.dumps(simulate(head, target, ids, args.k, args.max_tokens, propose_drafts)))


def main(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  sub = parser.add_subparsers(dest="command", required=True)
  p_make = sub.add_parser("make")
  p_make.add_argument("--source", required=True)
  p_make.add_argument("--out", required=True)
  p_make.add_argument("--seed", type=int, default=7)
  p_make.add_argument("--clone", action="store_true")
  p_variants = sub.add_parser("variants")
  p_variants.add_argument("--source", required=True)
  p_variants.add_argument("--vocab-source", required=True)
  p_variants.add_argument("--out", required=True)
  p_variants.add_argument("--seed", type=int, default=7)
  add_draft_commands(sub)
  args = parser.parse_args(argv)
  if args.command == "make" and args.clone:
    make_clone_head(args.source, args.out)
    return
  if args.command == "make":
    make_head(args.source, args.out, args.seed, fc_bias=True)
    return
  if args.command == "variants":
    make_variants(args)
    return
  run_draft_command(args, load_head, propose)


if __name__ == "__main__":
  main(sys.argv[1:])
