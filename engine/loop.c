/*
 * The progress thread: drains commands, progresses every transport context,
 * dispatches their events to the module that owns the endpoint, runs the
 * join timer, and sleeps in epoll on the contexts' wait fds when there is
 * nothing to do.
 */
#include "engine/engine.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"

const char *const eng_prov_names[ENG_NPROV] = {"verbs", "tcp", "shm"};

/* Events taken from a context per tp_progress() call. */
#define ENG_EVENTS 32

int eng_prov_index(const char *name)
{
    for (int i = 0; i < ENG_NPROV; i++)
        if (strcmp(eng_prov_names[i], name) == 0)
            return i;
    return -1;
}

/* ---- commands ---- */

/* The queue is full only while the progress thread is behind (hundreds of
 * per-tensor pushes in a row): wait for it, as long as any wait may last. */
static strata_status_t eng_cmd_room(strata_ctx_t *ctx, uint32_t tail)
{
    eng_cmdq_t *q = &ctx->cmdq;
    uint64_t deadline = 0;
    while (tail - atomic_load_explicit(&q->head, memory_order_acquire) ==
           ENG_CMDQ_CAP) {
        uint64_t now = util_now_ns();
        if (!deadline)
            deadline = now + (uint64_t)ctx->timeout_ms * 1000000u;
        else if (now >= deadline) {
            util_error("the progress thread took no command for "
                       "STRATA_TIMEOUT_MS=%d",
                       ctx->timeout_ms);
            return STRATA_ERR_TIMEOUT;
        }
        if (eng_fatal(ctx) != STRATA_OK)
            return eng_fatal(ctx);
        struct timespec pause = {0, 20000};
        nanosleep(&pause, NULL);
    }
    return STRATA_OK;
}

static void eng_wake(strata_ctx_t *ctx)
{
    uint64_t one = 1;
    if (write(ctx->cmd_efd, &one, sizeof(one)) != sizeof(one))
        util_warn("cannot wake the progress thread: %s", strerror(errno));
}

static bool eng_cmd_pending(strata_ctx_t *ctx)
{
    return atomic_load_explicit(&ctx->cmdq.head, memory_order_relaxed) !=
           atomic_load_explicit(&ctx->cmdq.tail, memory_order_seq_cst);
}

strata_status_t eng_cmd_submit(strata_ctx_t *ctx, const eng_cmd_t *cmd)
{
    eng_cmdq_t *q = &ctx->cmdq;
    uint32_t tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
    strata_status_t st = eng_cmd_room(ctx, tail);
    if (st != STRATA_OK)
        return st;
    q->slots[tail & (ENG_CMDQ_CAP - 1)] = *cmd;
    /* A busy thread drains the command on its next turn; one that sleeps,
     * or is about to, needs the system call. Sequentially consistent with
     * eng_sleep's flag and check (store, then load on each side): either it
     * sees the command, or we see it sleeping. */
    atomic_store_explicit(&q->tail, tail + 1, memory_order_seq_cst);
    if (atomic_load_explicit(&ctx->sleeping, memory_order_seq_cst))
        eng_wake(ctx);
    return STRATA_OK;
}

static bool eng_cmd_drain(strata_ctx_t *ctx)
{
    eng_cmdq_t *q = &ctx->cmdq;
    bool any = false;
    for (;;) {
        uint32_t head = atomic_load_explicit(&q->head, memory_order_relaxed);
        uint32_t tail = atomic_load_explicit(&q->tail, memory_order_acquire);
        if (head == tail)
            return any;
        eng_cmd_t cmd = q->slots[head & (ENG_CMDQ_CAP - 1)];
        atomic_store_explicit(&q->head, head + 1, memory_order_release);
        any = true;
        ctx->role_ops->cmd(ctx, &cmd);
    }
}

/* ---- events ---- */

/* An event the peer's role does not expect from it. */
static void eng_unexpected(strata_ctx_t *ctx, eng_peer_t *peer,
                           const char *what)
{
    eng_fail(ctx, STRATA_ERR_PROTO, "unexpected %s from %s", what,
             eng_peer_name(peer));
}

static void eng_on_recv(strata_ctx_t *ctx, eng_peer_t *peer,
                        const tp_event_t *ev)
{
    eng_rbuf_t r;
    unsigned type;
    eng_rbuf_init(&r, ev->data, ev->len, &type);
    if (peer->ops->on_message)
        peer->ops->on_message(ctx, peer, type, &r);
    else
        eng_unexpected(ctx, peer, eng_msg_name(type));
}

/* A listener's connection goes to the role that listens: the coordinator
 * on the rendezvous, an aggregator on the data listeners. */
static void eng_on_accept(strata_ctx_t *ctx, tp_ctx_t *tp, const tp_event_t *ev)
{
    const eng_role_ops_t *role =
        tp == ctx->coord_tp && ev->listener == ctx->coord_listener
            ? ctx->coord_ops
            : ctx->role_ops;
    if (role && role->on_accept)
        role->on_accept(ctx, ev->ep, tp);
    else
        tp_ep_close(ev->ep);
}

/* Every event goes to the handlers of the peer whose endpoint it names,
 * which the role that made the peer set. */
static void eng_dispatch(strata_ctx_t *ctx, tp_ctx_t *tp, const tp_event_t *ev)
{
    eng_peer_t *peer = ev->ep ? tp_ep_ctx(ev->ep) : NULL;
    /* An endpoint closed while handling an earlier event of this batch
     * (its context is gone): the rest of what it reported is moot. */
    if (ev->ep && ev->type != TP_EV_ACCEPTED && (!peer || peer->ep != ev->ep))
        return;
    const eng_peer_ops_t *ops = peer ? peer->ops : NULL;
    if (peer && (ev->type == TP_EV_RECV || ev->type == TP_EV_WRITE_IMM))
        eng_live_heard(ctx, peer->rank);
    switch (ev->type) {
    case TP_EV_CONNECTED:
        if (ops->on_connected)
            ops->on_connected(ctx, peer, ev->status);
        else
            eng_unexpected(ctx, peer, "connection");
        break;
    case TP_EV_ACCEPTED:
        eng_on_accept(ctx, tp, ev);
        break;
    case TP_EV_WRITE_DONE:
        if (ops->on_write_done)
            ops->on_write_done(ctx, peer, ev->op_ctx, ev->status);
        break;
    case TP_EV_SEND_DONE:
        if (ev->op_ctx) /* a counter of messages awaited */
            (*(uint32_t *)ev->op_ctx)--;
        if (ev->op_ctx == &ctx->abort_pending && ctx->abort_pending == 0)
            util_gate_raise(&ctx->flushed, 1);
        break;
    case TP_EV_WRITE_IMM:
        if (ops->on_imm)
            ops->on_imm(ctx, peer, ev->imm, ev->len);
        else
            eng_unexpected(ctx, peer, "write");
        break;
    case TP_EV_RECV:
        eng_on_recv(ctx, peer, ev);
        break;
    case TP_EV_DISCONNECTED:
        if (ops->on_disconnected)
            ops->on_disconnected(ctx, peer, ev->status);
        else
            eng_peer_close(peer);
        break;
    }
}

static bool eng_progress_one(strata_ctx_t *ctx, tp_ctx_t *tp)
{
    tp_event_t evs[ENG_EVENTS];
    bool any = false;
    for (;;) {
        int n = 0;
        strata_status_t st = tp_progress(tp, evs, ENG_EVENTS, &n);
        if (st != STRATA_OK) {
            eng_fail(ctx, st, "the %s transport failed: %s", tp_name(tp),
                     strata_strerror(st));
            return any;
        }
        if (n > 0) /* stopped before these were read? */
            eng_live_check(ctx);
        for (int i = 0; i < n; i++)
            eng_dispatch(ctx, tp, &evs[i]);
        any |= n > 0;
        if (n < ENG_EVENTS)
            return any;
    }
}

static bool eng_progress_all(strata_ctx_t *ctx)
{
    bool any = eng_progress_one(ctx, ctx->coord_tp);
    for (int i = 0; i < ENG_NPROV; i++)
        if (ctx->data_tp[i] && ctx->data_tp[i] != ctx->coord_tp)
            any |= eng_progress_one(ctx, ctx->data_tp[i]);
    return any;
}

/* ---- the thread ---- */

/* Whether every context may sleep: none has events or posts pending. */
static bool eng_arm_all(strata_ctx_t *ctx)
{
    if (tp_wait_arm(ctx->coord_tp) != STRATA_OK)
        return false;
    for (int i = 0; i < ENG_NPROV; i++)
        if (ctx->data_tp[i] && ctx->data_tp[i] != ctx->coord_tp &&
            tp_wait_arm(ctx->data_tp[i]) != STRATA_OK)
            return false;
    return true;
}

static uint64_t eng_earliest(uint64_t at, uint64_t other)
{
    return other && (!at || other < at) ? other : at;
}

static int eng_sleep_ms(const strata_ctx_t *ctx)
{
    uint64_t at = eng_earliest(ctx->join_timer.at_ns, ctx->soon.at_ns);
    at = eng_earliest(at, ctx->tick_timer.at_ns);
    at = eng_earliest(at, ctx->live_timer.at_ns);
    at = eng_earliest(at, ctx->rejoin_timer.at_ns);
    if (!at)
        return -1;
    uint64_t now = util_now_ns();
    return now >= at ? 0 : (int)((at - now + 999999) / 1000000);
}

/* ---- turns ---- */

/* One thread at a time turns the loop (a transport context is driven by one
 * thread at a time): the progress thread, or the application's while it
 * polls for a pull. The flag's acquire and release order what each turn
 * did before the next. */
static bool eng_turn_take(strata_ctx_t *ctx)
{
    return !atomic_load_explicit(&ctx->turning, memory_order_relaxed) &&
           !atomic_exchange_explicit(&ctx->turning, true, memory_order_acquire);
}

static void eng_turn_give(strata_ctx_t *ctx)
{
    atomic_store_explicit(&ctx->turning, false, memory_order_release);
}

/* An application thread's turn saves the hop through the progress thread
 * (its scheduling, then the gate's wake-up) when the model write it waits
 * for has landed. Not while the progress thread sleeps: the turn could
 * leave work (posts, events) the armed contexts would not wake it for. */
void eng_loop_assist(strata_ctx_t *ctx)
{
    bool busy = false;
    if (eng_turn_take(ctx)) {
        if (!atomic_load_explicit(&ctx->sleeping, memory_order_seq_cst)) {
            busy = eng_loop_once(ctx);
            ctx->assisted |= busy;
        }
        eng_turn_give(ctx);
    }
    if (!busy)
        sched_yield();
}

/* Commands wake the thread only while it sleeps (eng_cmd_submit): the flag
 * goes up before the last look at the queue. The turn is given up once the
 * flag is up, so that a thread that takes it sees the flag. */
static void eng_sleep(strata_ctx_t *ctx)
{
    struct epoll_event evs[8];
    int ms = eng_sleep_ms(ctx);
    atomic_store_explicit(&ctx->sleeping, true, memory_order_seq_cst);
    eng_turn_give(ctx);
    if (eng_cmd_pending(ctx)) {
        atomic_store_explicit(&ctx->sleeping, false, memory_order_seq_cst);
        return;
    }
    int n = epoll_wait(ctx->epfd, evs, 8, ms);
    atomic_store_explicit(&ctx->sleeping, false, memory_order_seq_cst);
    if (n < 0 && errno != EINTR)
        util_warn("epoll_wait: %s", strerror(errno));
    for (int i = 0; i < n; i++)
        if (evs[i].data.fd == ctx->cmd_efd) {
            uint64_t v;
            if (read(ctx->cmd_efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
                util_warn("reading the command eventfd: %s", strerror(errno));
        }
}

/* Runs the timer if it is due; whether it ran. */
static bool eng_timer_due(strata_ctx_t *ctx, eng_timer_t *t)
{
    if (!t->at_ns || util_now_ns() < t->at_ns)
        return false;
    eng_live_check(ctx);
    t->at_ns = 0;
    t->fn(ctx);
    return true;
}

bool eng_loop_once(strata_ctx_t *ctx)
{
    eng_live_check(ctx);
    bool busy = eng_cmd_drain(ctx);
    busy |= eng_progress_all(ctx);
    busy |= eng_msgq_flush(&ctx->msgs);
    if (ctx->role_ops->flush)
        ctx->role_ops->flush(ctx);
    eng_fail_soon_due(ctx);
    busy |= eng_timer_due(ctx, &ctx->join_timer);
    eng_timer_due(ctx, &ctx->tick_timer);
    eng_timer_due(ctx, &ctx->live_timer);
    eng_timer_due(ctx, &ctx->rejoin_timer);
    return busy;
}

/* A round's next event is usually on its way when the last one was just
 * handled: polling on for a while (yielding, as the core is often shared
 * with the peers that will send it) saves the sleep, the peers' doorbell or
 * eventfd write and two context switches per hop. Only while idle spells
 * are that short: a thread whose last wait was longer (a large model's
 * reduce, a loaded machine) would poll in vain, on a core others need. */
bool eng_loop_after_turn(strata_ctx_t *ctx, eng_idle_t *idle, bool busy)
{
    busy |= ctx->assisted; /* the application's turns since this one's */
    ctx->assisted = false;
    if (busy) {
        eng_turn_give(ctx);
        if (idle->since_ns) {
            idle->last_ns = util_now_ns() - idle->since_ns;
            idle->since_ns = 0;
        }
        return false;
    }
    uint64_t now = util_now_ns();
    if (!idle->since_ns)
        idle->since_ns = now;
    if (idle->last_ns <= ctx->spin_ns && now - idle->since_ns < ctx->spin_ns) {
        eng_turn_give(ctx);
        sched_yield();
        return false;
    }
    if (eng_arm_all(ctx))
        eng_sleep(ctx);
    else
        eng_turn_give(ctx);
    return true;
}

static void *eng_loop_main(void *arg)
{
    strata_ctx_t *ctx = arg;
    util_log_set_rank(ctx->rank);
    eng_timer_due(ctx, &ctx->join_timer); /* connect at once */
    eng_idle_t idle = {0, 0};
    while (!atomic_load_explicit(&ctx->stop, memory_order_acquire)) {
        if (eng_turn_take(ctx))
            eng_loop_after_turn(ctx, &idle, eng_loop_once(ctx));
        else /* the application's thread turns it */
            sched_yield();
    }
    return NULL;
}

static strata_status_t eng_epoll_add(strata_ctx_t *ctx, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    if (epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, fd, &ev) != 0 && errno != EEXIST) {
        util_error("epoll_ctl(ADD, fd %d): %s", fd, strerror(errno));
        return STRATA_ERR_IO;
    }
    return STRATA_OK;
}

strata_status_t eng_loop_watch(strata_ctx_t *ctx, tp_ctx_t *tp)
{
    return eng_epoll_add(ctx, tp_wait_fd(tp));
}

strata_status_t eng_data_tp(strata_ctx_t *ctx, int idx, tp_ctx_t **tp_out)
{
    if (!ctx->data_tp[idx]) {
        strata_status_t st =
            tp_open(eng_prov_names[idx], &ctx->tp_params, &ctx->data_tp[idx]);
        if (st == STRATA_OK)
            st = eng_loop_watch(ctx, ctx->data_tp[idx]);
        if (st != STRATA_OK)
            return st;
    }
    *tp_out = ctx->data_tp[idx];
    return STRATA_OK;
}

strata_status_t eng_loop_init(strata_ctx_t *ctx)
{
    ctx->epfd = epoll_create1(EPOLL_CLOEXEC);
    ctx->cmd_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ctx->epfd < 0 || ctx->cmd_efd < 0) {
        util_error("cannot create the progress thread's epoll set or "
                   "eventfd: %s",
                   strerror(errno));
        return STRATA_ERR_IO;
    }
    strata_status_t st = eng_epoll_add(ctx, ctx->cmd_efd);
    if (st == STRATA_OK)
        st = eng_loop_watch(ctx, ctx->coord_tp);
    for (int i = 0; st == STRATA_OK && i < ENG_NPROV; i++)
        if (ctx->data_tp[i])
            st = eng_loop_watch(ctx, ctx->data_tp[i]);
    return st;
}

strata_status_t eng_loop_start(strata_ctx_t *ctx)
{
    strata_status_t st = eng_loop_init(ctx);
    if (st != STRATA_OK)
        return st;
    int rc = pthread_create(&ctx->thread, NULL, eng_loop_main, ctx);
    if (rc != 0) {
        util_error("cannot start the progress thread: %s", strerror(rc));
        return STRATA_ERR_NOMEM;
    }
    ctx->thread_started = true;
    return STRATA_OK;
}

void eng_loop_stop(strata_ctx_t *ctx)
{
    if (ctx->thread_started) {
        atomic_store_explicit(&ctx->stop, true, memory_order_release);
        eng_wake(ctx);
        pthread_join(ctx->thread, NULL);
        ctx->thread_started = false;
    }
    eng_msgq_clear(&ctx->msgs);
    if (ctx->cmd_efd >= 0)
        close(ctx->cmd_efd);
    if (ctx->epfd >= 0)
        close(ctx->epfd);
    ctx->cmd_efd = ctx->epfd = -1;
}
