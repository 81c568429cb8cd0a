"""One conversation of test_chat.c (the chat_qwen3_* tests) rendered by Qwen3's Jinja template with
Hugging Face's conventions (trim_blocks, lstrip_blocks, tojson as json.dumps with ensure_ascii=False):
the text tierkv's Qwen3 renderer must reproduce byte for byte.

    python3 tests/chat_qwen3.py --template FILE --case CASE.json --out FILE

CASE.json: {"messages": [{"role", "content", "reasoning_content"?, "tool_calls"?: [call JSON text]}],
"tools": [definition JSON text], "add_generation_prompt": bool, "enable_thinking"?: bool}. A call is
the text the renderer writes ({"name": ..., "arguments": {...}}), read here into the object the
template takes; a definition likewise. Exit 77 when jinja2 is missing (the C test then skips)."""
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
        print("chat_qwen3.py: jinja2 is missing (pip install jinja2)", file=sys.stderr)
        return 77
    with open(a.template, encoding="utf-8") as f:
        template = f.read()
    with open(a.case, encoding="utf-8") as f:
        case = json.load(f)
    msgs = []
    for m in case["messages"]:
        m = dict(m)
        if "tool_calls" in m:
            m["tool_calls"] = [json.loads(c) for c in m["tool_calls"]]
        msgs.append(m)
    kw = {"messages": msgs, "add_generation_prompt": case["add_generation_prompt"]}
    if case.get("tools"):
        kw["tools"] = [json.loads(t) for t in case["tools"]]
    if "enable_thinking" in case:
        kw["enable_thinking"] = case["enable_thinking"]
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
    text = env.from_string(template).render(**kw)
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
