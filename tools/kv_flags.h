/* kv_flags.h — the KV hierarchy flags shared by run, logits, bench, eval and serve. Only mains parse
 * flags; this fills the public tkv_kv_params (include/tierkv.h). Values go in the next argument or after '='
 * (--hbm-ratio 0.25, --hbm-ratio=0.25).
 *
 *   --policy NAME        full | hierarchy | evict | quant | streaming | h2o | rkv | snapkv
 *   --hbm-ratio R        T0 share of the current length, 0..1
 *   --hbm-budget SIZE    T0 bytes for all live sequences together: 4096, 4096B, 64KB,
 *                        1.5GB (powers of 1000), 256KiB, 256MiB, 2GiB (powers of 1024); K/M/G alone
 *                        mean KiB/MiB/GiB. No token unit: bytes per token depend on the model
 *                        (tierkv plan prints them); use --hbm-ratio for a share of tokens.
 *   --t2-ratio R, --evict-ratio R   shares of the current length, 0..1
 *   --delta N, --sinks N, --window N
 *   --t0-tokens N        T0 tokens per sequence
 *   --staged, --split, --sync-transfers, --protect-prompt   switches */
#ifndef TKV_TOOLS_KV_FLAGS_H
#define TKV_TOOLS_KV_FLAGS_H
#include <stddef.h>
#include <stdint.h>

#include "tierkv.h"

/* Consumes the flag at argv[*i] (and its value, advancing *i to the last argument used).
 * Returns 1 if consumed, 0 if it is not a kv flag, -1 on a bad value (message in err). */
int kv_flags_parse(tkv_kv_params *o, int argc, char **argv, int *i, char *err, size_t errlen);
/* Usage lines for the flags above (two spaces of indent, newline-terminated). */
const char *kv_flags_usage(void);
/* Parses a size as above into bytes; 0 ok, -1 bad. */
int kv_flags_parse_size(const char *s, uint64_t *out);

#endif
