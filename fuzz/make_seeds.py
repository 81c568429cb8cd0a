#!/usr/bin/env python3
"""make_seeds.py - writes the seed corpora of the fuzz targets into fuzz/corpus/<target>/: tiny valid
GGUF models (no .gguf suffix: model files stay out of git; a qwen2 with F16 matrices and q/k/v biases, a llama with Q8_0 matrices and an output
matrix, a vocabulary-only file), JSON lines like the data and results files, texts for the tokenizer,
messages for the chat formats, and outputs/golds for the grader. Deterministic; run from the repo
root. Inputs that crashed a target are added next to these by hand (crash-*), never rewritten."""
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


U32, I32, F32, BOOL, STR, ARR = 4, 5, 6, 7, 8, 9


def kv(key, t, v):
    out = gstr(key) + struct.pack("<I", t)
    if t == U32: out += struct.pack("<I", v)
    elif t == F32: out += struct.pack("<f", v)
    elif t == BOOL: out += struct.pack("<B", v)
    elif t == STR: out += gstr(v)
    elif t == ARR:
        et, items = v
        out += struct.pack("<IQ", et, len(items))
        for x in items:
            out += gstr(x) if et == STR else struct.pack("<i", x)
    return out


def f16_bytes(n, seed):
    vals = [((i * 37 + seed * 11) % 17 - 8) / 64.0 for i in range(n)]
    return b"".join(struct.pack("<e", x) for x in vals)


def f32_bytes(n, value=None, seed=0):
    return b"".join(struct.pack("<f", value if value is not None else ((i * 13 + seed) % 9 - 4) / 32.0) for i in range(n))


def q8_0_bytes(rows, cols, seed):
    out = b""
    for r in range(rows):
        for b in range(cols // 32):
            out += struct.pack("<e", 0.01) + bytes(((i * 7 + r * 3 + b + seed) % 255) for i in range(32))
    return out


def gguf(kvs, tensors, align=32):
    """tensors: (name, dims, type, data) in file order; data padded to the alignment."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    infos, blobs, off = b"", b"", 0
    for name, dims, ty, data in tensors:
        infos += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", ty, off)
        pad = (-len(data)) % align
        blobs += data + b"\0" * pad
        off += len(data) + pad
    body = head + infos
    body += b"\0" * ((-len(body)) % align)
    return body + blobs


TOKENS = ["a", "b", "c", "d", "\u0120", "ab", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "hi"]
TYPES = [1, 1, 1, 1, 1, 1, 3, 3, 3, 1]
TEMPLATE = ("{% for m in messages %}{% if loop.first and m['role'] != 'system' %}"
            "{{ '<|im_start|>system\\nYou are tiny.<|im_end|>\\n' }}{% endif %}"
            "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}")


def vocab_kvs(pre):
    return [kv("tokenizer.ggml.model", STR, "gpt2"), kv("tokenizer.ggml.pre", STR, pre),
            kv("tokenizer.ggml.tokens", ARR, (STR, TOKENS)), kv("tokenizer.ggml.token_type", ARR, (I32, TYPES)),
            kv("tokenizer.ggml.merges", ARR, (STR, ["a b", "h i"])), kv("tokenizer.ggml.eos_token_id", U32, 7),
            kv("tokenizer.chat_template", STR, TEMPLATE)]


def model(arch, E, H, HKV, F, L, mat_type, hd=None, experts=0, used=0, ff_exp=0):
    """qwen3/qwen3moe: hd (key_length) may differ from E // H; q/k norms; experts > 0: the expert FFN."""
    hd = hd or E // H
    V = len(TOKENS)
    kvs = [kv("general.architecture", STR, arch), kv("general.name", STR, "tiny " + arch)]
    extra = (("attention.key_length", hd), ("attention.value_length", hd)) if arch.startswith("qwen3") else ()
    if experts:
        extra += (("expert_count", experts), ("expert_used_count", used), ("expert_feed_forward_length", ff_exp))
    for k, v in (("context_length", 64), ("embedding_length", E), ("block_count", L), ("feed_forward_length", F),
                 ("attention.head_count", H), ("attention.head_count_kv", HKV)) + extra:
        kvs.append(kv(f"{arch}.{k}", U32, v))
    kvs.append(kv(f"{arch}.attention.layer_norm_rms_epsilon", F32, 1e-6))
    kvs.append(kv(f"{arch}.rope.freq_base", F32, 10000.0))
    kvs += vocab_kvs("qwen2" if arch == "qwen2" else "llama-bpe")

    def mat(name, n_in, n_out, seed, n_exp=0):
        shape = [n_in, n_out] + ([n_exp] if n_exp else [])
        rows = n_out * max(n_exp, 1)
        if mat_type == 8:
            return (name, shape, 8, q8_0_bytes(rows, n_in, seed))
        return (name, shape, 1, f16_bytes(n_in * rows, seed))

    t = [mat("token_embd.weight", E, V, 1), ("output_norm.weight", [E], 0, f32_bytes(E, 1.0))]
    for l in range(L):
        p = f"blk.{l}."
        t.append((p + "attn_norm.weight", [E], 0, f32_bytes(E, 1.0)))
        t += [mat(p + "attn_q.weight", E, H * hd, 2), mat(p + "attn_k.weight", E, HKV * hd, 3),
              mat(p + "attn_v.weight", E, HKV * hd, 4), mat(p + "attn_output.weight", H * hd, E, 5)]
        if arch == "qwen2":
            t += [(p + "attn_q.bias", [H * hd], 0, f32_bytes(H * hd, seed=1)),
                  (p + "attn_k.bias", [HKV * hd], 0, f32_bytes(HKV * hd, seed=2)),
                  (p + "attn_v.bias", [HKV * hd], 0, f32_bytes(HKV * hd, seed=3))]
        if arch.startswith("qwen3"):
            t += [(p + "attn_q_norm.weight", [hd], 0, f32_bytes(hd, 1.0)), (p + "attn_k_norm.weight", [hd], 0, f32_bytes(hd, 1.0))]
        t.append((p + "ffn_norm.weight", [E], 0, f32_bytes(E, 1.0)))
        if experts:
            t += [(p + "ffn_gate_inp.weight", [E, experts], 0, f32_bytes(E * experts, seed=4)),
                  mat(p + "ffn_gate_exps.weight", E, ff_exp, 6, experts), mat(p + "ffn_up_exps.weight", E, ff_exp, 7, experts),
                  mat(p + "ffn_down_exps.weight", ff_exp, E, 8, experts)]
        else:
            t += [mat(p + "ffn_gate.weight", E, F, 6), mat(p + "ffn_up.weight", E, F, 7), mat(p + "ffn_down.weight", F, E, 8)]
    if arch in ("llama", "qwen3"):
        t.append(mat("output.weight", E, V, 9))
    return gguf(kvs, t)


def fnv(b, h=0xcbf29ce484222325):
    for x in b:
        h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def kv_record(tiers, layers, kv_heads, head_dim, t2_fmt=None, t2_bytes=0, salt=7, note=None):
    """A sequence record (src/kv/kv_rec.h): f16 exact rows, tiers as given, rows of a pattern, a note."""
    kd = kv_heads * head_dim
    exact = 4 * kd
    n = len(tiers)
    out = b"TKVREC01" + struct.pack("<IIQQIIIIIIII", 1, 0 if note is None else 1, 0x1234, salt, layers, kv_heads, head_dim, 1,
                                    0xFFFFFFFF if t2_fmt is None else t2_fmt, exact, t2_bytes, n)
    out += b"".join(struct.pack("<i", 100 + i) for i in range(n)) + bytes(tiers) + bytes(1 if t == 2 else 0 for t in tiers)
    out += b"".join(struct.pack("<d", 0.25 * i) for i in range(n))
    for l in range(layers):
        for i, t in enumerate(tiers):
            size = exact if t <= 1 else t2_bytes if t == 2 else 0
            out += bytes((l * 31 + i * 7 + k) & 0xFF for k in range(size))
    if note is not None:
        out += struct.pack("<I", len(note)) + note
    return out + struct.pack("<Q", fnv(out))


def main():
    qwen = model("qwen2", 8, 2, 1, 16, 1, 1)
    llama = model("llama", 32, 4, 2, 32, 1, 8)
    qwen3 = model("qwen3", 8, 2, 1, 16, 1, 1, hd=8)
    qwen3moe = model("qwen3moe", 32, 4, 2, 32, 1, 8, hd=16, experts=4, used=2, ff_exp=32)
    vocab = gguf([kv("general.architecture", STR, "llama")] + vocab_kvs("llama-bpe"), [])
    for target in ("fuzz_gguf", "fuzz_model"):
        write(target, "tiny-qwen2-f16", qwen)
        write(target, "tiny-llama-q8_0", llama)
        write(target, "tiny-qwen3-f16", qwen3)
        write(target, "tiny-qwen3moe-q8_0", qwen3moe)
        write(target, "vocab-only", vocab)
    write("fuzz_kv_rec", "exact", kv_record([0, 1, 1, 0], 2, 1, 4))
    write("fuzz_kv_rec", "note", kv_record([0, 0, 1], 1, 1, 4, note=b'{"messages":[{"role":"user","content":"hi"}]}'))
    write("fuzz_kv_rec", "tiers", kv_record([0, 1, 2, 3, 1], 2, 2, 4, t2_fmt=2, t2_bytes=2 * 8 + 2 * 2 * 4))
    write("fuzz_json", "data-line.json", '{"id": "gsm8k-test-0001", "question": "2+2?", "answer": "4"}')
    write("fuzz_json", "arc-line.json", '{"id":"a","question":"q","answer_letter":"B","choices":{"label":["A","B"],"text":["x","y"]}}')
    write("fuzz_json", "results-line.json", '{"id":"t-0","output":"so \\\\boxed{5}\\u00e9\\ud83d\\ude00","correct":true,'
          '"strict":null,"seconds":1.5e-3,"kv":{"tokens":[1,0,0,0]},"check":"0123456789abcdef"}')
    write("fuzz_json", "nested.json", "[[[[{\"a\":[1,-2.5e10,true,false,null]}]]]]")
    write("fuzz_tokenizer", "text-plain", b"\x00Hello world, it's 2025! \xc3\xa9t\xc3\xa9  \n\n\ttabs")
    write("fuzz_tokenizer", "text-special", b"\x02<|endoftext|>hi<|endoftext|>")
    write("fuzz_tokenizer", "text-invalid", b"\x04\xff\xfe\xc3\xed\xa0\x80\xf4\x90\x80\x80 ok")
    write("fuzz_tokenizer", "ids", b"\x08" + struct.pack("<8i", 15496, 995, -1, 50256, 1 << 30, 0, 220, 50255))
    write("fuzz_tokenizer", "ids-special", b"\x18" + struct.pack("<4i", 50256, 198, 50256, 11))
    write("fuzz_chat", "chatml-two", b"\x04\x00Be brief.\x1e\x01What is 2+2? <|im_end|>\x1e\x02<think>x</think>4")
    write("fuzz_chat", "r1-think", b"\x05\x01hi\x1e\x02<think>\nhmm\n</think>\n\nok\x1e\x01more")
    write("fuzz_chat", "llama3-trim", b"\x06\x01  spaced  \n\x1e\x03tool\nresult \xff")
    write("fuzz_chat", "llama31-tools", b"\x1e\x05 sys \x1e\x01 <|eot_id|>\x1e\x02x\x1e\x03\"q\"\n\x1e\x02xy")
    write("fuzz_chat", "template", b"\x80" + TEMPLATE.encode())
    write("fuzz_grade", "gsm8k", b"Janet has 3 + 4 = 7 eggs.\n#### 7\nSo the answer is \\boxed{7}.\x007")
    write("fuzz_grade", "math-frac", b"</think>We get \\boxed{\\frac{1}{2}} or 0.5\x00\\dfrac12")
    write("fuzz_grade", "math-units", b"The answer is \\boxed{10\\text{ cm}^2} dollars\x0010")
    write("fuzz_grade", "arc", b"Answer: C. The last letter is B\x00C")
    write("fuzz_grade", "nested", b"\\boxed{\\sqrt{\\frac{3}{\\left(4\\right)}}}\\fbox{x}\x00\\sqrt{3}/2")


if __name__ == "__main__":
    main()
