"""Self-checks of make_quantized_model.py against quantized_reference.py.

The maker packs and the reference unpacks with separate code; here the
reference's dequantized weights must lie within half a quantization step of
the dense weights the maker started from (same seed), for every format, so
a packing order that one side got wrong shows. And the formats' layouts are
checked against hand-packed words.

Run from the repo root with Debian's python (ctest does this):
  /usr/bin/python3 -m unittest discover -s tests/reference -p 'test_*.py' -v
"""

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
import quantized_reference as qref  # noqa: E402

SHAPE = ["--intermediate-size", "96", "--num-kv-heads", "2"]
FORMATS = [["--format", "awq"], ["--format", "awq", "--group-size", "-1"],
           ["--format", "gptq", "--sym"], ["--format", "gptq", "--desc-act"],
           ["--format", "gptq", "--bits", "8", "--v2"],
           ["--format", "ct"], ["--format", "ct", "--desc-act"],
           ["--format", "ct", "--bits", "8", "--group-size", "-1"]]


class QuantizedReferenceTest(unittest.TestCase):

  def test_dequantized_weights_within_half_a_step_of_dense(self):
    for flags in FORMATS:
      with self.subTest(flags=" ".join(flags)), tempfile.TemporaryDirectory() as tmp:
        dense_dir, quant_dir = os.path.join(tmp, "dense"), os.path.join(tmp, "quant")
        subprocess.run([sys.executable, os.path.join(REPO, "scripts", "make_tiny_model.py"),
                        "--out", dense_dir, "--seed", "0", "--dtype", "f32"] + SHAPE,
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([sys.executable, os.path.join(HERE, "make_quantized_model.py"),
                        "--out", quant_dir, "--seed", "0"] + flags + ["--"] + SHAPE,
                       check=True, stdout=subprocess.DEVNULL)
        dense = ref.read_model_weights(dense_dir)
        model = qref.load_model(quant_dir)
        bits = 8 if "8" in flags else 4
        checked = 0
        for name, w in dense.items():
          if not name.endswith("proj.weight"):
            continue
          deq = model.weights[name]
          self.assertEqual(deq.shape, w.shape, name)
          # A step is at most range / (2^bits - 1) of a row (f16 scales round
          # a little): the error stays under about half of one.
          step = (np.abs(w).max(axis=1, keepdims=True) * 2) / ((1 << bits) - 1)
          self.assertTrue(np.all(np.abs(deq - w) <= 0.51 * step + 1e-3), name)
          self.assertGreater(np.abs(deq).max(), 0.0, name)
          checked += 1
        self.assertEqual(checked, 2 * 7)

  def test_w8a8_and_fp8_weights_close_to_dense(self):
    # int8: within half a step (max|row| / 127) of the dense weight; E4M3:
    # within half a mantissa step (2^-4 relative) or half a subnormal step.
    with tempfile.TemporaryDirectory() as tmp:
      dense_dir = os.path.join(tmp, "dense")
      subprocess.run([sys.executable, os.path.join(REPO, "scripts", "make_tiny_model.py"),
                      "--out", dense_dir, "--seed", "0", "--dtype", "f32"] + SHAPE,
                     check=True, stdout=subprocess.DEVNULL)
      dense = ref.read_model_weights(dense_dir)
      for flags in (["--format", "ct-w8a8"], ["--format", "ct-fp8"],
                    ["--format", "ct-fp8", "--weight-strategy", "tensor"], ["--format", "fp8"]):
        with self.subTest(flags=" ".join(flags)):
          quant_dir = os.path.join(tmp, "_".join(flags))
          subprocess.run([sys.executable, os.path.join(HERE, "make_quantized_model.py"),
                          "--out", quant_dir, "--seed", "0"] + flags + ["--"] + SHAPE,
                         check=True, stdout=subprocess.DEVNULL)
          model = qref.load_model(quant_dir)
          self.assertEqual(len(model.input_quant), 2 * 7)
          per_channel = flags[1:] in (["ct-w8a8"], ["ct-fp8"])
          for name, w in dense.items():
            if not name.endswith("proj.weight"):
              continue
            deq = model.weights[name]
            amax = np.abs(w).max(axis=1, keepdims=True) if per_channel else np.abs(w).max()
            if "ct-w8a8" in flags:
              bound = 0.51 * amax / 127 + 1e-3
            else:
              bound = np.abs(w) * 2.0**-4 + amax / 448 * 2.0**-10 + 1e-7
            self.assertTrue(np.all(np.abs(deq - w) <= bound), name)

  def test_e4m3_values_and_rounding_by_hand(self):
    np.testing.assert_array_equal(qref.e4m3_value([0x00, 0x01, 0x08, 0x38, 0x7E, 0xB8, 0xFE]),
                                  [0, 2.0**-9, 2.0**-6, 1.0, 448.0, -1.0, -448.0])
    # Halfway cases go to the even mantissa; beyond 448 saturates.
    np.testing.assert_array_equal(
        qref.e4m3_round([1.0625, 1.1875, 3 * 2.0**-10, 500.0, -1e9, 0.0]),
        [1.0, 1.25, 2.0**-8, 448.0, -448.0, 0.0])
    x = np.array([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(qref.quantize_int8_rows(x)[1], [0, 0, 0])
    np.testing.assert_allclose(qref.quantize_int8_rows(x)[0], [64 / 127, -1.0, 32 / 127])
    # Per group (the weight-only formats' int8 inputs): each group of a row
    # its own scale; 2.5 with scale 1 rounds half to even.
    by_group = qref.quantize_int8_groups([0, 1, 0, 1])
    np.testing.assert_allclose(by_group(np.array([[0.5, 127.0, -1.0, 2.5]])),
                               [[64 / 127, 127.0, -1.0, 2.0]])

  def test_awq_field_order_by_hand(self):
    # Output column c = 0..7 of one input row holds code c + 1; AutoAWQ
    # puts column order[f] in field f, order = 0, 2, 4, 6, 1, 3, 5, 7.
    word = 0
    for field, column in enumerate((0, 2, 4, 6, 1, 3, 5, 7)):
      word |= (column + 1) << (4 * field)
    t = {"m.qweight": np.array([[word]]), "m.qzeros": np.array([[0]]),
         "m.scales": np.ones((1, 8))}
    w = qref.dequantize_awq(t, "m.", group_size=1)
    np.testing.assert_array_equal(w[:, 0], np.arange(1, 9))

  def test_gptq_v1_zero_stored_minus_one(self):
    # Eight outputs of 8 inputs each with codes 0..7 (packed along the
    # input), every zero point stored as 2: format gptq means 3.
    word = sum(i << (4 * i) for i in range(8))
    q = {"bits": 4, "group_size": 8, "sym": False, "desc_act": False}
    t = {"m.qweight": np.array([[word] * 8]), "m.scales": np.full((1, 8), 0.5),
         "m.qzeros": np.array([[sum(2 << (4 * f) for f in range(8))]])}
    w = qref.dequantize_gptq(t, "m.", q)
    np.testing.assert_array_equal(w[0], (np.arange(8) - 3) * 0.5)
    w2 = qref.dequantize_gptq(t, "m.", dict(q, checkpoint_format="gptq_v2"))
    np.testing.assert_array_equal(w2[0], (np.arange(8) - 2) * 0.5)


if __name__ == "__main__":
  unittest.main()
