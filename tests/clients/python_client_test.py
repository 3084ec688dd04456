"""The Python client (clients/python) against a real pagoda-server: unary,
streaming, cancellation, typed errors, health, sync and asyncio, every
request field, and the generation_config defaults GetModelInfo reports."""
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "deploy"))
import pagoda_harness as h  # noqa: E402

_stubs = tempfile.TemporaryDirectory()
subprocess.run(["bash", os.path.join(h.REPO, "clients", "python", "generate_stubs.sh"),
                _stubs.name], check=True)
os.environ["PAGODA_CLIENT_STUBS"] = _stubs.name
sys.path.insert(0, os.path.join(h.REPO, "clients", "python"))
import pagoda_client  # noqa: E402


def setUpModule():
    global _tmp, _server
    _tmp = tempfile.TemporaryDirectory()
    model = h.make_model(os.path.join(_tmp.name, "model"))
    _server = h.Server(model, "--served-model-name", "tiny").start()


def tearDownModule():
    _server.stop()
    _tmp.cleanup()


class SyncClientTest(unittest.TestCase):

    def setUp(self):
        self.client = pagoda_client.Client(_server.address, timeout=60)

    def tearDown(self):
        self.client.close()

    def test_unary_and_stream_agree(self):
        result = self.client.generate(token_ids=[1, 5, 9], max_tokens=8, ignore_eos=True,
                                      logprobs=1)
        self.assertEqual(result.prompt_token_count, 3)
        (output,) = result.outputs
        self.assertEqual(len(output.token_ids), 8)
        self.assertEqual(output.finish_reason, "length")
        self.assertEqual(len(output.logprobs), 8)
        streamed, reasons = [], []
        for delta in self.client.stream(token_ids=[1, 5, 9], max_tokens=8, ignore_eos=True):
            streamed.extend(delta.token_ids)
            reasons.append(delta.finish_reason)
        self.assertEqual(streamed, output.token_ids)  # Greedy: the same tokens.
        self.assertEqual(reasons[-1], "length")
        self.assertTrue(all(r is None for r in reasons[:-1]))

    def test_text_prompt(self):
        result = self.client.generate("hello world", max_tokens=4, ignore_eos=True)
        self.assertIsInstance(result.outputs[0].text, str)
        self.assertGreater(result.prompt_token_count, 0)

    def test_cancel_a_stream(self):
        stream = self.client.stream(token_ids=[1, 5, 9], max_tokens=4000, ignore_eos=True)
        received = 0
        for delta in stream:
            received += len(delta.token_ids)
            if received >= 3:
                stream.cancel()
        self.assertGreaterEqual(received, 3)
        self.assertLess(received, 4000)
        # The server is still fine and frees the blocks.
        self.assertEqual(self.client.health(), "SERVING")

    def test_typed_errors(self):
        with self.assertRaises(pagoda_client.InvalidArgumentError) as caught:
            self.client.generate(token_ids=[1, 10 ** 6])
        self.assertEqual(caught.exception.code.name, "INVALID_ARGUMENT")
        self.assertTrue(caught.exception.details)
        with self.assertRaises(pagoda_client.InvalidArgumentError):
            list(self.client.stream(token_ids=[1], temperature=-1))
        # 20 ms: the CPU worker can finish a whole 512-token context in a few hundred.
        with self.assertRaises(pagoda_client.DeadlineExceededError):
            pagoda_client.Client(_server.address, timeout=0.02).generate(
                token_ids=[1], max_tokens=4000, ignore_eos=True)
        with self.assertRaises(ValueError):
            self.client.generate("text", token_ids=[1])
        with pagoda_client.Client(f"127.0.0.1:{h.free_port()}", timeout=2) as nobody:
            with self.assertRaises(pagoda_client.UnavailableError):
                nobody.health()

    def test_health_and_model_info(self):
        self.assertEqual(self.client.health(), "SERVING")
        info = self.client.model_info()
        self.assertEqual(info["model_name"], "tiny")
        self.assertEqual(info["vocab_size"], 256)


class RequestFieldsTest(unittest.TestCase):
    """Each request field reaches the server: its effect on the output where
    the tiny random model shows one, else the server's bound refusing it."""

    def setUp(self):
        self.client = pagoda_client.Client(_server.address, timeout=60)
        self.prompt = [1, 5, 9, 5, 9]

    def tearDown(self):
        self.client.close()

    def tokens(self, **params):
        result = self.client.generate(token_ids=self.prompt, max_tokens=8, ignore_eos=True,
                                      **params)
        return result.outputs[0].token_ids

    def test_n_best_of_and_beam_search(self):
        result = self.client.generate(token_ids=self.prompt, max_tokens=6, ignore_eos=True,
                                      n=3, temperature=1.0, seed=3)
        self.assertEqual(sorted(o.index for o in result.outputs), [0, 1, 2])
        result = self.client.generate(token_ids=self.prompt, max_tokens=6, ignore_eos=True,
                                      n=2, best_of=4, temperature=1.0, seed=3)
        self.assertEqual(len(result.outputs), 2)
        beams = self.client.generate(token_ids=self.prompt, max_tokens=6, ignore_eos=True,
                                     n=2, use_beam_search=True, length_penalty=1.0,
                                     early_stopping=True).outputs
        self.assertEqual(len(beams), 2)
        self.assertGreaterEqual(beams[0].cumulative_logprob, beams[1].cumulative_logprob)

    def test_logit_bias_allowed_ids_and_penalties_change_the_tokens(self):
        self.assertEqual(self.tokens(logit_bias={77: 100.0}), [77] * 8)
        self.assertLessEqual(set(self.tokens(allowed_token_ids=[7, 9])), {7, 9})
        # Every token presence-penalized by the most allowed: no token twice
        # as long as the rest of the row is not lower still.
        plain = self.tokens(logit_bias={77: 20.0})
        self.assertEqual(plain, [77] * 8)
        penalized = self.tokens(logit_bias={77: 20.0}, frequency_penalty=2.0,
                                presence_penalty=2.0, repetition_penalty=2.0)
        self.assertNotEqual(penalized, plain)
        self.assertEqual(len(self.tokens(min_p=0.5, temperature=1.0, seed=4)), 8)

    def test_out_of_bounds_fields_are_refused_by_name(self):
        for params, field in [
                ({"presence_penalty": 3.0}, "presence_penalty"),
                ({"frequency_penalty": -2.5}, "frequency_penalty"),
                ({"repetition_penalty": 5.0}, "repetition_penalty"),
                ({"min_p": 1.5}, "min_p"),
                ({"logit_bias": {3: 500.0}}, "logit_bias"),
                ({"allowed_token_ids": [10 ** 6]}, "allowed_token_ids"),
                ({"bad_words": ["x"] * 1000}, "bad_words"),
                ({"priority": 10 ** 8}, "priority"),
                ({"n": 3, "best_of": 2}, "best_of"),
                ({"stop": ["s"] * 100}, "stop"),
                ({"regex": "("}, "regex")]:
            with self.assertRaises(pagoda_client.InvalidArgumentError, msg=field) as caught:
                self.tokens(**params)
            self.assertIn(field, caught.exception.details)
        with self.assertRaises(TypeError):
            self.tokens(top_q=1)

    def test_stopping_fields(self):
        plain = self.tokens()
        self.assertEqual(self.tokens(stop_token_ids=[plain[2]]),
                         plain[:plain.index(plain[2]) + 1])
        text = self.client.generate("hello world", max_tokens=12, ignore_eos=True).outputs[0]
        stop = text.text[3:5]
        stopped = self.client.generate("hello world", max_tokens=12, ignore_eos=True,
                                       stop=[stop]).outputs[0]
        self.assertEqual(stopped.finish_reason, "stop")
        self.assertEqual(stopped.text, text.text[:text.text.index(stop)])
        kept = self.client.generate("hello world", max_tokens=12, ignore_eos=True,
                                    stop=[stop], include_stop_str_in_output=True).outputs[0]
        self.assertEqual(kept.text, text.text[:text.text.index(stop) + len(stop)])
        self.assertEqual(len(self.tokens(min_tokens=8, bad_words=["hello"])), 8)

    def test_structured_output_fields(self):
        choice = self.client.generate("pick", max_tokens=8, choice=["yes", "no"])
        self.assertIn(choice.outputs[0].text, ("yes", "no"))
        regex = self.client.generate("pick", max_tokens=8, regex="[ab]{3}")
        self.assertRegex(regex.outputs[0].text, r"^[ab]{3}$")
        # The tiny tokenizer has no "{": a schema's effect cannot show here,
        # its arrival can (a bad schema is refused by name).
        with self.assertRaises(pagoda_client.InvalidArgumentError) as caught:
            self.client.generate("json", json_schema={"type": "no such type"},
                                 disable_any_whitespace=True)
        self.assertIn("json_schema", caught.exception.details)


class GenerationDefaultsTest(unittest.TestCase):
    """A server on the same model whose generation_config.json sets sampling
    defaults: GetModelInfo reports them, and they apply to the fields a
    request leaves unset only."""

    @classmethod
    def setUpClass(cls):
        cls.model = os.path.join(_tmp.name, "model_with_defaults")
        shutil.copytree(os.path.join(_tmp.name, "model"), cls.model)
        config_path = os.path.join(cls.model, "generation_config.json")
        with open(config_path) as f:
            config = json.load(f)
        config.update(temperature=1.5, top_k=40, top_p=0.95, repetition_penalty=1.05)
        with open(config_path, "w") as f:
            json.dump(config, f)
        cls.server = h.Server(cls.model).start()
        cls.client = pagoda_client.Client(cls.server.address, timeout=60)
        cls.plain = pagoda_client.Client(_server.address, timeout=60)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.plain.close()
        cls.server.stop()

    def test_model_info_reports_the_defaults_in_force(self):
        defaults = self.client.model_info()["sampling_defaults"]
        self.assertEqual(defaults["top_k"], 40)
        self.assertAlmostEqual(defaults["temperature"], 1.5)
        self.assertAlmostEqual(defaults["top_p"], 0.95, places=6)
        self.assertAlmostEqual(defaults["repetition_penalty"], 1.05, places=6)
        self.assertNotIn("min_p", defaults)
        # The first server's model has no sampling defaults: none in force.
        defaultable = {"temperature", "top_k", "top_p", "min_p", "repetition_penalty"}
        self.assertFalse(defaultable & set(self.plain.model_info()["sampling_defaults"]))

    def test_defaults_apply_to_unset_fields_only(self):
        request = dict(token_ids=[1, 5, 9], max_tokens=16, ignore_eos=True, seed=11)
        greedy = self.plain.generate(**request).outputs[0].token_ids
        explicit = self.client.generate(temperature=0.0, repetition_penalty=1.0,
                                        **request).outputs[0].token_ids
        self.assertEqual(explicit, greedy)
        defaulted = self.client.generate(**request).outputs[0].token_ids
        self.assertNotEqual(defaulted, greedy)


class PackageBuildTest(unittest.TestCase):

    def test_setup_py_build_generates_the_stubs(self):
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([h.PYTHON, "setup.py", "-q", "build", "--build-base", tmp],
                           cwd=os.path.join(h.REPO, "clients", "python"), check=True,
                           capture_output=True)
            env = {k: v for k, v in os.environ.items() if k != "PAGODA_CLIENT_STUBS"}
            result = subprocess.run(
                [h.PYTHON, "-c", "import pagoda_client, pagoda_client._stubs as s; "
                 "print(s._stub_dir)"], cwd=os.path.join(tmp, "lib"), env=env,
                capture_output=True, text=True)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(result.stdout.strip(),
                             os.path.join(tmp, "lib", "pagoda_client", "_generated"))


class AsyncClientTest(unittest.IsolatedAsyncioTestCase):

    async def test_async_unary_stream_cancel_errors_health(self):
        async with pagoda_client.AsyncClient(_server.address, timeout=60) as client:
            self.assertEqual(await client.health(), "SERVING")
            results = await asyncio.gather(*[
                client.generate(token_ids=[1, 5, 9], max_tokens=6, ignore_eos=True)
                for _ in range(3)])
            self.assertEqual({tuple(r.outputs[0].token_ids) for r in results},
                             {tuple(results[0].outputs[0].token_ids)})
            streamed = []
            async for delta in client.stream(token_ids=[1, 5, 9], max_tokens=6, ignore_eos=True):
                streamed.extend(delta.token_ids)
            self.assertEqual(streamed, results[0].outputs[0].token_ids)

            stream = client.stream(token_ids=[1, 5, 9], max_tokens=4000, ignore_eos=True)
            received = 0
            async for delta in stream:
                received += len(delta.token_ids)
                if received >= 3:
                    stream.cancel()
            self.assertLess(received, 4000)

            with self.assertRaises(pagoda_client.InvalidArgumentError):
                await client.generate(prompt="")
            self.assertEqual((await client.model_info())["model_name"], "tiny")


if __name__ == "__main__":
    unittest.main()
