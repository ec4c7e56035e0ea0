/*
 * The transport API of transport.h: picks a provider by name and checks what
 * every provider would check (NULLs, ranges against the regions, message
 * sizes) before dispatching through its ops table.
 */
#include "transport/provider.h"

#include <string.h>

#include "util/log.h"

static const tp_ops_t *const tp_providers[] = {
    &tp_verbs_ops,
    &tp_tcp_ops,
    &tp_shm_ops,
};

#define TP_NPROVIDERS (sizeof(tp_providers) / sizeof(tp_providers[0]))

static const tp_ops_t *tp_find(const char *name)
{
    for (size_t i = 0; name && i < TP_NPROVIDERS; i++)
        if (strcmp(tp_providers[i]->name, name) == 0)
            return tp_providers[i];
    return NULL;
}

/* ---- providers ---- */

strata_status_t tp_open(const char *name, const tp_params_t *params,
                        tp_ctx_t **ctx_out)
{
    if (!params || !ctx_out) {
        util_error("tp_open: params and ctx_out must not be NULL");
        return STRATA_ERR_INVALID;
    }
    if (params->timeout_ms <= 0) {
        util_error("tp_open: timeout_ms %d; expected > 0", params->timeout_ms);
        return STRATA_ERR_INVALID;
    }
    const tp_ops_t *ops = tp_find(name);
    if (!ops) {
        util_error("unknown transport provider '%s' (expected verbs, "
                   "tcp or shm)",
                   name ? name : "(null)");
        return STRATA_ERR_INVALID;
    }
    tp_ctx_t *ctx = NULL;
    strata_status_t st = ops->open(params, &ctx);
    if (st != STRATA_OK)
        return st;
    *ctx_out = ctx;
    return STRATA_OK;
}

void tp_close(tp_ctx_t *ctx)
{
    if (ctx)
        ctx->ops->close(ctx);
}

const char *tp_name(const tp_ctx_t *ctx)
{
    return ctx->ops->name;
}

unsigned tp_caps(const tp_ctx_t *ctx)
{
    return ctx->caps;
}

bool tp_available(const char *name)
{
    const tp_ops_t *ops = tp_find(name);
    return ops && ops->available();
}

const char *tp_select(const tp_params_t *params, bool peer_on_this_host)
{
    if (params && params->transport)
        return params->transport;
    if (peer_on_this_host && tp_available("shm"))
        return "shm";
    return tp_available("verbs") ? "verbs" : "tcp";
}

/* ---- memory ---- */

static bool tp_access_ok(const char *fn, unsigned access)
{
    if (access & ~(unsigned)TP_ACCESS_REMOTE_WRITE) {
        util_error("%s: unknown access bits %#x", fn, access);
        return false;
    }
    return true;
}

strata_status_t tp_mr_reg(tp_ctx_t *ctx, void *addr, size_t len,
                          unsigned access, tp_mr_t **mr_out)
{
    if (!ctx || !addr || !mr_out || len == 0) {
        util_error("tp_mr_reg: needs a context, a non-NULL address, "
                   "a length > 0 and mr_out (got addr %p, len %zu)",
                   addr, len);
        return STRATA_ERR_INVALID;
    }
    if (!tp_access_ok("tp_mr_reg", access))
        return STRATA_ERR_INVALID;
    if ((access & TP_ACCESS_REMOTE_WRITE) &&
        !(ctx->caps & TP_CAP_REMOTE_ANY_MEMORY)) {
        util_error("tp_mr_reg: the %s provider cannot let peers write "
                   "into memory it did not allocate; use tp_mem_alloc()",
                   ctx->ops->name);
        return STRATA_ERR_UNSUPPORTED;
    }
    return ctx->ops->mr_reg(ctx, addr, len, access, mr_out);
}

strata_status_t tp_mem_alloc(tp_ctx_t *ctx, size_t len, unsigned access,
                             void **addr_out, tp_mr_t **mr_out)
{
    if (!ctx || !addr_out || !mr_out || len == 0) {
        util_error("tp_mem_alloc: needs a context, a length > 0 "
                   "(got %zu), addr_out and mr_out",
                   len);
        return STRATA_ERR_INVALID;
    }
    if (!tp_access_ok("tp_mem_alloc", access))
        return STRATA_ERR_INVALID;
    return ctx->ops->mem_alloc(ctx, len, access, addr_out, mr_out);
}

void tp_mr_dereg(tp_mr_t *mr)
{
    if (mr)
        mr->ctx->ops->mr_dereg(mr);
}

void *tp_mr_addr(const tp_mr_t *mr)
{
    return mr->addr;
}

size_t tp_mr_len(const tp_mr_t *mr)
{
    return mr->len;
}

strata_status_t tp_mr_export(tp_mr_t *mr, tp_ep_t *ep, tp_rdesc_t *desc_out)
{
    if (!mr || !ep || !desc_out) {
        util_error("tp_mr_export: mr, ep and desc_out must not be NULL");
        return STRATA_ERR_INVALID;
    }
    if (mr->ctx != ep->ctx) {
        util_error("tp_mr_export: region and endpoint (peer %s) belong "
                   "to different contexts",
                   ep->peer);
        return STRATA_ERR_INVALID;
    }
    if (!(mr->access & TP_ACCESS_REMOTE_WRITE)) {
        util_error("tp_mr_export: region %p+%zu was registered without "
                   "remote access; nothing to grant peer %s",
                   mr->addr, mr->len, ep->peer);
        return STRATA_ERR_INVALID;
    }
    return mr->ctx->ops->mr_export(mr, ep, desc_out);
}

/* ---- connections ---- */

strata_status_t tp_listen(tp_ctx_t *ctx, const char *bind,
                          tp_listener_t **listener_out)
{
    if (!ctx || !listener_out) {
        util_error("tp_listen: ctx and listener_out must not be NULL");
        return STRATA_ERR_INVALID;
    }
    return ctx->ops->listen(ctx, bind, listener_out);
}

const char *tp_listener_addr(const tp_listener_t *listener)
{
    return listener->addr;
}

void tp_listener_close(tp_listener_t *listener)
{
    if (listener)
        listener->ctx->ops->listener_close(listener);
}

strata_status_t tp_connect(tp_ctx_t *ctx, const char *addr, void *ep_ctx,
                           tp_ep_t **ep_out)
{
    if (!ctx || !addr || !*addr || !ep_out) {
        util_error("tp_connect: needs a context, an address and ep_out");
        return STRATA_ERR_INVALID;
    }
    tp_ep_t *ep = NULL;
    strata_status_t st = ctx->ops->connect(ctx, addr, &ep);
    if (st != STRATA_OK)
        return st;
    ep->user = ep_ctx;
    *ep_out = ep;
    return STRATA_OK;
}

void tp_ep_set_ctx(tp_ep_t *ep, void *ep_ctx)
{
    ep->user = ep_ctx;
}

void *tp_ep_ctx(const tp_ep_t *ep)
{
    return ep->user;
}

const char *tp_ep_peer(const tp_ep_t *ep)
{
    return ep->peer;
}

const char *tp_ep_error(const tp_ep_t *ep)
{
    return ep->why;
}

void tp_ep_close(tp_ep_t *ep)
{
    if (!ep)
        return;
    ep->user = NULL; /* tells the rest of the batch in hand it is closed */
    ep->ctx->ops->ep_close(ep);
}

/* ---- data ---- */

/* [off, off + len) within [0, size), without overflow. */
static bool tp_range_ok(uint64_t off, uint64_t len, uint64_t size)
{
    return off <= size && len <= size - off;
}

strata_status_t tp_peer_map(tp_ep_t *ep, const tp_rdesc_t *desc, uint64_t off,
                            size_t len, const void **addr_out)
{
    if (!ep || !desc || !addr_out) {
        util_error("tp_peer_map: ep, desc and addr_out must not be NULL");
        return STRATA_ERR_INVALID;
    }
    if (!ep->ctx->ops->peer_map) {
        util_error("tp_peer_map from %s: the %s provider cannot map a "
                   "peer's memory here",
                   ep->peer, ep->ctx->ops->name);
        return STRATA_ERR_UNSUPPORTED;
    }
    if (!tp_range_ok(off, len, desc->len)) {
        util_error("tp_peer_map from %s: [%llu, +%zu) is outside the peer's "
                   "region %#llx of %llu bytes",
                   ep->peer, (unsigned long long)off, len,
                   (unsigned long long)desc->key,
                   (unsigned long long)desc->len);
        return STRATA_ERR_RANGE;
    }
    return ep->ctx->ops->peer_map(ep, desc, off, len, addr_out);
}

strata_status_t tp_write(tp_ep_t *ep, tp_mr_t *mr, size_t off,
                         const tp_rdesc_t *dst, uint64_t dst_off, size_t len,
                         uint32_t imm, unsigned flags, void *op_ctx)
{
    if (!ep || !mr || !dst) {
        util_error("tp_write: ep, mr and dst must not be NULL");
        return STRATA_ERR_INVALID;
    }
    if (mr->ctx != ep->ctx) {
        util_error("tp_write to %s: the source region belongs to "
                   "another context",
                   ep->peer);
        return STRATA_ERR_INVALID;
    }
    if (flags & ~(unsigned)TP_WRITE_IMM) {
        util_error("tp_write to %s: unknown flags %#x", ep->peer, flags);
        return STRATA_ERR_INVALID;
    }
    if (len > UINT32_MAX) {
        util_error("tp_write to %s: %zu bytes is more than one write "
                   "carries (%u)",
                   ep->peer, len, UINT32_MAX);
        return STRATA_ERR_RANGE;
    }
    if (!tp_range_ok(off, len, mr->len)) {
        util_error("tp_write to %s: source [%zu, +%zu) is outside its "
                   "region of %zu bytes",
                   ep->peer, off, len, mr->len);
        return STRATA_ERR_RANGE;
    }
    if (!tp_range_ok(dst_off, len, dst->len)) {
        util_error("tp_write to %s: target [%llu, +%zu) is outside the "
                   "peer's region %#llx of %llu bytes",
                   ep->peer, (unsigned long long)dst_off, len,
                   (unsigned long long)dst->key, (unsigned long long)dst->len);
        return STRATA_ERR_RANGE;
    }
    return ep->ctx->ops->write(ep, mr, off, dst, dst_off, len, imm, flags,
                               op_ctx);
}

strata_status_t tp_send(tp_ep_t *ep, const void *buf, size_t len, void *op_ctx)
{
    if (!ep || (!buf && len > 0)) {
        util_error("tp_send: ep and (for len > 0) buf must not be NULL");
        return STRATA_ERR_INVALID;
    }
    if (len > TP_MSG_MAX) {
        util_error("tp_send to %s: %zu bytes exceeds the control "
                   "message limit of %d",
                   ep->peer, len, TP_MSG_MAX);
        return STRATA_ERR_RANGE;
    }
    return ep->ctx->ops->send(ep, buf, len, op_ctx);
}

/* ---- progress ---- */

strata_status_t tp_progress(tp_ctx_t *ctx, tp_event_t *events, int max,
                            int *n_out)
{
    if (!ctx || !n_out || max < 0 || (max > 0 && !events)) {
        util_error("tp_progress: needs a context, n_out, max >= 0 "
                   "(got %d) and room for max events",
                   max);
        return STRATA_ERR_INVALID;
    }
    *n_out = 0;
    return ctx->ops->progress(ctx, events, max, n_out);
}

int tp_wait_fd(const tp_ctx_t *ctx)
{
    return ctx->ops->wait_fd(ctx);
}

strata_status_t tp_wait_arm(tp_ctx_t *ctx)
{
    return ctx->ops->wait_arm(ctx);
}
