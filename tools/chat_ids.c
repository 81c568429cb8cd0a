/* chat_ids.c — the ids a conversation adds after the held ones (see chat_ids.h). */
#include "chat_ids.h"

#include <stdlib.h>
#include <string.h>

int chat_ids_after(const tkv_model *m, const int32_t *held, int n_held, const char *text, size_t len, int32_t **out) {
    *out = NULL;
    size_t n_done = 0;
    if (n_held > 0) {
        char *done = tkv_detokenize(m, held, n_held, 1, &n_done);
        if (!done) return TKV_ERR;
        int prefix = n_done <= len && !memcmp(done, text, n_done);
        free(done);
        if (!prefix) return CHAT_IDS_NOT_PREFIX;
    }
    if (n_done == len) return 0;
    return tkv_tokenize_alloc(m, text + n_done, len - n_done, TKV_TOK_PARSE_SPECIAL, out);
}
