"""Multi-LoRA serving end to end (issue 48; docs/lora.md): one real
pagoda-server with its CPU worker on a generated model, random PEFT adapters
of several ranks, dtypes and target sets (tests/reference/lora_reference.py),
--max-loras 2 under three adapters plus the base model.

- 12 concurrent OpenAI requests (completions, some streamed) mixing the base
  model and three adapters: each one's greedy tokens (return_token_ids)
  equal the float64 reference of its merged weights W + scale * B @ A;
  pagoda.v1 gRPC's lora_name gives the same tokens.
- A runtime load and an unload while requests run: nothing is lost, the new
  adapter answers exactly, an unload of an adapter a stream is using is
  refused (409) until that stream ends, and the unloaded name is then 404.
- The routes' refusals over HTTP (401 without the API key, 403 outside
  --lora-dir, 400 rank / duplicate, 404 unknown), the server serving after.
- Chat with an adapter and return_token_ids, whole and streamed."""
import json
import os
import subprocess
import sys
import tempfile
import threading
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402

_stubs = tempfile.TemporaryDirectory()
subprocess.run(["bash", os.path.join(h.REPO, "clients", "python", "generate_stubs.sh"),
                _stubs.name], check=True)
os.environ["PAGODA_CLIENT_STUBS"] = _stubs.name
sys.path.insert(0, _stubs.name)
sys.path.insert(0, os.path.join(h.REPO, "clients", "python"))
import pagoda_client  # noqa: E402

KEY = "lora-k3y"
MAX_TOKENS = 6
REFERENCE = os.path.join(h.REPO, "tests", "reference", "lora_reference.py")
# name: (rank, targets, dtype, rslora); a1..a3 at start, a4 loaded at run time.
ADAPTERS = {
    "a1": (4, "q_proj,v_proj", "f32", False),
    "a2": (8, "k_proj,o_proj,down_proj", "bf16", True),
    "a3": (13, "gate_proj,up_proj,q_proj", "f16", False),
    "a4": (6, "v_proj,down_proj", "f32", False),
}


def make_adapter(base, out, rank, targets, dtype="f32", rslora=False, seed=0,
                 trainable_tokens=""):
    subprocess.run([h.PYTHON, REFERENCE, "make", "--base", base, "--out", out, "--rank",
                    str(rank), "--alpha", "16", "--targets", targets, "--dtype", dtype,
                    "--seed", str(seed), "--trainable-tokens", trainable_tokens]
                   + (["--rslora"] if rslora else []), check=True)


def reference_tokens(base, requests):
    """Greedy tokens of each (prompt, adapter dir or None), float64 merged."""
    batch = [{"tokens": prompt, **({"adapter": adapter} if adapter else {})}
             for prompt, adapter in requests]
    out = subprocess.run([h.PYTHON, REFERENCE, "greedy-batch", "--base", base, "--requests",
                          json.dumps(batch), "--max-tokens", str(MAX_TOKENS)],
                         check=True, capture_output=True, text=True).stdout
    return [result["tokens"] for result in json.loads(out)]


def post(path, body, key=KEY, stream=False):
    """(status, parsed JSON or text) of POST `path`; a stream's chunks as a list."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(f"http://127.0.0.1:{_server.http_port}{path}",
                                     data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            text = response.read().decode()
            status = response.status
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read().decode())
    if stream:
        return status, [json.loads(line[6:]) for line in text.splitlines()
                        if line.startswith("data: {")]
    try:
        return status, json.loads(text)
    except json.JSONDecodeError:
        return status, text


def completion(model, prompt, stream=False):
    """The greedy token ids of `model` on `prompt` over /v1/completions, with
    vLLM's return_token_ids (a stream's ids joined); checks the prompt's."""
    body = {"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
            "ignore_eos": True, "return_token_ids": True, "stream": stream}
    status, answer = post("/v1/completions", body, stream=stream)
    assert status == 200, (status, answer)
    if not stream:
        assert answer["model"] == model, answer
        assert answer["choices"][0]["prompt_token_ids"] == prompt, answer
        return answer["choices"][0]["token_ids"]
    prompts = [c["choices"][0]["prompt_token_ids"] for c in answer
               if c["choices"] and c["choices"][0].get("prompt_token_ids")]
    assert prompts == [prompt], answer  # Once, in the first chunk.
    return [t for c in answer if c["choices"] for t in c["choices"][0]["token_ids"]]


def run_all(calls):
    """Runs each () -> value at once on its own thread; the values in order."""
    results = [None] * len(calls)

    def run(i):
        try:
            results[i] = calls[i]()
        except Exception as error:  # noqa: BLE001 - reported by the test
            results[i] = error
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    return results


def setUpModule():
    global _tmp, _model, _dir, _server
    _tmp = tempfile.TemporaryDirectory()
    _model = h.make_model(os.path.join(_tmp.name, "model"))
    _dir = os.path.join(_tmp.name, "adapters")
    for seed, (name, (rank, targets, dtype, rslora)) in enumerate(ADAPTERS.items()):
        make_adapter(_model, os.path.join(_dir, name), rank, targets, dtype, rslora, seed + 1)
    make_adapter(_model, os.path.join(_dir, "rank20"), 20, "q_proj")
    # PEFT's trainable tokens: within --max-lora-trainable-tokens 3, and past it.
    make_adapter(_model, os.path.join(_dir, "tokens"), 4, "q_proj", seed=9,
                 trainable_tokens="embed_tokens:9,77,12;lm_head:5,40")
    make_adapter(_model, os.path.join(_dir, "tokens4"), 4, "q_proj",
                 trainable_tokens="1,2,3,4")
    make_adapter(_model, os.path.join(_tmp.name, "outside"), 4, "q_proj")
    modules = " ".join(f"{name}={os.path.join(_dir, name)}" for name in ("a1", "a2", "a3"))
    _server = h.Server(_model, "--served-model-name", "tiny", "--http-port", "-1",
                       "--api-key", KEY, "--enable-lora", "--max-loras", "2",
                       "--max-lora-rank", "16", "--max-lora-trainable-tokens", "3",
                       "--lora-modules", modules,
                       "--lora-dir", _dir).start()


def tearDownModule():
    _server.stop()
    _tmp.cleanup()


class LoraHttpTest(unittest.TestCase):

    def test_1_mixed_adapters_equal_the_merged_reference(self):
        models = ["tiny", "a1", "a2", "a3"]
        cases = [(models[i % 4], [1, 3 + i, 40 + 7 * i, 9, 100 + i], i % 3 == 0)
                 for i in range(12)]
        expected = reference_tokens(_model, [
            (p, os.path.join(_dir, m) if m != "tiny" else None) for m, p, _ in cases])
        # Each adapter changes its answer (else the check could not fail).
        self.assertNotEqual(expected[1], reference_tokens(_model, [(cases[1][1], None)])[0])
        got = run_all([lambda m=m, p=p, s=s: completion(m, p, s) for m, p, s in cases])
        for (model, prompt, stream), tokens, want in zip(cases, got, expected):
            self.assertEqual(tokens, want, f"{model} {prompt} stream={stream}")
        with pagoda_client.Client(_server.address, api_key=KEY) as client:
            result = client.generate(token_ids=cases[2][1], lora_name="a2", temperature=0,
                                     max_tokens=MAX_TOKENS, ignore_eos=True)
            self.assertEqual(list(result.outputs[0].token_ids), expected[2])
            with self.assertRaises(pagoda_client.errors.NotFoundError):
                client.generate(token_ids=[1, 2], lora_name="nope", max_tokens=2)
        status, models_list = h_get("/v1/models")
        self.assertEqual(status, 200)
        cards = {card["id"]: card for card in models_list["data"]}
        self.assertEqual(cards["a1"]["parent"], "tiny")
        self.assertEqual(cards["a1"]["root"], os.path.realpath(os.path.join(_dir, "a1")))
        self.assertIsNone(cards["tiny"]["parent"])

    def test_2_runtime_load_and_unload_under_load_lose_nothing(self):
        prompt = [1, 77, 12, 5]
        want = dict(zip(["tiny", "a1", "a3", "a4"], reference_tokens(_model, [
            (prompt, None), (prompt, os.path.join(_dir, "a1")),
            (prompt, os.path.join(_dir, "a3")), (prompt, os.path.join(_dir, "a4"))])))
        # A long stream holds a2 while the routes change the adapters.
        holder = {}
        started = threading.Event()

        def hold_a2():
            body = {"model": "a2", "prompt": prompt, "max_tokens": 500, "ignore_eos": True,
                    "stream": True, "temperature": 0}
            request = urllib.request.Request(
                f"http://127.0.0.1:{_server.http_port}/v1/completions",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
            with urllib.request.urlopen(request, timeout=120) as response:
                response.readline()  # The first chunk: the request runs.
                started.set()
                holder["rest"] = response.read().decode()
        stream = threading.Thread(target=hold_a2)
        stream.start()
        self.assertTrue(started.wait(60))
        # Refused while the stream uses it, not deferred.
        status, refused = post("/v1/unload_lora_adapter", {"lora_name": "a2"})
        self.assertEqual(status, 409, refused)
        self.assertIn("in use", refused["error"]["message"])
        background = [lambda m=m: completion(m, prompt) for m in ("tiny", "a1", "a3") * 3]
        results = {}
        loader = threading.Thread(target=lambda: results.setdefault("bg", run_all(background)))
        loader.start()
        status, text = post("/v1/load_lora_adapter", {"lora_name": "a4", "lora_path": "a4"})
        self.assertEqual((status, text), (200, "Success: LoRA adapter 'a4' added successfully."))
        a4 = run_all([lambda: completion("a4", prompt)] * 3)
        loader.join(timeout=180)
        stream.join(timeout=180)
        self.assertIn("[DONE]", holder["rest"])
        self.assertEqual(a4, [want["a4"]] * 3)
        for (model, tokens) in zip(("tiny", "a1", "a3") * 3, results["bg"]):
            self.assertEqual(tokens, want[model], model)
        # Once the stream has ended its adapter is released and unloads.
        h.wait_for(lambda: post("/v1/unload_lora_adapter", {"lora_name": "a2"})[0] == 200, 30,
                   "a2 to unload once its stream ended")
        status, error = post("/v1/completions", {"model": "a2", "prompt": prompt})
        self.assertEqual(status, 404, error)
        self.assertEqual(error["error"]["param"], "model")
        self.assertNotIn("a2", [card["id"] for card in h_get("/v1/models")[1]["data"]])
        self.assertEqual(completion("a1", prompt), want["a1"])

    def test_3_the_routes_refuse_bad_loads_and_keep_serving(self):
        cases = [
            ({"lora_name": "x", "lora_path": "a1"}, None, 401),
            ({"lora_name": "x", "lora_path": os.path.join(_tmp.name, "outside")}, KEY, 403),
            ({"lora_name": "x", "lora_path": "../outside"}, KEY, 403),
            ({"lora_name": "x", "lora_path": "rank20"}, KEY, 400),
            ({"lora_name": "x", "lora_path": "tokens4"}, KEY, 400),
            ({"lora_name": "a1", "lora_path": "a1"}, KEY, 400),
            ({"lora_name": "bad name", "lora_path": "a1"}, KEY, 400),
            ({"lora_name": "x", "lora_path": "missing"}, KEY, 404),
        ]
        for body, key, want in cases:
            status, error = post("/v1/load_lora_adapter", body, key=key)
            self.assertEqual(status, want, (body, error))
        self.assertIn("rank", post("/v1/load_lora_adapter",
                                   {"lora_name": "x", "lora_path": "rank20"})[1]["error"]["message"])
        self.assertIn("above --max-lora-trainable-tokens 3",
                      post("/v1/load_lora_adapter",
                           {"lora_name": "x", "lora_path": "tokens4"})[1]["error"]["message"])
        self.assertEqual(post("/v1/unload_lora_adapter", {"lora_name": "nope"})[0], 404)
        self.assertEqual(post("/v1/unload_lora_adapter", {"lora_name": "a1"}, key=None)[0], 401)
        self.assertNotIn("x", [card["id"] for card in h_get("/v1/models")[1]["data"]])
        self.assertEqual(len(completion("tiny", [1, 2, 3])), MAX_TOKENS)

    def test_4_chat_returns_the_prompt_and_output_ids(self):
        """Chat with an adapter and return_token_ids, whole and streamed: the
        rendered prompt's ids beside the choices (a stream's first chunk
        only), and the output ids equal the reference run on those ids."""
        body = {"model": "a3", "messages": [{"role": "user", "content": "hello there"}],
                "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True,
                "return_token_ids": True}
        status, whole = post("/v1/chat/completions", body)
        self.assertEqual(status, 200, whole)
        prompt = whole["prompt_token_ids"]
        self.assertEqual(whole["usage"]["prompt_tokens"], len(prompt))
        want = reference_tokens(_model, [(prompt, os.path.join(_dir, "a3"))])[0]
        self.assertEqual(whole["choices"][0]["token_ids"], want)
        status, chunks = post("/v1/chat/completions", dict(body, stream=True), stream=True)
        self.assertEqual(status, 200, chunks)
        self.assertEqual([c["prompt_token_ids"] for c in chunks if "prompt_token_ids" in c],
                         [prompt])
        self.assertIn("prompt_token_ids", chunks[0])
        self.assertEqual([t for c in chunks if c["choices"] for t in c["choices"][0]["token_ids"]],
                         want)

    def test_5_trainable_tokens_follow_the_merged_reference(self):
        """An adapter with PEFT's trainable tokens (embedding rows of prompt
        tokens, head rows of candidates), loaded at run time, answers as the
        reference's merged weights do, beside the base model."""
        status, text = post("/v1/load_lora_adapter", {"lora_name": "tok", "lora_path": "tokens"})
        self.assertEqual(status, 200, text)
        prompts = [[1, 9, 77, 12], [3, 12, 40, 9, 5]]
        cases = [(model, prompt) for prompt in prompts for model in ("tok", "tiny")]
        want = reference_tokens(_model, [
            (p, os.path.join(_dir, "tokens") if m == "tok" else None) for m, p in cases])
        self.assertNotEqual(want[0], want[1])  # The rows change the answer.
        got = run_all([lambda m=m, p=p: completion(m, p) for m, p in cases])
        self.assertEqual(got, want)


def h_get(path):
    request = urllib.request.Request(f"http://127.0.0.1:{_server.http_port}{path}",
                                     headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, json.load(response)


if __name__ == "__main__":
    unittest.main()
