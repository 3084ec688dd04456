"""python3-jinja2 rendering a chat template as transformers does.

A sandboxed environment with trim_blocks and lstrip_blocks, a tojson filter
that keeps non-ASCII and key order (indent too), raise_exception, and the
request's variables (transformers' apply_chat_template keyword arguments,
which may replace bos_token and eos_token).

    python3 tests/chat_template/jinja_reference.py TEMPLATE_FILE < case.json
case: {"messages", "add_generation_prompt", "tools"?, "variables"?,
       "bos_token", "eos_token"}; prints {"text": ...} or {"error": ...} (with
"raised": true when the template raised it).
"""
import json
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Raised(jinja2.exceptions.TemplateError):
    """The template's own raise_exception(message)."""


def reference_render(source, case, bos, eos):
    def raise_exception(message):
        raise Raised(message)

    def tojson(value, indent=None):
        return json.dumps(value, ensure_ascii=False, indent=indent)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    try:
        variables = {"bos_token": bos, "eos_token": eos, **case.get("variables", {})}
        text = env.from_string(source).render(
            messages=case["messages"], add_generation_prompt=case["add_generation_prompt"],
            tools=case.get("tools"), **variables)
        return {"text": text}
    except Raised as error:
        return {"error": str(error), "raised": True}
    except (jinja2.exceptions.TemplateError, TypeError) as error:
        # TypeError: a template that reads a null content as a string.
        return {"error": str(error)}


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        template = f.read()
    request = json.load(sys.stdin)
    result = reference_render(template, request, request["bos_token"], request["eos_token"])
    sys.stdout.write(json.dumps(result, ensure_ascii=False))
