"""The CPU image built and run: scripts/build_images.sh builds it (a base made
by debootstrap, no registry), then a worker container and a server container
run the Helm chart's rendered TP-1 pod (its commands and args, ports moved to
free ones) with host networking on loopback: a connected worker, the shared
secret file, user 10001, a read-only root filesystem with a /tmp of its own,
no capabilities. The server serves over gRPC (pagoda-cli on the host) and HTTP
with the API key; the worker container is killed and started again, as the
kubelet restarts a sidecar, and requests resume. Prints the image size and
the time from starting the containers to the first token.

Skipped (exit 77) when no Docker daemon can be reached; any other error fails.
Label `image`: scripts/test.sh runs it (PAGODA_IMAGE_TEST=0 leaves it out)."""
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402

SKIP = 77
IMAGE = os.environ.get("PAGODA_IMAGE", "pagoda:0.1.0-test-cpu")
CHART = os.path.join(h.REPO, "deploy", "helm", "pagoda")
HELM = shutil.which("helm") or "/usr/local/bin/helm"
KEY = "image-test-api-key"
# Inside the containers, where the chart mounts them.
MODEL_PATH = "/models/model"
SECRET_PATH = "/etc/pagoda/worker-secret/secret"
# A bound on the image size (224 MiB measured): the runtime libraries and the
# binaries come to well under this; a compiler or headers would not.
MAX_IMAGE_BYTES = 400 * 1024 * 1024


def docker(*args, check=True, timeout=120):
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                          check=check)


def docker_unreachable_reason():
    if shutil.which("docker") is None:
        return "no docker client on the PATH"
    try:
        info = docker("info", "--format", "{{.ServerVersion}}", check=False, timeout=30)
    except subprocess.TimeoutExpired:
        return "docker info timed out"
    if info.returncode != 0 or not info.stdout.strip():
        return f"no Docker daemon: {info.stderr.strip()[:300]}"
    return None


def http(port, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:  # Not listening yet.
        return None, str(e)


class ImageTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        started = time.time()
        build = subprocess.run([os.path.join(h.REPO, "scripts", "build_images.sh")],
                               env=dict(os.environ, PAGODA_IMAGE=IMAGE,
                                        BUILD_DIR=os.environ.get("PAGODA_BUILD_DIR", "build")),
                               capture_output=True, text=True, timeout=1500)
        if build.returncode != 0:
            raise RuntimeError(f"build_images.sh failed:\n{build.stdout}\n{build.stderr}")
        cls.build_seconds = time.time() - started
        cls.model = h.make_model(os.path.join(cls.tmp.name, "model"))
        cls.secret_file = os.path.join(cls.tmp.name, "secret")
        with open(cls.secret_file, "w") as f:
            f.write(secrets.token_hex(32))
        os.chmod(cls.secret_file, 0o600)
        # The containers' user must own the files it reads, as the chart's
        # fsGroup arranges; without root here, the containers run as us.
        cls.user = "10001:10001" if os.geteuid() == 0 else f"{os.getuid()}:{os.getgid()}"
        if os.geteuid() == 0:
            os.chown(cls.secret_file, 10001, 10001)
        rendered = subprocess.run([HELM, "template", "rel", CHART, "--set", "apiKey.existingSecret=k",
                                   "--show-only", "templates/server.yaml"],
                                  capture_output=True, text=True, timeout=60, check=True).stdout
        spec = yaml.safe_load(rendered)["spec"]["template"]["spec"]
        cls.worker_container = spec["initContainers"][0]
        cls.server_container = spec["containers"][0]
        cls.ports = {p: h.free_port() for p in ("50051", "8000", "9400", "50061")}
        cls.names = {role: f"pagoda-image-test-{role}-{os.getpid()}" for role in ("worker", "server")}

    @classmethod
    def tearDownClass(cls):
        for name in cls.names.values():
            docker("rm", "-f", name, check=False)
        cls.tmp.cleanup()

    def args(self, container):
        args = []
        for arg in container["args"]:
            arg = arg.replace("0.0.0.0", "127.0.0.1").replace("$(POD_IP)", "127.0.0.1")
            arg = re.sub(r"\b(50051|8000|9400|50061)\b", lambda m: str(self.ports[m.group(1)]), arg)
            if arg.startswith("--cpu-kv-cache-space="):
                arg = "--cpu-kv-cache-space=0.05"
            args.append(arg)
        return args

    def run_container(self, role, container, env=()):
        """docker run of the chart's container, as its securityContext says."""
        security = container["securityContext"]
        self.assertTrue(security["readOnlyRootFilesystem"])
        self.assertEqual(security["capabilities"]["drop"], ["ALL"])
        argv = ["run", "-d", "--name", self.names[role], "--network", "host", "--read-only",
                "--tmpfs", "/tmp", "--user", self.user, "--cap-drop", "ALL",
                "--security-opt", "no-new-privileges",
                "-v", f"{self.model}:{MODEL_PATH}:ro", "-v", f"{self.secret_file}:{SECRET_PATH}:ro",
                "--entrypoint", container["command"][0]]
        for name, value in env:
            argv += ["-e", f"{name}={value}"]
        docker(*argv, IMAGE, *self.args(container))

    def generate(self):
        return subprocess.run([h.binary("pagoda-cli"), "--server", f"127.0.0.1:{self.ports['50051']}",
                               "generate", "--prompt", "hello", "--max-tokens", "4", "--timeout", "30"],
                              capture_output=True, text=True, env=dict(os.environ, PAGODA_API_KEY=KEY))

    def complete(self):
        return http(self.ports["8000"], "/v1/completions", {"prompt": "hello", "max_tokens": 4})

    def logs(self):
        return "\n".join(f"--- {role}:\n" + docker("logs", "--tail", "40", name, check=False).stderr
                         for role, name in self.names.items())

    def test_image_serves_and_survives_a_worker_container_restart(self):
        size = int(docker("image", "inspect", "-f", "{{.Size}}", IMAGE).stdout)
        self.assertEqual(docker("image", "inspect", "-f", "{{.Config.User}}", IMAGE).stdout.strip(),
                         "10001:10001")
        started = time.time()
        self.run_container("worker", self.worker_container)
        self.run_container("server", self.server_container, env=[("PAGODA_API_KEY", KEY)])
        try:
            h.wait_for(lambda: self.generate().returncode == 0, 120, "a first token over gRPC")
        except AssertionError:
            self.fail(self.logs())
        first_token = time.time() - started
        self.assertEqual(self.complete()[0], 200)
        self.assertEqual(http(self.ports["8000"], "/health")[0], 200)
        self.assertEqual(http(self.ports["9400"], "/metrics")[0], 200)
        # The worker's readiness probe as the kubelet runs it: inside the
        # container, against its loopback listener.
        probe = [re.sub(r"\b50061\b", str(self.ports["50061"]), arg)
                 for arg in self.worker_container["readinessProbe"]["exec"]["command"]]
        probed = docker("exec", self.names["worker"], *probe, check=False)
        self.assertEqual((probed.returncode, probed.stdout), (0, "SERVING\n"), probed.stderr)
        user = docker("exec", self.names["server"], "id", "-u").stdout.strip()
        self.assertNotEqual(user, "0")
        wrote = docker("exec", self.names["server"], "touch", "/opt/pagoda/x", check=False)
        self.assertNotEqual(wrote.returncode, 0, "the root filesystem is writable")

        docker("kill", self.names["worker"])
        h.wait_for(lambda: http(self.ports["8000"], "/health")[0] == 503, 30, "/health to say 503")
        self.assertNotEqual(self.generate().returncode, 0)
        restarted = time.time()
        docker("start", self.names["worker"])
        try:
            h.wait_for(lambda: http(self.ports["8000"], "/health")[0] == 200, 120,
                     "/health to say 200 again")
        except AssertionError:
            self.fail(self.logs())
        resumed = time.time() - restarted
        result = self.generate()
        self.assertEqual(result.returncode, 0, result.stderr)
        status, body = self.complete()
        self.assertEqual(status, 200, body)
        self.assertEqual(docker("inspect", "-f", "{{.State.Running}}",
                                self.names["server"]).stdout.strip(), "true")
        print(f"image {IMAGE}: {size} bytes ({size / 2**20:.0f} MiB); build_images.sh "
              f"{self.build_seconds:.0f} s; containers started to first token {first_token:.1f} s; "
              f"worker container restarted to serving again {resumed:.1f} s", flush=True)
        self.assertLess(size, MAX_IMAGE_BYTES)


if __name__ == "__main__":
    reason = docker_unreachable_reason()
    if reason:
        print(f"SKIP: {reason}", flush=True)
        sys.exit(SKIP)
    unittest.main()
