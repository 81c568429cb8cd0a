/* kv_rec.c — the sequence record (see kv_rec.h). Every read is checked against the bytes left. */
#include "kv/kv_rec.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "backend/backend.h"
#include "base/err.h"
#include "base/version.h"

static const char MAGIC[8] = {'T', 'K', 'V', 'R', 'E', 'C', '0', '1'};


static uint32_t u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t u64(const uint8_t *p) { return (uint64_t)u32(p) | (uint64_t)u32(p + 4) << 32; }

int32_t kv_rec_token(const kv_rec *rec, uint32_t i) { return (int32_t)u32(rec->tokens + 4 * (size_t)i); }

double kv_rec_score(const kv_rec *rec, uint32_t i) {
    uint64_t v = u64(rec->score + 8 * (size_t)i);
    double d;
    memcpy(&d, &v, sizeof d);
    return d;
}

uint64_t kv_rec_row_bytes(const kv_rec *rec, uint32_t i) {
    uint8_t t = rec->tier[i];
    return t <= 1 ? rec->exact_bytes : t == 2 ? rec->t2_bytes : 0;
}

size_t kv_rec_tokens_end(const kv_rec *rec) { return KV_REC_HEAD + 4 * (size_t)rec->n; }

int kv_rec_parse_head(const void *buf, size_t len, kv_rec *rec, char *err, size_t errlen) {
    const uint8_t *p = buf;
    memset(rec, 0, sizeof *rec);
    if (len < KV_REC_HEAD) return tkv_errf(err, errlen, "record: %zu bytes, shorter than its %d-byte head", len, KV_REC_HEAD);
    if (memcmp(p, MAGIC, sizeof MAGIC)) return tkv_errf(err, errlen, "record: not a tierkv sequence record (bad magic)");
    uint32_t version = u32(p + 8), flags = u32(p + 12);
    rec->flags = flags;
    if (version != KV_REC_VERSION || (flags & ~(uint32_t)KV_REC_NOTE))
        return tkv_errf(err, errlen, "record: version %u flags %u; this build reads version %d", version, flags, KV_REC_VERSION);
    rec->model = u64(p + 16);
    rec->salt = u64(p + 24);
    rec->n_layer = u32(p + 32), rec->n_head_kv = u32(p + 36), rec->head_dim = u32(p + 40);
    rec->exact_fmt = u32(p + 44), rec->t2_fmt = u32(p + 48);
    rec->exact_bytes = u32(p + 52), rec->t2_bytes = u32(p + 56);
    rec->n = u32(p + 60);
    if (rec->n_layer < 1 || rec->n_layer > 4096 || rec->n_head_kv < 1 || rec->head_dim < 1 ||
        (uint64_t)rec->n_head_kv * rec->head_dim > 8192 || rec->n < 1 || rec->n > (1u << 24))
        return tkv_errf(err, errlen, "record: shape out of range (layers %u, kv heads %u, head dim %u, %u positions)",
                        rec->n_layer, rec->n_head_kv, rec->head_dim, rec->n);
    if ((rec->exact_fmt != BE_KV_F32 && rec->exact_fmt != BE_KV_F16) ||
        rec->exact_bytes != be_kv_record_bytes((be_kv_fmt)rec->exact_fmt, (int)rec->n_head_kv, (int)rec->head_dim))
        return tkv_errf(err, errlen, "record: exact rows of format %u and %u bytes do not match", rec->exact_fmt, rec->exact_bytes);
    if (rec->t2_fmt != KV_REC_NO_T2 &&
        (rec->t2_fmt <= BE_KV_F16 || rec->t2_fmt > 64 || rec->t2_bytes == 0 ||
         rec->t2_bytes != be_kv_record_bytes((be_kv_fmt)rec->t2_fmt, (int)rec->n_head_kv, (int)rec->head_dim)))
        return tkv_errf(err, errlen, "record: T2 rows of format %u and %u bytes do not match", rec->t2_fmt, rec->t2_bytes);
    if (rec->t2_fmt == KV_REC_NO_T2 && rec->t2_bytes)
        return tkv_errf(err, errlen, "record: T2 rows of %u bytes without a T2 format", rec->t2_bytes);
    if (len >= kv_rec_tokens_end(rec)) rec->tokens = p + KV_REC_HEAD;
    return 0;
}

int kv_rec_parse(const void *buf, size_t len, kv_rec *rec, char *err, size_t errlen) {
    if (kv_rec_parse_head(buf, len, rec, err, errlen)) return -1;
    const uint8_t *p = buf;
    size_t n = rec->n, at = KV_REC_HEAD;
    size_t arrays = n * (4 + 1 + 1 + 8);
    if (len - at < arrays + 8) return tkv_errf(err, errlen, "record: truncated in its %u positions' arrays", rec->n);
    rec->tokens = p + at, at += 4 * n;
    rec->tier = p + at, at += n;
    rec->lossy = p + at, at += n;
    rec->score = p + at, at += 8 * n;
    uint64_t per_layer = 0;
    for (uint32_t i = 0; i < rec->n; i++) {
        if (rec->tier[i] > 3 || rec->lossy[i] > 3)
            return tkv_errf(err, errlen, "record: position %u has tier %u, flags %u", i, rec->tier[i], rec->lossy[i]);
        if (rec->tier[i] == 2 && rec->t2_fmt == KV_REC_NO_T2)
            return tkv_errf(err, errlen, "record: position %u is in T2 and the record has no T2 format", i);
        double s = kv_rec_score(rec, i);
        if (!isfinite(s) || s < 0) return tkv_errf(err, errlen, "record: position %u has score %g", i, s);
        per_layer += kv_rec_row_bytes(rec, i);
    }
    rec->rows_bytes = per_layer * rec->n_layer; /* < 2^24 positions x 2^16 bytes x 2^12 layers: no overflow */
    uint64_t after = rec->rows_bytes + 8;
    if (rec->flags & KV_REC_NOTE) {
        if ((uint64_t)(len - at) < rec->rows_bytes + 4 + 8) return tkv_errf(err, errlen, "record: truncated before its note");
        rec->note_len = u32(p + at + rec->rows_bytes);
        if (rec->note_len > KV_REC_NOTE_MAX) return tkv_errf(err, errlen, "record: a note of %u bytes", rec->note_len);
        rec->note = p + at + rec->rows_bytes + 4;
        after += 4 + (uint64_t)rec->note_len;
    }
    if ((uint64_t)(len - at) != after)
        return tkv_errf(err, errlen, "record: %zu bytes after the arrays, its rows%s and checksum take %llu", len - at,
                        rec->flags & KV_REC_NOTE ? ", note" : "", (unsigned long long)after);
    rec->rows = p + at;
    uint64_t want = u64(p + len - 8), got = tkv_fnv1a64(p, len - 8);
    if (want != got) return tkv_errf(err, errlen, "record: checksum mismatch (a corrupted record)");
    return 0;
}

static void put32(tkv_buf *b, uint32_t v) { tkv_buf_le(b, v, 4); }
static void put64(tkv_buf *b, uint64_t v) { tkv_buf_le(b, v, 8); }

void kv_rec_write_head(tkv_buf *b, const kv_rec *rec, const int32_t *tokens, const uint8_t *tier, const uint8_t *lossy,
                       const double *score) {
    tkv_buf_add(b, MAGIC, sizeof MAGIC);
    put32(b, KV_REC_VERSION), put32(b, rec->flags & KV_REC_NOTE);
    put64(b, rec->model), put64(b, rec->salt);
    put32(b, rec->n_layer), put32(b, rec->n_head_kv), put32(b, rec->head_dim);
    put32(b, rec->exact_fmt), put32(b, rec->t2_fmt), put32(b, rec->exact_bytes), put32(b, rec->t2_bytes);
    put32(b, rec->n);
    for (uint32_t i = 0; i < rec->n; i++) put32(b, (uint32_t)tokens[i]);
    tkv_buf_add(b, tier, rec->n);
    tkv_buf_add(b, lossy, rec->n);
    for (uint32_t i = 0; i < rec->n; i++) {
        uint64_t v;
        memcpy(&v, &score[i], sizeof v);
        put64(b, v);
    }
}

void kv_rec_finish(tkv_buf *b, const void *note, uint32_t note_len) {
    if (note) {
        put32(b, note_len);
        tkv_buf_add(b, note, note_len);
    }
    put64(b, tkv_fnv1a64(b->p, b->n));
}
