/* route.h — an expert FFN's routing (Qwen3 MoE): which experts a token's router logits pick and
 * how much each counts. Pure arithmetic over host arrays: the forward routes on the host with it,
 * and a backend that routes where the logits lie (be_ops.route) matches it and is tested against it. */
#ifndef TKV_MODEL_ROUTE_H
#define TKV_MODEL_ROUTE_H
#include <stdint.h>

/* For t < n: token t's k experts (sel[t*k..]) and weights (w[t*k..]) from its logits
 * [n][n_expert] (n_expert <= 1024): the router softmax (expf, the sum in double, as ggml's soft_max),
 * the k most probable (the lower index first among equal ones), renormalised to sum to one (that
 * sum in double too, each weight divided by it rounded to f32). */
void moe_route(const float *logits, int n, int n_expert, int k, int32_t *sel, float *w);

#endif
