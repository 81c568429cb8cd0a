/* cuda_graph.cu — a forward call as one CUDA graph (TIERKV_CUDA_GRAPH=on|off; off when unset).
 *
 * The forward brackets a call with step_begin/step_end where nothing in it is expected to wait for
 * the device (backend.h). For a call of at most CU_GRAPH_MAX_TOK tokens (decode steps, up to that
 * many sequences) step_begin starts capturing the compute stream (relaxed mode: other threads' calls,
 * the transfer thread's copies, and this thread's own allocations stay legal; every host wait and
 * every event the copy stream waits on ends the capture first, and so does cu_free, since a freed
 * buffer may be one the captured work reads), and step_end turns the capture into a graph and
 * launches it: one submission for the call's ~11 kernels a layer instead of one launch each, so the
 * GPU does not idle between short kernels waiting for the host. The captured work is the work the
 * ops would have queued, in the same order on the same stream with the same arguments (kernel
 * arguments by value, host arrays copied into the argument ring by the op before it returns, the
 * ring's bytes read by the graph's copies when it runs, before the ring can reuse them): the same
 * bits as without.
 *
 * Consecutive captures of one shape differ only in parameters (the ring offsets of their arguments,
 * the attention grid's chunks as the context grows), so the executable graph kept for that shape
 * (tokens and node count) is updated in place (cudaGraphExecUpdate) rather than instantiated again;
 * an update that fails drops it and a new one is instantiated. CU_GRAPH_EXECS shapes are kept, the
 * least recently used replaced.
 *
 * Whatever must wait ends the capture early (cu_graph_break): what was captured is launched and the
 * rest of the call runs op by op. The ops that do so: read, kv_read, a large upload (they wait for
 * the stream), copy_wait (it waits on the copy stream's event; the stall timing's events too),
 * attention that read a STAGE row recording its event (the copy stream waits on it; a call that read
 * none records nothing while captured), cuBLAS (never captured here), and
 * the argument ring turning to its next segment (its guard events are recorded and waited on outside
 * any capture). Under TIERKV_CUDA_PROFILE=1 nothing is captured (its timing events would be).
 *
 * Why off by default: the capture and the update run on the host before the graph starts, while the
 * GPU waits (a step begins after the previous step's read), whereas launched one by one the ops run
 * as the host queues them. A graph gains where the launches outrun the kernels (small models, short
 * kernels: the profile's gaps) and loses its capture time where they do not (a 7B's decode kernels
 * take longer than their launches). Which holds on the H200 is for bench/gpu.sh to measure (its
 * `full graphs` job beside `full`), not for this file to assume. */

#include <stdio.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_internal.h"

int cu_graph_choice(int *on, char *err, size_t errlen) { return cu_env_switch("TIERKV_CUDA_GRAPH", "off", "on", on, err, errlen); }

/* The executable graph kept for this shape, updated to g; or a slot (the least recently used) with
 * a new one instantiated from g. */
static cudaGraphExec_t exec_for(cu_backend *B, cudaGraph_t g, int n_tok, size_t nodes) {
    cu_graphs *G = &B->graph;
    cu_graph_exec *e = NULL;
    for (int k = 0; k < CU_GRAPH_EXECS && !e; k++)
        if (G->ex[k].exec && G->ex[k].n_tok == n_tok && G->ex[k].nodes == nodes) e = &G->ex[k];
    if (e) {
        cudaGraphExecUpdateResultInfo info;
        cudaError_t r = cudaGraphExecUpdate(e->exec, g, &info);
        if (r == cudaSuccess) {
            G->st.updated++;
            e->last_use = ++G->clock;
            return e->exec;
        }
        /* only a graph that cannot take the update is instantiated again; any other error (a fault of
         * an earlier launch, reported here) stops where it shows */
        if (r != cudaErrorGraphExecUpdateFailure) CUDA_CHECK(r);
        (void)cudaGetLastError(); /* the failure is not sticky: clear it before the next launch's check */
        if (!G->st.refused++) { /* why, once a backend: a run that re-instantiates every step says so */
            G->st.refused_why = (int)info.result;
            cudaGraphNodeType nt = cudaGraphNodeTypeEmpty;
            if (info.errorNode) (void)cudaGraphNodeGetType(info.errorNode, &nt);
            fprintf(stderr, "cuda graph: the kept graph of %d tokens refused an update (cudaGraphExecUpdateResult %d, "
                    "node type %d); instantiated anew\n", n_tok, (int)info.result, (int)nt);
        }
        CUDA_CHECK(cudaGraphExecDestroy(e->exec)); /* (a launch in flight completes first) */
        e->exec = NULL;
    } else {
        e = &G->ex[0];
        for (int k = 1; k < CU_GRAPH_EXECS; k++)
            if (!G->ex[k].exec || (e->exec && G->ex[k].last_use < e->last_use)) e = &G->ex[k];
        if (e->exec) CUDA_CHECK(cudaGraphExecDestroy(e->exec));
        e->exec = NULL;
    }
    CUDA_CHECK(cudaGraphInstantiate(&e->exec, g, 0));
    e->n_tok = n_tok, e->nodes = nodes, e->last_use = ++G->clock;
    G->st.instantiated++;
    return e->exec;
}

/* ends the capture and launches what it holds */
static void capture_launch(cu_backend *B) {
    cu_graphs *G = &B->graph;
    cudaGraph_t g;
    G->capturing = 0;
    CUDA_CHECK(cudaStreamEndCapture(B->compute, &g));
    size_t nodes = 0;
    CUDA_CHECK(cudaGraphGetNodes(g, NULL, &nodes));
    if (nodes > 0) CUDA_CHECK(cudaGraphLaunch(exec_for(B, g, G->n_tok, nodes), B->compute));
    CUDA_CHECK(cudaGraphDestroy(g));
}

void cu_graph_step_begin(be_backend *b, int n_tok) {
    cu_backend *B = cu_of(b);
    cu_graphs *G = &B->graph;
    cu_bind(B);
    if (G->capturing) capture_launch(B); /* a bracket left open: what it holds runs first */
    if (!G->on || n_tok < 1 || n_tok > CU_GRAPH_MAX_TOK) return;
    CUDA_CHECK(cudaStreamBeginCapture(B->compute, cudaStreamCaptureModeRelaxed));
    G->capturing = 1, G->n_tok = n_tok;
    G->st.captures++;
}

void cu_graph_step_end(be_backend *b) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    if (B->graph.capturing) capture_launch(B);
}

void cu_graph_break(cu_backend *B) {
    if (!B->graph.capturing) return;
    B->graph.st.breaks++;
    capture_launch(B);
}

void cu_graph_close(cu_backend *B) {
    cu_graphs *G = &B->graph;
    if (G->capturing) capture_launch(B);
    for (int k = 0; k < CU_GRAPH_EXECS; k++) {
        if (G->ex[k].exec) CUDA_CHECK(cudaGraphExecDestroy(G->ex[k].exec));
        G->ex[k].exec = NULL;
    }
}

extern "C" void cuda_graph_counts(const be_backend *b, cuda_graph_stats *s) { *s = cu_ofc(b)->graph.st; }
