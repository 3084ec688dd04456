"""`cmake --install` yields a tree that runs the service on its own: the
server and the worker it spawns come from the prefix, the tokenizer's shim
from prefix/lib, and a request is answered. This is what the images hold."""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402


class InstallTest(unittest.TestCase):

    def test_installed_prefix_serves_alone(self):
        with tempfile.TemporaryDirectory() as tmp:
            prefix = os.path.join(tmp, "prefix")
            subprocess.run(["cmake", "--install", os.environ["PAGODA_BUILD_DIR"], "--prefix",
                            prefix], check=True, stdout=subprocess.DEVNULL)
            for path in ("bin/pagoda-server", "bin/pagoda-worker", "bin/pagoda-cli",
                         "lib/libpagoda_sentencepiece_shim.so",
                         "share/pagoda/proto/pagoda/v1/generation.proto"):
                self.assertTrue(os.path.exists(os.path.join(prefix, path)), path)
            model = h.make_model(os.path.join(tmp, "model"))
            env = {"PATH": "/usr/bin:/bin"}  # Nothing from the build tree.
            server = h.Server(model, server_binary=os.path.join(prefix, "bin", "pagoda-server"),
                              env=env)
            with server:
                worker_pid = int(subprocess.run(["pgrep", "-P", str(server.process.pid)],
                                                capture_output=True, text=True).stdout.split()[0])
                self.assertEqual(os.readlink(f"/proc/{worker_pid}/exe"),
                                 os.path.join(prefix, "bin", "pagoda-worker"))
                with open(f"/proc/{server.process.pid}/maps") as maps:
                    shims = {line.split()[-1] for line in maps if "sentencepiece_shim" in line}
                self.assertEqual(shims, {os.path.join(prefix, "lib",
                                                      "libpagoda_sentencepiece_shim.so")})
                result = subprocess.run(
                    [os.path.join(prefix, "bin", "pagoda-cli"), "--server", server.address,
                     "generate", "--prompt", "hello", "--max-tokens", "4", "--ignore-eos"],
                    capture_output=True, text=True, timeout=60, env=env)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn("finish_reason: FINISH_REASON_LENGTH", result.stdout)


if __name__ == "__main__":
    unittest.main()
