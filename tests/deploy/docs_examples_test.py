"""The commands the README and docs/ show a new user work as written.

Every `build/bin/pagoda-cli` line and every `curl` example of README.md and
docs/*.md runs against a real server (only the documented ports are replaced
by the test server's), and must exit 0 with an answer that is not an error.
The exit codes the docs promise for a client's mistakes hold, and every
binary answers --help, -h and --version."""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402

PAGES = [os.path.join(h.REPO, "README.md"), *sorted(glob.glob(os.path.join(h.REPO, "docs", "*.md")))]
DOC_GRPC = "127.0.0.1:50051"
DOC_HTTP = ("127.0.0.1:8000", "localhost:8000")


def documented_commands(prefix):
    """(page, command) for each command line starting with `prefix` in a code
    block; a curl whose quoted body spans lines is joined whole."""
    found = []
    for page in PAGES:
        with open(page) as f:
            lines = f.read().splitlines()
        i = 0
        while i < len(lines):
            text = lines[i].strip()
            if not text.startswith(prefix):
                i += 1
                continue
            command = text
            # Continued while a line ends in a backslash or a quote is open.
            while (command.endswith("\\") or command.count("'") % 2 == 1) and i + 1 < len(lines):
                i += 1
                command = command.rstrip("\\") + " " + lines[i].strip()
            found.append((os.path.relpath(page, h.REPO), command))
            i += 1
    return found


def without_comment(command):
    return re.sub(r"\s+#\s.*$", "", command)


class DocsExamplesTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        model = h.make_model(os.path.join(cls.tmp.name, "model"))
        cls.server = h.Server(model, "--http-port", "-1", "--served-model-name", "demo").start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def run_shell(self, command):
        command = command.replace("build/bin/", h.BIN_DIR + "/")
        command = command.replace(DOC_GRPC, self.server.address)
        for address in DOC_HTTP:
            command = command.replace(address, f"127.0.0.1:{self.server.http_port}")
        return subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120,
                              cwd=h.REPO)

    def test_every_documented_cli_command_exits_0(self):
        commands = documented_commands("build/bin/pagoda-cli")
        self.assertGreaterEqual(len(commands), 6)
        for page, command in commands:
            with self.subTest(page=page, command=command):
                done = self.run_shell(without_comment(command))
                self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
                self.assertTrue(done.stdout.strip(), "printed nothing")

    def test_every_documented_curl_example_answers(self):
        commands = [(page, command) for page, command in documented_commands("curl ")
                    if any(address in command for address in DOC_HTTP)]
        self.assertGreaterEqual(len(commands), 3)
        for page, command in commands:
            with self.subTest(page=page, command=command):
                done = self.run_shell(without_comment(command))
                self.assertEqual(done.returncode, 0, done.stderr)
                answer = json.loads(done.stdout)
                self.assertNotIn("error", answer, done.stdout)
                self.assertTrue(answer.get("choices") or answer.get("data"), done.stdout)

    def test_the_exit_codes_the_docs_promise(self):
        cli = h.binary("pagoda-cli")
        server = ["--server", self.server.address]
        cases = [
            # docs/api.md: errors print the status name and exit 1 ...
            ([*server, "generate", "--prompt", "hi", "--max-tokens", "-5"], 1, "INVALID_ARGUMENT"),
            ([*server, "generate"], 1, "INVALID_ARGUMENT"),
            ([*server, "generate", "--prompt", "hi", "--token-ids", "1,2"], 1, "INVALID_ARGUMENT"),
            # ... so does a flag its parser cannot read ...
            ([*server, "generate", "--prompt", "hi", "--max-tokens", "many"], 1, "many"),
            ([*server, "--no-such-flag", "info"], 1, "no-such-flag"),
            # ... a missing or unknown command, a list item that is not a
            # number and more than one structured-output flag exit 2.
            ([*server], 2, "usage"),
            ([*server, "chat"], 2, "unknown command"),
            ([*server, "generate", "--prompt", "hi", "--stop-token-ids", "1,x"], 2, "not an integer"),
            ([*server, "generate", "--prompt", "hi", "--logit-bias", "5"], 2, "TOKEN:BIAS"),
            ([*server, "generate", "--prompt", "hi", "--regex", "a", "--choice", "b"], 2, "at most one"),
        ]
        for argv, code, says in cases:
            with self.subTest(argv=argv):
                done = subprocess.run([cli, *argv], capture_output=True, text=True, timeout=60)
                self.assertEqual(done.returncode, code, done.stdout + done.stderr)
                self.assertIn(says, done.stdout + done.stderr)

    def test_every_binary_answers_help_and_version(self):
        for name in ("pagoda-server", "pagoda-worker", "pagoda-cli", "pagoda-bench"):
            for flag in ("--help", "-h", "--version"):
                with self.subTest(binary=name, flag=flag):
                    done = subprocess.run([h.binary(name), flag], capture_output=True, text=True,
                                          timeout=60)
                    self.assertEqual(done.returncode, 0, done.stderr)
                    self.assertTrue((done.stdout + done.stderr).strip())


if __name__ == "__main__":
    unittest.main()
