/* chat_conv.h — what tierkv chat keeps of a conversation: the messages as the template renders
 * them (the answers as the text generated, cut short or not) and the ids the sequence holds. The
 * two are kept together so that a turn can find which ids its text adds (tools/chat_ids.h). No
 * model and no session here: the caller opens, feeds and drops the sequence. */
#ifndef TKV_TOOLS_CHAT_CONV_H
#define TKV_TOOLS_CHAT_CONV_H
#include <stddef.h>
#include <stdint.h>

#include "tierkv.h"

typedef struct {
    tkv_chat_msg *msgs;  /* [n_msgs] in order; contents malloc'd, roles static strings */
    int n_msgs, cap_msgs;
    int n_system;        /* 1 when msgs[0] is the --system one (a new conversation keeps it) */
    int32_t *held;       /* [n_ctx + 1]: the ids the sequence holds, in order, and room for pending */
    int n_held;
    int32_t pending;     /* -1, or the end-of-generation token that closed the last answer: sampled,
                            not fed yet (the next turn feeds it when its text holds it) */
} chat_conv;

/* system NULL: the template's own; n_ctx: the most ids the sequence may hold. */
void chat_conv_init(chat_conv *v, const char *system, int n_ctx);
/* Appends a message with a copy of text[0..len) (role: a static string). */
void chat_conv_add(chat_conv *v, const char *role, const char *text, size_t len);
/* Removes the last message (a turn refused). */
void chat_conv_pop(chat_conv *v);
/* Back to the system message alone; the held ids are left to the caller (it drops the sequence). */
void chat_conv_reset(chat_conv *v);
void chat_conv_free(chat_conv *v);

#endif
