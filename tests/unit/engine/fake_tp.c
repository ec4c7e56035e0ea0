/* A fake transport provider: see fake_tp.h. */
#include "tests/unit/engine/fake_tp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "engine/engine.h"
#include "transport/provider.h"

typedef struct fake_ep {
    tp_ep_t base;
    struct fake_ep *peer; /* NULL once disconnected */
    bool closed;
    struct fake_ep *next;
} fake_ep_t;

typedef struct fake_mr {
    tp_mr_t base;
    uint64_t key;
    bool owned; /* from mem_alloc: freed with it */
    struct fake_mr *next;
} fake_mr_t;

typedef struct fake_listener {
    tp_listener_t base;
    struct fake_listener *next; /* every listener of the process */
} fake_listener_t;

typedef struct fake_ev {
    tp_event_t ev;
    void *payload; /* RECV: the message, valid until the next progress */
    struct fake_ev *next;
} fake_ev_t;

typedef struct fake_ctx {
    tp_ctx_t base;
    int efd;
    fake_ev_t *head, *tail; /* to report, oldest first */
    fake_ev_t *reported;    /* reported by the last progress */
    fake_ep_t *eps;
    fake_mr_t *mrs;
    tp_event_t last_imm;
    bool have_imm, broken;
} fake_ctx_t;

static const tp_ops_t fake_ops;
static fake_listener_t *fake_listeners;
static unsigned fake_port = 40000;
static uint64_t fake_key = 1;

static fake_ctx_t *fake_ctx(const tp_ctx_t *ctx)
{
    return (fake_ctx_t *)ctx;
}

static void fake_report(fake_ctx_t *ctx, const tp_event_t *ev, void *payload)
{
    fake_ev_t *e = calloc(1, sizeof(*e));
    if (!e)
        abort(); /* a test harness out of memory */
    e->ev = *ev;
    e->payload = payload;
    if (ctx->tail)
        ctx->tail->next = e;
    else
        ctx->head = e;
    ctx->tail = e;
}

static void fake_ev_free(fake_ev_t *e)
{
    free(e->payload);
    free(e);
}

/* Forget what is queued for ep (all of it with NULL), as a provider does
 * for an endpoint closed. */
static void fake_drop(fake_ctx_t *ctx, const fake_ep_t *ep)
{
    fake_ev_t **pp = &ctx->head, *last = NULL;
    while (*pp) {
        fake_ev_t *e = *pp;
        if (!ep || e->ev.ep == &ep->base) {
            *pp = e->next;
            fake_ev_free(e);
        } else {
            last = e;
            pp = &e->next;
        }
    }
    ctx->tail = last;
}

/* The peer of ep learns that the connection is gone. */
static void fake_hang_up(fake_ep_t *ep, strata_status_t status)
{
    fake_ep_t *peer = ep->peer;
    if (!peer)
        return;
    tp_event_t ev = {
        .type = TP_EV_DISCONNECTED, .status = status, .ep = &peer->base};
    fake_report(fake_ctx(peer->base.ctx), &ev, NULL);
    peer->peer = NULL;
    ep->peer = NULL;
}

tp_ctx_t *fake_tp_open(void)
{
    fake_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return NULL;
    ctx->base = (tp_ctx_t){
        .ops = &fake_ops, .caps = TP_CAP_REMOTE_ANY_MEMORY, .timeout_ms = 1};
    ctx->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    return &ctx->base;
}

void fake_tp_break(tp_ctx_t *base)
{
    fake_ctx_t *ctx = fake_ctx(base);
    ctx->broken = true;
    fake_drop(ctx, NULL);
    for (fake_ep_t *ep = ctx->eps; ep; ep = ep->next)
        fake_hang_up(ep, STRATA_ERR_PEER);
    for (fake_listener_t **pp = &fake_listeners; *pp;)
        if ((*pp)->base.ctx == base)
            *pp = (*pp)->next;
        else
            pp = &(*pp)->next;
}

bool fake_tp_replay_imm(tp_ctx_t *base)
{
    fake_ctx_t *ctx = fake_ctx(base);
    if (!ctx->have_imm)
        return false;
    fake_report(ctx, &ctx->last_imm, NULL);
    return true;
}

/* ---- the ops ---- */

static bool fake_available(void)
{
    return true;
}

static strata_status_t fake_open(const tp_params_t *params, tp_ctx_t **ctx_out)
{
    (void)params;
    *ctx_out = fake_tp_open();
    return *ctx_out ? STRATA_OK : STRATA_ERR_NOMEM;
}

static void fake_listener_close(tp_listener_t *listener)
{
    for (fake_listener_t **pp = &fake_listeners; *pp; pp = &(*pp)->next)
        if (&(*pp)->base == listener) {
            *pp = (*pp)->next;
            break;
        }
    fake_ctx_t *ctx = fake_ctx(listener->ctx);
    for (fake_ev_t *e = ctx->head; e; e = e->next)
        if (e->ev.listener == listener)
            e->ev.listener = NULL;
    free(listener);
}

static void fake_ep_close(tp_ep_t *base)
{
    fake_ep_t *ep = (fake_ep_t *)base;
    ep->closed = true;
    fake_drop(fake_ctx(base->ctx), ep);
    fake_hang_up(ep, STRATA_OK);
}

static void fake_mr_dereg(tp_mr_t *base)
{
    fake_ctx_t *ctx = fake_ctx(base->ctx);
    for (fake_mr_t **pp = &ctx->mrs; *pp; pp = &(*pp)->next)
        if (&(*pp)->base == base) {
            fake_mr_t *mr = *pp;
            *pp = mr->next;
            if (mr->owned)
                free(mr->base.addr);
            free(mr);
            return;
        }
}

static void fake_close(tp_ctx_t *base)
{
    fake_ctx_t *ctx = fake_ctx(base);
    for (fake_listener_t *l = fake_listeners, *next; l; l = next) {
        next = l->next;
        if (l->base.ctx == base)
            fake_listener_close(&l->base);
    }
    while (ctx->eps) {
        fake_ep_t *ep = ctx->eps;
        ctx->eps = ep->next;
        fake_hang_up(ep, STRATA_OK);
        free(ep);
    }
    while (ctx->mrs)
        fake_mr_dereg(&ctx->mrs->base);
    fake_drop(ctx, NULL);
    while (ctx->reported) {
        fake_ev_t *e = ctx->reported;
        ctx->reported = e->next;
        fake_ev_free(e);
    }
    if (ctx->efd >= 0)
        close(ctx->efd);
    free(ctx);
}

static strata_status_t fake_mr_new(tp_ctx_t *base, void *addr, size_t len,
                                   unsigned access, bool owned,
                                   tp_mr_t **mr_out)
{
    fake_ctx_t *ctx = fake_ctx(base);
    fake_mr_t *mr = calloc(1, sizeof(*mr));
    if (!mr)
        return STRATA_ERR_NOMEM;
    mr->base =
        (tp_mr_t){.ctx = base, .addr = addr, .len = len, .access = access};
    mr->key = fake_key++;
    mr->owned = owned;
    mr->next = ctx->mrs;
    ctx->mrs = mr;
    *mr_out = &mr->base;
    return STRATA_OK;
}

static strata_status_t fake_mr_reg(tp_ctx_t *base, void *addr, size_t len,
                                   unsigned access, tp_mr_t **mr_out)
{
    return fake_mr_new(base, addr, len, access, false, mr_out);
}

static strata_status_t fake_mem_alloc(tp_ctx_t *base, size_t len,
                                      unsigned access, void **addr_out,
                                      tp_mr_t **mr_out)
{
    void *p = aligned_alloc(64, (len + 63) / 64 * 64);
    if (!p)
        return STRATA_ERR_NOMEM;
    memset(p, 0, len);
    strata_status_t st = fake_mr_new(base, p, len, access, true, mr_out);
    if (st != STRATA_OK) {
        free(p);
        return st;
    }
    *addr_out = p;
    return STRATA_OK;
}

static strata_status_t fake_mr_export(tp_mr_t *base, tp_ep_t *ep,
                                      tp_rdesc_t *desc_out)
{
    (void)ep;
    const fake_mr_t *mr = (const fake_mr_t *)base;
    *desc_out = (tp_rdesc_t){.addr = (uint64_t)(uintptr_t)base->addr,
                             .len = base->len,
                             .key = mr->key};
    return STRATA_OK;
}

static strata_status_t fake_listen(tp_ctx_t *base, const char *bind,
                                   tp_listener_t **listener_out)
{
    fake_listener_t *l = calloc(1, sizeof(*l));
    if (!l)
        return STRATA_ERR_NOMEM;
    l->base.ctx = base;
    const char *port = bind ? strrchr(bind, ':') : NULL;
    if (port && atoi(port + 1) != 0)
        snprintf(l->base.addr, sizeof(l->base.addr), "%s", bind);
    else
        snprintf(l->base.addr, sizeof(l->base.addr), "127.0.0.1:%u",
                 fake_port++);
    l->next = fake_listeners;
    fake_listeners = l;
    *listener_out = &l->base;
    return STRATA_OK;
}

static fake_ep_t *fake_ep_new(tp_ctx_t *base, const char *peer)
{
    fake_ctx_t *ctx = fake_ctx(base);
    fake_ep_t *ep = calloc(1, sizeof(*ep));
    if (!ep)
        return NULL;
    ep->base.ctx = base;
    snprintf(ep->base.peer, sizeof(ep->base.peer), "%s", peer);
    ep->next = ctx->eps;
    ctx->eps = ep;
    return ep;
}

static strata_status_t fake_connect(tp_ctx_t *base, const char *addr,
                                    tp_ep_t **ep_out)
{
    fake_listener_t *l = fake_listeners;
    while (l && strcmp(l->base.addr, addr) != 0)
        l = l->next;
    fake_ep_t *ep = fake_ep_new(base, addr);
    if (!ep)
        return STRATA_ERR_NOMEM;
    tp_event_t ev = {.type = TP_EV_CONNECTED, .ep = &ep->base};
    if (!l || fake_ctx(base)->broken) {
        snprintf(ep->base.why, sizeof(ep->base.why),
                 "connection refused (no fake listener at %s)", addr);
        ev.status = STRATA_ERR_PEER;
        fake_report(fake_ctx(base), &ev, NULL);
        *ep_out = &ep->base;
        return STRATA_OK;
    }
    char from[32];
    snprintf(from, sizeof(from), "127.0.0.1:%u", fake_port++);
    fake_ep_t *accepted = fake_ep_new(l->base.ctx, from);
    if (!accepted)
        return STRATA_ERR_NOMEM;
    ep->peer = accepted;
    accepted->peer = ep;
    tp_event_t acc = {
        .type = TP_EV_ACCEPTED, .ep = &accepted->base, .listener = &l->base};
    fake_report(fake_ctx(l->base.ctx), &acc, NULL);
    fake_report(fake_ctx(base), &ev, NULL);
    *ep_out = &ep->base;
    return STRATA_OK;
}

/* The peer's region a descriptor names, if it is registered still. */
static fake_mr_t *fake_target(const fake_ep_t *ep, const tp_rdesc_t *dst)
{
    for (fake_mr_t *mr = fake_ctx(ep->peer->base.ctx)->mrs; mr; mr = mr->next)
        if (mr->key == dst->key &&
            (uint64_t)(uintptr_t)mr->base.addr == dst->addr &&
            dst->len <= mr->base.len)
            return mr;
    return NULL;
}

static strata_status_t fake_write(tp_ep_t *base, tp_mr_t *mr, size_t off,
                                  const tp_rdesc_t *dst, uint64_t dst_off,
                                  size_t len, uint32_t imm, unsigned flags,
                                  void *op_ctx)
{
    fake_ep_t *ep = (fake_ep_t *)base;
    if (!ep->peer)
        return STRATA_ERR_PEER;
    fake_mr_t *target = fake_target(ep, dst);
    if (!target)
        return STRATA_ERR_RANGE;
    memcpy((char *)target->base.addr + dst_off, (char *)mr->addr + off, len);
    if (flags & TP_WRITE_IMM) {
        tp_event_t arrival = {.type = TP_EV_WRITE_IMM,
                              .ep = &ep->peer->base,
                              .imm = imm,
                              .len = (uint32_t)len};
        fake_report(fake_ctx(ep->peer->base.ctx), &arrival, NULL);
    }
    tp_event_t done = {.type = TP_EV_WRITE_DONE, .ep = base, .op_ctx = op_ctx};
    fake_report(fake_ctx(base->ctx), &done, NULL);
    return STRATA_OK;
}

static strata_status_t fake_send(tp_ep_t *base, const void *buf, size_t len,
                                 void *op_ctx)
{
    fake_ep_t *ep = (fake_ep_t *)base;
    if (!ep->peer)
        return STRATA_ERR_PEER;
    void *copy = malloc(len ? len : 1);
    if (!copy)
        return STRATA_ERR_NOMEM;
    memcpy(copy, buf, len);
    tp_event_t msg = {.type = TP_EV_RECV,
                      .ep = &ep->peer->base,
                      .len = (uint32_t)len,
                      .data = copy};
    fake_report(fake_ctx(ep->peer->base.ctx), &msg, copy);
    tp_event_t done = {.type = TP_EV_SEND_DONE, .ep = base, .op_ctx = op_ctx};
    fake_report(fake_ctx(base->ctx), &done, NULL);
    return STRATA_OK;
}

static strata_status_t fake_progress(tp_ctx_t *base, tp_event_t *events,
                                     int max, int *n_out)
{
    fake_ctx_t *ctx = fake_ctx(base);
    while (ctx->reported) {
        fake_ev_t *e = ctx->reported;
        ctx->reported = e->next;
        fake_ev_free(e);
    }
    int n = 0;
    while (ctx->head && n < max && !ctx->broken) {
        fake_ev_t *e = ctx->head;
        ctx->head = e->next;
        if (!ctx->head)
            ctx->tail = NULL;
        events[n++] = e->ev;
        if (e->ev.type == TP_EV_WRITE_IMM) {
            ctx->last_imm = e->ev;
            ctx->have_imm = true;
        }
        e->next = ctx->reported;
        ctx->reported = e;
    }
    *n_out = n;
    return STRATA_OK;
}

static int fake_wait_fd(const tp_ctx_t *base)
{
    return fake_ctx(base)->efd;
}

static strata_status_t fake_wait_arm(tp_ctx_t *base)
{
    return fake_ctx(base)->head ? STRATA_ERR_AGAIN : STRATA_OK;
}

static const tp_ops_t fake_ops = {
    .name = "tcp",
    .available = fake_available,
    .open = fake_open,
    .close = fake_close,
    .mr_reg = fake_mr_reg,
    .mem_alloc = fake_mem_alloc,
    .mr_dereg = fake_mr_dereg,
    .mr_export = fake_mr_export,
    .listen = fake_listen,
    .listener_close = fake_listener_close,
    .connect = fake_connect,
    .ep_close = fake_ep_close,
    .write = fake_write,
    .send = fake_send,
    .progress = fake_progress,
    .wait_fd = fake_wait_fd,
    .wait_arm = fake_wait_arm,
};

strata_ctx_t *fake_tp_rank(const char *const *settings)
{
    strata_ctx_t *ctx;
    if (eng_ctx_create(settings, &ctx) != STRATA_OK)
        return NULL;
    /* One job: each context of the process counts as a later job else. */
    ctx->launch.incarnation = 42;
    ctx->coord_tp = fake_tp_open();
    ctx->data_tp[ENG_PROV_TCP] = fake_tp_open();
    if (eng_boot_prepare(ctx) != STRATA_OK || eng_loop_init(ctx) != STRATA_OK) {
        eng_ctx_free(ctx);
        return NULL;
    }
    return ctx;
}
