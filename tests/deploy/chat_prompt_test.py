"""vLLM's continue_final_message through the real binary: the chat prompt
ends inside the last (assistant) message, as transformers cuts it, so that
the model continues that text; /tokenize renders it the same way; asking
for it together with the generation prompt is a 400 naming the field."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402


class ContinueFinalMessageTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.server = h.Server(h.make_model(os.path.join(cls.tmp.name, "tiny")),
                              "--http-port", "-1").start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def post(self, path, body):
        status, text = h.post_json(self.server.http_port, path, body)
        return status, json.loads(text)

    def prompt(self, **fields):
        status, tokens = self.post("/tokenize", dict({"messages": self.messages}, **fields))
        self.assertEqual(status, 200, tokens)
        status, text = self.post("/detokenize", {"tokens": tokens["tokens"]})
        self.assertEqual(status, 200, text)
        return text["prompt"]

    messages = [{"role": "user", "content": "Tell me a story."},
                {"role": "assistant", "content": "Once upon a time"}]

    def test_the_prompt_ends_inside_the_last_message(self):
        closed = self.prompt(add_generation_prompt=False)
        continued = self.prompt(add_generation_prompt=False, continue_final_message=True)
        self.assertTrue(continued.endswith("Once upon a time"), continued)
        self.assertTrue(closed.startswith(continued), (closed, continued))
        self.assertGreater(len(closed), len(continued))
        status, answer = self.post("/v1/chat/completions", {
            "messages": self.messages, "add_generation_prompt": False,
            "continue_final_message": True, "max_tokens": 3, "return_token_ids": True})
        self.assertEqual(status, 200, answer)
        self.assertEqual(answer["choices"][0]["message"]["role"], "assistant")
        self.assertEqual(len(answer["prompt_token_ids"]),
                         self.post("/tokenize", {"messages": self.messages,
                                                 "add_generation_prompt": False,
                                                 "continue_final_message": True})[1]["count"])

    def test_both_endings_at_once_are_refused(self):
        for path in ("/v1/chat/completions", "/tokenize"):
            status, error = self.post(path, {"messages": self.messages,
                                             "continue_final_message": True})
            self.assertEqual(status, 400, error)
            self.assertTrue(error["error"]["message"].startswith("continue_final_message:"), error)


if __name__ == "__main__":
    unittest.main()
