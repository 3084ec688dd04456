"""Self-checks of the PEFT adapter maker and the merged-weight reference.

Run from the repo root with Debian's python (ctest does this):
  /usr/bin/python3 -m unittest discover -s tests/reference -p 'test_*.py' -v
"""

import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import llama_reference as ref  # noqa: E402
import lora_reference as lora  # noqa: E402

SMALL = ["--vocab-size", "32", "--hidden-size", "16", "--intermediate-size",
         "24", "--num-layers", "2", "--num-heads", "4", "--num-kv-heads", "2"]


class LoraReferenceTest(unittest.TestCase):

  @classmethod
  def setUpClass(cls):
    cls._tmp = tempfile.TemporaryDirectory()
    cls.base = os.path.join(cls._tmp.name, "base")
    subprocess.run([sys.executable, os.path.join(REPO, "scripts", "make_tiny_model.py"),
                    "--out", cls.base, *SMALL], check=True, capture_output=True)

  @classmethod
  def tearDownClass(cls):
    cls._tmp.cleanup()

  def make(self, name, rank, targets, dtype="f32", rslora=False):
    out = os.path.join(self._tmp.name, name)
    lora.make_adapter(self.base, out, rank, 8.0, targets, dtype, rslora, seed=rank)
    return out

  def test_writes_peft_names_shapes_and_config(self):
    out = self.make("qv", 3, ["q_proj", "down_proj"], dtype="bf16")
    with open(os.path.join(out, "adapter_config.json")) as f:
      config = json.load(f)
    self.assertEqual((config["r"], config["lora_alpha"], config["peft_type"]), (3, 8.0, "LORA"))
    self.assertEqual(config["target_modules"], ["q_proj", "down_proj"])
    tensors = ref.read_safetensors(os.path.join(out, "adapter_model.safetensors"))
    self.assertEqual(len(tensors), 2 * 2 * 2)
    self.assertEqual(tensors["base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight"]
                     .shape, (3, 16))
    self.assertEqual(tensors["base_model.model.model.layers.0.mlp.down_proj.lora_B.weight"]
                     .shape, (16, 3))

  def test_merged_linear_equals_base_plus_low_rank_path(self):
    for rslora in (False, True):
      out = self.make(f"all{rslora}", 4, list(lora.MODULES), rslora=rslora)
      scale = 8.0 / (math.sqrt(4) if rslora else 4)
      weights = ref.read_model_weights(self.base)
      adapter = ref.read_safetensors(os.path.join(out, "adapter_model.safetensors"))
      merged = lora.merged_weights(weights, out)
      x = np.random.default_rng(1).standard_normal((5, 24))
      name = "model.layers.1.mlp.down_proj"
      a = adapter[f"base_model.model.{name}.lora_A.weight"]
      b = adapter[f"base_model.model.{name}.lora_B.weight"]
      # Computed the other way round: through the rank-4 bottleneck.
      expected = x @ weights[name + ".weight"].T + scale * ((x @ a.T) @ b.T)
      np.testing.assert_allclose(x @ merged[name + ".weight"].T, expected, rtol=1e-12)
      untouched = "model.embed_tokens.weight"
      self.assertIs(merged[untouched], weights[untouched])

  def test_embed_tokens_and_lm_head_merge_as_peft_applies_them(self):
    """PEFT's Embedding adds scale * (A.T[t] @ B.T) to token t's row and its
    Linear head scale * B @ (A @ h): both computed here through the
    bottleneck, against the merged weights (the head of a tied model too:
    its embedding keeps its own update)."""
    out = self.make("vocab", 3, ["embed_tokens", "lm_head", "q_proj"])
    tensors = ref.read_safetensors(os.path.join(out, "adapter_model.safetensors"))
    self.assertEqual(tensors[lora.EMBED + "A"].shape, (3, 32))
    self.assertEqual(tensors[lora.EMBED + "B"].shape, (16, 3))
    head_a = tensors["base_model.model.lm_head.lora_A.weight"]
    head_b = tensors["base_model.model.lm_head.lora_B.weight"]
    self.assertEqual((head_a.shape, head_b.shape), ((3, 16), (32, 3)))
    scale = 8.0 / 3
    model = ref.load_model(self.base)
    weights = model.weights
    merged = lora.merged_weights(weights, out)
    for t in (0, 7, 31):
      row = weights["model.embed_tokens.weight"][t] + scale * (
          tensors[lora.EMBED + "A"].T[t] @ tensors[lora.EMBED + "B"].T)
      np.testing.assert_allclose(merged["model.embed_tokens.weight"][t], row, rtol=1e-12)
    h = np.random.default_rng(2).standard_normal((4, 16))
    np.testing.assert_allclose(h @ merged["lm_head.weight"].T,
                               h @ weights["lm_head.weight"].T + scale * ((h @ head_a.T) @ head_b.T),
                               rtol=1e-12)
    self.assertEqual(len(tensors), 2 * 2 + 2 + 2)

  def test_trainable_tokens_replace_rows_as_peft_does(self):
    """PEFT's TrainableTokensLayer looks a listed token's embedding up in its
    own row and, on the head, gives that token's logit as h · row; the rest
    keep the (LoRA-merged) weights. A tied model's head takes the embedding's
    rows."""
    out = os.path.join(self._tmp.name, "tokens")
    lora.make_adapter(self.base, out, 2, 8.0, ["embed_tokens", "q_proj"], seed=5,
                      trainable_tokens={"embed_tokens": [7, 3], "lm_head": [30, 0, 7]})
    with open(os.path.join(out, "adapter_config.json")) as f:
      self.assertEqual(json.load(f)["trainable_token_indices"],
                       {"embed_tokens": [7, 3], "lm_head": [30, 0, 7]})
    tensors = ref.read_safetensors(os.path.join(out, "adapter_model.safetensors"))
    embed_rows = tensors[lora.TOKEN_ROWS["model.embed_tokens"]]
    head_rows = tensors[lora.TOKEN_ROWS["lm_head"]]
    self.assertEqual((embed_rows.shape, head_rows.shape), ((2, 16), (3, 16)))
    weights = ref.load_model(self.base).weights
    merged = lora.merged_weights(weights, out)
    lora_only = dict(merged)
    _, deltas, _ = lora.read_adapter(out)
    lora_only["model.embed_tokens.weight"] = (weights["model.embed_tokens.weight"]
                                              + 4.0 * deltas["model.embed_tokens"])
    for t, expected in ((7, embed_rows[0]), (3, embed_rows[1]), (5, lora_only[
        "model.embed_tokens.weight"][5])):
      np.testing.assert_array_equal(merged["model.embed_tokens.weight"][t], expected)
    h = np.random.default_rng(3).standard_normal((2, 16))
    logits, base_logits = h @ merged["lm_head.weight"].T, h @ weights["lm_head.weight"].T
    for column, t in enumerate((30, 0, 7)):
      np.testing.assert_allclose(logits[:, t], h @ head_rows[column], rtol=1e-12)
    np.testing.assert_array_equal(logits[:, 1:7], base_logits[:, 1:7])

    tied_base = os.path.join(self._tmp.name, "tied")
    subprocess.run([sys.executable, os.path.join(REPO, "scripts", "make_tiny_model.py"),
                    "--out", tied_base, "--tie-word-embeddings", *SMALL], check=True,
                   capture_output=True)
    tied_out = os.path.join(self._tmp.name, "tied_tokens")
    lora.make_adapter(tied_base, tied_out, 2, 8.0, ["q_proj"], seed=6, trainable_tokens=[4, 9])
    rows = ref.read_safetensors(os.path.join(tied_out, "adapter_model.safetensors"))[
        lora.TOKEN_ROWS["model.embed_tokens"]]
    tied = lora.merged_weights(ref.load_model(tied_base).weights, tied_out)
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
      np.testing.assert_array_equal(tied[name][[4, 9]], rows)

  def test_the_adapter_moves_the_logits_and_generate_runs(self):
    out = self.make("gen", 8, list(lora.MODULES))
    model = ref.load_model(self.base)
    base_logits = ref.forward(model, [1, 2, 3])
    model.weights = lora.merged_weights(model.weights, out)
    moved = np.abs(ref.forward(model, [1, 2, 3]) - base_logits).max()
    self.assertGreater(moved, 1e-3)
    self.assertLess(moved, 10.0)
    script = os.path.join(HERE, "lora_reference.py")
    result = subprocess.run([sys.executable, script, "generate", "--base", self.base,
                             "--adapter", out, "--tokens", "1,2,3", "--max-tokens", "6"],
                            check=True, capture_output=True, text=True)
    tokens = [int(t) for t in result.stdout.strip().split(",")]
    self.assertEqual(len(tokens), 6)

  def test_greedy_batch_is_greedy_decoding_of_each_merged_model(self):
    out = self.make("batch", 5, ["v_proj", "up_proj"])
    got = lora.greedy_batch(self.base, [{"adapter": out, "tokens": [1, 2]},
                                        {"tokens": [3]}], 4)
    model = ref.load_model(self.base)
    base_tokens = ref.greedy_generate(model, [3], 4, ignore_eos=True)
    model.weights = lora.merged_weights(model.weights, out)
    merged_tokens = ref.greedy_generate(model, [1, 2], 4, ignore_eos=True)
    self.assertEqual([r["tokens"] for r in got], [merged_tokens, base_tokens])
    # Each logprob is the merged model's log_softmax at the chosen token.
    row = ref.log_softmax(ref.forward(model, [1, 2])[-1])
    self.assertAlmostEqual(got[0]["logprobs"][0], row[merged_tokens[0]], places=12)
    self.assertTrue(all(lp <= 0 for r in got for lp in r["logprobs"]))


if __name__ == "__main__":
  unittest.main()
