/* fuzz_gguf.c — libFuzzer target for gguf_parse: any input must parse or fail cleanly; on success
 * every kv, string array element and tensor the index points at must lie inside the input.
 * Build: make fuzz. Run: make fuzz-run FUZZ_SECONDS=N (every target), from the seeds in
 * fuzz/corpus/fuzz_gguf (tiny models, fuzz/make_seeds.py); the loader past the parser is fuzz_model. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

static volatile uint64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file f;
    char err[256];
    if (gguf_parse(data, size, &f, err, sizeof err) != 0) {
        if (!err[0] || f.kv || f.tensors) abort();
        return 0;
    }
    const uint8_t *end = data + size;
    for (uint64_t i = 0; i < f.n_kv; i++) {
        const gguf_kv *kv = &f.kv[i];
        if ((const uint8_t *)kv->key.ptr + kv->key.len > end || kv->data + kv->size > end) abort();
        if (kv->type == GGUF_ARR && kv->arr_type == GGUF_STR) {
            const uint8_t *p = kv->data;
            for (uint64_t k = 0; k < kv->arr_n; k++) {
                gguf_str s = gguf_arr_str_next(&p);
                if (s.len) sink += (uint8_t)s.ptr[s.len - 1];
            }
            if (p != kv->data + kv->size) abort();
        } else if (kv->size) {
            sink += kv->data[kv->size - 1];
        }
        char key[300];
        size_t n = kv->key.len < sizeof key - 1 ? (size_t)kv->key.len : sizeof key - 1;
        memcpy(key, kv->key.ptr, n);
        key[n] = 0;
        uint32_t u32;
        uint64_t u64;
        float x;
        int b;
        gguf_str s;
        sink += (uint64_t)gguf_get_u32(&f, key, &u32, err, sizeof err) + (uint64_t)gguf_get_u64(&f, key, &u64, err, sizeof err) +
                (uint64_t)gguf_get_f32(&f, key, &x, err, sizeof err) + (uint64_t)gguf_get_bool(&f, key, &b, err, sizeof err) +
                (uint64_t)gguf_get_str(&f, key, &s, err, sizeof err);
    }
    for (uint64_t i = 0; i < f.n_tensors; i++) {
        const gguf_tensor *t = &f.tensors[i];
        if (t->data < data || t->data + t->nbytes > end) abort();
        if (t->nbytes) sink += t->data[0] + t->data[t->nbytes - 1];
        if (gguf_find_tensor(&f, "x") == NULL) sink++;
    }
    gguf_free(&f);
    return 0;
}
