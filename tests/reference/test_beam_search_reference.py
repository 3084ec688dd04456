"""Self-checks of the NumPy reference beam search (beam_search_reference.py)."""

import math
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import beam_search_reference as beam  # noqa: E402
import llama_reference as ref  # noqa: E402


class BeamSearchReferenceTest(unittest.TestCase):

  @classmethod
  def setUpClass(cls):
    cls._tmp = tempfile.TemporaryDirectory()
    out = os.path.join(cls._tmp.name, "m")
    subprocess.run([sys.executable, os.path.join(REPO, "scripts", "make_tiny_model.py"),
                    "--out", out, "--vocab-size", "32", "--hidden-size", "16",
                    "--intermediate-size", "24", "--num-layers", "2", "--num-heads", "4",
                    "--num-kv-heads", "2", "--eos-id", "2"],
                   check=True, capture_output=True)
    cls.model = ref.load_model(out)

  @classmethod
  def tearDownClass(cls):
    cls._tmp.cleanup()

  def test_width_one_is_greedy(self):
    prompt = [5, 9, 11]
    beams = beam.beam_search(self.model, prompt, 1, 1, 6, ignore_eos=True)
    self.assertEqual(beams[0].tokens,
                     ref.greedy_generate(self.model, prompt, 6, ignore_eos=True))

  def test_cumulative_logprob_is_the_sum_along_the_tokens(self):
    prompt = [3, 4, 5, 6]
    for result in beam.beam_search(self.model, prompt, 3, 3, 5, ignore_eos=True):
      tokens = list(prompt)
      total = 0.0
      for token in result.tokens:
        total += beam.log_softmax(ref.forward(self.model, tokens)[-1])[token]
        tokens.append(token)
      self.assertAlmostEqual(result.cumulative, total, places=9)

  def test_results_are_distinct_and_in_score_order(self):
    prompt = [7, 8]
    results = beam.beam_search(self.model, prompt, 4, 4, 5, length_penalty=0.5)
    scores = [beam.score(b, len(prompt), 0.5) for b in results]
    self.assertEqual(scores, sorted(scores, reverse=True))
    self.assertEqual(len({tuple(b.tokens) for b in results}), len(results))


if __name__ == "__main__":
  unittest.main()
