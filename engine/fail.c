/*
 * The job's failure. The first failure a rank sees is the job's, unless it
 * may be the consequence of one elsewhere: then the coordinator, which
 * sees every rank, decides (eng_fail_soon). Failing tells the coordinator's
 * ranks why (its role's fail hook), fails every gate and pending request,
 * and lets the rank's role fail what waits on it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "util/log.h"

/* Tell the coordinator of a failure this rank saw (FAILED). */
static strata_status_t eng_fail_report(strata_ctx_t *ctx,
                                       strata_status_t status, const char *msg)
{
    if (!ctx->coord_peer.up)
        return STRATA_ERR_STATE;
    unsigned char buf[TP_MSG_MAX];
    char clipped[TP_MSG_MAX - 16];
    snprintf(clipped, sizeof(clipped), "%s", msg);
    eng_wbuf_t w;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_FAILED);
    eng_put_u16(&w, (uint16_t)status);
    eng_put_str(&w, clipped);
    return eng_send(&ctx->coord_peer, &w, NULL);
}

void eng_fail_at(strata_ctx_t *ctx, strata_status_t status, const char *file,
                 int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    int expected = STRATA_OK;
    if (!atomic_compare_exchange_strong(&ctx->fatal, &expected, status)) {
        util_debug("after the job failed: %s", msg);
        return;
    }
    if (util_log_enabled(UTIL_LOG_ERROR))
        util_log_write(UTIL_LOG_ERROR, file, line, "%s", msg);
    memcpy(ctx->fatal_msg, msg, sizeof(ctx->fatal_msg));
    atomic_store_explicit(&ctx->fatal_text, true, memory_order_release);
    if (ctx->coord_ops) /* tells every rank why, first */
        ctx->coord_ops->fail(ctx, status, msg);
    util_gate_fail(&ctx->joined, status);
    util_gate_fail(&ctx->committed, status);
    util_gate_fail(&ctx->served, status);
    if (ctx->role_ops && ctx->role_ops->fail)
        ctx->role_ops->fail(ctx, status, msg);
    util_waitq_wake(&ctx->reqq);
}

void eng_fail_soon_at(strata_ctx_t *ctx, strata_status_t status,
                      const char *file, int line, const char *fmt, ...)
{
    if (eng_fatal(ctx) != STRATA_OK || ctx->soon.at_ns)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->soon.msg, sizeof(ctx->soon.msg), fmt, ap);
    va_end(ap);
    /* The coordinator is who decides; a rank that cannot reach it knows
     * no better than what it saw. */
    if (ctx->coord ||
        eng_fail_report(ctx, status, ctx->soon.msg) != STRATA_OK) {
        eng_fail_at(ctx, status, file, line, "%s", ctx->soon.msg);
        return;
    }
    util_info("%s; asking the coordinator whether the job goes on",
              ctx->soon.msg);
    ctx->soon.status = status;
    ctx->soon.file = file;
    ctx->soon.line = line;
    ctx->soon.at_ns = util_now_ns() + (uint64_t)ctx->timeout_ms * 1000000u;
}

void eng_fail_tell_at(strata_ctx_t *ctx, strata_status_t status,
                      const char *file, int line, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (eng_fatal(ctx) == STRATA_OK && !ctx->coord)
        eng_fail_report(ctx, status, msg);
    eng_fail_at(ctx, status, file, line, "%s", msg);
}

void eng_fail_coord_send_at(strata_ctx_t *ctx, strata_status_t status,
                            const char *file, int line, const char *what)
{
    if (status == STRATA_ERR_PEER || status == STRATA_ERR_STATE)
        util_debug("%s: %s (its disconnect says why)", what,
                   strata_strerror(status));
    else
        eng_fail_at(ctx, status, file, line, "%s: %s", what,
                    strata_strerror(status));
}

void eng_fail_soon_now(strata_ctx_t *ctx, const char *why)
{
    if (!ctx->soon.at_ns)
        return;
    ctx->soon.at_ns = 0;
    eng_fail_at(ctx, ctx->soon.status, ctx->soon.file, ctx->soon.line,
                "%s (%s)", ctx->soon.msg, why);
}

void eng_fail_soon_cancel(strata_ctx_t *ctx)
{
    if (ctx->soon.at_ns)
        util_debug("no longer held as the job's failure: %s", ctx->soon.msg);
    ctx->soon.at_ns = 0;
}

void eng_fail_soon_due(strata_ctx_t *ctx)
{
    if (!ctx->soon.at_ns || util_now_ns() < ctx->soon.at_ns)
        return;
    char why[96];
    snprintf(why, sizeof(why),
             "the coordinator did not say why within STRATA_TIMEOUT_MS=%d",
             ctx->timeout_ms);
    eng_fail_soon_now(ctx, why);
}

void eng_wqueue_full(strata_ctx_t *ctx, const util_ring_t *q, eng_peer_t *peer)
{
    eng_fail(ctx, STRATA_ERR_STATE,
             "the writes queued for %s exceed its queue of %u",
             eng_peer_name(peer), util_ring_cap(q));
}
