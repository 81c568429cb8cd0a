"""One conversation of the C tests (test_chat_qwen3.c, test_chat_llama31.c) rendered by a committed Jinja
chat template with Hugging Face's conventions (trim_blocks, lstrip_blocks, tojson as json.dumps with
ensure_ascii=False, raise_exception): the text tierkv's renderer of that format must reproduce byte
for byte.

    python3 tests/chat_jinja.py --template FILE --case CASE.json --out FILE

CASE.json: {"messages": [{"role", "content", "reasoning_content"?, "tool_calls"?: [{"name", "arguments":
JSON text}]}], "tools": [definition JSON text], "add_generation_prompt": bool, "enable_thinking"?: bool,
"bos_token"?: text, "strftime_now"?: the date it returns (else the renderer has none)}. Each call is given to the template as OpenAI's {"type": "function", "function":
{"name", "arguments": the arguments read as JSON}} (as servers hand them to templates); a definition
is read likewise. Exit 77 when jinja2 is missing (the C test then skips), 3 when the template raises
(its message on stderr)."""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--template", required=True)
    ap.add_argument("--case", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    try:
        import jinja2
    except ImportError:
        print("chat_jinja.py: jinja2 is missing (pip install jinja2)", file=sys.stderr)
        return 77
    with open(a.template, encoding="utf-8") as f:
        template = f.read()
    with open(a.case, encoding="utf-8") as f:
        case = json.load(f)
    msgs = []
    for m in case["messages"]:
        m = dict(m)
        if "tool_calls" in m:
            m["tool_calls"] = [{"type": "function", "function": {"name": c["name"], "arguments": json.loads(c["arguments"])}}
                               for c in m["tool_calls"]]
        msgs.append(m)
    kw = {"messages": msgs, "add_generation_prompt": case["add_generation_prompt"]}
    if case.get("tools"):
        kw["tools"] = [json.loads(t) for t in case["tools"]]
    for key in ("enable_thinking", "bos_token"):
        if key in case:
            kw[key] = case[key]

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
    env.globals["raise_exception"] = raise_exception
    if "strftime_now" in case:
        env.globals["strftime_now"] = lambda fmt: case["strftime_now"]
    try:
        text = env.from_string(template).render(**kw)
    except jinja2.exceptions.TemplateError as e:
        print("chat_jinja.py: the template raises: %s" % e, file=sys.stderr)
        return 3
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
