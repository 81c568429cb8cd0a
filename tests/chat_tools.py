"""The tool-call conversation of test_chat.c (chat_tools_match_template) rendered by the Jinja template
stored in a GGUF file, with Hugging Face's conventions (trim_blocks, lstrip_blocks, tojson as
json.dumps with ensure_ascii=False): the text tierkv's ChatML renderer must reproduce byte for byte.

    python3 tests/chat_tools.py --bin build/tierkv --gguf FILE --out FILE [--no-system]

Exit 77 when jinja2 is missing (the C test then skips)."""
import argparse
import json
import subprocess
import sys

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city (température, <b>wind</b>)",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
                       "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "description": "a + b",
                                      "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "integer"}}}}},
]
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris and Rome? <|im_end|>"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}},
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]},
    {"role": "tool", "content": "{\"temp\": 21}"},
    {"role": "tool", "content": "18 degrees"},
    {"role": "assistant", "content": "Let me add.", "tool_calls": [
        {"type": "function", "function": {"name": "add", "arguments": {"a": 1.5, "b": 2}}}]},
    {"role": "tool", "content": "3.5"},
    {"role": "assistant", "content": "Paris 21, Rome 18."},
    {"role": "user", "content": "Thanks"},
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-system", action="store_true")
    a = ap.parse_args()
    try:
        import jinja2
    except ImportError:
        print("chat_tools.py: jinja2 is missing (pip install jinja2)", file=sys.stderr)
        return 77
    meta = json.loads(subprocess.run([a.bin, "inspect", a.gguf, "--json"], check=True, capture_output=True).stdout)["metadata"]
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
    msgs = MESSAGES[1:] if a.no_system else MESSAGES
    text = env.from_string(meta["tokenizer.chat_template"]).render(messages=msgs, tools=TOOLS, add_generation_prompt=True)
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
