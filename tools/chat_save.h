/* chat_save.h — tierkv chat's /save and /load: the conversation's sequence as a record
 * (tkv_seq_save_note: the rows as the tiers hold them, the model's identity, a checksum) whose note
 * holds the messages, so a new process continues it without recomputing anything. The note is JSON:
 * {"messages": [{"role": ..., "content": ...}], "n_system": 0|1, "pending": id or -1}. Files are
 * written 0600 under a temporary name and renamed. */
#ifndef TKV_TOOLS_CHAT_SAVE_H
#define TKV_TOOLS_CHAT_SAVE_H
#include <stddef.h>

#include "chat_conv.h"
#include "tierkv.h"

int chat_save(tkv_session *s, int seq, const chat_conv *v, const char *path, char *err, size_t errlen);
/* Reads path into a new sequence of n_ctx positions (*seq) and replaces v's messages and held ids
 * with the file's; on failure nothing of v or the session changes. */
int chat_load(tkv_session *s, const tkv_model *m, int n_ctx, const char *path, chat_conv *v, int *seq, char *err,
              size_t errlen);

#endif
