/* tokenizer.h - byte-level BPE read from a GGUF vocabulary (FORMATS.md 5): the tokenizer.ggml.*
 * keys give the tokens, merges, token types, pre-tokenizer and special ids. Encoding follows
 * llama.cpp's tokenize(text, add_special, parse_special); decoding streams, holding back a UTF-8
 * character split across tokens until it is whole.
 *
 * Invariants: a loaded tok_vocab is immutable and owns copies of everything it needs (the gguf_file
 * may be freed after tok_load), so one vocab can serve any number of threads.
 * UTF-8 policy: input is decoded strictly; every byte that does not start a valid character becomes
 * U+FFFD (FORMATS.md 5.2; overlongs, surrogates and > U+10FFFF count as invalid). Decoded output is
 * always valid UTF-8 by the same rule, so decode(encode(s)) == s for valid s.
 * Not done here: SentencePiece vocabularies (tokenizer.ggml.model "llama"), the lstrip/rstrip token
 * attributes of other families, clean_up_tokenization_spaces. */
#ifndef TKV_TOKENIZER_H
#define TKV_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

typedef struct tok_vocab tok_vocab;

/* tokenizer.ggml.token_type values */
enum {
    TOK_TYPE_UNDEFINED = 0, TOK_TYPE_NORMAL = 1, TOK_TYPE_UNKNOWN = 2, TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4, TOK_TYPE_UNUSED = 5, TOK_TYPE_BYTE = 6,
};

/* Loads the vocabulary. Fails (NULL + message) on a model other than "gpt2", a missing or unknown
 * tokenizer.ggml.pre (no silent fallback), malformed arrays, or a special-token key of the wrong
 * type (an id that is no integer, an add_*_token that is no bool; an id out of range is ignored, as
 * in llama.cpp). Free with tok_free. */
tok_vocab *tok_load(const gguf_file *f, char *err, size_t errlen);
void tok_free(tok_vocab *v);

int tok_n_vocab(const tok_vocab *v);
const char *tok_pre_name(const tok_vocab *v);           /* the tokenizer.ggml.pre value */
int tok_type(const tok_vocab *v, int32_t id);           /* TOK_TYPE_*, after EOG/EOT detection forced CONTROL */
const char *tok_text(const tok_vocab *v, int32_t id, size_t *len); /* as stored (byte alphabet) */
int32_t tok_find(const tok_vocab *v, const char *text, size_t len); /* exact stored text -> id, -1 */

/* Special ids; -1 when the file has none. */
int32_t tok_bos(const tok_vocab *v);
int32_t tok_eos(const tok_vocab *v);
int32_t tok_eot(const tok_vocab *v);
int tok_add_bos(const tok_vocab *v);   /* from tokenizer.ggml.add_bos_token, else the pre's default */
int tok_is_eog(const tok_vocab *v, int32_t id); /* end of generation: EOS, EOT, EOM, <|im_end|>, FIM pad/sep ... */

/* Encoding flags. TOK_PARSE_SPECIAL: CONTROL tokens written in the text become their ids (chat
 * prompts); without it only USER_DEFINED tokens do (as in llama.cpp), so user text cannot inject
 * <|im_end|>. TOK_ADD_SPECIAL: BOS in front when tok_add_bos (never a second one when the text
 * already starts with BOS), EOS at the end when add_eos. */
enum { TOK_ADD_SPECIAL = 1, TOK_PARSE_SPECIAL = 2 };

/* Encodes text[0..len) and writes up to cap ids to out. Returns the total number of ids, which may
 * be more than cap: then call again with a larger buffer (or use tok_encode_alloc). There is no
 * bound of ids per byte to size a buffer with: an invalid byte becomes U+FFFD, three bytes of the
 * byte alphabet, so up to three tokens (six in a vocabulary without some single-byte tokens).
 * Returns -1 only if len > TOK_MAX_TEXT, which keeps every count below INT_MAX. */
#define TOK_MAX_TEXT ((size_t)256 << 20)
int tok_encode(const tok_vocab *v, const char *text, size_t len, int flags, int32_t *out, int cap);

/* tok_encode with TOK_PARSE_SPECIAL for a rendered chat prompt: CONTROL/UNKNOWN token text that
 * overlaps one of the n_lit byte ranges [lit[2i], lit[2i+1]) (the messages' content) stays text, so
 * a user cannot inject <|im_end|>, while the text is still one stream for the pre-tokenizer (the
 * ids equal tok_encode's whenever the content holds no special-token text). */
int tok_encode_protected(const tok_vocab *v, const char *text, size_t len, int flags, const size_t *lit,
                         int n_lit, int32_t *out, int cap);
/* tok_encode_protected (lit may be NULL, n_lit 0) into a malloc'd array that fits every id (*out,
 * freed by the caller; set even for 0 ids). Returns the count, or -1 (and *out NULL) if len > TOK_MAX_TEXT. */
int tok_encode_alloc(const tok_vocab *v, const char *text, size_t len, int flags, const size_t *lit, int n_lit,
                     int32_t **out);

/* The bytes token id stands for (FORMATS.md 5.7): NORMAL maps back through the byte alphabet,
 * USER_DEFINED is its text, CONTROL/UNKNOWN are their text only when special != 0, others nothing.
 * *bytes points into the vocab. Returns the length, -1 for an id out of range. The bytes may be a
 * part of a UTF-8 character: use tok_stream to print them. */
int tok_piece(const tok_vocab *v, int32_t id, int special, const char **bytes);
int tok_max_piece(const tok_vocab *v); /* longest piece, special text included */

/* Streaming detokenizer: turns piece bytes into valid UTF-8, holding back an incomplete character
 * (at most 3 bytes) until the next piece completes it. Bytes that cannot start or continue a valid
 * character become U+FFFD, one per byte. Zero-initialise or call tok_stream_init. */
typedef struct {
    unsigned char hold[4]; /* the incomplete character seen so far */
    int n_hold;
} tok_stream;
void tok_stream_init(tok_stream *s);
/* Writes at most TOK_STREAM_OUT(len) bytes to out and returns how many. */
#define TOK_STREAM_OUT(len) (3 * ((size_t)(len) + 4))
size_t tok_stream_feed(tok_stream *s, const char *bytes, size_t len, char *out);
/* Convenience: feeds tok_piece(id); out needs TOK_STREAM_OUT(tok_max_piece(v)) bytes. */
size_t tok_stream_token(tok_stream *s, const tok_vocab *v, int32_t id, int special, char *out);
/* End of text: held bytes become U+FFFD each (at most 9 bytes written). */
size_t tok_stream_flush(tok_stream *s, char *out);

/* Whole-sequence decode into a malloc'd NUL-terminated string (length in *len if non-NULL). */
char *tok_decode(const tok_vocab *v, const int32_t *ids, int n, int special, size_t *len);

#endif
