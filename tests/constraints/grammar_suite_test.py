#!/usr/bin/python3
"""The constraint grammars against independent validators.

sample_tool (sample_tool.cc) compiles every JSON Schema of schema_suite.json,
every regex of regex_suite.json and every GBNF grammar of grammar_suite.json
and prints random texts each grammar allows. Each complete text must parse
with Python's json and validate with python3-jsonschema (format checks on),
fully match with Python's re, or (grammars) be what the grammar's language
is: JSON, a Python expression, or a full match of an equivalent regex.
Every grammar must compile and give complete texts.

  grammar_suite_test.py path/to/constraints_sample_tool
"""

import ast
import collections
import datetime
import json
import os
import re
import subprocess
import sys

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))
WALKS = 40


def run(tool, suite):
  out = subprocess.run([tool, os.path.join(HERE, suite), str(WALKS), "7"], check=True,
                       capture_output=True, text=True).stdout
  return [json.loads(line) for line in out.splitlines()]


def check(entries, rows, validate):
  failures = []
  complete = collections.Counter()
  for row in rows:
    if "error" in row:
      failures.append(f"{row['name']}: does not compile: {row['error']}")
      continue
    if not row["complete"]:
      continue
    complete[row["name"]] += 1
    problem = validate(entries[row["name"]], row["text"])
    if problem:
      failures.append(f"{row['name']}: {row['text']!r}: {problem}")
  for name in entries:
    if complete[name] == 0:
      failures.append(f"{name}: no walk completed")
  return failures, sum(complete.values())


def format_checker():
  """The draft 2020-12 checker, plus RFC 3339 date-time and time (whose
  library python3-jsonschema leaves optional) checked by datetime."""
  checker = jsonschema.Draft202012Validator.FORMAT_CHECKER

  @checker.checks("date-time", raises=ValueError)
  def is_datetime(instance):
    return not isinstance(instance, str) or bool(
        re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", instance)
        and datetime.datetime.fromisoformat(instance))

  @checker.checks("time", raises=ValueError)
  def is_time(instance):
    return not isinstance(instance, str) or is_datetime("1970-01-01T" + instance)

  return checker


FORMATS = format_checker()


def validate_schema(entry, text):
  try:
    value = json.loads(text)
  except ValueError as e:
    return f"not JSON: {e}"
  try:
    jsonschema.Draft202012Validator(entry["schema"], format_checker=FORMATS).validate(value)
  except jsonschema.ValidationError as e:
    return f"invalid: {e.message}"
  return None


def validate_regex(entry, text):
  return None if re.fullmatch(entry["regex"], text) else "no full match"


def validate_grammar(entry, text):
  """A GBNF grammar's text, by what its language is: JSON (json.loads), a
  Python expression (ast), or a regex of the same language."""
  if entry["check"] == "json":
    try:
      json.loads(text)
      return None
    except ValueError as e:
      return f"not JSON: {e}"
  if entry["check"] == "python_expression":
    try:
      ast.parse(text, mode="eval")
      return None
    except SyntaxError as e:
      return f"not an expression: {e}"
  return validate_regex(entry, text)


def main():
  tool = sys.argv[1]
  failures = []
  total = 0
  for suite, validate in (("schema_suite.json", validate_schema),
                          ("regex_suite.json", validate_regex),
                          ("grammar_suite.json", validate_grammar)):
    with open(os.path.join(HERE, suite), encoding="utf-8") as f:
      entries = {e["name"]: e for e in json.load(f)}
    found, count = check(entries, run(tool, suite), validate)
    failures += found
    total += count
    print(f"{suite}: {len(entries)} grammars, {count} complete texts checked")
  for failure in failures[:50]:
    print(failure)
  print(f"{total} texts, {len(failures)} failures")
  return 1 if failures else 0


if __name__ == "__main__":
  sys.exit(main())
