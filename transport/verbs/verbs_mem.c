/*
 * Memory of a verbs context: registrations through the cache, the registered
 * arenas behind tp_mem_alloc() and the endpoints' buffers, and the inboxes
 * peers write credits into.
 */
#include "transport/verbs/verbs.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "engine/log.h"

#define TP_VERBS_ARENA_CHUNK (8u << 20)
#define TP_VERBS_INBOX_LINE 64

static int tp_verbs_ibv_access(unsigned access)
{
    int flags = IBV_ACCESS_LOCAL_WRITE;
    if (access & TP_ACCESS_REMOTE_WRITE)
        flags |= IBV_ACCESS_REMOTE_WRITE;
    return flags;
}

static strata_status_t tp_verbs_reg(void *arg, void *addr, size_t len,
                                    unsigned access, tp_verbs_reg_t *reg)
{
    tp_verbs_ctx_t *c = arg;
    struct ibv_mr *mr =
        ibv_reg_mr(c->pd, addr, len, tp_verbs_ibv_access(access));
    if (!mr) {
        int err = errno;
        char hint[192] = "";
        if (err == ENOMEM || err == EAGAIN)
            tp_verbs_memlock_hint(hint, sizeof(hint));
        eng_error("verbs: ibv_reg_mr of %zu bytes at %p on %s failed: %s%s",
                  len, addr, c->dev_name, strerror(err), hint);
        return err == ENOMEM ? STRATA_ERR_NOMEM : STRATA_ERR_IO;
    }
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
        eng_warn("verbs: ibv_dereg_mr on %s failed: %s", c->dev_name,
                 strerror(err));
}

strata_status_t tp_verbs_mem_init(tp_verbs_ctx_t *c)
{
    tp_verbs_rcache_ops_t ops = {tp_verbs_reg, tp_verbs_dereg, c};
    tp_verbs_rcache_init(&c->rcache, &ops, (size_t)sysconf(_SC_PAGESIZE));
    c->hook_local = (struct tp_verbs_arena_hook){c, TP_ACCESS_LOCAL};
    c->hook_remote = (struct tp_verbs_arena_hook){c, TP_ACCESS_REMOTE_WRITE};

    /* The inboxes: one line per endpoint, the only memory peers may write
     * that the application did not register itself. */
    size_t bytes = (size_t)TP_VERBS_INBOX_SLOTS * TP_VERBS_INBOX_LINE;
    c->inbox_mem = eng_aligned_alloc(4096, bytes);
    c->inbox_free = eng_malloc(TP_VERBS_INBOX_SLOTS * sizeof(uint16_t));
    if (!c->inbox_mem || !c->inbox_free) {
        eng_error("verbs: out of memory for the credit inboxes");
        return STRATA_ERR_NOMEM;
    }
    memset(c->inbox_mem, 0, bytes);
    for (uint32_t i = 0; i < TP_VERBS_INBOX_SLOTS; i++)
        c->inbox_free[i] = (uint16_t)(TP_VERBS_INBOX_SLOTS - 1 - i);
    c->ninbox_free = TP_VERBS_INBOX_SLOTS;
    return tp_verbs_rcache_get(&c->rcache, c->inbox_mem, bytes,
                               TP_ACCESS_REMOTE_WRITE, &c->inbox_reg);
}

void tp_verbs_mem_fini(tp_verbs_ctx_t *c)
{
    if (c->inbox_reg)
        tp_verbs_rcache_put(&c->rcache, c->inbox_reg);
    eng_arena_destroy(c->arena_local);
    eng_arena_destroy(c->arena_remote);
    if (c->rcache.ops.reg)
        tp_verbs_rcache_fini(&c->rcache);
    eng_free(c->inbox_mem);
    eng_free(c->inbox_free);
}

/* ---- the registered arenas ---- */

static strata_status_t tp_verbs_chunk_added(void *arg, void *addr, size_t len)
{
    struct tp_verbs_arena_hook *h = arg;
    tp_verbs_reg_t *reg;
    return tp_verbs_rcache_get(&h->c->rcache, addr, len, h->access, &reg);
}

static void tp_verbs_chunk_removed(void *arg, void *addr, size_t len)
{
    struct tp_verbs_arena_hook *h = arg;
    tp_verbs_reg_t *reg =
        tp_verbs_rcache_lookup(&h->c->rcache, addr, len, h->access);
    if (reg)
        tp_verbs_rcache_put(&h->c->rcache, reg);
}

static eng_arena_t *tp_verbs_arena(tp_verbs_ctx_t *c, unsigned access)
{
    bool remote = access & TP_ACCESS_REMOTE_WRITE;
    eng_arena_t **arena = remote ? &c->arena_remote : &c->arena_local;
    if (*arena)
        return *arena;
    eng_arena_hooks_t hooks = {tp_verbs_chunk_added, tp_verbs_chunk_removed,
                               remote ? &c->hook_remote : &c->hook_local};
    if (eng_arena_create(&hooks, TP_VERBS_ARENA_CHUNK, arena) != STRATA_OK)
        return NULL;
    return *arena;
}

/* Memory from a registered arena and its registration, with a reference. */
static strata_status_t tp_verbs_arena_get(tp_verbs_ctx_t *c, size_t len,
                                          unsigned access, void **addr_out,
                                          tp_verbs_reg_t **reg_out)
{
    eng_arena_t *arena = tp_verbs_arena(c, access);
    if (!arena)
        return STRATA_ERR_NOMEM;
    void *p = eng_arena_alloc(arena, len >= 4096 ? 4096 : 64, len);
    if (!p) {
        eng_error("verbs: cannot allocate %zu bytes of registered memory on "
                  "%s",
                  len, c->dev_name);
        return STRATA_ERR_NOMEM;
    }
    /* The chunk's registration: found, not made. */
    strata_status_t st =
        tp_verbs_rcache_get(&c->rcache, p, len, access, reg_out);
    if (st != STRATA_OK) {
        eng_arena_free(arena, p);
        return st;
    }
    *addr_out = p;
    return STRATA_OK;
}

strata_status_t tp_verbs_block_alloc(tp_verbs_ctx_t *c, size_t len,
                                     void **addr_out, tp_verbs_reg_t **reg_out)
{
    return tp_verbs_arena_get(c, len, TP_ACCESS_LOCAL, addr_out, reg_out);
}

void tp_verbs_block_free(tp_verbs_ctx_t *c, void *addr, tp_verbs_reg_t *reg)
{
    tp_verbs_rcache_put(&c->rcache, reg);
    eng_arena_free(c->arena_local, addr);
}

/* ---- regions ---- */

static strata_status_t tp_verbs_mr_new(tp_verbs_ctx_t *c, void *addr,
                                       size_t len, unsigned access,
                                       tp_verbs_reg_t *reg, eng_arena_t *arena,
                                       tp_mr_t **mr_out)
{
    tp_verbs_mr_t *mr = eng_calloc(1, sizeof(*mr));
    if (!mr) {
        eng_error("verbs: out of memory for a region");
        return STRATA_ERR_NOMEM;
    }
    mr->base = (tp_mr_t){&c->base, addr, len, access};
    mr->reg = reg;
    mr->arena = arena;
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
    st = tp_verbs_mr_new(c, addr, len, access, reg, NULL, mr_out);
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
    strata_status_t st = tp_verbs_arena_get(c, len, access, &p, &reg);
    if (st != STRATA_OK)
        return st;
    eng_arena_t *arena = tp_verbs_arena(c, access);
    st = tp_verbs_mr_new(c, p, len, access, reg, arena, mr_out);
    if (st != STRATA_OK) {
        tp_verbs_rcache_put(&c->rcache, reg);
        eng_arena_free(arena, p);
        return st;
    }
    *addr_out = p;
    return STRATA_OK;
}

void tp_verbs_mr_dereg(tp_mr_t *base)
{
    tp_verbs_mr_t *mr = (tp_verbs_mr_t *)base;
    tp_verbs_ctx_t *c = tp_verbs_ctx(base->ctx);
    tp_verbs_rcache_put(&c->rcache, mr->reg);
    if (mr->arena)
        eng_arena_free(mr->arena, base->addr);
    eng_free(mr);
}

strata_status_t tp_verbs_mr_export(tp_mr_t *base, tp_ep_t *ep,
                                   tp_rdesc_t *desc_out)
{
    (void)ep; /* an rkey is valid on every QP of the protection domain */
    tp_verbs_mr_t *mr = (tp_verbs_mr_t *)base;
    *desc_out =
        (tp_rdesc_t){(uint64_t)(uintptr_t)base->addr, base->len, mr->reg->rkey};
    return STRATA_OK;
}

/* ---- inboxes ---- */

strata_status_t tp_verbs_inbox_get(tp_verbs_ctx_t *c, int *slot_out)
{
    if (c->ninbox_free == 0) {
        eng_error("verbs: %d endpoints are open on this context, the most "
                  "it supports",
                  TP_VERBS_INBOX_SLOTS);
        return STRATA_ERR_RANGE;
    }
    *slot_out = c->inbox_free[--c->ninbox_free];
    return STRATA_OK;
}

void tp_verbs_inbox_put(tp_verbs_ctx_t *c, int slot)
{
    c->inbox_free[c->ninbox_free++] = (uint16_t)slot;
}

volatile uint32_t *tp_verbs_inbox_word(tp_verbs_ctx_t *c, int slot)
{
    return (volatile uint32_t *)(c->inbox_mem +
                                 (size_t)slot * TP_VERBS_INBOX_LINE);
}
