"""Starts real pagoda-server processes (with their spawned workers) for the
Python-driven tests. Binaries come from PAGODA_BIN_DIR (ctest sets it)."""
import json
import os
import re
import select
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN_DIR = os.environ.get("PAGODA_BIN_DIR", os.path.join(REPO, "build", "bin"))
PYTHON = "/usr/bin/python3"


def binary(name):
    return os.path.join(BIN_DIR, name)


def make_model(directory, *extra):
    """A tiny random Llama with a trained tokenizer (well under a second)."""
    subprocess.run([PYTHON, os.path.join(REPO, "scripts", "make_tiny_model.py"), "--out",
                    directory, "--num-layers", "2", "--tokenizer", *extra],
                   check=True, stdout=subprocess.DEVNULL)
    return directory


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """pagoda-server on loopback; `port` and `metrics_port` once started."""

    def __init__(self, model_dir, *args, server_binary=None, env=None):
        self.argv = [server_binary or binary("pagoda-server"), "--model", model_dir,
                     "--port", "0", "--cpu-kv-cache-space", "0.05", *args]
        self.env = env
        self.process = None
        self.port = None
        self.metrics_port = None
        self.worker_pids = []
        self.kv_events_replay_endpoint = None
        self.http_port = None
        self.stderr_file = tempfile.TemporaryFile()

    def start(self, timeout=60):
        self.process = subprocess.Popen(self.argv, stdout=subprocess.PIPE,
                                        stderr=self.stderr_file, env=self.env)
        # Raw reads: a buffered readline could swallow several lines at once
        # and leave select() waiting on an empty pipe.
        fd = self.process.stdout.fileno()
        pending = b""
        deadline = time.time() + timeout
        while time.time() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if not ready:
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                text = line.decode(errors="replace")
                if m := re.match(r"PAGODA_METRICS_LISTENING (\d+)", text):
                    self.metrics_port = int(m.group(1))
                if m := re.match(r"PAGODA_WORKER_PIDS ([\d,]+)", text):
                    self.worker_pids = [int(pid) for pid in m.group(1).split(",")]
                if m := re.match(r"PAGODA_KV_EVENTS_REPLAY_ENDPOINT (\S+)", text):
                    self.kv_events_replay_endpoint = m.group(1)
                if m := re.match(r"PAGODA_HTTP_LISTENING (\d+)", text):
                    self.http_port = int(m.group(1))
                if m := re.match(r"PAGODA_SERVER_LISTENING (\d+)", text):
                    self.port = int(m.group(1))
                    return self
        error = self.stderr()
        self.stop()
        raise RuntimeError(f"pagoda-server did not start: {error}")

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def stderr(self):
        if self.stderr_file.closed:
            return ""
        self.stderr_file.seek(0)
        return self.stderr_file.read().decode(errors="replace")

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process:
            self.process.stdout.close()
        self.stderr_file.close()
        return self.process.returncode if self.process else None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def post_json(port, path, body, timeout=60):
    """POSTs `body` as JSON to 127.0.0.1:`port``path`: (status, response
    text), an HTTP error status being an answer too."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def wait_for(predicate, timeout, what):
    """Polls `predicate` every 50 ms; fails naming `what` after `timeout` s."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def scrape(port):
    """The /metrics text as {name{labels}: value} for samples without
    finished_reason, and the raw text."""
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    values = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name_and_labels, value = line.rsplit(" ", 1)
        name = name_and_labels.split("{", 1)[0]
        labels = name_and_labels[len(name):]
        if 'le="' in labels or "finished_reason" in labels:
            values[name_and_labels] = float(value)
        else:
            values[name] = float(value)
    return values, text
