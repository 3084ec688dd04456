"""pagoda_grpc_requests_total{method,code} and
pagoda_grpc_request_duration_seconds{method} on a real pagoda-server (with
--api-key): calls of pagoda.v1, of vLLM's engine API and of grpc.health.v1
that succeed, are refused (INVALID_ARGUMENT), lack the key
(UNAUTHENTICATED), are cancelled by their client, or name methods the
server does not serve (UNIMPLEMENTED, all under method="other"), each
counted once under the right labels and timed."""
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "deploy"))
import pagoda_harness as h  # noqa: E402

_stubs = tempfile.TemporaryDirectory()
subprocess.run(["bash", os.path.join(h.REPO, "clients", "python", "generate_stubs.sh"),
                _stubs.name], check=True)
subprocess.run(["protoc", "-I", os.path.join(h.REPO, "proto"), f"--python_out={_stubs.name}",
                f"--grpc_out={_stubs.name}",
                "--plugin=protoc-gen-grpc=" +
                subprocess.check_output(["which", "grpc_python_plugin"], text=True).strip(),
                "vllm/grpc/engine/vllm_engine.proto"], check=True)
sys.path.insert(0, _stubs.name)
import grpc  # noqa: E402
from pagoda.v1 import generation_pb2 as pb  # noqa: E402
from pagoda.v1 import generation_pb2_grpc as pb_grpc  # noqa: E402
from pagoda_health import health_pb2, health_pb2_grpc  # noqa: E402
from vllm.grpc.engine import vllm_engine_pb2 as vpb  # noqa: E402
from vllm.grpc.engine import vllm_engine_pb2_grpc as vpb_grpc  # noqa: E402

KEY = "s3cret"
AUTH = (("authorization", f"Bearer {KEY}"),)
WRONG = (("authorization", "Bearer nope"),)
PROMPT = [1, 15, 27, 3, 99]
SERIES = re.compile(r'^(pagoda_grpc_\w+)\{([^}]*)\} (\S+)$')


def setUpModule():
    global _tmp, _server, _channel
    _tmp = tempfile.TemporaryDirectory()
    model = h.make_model(os.path.join(_tmp.name, "model"))
    _server = h.Server(model, "--served-model-name", "tiny", "--metrics-port", "-1",
                       "--api-key", KEY).start()
    _channel = grpc.insecure_channel(_server.address)


def tearDownModule():
    _channel.close()
    _server.stop()
    _tmp.cleanup()


def grpc_series():
    """{(name, frozenset(labels)): value} of every pagoda_grpc_* sample."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{_server.metrics_port}/metrics",
                                  timeout=10).read().decode()
    series = {}
    for line in text.splitlines():
        if m := SERIES.match(line):
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            series[(m.group(1), labels)] = float(m.group(3))
    return series


def requests(before, after, method, code):
    key = ("pagoda_grpc_requests_total", frozenset({("method", method), ("code", code)}))
    return after.get(key, 0) - before.get(key, 0)


def timed(before, after, method, what="count"):
    key = (f"pagoda_grpc_request_duration_seconds_{what}", frozenset({("method", method)}))
    return after.get(key, 0) - before.get(key, 0)


def code_of(call):
    try:
        call()
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def generate_request(**stopping):
    return pb.GenerateRequest(prompt_token_ids=PROMPT, stopping=pb.StoppingCriteria(**stopping))


def vllm_request(**extra):
    return vpb.GenerateRequest(request_id="m", tokenized=vpb.TokenizedInput(input_ids=PROMPT),
                               sampling_params=vpb.SamplingParams(max_tokens=4), **extra)


class GrpcRequestMetricsTest(unittest.TestCase):

    def test_pagoda_v1_calls_by_method_and_code(self):
        stub = pb_grpc.GenerationStub(_channel)
        ok = generate_request(max_tokens=4, ignore_eos=True)
        before = grpc_series()
        for _ in range(2):
            self.assertEqual(code_of(lambda: stub.Generate(ok, metadata=AUTH, timeout=60)),
                             grpc.StatusCode.OK)
        self.assertEqual(code_of(lambda: list(stub.GenerateStream(ok, metadata=AUTH, timeout=60))),
                         grpc.StatusCode.OK)
        # A token id past the vocabulary: refused at the edge.
        bad = pb.GenerateRequest(prompt_token_ids=[10 ** 6])
        self.assertEqual(code_of(lambda: stub.Generate(bad, metadata=AUTH, timeout=60)),
                         grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(code_of(lambda: stub.Generate(ok, timeout=60)),
                         grpc.StatusCode.UNAUTHENTICATED)
        self.assertEqual(code_of(lambda: stub.GetModelInfo(pb.GetModelInfoRequest(),
                                                           metadata=WRONG, timeout=60)),
                         grpc.StatusCode.UNAUTHENTICATED)
        after = grpc_series()

        generate = "pagoda.v1.Generation/Generate"
        self.assertEqual(requests(before, after, generate, "OK"), 2)
        self.assertEqual(requests(before, after, generate, "INVALID_ARGUMENT"), 1)
        self.assertEqual(requests(before, after, generate, "UNAUTHENTICATED"), 1)
        self.assertEqual(requests(before, after, "pagoda.v1.Generation/GenerateStream", "OK"), 1)
        self.assertEqual(requests(before, after, "pagoda.v1.Generation/GetModelInfo",
                                  "UNAUTHENTICATED"), 1)
        self.assertEqual(timed(before, after, generate), 4)
        self.assertEqual(timed(before, after, "pagoda.v1.Generation/GenerateStream"), 1)
        self.assertGreater(timed(before, after, generate, "sum"), 0)

    def test_vllm_engine_and_health_calls_by_method_and_code(self):
        stub = vpb_grpc.VllmEngineStub(_channel)
        health = health_pb2_grpc.HealthStub(_channel)
        before = grpc_series()
        self.assertEqual(code_of(lambda: list(stub.Generate(vllm_request(), metadata=AUTH,
                                                            timeout=60))), grpc.StatusCode.OK)
        unsupported = vllm_request(mm_inputs=vpb.MultimodalInputs(image_data=[b"x"]))
        self.assertEqual(code_of(lambda: list(stub.Generate(unsupported, metadata=AUTH,
                                                            timeout=60))),
                         grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(code_of(lambda: list(stub.Generate(vllm_request(), timeout=60))),
                         grpc.StatusCode.UNAUTHENTICATED)
        self.assertEqual(code_of(lambda: stub.Abort(vpb.AbortRequest(request_ids=["x"]),
                                                    timeout=60)),
                         grpc.StatusCode.UNAUTHENTICATED)
        self.assertEqual(code_of(lambda: stub.HealthCheck(vpb.HealthCheckRequest(), timeout=60)),
                         grpc.StatusCode.OK)
        self.assertEqual(code_of(lambda: health.Check(health_pb2.HealthCheckRequest(),
                                                      timeout=60)), grpc.StatusCode.OK)
        after = grpc_series()

        generate = "vllm.grpc.engine.VllmEngine/Generate"
        self.assertEqual(requests(before, after, generate, "OK"), 1)
        self.assertEqual(requests(before, after, generate, "INVALID_ARGUMENT"), 1)
        self.assertEqual(requests(before, after, generate, "UNAUTHENTICATED"), 1)
        self.assertEqual(requests(before, after, "vllm.grpc.engine.VllmEngine/Abort",
                                  "UNAUTHENTICATED"), 1)
        self.assertEqual(requests(before, after, "vllm.grpc.engine.VllmEngine/HealthCheck", "OK"),
                         1)
        self.assertEqual(requests(before, after, "grpc.health.v1.Health/Check", "OK"), 1)
        self.assertEqual(timed(before, after, generate), 3)

    def test_a_cancelled_stream_is_counted_once(self):
        stub = pb_grpc.GenerationStub(_channel)
        method = "pagoda.v1.Generation/GenerateStream"
        before = grpc_series()
        stream = stub.GenerateStream(generate_request(max_tokens=100000, ignore_eos=True),
                                     metadata=AUTH, timeout=60)
        next(stream)  # Running.
        stream.cancel()
        deadline = time.time() + 10
        while timed(before, grpc_series(), method) < 1 and time.time() < deadline:
            time.sleep(0.05)
        after = grpc_series()
        self.assertEqual(timed(before, after, method), 1)
        self.assertEqual(requests(before, after, method, "CANCELLED"), 1,
                         {k: v for k, v in after.items() if method in str(k)})

    def test_methods_not_served_share_one_label(self):
        before = grpc_series()
        names = ["/pagoda.v1.Generation/NoSuchMethod", "/evil.Service/A1", "/evil.Service/A2",
                 "/x" * 100]
        for name in names:
            call = _channel.unary_unary(name, request_serializer=lambda b: b,
                                        response_deserializer=lambda b: b)
            self.assertEqual(code_of(lambda: call(b"", metadata=AUTH, timeout=10)),
                             grpc.StatusCode.UNIMPLEMENTED)
        after = grpc_series()
        self.assertEqual(requests(before, after, "other", "UNIMPLEMENTED"), len(names))
        self.assertEqual(timed(before, after, "other"), len(names))
        labels = {value for (_, series) in after for (_, value) in series}
        for name in ["NoSuchMethod", "evil", "/x/x"]:
            self.assertFalse(any(name in label for label in labels), (name, labels))


if __name__ == "__main__":
    unittest.main()
