/* chat_conv.c — the messages and held ids of a conversation (see chat_conv.h). */
#include "chat_conv.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

void chat_conv_init(chat_conv *v, const char *system, int n_ctx) {
    memset(v, 0, sizeof *v);
    v->held = tkv_xmalloc(((size_t)n_ctx + 1) * sizeof *v->held);
    v->pending = -1;
    if (system) chat_conv_add(v, "system", system, strlen(system)), v->n_system = 1;
}

void chat_conv_add(chat_conv *v, const char *role, const char *text, size_t len) {
    if (v->n_msgs == v->cap_msgs) {
        v->cap_msgs = v->cap_msgs ? 2 * v->cap_msgs : 16;
        v->msgs = tkv_xrealloc(v->msgs, (size_t)v->cap_msgs * sizeof *v->msgs);
    }
    char *c = tkv_xmalloc(len + 1);
    memcpy(c, text, len);
    c[len] = 0;
    v->msgs[v->n_msgs++] = (tkv_chat_msg){.role = role, .content = c};
}

void chat_conv_pop(chat_conv *v) {
    TKV_ASSERT(v->n_msgs > v->n_system);
    free((char *)v->msgs[--v->n_msgs].content);
}

void chat_conv_reset(chat_conv *v) {
    while (v->n_msgs > v->n_system) chat_conv_pop(v);
}

void chat_conv_free(chat_conv *v) {
    for (int i = 0; i < v->n_msgs; i++) free((char *)v->msgs[i].content);
    free(v->msgs);
    free(v->held);
    memset(v, 0, sizeof *v);
}
