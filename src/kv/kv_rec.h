/* kv_rec.h — the record of one sequence kept outside memory (a parked conversation, a saved chat):
 * its tokens, where each position lay (tier, lossy flag), its scores and its rows, with what it
 * belongs to (the model's identity, the row formats, the shape). Pure: bytes in, fields out; the
 * parser checks every size against the buffer before it reads and is fuzzed (fuzz/fuzz_kv_rec.c).
 *
 * Layout, little-endian, version 1:
 *   "TKVREC01"                       8 bytes
 *   u32 version (1), u32 flags (0, or KV_REC_NOTE)
 *   u64 model identity, u64 salt
 *   u32 n_layer, n_head_kv, head_dim
 *   u32 exact format (BE_KV_F32 or BE_KV_F16), u32 T2 format (a be_kv_fmt, or KV_REC_NO_T2)
 *   u32 exact record bytes, u32 T2 record bytes (per layer and position: what the formats say)
 *   u32 n (positions)
 *   i32 tokens[n], u8 tier[n] (0..3), u8 flags[n] (bit 0 lossy, bit 1 stale), f64 score[n] (finite, >= 0)
 *   rows: for each layer, for each position in order, its record (T0/T1: the exact format's bytes,
 *         T2: the T2 format's, T3: none)
 *   with KV_REC_NOTE: u32 length, then that many bytes of the caller's (a chat's messages), at most 16 MiB
 *   u64 FNV-1a of every byte before it (tkv_fnv1a64, base/version.h)
 * Refused: another magic or version, a size that does not add up, a value out of range, a checksum
 * that does not match (a flipped byte), a truncated or over-long buffer. */
#ifndef TKV_KV_REC_H
#define TKV_KV_REC_H
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

enum { KV_REC_VERSION = 1, KV_REC_NO_T2 = 0xFFFFFFFFu, KV_REC_HEAD = 64, KV_REC_NOTE = 1, KV_REC_NOTE_MAX = 1 << 24 };

typedef struct kv_rec {
    uint64_t model, salt;
    uint32_t n_layer, n_head_kv, head_dim;
    uint32_t exact_fmt, t2_fmt;
    uint32_t exact_bytes, t2_bytes; /* per layer and position */
    uint32_t n;
    const uint8_t *tokens;  /* [n] i32, unaligned: kv_rec_token() */
    const uint8_t *tier;    /* [n] */
    const uint8_t *lossy;   /* [n] bit 0: went through T2; bit 1: stale (ranked last) */
    const uint8_t *score;   /* [n] f64, unaligned: kv_rec_score() */
    const uint8_t *rows;    /* the rows' bytes */
    uint64_t rows_bytes;
    uint32_t flags;         /* KV_REC_NOTE: a note follows the rows */
    const uint8_t *note;    /* the caller's bytes, or NULL */
    uint32_t note_len;
} kv_rec;

/* Checks buf[0..len) whole (its checksum too) and points rec's arrays into it. 0, or -1 with a
 * message naming what is wrong. */
int kv_rec_parse(const void *buf, size_t len, kv_rec *rec, char *err, size_t errlen);
/* The fixed head alone (the first KV_REC_HEAD bytes: identity, salt, shape, n), for an index that
 * reads no rows; the tokens follow it (kv_rec_tokens_end bytes from the start). 0 or -1. */
int kv_rec_parse_head(const void *buf, size_t len, kv_rec *rec, char *err, size_t errlen);
size_t kv_rec_tokens_end(const kv_rec *rec);
int32_t kv_rec_token(const kv_rec *rec, uint32_t i);
double kv_rec_score(const kv_rec *rec, uint32_t i);
/* The bytes of one layer's row of position i in rec->rows, for records whose arrays are filled. */
uint64_t kv_rec_row_bytes(const kv_rec *rec, uint32_t i);

/* Writing: the head and the per-position arrays (tokens, tiers, lossy flags, scores); then the
 * caller appends the rows (layer by layer, positions in order), then the checksum (kv_rec_finish). */
void kv_rec_write_head(tkv_buf *b, const kv_rec *rec, const int32_t *tokens, const uint8_t *tier, const uint8_t *lossy,
                       const double *score);
void kv_rec_finish(tkv_buf *b, const void *note, uint32_t note_len); /* the note when rec->flags has KV_REC_NOTE */

#endif
