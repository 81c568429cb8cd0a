/* chat_ids.h — the token ids a conversation adds to what a sequence already holds, a rule shared by
 * the commands that keep one sequence across turns (tierkv chat; the server may use it later).
 *
 * A sequence holds ids, some sampled by the model: tokenizing the same text again need not give
 * those ids (BPE has many spellings of one text), and changing them would mean computing their KV
 * again and answering from another context. So the held ids are kept as they are and only the text
 * after them is tokenized: when the held ids detokenize (special tokens as their text) to a byte
 * prefix of the rendered conversation, the new ids are the tokens of the rest of it, special-token
 * text read as special tokens (the template's own markers are written as text). When they do not (a
 * template that rewrites earlier turns, such as DeepSeek-R1's and Qwen3's dropping of earlier
 * reasoning), the caller starts the sequence again from the whole text.
 * Pure: it reads only the model's immutable vocabulary; no session, no state. */
#ifndef TKV_TOOLS_CHAT_IDS_H
#define TKV_TOOLS_CHAT_IDS_H
#include <stddef.h>
#include <stdint.h>

#include "tierkv.h"

enum { CHAT_IDS_NOT_PREFIX = -2 };

/* The ids of text[0..len) after held[0..n_held) (n_held 0: all of text) in *out (malloc'd, NULL
 * when none; free() it). Returns their count (0 when the held ids are the whole text),
 * CHAT_IDS_NOT_PREFIX when the held ids do not spell a prefix of the text (*out NULL), or TKV_ERR
 * for a held id out of range or a text the tokenizer refuses. */
int chat_ids_after(const tkv_model *m, const int32_t *held, int n_held, const char *text, size_t len, int32_t **out);

#endif
