"""scripts/run_demo.sh sends a gRPC stream, an HTTP completion and an HTTP chat
completion on the demo model, serves until Ctrl-C and then exits 0."""
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402


class RunDemoTest(unittest.TestCase):

    def test_ctrl_c_stops_the_demo_with_exit_0(self):
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, BUILD_DIR=os.path.dirname(h.BIN_DIR),
                       MODEL_DIR=os.path.join(tmp, "demo"), PORT=str(h.free_port()),
                       METRICS_PORT=str(h.free_port()), HTTP_PORT=str(h.free_port()))
            # Its own process group, as a terminal's foreground job is, so
            # "Ctrl-C" reaches the script and the server alike.
            demo = subprocess.Popen(["bash", os.path.join(h.REPO, "scripts", "run_demo.sh")],
                                    env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, start_new_session=True)
            output = []
            deadline = time.time() + 240
            for line in demo.stdout:
                output.append(line)
                if "Ctrl-C to stop" in line or time.time() > deadline:
                    break
            text = "".join(output)
            self.assertIn("finish_reason:", text)
            self.assertIn('"object":"text_completion"', text)
            self.assertIn('"object":"chat.completion"', text)
            self.assertIn("$ curl -s http://127.0.0.1:", text)
            os.killpg(demo.pid, signal.SIGINT)
            output.append(demo.stdout.read())
            demo.stdout.close()
            self.assertEqual(demo.wait(timeout=60), 0, "".join(output))
            self.assertIn("demo stopped", output[-1])


if __name__ == "__main__":
    unittest.main()
