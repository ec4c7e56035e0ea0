/* The base of the socket providers: context, regions, listeners, progress
 * (sock.h). Endpoints are in sock_ep.c. */
#include "transport/sock.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "util/alloc.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

#define TP_SOCK_EPOLL_BATCH 64

/* ---- context ---- */

static void tp_sock_free(tp_sock_ctx_t *ctx)
{
    int fds[] = {ctx->epfd, ctx->tfd, ctx->bell};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        if (fds[i] >= 0)
            close(fds[i]);
    tp_evq_fini(&ctx->evq);
    OPENSSL_cleanse(&ctx->secret, sizeof(ctx->secret));
    util_free(ctx);
}

static strata_status_t tp_sock_poll_add(tp_sock_ctx_t *ctx, int fd,
                                        tp_sock_kind_t *kind)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = kind};
    return fd >= 0 && epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, fd, &ev) == 0
               ? STRATA_OK
               : STRATA_ERR_IO;
}

/* The epoll set, the timer and the doorbell, if the provider has one. */
static strata_status_t tp_sock_open_fds(tp_sock_ctx_t *ctx)
{
    ctx->epfd = epoll_create1(EPOLL_CLOEXEC);
    ctx->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (ctx->sops->bell)
        ctx->bell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ctx->epfd >= 0 &&
        tp_sock_poll_add(ctx, ctx->tfd, &ctx->timer_kind) == STRATA_OK &&
        (!ctx->sops->bell ||
         tp_sock_poll_add(ctx, ctx->bell, &ctx->bell_kind) == STRATA_OK))
        return STRATA_OK;
    int err = errno;
    util_error("%s: cannot create the %s: %s", tp_sock_name(ctx),
               ctx->sops->bell ? "epoll set, timer or doorbell"
                               : "epoll set or timer",
               strerror(err));
    return util_errno_status(err, STRATA_ERR_IO);
}

strata_status_t tp_sock_open(const tp_ops_t *ops, const tp_sock_ops_t *sops,
                             unsigned caps, const tp_params_t *params,
                             tp_sock_ctx_t **ctx_out)
{
    tp_sock_ctx_t *ctx = util_calloc(1, sops->ctx_size);
    if (!ctx)
        return STRATA_ERR_NOMEM;
    ctx->epfd = ctx->tfd = ctx->bell = -1;
    ctx->base = (tp_ctx_t){ops, caps, params->timeout_ms};
    ctx->sops = sops;
    ctx->poll_ns = (uint64_t)params->poll_us * 1000u;
    if (ctx->poll_ns < sops->poll_ns)
        ctx->poll_ns = sops->poll_ns;
    ctx->next_key = 1;
    ctx->timer_kind = TP_SOCK_K_TIMER;
    ctx->bell_kind = TP_SOCK_K_BELL;
    util_list_t *lists[] = {&ctx->mrs, &ctx->listeners, &ctx->eps,
                            &ctx->graveyard, &ctx->timed};
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++)
        util_list_init(lists[i]);
    strata_status_t st = tp_auth_secret_load(params, &ctx->secret);
    if (st == STRATA_OK &&
        tp_evq_init(&ctx->evq, sops->arrivals, sops->recv_fifo) != STRATA_OK)
        st = STRATA_ERR_NOMEM;
    if (st == STRATA_OK)
        st = tp_sock_open_fds(ctx);
    if (st != STRATA_OK) {
        tp_sock_free(ctx);
        return st;
    }
    *ctx_out = ctx;
    return STRATA_OK;
}

static void tp_sock_mr_free(tp_sock_mr_t *mr)
{
    util_list_del(&mr->link);
    tp_sock_ctx(mr->base.ctx)->sops->mr_release(mr);
    util_free(mr);
}

void tp_sock_close(tp_ctx_t *base)
{
    tp_sock_ctx_t *ctx = tp_sock_ctx(base);
    util_list_t *pos, *tmp;
    /* Through the ops table: the provider's may do more (shm unlinks). */
    while (!util_list_empty(&ctx->listeners))
        base->ops->listener_close(
            &util_container_of(ctx->listeners.next, tp_sock_listener_t, link)
                 ->base);
    /* As tp_ep_close() each (peers learn it was on purpose), then free
     * what waited for its events to be reported. */
    util_list_for_each_safe(pos, tmp, &ctx->eps)
        tp_sock_ep_close(&util_container_of(pos, tp_sock_ep_t, link)->base);
    util_list_for_each_safe(pos, tmp, &ctx->graveyard)
        tp_sock_ep_free(util_container_of(pos, tp_sock_ep_t, link));
    util_list_for_each_safe(pos, tmp, &ctx->mrs)
        tp_sock_mr_free(util_container_of(pos, tp_sock_mr_t, link));
    tp_sock_free(ctx);
}

int tp_sock_wait_fd(const tp_ctx_t *base)
{
    return util_container_of(base, tp_sock_ctx_t, base)->epfd;
}

/* ---- regions ---- */

tp_sock_mr_t *tp_sock_mr_new(tp_sock_ctx_t *ctx, void *addr, size_t len,
                             unsigned access)
{
    tp_sock_mr_t *mr = util_calloc(1, ctx->sops->mr_size);
    if (!mr)
        return NULL;
    mr->base = (tp_mr_t){&ctx->base, addr, len, access};
    mr->key = ctx->next_key++;
    util_list_add_tail(&ctx->mrs, &mr->link);
    return mr;
}

strata_status_t tp_sock_mr_reg(tp_ctx_t *ctx, void *addr, size_t len,
                               unsigned access, tp_mr_t **mr_out)
{
    tp_sock_mr_t *mr = tp_sock_mr_new(tp_sock_ctx(ctx), addr, len, access);
    if (!mr)
        return STRATA_ERR_NOMEM;
    *mr_out = &mr->base;
    return STRATA_OK;
}

void tp_sock_mr_dereg(tp_mr_t *base)
{
    tp_sock_mr_t *mr = tp_sock_mr(base);
    tp_sock_ctx_t *ctx = tp_sock_ctx(base->ctx);
    util_list_t *pos, *tmp;
    util_list_for_each_safe(pos, tmp, &ctx->eps)
    {
        tp_sock_ep_t *ep = util_container_of(pos, tp_sock_ep_t, link);
        if (util_keymap_del(&ep->grants, mr->key))
            ctx->sops->mr_revoke(ep, mr);
    }
    tp_sock_mr_free(mr);
}

strata_status_t tp_sock_mr_export(tp_mr_t *base, tp_ep_t *ep_base,
                                  tp_rdesc_t *desc_out)
{
    tp_sock_mr_t *mr = tp_sock_mr(base);
    tp_sock_ep_t *ep = tp_sock_ep(ep_base);
    if (!util_keymap_get(&ep->grants, mr->key)) {
        if (util_keymap_put(&ep->grants, mr->key, mr) != STRATA_OK) {
            util_error("%s: out of memory exporting a region to %s",
                       tp_sock_name(ep->ctx), ep_base->peer);
            return STRATA_ERR_NOMEM;
        }
        if (ep->ctx->sops->mr_granted)
            ep->ctx->sops->mr_granted(ep, mr);
    }
    *desc_out = (tp_rdesc_t){.addr = 0, .len = base->len, .key = mr->key};
    return STRATA_OK;
}

/* ---- listeners ---- */

strata_status_t tp_sock_listen(tp_sock_ctx_t *ctx, int type,
                               const struct sockaddr *sa, socklen_t sl,
                               const char *addr, tp_listener_t **listener_out)
{
    tp_sock_listener_t *l = util_calloc(1, sizeof(*l));
    if (!l)
        return STRATA_ERR_NOMEM;
    snprintf(l->base.addr, sizeof(l->base.addr), "%s", addr);
    l->base.ctx = &ctx->base;
    l->kind = TP_SOCK_K_LISTENER;
    int one = 1;
    strata_status_t st = STRATA_ERR_IO;
    /* A restarted job rebinds its port at once (not after TIME_WAIT). */
    l->fd = socket(sa->sa_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0 ||
        (sa->sa_family != AF_UNIX &&
         setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one))) ||
        bind(l->fd, sa, sl) != 0 || listen(l->fd, SOMAXCONN) != 0) {
        st = util_errno_status(errno, STRATA_ERR_IO);
        util_error("%s: cannot listen on %s: %s", tp_sock_name(ctx), addr,
                   strerror(errno));
        goto close_fd;
    }
    if (tp_sock_poll_add(ctx, l->fd, &l->kind) != STRATA_OK) {
        util_error("%s: epoll_ctl for listener %s: %s", tp_sock_name(ctx), addr,
                   strerror(errno));
        goto close_fd;
    }
    util_list_add_tail(&ctx->listeners, &l->link);
    *listener_out = &l->base;
    return STRATA_OK;
close_fd:
    if (l->fd >= 0)
        close(l->fd);
    util_free(l);
    return st;
}

/* Polls the listener (EPOLLIN), or not (0) while it pauses. */
static void tp_sock_listener_poll(tp_sock_listener_t *l, uint32_t events)
{
    tp_sock_ctx_t *ctx = tp_sock_ctx(l->base.ctx);
    struct epoll_event ev = {.events = events, .data.ptr = &l->kind};
    if (epoll_ctl(ctx->epfd, EPOLL_CTL_MOD, l->fd, &ev) != 0)
        util_warn("%s: listener %s: epoll_ctl: %s", tp_sock_name(ctx),
                  l->base.addr, strerror(errno));
}

static void tp_sock_accept(tp_sock_listener_t *l)
{
    tp_sock_ctx_t *ctx = tp_sock_ctx(l->base.ctx);
    const char *name = tp_sock_name(ctx);
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(l->fd, (struct sockaddr *)&ss, &sl,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN &&
                tp_accept_failed(&l->pause, name, l->base.addr, errno)) {
                tp_sock_listener_poll(l, 0);
                tp_sock_timer_update(ctx);
            }
            return;
        }
        tp_accept_ok(&l->pause, name, l->base.addr);
        char peer[128];
        ctx->sops->accepted(ctx, fd, &ss, peer, sizeof(peer));
        tp_sock_ep_t *ep = tp_sock_ep_new(ctx, fd, true, peer);
        if (!ep) {
            close(fd);
            continue;
        }
        ep->listener = l;
        ctx->sops->ep_ready(ep, EPOLLIN); /* it may have spoken already */
    }
}

void tp_sock_listener_close(tp_listener_t *base)
{
    tp_sock_listener_t *l = util_container_of(base, tp_sock_listener_t, base);
    tp_sock_ctx_t *ctx = tp_sock_ctx(base->ctx);
    util_list_t *pos, *tmp;
    util_list_for_each_safe(pos, tmp, &ctx->eps)
    {
        tp_sock_ep_t *ep = util_container_of(pos, tp_sock_ep_t, link);
        if (ep->listener != l)
            continue;
        ep->listener = NULL;
        if (ep->state < TP_SOCK_UP) /* not the user's yet */
            tp_sock_ep_drop(ep);
    }
    tp_evq_forget_listener(&ctx->evq, base);
    epoll_ctl(ctx->epfd, EPOLL_CTL_DEL, l->fd, NULL);
    close(l->fd);
    util_list_del(&l->link);
    util_free(l);
}

/* ---- deadlines ---- */

void tp_sock_timer_update(tp_sock_ctx_t *ctx)
{
    uint64_t first = 0;
    util_list_t *pos, *tmp;
    util_list_for_each_safe(pos, tmp, &ctx->timed)
    {
        tp_sock_ep_t *ep = util_container_of(pos, tp_sock_ep_t, timed_link);
        if (!first || ep->deadline_ns < first)
            first = ep->deadline_ns;
    }
    util_list_for_each_safe(pos, tmp, &ctx->listeners)
    {
        tp_sock_listener_t *l =
            util_container_of(pos, tp_sock_listener_t, link);
        first = tp_accept_first(&l->pause, first);
    }
    if (util_timer_arm(ctx->tfd, first) != 0)
        util_warn("%s: cannot arm the timer: %s", tp_sock_name(ctx),
                  strerror(errno));
}

static void tp_sock_drain_fd(int fd)
{
    uint64_t count;
    while (read(fd, &count, sizeof(count)) > 0)
        ;
}

static void tp_sock_expire(tp_sock_ctx_t *ctx)
{
    tp_sock_drain_fd(ctx->tfd);
    uint64_t now = util_now_ns();
    util_list_t *pos, *tmp;
    util_list_for_each_safe(pos, tmp, &ctx->timed)
    {
        tp_sock_ep_t *ep = util_container_of(pos, tp_sock_ep_t, timed_link);
        if (ep->deadline_ns > now)
            continue;
        if (ep->state < TP_SOCK_UP)
            tp_sock_ep_fail(ep, STRATA_ERR_TIMEOUT,
                            "no authenticated connection within "
                            "STRATA_TIMEOUT_MS=%d ms",
                            ctx->base.timeout_ms);
        else if (ctx->sops->ep_expired)
            ctx->sops->ep_expired(ep);
    }
    util_list_for_each_safe(pos, tmp, &ctx->listeners)
    {
        tp_sock_listener_t *l =
            util_container_of(pos, tp_sock_listener_t, link);
        if (tp_accept_due(&l->pause, now)) {
            tp_sock_listener_poll(l, EPOLLIN);
            tp_sock_accept(l);
        }
    }
    tp_sock_timer_update(ctx);
}

/* ---- progress ---- */

static void tp_sock_ep_ready(tp_sock_ep_t *ep, uint32_t events)
{
    if (ep->state == TP_SOCK_DOWN)
        return;
    if (ep->state == TP_SOCK_CONNECTING) {
        if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
            tp_sock_connected(ep);
        return;
    }
    ep->ctx->sops->ep_ready(ep, events);
}

strata_status_t tp_sock_poll(tp_sock_ctx_t *ctx)
{
    if (ctx->poll_ns) {
        uint64_t now = util_now_ns(); /* vDSO: no system call */
        if (now < ctx->next_poll_ns)
            return STRATA_OK;
        ctx->next_poll_ns = now + ctx->poll_ns;
    }
    struct epoll_event evs[TP_SOCK_EPOLL_BATCH];
    int n = epoll_wait(ctx->epfd, evs, TP_SOCK_EPOLL_BATCH, 0);
    if (n < 0 && errno != EINTR) {
        util_error("%s: epoll_wait: %s", tp_sock_name(ctx), strerror(errno));
        return STRATA_ERR_IO;
    }
    for (int i = 0; i < n; i++) {
        tp_sock_kind_t *kind = evs[i].data.ptr;
        switch (*kind) {
        case TP_SOCK_K_LISTENER:
            tp_sock_accept(util_container_of(kind, tp_sock_listener_t, kind));
            break;
        case TP_SOCK_K_TIMER:
            tp_sock_expire(ctx);
            break;
        case TP_SOCK_K_BELL:
            tp_sock_drain_fd(ctx->bell);
            break;
        case TP_SOCK_K_EP:
            tp_sock_ep_ready(util_container_of(kind, tp_sock_ep_t, kind),
                             evs[i].events);
            break;
        }
    }
    return STRATA_OK;
}

void tp_sock_begin(tp_sock_ctx_t *ctx)
{
    /* Closed endpoints (or ones that failed their handshake, never the
     * user's) no event names any more: the caller has read the batch that
     * named them last, the one the previous call returned. */
    util_list_t *pos, *tmp;
    util_list_for_each_safe(pos, tmp, &ctx->graveyard)
    {
        tp_sock_ep_t *ep = util_container_of(pos, tp_sock_ep_t, link);
        if (ep->events == 0)
            tp_sock_ep_free(ep);
    }
    tp_evq_begin(&ctx->evq);
}

/* An event left the queue: free what it held. A closed endpoint is freed
 * by the next progress call, once its last event was read. */
static void tp_sock_reported(void *arg, tp_evq_item_t *it)
{
    tp_sock_ctx_t *ctx = arg;
    tp_sock_ep_t *ep = tp_sock_ep(it->ev.ep);
    if (it->ev.type == TP_EV_WRITE_DONE || it->ev.type == TP_EV_SEND_DONE)
        ctx->sops->op_reported(ep, it->slot);
    ep->events--;
}

int tp_sock_report(tp_sock_ctx_t *ctx, tp_event_t *events, int max)
{
    return tp_evq_report(&ctx->evq, events, max, tp_sock_reported, ctx);
}

strata_status_t tp_sock_wait_arm(tp_sock_ctx_t *ctx)
{
    if (!tp_evq_empty(&ctx->evq) || !util_list_empty(&ctx->graveyard))
        return STRATA_ERR_AGAIN;
    ctx->next_poll_ns = 0; /* the next progress polls the sockets */
    return STRATA_OK;
}
