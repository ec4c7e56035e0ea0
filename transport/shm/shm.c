/* The shm provider: context, regions, the progress loop and its ops tables. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include "transport/shm/shm.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

_Static_assert(TP_SHM_PKT_HDR <= TP_SOCK_BYE_MAX, "a goodbye is a header");

static bool tp_shm_available(void)
{
    int fd = memfd_create("strata-probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return false;
    close(fd);
    return true;
}

/* ---- regions ---- */

static tp_shm_mr_t *tp_shm_mr(tp_sock_mr_t *mr)
{
    return util_container_of(mr, tp_shm_mr_t, sock);
}

static strata_status_t tp_shm_mr_reg(tp_ctx_t *ctx, void *addr, size_t len,
                                     unsigned access, tp_mr_t **mr_out)
{
    strata_status_t st = tp_sock_mr_reg(ctx, addr, len, access, mr_out);
    if (st == STRATA_OK)
        tp_shm_mr(tp_sock_mr(*mr_out))->fd = -1;
    return st;
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
    tp_sock_mr_t *mr = addr != MAP_FAILED
                           ? tp_sock_mr_new(tp_sock_ctx(ctx), addr, len, access)
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
    tp_shm_mr(mr)->fd = fd;
    tp_shm_mr(mr)->map_len = map_len;
    *addr_out = addr;
    *mr_out = &mr->base;
    return STRATA_OK;
}

static void tp_shm_mr_release(tp_sock_mr_t *sock)
{
    tp_shm_mr_t *mr = tp_shm_mr(sock);
    if (mr->fd >= 0) {
        munmap(sock->base.addr, mr->map_len);
        close(mr->fd);
    }
}

static strata_status_t tp_shm_mr_export(tp_mr_t *base, tp_ep_t *ep,
                                        tp_rdesc_t *desc_out)
{
    if (tp_shm_mr(tp_sock_mr(base))->fd < 0) {
        /* tp_mr_reg() refuses remote access for shm */
        util_error("shm: region %p cannot be exported: not from tp_mem_alloc",
                   base->addr);
        return STRATA_ERR_INVALID;
    }
    return tp_sock_mr_export(base, ep, desc_out);
}

/* Before the endpoint is up, tp_shm_setup_recv() sends it. */
static void tp_shm_mr_granted(tp_sock_ep_t *ep, tp_sock_mr_t *mr)
{
    if (ep->state == TP_SOCK_UP)
        tp_shm_ctl_send(tp_shm_ep_of(ep), TP_SHM_PKT_EXPORT, mr->key,
                        mr->base.len, NULL, 0, &tp_shm_mr(mr)->fd, 1);
}

static void tp_shm_mr_revoke(tp_sock_ep_t *ep, tp_sock_mr_t *mr)
{
    if (ep->state == TP_SOCK_UP)
        tp_shm_ctl_send(tp_shm_ep_of(ep), TP_SHM_PKT_UNEXPORT, mr->key, 0, NULL,
                        0, NULL, 0);
}

/* ---- progress ---- */

static void tp_shm_ep_ready(tp_sock_ep_t *sock, uint32_t events)
{
    tp_shm_ep_t *ep = tp_shm_ep_of(sock);
    if (events & EPOLLOUT)
        tp_shm_ctl_flush(ep);
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
        tp_shm_ctl_recv(ep);
}

static void tp_shm_op_reported(tp_sock_ep_t *ep, uint32_t slot)
{
    (void)slot;
    tp_shm_ep_of(ep)->unreported--;
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
    tp_sock_begin(&ctx->sock);
    strata_status_t st = tp_sock_poll(&ctx->sock);
    if (st != STRATA_OK)
        return st;
    util_list_for_each_safe(pos, tmp, &ctx->sock.eps)
    {
        tp_shm_ep_t *ep = util_container_of(pos, tp_shm_ep_t, sock.link);
        if (ep->sock.state == TP_SOCK_UP)
            tp_shm_drain(ep);
    }
    *n_out = tp_sock_report(&ctx->sock, events, max);
    return STRATA_OK;
}

/* Arms every ring's doorbell; anything already there needs a progress. */
static strata_status_t tp_shm_wait_arm(tp_ctx_t *base)
{
    tp_shm_ctx_t *ctx = tp_shm_ctx(base);
    if (tp_sock_wait_arm(&ctx->sock) != STRATA_OK)
        return STRATA_ERR_AGAIN;
    util_list_t *pos, *tmp;
    util_list_for_each_safe(pos, tmp, &ctx->sock.eps)
    {
        tp_shm_ep_t *ep = util_container_of(pos, tp_shm_ep_t, sock.link);
        if (ep->sock.state == TP_SOCK_UP &&
            (ep->leaving || !tp_shm_ring_arm(&ep->rx)))
            return STRATA_ERR_AGAIN;
    }
    return STRATA_OK;
}

/* ---- context ---- */

static const tp_sock_ops_t tp_shm_sock_ops = {
    .ctx_size = sizeof(tp_shm_ctx_t),
    .ep_size = sizeof(tp_shm_ep_t),
    .mr_size = sizeof(tp_shm_mr_t),
    .ep_depth = TP_SHM_DEPTH,
    .ep_poll = EPOLLIN,
    .arrivals = TP_SHM_ARRIVALS,
    .recv_fifo = TP_SHM_RECV_FIFO,
    .bell = true,
    .poll_ns = TP_SHM_POLL_NS,
    .ep_init = tp_shm_ep_init,
    .ep_fini = tp_shm_ep_fini,
    .ep_ready = tp_shm_ep_ready,
    .ep_down = tp_shm_ep_down,
    .bye = tp_shm_bye,
    .ep_expired = tp_shm_ep_expired,
    .auth_send = tp_shm_auth_send,
    .authed = tp_shm_setup_send,
    .op_reported = tp_shm_op_reported,
    .accepted = tp_shm_accepted,
    .mr_granted = tp_shm_mr_granted,
    .mr_revoke = tp_shm_mr_revoke,
    .mr_release = tp_shm_mr_release,
};

static strata_status_t tp_shm_open(const tp_params_t *params,
                                   tp_ctx_t **ctx_out)
{
    tp_sock_ctx_t *sock;
    /* Peers write only into tp_mem_alloc() memory, and map it. */
    strata_status_t st = tp_sock_open(&tp_shm_ops, &tp_shm_sock_ops,
                                      TP_CAP_PEER_MAP, params, &sock);
    if (st == STRATA_OK)
        *ctx_out = &sock->base;
    return st;
}

const tp_ops_t tp_shm_ops = {
    .name = "shm",
    .available = tp_shm_available,
    .open = tp_shm_open,
    .close = tp_sock_close,
    .mr_reg = tp_shm_mr_reg,
    .mem_alloc = tp_shm_mem_alloc,
    .mr_dereg = tp_sock_mr_dereg,
    .mr_export = tp_shm_mr_export,
    .peer_map = tp_shm_peer_map,
    .listen = tp_shm_listen,
    .listener_close = tp_shm_listener_close,
    .connect = tp_shm_connect,
    .ep_close = tp_sock_ep_close,
    .write = tp_shm_write,
    .send = tp_shm_send,
    .progress = tp_shm_progress,
    .wait_fd = tp_sock_wait_fd,
    .wait_arm = tp_shm_wait_arm,
};
