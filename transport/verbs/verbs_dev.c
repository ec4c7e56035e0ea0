/*
 * The device side of a verbs context: choosing the port, fork safety, the
 * memlock limit, completion queues, the thread that drains async events and
 * watches rdma_cm, and the wait fd.
 */
#include "transport/verbs/verbs.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"

uint64_t tp_verbs_now_ns(void)
{
    struct timespec ts;
    /* Coarse: read from the vDSO without a system call even when the clock
     * source has no vDSO support (TCG guests). Deadlines need no better. */
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- probing ---- */

static bool tp_verbs_port_active(struct ibv_context *dev, uint8_t port,
                                 struct ibv_port_attr *attr)
{
    return ibv_query_port(dev, port, attr) == 0 &&
           attr->state == IBV_PORT_ACTIVE;
}

bool tp_verbs_available(void)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    bool found = false;
    for (int i = 0; list && i < n && !found; i++) {
        struct ibv_context *dev = ibv_open_device(list[i]);
        struct ibv_device_attr da;
        if (!dev)
            continue;
        if (ibv_query_device(dev, &da) == 0) {
            struct ibv_port_attr pa;
            for (uint8_t p = 1; p <= da.phys_port_cnt && !found; p++)
                found = tp_verbs_port_active(dev, p, &pa);
        }
        ibv_close_device(dev);
    }
    if (list)
        ibv_free_device_list(list);
    return found;
}

/* ---- fork and memlock ---- */

static void tp_verbs_fork_setup_once(void)
{
    /* Kernels from 5.13 copy pinned pages at fork(): nothing to do. Older
     * ones need ibv_fork_init() before the first registration, or the child
     * and the NIC end up sharing copy-on-write pages (docs/verbs.md). */
    enum ibv_fork_status st = ibv_is_fork_initialized();
    if (st != IBV_FORK_DISABLED)
        return;
    int err = ibv_fork_init();
    if (err)
        util_warn("verbs: ibv_fork_init failed (%s): memory was registered "
                  "before Strata opened the device, so a child made with "
                  "fork() may corrupt registered memory; set "
                  "RDMAV_FORK_SAFE=1 in the environment of the program",
                  strerror(err));
}

static void tp_verbs_fork_setup(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, tp_verbs_fork_setup_once);
}

static bool tp_verbs_has_cap_ipc_lock(void)
{
    FILE *f = fopen("/proc/self/status", "re");
    if (!f)
        return false;
    char line[256];
    unsigned long long caps = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "CapEff: %llx", &caps) == 1)
            break;
    fclose(f);
    return caps & (1ull << 14); /* CAP_IPC_LOCK */
}

/* Locked memory the process may register; 0: unlimited. */
static uint64_t tp_verbs_memlock_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        tp_verbs_has_cap_ipc_lock())
        return 0;
    return rl.rlim_cur;
}

static void tp_verbs_memlock_check(void)
{
    uint64_t limit = tp_verbs_memlock_limit();
    if (limit && limit < (64u << 20))
        util_warn("verbs: RLIMIT_MEMLOCK is %" PRIu64 " KiB, so registering "
                  "more memory than that fails; raise it (ulimit -l "
                  "unlimited, or memlock in /etc/security/limits.conf) and "
                  "check it inside the job, since launchers such as mpirun "
                  "and srun may lower it",
                  limit >> 10);
}

void tp_verbs_memlock_hint(char *buf, size_t len)
{
    uint64_t limit = tp_verbs_memlock_limit();
    if (limit)
        snprintf(buf, len,
                 "; RLIMIT_MEMLOCK is %" PRIu64 " KiB: raise it with ulimit "
                 "-l (inside the job: launchers may lower it)",
                 limit >> 10);
    else
        snprintf(buf, len, "; the device is out of registration resources");
}

/* ---- choosing the port ---- */

static strata_status_t tp_verbs_parse_device(const char *want, char *name,
                                             size_t len, int *port_out)
{
    *port_out = 0;
    snprintf(name, len, "%s", want);
    char *colon = strchr(name, ':');
    if (!colon)
        return STRATA_OK;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end || p < 1 || p > 255) {
        util_error("STRATA_IB_DEVICE=%s: expected a device name, or "
                   "name:port with a port from 1",
                   want);
        return STRATA_ERR_CONFIG;
    }
    *colon = '\0';
    *port_out = (int)p;
    return STRATA_OK;
}

/* Whether dev's port matches and is active; records it in c if so. */
static bool tp_verbs_try_device(tp_verbs_ctx_t *c, struct ibv_context *dev,
                                int port, char *seen, size_t seen_len,
                                size_t *used)
{
    const char *dn = ibv_get_device_name(dev->device);
    struct ibv_device_attr da;
    if (ibv_query_device(dev, &da))
        return false;
    for (uint8_t p = 1; p <= da.phys_port_cnt; p++) {
        struct ibv_port_attr pa;
        bool active = tp_verbs_port_active(dev, p, &pa);
        if (*used < seen_len)
            *used += (size_t)snprintf(seen + *used, seen_len - *used,
                                      "%s%s:%u (%s)", *used ? ", " : "", dn, p,
                                      ibv_port_state_str(pa.state));
        if (!active || (port && port != p))
            continue;
        c->verbs = dev;
        c->port = p;
        c->ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
        c->max_msg =
            pa.max_msg_sz < TP_VERBS_MAX_WR ? pa.max_msg_sz : TP_VERBS_MAX_WR;
        c->max_cqe = da.max_cqe;
        c->mw_type2 =
            (da.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A |
                                    IBV_DEVICE_MEM_WINDOW_TYPE_2B)) != 0;
        snprintf(c->dev_name, sizeof(c->dev_name), "%s", dn);
        return true;
    }
    return false;
}

/* Opens the first device with an active port matching name (empty: any)
 * and port (0: any). The context is the provider's own, not librdmacm's
 * shared one, so that a process forked after another context was opened
 * does not use its parent's device file. */
static strata_status_t tp_verbs_select_port(tp_verbs_ctx_t *c, const char *want)
{
    char name[IBV_SYSFS_NAME_MAX + 8];
    int port;
    strata_status_t st = tp_verbs_parse_device(want, name, sizeof(name), &port);
    if (st != STRATA_OK)
        return st;
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0) {
        util_error("verbs: no RDMA device (ibv_get_device_list: %s); this "
                   "host has no RDMA hardware or kernel support",
                   list ? "0 devices" : strerror(errno));
        if (list)
            ibv_free_device_list(list);
        return STRATA_ERR_NO_DEVICE;
    }
    char seen[512] = "";
    size_t used = 0;
    for (int i = 0; i < n && !c->verbs; i++) {
        if (*name && strcmp(name, ibv_get_device_name(list[i])) != 0)
            continue;
        struct ibv_context *dev = ibv_open_device(list[i]);
        if (dev &&
            !tp_verbs_try_device(c, dev, port, seen, sizeof(seen), &used))
            ibv_close_device(dev);
    }
    ibv_free_device_list(list);
    if (c->verbs)
        return STRATA_OK;
    util_error("verbs: no active port%s%s; ports: %s",
               *want ? " matching STRATA_IB_DEVICE=" : "", want,
               *seen ? seen : "none");
    return STRATA_ERR_NO_DEVICE;
}

bool tp_verbs_same_device(const tp_verbs_ctx_t *c, struct ibv_context *dev)
{
    return dev && strcmp(ibv_get_device_name(dev->device), c->dev_name) == 0;
}

/* The port's IPv4 address from its GID, which rdma_cm binds to. */
static void tp_verbs_port_addr(tp_verbs_ctx_t *c)
{
    char text[64];
    tp_verbs_gid_str(&c->gid, text, sizeof(text));
    if (c->gid.ipv4)
        snprintf(c->addr, sizeof(c->addr), "%u.%u.%u.%u", c->gid.raw[12],
                 c->gid.raw[13], c->gid.raw[14], c->gid.raw[15]);
    else if (!c->gid.link_local && c->gid.type != TP_VERBS_GID_IB)
        snprintf(c->addr, sizeof(c->addr), "%s", text);
    util_info("verbs: %s port %u, GID %d %s (%s)%s%s", c->dev_name, c->port,
              c->gid.index, text,
              c->gid.type == TP_VERBS_GID_ROCE_V2   ? "RoCE v2"
              : c->gid.type == TP_VERBS_GID_ROCE_V1 ? "RoCE v1"
                                                    : "InfiniBand",
              *c->addr ? ", address " : "", c->addr);
}

strata_status_t tp_verbs_dev_open(tp_verbs_ctx_t *c, const tp_params_t *params)
{
    tp_verbs_fork_setup();
    tp_verbs_memlock_check();
    strata_status_t st = tp_verbs_select_port(c, params->ib_device);
    if (st != STRATA_OK)
        return st;
    st = tp_verbs_gid_override(params->ib_gid_index, c->dev_name,
                               &c->p.gid_override);
    if (st != STRATA_OK)
        return st;
    st = tp_verbs_gid_select(TP_VERBS_SYSFS_ROOT, c->dev_name, c->port,
                             c->ethernet, c->p.gid_override, &c->gid);
    if (st != STRATA_OK)
        return st;
    tp_verbs_port_addr(c);
    c->pd = ibv_alloc_pd(c->verbs);
    if (!c->pd) {
        util_error("verbs: ibv_alloc_pd on %s failed: %s", c->dev_name,
                   strerror(errno));
        return STRATA_ERR_NO_DEVICE;
    }
    c->comp = ibv_create_comp_channel(c->verbs);
    if (!c->comp) {
        util_error("verbs: ibv_create_comp_channel on %s failed: %s",
                   c->dev_name, strerror(errno));
        return STRATA_ERR_NO_DEVICE;
    }
    /* librdmacm opens its device contexts once per process, on first use:
     * now, rather than as a side effect of some later connect. */
    int ndev = 0;
    struct ibv_context **cm_devs = rdma_get_devices(&ndev);
    if (cm_devs)
        rdma_free_devices(cm_devs);
    c->cm = rdma_create_event_channel();
    if (!c->cm) {
        util_error("verbs: rdma_create_event_channel failed: %s",
                   strerror(errno));
        return STRATA_ERR_NO_DEVICE;
    }
    int fds[] = {c->comp->fd, c->cm->fd, c->verbs->async_fd};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        if (fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK)) {
            util_error("verbs: cannot make fd %d non-blocking: %s", fds[i],
                       strerror(errno));
            return STRATA_ERR_IO;
        }
    return STRATA_OK;
}

void tp_verbs_dev_close(tp_verbs_ctx_t *c)
{
    for (int i = 0; i < c->ncqs; i++) {
        tp_verbs_cq_t *cq = c->cqs[i];
        if (cq->armed) /* its event may be pending: destroy waits for acks */
            tp_verbs_cq_events_drain(c);
        if (ibv_destroy_cq(cq->cq))
            util_warn("verbs: ibv_destroy_cq failed: %s", strerror(errno));
        util_free(cq);
    }
    util_free(c->cqs);
    if (c->cm)
        rdma_destroy_event_channel(c->cm);
    if (c->comp)
        ibv_destroy_comp_channel(c->comp);
    if (c->pd && ibv_dealloc_pd(c->pd))
        util_warn("verbs: ibv_dealloc_pd failed: %s", strerror(errno));
    if (c->verbs)
        ibv_close_device(c->verbs);
}

/* ---- completion queues ---- */

strata_status_t tp_verbs_cq_reserve(tp_verbs_ctx_t *c, int entries,
                                    tp_verbs_cq_t **cq_out)
{
    for (int i = 0; i < c->ncqs; i++)
        if (c->cqs[i]->size - c->cqs[i]->used >= entries) {
            c->cqs[i]->used += entries;
            *cq_out = c->cqs[i];
            return STRATA_OK;
        }
    int size = entries > TP_VERBS_CQ_SIZE ? entries : TP_VERBS_CQ_SIZE;
    if (size > c->max_cqe)
        size = c->max_cqe;
    if (size < entries) {
        util_error("verbs: an endpoint needs %d completion queue entries, "
                   "%s allows %d; lower STRATA_IB_TX_DEPTH, STRATA_IB_RX_DEPTH "
                   "or STRATA_IB_QPS",
                   entries, c->dev_name, c->max_cqe);
        return STRATA_ERR_RANGE;
    }
    tp_verbs_cq_t **cqs = util_realloc(c->cqs, (c->ncqs + 1) * sizeof(*cqs));
    tp_verbs_cq_t *cq = util_calloc(1, sizeof(*cq));
    if (cqs)
        c->cqs = cqs;
    if (!cqs || !cq) {
        util_free(cq);
        util_error("verbs: out of memory for a completion queue");
        return STRATA_ERR_NOMEM;
    }
    cq->cq = ibv_create_cq(c->verbs, size, cq, c->comp, 0);
    if (!cq->cq) {
        util_error("verbs: ibv_create_cq of %d entries on %s failed: %s", size,
                   c->dev_name, strerror(errno));
        util_free(cq);
        return STRATA_ERR_NOMEM;
    }
    cq->size = size;
    cq->used = entries;
    c->cqs[c->ncqs++] = cq;
    *cq_out = cq;
    return STRATA_OK;
}

/* Consume completion-channel events of armed CQs (they fired, or will). */
void tp_verbs_cq_events_drain(tp_verbs_ctx_t *c)
{
    struct ibv_cq *ev_cq;
    void *ev_ctx;
    while (ibv_get_cq_event(c->comp, &ev_cq, &ev_ctx) == 0) {
        ((tp_verbs_cq_t *)ev_ctx)->armed = false;
        ibv_ack_cq_events(ev_cq, 1);
    }
    c->any_armed = false;
    for (int i = 0; i < c->ncqs; i++)
        c->any_armed |= c->cqs[i]->armed;
}

/* ---- the async thread ---- */

static void tp_verbs_async_one(tp_verbs_ctx_t *c, struct ibv_async_event *ev)
{
    tp_verbs_qp_t *qp = NULL;
    switch (ev->event_type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_PATH_MIG_ERR:
        qp = ev->element.qp->qp_context;
        if (qp) {
            int none = 0;
            atomic_compare_exchange_strong(&qp->ep->async_event, &none,
                                           (int)ev->event_type + 1);
        }
        break;
    case IBV_EVENT_COMM_EST:
        qp = ev->element.qp->qp_context;
        if (qp)
            atomic_store(&qp->ep->comm_est, true);
        break;
    case IBV_EVENT_CQ_ERR:
    case IBV_EVENT_DEVICE_FATAL:
        atomic_store(&c->fatal_event, (int)ev->event_type + 1);
        break;
    case IBV_EVENT_PORT_ERR:
        util_warn("verbs: %s port %u went down; connections on it will fail "
                  "unless it returns within STRATA_TIMEOUT_MS",
                  c->dev_name, ev->element.port_num);
        return;
    default:
        util_debug("verbs: async event on %s: %s", c->dev_name,
                   ibv_event_type_str(ev->event_type));
        return;
    }
    atomic_fetch_or(&c->pending, TP_VERBS_PENDING_ASYNC);
    uint64_t one = 1;
    if (write(c->notify_fd, &one, sizeof(one)) < 0)
        util_debug("verbs: notify write failed: %s", strerror(errno));
}

static void *tp_verbs_thread_main(void *arg)
{
    tp_verbs_ctx_t *c = arg;
    for (;;) {
        struct epoll_event evs[4];
        int n = epoll_wait(c->thread_epfd, evs, 4, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            util_error("verbs: async thread: epoll_wait failed: %s",
                       strerror(errno));
            return NULL;
        }
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == c->stop_fd)
                return NULL;
            if (fd == c->cm->fd) {
                /* One-shot: progress drains the channel and re-arms. */
                atomic_fetch_or(&c->pending, TP_VERBS_PENDING_CM);
                continue;
            }
            struct ibv_async_event ev;
            while (ibv_get_async_event(c->verbs, &ev) == 0) {
                tp_verbs_async_one(c, &ev);
                /* Acked at once: ibv_destroy_qp waits for the ack. */
                ibv_ack_async_event(&ev);
            }
        }
    }
}

static strata_status_t tp_verbs_epoll_add(int epfd, int fd, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.fd = fd};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0)
        return STRATA_OK;
    util_error("verbs: epoll_ctl(ADD %d) failed: %s", fd, strerror(errno));
    return STRATA_ERR_IO;
}

void tp_verbs_cm_rearm(tp_verbs_ctx_t *c)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT,
                             .data.fd = c->cm->fd};
    if (epoll_ctl(c->thread_epfd, EPOLL_CTL_MOD, c->cm->fd, &ev))
        util_error("verbs: epoll_ctl(MOD) of the rdma_cm channel failed: %s",
                   strerror(errno));
}

strata_status_t tp_verbs_thread_start(tp_verbs_ctx_t *c)
{
    c->thread_epfd = epoll_create1(EPOLL_CLOEXEC);
    c->wait_epfd = epoll_create1(EPOLL_CLOEXEC);
    c->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    c->notify_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    c->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    if (c->thread_epfd < 0 || c->wait_epfd < 0 || c->stop_fd < 0 ||
        c->notify_fd < 0 || c->timer_fd < 0) {
        util_error("verbs: cannot create the event descriptors: %s",
                   strerror(errno));
        return STRATA_ERR_IO;
    }
    /* The thread watches the device and rdma_cm; the wait fd (for callers
     * that sleep) watches completions, rdma_cm, the thread and the timer. */
    if (tp_verbs_epoll_add(c->thread_epfd, c->stop_fd, EPOLLIN) ||
        tp_verbs_epoll_add(c->thread_epfd, c->verbs->async_fd, EPOLLIN) ||
        tp_verbs_epoll_add(c->thread_epfd, c->cm->fd, EPOLLIN | EPOLLONESHOT) ||
        tp_verbs_epoll_add(c->wait_epfd, c->comp->fd, EPOLLIN) ||
        tp_verbs_epoll_add(c->wait_epfd, c->cm->fd, EPOLLIN) ||
        tp_verbs_epoll_add(c->wait_epfd, c->notify_fd, EPOLLIN) ||
        tp_verbs_epoll_add(c->wait_epfd, c->timer_fd, EPOLLIN))
        return STRATA_ERR_IO;
    int err = pthread_create(&c->thread, NULL, tp_verbs_thread_main, c);
    if (err) {
        util_error("verbs: cannot start the async event thread: %s",
                   strerror(err));
        return STRATA_ERR_IO;
    }
    c->thread_started = true;
    return STRATA_OK;
}

void tp_verbs_thread_stop(tp_verbs_ctx_t *c)
{
    if (c->thread_started) {
        uint64_t one = 1;
        if (write(c->stop_fd, &one, sizeof(one)) != sizeof(one))
            util_warn("verbs: cannot stop the async thread: %s",
                      strerror(errno));
        else
            pthread_join(c->thread, NULL);
        c->thread_started = false;
    }
    int *fds[] = {&c->thread_epfd, &c->wait_epfd, &c->stop_fd, &c->notify_fd,
                  &c->timer_fd};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        if (*fds[i] > 0) {
            close(*fds[i]);
            *fds[i] = -1;
        }
}

/* ---- waiting ---- */

int tp_verbs_wait_fd(const tp_ctx_t *ctx)
{
    return ((const tp_verbs_ctx_t *)ctx)->wait_epfd;
}

static bool tp_verbs_busy(tp_verbs_ctx_t *c)
{
    return c->evq_head != c->evq_tail || c->todo || c->nheld ||
           atomic_load_explicit(&c->pending, memory_order_acquire);
}

/* Wake up for the next deadline or keepalive even if nothing else happens. */
static void tp_verbs_timer_arm(tp_verbs_ctx_t *c)
{
    uint64_t now = tp_verbs_now_ns(), next = 0;
    for (tp_verbs_ep_t *ep = c->eps; ep; ep = ep->next) {
        uint64_t due =
            ep->state == TP_VERBS_EP_CONNECTED
                ? ep->last_tx_ns + (uint64_t)c->base.timeout_ms * 1000000u / 3
                : ep->deadline_ns;
        if (due && (!next || due < next))
            next = due;
    }
    struct itimerspec its = {0};
    if (next) {
        uint64_t in = next > now ? next - now + 1000000u : 1000000u;
        its.it_value.tv_sec = (time_t)(in / 1000000000u);
        its.it_value.tv_nsec = (long)(in % 1000000000u);
    }
    if (timerfd_settime(c->timer_fd, 0, &its, NULL))
        util_warn("verbs: timerfd_settime failed: %s", strerror(errno));
}

strata_status_t tp_verbs_wait_arm(tp_ctx_t *ctx)
{
    tp_verbs_ctx_t *c = tp_verbs_ctx(ctx);
    if (tp_verbs_busy(c))
        return STRATA_ERR_AGAIN;
    uint64_t drain;
    if (read(c->timer_fd, &drain, sizeof(drain)) < 0 && errno != EAGAIN)
        util_debug("verbs: timerfd read: %s", strerror(errno));
    for (int i = 0; i < c->ncqs; i++) {
        tp_verbs_cq_t *cq = c->cqs[i];
        if (cq->armed)
            continue;
        int err = ibv_req_notify_cq(cq->cq, 0);
        if (err) {
            util_error("verbs: ibv_req_notify_cq failed: %s", strerror(err));
            return STRATA_ERR_IO;
        }
        cq->armed = c->any_armed = true;
    }
    c->calls = 7; /* the next progress looks at the clock */
    /* What completed before the arm raised no event: look once more. */
    if (tp_verbs_cq_poll(c) > 0 || tp_verbs_busy(c))
        return STRATA_ERR_AGAIN;
    tp_verbs_timer_arm(c);
    return STRATA_OK;
}
