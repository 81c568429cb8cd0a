/* tokenizer_impl.h - the inside of tok_vocab, shared by tokenizer.c (loading, lookups, decoding)
 * and tokenizer_encode.c (special-token split, pre-tokenizer, BPE). Not for other modules. */
#ifndef TKV_TOKENIZER_IMPL_H
#define TKV_TOKENIZER_IMPL_H
#include <stdint.h>

#include "model/pretok.h"
#include "model/tokenizer.h"

typedef struct {
    uint32_t off;   /* into merge_text: "A B" as stored */
    uint32_t len_a; /* bytes of A; B starts at len_a + 1 */
    uint32_t len;   /* bytes of "A B" */
    int32_t rank;   /* -1: empty slot */
} tok_merge;

struct tok_vocab {
    int n;                    /* tokens */
    char *text;               /* token texts as stored (byte alphabet), NUL after each */
    uint32_t *text_off;       /* [n] */
    uint32_t *text_len;       /* [n] */
    uint8_t *type;            /* [n] TOK_TYPE_* */
    char *piece;              /* decoded bytes of every token (5.7); CONTROL/UNKNOWN hold their text */
    uint32_t *piece_off;      /* [n] */
    uint32_t *piece_len;      /* [n] */
    int max_piece;
    int32_t *id_hash;         /* open addressing text -> id, -1 empty; size id_mask + 1 */
    uint32_t id_mask;
    char *merge_text;         /* all merges, "A B" each, NUL after each */
    tok_merge *merges;        /* open addressing on ("A","B"); size merge_mask + 1 */
    uint32_t merge_mask;
    int32_t *special;         /* CONTROL/USER_DEFINED/UNKNOWN ids, longest text first */
    int n_special;
    int32_t *eog;             /* end-of-generation ids, sorted */
    int n_eog;
    tok_pre pre;
    int ignore_merges;        /* llama-bpe: a word that is a whole token skips BPE */
    char pre_name[32];
    int32_t bos, eos, eot, eom;
    int add_bos, add_eos;
};

uint64_t tok_hash_bytes(uint64_t h, const char *s, size_t n);
#define TOK_HASH_SEED 0xcbf29ce484222325ull
/* rank of merging A and B, -1 if there is no such merge */
int32_t tok_merge_rank(const tok_vocab *v, const char *a, size_t na, const char *b, size_t nb);

#endif
