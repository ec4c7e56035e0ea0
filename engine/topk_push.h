/*
 * GDTopK on a worker: each fp32, fp16 or bf16 partition's gradients are
 * added to its residual (fp32 whatever the dtype, so small gradients of a
 * 16-bit model add up instead of rounding away) and only the largest
 * entries are pushed, as (uint32 index, fp32 value) pairs that the
 * aggregator scatter-adds; the rest stays in the residual (error feedback).
 * The ratio follows the group's speed rank and the epoch (engine/gdtopk.h);
 * every STRATA_TOPK_FLUSH_EPOCHS epochs the next push of each partition
 * sends gradients plus residual densely, in the partition's dtype, and
 * keeps only what that rounding left out. So what was pushed plus the
 * residual always equals the sum of the gradients. Progress thread only.
 */
#ifndef STRATA_ENGINE_TOPK_PUSH_H
#define STRATA_ENGINE_TOPK_PUSH_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"

typedef struct eng_topk_push eng_topk_push_t;

/* Residuals and send buffers for the layout, registered with every
 * transport in uses[]. */
strata_status_t eng_topk_push_create(strata_ctx_t *ctx, const eng_layout_t *lay,
                                     const bool *uses, eng_topk_push_t **out);
void eng_topk_push_free(eng_topk_push_t *t);

/* Whether partition p travels through top-k (eng_gdtopk_dtype) or as
 * usual. */
bool eng_topk_push_covers(const eng_topk_push_t *t, uint32_t p);

/* Partition p of clock c is complete: add its gradients (grads[tensor]) to
 * the residual and fill the clock's send buffer. What to write: *len bytes
 * from *mr_out of provider prov at *off_out, sparse or dense. */
typedef struct eng_topk_write {
    uint64_t off;
    uint32_t len;
    bool sparse;
} eng_topk_write_t;
strata_status_t eng_topk_push_prepare(eng_topk_push_t *t, uint32_t p, int64_t c,
                                      void *const *grads,
                                      eng_topk_write_t *out);
tp_mr_t *eng_topk_push_mr(const eng_topk_push_t *t, int prov);

/* An epoch ended: the ratios of the next one (the group's speed rank), and
 * a dense flush of every partition if the schedule says so. */
void eng_topk_push_epoch(eng_topk_push_t *t, uint32_t epoch_ended, double rank);

#endif /* STRATA_ENGINE_TOPK_PUSH_H */
