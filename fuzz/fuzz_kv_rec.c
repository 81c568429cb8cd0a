/* fuzz_kv_rec.c — libFuzzer target for the sequence record parser (src/kv/kv_rec.c: parked
 * conversations and saved chats come from disk and from shared stores). The input is parsed as it is,
 * and again with its checksum made good (so the fuzzer reaches the checks behind it). Checks: nothing
 * crashes or reads out of bounds (ASan); an accepted record's arrays and rows lie inside the input and
 * add up to its length; the head alone accepts whatever the whole parse accepts. Seeds:
 * fuzz/corpus/fuzz_kv_rec (fuzz/make_seeds.py). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/version.h"
#include "kv/kv_rec.h"

static void one(const uint8_t *p, size_t n) {
    kv_rec r, h;
    if (kv_rec_parse(p, n, &r, NULL, 0)) return;
    TKV_ASSERT(kv_rec_parse_head(p, n, &h, NULL, 0) == 0 && h.n == r.n && h.tokens == r.tokens);
    TKV_ASSERT(r.tokens == p + KV_REC_HEAD && kv_rec_tokens_end(&r) <= n);
    uint64_t per_layer = 0;
    double sum = 0;
    for (uint32_t i = 0; i < r.n; i++) {
        TKV_ASSERT(r.tier[i] <= 3 && r.lossy[i] <= 3);
        per_layer += kv_rec_row_bytes(&r, i);
        sum += kv_rec_score(&r, i) + (double)kv_rec_token(&r, i);
    }
    TKV_ASSERT(sum == sum && per_layer * r.n_layer == r.rows_bytes);
    size_t note = r.note ? 4 + (size_t)r.note_len : 0;
    TKV_ASSERT(r.rows + r.rows_bytes + note + 8 == p + n);
    TKV_ASSERT(!r.note || (r.note == r.rows + r.rows_bytes + 4 && (r.flags & KV_REC_NOTE)));
    if (r.note_len) TKV_ASSERT(r.note[r.note_len - 1] == r.note[r.note_len - 1]);
    if (r.rows_bytes) TKV_ASSERT(r.rows[r.rows_bytes - 1] == r.rows[r.rows_bytes - 1]); /* the last row byte is readable */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    one(data, size);
    if (size < 8 || size > (1u << 20)) return 0;
    uint8_t *c = malloc(size);
    memcpy(c, data, size);
    uint64_t h = tkv_fnv1a64(c, size - 8);
    for (int i = 0; i < 8; i++) c[size - 8 + i] = (uint8_t)(h >> (8 * i));
    one(c, size);
    free(c);
    return 0;
}
