/* cuda_prof.cu — TIERKV_CUDA_PROFILE=1: where a step's device time goes. Every op that queues work
 * on the compute stream is bracketed by two timing events (the op table is swapped for wrappers
 * that call the real ops: nothing changes when the variable is unset); at close the backend prints,
 * per phase (decode: calls of up to MM_NT tokens; prefill: larger ones, the phase set by each call's
 * embed) and per op, the calls, the device time between the op's events, and the gap before it: the
 * time the stream stood between the previous op's end and this op's start (waiting for the host to
 * queue it, for a copy_wait's event, or for the host between calls). Lines on stderr:
 *   tierkv cuda-profile {"phase":"decode","op":"matmul_1","calls":..,"device_ms":..,"gap_before_ms":..}
 * and one "op":"all" line per phase with its steps. The events cost a little time themselves: a
 * profiled run's tok/s is not the run's. The transfer thread's copies (copy stream) are not timed
 * here (copy_stall_seconds and copy_wait's own line say how long the compute stream waited). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <type_traits>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_mm.h"
extern "C" {
#include "base/err.h"
}

enum {
    P_EMBED, P_MM1, P_MM8, P_MMN, P_RMSNORM, P_ADD_BIAS, P_ADD, P_ADD_RMSNORM, P_ROPE, P_SWIGLU, P_GATHER,
    P_COMBINE, P_EXPAND, P_KV_WRITE, P_KV_READ, P_COPY_WAIT, P_ATTN, P_MERGE, P_SCORE, P_UPLOAD, P_UPLOAD_PINNED,
    P_READ, P_ROUTE, P_MM_SEL, P_COMBINE_PAIRS, P_N
};
static const char *const P_NAME[P_N] = {
    "embed", "matmul_1", "matmul_2_8", "matmul_many", "rmsnorm", "add_bias", "add", "add_rmsnorm", "rope", "swiglu", "gather_rows",
    "combine_rows", "expand_cols", "kv_write", "kv_read", "copy_wait", "attention", "attention_merge", "score_add",
    "upload", "upload_pinned", "read", "route", "matmul_sel", "combine_pairs"};
#define PROF_PAIRS 4096 /* event pairs in flight; the oldest is waited for when they are all in use */

struct cu_prof {
    be_ops real; /* the ops the wrappers call */
    pthread_mutex_t lock;
    cudaEvent_t ev[PROF_PAIRS][2];
    uint8_t op[PROF_PAIRS], phase[PROF_PAIRS], ended[PROF_PAIRS];
    uint64_t next, done; /* pairs [done, next) taken and not yet read; done - 1's end stays valid */
    uint64_t untimed;    /* ops not timed: every pair taken by ops still open on other threads */
    int cur_phase;       /* 0 decode, 1 prefill */
    double dev_ms[2][P_N], gap_ms[2][P_N];
    uint64_t calls[2][P_N], steps[2];
};

int cu_prof_choice(int *on, char *err, size_t errlen) { return cu_env_switch("TIERKV_CUDA_PROFILE", "0", "1", on, err, errlen); }

/* reads pair done (waiting for the device when wait) and the gap after the pair before it; false if
 * its op has not ended (nothing to wait for yet) or, without wait, the device is not there yet */
static bool collect_one(cu_prof *P, bool wait) {
    const uint64_t i = P->done % PROF_PAIRS;
    if (!P->ended[i]) return false;
    if (wait) CUDA_CHECK(cudaEventSynchronize(P->ev[i][1]));
    else {
        cudaError_t e = cudaEventQuery(P->ev[i][1]);
        if (e == cudaErrorNotReady) {
            (void)cudaGetLastError();
            return false;
        }
        CUDA_CHECK(e);
    }
    float ms = 0.0f, gap = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, P->ev[i][0], P->ev[i][1]));
    if (P->done > 0) CUDA_CHECK(cudaEventElapsedTime(&gap, P->ev[(P->done - 1) % PROF_PAIRS][1], P->ev[i][0]));
    const int ph = P->phase[i], op = P->op[i];
    P->dev_ms[ph][op] += ms, P->gap_ms[ph][op] += gap, P->calls[ph][op]++;
    P->done++;
    return true;
}

/* this thread's open op: its depth (a nested op is not timed again) and its pair (-1: untimed) */
static thread_local int t_depth;
static thread_local int64_t t_pair;

static void begin(cu_backend *B, int op) {
    if (t_depth++) return;
    cu_prof *P = B->prof;
    pthread_mutex_lock(&P->lock);
    /* one pair short of the ring: pair done - 1's end event stays for the next gap */
    if (P->next - P->done >= PROF_PAIRS - 1) collect_one(P, true);
    t_pair = -1;
    if (P->next - P->done < PROF_PAIRS - 1) {
        const uint64_t i = P->next % PROF_PAIRS;
        P->op[i] = (uint8_t)op, P->phase[i] = (uint8_t)P->cur_phase, P->ended[i] = 0;
        CUDA_CHECK(cudaEventRecord(P->ev[i][0], B->compute));
        t_pair = (int64_t)P->next++;
    } else P->untimed++;
    pthread_mutex_unlock(&P->lock);
}

static void end(cu_backend *B) {
    if (--t_depth) return;
    cu_prof *P = B->prof;
    pthread_mutex_lock(&P->lock);
    if (t_pair >= 0) {
        const uint64_t i = (uint64_t)t_pair % PROF_PAIRS;
        CUDA_CHECK(cudaEventRecord(P->ev[i][1], B->compute));
        P->ended[i] = 1;
    }
    while (P->done < P->next && collect_one(P, false)) {
    }
    pthread_mutex_unlock(&P->lock);
}

/* the wrapper of the be_ops member M, timed as op OP */
template <int OP, auto M>
struct pw;
template <int OP, typename R, typename... A, R (*be_ops::*M)(be_backend *, A...)>
struct pw<OP, M> {
    static R call(be_backend *b, A... a) {
        cu_backend *B = cu_of(b);
        cu_bind(B);
        begin(B, OP);
        if constexpr (std::is_void_v<R>) {
            (B->prof->real.*M)(b, a...);
            end(B);
        } else {
            R r = (B->prof->real.*M)(b, a...);
            end(B);
            return r;
        }
    }
};

/* embed starts a forward call: its token count sets the phase */
static void prof_embed(be_backend *b, const be_mat *emb, const int32_t *tokens, int n, float *x) {
    cu_backend *B = cu_of(b);
    pthread_mutex_lock(&B->prof->lock);
    B->prof->cur_phase = n > MM_NT;
    B->prof->steps[n > MM_NT]++;
    pthread_mutex_unlock(&B->prof->lock);
    pw<P_EMBED, &be_ops::embed>::call(b, emb, tokens, n, x);
}
static void prof_matmul(be_backend *b, const be_mm_out *outs, int n_outs, int64_t n_in, const float *x, int64_t n_tok,
                        void *scratch) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    begin(B, n_tok <= 1 ? P_MM1 : n_tok <= MM_NT ? P_MM8 : P_MMN);
    B->prof->real.matmul(b, outs, n_outs, n_in, x, n_tok, scratch);
    end(B);
}

/* a call without pairs prepares the experts' tables (no kernel): not counted */
static void prof_matmul_sel(be_backend *b, const be_mm_out *outs, int n_outs, int n_expert, int64_t n_in, const float *x,
                            int x_div, const int32_t *sel, int n_pairs, void *scratch) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    if (n_pairs > 0) begin(B, P_MM_SEL);
    B->prof->real.matmul_sel(b, outs, n_outs, n_expert, n_in, x, x_div, sel, n_pairs, scratch);
    if (n_pairs > 0) end(B);
}

be_ops cu_prof_ops(const be_ops *real) {
    be_ops o = *real;
    o.embed = prof_embed;
    o.matmul = prof_matmul;
    o.rmsnorm = pw<P_RMSNORM, &be_ops::rmsnorm>::call;
    o.add_bias = pw<P_ADD_BIAS, &be_ops::add_bias>::call;
    o.add = pw<P_ADD, &be_ops::add>::call;
    o.add_rmsnorm = pw<P_ADD_RMSNORM, &be_ops::add_rmsnorm>::call;
    o.rope = pw<P_ROPE, &be_ops::rope>::call;
    o.swiglu = pw<P_SWIGLU, &be_ops::swiglu>::call;
    o.gather_rows = pw<P_GATHER, &be_ops::gather_rows>::call;
    o.combine_rows = pw<P_COMBINE, &be_ops::combine_rows>::call;
    o.route = pw<P_ROUTE, &be_ops::route>::call;
    o.matmul_sel = real->matmul_sel ? prof_matmul_sel : NULL;
    o.combine_pairs = pw<P_COMBINE_PAIRS, &be_ops::combine_pairs>::call;
    o.expand_cols = pw<P_EXPAND, &be_ops::expand_cols>::call;
    o.kv_write = pw<P_KV_WRITE, &be_ops::kv_write>::call;
    o.kv_read = pw<P_KV_READ, &be_ops::kv_read>::call;
    o.copy_wait = pw<P_COPY_WAIT, &be_ops::copy_wait>::call;
    o.attention = pw<P_ATTN, &be_ops::attention>::call;
    o.attention_merge = pw<P_MERGE, &be_ops::attention_merge>::call;
    o.score_add = pw<P_SCORE, &be_ops::score_add>::call;
    o.upload = pw<P_UPLOAD, &be_ops::upload>::call;
    o.upload_pinned = pw<P_UPLOAD_PINNED, &be_ops::upload_pinned>::call;
    o.read = pw<P_READ, &be_ops::read>::call;
    return o;
}

void cu_prof_open(cu_backend *B, const be_ops *real) {
    cu_prof *P = (cu_prof *)calloc(1, sizeof *P);
    CU_REQUIRE(P, "out of host memory");
    P->real = *real;
    pthread_mutex_init(&P->lock, NULL);
    for (int i = 0; i < PROF_PAIRS; i++)
        for (int j = 0; j < 2; j++) CUDA_CHECK(cudaEventCreate(&P->ev[i][j]));
    B->prof = P;
}

/* reads every pair, prints the lines, frees */
void cu_prof_close(cu_backend *B) {
    cu_prof *P = B->prof;
    if (!P) return;
    while (P->done < P->next && collect_one(P, true)) {
    }
    if (P->untimed) fprintf(stderr, "tierkv cuda-profile: %llu ops untimed\n", (unsigned long long)P->untimed);
    static const char *const PHASE[2] = {"decode", "prefill"};
    for (int ph = 0; ph < 2; ph++) {
        double dev = 0, gap = 0;
        for (int op = 0; op < P_N; op++) {
            if (!P->calls[ph][op]) continue;
            dev += P->dev_ms[ph][op], gap += P->gap_ms[ph][op];
            fprintf(stderr,
                    "tierkv cuda-profile {\"phase\":\"%s\",\"op\":\"%s\",\"calls\":%llu,\"device_ms\":%.3f,"
                    "\"gap_before_ms\":%.3f}\n",
                    PHASE[ph], P_NAME[op], (unsigned long long)P->calls[ph][op], P->dev_ms[ph][op], P->gap_ms[ph][op]);
        }
        if (P->steps[ph])
            fprintf(stderr,
                    "tierkv cuda-profile {\"phase\":\"%s\",\"op\":\"all\",\"steps\":%llu,\"device_ms\":%.3f,"
                    "\"gap_before_ms\":%.3f}\n",
                    PHASE[ph], (unsigned long long)P->steps[ph], dev, gap);
    }
    for (int i = 0; i < PROF_PAIRS; i++)
        for (int j = 0; j < 2; j++) CUDA_CHECK(cudaEventDestroy(P->ev[i][j]));
    pthread_mutex_destroy(&P->lock);
    free(P);
    B->prof = NULL;
}
