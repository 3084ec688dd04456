"""A server whose workers cannot be brought back exits with code 1, saying
why, so that Kubernetes restarts its pod; until then (--worker-failure-exit-
delay) it stays up, unhealthy, refusing requests with the reason. Real
processes: a spawned worker binary that keeps dying after its first start,
and a connected worker (--worker-addresses) that is killed and never comes
back. A worker that does come back is chart_wiring_test.py's and the
survival integration test's."""
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402

GIVE_UP_MESSAGE = "exiting because the workers cannot be recovered"


def http(port, path, body=None):
    """(status, body text) of GET path, or POST body as JSON."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def complete(port):
    return http(port, "/v1/completions", {"prompt": "hello", "max_tokens": 4})


class WorkerGiveUpTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = h.make_model(os.path.join(cls.tmp.name, "model"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def dying_worker_binary(self):
        """pagoda-worker the first time, then a binary that dies at once."""
        marker = os.path.join(self.tmp.name, "started_once")
        path = os.path.join(self.tmp.name, "dying-worker")
        with open(path, "w") as f:
            f.write(f"""#!/bin/sh
if [ -e {marker} ]; then echo "dying-worker: dies on purpose" >&2; exit 3; fi
touch {marker}
exec {h.binary("pagoda-worker")} "$@"
""")
        os.chmod(path, 0o755)
        return path

    def test_spawned_worker_that_keeps_dying_ends_the_server_with_exit_1(self):
        server = h.Server(self.model, "--http-port", "-1", "--metrics-port", "-1",
                          "--worker-binary", self.dying_worker_binary(),
                          "--worker-restart-limit", "2", "--worker-failure-exit-delay", "3")
        try:
            server.start()
            self.assertEqual(complete(server.http_port)[0], 200)
            os.kill(server.worker_pids[0], signal.SIGKILL)
            h.wait_for(lambda: GIVE_UP_MESSAGE in server.stderr(), 30, "the server to give up")
            gave_up = time.time()
            # Lingering: unhealthy, refusing with the reason, still scraped.
            self.assertEqual(http(server.http_port, "/health")[0], 503)
            status, body = complete(server.http_port)
            self.assertEqual(status, 503, body)
            self.assertIn("giving up", body)
            self.assertEqual(http(server.metrics_port, "/metrics")[0], 200)
            self.assertEqual(server.process.wait(timeout=30), 1)
            self.assertGreaterEqual(time.time() - gave_up, 2.5, "left before the exit delay")
            log = server.stderr()
            self.assertIn("workers failed 2 restart attempts within", log)
            self.assertIn("dies on purpose", log)
            self.assertRegex(log, r"pagoda-server: " + GIVE_UP_MESSAGE + r": .*giving up")
        finally:
            server.stop()

    def start_connected_worker(self, secret_file):
        worker = subprocess.Popen(
            [h.binary("pagoda-worker"), "--listen", "127.0.0.1:0", "--secret-file", secret_file],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = worker.stdout.readline()
        match = re.match(r"PAGODA_WORKER_LISTENING (\d+)", line)
        self.assertIsNotNone(match, line)
        return worker, f"127.0.0.1:{match.group(1)}"

    def test_connected_worker_that_never_comes_back_ends_the_server_with_exit_1(self):
        secret_file = os.path.join(self.tmp.name, "worker_secret")
        with open(secret_file, "w") as f:
            f.write(secrets.token_hex(32))
        os.chmod(secret_file, 0o600)
        worker, address = self.start_connected_worker(secret_file)
        # Each attempt waits a second for the worker; the 0.5 s window
        # forgets every attempt, so only the failures in a row end it.
        server = h.Server(self.model, "--worker-addresses", address,
                          "--worker-secret-file", secret_file, "--worker-start-timeout", "1",
                          "--worker-restart-limit", "3", "--worker-restart-window", "0.5",
                          "--worker-failure-exit-delay", "600")
        try:
            server.start()
            worker.kill()
            worker.wait()
            h.wait_for(lambda: GIVE_UP_MESSAGE in server.stderr(), 60, "the server to give up")
            log = server.stderr()
            self.assertIn("workers failed 3 restart attempts in a row", log)
            self.assertIn(f"cannot reach worker rank 0 at {address}", log)
            # A stop signal cuts the exit delay short; the exit code still
            # says the workers were lost.
            stopped = time.time()
            server.process.send_signal(signal.SIGTERM)
            self.assertEqual(server.process.wait(timeout=30), 1)
            self.assertLess(time.time() - stopped, 10)
        finally:
            server.stop()
            if worker.poll() is None:
                worker.kill()
            worker.stdout.close()

    def test_an_exit_delay_out_of_range_is_refused_at_start_up(self):
        for delay in ("-1", "601", "nan"):
            result = subprocess.run(
                [h.binary("pagoda-server"), "--model", self.model, "--port", "0",
                 "--worker-failure-exit-delay", delay],
                capture_output=True, text=True, timeout=60)
            self.assertEqual(result.returncode, 1, result.stderr)
            self.assertIn(f"--worker-failure-exit-delay {delay} is out of range: "
                          "expected [0, 600]", result.stderr)


if __name__ == "__main__":
    unittest.main()
