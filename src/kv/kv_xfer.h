/* kv_xfer.h — the transfer engine: one pthread beside compute that runs a sequence's batch of tier
 * moves layer by layer, 0..L-1, and publishes per-layer progress so the forward can fence on one
 * layer (early layers are ready first). It knows nothing about tiers: it calls run_layer(ctx, seq,
 * layer) for each layer of a submitted batch. At most one batch per sequence is in flight; batches of
 * different sequences run in submission order. No allocation after xfer_init. */
#ifndef TKV_KV_XFER_H
#define TKV_KV_XFER_H

typedef void (*xfer_layer_fn)(void *ctx, int seq, int layer);
typedef struct kv_xfer kv_xfer;

kv_xfer *xfer_init(xfer_layer_fn run_layer, void *ctx, int n_layer, int n_seq);
void xfer_free(kv_xfer *x); /* waits for in-flight batches */
void xfer_submit(kv_xfer *x, int seq);
/* Blocks until layer `layer` of seq's batch is done; returns the seconds waited. */
double xfer_wait_layer(kv_xfer *x, int seq, int layer);
/* 1 when seq's last submitted batch has finished every layer (non-blocking). */
int xfer_finished(kv_xfer *x, int seq);
/* Seconds the engine spent running seq's last batch (valid once finished). */
double xfer_batch_seconds(kv_xfer *x, int seq);

#endif
