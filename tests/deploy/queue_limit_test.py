"""The queue limit counts what is waiting, as vLLM's benchmark client meets it:
with fewer requests outstanding than --max-queued-requests (streamed
completions and chats over HTTP, text prompts that must be tokenized, beside
pagoda.v1 streams over gRPC) and steady turnover, nothing is refused; and the
request that finds the queue full gets 429 with Retry-After, while
vllm:num_requests_waiting reads the limit; a burst of text prompts waits for
the tokenizer threads instead of getting 429 below the limit. The limits are
scaled down (the defaults are 1,024 and 256 sequences) so that the test fits
two cores."""
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402

_stubs = tempfile.TemporaryDirectory()
subprocess.run(["bash", os.path.join(h.REPO, "clients", "python", "generate_stubs.sh"),
                _stubs.name], check=True)
os.environ["PAGODA_CLIENT_STUBS"] = _stubs.name
sys.path.insert(0, os.path.join(h.REPO, "clients", "python"))
from pagoda_client import aio as pagoda_aio  # noqa: E402
from pagoda_client import errors  # noqa: E402

LIMIT = 64          # --max-queued-requests
RUNNING = 4         # --max-num-seqs
HTTP_OUTSTANDING = 48
GRPC_OUTSTANDING = 12
# 10 s in the test command (its 30-minute budget; the outcomes line on
# stderr gives the requests turned over); the minute with
# PAGODA_QUEUE_TURNOVER_SECONDS=60.
TURNOVER_SECONDS = float(os.environ.get("PAGODA_QUEUE_TURNOVER_SECONDS", "10"))
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]


def text_prompt(rng):
    # Long enough that tokenizing and rendering take real time on the pool.
    return " ".join(rng.choice(WORDS) for _ in range(rng.randrange(8, 40)))


async def http_post(port, path, body):
    """(status, headers, body bytes) of one POST; streams are read to the end."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = json.dumps(body).encode()
    writer.write(f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split(" ")[1]), headers, rest


class QueueLimitTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        # A long context, so that the held requests below run for a minute or
        # more (4,000 tokens took seconds, and a loaded machine saw the first
        # finish before the queue was full).
        cls.model = h.make_model(os.path.join(cls.tmp.name, "model"),
                                 "--max-position-embeddings", "32768")
        cls.server = h.Server(
            cls.model, "--http-port", "-1", "--metrics-port", "-1", "--served-model-name", "tiny",
            "--max-queued-requests", str(LIMIT), "--max-num-seqs", str(RUNNING),
            "--chat-template", os.path.join(h.REPO, "tests", "chat_template",
                                            "mistral_style.jinja")).start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def waiting(self):
        values, _ = h.scrape(self.server.metrics_port)
        return values["vllm:num_requests_waiting"], values["vllm:num_requests_running"]

    def test_no_refusal_below_the_limit_with_steady_turnover(self):
        outcomes = {}
        gauges = []

        async def http_slot(slot):
            rng = random.Random(slot)
            chat = slot % 2 == 1
            deadline = time.time() + TURNOVER_SECONDS
            while time.time() < deadline:
                body = {"model": "tiny", "stream": True, "max_tokens": rng.randrange(1, 12),
                        "ignore_eos": True}
                if chat:
                    body["messages"] = [{"role": "user", "content": text_prompt(rng)}]
                    path = "/v1/chat/completions"
                else:
                    body["prompt"] = text_prompt(rng)
                    path = "/v1/completions"
                status, _, rest = await http_post(self.server.http_port, path, body)
                key = f"http {status}"
                outcomes[key] = outcomes.get(key, 0) + 1
                if status == 200:
                    self.assertIn(b"data: [DONE]", rest)
                else:
                    outcomes.setdefault("first error", rest[:300])

        async def grpc_slot(slot, client):
            rng = random.Random(1000 + slot)
            deadline = time.time() + TURNOVER_SECONDS
            while time.time() < deadline:
                try:
                    async for _ in client.stream(
                            token_ids=[rng.randrange(3, 250) for _ in range(24)],
                            max_tokens=rng.randrange(1, 12), ignore_eos=True):
                        pass
                    outcomes["grpc ok"] = outcomes.get("grpc ok", 0) + 1
                except errors.PagodaError as error:
                    key = f"grpc {error.code.name}"
                    outcomes[key] = outcomes.get(key, 0) + 1

        async def watch():
            deadline = time.time() + TURNOVER_SECONDS
            while time.time() < deadline:
                gauges.append(await asyncio.to_thread(self.waiting))
                await asyncio.sleep(0.5)

        async def run():
            async with pagoda_aio.AsyncClient(self.server.address, timeout=120) as client:
                await asyncio.gather(*[http_slot(i) for i in range(HTTP_OUTSTANDING)],
                                     *[grpc_slot(i, client) for i in range(GRPC_OUTSTANDING)],
                                     watch())

        asyncio.run(run())
        print(f"outcomes {outcomes}; most waiting {max(w for w, _ in gauges):.0f}",
              file=sys.stderr)
        refused = {k: v for k, v in outcomes.items() if k not in ("http 200", "grpc ok")}
        self.assertEqual(refused, {})
        self.assertGreater(outcomes.get("http 200", 0), HTTP_OUTSTANDING)
        self.assertGreater(outcomes.get("grpc ok", 0), GRPC_OUTSTANDING)
        # What is waiting never exceeds what is outstanding: a request that
        # finished in the step under way is still in the last snapshot's
        # running count, so only a count that kept finished or cancelled
        # requests past that could pass it.
        for waiting, _ in gauges:
            self.assertLessEqual(waiting, HTTP_OUTSTANDING + GRPC_OUTSTANDING)

    def test_a_burst_of_text_prompts_below_the_limit_waits_for_the_tokenizer(self):
        """300 text prompts at once, the limit 400: all wait for the tokenizer
        threads rather than get 429 from a pool bound of its own (it was a
        fixed 256). The prompts are longer than the context, so that each is
        answered 400 once tokenized and the engine has nothing to do."""
        model = h.make_model(os.path.join(self.tmp.name, "short"))  # 512 tokens.
        with h.Server(model, "--http-port", "-1", "--max-queued-requests", "400") as server:
            async def one(seed):
                rng = random.Random(seed)
                prompt = " ".join(rng.choice(WORDS) for _ in range(600))
                return await http_post(server.http_port, "/v1/completions",
                                       {"prompt": prompt, "max_tokens": 1, "stream": True})

            async def burst():
                return await asyncio.gather(*[one(seed) for seed in range(300)])

            statuses = {}
            for status, _, body in asyncio.run(burst()):
                statuses[status] = statuses.get(status, 0) + 1
                if status != 400:
                    statuses.setdefault("first other", body[:300])
            self.assertEqual(statuses, {400: 300})

    def test_one_past_the_limit_gets_429_with_retry_after(self):
        async def hold(count, held):
            for _ in range(count):
                reader, writer = await asyncio.open_connection("127.0.0.1",
                                                               self.server.http_port)
                data = json.dumps({"model": "tiny", "prompt": "alpha bravo", "stream": True,
                                   "max_tokens": 32000, "ignore_eos": True}).encode()
                writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: test\r\n"
                             b"Content-Type: application/json\r\n" +
                             f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
                held.append((reader, writer))

        async def run():
            held = []
            try:
                # The seats first: until the engine's next step has taken a
                # request, it counts as waiting (engine.cc), so a burst of
                # RUNNING + LIMIT at once could find the queue full early.
                await hold(RUNNING, held)
                await asyncio.to_thread(
                    h.wait_for, lambda: self.waiting() == (0, RUNNING), 60,
                    f"{RUNNING} running")
                await hold(LIMIT, held)
                await asyncio.to_thread(
                    h.wait_for, lambda: self.waiting() == (LIMIT, RUNNING), 60,
                    f"{RUNNING} running and {LIMIT} waiting")
                status, headers, body = await http_post(
                    self.server.http_port, "/v1/completions",
                    {"model": "tiny", "prompt": "alpha", "max_tokens": 1})
                self.assertEqual(status, 429, body)
                self.assertEqual(headers.get("Retry-After"), "1", headers)
                self.assertEqual(json.loads(body)["error"]["type"], "rate_limit_error")
            finally:
                for _, writer in held:
                    writer.close()
            await asyncio.to_thread(h.wait_for, lambda: self.waiting() == (0, 0), 60,
                                    "the held requests to be cancelled")

        asyncio.run(run())


if __name__ == "__main__":
    unittest.main()
