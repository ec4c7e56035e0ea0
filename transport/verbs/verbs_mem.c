/*
 * Memory of a verbs context.
 *
 * Local access (sources of writes, receive and staging buffers) goes through
 * the registration cache: page ranges, shared and reference counted; the
 * arena behind tp_mem_alloc() and the endpoints' buffers registers each of
 * its chunks once.
 *
 * Remote access is granted per region and per endpoint. A region gets a
 * registration of exactly its bytes when first exported (so that a forged
 * offset or length hits its bounds even on devices, like rxe, that check a
 * window against its registration only), and each endpoint it is exported
 * to gets type-2 memory windows over it bound to that endpoint's queue
 * pairs, so no other peer can use the key. Devices without type-2 windows
 * export the exact registration's key instead (bounds kept, any
 * authenticated peer of the context may use it: docs/verbs.md).
 */
#include "transport/verbs/verbs.h"

#include <endian.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"

#define TP_VERBS_ARENA_CHUNK (8u << 20)

static struct ibv_mr *tp_verbs_ibv_reg(tp_verbs_ctx_t *c, void *addr,
                                       size_t len, int flags,
                                       strata_status_t *st_out)
{
    struct ibv_mr *mr = ibv_reg_mr(c->pd, addr, len, flags);
    if (mr)
        return mr;
    int err = errno;
    char hint[192] = "";
    if (err == ENOMEM || err == EAGAIN)
        tp_verbs_memlock_hint(hint, sizeof(hint));
    util_error("verbs: ibv_reg_mr of %zu bytes at %p on %s failed: %s%s", len,
               addr, c->dev_name, strerror(err), hint);
    *st_out = err == ENOMEM ? STRATA_ERR_NOMEM : STRATA_ERR_IO;
    return NULL;
}

/* Registration of exactly [addr, addr + len) that remote access goes
 * through: windows bind to it, or (without windows) its key is exported. */
static struct ibv_mr *tp_verbs_reg_exact(tp_verbs_ctx_t *c, void *addr,
                                         size_t len, strata_status_t *st_out)
{
    return tp_verbs_ibv_reg(
        c, addr, len,
        IBV_ACCESS_LOCAL_WRITE |
            (c->mw_type2 ? IBV_ACCESS_MW_BIND : IBV_ACCESS_REMOTE_WRITE),
        st_out);
}

static strata_status_t tp_verbs_reg(void *arg, void *addr, size_t len,
                                    unsigned access, tp_verbs_reg_t *reg)
{
    (void)access; /* the cache registers for local access only */
    strata_status_t st = STRATA_OK;
    struct ibv_mr *mr =
        tp_verbs_ibv_reg(arg, addr, len, IBV_ACCESS_LOCAL_WRITE, &st);
    if (!mr)
        return st;
    reg->handle = mr;
    reg->lkey = mr->lkey;
    reg->rkey = mr->rkey;
    return STRATA_OK;
}

static void tp_verbs_dereg(void *arg, tp_verbs_reg_t *reg)
{
    tp_verbs_ctx_t *c = arg;
    int err = ibv_dereg_mr(reg->handle);
    if (err)
        util_warn("verbs: ibv_dereg_mr on %s failed: %s", c->dev_name,
                  strerror(err));
}

strata_status_t tp_verbs_mem_init(tp_verbs_ctx_t *c)
{
    tp_verbs_rcache_ops_t ops = {tp_verbs_reg, tp_verbs_dereg, c};
    tp_verbs_rcache_init(&c->rcache, &ops, (size_t)sysconf(_SC_PAGESIZE));
    return STRATA_OK;
}

void tp_verbs_mem_fini(tp_verbs_ctx_t *c)
{
    util_list_t *pos, *tmp; /* tp_close closes what is still open */
    util_list_for_each_safe(pos, tmp, &c->mrs)
        tp_verbs_mr_dereg(&util_container_of(pos, tp_verbs_mr_t, link)->base);
    util_arena_destroy(c->arena);
    c->arena = NULL;
    if (c->rcache.ops.reg)
        tp_verbs_rcache_fini(&c->rcache);
}

/* ---- the registered arena ---- */

static strata_status_t tp_verbs_chunk_added(void *arg, void *addr, size_t len)
{
    tp_verbs_ctx_t *c = arg;
    tp_verbs_reg_t *reg;
    return tp_verbs_rcache_get(&c->rcache, addr, len, TP_ACCESS_LOCAL, &reg);
}

static void tp_verbs_chunk_removed(void *arg, void *addr, size_t len)
{
    tp_verbs_ctx_t *c = arg;
    tp_verbs_reg_t *reg =
        tp_verbs_rcache_lookup(&c->rcache, addr, len, TP_ACCESS_LOCAL);
    if (reg)
        tp_verbs_rcache_put(&c->rcache, reg);
}

/* Memory from the registered arena and its registration, with a reference
 * (the chunk's registration: found, not made). */
static strata_status_t tp_verbs_arena_get(tp_verbs_ctx_t *c, size_t len,
                                          void **addr_out,
                                          tp_verbs_reg_t **reg_out)
{
    if (!c->arena) {
        util_arena_hooks_t hooks = {tp_verbs_chunk_added,
                                    tp_verbs_chunk_removed, c};
        if (util_arena_create(UTIL_ARENA_AUTO, &hooks, TP_VERBS_ARENA_CHUNK,
                              &c->arena) != STRATA_OK)
            return STRATA_ERR_NOMEM;
    }
    void *p = util_arena_alloc(c->arena, len >= 4096 ? 4096 : 64, len);
    if (!p) {
        util_error("verbs: cannot allocate %zu bytes of registered memory on "
                   "%s",
                   len, c->dev_name);
        return STRATA_ERR_NOMEM;
    }
    strata_status_t st =
        tp_verbs_rcache_get(&c->rcache, p, len, TP_ACCESS_LOCAL, reg_out);
    if (st != STRATA_OK) {
        util_arena_free(c->arena, p);
        return st;
    }
    *addr_out = p;
    return STRATA_OK;
}

strata_status_t tp_verbs_block_alloc(tp_verbs_ctx_t *c, size_t len,
                                     void **addr_out, tp_verbs_reg_t **reg_out)
{
    return tp_verbs_arena_get(c, len, addr_out, reg_out);
}

void tp_verbs_block_free(tp_verbs_ctx_t *c, void *addr, tp_verbs_reg_t *reg)
{
    tp_verbs_rcache_put(&c->rcache, reg);
    util_arena_free(c->arena, addr);
}

/* ---- regions ---- */

static strata_status_t tp_verbs_mr_new(tp_verbs_ctx_t *c, void *addr,
                                       size_t len, unsigned access,
                                       tp_verbs_reg_t *reg, bool from_arena,
                                       tp_mr_t **mr_out)
{
    tp_verbs_mr_t *mr = util_calloc(1, sizeof(*mr));
    if (!mr) {
        util_error("verbs: out of memory for a region");
        return STRATA_ERR_NOMEM;
    }
    mr->base = (tp_mr_t){&c->base, addr, len, access};
    mr->reg = reg;
    mr->from_arena = from_arena;
    util_list_add_tail(&c->mrs, &mr->link);
    *mr_out = &mr->base;
    return STRATA_OK;
}

strata_status_t tp_verbs_mr_reg(tp_ctx_t *ctx, void *addr, size_t len,
                                unsigned access, tp_mr_t **mr_out)
{
    tp_verbs_ctx_t *c = tp_verbs_ctx(ctx);
    tp_verbs_reg_t *reg;
    strata_status_t st =
        tp_verbs_rcache_get(&c->rcache, addr, len, access, &reg);
    if (st != STRATA_OK)
        return st;
    st = tp_verbs_mr_new(c, addr, len, access, reg, false, mr_out);
    if (st != STRATA_OK)
        tp_verbs_rcache_put(&c->rcache, reg);
    return st;
}

strata_status_t tp_verbs_mem_alloc(tp_ctx_t *ctx, size_t len, unsigned access,
                                   void **addr_out, tp_mr_t **mr_out)
{
    tp_verbs_ctx_t *c = tp_verbs_ctx(ctx);
    void *p;
    tp_verbs_reg_t *reg;
    strata_status_t st = tp_verbs_arena_get(c, len, &p, &reg);
    if (st != STRATA_OK)
        return st;
    st = tp_verbs_mr_new(c, p, len, access, reg, true, mr_out);
    if (st != STRATA_OK) {
        tp_verbs_block_free(c, p, reg);
        return st;
    }
    *addr_out = p;
    return STRATA_OK;
}

void tp_verbs_mr_dereg(tp_mr_t *base)
{
    tp_verbs_mr_t *mr = (tp_verbs_mr_t *)base;
    tp_verbs_ctx_t *c = tp_verbs_ctx(base->ctx);
    while (mr->exports)
        tp_verbs_unexport(mr->exports, true);
    if (mr->exact && ibv_dereg_mr(mr->exact))
        util_warn("verbs: ibv_dereg_mr on %s failed: %s", c->dev_name,
                  strerror(errno));
    tp_verbs_rcache_put(&c->rcache, mr->reg);
    if (mr->from_arena)
        util_arena_free(c->arena, base->addr);
    util_list_del(&mr->link);
    util_free(mr);
}

/* ---- exports ---- */

static void tp_verbs_export_free(tp_verbs_export_t *x, unsigned nmw)
{
    for (unsigned q = 0; q < nmw; q++)
        if (x->mw[q] && ibv_dealloc_mw(x->mw[q]))
            util_warn("verbs: ibv_dealloc_mw failed: %s", strerror(errno));
    util_free(x);
}

/* Unbinds the windows and forgets the export; tell: let the peer forget
 * the keys of its other queue pairs too. */
void tp_verbs_unexport(tp_verbs_export_t *x, bool tell)
{
    tp_verbs_ep_t *ep = x->ep;
    for (tp_verbs_export_t **p = &x->mr->exports; *p; p = &(*p)->mr_next)
        if (*p == x) {
            *p = x->mr_next;
            break;
        }
    for (tp_verbs_export_t **p = &ep->exports; *p; p = &(*p)->ep_next)
        if (*p == x) {
            *p = x->ep_next;
            break;
        }
    if (tell && ep->nqps > 1 && ep->state == TP_VERBS_EP_CONNECTED) {
        uint32_t id = htole32(x->id);
        tp_verbs_msg(ep, TP_VERBS_MSG_UNEXPORT, &id, sizeof(id));
    }
    tp_verbs_export_free(x, ep->nqps);
}

void tp_verbs_exports_drop(tp_verbs_ep_t *ep)
{
    while (ep->exports)
        tp_verbs_unexport(ep->exports, false);
    if (ep->inbox_mw && ibv_dealloc_mw(ep->inbox_mw))
        util_warn("verbs: ibv_dealloc_mw failed: %s", strerror(errno));
    ep->inbox_mw = NULL;
    if (ep->inbox_mr && ibv_dereg_mr(ep->inbox_mr))
        util_warn("verbs: ibv_dereg_mr failed: %s", strerror(errno));
    ep->inbox_mr = NULL;
    for (uint32_t i = 0; i < ep->npeer_exports; i++)
        util_free(ep->peer_exports[i].rkey);
    util_free(ep->peer_exports);
    ep->peer_exports = NULL;
    ep->npeer_exports = ep->peer_exports_cap = 0;
}

static tp_verbs_export_t *tp_verbs_export_new(tp_verbs_mr_t *mr,
                                              tp_verbs_ep_t *ep)
{
    unsigned n = ep->nqps;
    tp_verbs_export_t *x =
        util_calloc(1, sizeof(*x) + n * (sizeof(*x->mw) + sizeof(*x->rkey)));
    if (!x) {
        util_error("verbs: out of memory exporting a region to %s",
                   ep->base.peer);
        return NULL;
    }
    x->mw = (struct ibv_mw **)(x + 1);
    x->rkey = (uint32_t *)(x->mw + n);
    x->mr = mr;
    x->ep = ep;
    if (++ep->next_export_id == 0) /* 0 means "an MR key" in descriptors */
        ++ep->next_export_id;
    x->id = ep->next_export_id;
    return x;
}

/* One window per queue pair, each bound on its queue pair: the one of QP 0
 * serves before anything the peer is sent later on QP 0; the peer learns
 * the others (EXPORT) once their binds completed. */
static strata_status_t tp_verbs_export_bind(tp_verbs_ctx_t *c,
                                            tp_verbs_export_t *x)
{
    tp_verbs_ep_t *ep = x->ep;
    for (unsigned q = 0; q < ep->nqps; q++) {
        x->mw[q] = ibv_alloc_mw(c->pd, IBV_MW_TYPE_2);
        if (!x->mw[q]) {
            util_error("verbs: ibv_alloc_mw on %s failed: %s", c->dev_name,
                       strerror(errno));
            return STRATA_ERR_NOMEM;
        }
        strata_status_t st = tp_verbs_post_bind(
            &ep->qps[q], x->mw[q], x->mr->exact, q ? x->id : 0, &x->rkey[q]);
        if (st != STRATA_OK)
            return st;
    }
    x->binds_pending = ep->nqps - 1;
    return STRATA_OK;
}

strata_status_t tp_verbs_mr_export(tp_mr_t *base, tp_ep_t *ep_base,
                                   tp_rdesc_t *desc_out)
{
    tp_verbs_mr_t *mr = (tp_verbs_mr_t *)base;
    tp_verbs_ep_t *ep = tp_verbs_ep(ep_base);
    tp_verbs_ctx_t *c = ep->ctx;
    uint64_t addr = (uint64_t)(uintptr_t)base->addr;
    strata_status_t st = STRATA_OK;
    if (!mr->exact &&
        !(mr->exact = tp_verbs_reg_exact(c, base->addr, base->len, &st)))
        return st;
    if (!c->mw_type2) { /* the exact registration's key: docs/verbs.md */
        *desc_out = (tp_rdesc_t){addr, base->len, mr->exact->rkey};
        return STRATA_OK;
    }
    if (ep->state != TP_VERBS_EP_CONNECTED) {
        util_error("verbs: tp_mr_export to %s: the endpoint is not connected",
                   ep->base.peer);
        return STRATA_ERR_STATE;
    }
    tp_verbs_export_t *x = mr->exports;
    while (x && x->ep != ep)
        x = x->mr_next;
    if (!x) {
        x = tp_verbs_export_new(mr, ep);
        if (!x)
            return STRATA_ERR_NOMEM;
        st = tp_verbs_export_bind(c, x);
        if (st != STRATA_OK) {
            tp_verbs_export_free(x, ep->nqps);
            return st;
        }
        x->mr_next = mr->exports;
        mr->exports = x;
        x->ep_next = ep->exports;
        ep->exports = x;
    }
    *desc_out =
        (tp_rdesc_t){addr, base->len, x->rkey[0] | (uint64_t)x->id << 32};
    return STRATA_OK;
}

/* A bind on QP 1.. completed; after the last, the peer may stripe. */
void tp_verbs_export_bound(tp_verbs_ep_t *ep, uint32_t id)
{
    tp_verbs_export_t *x = ep->exports;
    while (x && x->id != id)
        x = x->ep_next;
    if (!x || !x->binds_pending || --x->binds_pending)
        return;
    uint32_t msg[1 + TP_VERBS_QPS_MAX];
    msg[0] = htole32(x->id);
    for (unsigned q = 1; q < ep->nqps; q++)
        msg[q] = htole32(x->rkey[q]);
    tp_verbs_msg(ep, TP_VERBS_MSG_EXPORT, msg, 4u * ep->nqps);
}

/* ---- the peer's exports: keys of its windows on QPs 1.., by id ---- */

static uint32_t tp_verbs_peer_export_pos(const tp_verbs_ep_t *ep, uint32_t id)
{
    uint32_t lo = 0, hi = ep->npeer_exports;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (ep->peer_exports[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const uint32_t *tp_verbs_peer_export_find(const tp_verbs_ep_t *ep, uint32_t id)
{
    uint32_t i = tp_verbs_peer_export_pos(ep, id);
    return i < ep->npeer_exports && ep->peer_exports[i].id == id
               ? ep->peer_exports[i].rkey
               : NULL;
}

void tp_verbs_peer_export_add(tp_verbs_ep_t *ep, const uint8_t *msg,
                              uint32_t len)
{
    if (len != 4u * ep->nqps || ep->nqps < 2) {
        util_error("verbs: malformed EXPORT message from %s", ep->base.peer);
        tp_verbs_ep_fail(ep, STRATA_ERR_PROTO);
        return;
    }
    uint32_t w[TP_VERBS_QPS_MAX];
    memcpy(w, msg, len);
    uint32_t id = le32toh(w[0]), i = tp_verbs_peer_export_pos(ep, id);
    if (i < ep->npeer_exports && ep->peer_exports[i].id == id)
        return;
    uint32_t *rkey = util_malloc(4u * ep->nqps);
    if (ep->npeer_exports == ep->peer_exports_cap) {
        uint32_t cap = ep->peer_exports_cap ? 2 * ep->peer_exports_cap : 16;
        tp_verbs_peer_export_t *t =
            util_realloc(ep->peer_exports, cap * sizeof(*t));
        if (t) {
            ep->peer_exports = t;
            ep->peer_exports_cap = cap;
        }
    }
    if (!rkey || ep->npeer_exports == ep->peer_exports_cap) {
        util_free(rkey); /* writes to it just do not stripe */
        return;
    }
    rkey[0] = 0;
    for (unsigned q = 1; q < ep->nqps; q++)
        rkey[q] = le32toh(w[q]);
    memmove(ep->peer_exports + i + 1, ep->peer_exports + i,
            (ep->npeer_exports - i) * sizeof(*ep->peer_exports));
    ep->peer_exports[i] = (tp_verbs_peer_export_t){id, rkey};
    ep->npeer_exports++;
}

void tp_verbs_peer_export_remove(tp_verbs_ep_t *ep, const uint8_t *msg,
                                 uint32_t len)
{
    uint32_t id;
    if (len != sizeof(id))
        return;
    memcpy(&id, msg, sizeof(id));
    id = le32toh(id);
    uint32_t i = tp_verbs_peer_export_pos(ep, id);
    if (i >= ep->npeer_exports || ep->peer_exports[i].id != id)
        return;
    util_free(ep->peer_exports[i].rkey);
    memmove(ep->peer_exports + i, ep->peer_exports + i + 1,
            (ep->npeer_exports - i - 1) * sizeof(*ep->peer_exports));
    ep->npeer_exports--;
}

/* ---- inboxes ---- */

/* The line of the endpoint's block the peer writes credits into, registered
 * alone; with windows, reachable through one bound to QP 0 only. */
strata_status_t tp_verbs_inbox_open(tp_verbs_ep_t *ep)
{
    tp_verbs_ctx_t *c = ep->ctx;
    strata_status_t st = STRATA_OK;
    ep->inbox_mr =
        tp_verbs_reg_exact(c, (void *)ep->inbox, TP_VERBS_INBOX_LINE, &st);
    if (!ep->inbox_mr)
        return st;
    if (!c->mw_type2) {
        ep->inbox_rkey = ep->inbox_mr->rkey;
        return STRATA_OK;
    }
    ep->inbox_mw = ibv_alloc_mw(c->pd, IBV_MW_TYPE_2);
    if (!ep->inbox_mw) {
        util_error("verbs: ibv_alloc_mw on %s failed: %s", c->dev_name,
                   strerror(errno));
        return STRATA_ERR_NOMEM;
    }
    return tp_verbs_post_bind(&ep->qps[0], ep->inbox_mw, ep->inbox_mr, 0,
                              &ep->inbox_rkey);
}
