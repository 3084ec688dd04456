"""Every numeric flag of pagoda-server's --help, given a value out of its
range, is refused in one line naming the flag, the value and the allowed
range, with exit code 1, before any worker is spawned; --help prints the
flags by group; docs/configuration.md lists every flag with --help's default,
and the range it states for each is the one the server enforces. The same
for pagoda-worker's flags: each refused in one line before the worker reads
its secret or listens, and its --help by group."""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402

DOC_ROW = re.compile(r"^\| `--([a-z0-9-]+)` \| `([^`]*)` \| ([^|]*) \|")
DOC_RANGE = re.compile(r"^(-?[0-9.]+) to (-?[0-9.]+)$")
FLAG_LINE = re.compile(r"^  --([a-z0-9-]+)  .*\(default: ([^)]*)\)$")
NUMBER = re.compile(r"^-?[0-9]+(\.[0-9]+)?$")
# Flags for which every value of their type is valid.
UNBOUNDED = {"seed"}
OUT_OF_RANGE = ("-5", "99999999")


def server_help():
    return subprocess.run([h.binary("pagoda-server"), "--help"], capture_output=True, text=True,
                          timeout=30, check=True).stdout


def numeric_flags(help_text):
    flags = []
    for line in help_text.splitlines():
        match = FLAG_LINE.match(line)
        if match and NUMBER.match(match.group(2)) and match.group(1) not in UNBOUNDED:
            flags.append(match.group(1))
    return flags


def help_defaults(help_text):
    return {m.group(1): m.group(2) for m in map(FLAG_LINE.match, help_text.splitlines()) if m}


def documented_flags():
    with open(os.path.join(h.REPO, "docs", "configuration.md")) as f:
        rows = [DOC_ROW.match(line) for line in f]
    return {m.group(1): (m.group(2), m.group(3).strip()) for m in rows if m}


class FlagsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = h.make_model(os.path.join(cls.tmp.name, "tiny"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def refuse(self, flag, value):
        result = subprocess.run(
            [h.binary("pagoda-server"), "--model", self.model, "--port", "0",
             f"--{flag}={value}"], capture_output=True, text=True, timeout=60)
        lines = result.stderr.strip().splitlines()
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertNotIn("PAGODA_WORKER_PIDS", result.stdout)
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertTrue(lines[0].startswith(f"pagoda-server: --{flag} {value} "), lines[0])
        self.assertIn("expected", lines[0])

    def test_help_prints_the_flags_by_group(self):
        text = server_help()
        headings = [line for line in text.splitlines() if line and not line.startswith(" ")]
        for group in ("Model:", "Scheduling:", "KV cache:", "Workers:", "KV events:"):
            self.assertIn(group, headings)
        self.assertNotIn("Other flags:", headings)  # Every flag has its group.

    def test_every_numeric_flag_refuses_out_of_range_values_before_any_worker(self):
        flags = numeric_flags(server_help())
        self.assertGreaterEqual(len(flags), 28)
        tried = 0
        for flag in flags:
            for value in OUT_OF_RANGE:
                with self.subTest(flag=flag, value=value):
                    self.refuse(flag, value)
                tried += 1
        print(f"flags_test: {len(flags)} numeric flags, {tried} out-of-range values refused",
              file=sys.stderr)

    def config_check_passes(self, flag, value):
        """True when the flags pass the config's checks: the start-up then
        stops at the model, which does not exist."""
        result = subprocess.run(
            [h.binary("pagoda-server"), "--model", os.path.join(self.tmp.name, "absent"),
             "--port", "0", f"--{flag}={value}"], capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 1, result.stderr)
        return f"--{flag} " not in result.stderr

    def test_the_configuration_page_matches_help_and_the_enforced_ranges(self):
        defaults = help_defaults(server_help())
        documented = documented_flags()
        self.assertEqual(sorted(documented), sorted(defaults))
        checked = 0
        for flag, (default, allowed) in documented.items():
            with self.subTest(flag=flag):
                self.assertEqual(default, defaults[flag] or '""')
                match = DOC_RANGE.match(allowed.split(";")[0].strip())
                if not match:
                    continue
                low, high = match.group(1), match.group(2)
                if "." in low + high:
                    continue  # Real-valued: the edges' neighbours are not one step away.
                self.assertTrue(self.config_check_passes(flag, low))
                self.assertTrue(self.config_check_passes(flag, high))
                self.assertFalse(self.config_check_passes(flag, int(low) - 1))
                self.assertFalse(self.config_check_passes(flag, int(high) + 1))
                checked += 1
        self.assertGreaterEqual(checked, 15)

    def test_port_past_65535_is_refused_not_wrapped(self):
        for flag in ("port", "http-port", "metrics-port"):
            with self.subTest(flag=flag):
                self.refuse(flag, "99999")

    def test_the_model_directory_as_the_one_argument_serves(self):
        """vLLM's `vllm serve MODEL` spelling: `pagoda-server DIR [flags]`
        serves, here with vLLM's -tp too; a second argument is refused."""
        server = h.Server(self.model, "-tp", "1")
        server.argv = [server.argv[0], self.model, *server.argv[3:]]
        self.assertNotIn("--model", server.argv)
        server.start()
        self.addCleanup(server.stop)
        self.assertIsNotNone(server.port)
        self.assertEqual(server.stop(), 0, server.stderr())
        result = subprocess.run([h.binary("pagoda-server"), self.model, "extra", "--port", "0"],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stderr.strip(),
                         f"pagoda-server: unexpected arguments: {self.model} extra (one "
                         "argument, the model directory, or none with --model DIR)")

    def test_served_model_name_takes_several_words(self):
        """vLLM's --served-model-name A B: /v1/models lists both, a request
        naming the second is served and answered under the first."""
        server = h.Server(self.model, "--served-model-name", "tiny", "tiny-alias",
                          "--http-port", "-1").start()
        self.addCleanup(server.stop)
        base = f"http://127.0.0.1:{server.http_port}"
        with urllib.request.urlopen(f"{base}/v1/models", timeout=30) as reply:
            ids = [card["id"] for card in json.load(reply)["data"]]
        self.assertEqual(ids, ["tiny", "tiny-alias"])
        request = urllib.request.Request(
            f"{base}/v1/completions", method="POST",
            headers={"Content-Type": "application/json"},
            data=json.dumps({"model": "tiny-alias", "prompt": [5, 6, 7],
                             "max_tokens": 2}).encode())
        with urllib.request.urlopen(request, timeout=60) as reply:
            self.assertEqual(json.load(reply)["model"], "tiny")

    def test_override_generation_config_sets_the_sampling_defaults(self):
        """vLLM's --override-generation-config, key by key: the server's
        sampling defaults are its fields (the start-up line says so)."""
        server = h.Server(self.model, "--override-generation-config.temperature", "0.5",
                          "--override-generation-config.top_k", "7").start()
        self.addCleanup(server.stop)
        self.assertIn("sampling defaults (--generation-config auto, overridden): "
                      "temperature=0.5 top_k=7", server.stderr())

    def test_override_max_new_tokens_is_the_default_and_the_cap(self):
        """vLLM's --override-generation-config max_new_tokens: a chat
        request without max_tokens stops there, and so does a completion
        asking for more (finish_reason length, usage counted); one asking
        for fewer keeps its own."""
        server = h.Server(self.model, "--override-generation-config.max_new_tokens", "3",
                          "--http-port", "-1").start()
        self.addCleanup(server.stop)
        self.assertIn("max_tokens=3 max_tokens_cap=3", server.stderr())

        def post(path, body):
            status, text = h.post_json(server.http_port, path, body)
            self.assertEqual(status, 200, text)
            return json.loads(text)

        greedy = {"temperature": 0, "ignore_eos": True}
        chat = post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hello"}], **greedy})
        capped = post("/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 10, **greedy})
        own = post("/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 2, **greedy})
        for reply, tokens in ((chat, 3), (capped, 3), (own, 2)):
            self.assertEqual(reply["usage"]["completion_tokens"], tokens, reply)
            self.assertEqual(reply["choices"][0]["finish_reason"], "length", reply)

    def test_a_vllm_config_file_sets_flags_the_command_line_overrides(self):
        """vLLM's --config FILE.yaml: its keys are flags (a list several
        words, a mapping a JSON flag, a bool a switch); the command line's
        own flags win; a bad file is refused in one line naming it."""
        path = os.path.join(self.tmp.name, "serve.yaml")
        with open(path, "w") as f:
            f.write(f"model: {self.model}\n"
                    "http-port: -1\n"
                    "metrics-port: -1\n"
                    "served-model-name: [tiny, tiny-alias, tiny-other]\n"
                    "enable-prefix-caching: false\n"
                    "override-generation-config:\n  temperature: 0.5\n  top_k: 7\n")
        server = h.Server(self.model, "--config", path,
                          "--served-model-name", "tiny", "tiny-alias").start()
        self.addCleanup(server.stop)
        self.assertIn(f"flags from --config {path}", server.stderr())
        self.assertIn("temperature=0.5 top_k=7", server.stderr())
        # The command line's --served-model-name replaced the file's.
        with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/v1/models",
                                    timeout=30) as reply:
            self.assertEqual([card["id"] for card in json.load(reply)["data"]],
                             ["tiny", "tiny-alias"])
        self.assertIn('enable_prefix_caching="False"', h.scrape(server.metrics_port)[1])
        bad = os.path.join(self.tmp.name, "bad.yaml")
        with open(bad, "w") as f:
            f.write("port: [1\n")
        for args, line in (
                (["--config", bad], f"pagoda-server: --config {bad}: line 2: did not find "
                                    "expected ',' or ']'"),
                (["--config", path, "--config", path],
                 "pagoda-server: --config given more than once, as vLLM refuses")):
            with self.subTest(args=args):
                result = subprocess.run([h.binary("pagoda-server"), "--port", "0", *args],
                                        capture_output=True, text=True, timeout=60)
                self.assertEqual(result.returncode, 1, result.stderr)
                self.assertEqual(result.stderr.strip(), line)

    def test_vllms_human_readable_integers(self):
        """--max-model-len 0.5k is 500 (vLLM's human_readable_int), and the
        served model card says so; a decimal with a binary suffix is refused
        as the flag's value."""
        server = h.Server(self.model, "--http-port", "-1", "--max-model-len", "0.5k",
                          "--max-num-batched-tokens=2K").start()
        self.addCleanup(server.stop)
        with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/v1/models",
                                    timeout=30) as reply:
            self.assertEqual(json.load(reply)["data"][0]["max_model_len"], 500)
        result = subprocess.run([h.binary("pagoda-server"), "--model", self.model, "--port", "0",
                                 "--max-model-len", "1.5K"], capture_output=True, text=True,
                                timeout=60)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("max_model_len", result.stderr)

    def test_vllms_flags_with_no_effect_are_taken_and_named(self):
        """A vLLM command line's --trust-remote-code and friends run, and
        the start-up log names them as taken with no effect."""
        server = h.Server(self.model, "--trust-remote-code", "--disable-custom-all-reduce",
                          "--load-format", "safetensors", "--distributed-executor-backend",
                          "mp", "--disable-uvicorn-access-log", "--disable-fastapi-docs",
                          "--uvicorn-log-level", "warning").start()
        self.addCleanup(server.stop)
        self.assertIn("vLLM's --trust-remote-code, --disable-custom-all-reduce, --load-format "
                      "safetensors, --distributed-executor-backend mp, "
                      "--disable-uvicorn-access-log, --disable-fastapi-docs, "
                      "--uvicorn-log-level warning: taken, no effect here", server.stderr())

    def test_vllms_usage_flags(self):
        """--enable-prompt-tokens-details: usage.prompt_tokens_details.
        cached_tokens, 0 for a prompt seen first, then its cached blocks;
        --enable-force-include-usage: a stream that asked for nothing gets
        usage in each chunk and a last usage chunk; --return-tokens-as-
        token-ids: logprobs tokens "token_id:N" unless a request says no."""
        server = h.Server(self.model, "--http-port", "-1", "--enable-prompt-tokens-details",
                          "--enable-force-include-usage", "--return-tokens-as-token-ids").start()
        self.addCleanup(server.stop)
        base = f"http://127.0.0.1:{server.http_port}/v1/completions"
        body = {"prompt": list(range(200, 240)), "max_tokens": 2, "temperature": 0,
                "ignore_eos": True}

        def post(payload):
            request = urllib.request.Request(base, method="POST",
                                             headers={"Content-Type": "application/json"},
                                             data=json.dumps(payload).encode())
            return urllib.request.urlopen(request, timeout=60)

        for cached in (0, 32):  # 40 tokens: 2 full 16-token blocks before the last.
            with post(body) as reply:
                usage = json.load(reply)["usage"]
            self.assertEqual(usage["prompt_tokens_details"], {"cached_tokens": cached})
        with post(dict(body, stream=True)) as reply:
            events = [json.loads(line[len(b"data: "):]) for line in reply.read().splitlines()
                      if line.startswith(b"data: {")]
        self.assertTrue(all("usage" in event for event in events), events)
        self.assertEqual(events[-1]["choices"], [])
        self.assertEqual(events[-1]["usage"]["completion_tokens"], 2)
        self.assertEqual(events[-1]["usage"]["prompt_tokens_details"], {"cached_tokens": 32})
        # --return-tokens-as-token-ids, unless the request says otherwise.
        for as_ids in (None, False):
            asked = dict(body, logprobs=1)
            if as_ids is not None:
                asked["return_tokens_as_token_ids"] = as_ids
            with post(asked) as reply:
                tokens = json.load(reply)["choices"][0]["logprobs"]["tokens"]
            self.assertEqual(len(tokens), 2)
            self.assertEqual([t.startswith("token_id:") for t in tokens], [as_ids is None] * 2)

    def test_vllms_max_logprobs(self):
        """--max-logprobs N: logprobs, top_logprobs and prompt_logprobs up to
        N per token, a 400 naming the field past it; vLLM's -1 (the whole
        vocabulary) is refused at start."""
        self.refuse("max-logprobs", "-1")
        self.refuse("max-logprobs", "21")
        server = h.Server(self.model, "--http-port", "-1", "--max-logprobs", "2").start()
        self.addCleanup(server.stop)

        def status(path, body):
            return h.post_json(server.http_port, path, dict(body, max_tokens=2))

        chat = {"messages": [{"role": "user", "content": "hi"}], "logprobs": True}
        for path, body, field in (("/v1/completions", {"prompt": "hi", "logprobs": 3}, "logprobs"),
                                  ("/v1/completions", {"prompt": "hi", "prompt_logprobs": 3},
                                   "prompt_logprobs"),
                                  ("/v1/chat/completions", dict(chat, top_logprobs=3), "logprobs")):
            ok = {key: (2 if value == 3 else value) for key, value in body.items()}
            self.assertEqual(status(path, ok)[0], 200, ok)
            code, text = status(path, body)
            self.assertEqual(code, 400, text)
            self.assertIn(f"{field}: must be in [0, 2] (--max-logprobs)", text)

    def test_vllms_chat_template_content_format(self):
        """A template that loops over a message's content parts gets them as
        OpenAI's list under auto (detected, as vLLM) and openai, and the
        joined text under string, where the loop walks characters."""
        template = os.path.join(self.tmp.name, "parts.jinja")
        with open(template, "w") as f:
            f.write("{% for m in messages %}{% for c in m.content %}{{ c.text }} {% endfor %}"
                    "{% endfor %}")
        messages = [{"role": "user", "content": [{"type": "text", "text": "hello"},
                                                 {"type": "text", "text": "world"}]}]
        for given, want_parts in (("auto", True), ("openai", True), ("string", False)):
            server = h.Server(self.model, "--http-port", "-1", "--chat-template", template,
                              "--chat-template-content-format", given).start()
            self.addCleanup(server.stop)

            tokens = json.loads(h.post_json(server.http_port, "/tokenize", {
                "messages": messages, "add_generation_prompt": False})[1])
            prompt = json.loads(h.post_json(server.http_port, "/detokenize",
                                            {"tokens": tokens["tokens"]})[1])["prompt"]
            with self.subTest(given=given):
                self.assertEqual("hello world" in prompt, want_parts, prompt)
                if given == "auto":
                    self.assertIn("content format openai (detected)", server.stderr())
        self.refuse("chat-template-content-format", "markdown")

    def test_vllms_response_role(self):
        """--response-role: the role of chat answers to requests that add the
        generation prompt, whole and streamed; without it, the last
        message's role."""
        for value in ("two words", "x" * 65, ""):
            self.refuse("response-role", value)
        server = h.Server(self.model, "--http-port", "-1", "--response-role", "bot").start()
        self.addCleanup(server.stop)

        def chat(**extra):
            body = dict({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
                        **extra)
            status, text = h.post_json(server.http_port, "/v1/chat/completions", body)
            self.assertEqual(status, 200, text)
            return text

        self.assertEqual(json.loads(chat())["choices"][0]["message"]["role"], "bot")
        first = next(line for line in chat(stream=True).splitlines() if line.startswith("data: {"))
        self.assertEqual(json.loads(first[len("data: "):])["choices"][0]["delta"]["role"], "bot")
        answer = json.loads(chat(add_generation_prompt=False))
        self.assertEqual(answer["choices"][0]["message"]["role"], "user")

    def test_vllms_load_endpoint(self):
        """GET /load: with --enable-server-load-tracking the completions in
        flight (a stream counts until its end), 0 without the flag."""
        def load(server):
            with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/load",
                                        timeout=30) as reply:
                return json.load(reply)["server_load"]

        for tracking in (True, False):
            flags = ["--enable-server-load-tracking"] if tracking else []
            server = h.Server(self.model, "--http-port", "-1", *flags).start()
            self.addCleanup(server.stop)
            with self.subTest(tracking=tracking):
                self.assertEqual(load(server), 0)
                request = urllib.request.Request(
                    f"http://127.0.0.1:{server.http_port}/v1/completions", method="POST",
                    headers={"Content-Type": "application/json"},
                    data=json.dumps({"prompt": [5, 6, 7], "max_tokens": 2000, "stream": True,
                                     "ignore_eos": True}).encode())
                stream = urllib.request.urlopen(request, timeout=60)
                stream.readline()  # The first event: the call is in flight.
                self.assertEqual(load(server), 1 if tracking else 0)
                stream.close()  # The client leaves: the call ends.
                h.wait_for(lambda: load(server) == 0, 30, "the load back to 0")

    def test_vllms_request_log(self):
        """--enable-log-requests logs each request's options as it is
        accepted (its prompt too at VLLM_LOGGING_LEVEL=DEBUG),
        --enable-log-outputs each sequence's text and finish reason as it
        ends, cut to --max-log-len; without them, neither."""
        def complete(server):
            request = urllib.request.Request(
                f"http://127.0.0.1:{server.http_port}/v1/completions", method="POST",
                headers={"Content-Type": "application/json"},
                data=json.dumps({"prompt": [5, 6, 7, 8, 9], "max_tokens": 3, "temperature": 0,
                                 "ignore_eos": True}).encode())
            with urllib.request.urlopen(request, timeout=60) as reply:
                return json.load(reply)

        env = dict(os.environ, VLLM_LOGGING_LEVEL="DEBUG")
        server = h.Server(self.model, "--http-port", "-1", "--enable-log-requests",
                          "--enable-log-outputs", "--max-log-len", "2", env=env).start()
        self.addCleanup(server.stop)
        complete(server)
        h.wait_for(lambda: "Generated response" in server.stderr(), 30, "the output line")
        log = server.stderr()
        self.assertRegex(log, r"Received request \S+: params: SamplingParams\(n=1, .*"
                              r"temperature=0\.0, .*max_tokens=3, .*\), lora_request: None\.")
        self.assertRegex(log, r"Request \S+ details: prompt: '[^']*', "
                              r"prompt_token_ids: \[5, 6\], prompt_embeds shape: None\.")
        self.assertRegex(log, r"Generated response \S+: output: '.{0,2}', finish_reason: length")
        quiet = h.Server(self.model, "--http-port", "-1", env=env).start()
        self.addCleanup(quiet.stop)
        complete(quiet)
        self.assertNotIn("Received request", quiet.stderr())
        self.assertNotIn("Generated response", quiet.stderr())
        result = subprocess.run(
            [h.binary("pagoda-server"), "--model", self.model, "--port", "0",
             "--enable-log-outputs"], capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertEqual(result.stderr.strip(), "pagoda-server: --enable-log-outputs needs "
                         "--enable-log-requests, as in vLLM")

    def test_the_stats_line_as_vllm_logs_it(self):
        """Every VLLM_LOG_STATS_INTERVAL seconds, vLLM's stats line once
        requests ran; --disable-log-stats turns it off; a bad interval is
        refused in one line."""
        env = dict(os.environ, VLLM_LOG_STATS_INTERVAL="0.2")
        server = h.Server(self.model, "--http-port", "-1", env=env).start()
        self.addCleanup(server.stop)
        # Logged once serving (after the listening line the harness waits for).
        h.wait_for(lambda: "stats line every 200ms (VLLM_LOG_STATS_INTERVAL)" in server.stderr(),
                   30, "the stats line's start-up line")
        request = urllib.request.Request(
            f"http://127.0.0.1:{server.http_port}/v1/completions", method="POST",
            headers={"Content-Type": "application/json"},
            data=json.dumps({"prompt": [5, 6, 7], "max_tokens": 8}).encode())
        with urllib.request.urlopen(request, timeout=60) as reply:
            self.assertEqual(reply.status, 200)
        line = re.compile(r"Engine 000: Avg prompt throughput: [0-9.]+ tokens/s, Avg generation "
                          r"throughput: [0-9.]+ tokens/s, Running: \d+ reqs, Waiting: \d+ reqs, "
                          r"GPU KV cache usage: [0-9.]+%, Prefix cache hit rate: [0-9.]+%")
        h.wait_for(lambda: line.search(server.stderr()), 30, "the stats line")
        quiet = h.Server(self.model, "--disable-log-stats", env=env).start()
        self.addCleanup(quiet.stop)
        h.wait_for(lambda: "stats line off (--disable-log-stats)" in quiet.stderr(), 30,
                   "the stats line's start-up line")
        result = subprocess.run(
            [h.binary("pagoda-server"), "--model", self.model, "--port", "0"],
            env=dict(os.environ, VLLM_LOG_STATS_INTERVAL="soon"), capture_output=True, text=True,
            timeout=60)
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stderr.strip(), "pagoda-server: VLLM_LOG_STATS_INTERVAL: "
                         "expected seconds over 0, at most 86400")

    def test_vllms_short_and_key_by_key_spellings_reach_the_flags(self):
        """vLLM's -tp and -q, --lora-modules with several words, and its
        --NAME.KEY VALUE spelling of a JSON flag, reach the flag's own
        reading (its refusal names the flag, or the gathered key); a key on
        a flag that takes none, or both spellings
        of one flag at once, is refused in one line; so is vLLM's
        --enable-auto-tool-choice without a parser."""
        cases = [
            (["--speculative-config.method", "ngram",
              "--speculative_config.num_speculative_tokens=99"],
             "pagoda-server: --speculative-config: num_speculative_tokens 99 must be in [1, "),
            (["--kv-events-config.enable_kv_cache_events", "true",
              "--kv-events-config.publisher", "nats"],
             'pagoda-server: --kv-events-config: publisher "nats": expected "zmq" or "null"'),
            (["-tp", "0"], "pagoda-server: --tensor-parallel-size 0 is out of range"),
            (["--enable-auto-tool-choice"],
             "pagoda-server: --enable-auto-tool-choice needs --tool-call-parser"),
            (["-q=int3"], "pagoda-server: --quantization int3: Pagoda serves"),
            # vLLM's --lora-modules takes several words: both reach the flag.
            (["--enable-lora", "--lora-modules", "a=/x", "a=/y", "--max-loras", "1"],
             "pagoda-server: --lora-modules names \"a\" twice"),
            (["--override-generation-config", '{"max_new_tokens": 0}'],
             'pagoda-server: --override-generation-config: field "max_new_tokens" must be in '
             "[1, 2147483647], got 0"),
            (["--load-format", "dummy"],
             "pagoda-server: --load-format dummy: Pagoda reads safetensors (auto or "
             "safetensors)"),
            (["--uvicorn-log-level", "loud"],
             "pagoda-server: --uvicorn-log-level loud: expected debug, info, warning, error, "
             "critical or trace"),
            (["--distributed-executor-backend", "ray"],
             "pagoda-server: --distributed-executor-backend ray: Pagoda's workers are "
             "processes (mp)"),
            (["--max-num-seqs.limit", "4"],
             "pagoda-server: --max-num-seqs.limit: --max-num-seqs takes no keys"),
            (["--speculative-config", "{}", "--speculative-config.method", "ngram"],
             "pagoda-server: --speculative-config given both as one JSON object and key by key"),
        ]
        for args, start in cases:
            with self.subTest(args=args):
                result = subprocess.run(
                    [h.binary("pagoda-server"), "--model", self.model, "--port", "0", *args],
                    capture_output=True, text=True, timeout=60)
                lines = result.stderr.strip().splitlines()
                self.assertEqual(result.returncode, 1, result.stderr)
                self.assertNotIn("PAGODA_WORKER_PIDS", result.stdout)
                self.assertEqual(len(lines), 1, result.stderr)
                self.assertTrue(lines[0].startswith(start), lines[0])


def worker_help():
    return subprocess.run([h.binary("pagoda-worker"), "--help"], capture_output=True, text=True,
                          timeout=30, check=True).stdout


class WorkerFlagsTest(unittest.TestCase):
    # 2147483647: past every worker bound (--max-message-bytes' 256 MiB
    # included), and still an int.
    OUT_OF_RANGE = ("-5", "2147483647")

    def test_help_prints_the_flags_by_group(self):
        headings = [line for line in worker_help().splitlines()
                    if line and not line.startswith(" ")]
        for group in ("Serving:", "TLS with the server:", "Metrics:"):
            self.assertIn(group, headings)
        self.assertNotIn("Other flags:", headings)  # Every flag has its group.

    def test_every_numeric_flag_refuses_out_of_range_values_before_listening(self):
        flags = numeric_flags(worker_help())
        self.assertGreaterEqual(len(flags), 8)
        for flag in flags:
            for value in self.OUT_OF_RANGE:
                with self.subTest(flag=flag, value=value):
                    # No secret is given either: the range is refused first.
                    result = subprocess.run([h.binary("pagoda-worker"), f"--{flag}={value}"],
                                            capture_output=True, text=True, timeout=60)
                    lines = result.stderr.strip().splitlines()
                    self.assertEqual(result.returncode, 1, result.stderr)
                    self.assertNotIn("PAGODA_WORKER_LISTENING", result.stdout)
                    self.assertEqual(len(lines), 1, result.stderr)
                    self.assertTrue(lines[0].startswith(f"pagoda-worker: --{flag} {value} "),
                                    lines[0])
                    self.assertIn("expected", lines[0])

    def test_a_worker_without_a_secret_is_refused_in_one_line(self):
        result = subprocess.run([h.binary("pagoda-worker")], capture_output=True, text=True,
                                timeout=60)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertEqual(result.stderr.strip(), "pagoda-worker: a worker needs the server's "
                         "secret: pass --secret-fd or --secret-file")

    def test_a_stray_argument_is_refused_not_dropped(self):
        """A word meant for a flag (--rank 1 2) is refused, before the secret."""
        result = subprocess.run([h.binary("pagoda-worker"), "--rank", "1", "2"],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertEqual(result.stderr.strip(), "pagoda-worker: unexpected argument '2' (this "
                         "program takes flags only: --NAME VALUE)")


if __name__ == "__main__":
    unittest.main()
