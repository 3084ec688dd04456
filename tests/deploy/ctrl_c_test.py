"""Ctrl-C at a terminal: SIGINT to the whole foreground process group. The
server, started in a process group of its own as a terminal's job is, with
a streaming completion in flight, gets SIGINT sent to that group. Its
spawned worker must not hear it (it runs in a session of its own), so the
stream finishes from the same worker, the server exits 0 after draining,
and its log has no worker restart and no error line."""
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402

MAX_TOKENS = 400


def read_markers(process, timeout):
    """The server's stdout markers (PAGODA_* NAME VALUE) up to its gRPC one."""
    markers, pending = {}, b""
    fd = process.stdout.fileno()
    deadline = time.time() + timeout
    while "PAGODA_SERVER_LISTENING" not in markers and time.time() < deadline:
        if not select.select([fd], [], [], 0.2)[0]:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if m := re.match(r"(PAGODA_\w+) (\S+)", line.decode(errors="replace")):
                markers[m.group(1)] = m.group(2)
    return markers


def process_gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie is gone for our purpose: it has exited.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


class CtrlCTest(unittest.TestCase):

    def test_sigint_to_the_process_group_drains_without_a_worker_restart(self):
        with tempfile.TemporaryDirectory() as tmp:
            model = h.make_model(os.path.join(tmp, "model"))
            stderr = open(os.path.join(tmp, "stderr"), "w+")
            server = subprocess.Popen(
                [h.binary("pagoda-server"), "--model", model, "--port", "0", "--http-port", "-1",
                 "--cpu-kv-cache-space", "0.05"],
                stdout=subprocess.PIPE, stderr=stderr, start_new_session=True)
            try:
                markers = read_markers(server, timeout=120)
                self.assertIn("PAGODA_SERVER_LISTENING", markers, stderr.name)
                worker_pid = int(markers["PAGODA_WORKER_PIDS"].split(",")[0])
                # The worker is outside the group a terminal would signal.
                self.assertNotEqual(os.getpgid(worker_pid), os.getpgid(server.pid))

                request = urllib.request.Request(
                    f"http://127.0.0.1:{markers['PAGODA_HTTP_LISTENING']}/v1/completions",
                    data=json.dumps({"prompt": "hello", "max_tokens": MAX_TOKENS,
                                     "ignore_eos": True, "stream": True}).encode(),
                    headers={"Content-Type": "application/json"})
                stream = urllib.request.urlopen(request, timeout=60)
                events = []
                for line in stream:
                    if line.startswith(b"data: "):
                        events.append(line[len(b"data: "):].strip())
                        break
                # Ctrl-C, mid-stream.
                os.killpg(server.pid, signal.SIGINT)
                for line in stream:
                    if line.startswith(b"data: "):
                        events.append(line[len(b"data: "):].strip())
                stream.close()

                self.assertEqual(events[-1], b"[DONE]")
                chunks = [json.loads(e) for e in events[:-1]]
                text = "".join(c["choices"][0]["text"] for c in chunks)
                self.assertTrue(text)
                self.assertEqual(chunks[-1]["choices"][0]["finish_reason"], "length")
                self.assertEqual(server.wait(timeout=60), 0)
                # The server stopped its worker after draining.
                h.wait_for(lambda: process_gone(worker_pid), 30, "the worker to exit")
            finally:
                if server.poll() is None:
                    server.kill()
                    server.wait()
                server.stdout.close()
            stderr.seek(0)
            log = stderr.read()
            stderr.close()
            self.assertIn("draining", log)
            for line in log.splitlines():
                with self.subTest(line=line):
                    self.assertNotRegex(line, r"(?i)restart|worker.*(failed|lost|exited)")
                    # glog's ERROR and FATAL lines start E<yyyymmdd>, F<yyyymmdd>.
                    # (Draining logs one WARNING, health NOT_SERVING.)
                    self.assertNotRegex(line, r"^[EF]\d{8} ")


if __name__ == "__main__":
    unittest.main()
