"""The Helm chart's pod at tensor-parallel size 1, run as processes: the
server and worker containers' rendered args and env (ports moved to free
loopback ones, the model and secret paths to temporary files) start a
pagoda-worker and a pagoda-server that serve gRPC and HTTP with the API key
from PAGODA_API_KEY, and the worker's own /metrics. Then the worker is
killed, as a crashed sidecar: the readiness signals (gRPC health, /health)
go unhealthy while the liveness probe's target (/metrics) keeps answering,
and when the worker is started again, as the kubelet restarts a sidecar,
the server serves again. And the pod with lora.* on serves its adapters."""
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402

CHART = os.path.join(h.REPO, "deploy", "helm", "pagoda")
HELM = shutil.which("helm") or "/usr/local/bin/helm"
KEY = "test-api-key"


def get(port, path, key=None):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def render_pod(*sets):
    """The TP-1 pod's worker and server containers as the chart renders them."""
    argv = [HELM, "template", "rel", CHART, "--set", "apiKey.existingSecret=k",
            "--show-only", "templates/server.yaml"]
    for item in sets:
        argv += ["--set", item]
    rendered = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    spec = yaml.safe_load(rendered)["spec"]["template"]["spec"]
    return spec["initContainers"][0], spec["containers"][0]


class ChartWiringTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = h.make_model(os.path.join(cls.tmp.name, "model"))
        cls.secret_file = os.path.join(cls.tmp.name, "secret")
        with open(cls.secret_file, "w") as f:
            f.write(secrets.token_hex(32))
        os.chmod(cls.secret_file, 0o600)
        cls.worker_container, cls.server_container = render_pod()
        cls.ports = {p: h.free_port() for p in ("50051", "8000", "9400", "50061", "9401")}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def argv(self, container):
        argv = list(container["command"])
        for arg in container["args"]:
            arg = arg.replace("/models/model", self.model)
            arg = arg.replace("/models/lora", os.path.join(self.tmp.name, "lora"))
            arg = arg.replace("/etc/pagoda/worker-secret/secret", self.secret_file)
            arg = arg.replace("0.0.0.0", "127.0.0.1").replace("$(POD_IP)", "127.0.0.1")
            arg = re.sub(r"\b(50051|8000|9400|50061|9401)\b", lambda m: str(self.ports[m.group(1)]),
                         arg)
            if arg.startswith("--cpu-kv-cache-space="):
                arg = "--cpu-kv-cache-space=0.05"
            argv.append(arg)
        argv[0] = h.binary(argv[0])
        return argv

    def start_worker(self):
        return subprocess.Popen(self.argv(self.worker_container), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

    def generate(self):
        return subprocess.run([h.binary("pagoda-cli"), "--server", f"127.0.0.1:{self.ports['50051']}",
                               "generate", "--prompt", "hello", "--max-tokens", "4", "--timeout", "30"],
                              capture_output=True, text=True, env=dict(os.environ, PAGODA_API_KEY=KEY))

    def test_pod_serves_and_survives_a_worker_crash(self):
        env = {e["name"] for e in self.server_container["env"]}
        self.assertIn("PAGODA_API_KEY", env)
        worker = self.start_worker()
        server = h.Server(self.model, env=dict(os.environ, PAGODA_API_KEY=KEY))
        server.argv = self.argv(self.server_container)
        http, metrics = self.ports["8000"], self.ports["9400"]
        try:
            server.start(timeout=120)
            self.assertEqual(self.generate().returncode, 0)
            self.assertEqual(get(http, "/v1/models", KEY), 200)
            self.assertEqual(get(http, "/v1/models"), 401)
            self.assertEqual(get(http, "/health"), 200)
            self.assertEqual(get(metrics, "/metrics"), 200)
            # The worker's own /metrics, as the chart starts it.
            self.assertEqual(get(self.ports["9401"], "/metrics"), 200)

            worker.send_signal(signal.SIGKILL)
            worker.wait()
            h.wait_for(lambda: get(http, "/health") == 503, 60, "/health to say 503")
            self.assertEqual(get(metrics, "/metrics"), 200)  # Alive: not restarted.
            self.assertNotEqual(self.generate().returncode, 0)
            self.assertIsNone(server.process.poll())

            worker = self.start_worker()
            h.wait_for(lambda: get(http, "/health") == 200, 120, "/health to say 200 again")
            self.assertEqual(self.generate().returncode, 0)
            self.assertEqual(get(metrics, "/metrics"), 200)
        finally:
            self.assertEqual(server.stop(), 0, server.stderr()[-3000:])
            worker.terminate()
            worker.wait(timeout=30)

    def test_lora_pod_serves_its_adapters(self):
        """lora.* rendered and run: the worker and server share the adapters'
        mount, the module is served by name, and a runtime load reads only
        inside the mount (docs/lora.md)."""
        lora = os.path.join(self.tmp.name, "lora")
        for name in ("sql", "chat"):
            subprocess.run([h.PYTHON, os.path.join(h.REPO, "tests", "reference", "lora_reference.py"),
                            "make", "--base", self.model, "--out", os.path.join(lora, name),
                            "--rank", "4", "--alpha", "8", "--targets", "q_proj,v_proj"],
                           check=True)
        worker_container, server_container = render_pod(
            "lora.enabled=true", "lora.maxLoras=2", "lora.modules[0].name=sql",
            "lora.modules[0].path=sql")
        worker = subprocess.Popen(self.argv(worker_container), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        server = h.Server(self.model, env=dict(os.environ, PAGODA_API_KEY=KEY))
        server.argv = self.argv(server_container)
        http = self.ports["8000"]
        try:
            server.start(timeout=120)

            def post(path, body):
                request = urllib.request.Request(
                    f"http://127.0.0.1:{http}{path}", data=json.dumps(body).encode(),
                    headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
                try:
                    with urllib.request.urlopen(request, timeout=60) as response:
                        return response.status
                except urllib.error.HTTPError as e:
                    return e.code
            completion = {"prompt": [1, 5, 9], "max_tokens": 3}
            self.assertEqual(post("/v1/completions", dict(completion, model="sql")), 200)
            self.assertEqual(post("/v1/completions", dict(completion, model="chat")), 404)
            self.assertEqual(post("/v1/load_lora_adapter", {"lora_name": "chat",
                                                            "lora_path": "chat"}), 200)
            self.assertEqual(post("/v1/completions", dict(completion, model="chat")), 200)
            self.assertEqual(post("/v1/load_lora_adapter", {"lora_name": "other",
                                                            "lora_path": self.model}), 403)
        finally:
            self.assertEqual(server.stop(), 0, server.stderr()[-3000:])
            worker.terminate()
            worker.wait(timeout=30)


if __name__ == "__main__":
    unittest.main()
