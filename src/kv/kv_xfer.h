/* kv_xfer.h — the transfer engine: one pthread beside compute that runs the cache's batch of tier
 * moves layer by layer, 0..L-1, and publishes per-layer progress so the forward can fence on one
 * layer (early layers are ready first). It knows nothing about tiers: it calls run_layer(ctx, layer)
 * for each layer of a submitted batch (the cache hands the layer's moves to the backend). One batch
 * in flight at a time. No allocation after xfer_init. */
#ifndef TKV_KV_XFER_H
#define TKV_KV_XFER_H

typedef void (*xfer_layer_fn)(void *ctx, int layer);
typedef struct kv_xfer kv_xfer;

kv_xfer *xfer_init(xfer_layer_fn run_layer, void *ctx, int n_layer);
void xfer_free(kv_xfer *x); /* waits for the batch in flight */
void xfer_submit(kv_xfer *x);
/* Blocks until layer `layer` of the batch in flight is done; returns the seconds waited. */
double xfer_wait_layer(kv_xfer *x, int layer);
/* 1 when the last submitted batch has finished every layer (non-blocking). */
int xfer_finished(kv_xfer *x);
/* Seconds the engine spent running the last batch (valid once finished). */
double xfer_batch_seconds(kv_xfer *x);

#endif
