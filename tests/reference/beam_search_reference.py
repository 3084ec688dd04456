#!/usr/bin/python3
"""Float64 NumPy reference beam search over llama_reference's forward pass.

The semantics Pagoda's server implements (vLLM v0's), written independently
of the C++ code:
  * width k: every step each running beam proposes its 2k most likely next
    tokens (log_softmax of the raw logits; ties to the lower id); the 2k best
    proposals over all beams by cumulative logprob are kept;
  * a kept proposal ending in an EOS id (unless ignore_eos) becomes a finished
    hypothesis; the others, best first, continue while fewer than k do;
  * a continuing beam that reaches max_tokens (or max_model_len) finishes;
  * score = cumulative logprob / length ** length_penalty, length counting the
    prompt and the output but not a final EOS; only the best k finished
    hypotheses are kept;
  * once k are finished, the search ends if early_stopping, or if no running
    beam scores above the worst kept hypothesis;
  * the best n finished hypotheses are returned, best score first.

CLI (used by the C++ integration test):
  beam_search_reference.py --model DIR --requests FILE.json
    FILE.json: [{"tokens": [..], "width": k, "n": n, "max_tokens": N,
                 "length_penalty": 1.0, "early_stopping": false,
                 "ignore_eos": false, "max_model_len": L,
                 "stop_token_ids": [..]}, ...]
    (stop_token_ids end a hypothesis as EOS does, even with ignore_eos)
    prints a JSON list (per request) of lists of
    {"tokens": [...], "cumulative_logprob": x}.
"""

import argparse
import dataclasses
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_reference as ref  # noqa: E402


@dataclasses.dataclass
class Beam:
  tokens: list
  cumulative: float
  stopped: bool = False  # Ended by an EOS token.


def log_softmax(logits):
  shifted = logits - np.max(logits)
  return shifted - math.log(np.sum(np.exp(shifted)))


def score(beam, prompt_len, length_penalty):
  length = prompt_len + len(beam.tokens) - (1 if beam.stopped else 0)
  return beam.cumulative / (length ** length_penalty)


def top_tokens(logprobs, count):
  """Ids of the `count` largest logprobs, largest first, ties to lower id."""
  order = sorted(range(len(logprobs)), key=lambda t: (-logprobs[t], t))
  return order[:count]


def beam_search(model, prompt, width, n, max_tokens, length_penalty=1.0,
                early_stopping=False, ignore_eos=False, max_model_len=None,
                eos_ids=None, stop_token_ids=()):
  eos = set() if ignore_eos else set(model.eos_ids if eos_ids is None else eos_ids)
  eos |= set(stop_token_ids)
  max_model_len = max_model_len or 1 << 30
  by_score = lambda b: -score(b, len(prompt), length_penalty)
  running = [Beam([], 0.0)]
  finished = []
  while running:
    proposals = []
    for index, beam in enumerate(running):
      logprobs = log_softmax(ref.forward(model, list(prompt) + beam.tokens)[-1])
      for token in top_tokens(logprobs, 2 * width):
        proposals.append((beam.cumulative + logprobs[token], index, token))
    proposals.sort(key=lambda p: (-p[0], p[1], p[2]))
    next_running = []
    for cumulative, index, token in proposals[:2 * width]:
      extended = Beam(running[index].tokens + [token], cumulative)
      if token in eos:
        extended.stopped = True
        finished.append(extended)
      elif len(next_running) < width:
        next_running.append(extended)
    running = []
    for beam in next_running:
      if (len(beam.tokens) >= max_tokens or
          len(prompt) + len(beam.tokens) >= max_model_len):
        finished.append(beam)
      else:
        running.append(beam)
    finished = sorted(finished, key=by_score)[:width]
    if len(finished) >= width and running:
      worst = score(finished[-1], len(prompt), length_penalty)
      best_running = max(score(b, len(prompt), length_penalty) for b in running)
      if early_stopping or best_running <= worst:
        running = []
  return sorted(finished, key=by_score)[:n]


def main(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--model", required=True)
  parser.add_argument("--requests", required=True)
  args = parser.parse_args(argv)
  model = ref.load_model(args.model)
  with open(args.requests) as f:
    requests = json.load(f)
  results = []
  for r in requests:
    beams = beam_search(model, r["tokens"], r["width"], r.get("n", r["width"]),
                        r["max_tokens"], r.get("length_penalty", 1.0),
                        bool(r.get("early_stopping", False)),
                        bool(r.get("ignore_eos", False)), r.get("max_model_len"),
                        stop_token_ids=r.get("stop_token_ids", ()))
    results.append([{"tokens": b.tokens, "cumulative_logprob": b.cumulative}
                    for b in beams])
  print(json.dumps(results))


if __name__ == "__main__":
  main(sys.argv[1:])
