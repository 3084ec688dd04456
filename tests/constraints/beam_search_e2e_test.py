#!/usr/bin/python3
"""Beam search under structured outputs end to end, over the OpenAI HTTP API.

The structured-output suite's constraints (structured_outputs_e2e_test.py:
every JSON Schema of schema_suite.json, every regex, grammar and choice,
json_object, compact JSON) with vLLM's `use_beam_search`, at widths 2 and 4
returning every beam, on the suite's tiny random model. Every beam must end
at EOS (finish_reason "stop") and validate with the suite's own checkers
(python3-jsonschema, re.fullmatch, json, choices), except in four
constraints with an unbounded repetition that the random model's beams
extend to max_tokens; the beams of a request must differ. Width 1 must give
greedy decoding's tokens under the same constraint where EOS never competes
with text (choices, fixed-length regexes, compact JSON), and a stream must
carry the same beams. The same beams, token for token, must come back when
sequences are preempted and recomputed, when they are preempted and swapped
to the CPU, and when the worker dies mid-run and is restarted.

  beam_search_e2e_test.py   (PAGODA_BIN_DIR: the binaries)
"""

import collections
import concurrent.futures
import json
import os
import re
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "deploy"))
sys.path.insert(0, HERE)
import pagoda_harness  # noqa: E402
import structured_outputs_e2e_test as suite  # noqa: E402

MAX_TOKENS = 1000
WIDTHS = (2, 4)
# Constraints whose texts EOS can never end early: EOS is allowed only once
# the text is complete, and then alone, so one beam is greedy decoding.
GREEDY_EQUAL = ("choice", "regex phone", "regex hex_color", "regex yes_no", "compact json")
# Constraints with an unbounded repetition (letters, digits, words, SQL
# clauses) that this random model's beams keep extending: most of their
# beams end at max_tokens, unfinished, as vLLM's would. Every other beam
# must end at EOS.
UNBOUNDED = ("pattern_code", "regex escapes", "regex whitespace", "grammar sql_select")


def post(port, body):
  """The response, retried while the workers restart (503), as the suite."""
  response = suite.post(port, body)
  for _ in range(100):
    if "error" not in response or '"code":503' not in response["error"]:
      break
    time.sleep(0.1)
    response = suite.post(port, body)
  return response


def run_beams(port, index, case, width):
  """(key, [(finish_reason, text, tokens)], failures) of one beam request."""
  name, fields, validate, _ = case
  key = f"{name} /{width}"
  body = {"prompt": "Answer:", "max_tokens": MAX_TOKENS, "use_beam_search": True,
          "best_of": width, "n": width, "logprobs": 1, "seed": 1000 + index, **fields}
  response = post(port, body)
  if "error" in response:
    return key, [], [f"{key}: refused: {response['error']}"]
  beams, failures = [], []
  for choice in response["choices"]:
    logprobs = choice["logprobs"]
    beams.append((choice["finish_reason"], choice["text"], logprobs["tokens"],
                  logprobs["token_logprobs"]))
    if choice["finish_reason"] == "length" and name in UNBOUNDED:
      continue
    if choice["finish_reason"] != "stop":
      failures.append(f"{key}: ended at {choice['finish_reason']} after {MAX_TOKENS} tokens")
    elif problem := validate(choice["text"]):
      failures.append(f"{key}: {choice['text']!r}: {problem}")
  # Beams are token sequences (a text may come back under two
  # tokenizations), told apart here by their token strings and logprobs.
  sequences = [(tuple(tokens), tuple(logprobs)) for _, _, tokens, logprobs in beams]
  if len(set(sequences)) != len(sequences):
    failures.append(f"{key}: beams repeat a token sequence: {[s[0] for s in sequences]}")
  if not 1 <= len(beams) <= width:
    failures.append(f"{key}: {len(beams)} beams")
  return key, beams, failures


def run_greedy_pair(port, case):
  """Failures if width 1 differs from greedy decoding under `case`."""
  name, fields, _, _ = case
  base = {"prompt": "Answer:", "max_tokens": MAX_TOKENS, "logprobs": 1, **fields}
  greedy = post(port, {**base, "temperature": 0})
  beam = post(port, {**base, "use_beam_search": True, "best_of": 1})
  if "error" in greedy or "error" in beam:
    return [f"{name} greedy/width 1: refused: {greedy.get('error')} {beam.get('error')}"]
  ours, theirs = beam["choices"][0], greedy["choices"][0]
  if (ours["text"], ours["logprobs"]["tokens"]) != (theirs["text"], theirs["logprobs"]["tokens"]):
    return [f"{name}: width 1 gave {ours['text']!r}, greedy {theirs['text']!r}"]
  return []


def watch_swapped(port, done, seen):
  """Appends pagoda_num_requests_swapped every 50 ms until `done` is set:
  the gauge shows a swap that no counter records."""
  while not done.wait(0.05):
    _, text = pagoda_harness.scrape(port)
    seen.append(counter(text, "pagoda_num_requests_swapped"))


def streamed_texts(port, body):
  """The texts of a streamed completion, by choice index."""
  request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                   data=json.dumps({**body, "stream": True}).encode(),
                                   headers={"Content-Type": "application/json"})
  texts = collections.defaultdict(str)
  with urllib.request.urlopen(request, timeout=600) as response:
    for line in response.read().decode().splitlines():
      if line.startswith("data: {"):
        for choice in json.loads(line[len("data: "):])["choices"]:
          texts[choice["index"]] += choice["text"]
  return [texts[i] for i in sorted(texts)]


def run_streamed(port, case):
  """Failures if a streamed beam request's texts differ from a whole one's
  (beams stream at the end, all at once)."""
  name, fields, _, _ = case
  body = {"prompt": "Answer:", "max_tokens": MAX_TOKENS, "use_beam_search": True, "n": 2,
          **fields}
  whole = post(port, body)
  if "error" in whole:
    return [f"{name} streamed: refused: {whole['error']}"]
  expected = [choice["text"] for choice in whole["choices"]]
  streamed = streamed_texts(port, body)
  return [] if streamed == expected else [f"{name}: streamed {streamed}, whole {expected}"]


def run_phase(model, label, server_args, env=None):
  """Every case at every width on a fresh server: {key: beams}, failures,
  the metrics' text, and the most requests seen swapped out at once."""
  cases = suite.cases()
  args = ["--http-port", "-1", "--metrics-port", "-1", "--max-num-seqs", "64", *server_args]
  with pagoda_harness.Server(model, *args, env=env) as server:
    outputs, failures, swapped = {}, [], [0]
    done = threading.Event()
    watcher = threading.Thread(target=watch_swapped, args=(server.metrics_port, done, swapped))
    watcher.start()
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
      futures = [pool.submit(run_beams, server.http_port, i, c, w)
                 for i, c in enumerate(cases) for w in WIDTHS]
      if label == "plain":
        futures += [pool.submit(check, server.http_port, c)
                    for check in (run_greedy_pair, run_streamed)
                    for c in cases if c[0].startswith(GREEDY_EQUAL)]
      for future in futures:
        result = future.result()
        if isinstance(result, list):
          failures += [f"[{label}] {p}" for p in result]
          continue
        key, beams, problems = result
        outputs[key] = beams
        failures += [f"[{label}] {p}" for p in problems]
    done.set()
    watcher.join()
    _, metrics = pagoda_harness.scrape(server.metrics_port)
  return outputs, failures, metrics, max(swapped)


def counter(metrics, name):
  """The first sample of `name` in the /metrics text, 0 if none."""
  match = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", metrics, re.M)
  return int(float(match.group(1))) if match else 0


def main():
  started = time.time()
  with tempfile.TemporaryDirectory() as tmp:
    model = pagoda_harness.make_model(os.path.join(tmp, "model"), "--vocab-size", "512",
                                      "--max-position-embeddings", str(MAX_TOKENS + 64))
    plain, failures, _, _ = run_phase(model, "plain", [])
    runs = {}
    # 200 blocks of 16 tokens for 194 requests of up to 4 beams: the
    # scheduler preempts the latest groups and recomputes or swaps them.
    small = ["--num-gpu-blocks-override", "200"]
    for label, args in (("recompute", [*small, "--preemption-mode", "recompute"]),
                        ("swap", [*small, "--preemption-mode", "swap", "--swap-space", "0.5"])):
      runs[label], found, metrics, swapped = run_phase(model, label, args)
      failures += found
      preemptions = counter(metrics, "pagoda_num_preemptions_total")
      print(f"[{label}] {preemptions} preemptions, at most {swapped} requests swapped out at once")
      if preemptions == 0 or (label == "swap") != (swapped > 0):
        failures.append(f"[{label}] the {label} path went untested")
    # The worker dies at its 300th step, with every request submitted.
    env = dict(os.environ, PAGODA_TEST_FAULT_RANK="0", PAGODA_TEST_FAULT_STEP="300",
               PAGODA_TEST_FAULT_MARKER=os.path.join(tmp, "fault-once"))
    runs["recovered"], found, metrics, _ = run_phase(
        model, "recovered",
        ["--worker-binary", pagoda_harness.binary("pagoda-worker-fault-injecting")], env=env)
    failures += found
    if (not os.path.exists(os.path.join(tmp, "fault-once")) or
        counter(metrics, "pagoda_worker_recovery_seconds_count") == 0):
      failures.append("[recovered] the worker never failed and recovered")
  # Tokens, not logprobs: a recomputed prefill rounds differently from the
  # decode steps it replaces.
  tokens_of = lambda beams: [beam[:3] for beam in beams]
  for label, outputs in runs.items():
    for key, beams in plain.items():
      if tokens_of(outputs.get(key, [])) != tokens_of(beams):
        failures.append(f"[{label}] {key}: beams differ from the run without it")
  finish = collections.Counter(beam[0] for beams in plain.values() for beam in beams)
  print(f"{len(plain)} beam requests per run ({len(plain) // len(WIDTHS)} constraints x widths "
        f"{WIDTHS}): {sum(finish.values())} beams, {finish['stop']} ended at EOS, "
        f"{finish['length']} at max_tokens ({MAX_TOKENS}, in {len(UNBOUNDED)} constraints with an "
        f"unbounded repetition); runs compared: {', '.join(runs)}; "
        f"{time.time() - started:.0f} s")
  for failure in failures[:40]:
    print(failure)
  print(f"{len(failures)} failures")
  return 1 if failures else 0


if __name__ == "__main__":
  sys.exit(main())
