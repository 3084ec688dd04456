"""The Python client (clients/python) against a real pagoda-server: unary,
streaming, cancellation, typed errors, health, sync and asyncio."""
import asyncio
import os
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
