"""pagoda-cli against a real pagoda-server: every request flag reaches the
server (its effect where the tiny random model shows one, else the server's
bound refusing it by name), several sequences print apart, streamed or not,
and the defaultable sampling fields are sent only when given."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "deploy"))
import pagoda_harness as h  # noqa: E402


def setUpModule():
    global _tmp, _server
    _tmp = tempfile.TemporaryDirectory()
    model = h.make_model(os.path.join(_tmp.name, "model"))
    _server = h.Server(model).start()


def tearDownModule():
    _server.stop()
    _tmp.cleanup()


def cli(*args, server=None):
    """pagoda-cli's (exit code, stdout, stderr)."""
    result = subprocess.run([h.binary("pagoda-cli"), "--server",
                             (server or _server).address, *args],
                            capture_output=True, text=True, timeout=60)
    return result.returncode, result.stdout, result.stderr


class Address:
    """Anything with an `address`, for cli(server=...)."""

    def __init__(self, address):
        self.address = address


def token_lines(out):
    """The "token_ids:" line of each sequence printed, as lists."""
    return [[int(t) for t in line.split(": ", 1)[1].split(",") if t]
            for line in out.splitlines() if line.startswith("token_ids:")]


BASE = ["generate", "--token-ids", "1,5,9,5,9", "--max-tokens", "8", "--ignore-eos"]


class CliTest(unittest.TestCase):

    def tokens(self, *flags):
        code, out, err = cli(*BASE, *flags)
        self.assertEqual(code, 0, err)
        (tokens,) = token_lines(out)
        return tokens

    def test_health_of_a_server_and_of_a_loopback_worker(self):
        self.assertEqual(cli("health"), (0, "SERVING\n", ""))
        # A worker on loopback (gRPC's local credentials, as the chart's
        # sidecar): its probe runs this command.
        secret = os.path.join(_tmp.name, "worker-secret")
        with open(secret, "w") as out:
            out.write(os.urandom(32).hex())
        os.chmod(secret, 0o600)
        worker = subprocess.Popen([h.binary("pagoda-worker"), "--secret-file", secret,
                                   "--listen", "127.0.0.1:0"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            port = int(worker.stdout.readline().split()[1])
            self.assertEqual(cli("--timeout", "5", "health", server=Address(f"127.0.0.1:{port}")),
                             (0, "SERVING\n", ""))
        finally:
            worker.terminate()
            worker.wait(timeout=30)
            worker.stdout.close()
        code, out, err = cli("--timeout", "2", "health", server=Address(f"127.0.0.1:{port}"))
        self.assertEqual(code, 1)
        self.assertIn("error UNAVAILABLE", err)

    def test_several_sequences_print_apart_streamed_or_not(self):
        flags = ["--n", "3", "--best-of", "4", "--temperature", "1", "--seed", "5"]
        code, whole, err = cli(*BASE, *flags)
        self.assertEqual(code, 0, err)
        self.assertEqual(re.findall(r"^sequence: (\d)$", whole, re.M), ["0", "1", "2"])
        self.assertEqual(len(token_lines(whole)), 3)
        code, streamed, err = cli(*BASE, *flags, "--stream")
        self.assertEqual(code, 0, err)
        self.assertEqual(token_lines(streamed), token_lines(whole))
        code, beams, err = cli(*BASE, "--n", "2", "--use-beam-search", "--length-penalty", "1",
                               "--early-stopping")
        self.assertEqual(code, 0, err)
        self.assertEqual(len(token_lines(beams)), 2)

    def test_logits_processing_flags_change_the_tokens(self):
        self.assertEqual(self.tokens("--logit-bias", "77:100"), [77] * 8)
        self.assertLessEqual(set(self.tokens("--allowed-token-ids", "7,9")), {7, 9})
        self.assertNotEqual(
            self.tokens("--logit-bias", "77:20", "--presence-penalty", "2",
                        "--frequency-penalty", "2", "--repetition-penalty", "2"), [77] * 8)
        plain = self.tokens()
        self.assertEqual(self.tokens("--stop-token-ids", str(plain[2]), "--min-p", "0.1",
                                     "--top-k", "5", "--top-p", "0.9", "--priority", "1",
                                     "--min-tokens", "1"),
                         plain[:plain.index(plain[2]) + 1])

    def test_text_flags(self):
        code, out, err = cli("generate", "--prompt", "hello world", "--max-tokens", "12",
                             "--ignore-eos")
        self.assertEqual(code, 0, err)
        text = out.split("\nfinish_reason:")[0]
        stop = text[3:5]
        code, out, err = cli("generate", "--prompt", "hello world", "--max-tokens", "12",
                             "--ignore-eos", "--stop", stop, "--include-stop-str-in-output",
                             "--bad-words", "zzz")
        self.assertEqual(code, 0, err)
        self.assertEqual(out.split("\nfinish_reason:")[0],
                         text[:text.index(stop) + len(stop)])
        self.assertIn("finish_reason: FINISH_REASON_STOP", out)
        code, out, err = cli("generate", "--prompt", "pick", "--max-tokens", "8",
                             "--choice", "yes,no")
        self.assertEqual(code, 0, err)
        self.assertIn(out.split("\nfinish_reason:")[0], ("yes", "no"))
        code, out, err = cli("generate", "--prompt", "pick", "--max-tokens", "8",
                             "--regex", "[ab]{3}")
        self.assertEqual(code, 0, err)
        self.assertRegex(out.split("\nfinish_reason:")[0], r"^[ab]{3}$")
        # Beam search under the constraint: two distinct beams, both in it.
        code, out, err = cli("generate", "--prompt", "pick", "--max-tokens", "8",
                             "--regex", "[ab]{3}", "--use-beam-search", "--n", "2")
        self.assertEqual(code, 0, err)
        texts = [block.split("\nfinish_reason:")[0]
                 for block in re.split(r"^sequence: \d\n", out, flags=re.M)[1:]]
        self.assertEqual(len(texts), 2, out)
        self.assertEqual(len(set(texts)), 2, out)
        for text in texts:
            self.assertRegex(text, r"^[ab]{3}$")

    def test_bad_values_are_refused(self):
        for flags, field in [
                (["--presence-penalty", "3"], "presence_penalty"),
                (["--frequency-penalty", "-3"], "frequency_penalty"),
                (["--repetition-penalty", "5"], "repetition_penalty"),
                (["--min-p", "2"], "min_p"),
                (["--logit-bias", "3:500"], "logit_bias"),
                (["--allowed-token-ids", "1000000"], "allowed_token_ids"),
                (["--priority", "100000000"], "priority"),
                (["--json-schema", '{"type": "no such type"}'], "json_schema"),
                (["--grammar", "root ::= ("], "grammar"),
                # BASE ignores EOS: refused with a constraint, beams or not.
                (["--json-object", "--disable-any-whitespace", "--use-beam-search"],
                 "ignore_eos")]:
            code, _, err = cli(*BASE, *flags)
            self.assertEqual(code, 1, field)
            self.assertIn("error INVALID_ARGUMENT", err, field)
            self.assertIn(field, err)
        for flags in (["--logit-bias", "3"], ["--allowed-token-ids", "x"],
                      ["--regex", "a", "--choice", "a"]):
            code, _, err = cli(*BASE, *flags)
            self.assertEqual(code, 2, flags)
            self.assertIn("pagoda-cli:", err)

    def test_defaultable_fields_sent_only_when_given(self):
        model = os.path.join(_tmp.name, "model_with_defaults")
        shutil.copytree(os.path.join(_tmp.name, "model"), model)
        path = os.path.join(model, "generation_config.json")
        with open(path) as f:
            config = json.load(f)
        config.update(temperature=1.5, top_k=40)
        with open(path, "w") as f:
            json.dump(config, f)
        server = h.Server(model).start()
        try:
            code, info, err = cli("info", server=server)
            self.assertEqual(code, 0, err)
            self.assertRegex(info, r"sampling_defaults \{\s*temperature: 1.5\s*top_k: 40\s*\}")
            greedy = self.tokens("--seed", "3")
            code, out, err = cli(*BASE, "--seed", "3", "--temperature", "0", server=server)
            self.assertEqual(token_lines(out), [greedy], err)
            code, out, err = cli(*BASE, "--seed", "3", server=server)
            self.assertNotEqual(token_lines(out), [greedy], err)
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main()
