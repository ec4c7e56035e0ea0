/* The shm provider: context, regions, the progress loop and its ops table. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "transport/shm/shm.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

#define TP_SHM_EPOLL_BATCH 64

/* ---- context ---- */

static bool tp_shm_available(void)
{
    int fd = memfd_create("strata-probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return false;
    close(fd);
    return true;
}

static void tp_shm_free(tp_shm_ctx_t *ctx)
{
    int fds[] = {ctx->epfd, ctx->tfd, ctx->bell};
    for (int i = 0; i < 3; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    tp_evq_fini(&ctx->evq);
    OPENSSL_cleanse(&ctx->secret, sizeof(ctx->secret));
    util_free(ctx);
}

static strata_status_t tp_shm_poll_add(tp_shm_ctx_t *ctx, int fd,
                                       tp_shm_kind_t *kind)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = kind};
    return fd >= 0 && epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, fd, &ev) == 0
               ? STRATA_OK
               : STRATA_ERR_IO;
}

static strata_status_t tp_shm_open(const tp_params_t *params,
                                   tp_ctx_t **ctx_out)
{
    tp_shm_ctx_t *ctx = util_calloc(1, sizeof(*ctx));
    if (!ctx)
        return STRATA_ERR_NOMEM;
    ctx->epfd = ctx->tfd = ctx->bell = -1;
    ctx->base.ops = &tp_shm_ops;
    ctx->base.caps = 0; /* peers write only into tp_mem_alloc() memory */
    ctx->base.timeout_ms = params->timeout_ms;
    ctx->next_key = 1;
    ctx->timer_kind = TP_SHM_K_TIMER;
    ctx->bell_kind = TP_SHM_K_DOORBELL;
    util_list_t *lists[] = {&ctx->mrs, &ctx->listeners, &ctx->eps,
                            &ctx->graveyard, &ctx->timed};
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++)
        util_list_init(lists[i]);
    strata_status_t st = tp_auth_secret_load(params, &ctx->secret);
    if (st == STRATA_OK &&
        tp_evq_init(&ctx->evq, TP_SHM_ARRIVALS, TP_SHM_RECV_FIFO) != STRATA_OK)
        st = STRATA_ERR_NOMEM;
    if (st != STRATA_OK) {
        tp_shm_free(ctx);
        return st;
    }
    ctx->epfd = epoll_create1(EPOLL_CLOEXEC);
    ctx->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    ctx->bell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ctx->epfd < 0 ||
        tp_shm_poll_add(ctx, ctx->tfd, &ctx->timer_kind) != STRATA_OK ||
        tp_shm_poll_add(ctx, ctx->bell, &ctx->bell_kind) != STRATA_OK) {
        int err = errno;
        util_error("shm: cannot create the epoll set, timer or doorbell: %s",
                   strerror(err));
        tp_shm_free(ctx);
        return util_errno_status(err, STRATA_ERR_IO);
    }
    *ctx_out = &ctx->base;
    return STRATA_OK;
}

static void tp_shm_mr_free(tp_shm_mr_t *mr)
{
    util_list_del(&mr->link);
    if (mr->fd >= 0) {
        munmap(mr->base.addr, mr->map_len);
        close(mr->fd);
    }
    util_free(mr);
}

static void tp_shm_close(tp_ctx_t *base)
{
    tp_shm_ctx_t *ctx = tp_shm_ctx(base);
    util_list_t *pos, *tmp;
    while (!util_list_empty(&ctx->listeners))
        tp_shm_listener_close(
            &util_container_of(ctx->listeners.next, tp_shm_listener_t, link)
                 ->base);
    util_list_for_each_safe(pos, tmp, &ctx->eps)
        tp_shm_ep_close(&util_container_of(pos, tp_shm_ep_t, link)->base);
    util_list_for_each_safe(pos, tmp, &ctx->graveyard)
        tp_shm_ep_free(util_container_of(pos, tp_shm_ep_t, link));
    util_list_for_each_safe(pos, tmp, &ctx->mrs)
        tp_shm_mr_free(util_container_of(pos, tp_shm_mr_t, link));
    tp_shm_free(ctx);
}

/* ---- memory ---- */

static tp_shm_mr_t *tp_shm_mr_new(tp_shm_ctx_t *ctx, void *addr, size_t len,
                                  unsigned access)
{
    tp_shm_mr_t *mr = util_calloc(1, sizeof(*mr));
    if (!mr)
        return NULL;
    mr->base = (tp_mr_t){&ctx->base, addr, len, access};
    mr->key = ctx->next_key++;
    mr->fd = -1;
    util_list_add_tail(&ctx->mrs, &mr->link);
    return mr;
}

static strata_status_t tp_shm_mr_reg(tp_ctx_t *ctx, void *addr, size_t len,
                                     unsigned access, tp_mr_t **mr_out)
{
    tp_shm_mr_t *mr = tp_shm_mr_new(tp_shm_ctx(ctx), addr, len, access);
    if (!mr)
        return STRATA_ERR_NOMEM;
    *mr_out = &mr->base;
    return STRATA_OK;
}

/* A sealed memfd (a peer can map it but never shrink it under us), mapped
 * and populated here. */
static strata_status_t tp_shm_mem_alloc(tp_ctx_t *ctx, size_t len,
                                        unsigned access, void **addr_out,
                                        tp_mr_t **mr_out)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t map_len = (len + page - 1) & ~(page - 1);
    int fd = memfd_create("strata-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    void *addr = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, (off_t)map_len) == 0 &&
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
        addr = mmap(NULL, map_len, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_POPULATE, fd, 0);
    tp_shm_mr_t *mr = addr != MAP_FAILED
                          ? tp_shm_mr_new(tp_shm_ctx(ctx), addr, len, access)
                          : NULL;
    if (!mr) {
        int err = errno;
        util_error("shm: cannot allocate a shared region of %zu bytes: %s", len,
                   strerror(err));
        if (addr != MAP_FAILED)
            munmap(addr, map_len);
        if (fd >= 0)
            close(fd);
        return util_errno_status(err, STRATA_ERR_NOMEM);
    }
    madvise(addr, map_len, MADV_HUGEPAGE); /* where shmem THP is allowed */
    mr->fd = fd;
    mr->map_len = map_len;
    *addr_out = addr;
    *mr_out = &mr->base;
    return STRATA_OK;
}

/* Revokes the region from every peer it was exported to. */
static void tp_shm_mr_dereg(tp_mr_t *base)
{
    tp_shm_mr_t *mr = util_container_of(base, tp_shm_mr_t, base);
    tp_shm_ctx_t *ctx = tp_shm_ctx(base->ctx);
    util_list_t *pos, *tmp;
    util_list_for_each_safe(pos, tmp, &ctx->eps)
    {
        tp_shm_ep_t *ep = util_container_of(pos, tp_shm_ep_t, link);
        if (util_keymap_del(&ep->exports, mr->key) && ep->state == TP_SHM_UP)
            tp_shm_ctl_send(ep, TP_SHM_PKT_UNEXPORT, mr->key, 0, NULL, 0, NULL,
                            0);
    }
    tp_shm_mr_free(mr);
}

static strata_status_t tp_shm_mr_export(tp_mr_t *base, tp_ep_t *ep_base,
                                        tp_rdesc_t *desc_out)
{
    tp_shm_mr_t *mr = util_container_of(base, tp_shm_mr_t, base);
    tp_shm_ep_t *ep = tp_shm_ep(ep_base);
    if (mr->fd < 0) { /* tp_mr_reg() refuses remote access for shm */
        util_error("shm: region %p cannot be exported: not from tp_mem_alloc",
                   base->addr);
        return STRATA_ERR_INVALID;
    }
    if (!util_keymap_get(&ep->exports, mr->key)) {
        if (util_keymap_put(&ep->exports, mr->key, mr) != STRATA_OK) {
            util_error("shm: out of memory exporting to %s", ep_base->peer);
            return STRATA_ERR_NOMEM;
        }
        /* Before the endpoint is up, tp_shm_setup_recv() sends it. */
        if (ep->state == TP_SHM_UP)
            tp_shm_ctl_send(ep, TP_SHM_PKT_EXPORT, mr->key, base->len, NULL, 0,
                            &mr->fd, 1);
    }
    *desc_out = (tp_rdesc_t){.addr = 0, .len = base->len, .key = mr->key};
    return STRATA_OK;
}

/* ---- progress ---- */

static void tp_shm_ep_ready(tp_shm_ep_t *ep, uint32_t events)
{
    if (events & EPOLLOUT)
        tp_shm_ctl_flush(ep);
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
        tp_shm_ctl_recv(ep);
}

static strata_status_t tp_shm_poll(tp_shm_ctx_t *ctx)
{
    struct epoll_event evs[TP_SHM_EPOLL_BATCH];
    int n = epoll_wait(ctx->epfd, evs, TP_SHM_EPOLL_BATCH, 0);
    if (n < 0 && errno != EINTR) {
        util_error("shm: epoll_wait: %s", strerror(errno));
        return STRATA_ERR_IO;
    }
    for (int i = 0; i < n; i++) {
        tp_shm_kind_t *kind = evs[i].data.ptr;
        uint64_t count;
        if (*kind == TP_SHM_K_LISTENER)
            tp_shm_accept(util_container_of(kind, tp_shm_listener_t, kind));
        else if (*kind == TP_SHM_K_TIMER)
            tp_shm_expire(ctx);
        else if (*kind == TP_SHM_K_DOORBELL)
            while (read(ctx->bell, &count, sizeof(count)) > 0)
                ;
        else
            tp_shm_ep_ready(util_container_of(kind, tp_shm_ep_t, kind),
                            evs[i].events);
    }
    return STRATA_OK;
}

/* A closed endpoint is freed by the next progress call, once its last
 * event was read. */
static void tp_shm_reported(void *arg, tp_evq_item_t *it)
{
    (void)arg;
    tp_shm_ep_t *ep = tp_shm_ep(it->ev.ep);
    if (it->ev.type == TP_EV_WRITE_DONE || it->ev.type == TP_EV_SEND_DONE)
        ep->unreported--;
    ep->events--;
}

/* Rings are polled on every call, without a system call; the sockets
 * (accepts, handshakes, exports, departures), which see little traffic,
 * every TP_SHM_POLL_NS, and at once after tp_wait_arm(). A write that needs
 * an export not read yet reads the socket itself. */
static strata_status_t tp_shm_progress(tp_ctx_t *base, tp_event_t *events,
                                       int max, int *n_out)
{
    tp_shm_ctx_t *ctx = tp_shm_ctx(base);
    util_list_t *pos, *tmp;
    /* Closed endpoints no event names any more: the caller has read the
     * batch that named them last, the one the previous call returned. */
    util_list_for_each_safe(pos, tmp, &ctx->graveyard)
    {
        tp_shm_ep_t *ep = util_container_of(pos, tp_shm_ep_t, link);
        if (ep->events == 0)
            tp_shm_ep_free(ep);
    }
    tp_evq_begin(&ctx->evq);
    uint64_t now = util_now_ns(); /* vDSO: no system call */
    if (now >= ctx->next_poll_ns) {
        strata_status_t st = tp_shm_poll(ctx);
        if (st != STRATA_OK)
            return st;
        ctx->next_poll_ns = now + TP_SHM_POLL_NS;
    }
    util_list_for_each_safe(pos, tmp, &ctx->eps)
    {
        tp_shm_ep_t *ep = util_container_of(pos, tp_shm_ep_t, link);
        if (ep->state == TP_SHM_UP)
            tp_shm_drain(ep);
    }
    *n_out = tp_evq_report(&ctx->evq, events, max, tp_shm_reported, ctx);
    return STRATA_OK;
}

static int tp_shm_wait_fd(const tp_ctx_t *base)
{
    return util_container_of(base, tp_shm_ctx_t, base)->epfd;
}

/* Arms every ring's doorbell; anything already there needs a progress. */
static strata_status_t tp_shm_wait_arm(tp_ctx_t *base)
{
    tp_shm_ctx_t *ctx = tp_shm_ctx(base);
    if (!tp_evq_empty(&ctx->evq) || !util_list_empty(&ctx->graveyard))
        return STRATA_ERR_AGAIN;
    ctx->next_poll_ns = 0; /* the next progress polls the sockets */
    util_list_t *pos, *tmp;
    util_list_for_each_safe(pos, tmp, &ctx->eps)
    {
        tp_shm_ep_t *ep = util_container_of(pos, tp_shm_ep_t, link);
        if (ep->state == TP_SHM_UP &&
            (ep->leaving || !tp_shm_ring_arm(&ep->rx)))
            return STRATA_ERR_AGAIN;
    }
    return STRATA_OK;
}

const tp_ops_t tp_shm_ops = {
    .name = "shm",
    .available = tp_shm_available,
    .open = tp_shm_open,
    .close = tp_shm_close,
    .mr_reg = tp_shm_mr_reg,
    .mem_alloc = tp_shm_mem_alloc,
    .mr_dereg = tp_shm_mr_dereg,
    .mr_export = tp_shm_mr_export,
    .listen = tp_shm_listen,
    .listener_close = tp_shm_listener_close,
    .connect = tp_shm_connect,
    .ep_close = tp_shm_ep_close,
    .write = tp_shm_write,
    .send = tp_shm_send,
    .progress = tp_shm_progress,
    .wait_fd = tp_shm_wait_fd,
    .wait_arm = tp_shm_wait_arm,
};
