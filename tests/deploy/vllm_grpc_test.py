"""vLLM's engine gRPC API (vllm.grpc.engine.VllmEngine) on a real server,
driven by a client generated from proto/vllm/grpc/engine/vllm_engine.proto:
a file written for Pagoda from the field table vLLM publishes for its own
vllm_engine.proto (plus SMG's logprob and index fields), so the package,
message and field numbers on the wire are vLLM's; no file of vLLM's was
fetched. Greedy tokens equal pagoda.v1's; unsupported fields are refused
with INVALID_ARGUMENT naming them; Abort and client cancel end requests."""
import os
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
subprocess.run(["protoc", "-I", os.path.join(h.REPO, "proto"), f"--python_out={_stubs.name}",
                f"--grpc_out={_stubs.name}",
                f"--plugin=protoc-gen-grpc={subprocess.check_output(['which', 'grpc_python_plugin'], text=True).strip()}",
                "vllm/grpc/engine/vllm_engine.proto"], check=True)
os.environ["PAGODA_CLIENT_STUBS"] = _stubs.name
sys.path.insert(0, _stubs.name)
sys.path.insert(0, os.path.join(h.REPO, "clients", "python"))
import grpc  # noqa: E402
import pagoda_client  # noqa: E402
from vllm.grpc.engine import vllm_engine_pb2 as pb  # noqa: E402
from vllm.grpc.engine import vllm_engine_pb2_grpc as pb_grpc  # noqa: E402

PROMPT = [1, 15, 27, 3, 99, 42, 7]


def setUpModule():
    global _tmp, _server, _channel, _stub, _client
    _tmp = tempfile.TemporaryDirectory()
    model = h.make_model(os.path.join(_tmp.name, "model"))
    _server = h.Server(model, "--served-model-name", "tiny", "--metrics-port", "-1").start()
    _channel = grpc.insecure_channel(_server.address)
    _stub = pb_grpc.VllmEngineStub(_channel)
    _client = pagoda_client.Client(_server.address, timeout=60)


def tearDownModule():
    _client.close()
    _channel.close()
    _server.stop()
    _tmp.cleanup()


def generate(request_id, stream, **sampling):
    request = pb.GenerateRequest(request_id=request_id, stream=stream,
                                 tokenized=pb.TokenizedInput(input_ids=PROMPT),
                                 sampling_params=pb.SamplingParams(**sampling))
    return list(_stub.Generate(request, timeout=60))


def tokens_by_index(responses):
    """Every sequence's tokens and finish reason as a router reads a stream:
    with chunks, the tokens are the chunks' (a complete repeats the delta of
    the chunk just before it, so it adds none); without, the complete's."""
    tokens, finish, last_chunk = {}, {}, {}
    for response in responses:
        kind = response.WhichOneof("response")
        part = getattr(response, kind)
        assert part.index not in finish, "a message after the sequence's complete"
        if kind == "chunk":
            tokens.setdefault(part.index, []).extend(part.token_ids)
            last_chunk[part.index] = list(part.token_ids)
            continue
        finish[part.index] = part.finish_reason
        if part.index in last_chunk:
            assert list(part.output_ids) == last_chunk[part.index], (
                "a streamed complete must repeat the last chunk's delta")
        else:
            tokens.setdefault(part.index, []).extend(part.output_ids)
    return tokens, finish


def success_count(reason):
    """pagoda_request_success_total for `reason`, summed over its series."""
    values, _ = h.scrape(_server.metrics_port)
    return sum(v for k, v in values.items()
               if k.startswith("pagoda_request_success_total{")
               and f'finished_reason="{reason}"' in k)


class VllmGrpcTest(unittest.TestCase):

    def test_greedy_tokens_equal_pagoda_v1(self):
        expected = _client.generate(token_ids=PROMPT, max_tokens=24, temperature=0,
                                    ignore_eos=True)
        expected_tokens = list(expected.outputs[0].token_ids)
        self.assertEqual(len(expected_tokens), 24)
        for stream in (True, False):
            with self.subTest(stream=stream):
                responses = generate(f"greedy-{stream}", stream, temperature=0, max_tokens=24,
                                     ignore_eos=True)
                tokens, finish = tokens_by_index(responses)
                self.assertEqual(tokens, {0: expected_tokens})
                self.assertEqual(finish, {0: "length"})
                kinds = [r.WhichOneof("response") for r in responses]
                self.assertEqual(kinds[-1], "complete")
                if stream:
                    # vLLM's servicer: a chunk per delta, the last included,
                    # then the complete.
                    self.assertEqual(kinds, ["chunk"] * (len(kinds) - 1) + ["complete"])
                    self.assertEqual(sum(len(r.chunk.token_ids) for r in responses[:-1]), 24)
                else:
                    self.assertEqual(kinds, ["complete"])
                complete = responses[-1].complete
                self.assertEqual(complete.prompt_tokens, len(PROMPT))
                self.assertEqual(complete.completion_tokens, 24)

    def test_cached_tokens_are_the_prefix_cache_hits(self):
        """cached_tokens, as vLLM's num_cached_tokens: 0 for a prompt seen
        first, then its full 16-token blocks before the last token."""
        prompt = list(range(100, 140))  # 40 tokens: 2 full blocks before the last.
        for attempt, cached in ((0, 0), (1, 32)):
            request = pb.GenerateRequest(
                request_id=f"cached-{attempt}", stream=True,
                tokenized=pb.TokenizedInput(input_ids=prompt),
                sampling_params=pb.SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
            responses = list(_stub.Generate(request, timeout=60))
            with self.subTest(attempt=attempt):
                self.assertEqual(responses[-1].complete.cached_tokens, cached)
                self.assertEqual({r.chunk.cached_tokens for r in responses[:-1]}, {cached})

    def test_text_prompt_n_seed_and_logprobs(self):
        request = pb.GenerateRequest(
            request_id="text-n", stream=True, text="Hello there",
            sampling_params=pb.SamplingParams(temperature=0.8, seed=5, n=2, max_tokens=6,
                                              ignore_eos=True, logprobs=2))
        responses = list(_stub.Generate(request, timeout=60))
        tokens, finish = tokens_by_index(responses)
        self.assertEqual(sorted(tokens), [0, 1])
        self.assertEqual(finish, {0: "length", 1: "length"})
        for index in (0, 1):
            self.assertEqual(len(tokens[index]), 6)
        logprob_tokens = []
        for response in responses:
            if response.WhichOneof("response") != "chunk" or response.chunk.index != 0:
                continue
            part = response.chunk
            lp = part.output_logprobs
            self.assertEqual(len(lp.token_logprobs), len(lp.token_ids))
            for top in lp.top_logprobs:
                self.assertEqual(len(top.values), 2)
            logprob_tokens.extend(lp.token_ids)
        self.assertEqual(logprob_tokens, tokens[0])
        # The same seed again: the same tokens (sampling is keyed on the seed).
        again, _ = tokens_by_index(list(_stub.Generate(request, timeout=60)))
        self.assertEqual(again, tokens)

    def test_n_streams_carry_their_index_chunk_then_complete(self):
        request = pb.GenerateRequest(
            request_id="n3", stream=True, tokenized=pb.TokenizedInput(input_ids=PROMPT),
            sampling_params=pb.SamplingParams(temperature=1.0, seed=9, n=3, max_tokens=5,
                                              ignore_eos=True))
        responses = list(_stub.Generate(request, timeout=60))
        tokens, finish = tokens_by_index(responses)
        self.assertEqual({i: len(t) for i, t in tokens.items()}, {0: 5, 1: 5, 2: 5})
        self.assertEqual(finish, {0: "length", 1: "length", 2: "length"})
        # Each sequence's complete comes right after that sequence's last chunk.
        for position, response in enumerate(responses):
            if response.WhichOneof("response") == "complete":
                previous = [r.chunk for r in responses[:position] if r.HasField("chunk")
                            and r.chunk.index == response.complete.index]
                self.assertTrue(previous)
                self.assertEqual(list(previous[-1].token_ids), list(response.complete.output_ids))

    def test_stop_string_ends_with_stop_in_the_stream_and_the_metrics(self):
        text = _client.generate(token_ids=PROMPT, max_tokens=24, temperature=0,
                                ignore_eos=True).outputs[0].text
        stop = text[4:8]
        self.assertEqual(len(stop), 4, text)
        before_stop, before_abort = success_count("stop"), success_count("abort")
        responses = generate("stop-string", True, temperature=0, max_tokens=24,
                             ignore_eos=True, stop=[stop])
        # The engine counts the request by the reason the client sees.
        h.wait_for(lambda: success_count("stop") + success_count("abort")
                   > before_stop + before_abort, 10, "the request counted as finished")
        self.assertEqual((success_count("stop"), success_count("abort")),
                         (before_stop + 1, before_abort))
        tokens, finish = tokens_by_index(responses)
        self.assertEqual(finish, {0: "stop"})
        self.assertLess(len(tokens[0]), 24)

    def test_unsupported_fields_are_invalid_argument_naming_them(self):
        cases = {
            "sampling_params.json_schema": dict(sampling_params=pb.SamplingParams(
                json_schema="{}")),
            "sampling_params.prompt_logprobs": dict(sampling_params=pb.SamplingParams(
                prompt_logprobs=1)),
            "sampling_params.truncate_prompt_tokens": dict(sampling_params=pb.SamplingParams(
                truncate_prompt_tokens=3)),
            "mm_inputs": dict(mm_inputs=pb.MultimodalInputs(image_data=[b"x"])),
        }
        for field, extra in cases.items():
            with self.subTest(field=field):
                request = pb.GenerateRequest(request_id="bad",
                                             tokenized=pb.TokenizedInput(input_ids=PROMPT),
                                             **extra)
                with self.assertRaises(grpc.RpcError) as raised:
                    list(_stub.Generate(request, timeout=30))
                self.assertEqual(raised.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertTrue(raised.exception.details().startswith(field + ":"),
                                raised.exception.details())

    def test_info_and_health(self):
        info = _stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
        self.assertEqual(info.model_path, "tiny")
        self.assertTrue(info.is_generation)
        self.assertGreater(info.max_context_length, 0)
        self.assertEqual(info.vocab_size, _client.model_info()["vocab_size"])
        health = _stub.HealthCheck(pb.HealthCheckRequest(), timeout=10)
        self.assertTrue(health.healthy)
        server = _stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=10)
        self.assertEqual(server.server_type, "vllm-grpc")
        self.assertFalse(server.is_paused)
        self.assertGreater(server.uptime_seconds, 0)

    def wait_idle(self):
        deadline = time.time() + 10
        while time.time() < deadline:
            if _stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=10).active_requests == 0:
                return
            time.sleep(0.05)
        self.fail("requests still active")

    def test_abort_ends_the_stream_with_finish_reason_abort(self):
        request = pb.GenerateRequest(request_id="long", stream=True,
                                     tokenized=pb.TokenizedInput(input_ids=PROMPT),
                                     sampling_params=pb.SamplingParams(
                                         temperature=0, max_tokens=100000, ignore_eos=True))
        responses = []
        stream = _stub.Generate(request, timeout=60)
        first = next(stream)
        responses.append(first)
        _stub.Abort(pb.AbortRequest(request_ids=["long"]), timeout=10)
        responses.extend(stream)
        _, finish = tokens_by_index(responses)
        self.assertEqual(finish, {0: "abort"})
        self.wait_idle()

    def test_client_cancel_aborts_the_request(self):
        request = pb.GenerateRequest(request_id="cancel", stream=True,
                                     tokenized=pb.TokenizedInput(input_ids=PROMPT),
                                     sampling_params=pb.SamplingParams(
                                         temperature=0, max_tokens=100000, ignore_eos=True))
        stream = _stub.Generate(request, timeout=60)
        next(stream)
        stream.cancel()
        self.wait_idle()


if __name__ == "__main__":
    unittest.main()
