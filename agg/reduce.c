/*
 * Public entry points of the element-wise kernels: argument checks, then the
 * ops table in use. strata_reduce_mt() lives with the pool (pool.c).
 */
#include <stdint.h>

#include "agg/agg.h"
#include "agg/convert.h"
#include "agg/reduce.h"
#include "util/log.h"

size_t strata_dtype_size(strata_dtype_t dtype)
{
    switch (dtype) {
    case STRATA_FP32:
        return 4;
    case STRATA_FP64:
        return 8;
    case STRATA_FP16:
    case STRATA_BF16:
        return 2;
    }
    return 0;
}

const char *strata_dtype_name(strata_dtype_t dtype)
{
    switch (dtype) {
    case STRATA_FP32:
        return "fp32";
    case STRATA_FP64:
        return "fp64";
    case STRATA_FP16:
        return "fp16";
    case STRATA_BF16:
        return "bf16";
    }
    return "?";
}

/* The buffers of count elements of esize bytes must exist and fit memory. */
static strata_status_t agg_check_count(const char *fn, size_t count,
                                       size_t esize)
{
    if (count > SIZE_MAX / 2 / esize) {
        util_error("agg: %s: count %zu of %zu-byte elements exceeds the "
                   "address space",
                   fn, count, esize);
        return STRATA_ERR_INVALID;
    }
    return STRATA_OK;
}

strata_status_t agg_reduce_check(const char *fn, strata_dtype_t dtype,
                                 const void *dst, const void *const *srcs,
                                 size_t nsrc, size_t count)
{
    size_t esize = strata_dtype_size(dtype);
    if (!esize) {
        util_error("agg: %s: unknown dtype %d", fn, (int)dtype);
        return STRATA_ERR_INVALID;
    }
    if (nsrc < 1 || nsrc > STRATA_REDUCE_MAX_SOURCES) {
        util_error("agg: %s: %zu sources; expected 1 to %d", fn, nsrc,
                   STRATA_REDUCE_MAX_SOURCES);
        return STRATA_ERR_INVALID;
    }
    if (agg_check_count(fn, count, esize))
        return STRATA_ERR_INVALID;
    if (count == 0)
        return STRATA_OK;
    if (!dst || !srcs) {
        util_error("agg: %s: %s is NULL", fn, dst ? "srcs" : "dst");
        return STRATA_ERR_INVALID;
    }
    for (size_t j = 0; j < nsrc; j++) {
        if (!srcs[j]) {
            util_error("agg: %s: source %zu of %zu is NULL", fn, j, nsrc);
            return STRATA_ERR_INVALID;
        }
    }
    return STRATA_OK;
}

unsigned agg_reduce_flags(size_t count, size_t esize, bool acc)
{
    unsigned flags = acc ? AGG_REDUCE_ACC : 0;
    if (count >= AGG_STREAM_BYTES / esize)
        flags |= AGG_REDUCE_STREAM;
    return flags;
}

strata_status_t agg_reduce_prepare(const char *fn, bool acc,
                                   strata_dtype_t dtype, const void *dst,
                                   const void *const *srcs, size_t nsrc,
                                   size_t count, agg_reduce_fn *kernel_out,
                                   unsigned *flags_out)
{
    strata_status_t st = agg_reduce_check(fn, dtype, dst, srcs, nsrc, count);
    if (st)
        return st;
    const agg_ops_t *ops = count ? agg_ops() : NULL;
    if (count && !ops)
        return STRATA_ERR_CONFIG; /* logged by the lazy configuration */
    *kernel_out = ops ? ops->reduce[dtype] : NULL;
    *flags_out = agg_reduce_flags(count, strata_dtype_size(dtype), acc);
    return STRATA_OK;
}

static strata_status_t agg_reduce(const char *fn, bool acc,
                                  strata_dtype_t dtype, void *dst,
                                  const void *const *srcs, size_t nsrc,
                                  size_t count, double scale)
{
    agg_reduce_fn kernel;
    unsigned flags;
    strata_status_t st = agg_reduce_prepare(fn, acc, dtype, dst, srcs, nsrc,
                                            count, &kernel, &flags);
    if (st == STRATA_OK && kernel)
        kernel(dst, srcs, nsrc, 0, count, scale, flags);
    return st;
}

strata_status_t strata_reduce(strata_dtype_t dtype, void *dst,
                              const void *const *srcs, size_t nsrc,
                              size_t count, double scale)
{
    return agg_reduce("strata_reduce", false, dtype, dst, srcs, nsrc, count,
                      scale);
}

strata_status_t strata_reduce_acc(strata_dtype_t dtype, void *dst,
                                  const void *const *srcs, size_t nsrc,
                                  size_t count, double scale)
{
    return agg_reduce("strata_reduce_acc", true, dtype, dst, srcs, nsrc, count,
                      scale);
}

/* fp32, fp16 or bf16 gradients/inputs with their buffers present. */
static strata_status_t agg_check_f32_update(const char *fn,
                                            strata_dtype_t dtype, const void *a,
                                            const void *b, size_t count)
{
    if (dtype != STRATA_FP32 && dtype != STRATA_FP16 && dtype != STRATA_BF16) {
        util_error("agg: %s: input dtype %s (%d); expected fp32, fp16 or "
                   "bf16",
                   fn, strata_dtype_name(dtype), (int)dtype);
        return STRATA_ERR_INVALID;
    }
    if (agg_check_count(fn, count, 4))
        return STRATA_ERR_INVALID;
    if (count && (!a || !b)) {
        util_error("agg: %s: NULL buffer", fn);
        return STRATA_ERR_INVALID;
    }
    return STRATA_OK;
}

strata_status_t strata_master_store(strata_dtype_t dtype, void *dst,
                                    const float *master, size_t count)
{
    if (strata_dtype_size(dtype) == 0 || (count && (!dst || !master))) {
        util_error("agg: strata_master_store: %s",
                   strata_dtype_size(dtype) ? "NULL buffer" : "unknown dtype");
        return STRATA_ERR_INVALID;
    }
    for (size_t i = 0; i < count; i++)
        agg_store_as(dtype, dst, i, master[i]);
    return STRATA_OK;
}

strata_status_t strata_axpy(strata_dtype_t x_dtype, float *y, const void *x,
                            size_t count, float alpha)
{
    strata_status_t st =
        agg_check_f32_update("strata_axpy", x_dtype, y, x, count);
    if (st || count == 0)
        return st;
    const agg_ops_t *ops = agg_ops();
    if (!ops)
        return STRATA_ERR_CONFIG;
    ops->axpy[x_dtype](y, x, count, alpha);
    return STRATA_OK;
}

strata_status_t agg_sgd_check(const char *fn, const strata_sgd_t *sgd,
                              strata_dtype_t grad_dtype, const float *master,
                              const float *momentum_buf,
                              const void *const *grads, size_t ngrads,
                              size_t count)
{
    if (ngrads < 1 || ngrads > STRATA_REDUCE_MAX_SOURCES) {
        util_error("agg: %s: %zu gradients; expected 1 to %d", fn, ngrads,
                   STRATA_REDUCE_MAX_SOURCES);
        return STRATA_ERR_INVALID;
    }
    strata_status_t st = agg_check_f32_update(fn, grad_dtype, master,
                                              grads ? grads[0] : NULL, count);
    if (st)
        return st;
    if (!sgd) {
        util_error("agg: %s: sgd parameters are NULL", fn);
        return STRATA_ERR_INVALID;
    }
    if (count == 0)
        return STRATA_OK;
    if (sgd->momentum != 0.0f && !momentum_buf) {
        util_error("agg: %s: momentum %g needs a momentum buffer", fn,
                   (double)sgd->momentum);
        return STRATA_ERR_INVALID;
    }
    for (size_t j = 1; j < ngrads; j++) {
        if (!grads[j]) {
            util_error("agg: %s: gradient %zu of %zu is NULL", fn, j, ngrads);
            return STRATA_ERR_INVALID;
        }
    }
    return STRATA_OK;
}

strata_status_t strata_sgd_update(const strata_sgd_t *sgd,
                                  strata_dtype_t grad_dtype, float *master,
                                  float *momentum_buf, const void *grad,
                                  size_t count)
{
    const void *grads[1] = {grad};
    strata_status_t st = agg_sgd_check("strata_sgd_update", sgd, grad_dtype,
                                       master, momentum_buf, grads, 1, count);
    if (st || count == 0)
        return st;
    const agg_ops_t *ops = agg_ops();
    if (!ops)
        return STRATA_ERR_CONFIG;
    ops->sgd[grad_dtype](sgd, master, momentum_buf, grads, 1, 0, count);
    return STRATA_OK;
}
