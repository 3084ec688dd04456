"""Pagoda's chat templates rendered identically to python3-jinja2.

Renders the real Llama 3, Llama 3.1 and Qwen3 chat templates (from the npm
packages in tests/node: real_templates.py), a Mistral-style template and a
template exercising the rest of the supported Jinja subset, over
conversations with system, user, assistant and multi-turn messages, with and
without add_generation_prompt, with tools (Llama 3.1's: in the first user
message or, with tools_in_user_message false, the system message; its
date_string, builtin_tools and custom_tools), tool calls and tool or ipython
results, and checks that templates raising an error (roles that do not
alternate, tools without a user message, two calls in one Llama 3.1 turn)
fail in both. jinja2 runs as transformers runs it (jinja_reference.py).
Each template's content format ("auto" of --chat-template-content-format)
is also checked against vLLM's detection run over jinja2's own syntax tree
(reference_content_format), on these templates and on a few written to
loop over a message's content.

    python3 tests/chat_template/chat_template_test.py path/to/chat_template_tool
Prints "N passed, N failed"; exits non-zero on any failure.
"""
import json
import os
import subprocess
import sys
import tempfile

from jinja_reference import reference_render
import real_templates

HERE = os.path.dirname(os.path.abspath(__file__))


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
    cases.extend(llama3_1_cases(system, user, assistant, tools, call, result))
    # transformers' continue_final_message: the prompt ends inside the last
    # (assistant) message.
    prefill = {"role": "assistant", "content": "Sure, here is"}
    for messages in ([user, assistant], [user, prefill], [system, user, assistant, user2, prefill],
                     [user, thinking], [user, {"role": "assistant", "content": ""}]):
        cases.append({"messages": messages, "add_generation_prompt": False,
                      "continue_final_message": True})
    return cases


CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


def reference(source, case, bos, eos):
    """jinja2's render, with continue_final_message as transformers does it
    (render_jinja_template): the tag after the final message's content, the
    render cut where the tag starts (right-stripped when the template
    trimmed the tag's space)."""
    if not case.get("continue_final_message"):
        return reference_render(source, case, bos, eos)
    if "content" not in source:
        return {"error": "content is not an accepted field"}
    final = case["messages"][-1]["content"]
    messages = case["messages"][:-1] + [dict(case["messages"][-1], content=final + CONTINUE_TAG)]
    result = reference_render(source, dict(case, messages=messages), bos, eos)
    if "text" not in result:
        return result
    text = result["text"]
    if final.strip() not in text or CONTINUE_TAG.strip() not in text:
        return {"error": "the final message does not appear in the chat"}
    at = text.rindex(CONTINUE_TAG.strip())
    kept = text[at:at + len(CONTINUE_TAG)] == CONTINUE_TAG
    return {"text": text[:at] if kept else text[:at].rstrip()}


def llama3_1_cases(system, user, assistant, tools, call, result):
    """What Llama 3.1's template reacts to: where the tools go, its variables
    (date_string, tools_in_user_message, builtin_tools, custom_tools), the
    ipython role and the turns it refuses."""
    ipython = {"role": "ipython", "content": "21 degrees"}
    two_calls = dict(call, tool_calls=call["tool_calls"] * 2)
    search = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_2", "type": "function",
         "function": {"name": "brave_search", "arguments": {"query": "Paris \"weather\""}}}]}
    builtin = {"builtin_tools": ["brave_search", "code_interpreter", "wolfram_alpha"]}
    conversation = [system, user, call, result, assistant]
    cases = [
        {"messages": conversation, "tools": tools, "variables": {"tools_in_user_message": False}},
        {"messages": [user, call, ipython], "tools": tools,
         "variables": {"tools_in_user_message": False, "date_string": "01 Sep 2026"}},
        {"messages": [system, user], "variables": {"date_string": "26 Nov 2026"}},
        {"messages": [system, user, search, ipython], "variables": builtin},
        {"messages": [user, search, result], "tools": tools, "variables": builtin},
        {"messages": [user], "variables": {"custom_tools": tools}},
        {"messages": [user, two_calls, result], "tools": tools},  # One call a turn.
        {"messages": [system], "tools": tools},  # No user message to hold the tools.
        {"messages": [system, user], "tools": tools, "variables": {"bos_token": ""}},
    ]
    for case in cases:
        case["add_generation_prompt"] = True
    return cases


def templates():
    out = []
    for model in ("llama3", "llama3_1", "qwen3"):
        out.append((model, real_templates.template(model), "<|begin_of_text|>", "<|eot_id|>"))
    for name in ("mistral_style.jinja", "features.jinja"):
        with open(os.path.join(HERE, name), encoding="utf-8") as f:
            out.append((name, f.read(), "<s>", "</s>"))
    return out


def reference_content_format(source):
    """vLLM's content format detection, over jinja2's syntax tree: "openai"
    when a loop iterates a message's content, the message bound by a loop
    over `messages` (or a slice of it, through filters and tests, or a
    variable assigned from those); "string" otherwise or when a matching
    loop binds more than one name (vLLM's detection then fails)."""
    import jinja2
    from jinja2 import nodes
    tree = jinja2.Environment().parse(source)

    def reads(node, name, key=None):
        if isinstance(node, (nodes.Filter, nodes.Test)):
            return node.node is not None and reads(node.node, name, key)
        if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
            return reads(node.node, name, key)
        if key is None:
            return isinstance(node, nodes.Name) and node.ctx == "load" and node.name == name
        if isinstance(node, nodes.Getitem):
            return (reads(node.node, name) and isinstance(node.arg, nodes.Const)
                    and node.arg.value == key)
        return isinstance(node, nodes.Getattr) and reads(node.node, name) and node.attr == key

    sources = ["messages"]
    for name in sources:
        for assign in tree.find_all(nodes.Assign):
            if (isinstance(assign.target, nodes.Name) and reads(assign.node, name)
                    and assign.target.name not in sources):
                sources.append(assign.target.name)

    def loop_names(over, key=None):
        names = []
        for loop in tree.find_all(nodes.For):
            if any(reads(loop.iter, name, key) for name in over):
                if not isinstance(loop.target, nodes.Name):
                    return None
                names.append(loop.target.name)
        return names

    messages = loop_names(sources)
    if messages is None:
        return "string"
    return "openai" if loop_names(messages, "content") else "string"


CONTENT_LOOPS = [
    "{% for m in messages %}{% for c in m['content'] %}{{ c.text }}{% endfor %}{% endfor %}",
    "{% for m in messages[1:] %}{% for c in m.content | select('mapping') %}{{ c.text }}"
    "{% endfor %}{% endfor %}",
    "{% set rest = messages[1:] %}{% set ms = rest %}{% for m in ms %}{% if m.content is string %}"
    "{{ m.content }}{% else %}{% for c in m.content %}{{ c.text }}{% endfor %}{% endif %}"
    "{% endfor %}",
    "{% for i, m in messages %}{% for c in m.content %}{% endfor %}{% endfor %}",
    "{% set m = {'content': []} %}{% for c in m.content %}{% endfor %}",
]


def check_content_formats(tool):
    failed = 0
    sources = [source for _, source, _, _ in templates()] + CONTENT_LOOPS
    for source in sources:
        with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False, encoding="utf-8") as f:
            f.write(source)
            template_path = f.name
        run = subprocess.run([tool, template_path], input=b'{"cases": []}', capture_output=True)
        os.unlink(template_path)
        got = json.loads(run.stdout.decode("utf-8")).get("content_format")
        want = reference_content_format(source)
        if got != want:
            failed += 1
            print(f"FAIL content format of {source[:80]!r}: got {got}, want {want}")
    formats = {reference_content_format(source) for source in sources}
    print(f"content formats: {len(sources)} templates, both kinds: {formats == {'string', 'openai'}}")
    return failed + (formats != {"string", "openai"})


def main():
    tool = sys.argv[1]
    passed = failed = 0
    failed += check_content_formats(tool)
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
            want = reference(source, case, bos, eos)
            # Both refuse (with the template's own message when it raised one),
            # or both render the same text.
            same = got.get("text") == want.get("text") if "text" in want else (
                "error" in got and (not want.get("raised") or want["error"] in got["error"]))
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
