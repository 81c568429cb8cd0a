/* stats.c (engine) — statistics of a session through the public API (per live sequence since it
 * opened, or the session: live sequences plus the counters of closed ones), their printing, and the
 * capacity plan of `tierkv plan`. Reads the KV module's counters; changes nothing. */
#include <string.h>

#include "base/err.h"
#include "engine/engine.h"

int tkv_stats_get(const tkv_session *s, int seq, tkv_stats *out, char *err, size_t errlen) {
    if (seq >= 0 && !kv_seq_live(s->kv, seq)) return tkv_errf(err, errlen, "sequence %d is not open", seq);
    kv_get_stats(s->kv, seq, out); /* kv_stats is tkv_stats */
    return 0;
}

void tkv_sync(tkv_session *s) { kv_sync(s->kv); }

uint64_t tkv_expert_bytes_read(const tkv_session *s) { return fwd_expert_bytes(s->fw); }

uint64_t tkv_read_back_bytes(const tkv_session *s, uint64_t *reads) {
    uint64_t fr, kr, b = fwd_read_back_bytes(s->fw, &fr) + kv_scores_read_back(s->kv, &kr, NULL);
    if (reads) *reads = fr + kr;
    return b;
}
uint64_t tkv_split_sent_bytes(const tkv_session *s) { return fwd_split_sent_bytes(s->fw); }
double tkv_host_wait_seconds(const tkv_session *s) {
    be_backend *be = s->model->be;
    return be && be->ops->host_wait_seconds ? be->ops->host_wait_seconds(be) : 0;
}

void tkv_stats_print(FILE *f, const tkv_session *s, int seq) { kv_stats_print(f, s->kv, seq); }

void tkv_retier_log_print(FILE *f, const tkv_session *s) { kv_retier_log_print(f, s->kv); }

int tkv_stats_write_json(FILE *f, const tkv_session *s) {
    kv_stats_write_json(f, s->kv);
    return ferror(f) || fflush(f) ? -1 : 0;
}

int64_t tkv_token_bytes(const tkv_session *s, int tier) { return kv_token_bytes(s->kv, tier); }

/* ---- plan: the KV module's own budget rules ---- */

int tkv_plan(const tkv_shape *sh, const tkv_kv_params *kv, int batch, int ctx, int prompt, tkv_plan_result *out,
             char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    kv_options o;
    if (engine_kv_options_checked(kv, "cuda", &o, err, errlen)) return TKV_ERR; /* plans fast memory: a GPU's */
    o.n_layer = sh->n_layer;
    o.n_head = sh->n_head;
    o.n_head_kv = sh->n_head_kv;
    o.head_dim = sh->head_dim;
    kv_plan_result r;
    if (kv_plan(&o, batch, ctx, prompt, &r, err, errlen)) return TKV_ERR;
    for (int t = 0; t < 3; t++) out->token_bytes[t] = r.token_bytes[t];
    out->t0_tokens = r.t0, out->t1_tokens = r.t1, out->t2_tokens = r.t2, out->t3_tokens = r.t3;
    out->t0_bytes_total = r.t0_bytes_total;
    out->stage_bytes_total = r.stage_bytes_total;
    out->t0_raised = r.raised;
    out->protected_tokens = r.protected_tokens;
    return 0;
}
