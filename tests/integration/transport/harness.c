/* Shared helpers of the transport tests (harness.h). */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/support/test_tp_params.h"

const char *tpt_provider(void)
{
    const char *p = getenv("TP_TEST_PROVIDER");
    return p && *p ? p : "tcp";
}

const char *tpt_bind(void)
{
    const char *b = getenv("TP_TEST_BIND");
    if (b && *b)
        return b;
    return strcmp(tpt_provider(), "shm") == 0 ? NULL : "127.0.0.1:0";
}

int tpt_ms(int ms)
{
    const char *s = getenv("TP_TEST_TIME_SCALE");
    if (!s || !*s)
        return ms;
    char *end = NULL;
    long k = strtol(s, &end, 10);
    TPT_CHECK(*end == '\0' && k >= 1 && k <= 100,
              "TP_TEST_TIME_SCALE=%s: want a whole number from 1 to 100", s);
    return (int)(ms * k);
}

double tpt_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

tp_ctx_t *tpt_open(const char *secret, int timeout_ms)
{
    const char *crc = getenv("TP_TEST_TCP_CRC");
    const char *kv[5] = {NULL}, **k = kv;
    if (secret)
        *k++ = "STRATA_JOB_SECRET", *k++ = secret;
    if (crc)
        *k++ = "STRATA_TCP_CRC", *k++ = crc;
    util_settings_t *s = NULL;
    tp_params_t params;
    TPT_CHECK(test_tp_params(kv, timeout_ms, &s, &params) == STRATA_OK,
              "settings (secret, TP_TEST_TCP_CRC=%s)", crc ? crc : "");
    tp_ctx_t *ctx = NULL;
    strata_status_t st = tp_open(tpt_provider(), &params, &ctx);
    util_settings_free(s);
    TPT_CHECK(st == STRATA_OK, "tp_open(%s): %s", tpt_provider(),
              strata_strerror(st));
    return ctx;
}

/* Events taken by tpt_write()/tpt_send() while they waited for room, handed
 * out by tpt_next() first. */
static struct {
    tpt_event_t *ev;
    size_t head, n, cap;
} tpt_stash;

static void tpt_copy(tpt_event_t *dst, const tp_event_t *ev)
{
    dst->ev = *ev;
    if (ev->type == TP_EV_RECV) {
        memcpy(dst->data, ev->data, ev->len);
        dst->ev.data = dst->data;
    }
}

/* Progresses once, stashing what it reports. */
static void tpt_progress_stash(tp_ctx_t *ctx)
{
    tp_event_t evs[16];
    int n = 0;
    TPT_CHECK(tp_progress(ctx, evs, 16, &n) == STRATA_OK, "progress");
    for (int i = 0; i < n; i++) {
        if (tpt_stash.head > 0 &&
            tpt_stash.head + tpt_stash.n == tpt_stash.cap) {
            memmove(tpt_stash.ev, tpt_stash.ev + tpt_stash.head,
                    tpt_stash.n * sizeof(*tpt_stash.ev));
            tpt_stash.head = 0;
        }
        if (tpt_stash.n == tpt_stash.cap) {
            tpt_stash.cap = tpt_stash.cap ? 2 * tpt_stash.cap : 64;
            tpt_stash.ev =
                realloc(tpt_stash.ev, tpt_stash.cap * sizeof(*tpt_stash.ev));
            TPT_CHECK(tpt_stash.ev, "out of memory");
        }
        tpt_copy(&tpt_stash.ev[tpt_stash.head + tpt_stash.n++], &evs[i]);
    }
}

bool tpt_next(tp_ctx_t *ctx, tpt_event_t *out, int timeout_ms)
{
    if (tpt_stash.n > 0) {
        tpt_stash.n--;
        *out = tpt_stash.ev[tpt_stash.head++];
        if (out->ev.type == TP_EV_RECV)
            out->ev.data = out->data;
        return true;
    }
    double deadline = tpt_now_ms() + timeout_ms;
    for (;;) {
        tp_event_t ev;
        int n = 0;
        TPT_CHECK(tp_progress(ctx, &ev, 1, &n) == STRATA_OK, "progress");
        if (n == 1) {
            tpt_copy(out, &ev);
            return true;
        }
        double left = deadline - tpt_now_ms();
        if (left <= 0)
            return false;
        if (tp_wait_arm(ctx) != STRATA_OK)
            continue;
        struct pollfd pfd = {.fd = tp_wait_fd(ctx), .events = POLLIN};
        poll(&pfd, 1, (int)left + 1);
    }
}

static const char *tpt_type_name(tp_event_type_t t)
{
    static const char *const names[] = {
        "CONNECTED", "ACCEPTED", "WRITE_DONE",  "SEND_DONE",
        "WRITE_IMM", "RECV",     "DISCONNECTED"};
    return (unsigned)t < 7 ? names[t] : "?";
}

tpt_event_t tpt_expect(tp_ctx_t *ctx, tp_event_type_t type, unsigned ignore,
                       int timeout_ms)
{
    tpt_event_t e;
    double deadline = tpt_now_ms() + timeout_ms;
    for (;;) {
        double left = deadline - tpt_now_ms();
        TPT_CHECK(left > 0 && tpt_next(ctx, &e, (int)left),
                  "no %s within %d ms", tpt_type_name(type), timeout_ms);
        if (e.ev.type == type)
            return e;
        TPT_CHECK(ignore & (1u << e.ev.type), "got %s (%s) waiting for %s",
                  tpt_type_name(e.ev.type), strata_strerror(e.ev.status),
                  tpt_type_name(type));
    }
}

strata_status_t tpt_connect(tp_ctx_t *ctx, const char *addr, tp_ep_t **ep_out,
                            int timeout_ms)
{
    TPT_CHECK(tp_connect(ctx, addr, NULL, ep_out) == STRATA_OK, "connect %s",
              addr);
    tpt_event_t e = tpt_expect(ctx, TP_EV_CONNECTED, 0, timeout_ms);
    TPT_CHECK(e.ev.ep == *ep_out, "CONNECTED names another endpoint");
    return e.ev.status;
}

void tpt_write(tp_ctx_t *ctx, tp_ep_t *ep, tp_mr_t *mr, size_t off,
               const tp_rdesc_t *dst, uint64_t dst_off, size_t len,
               uint32_t imm, unsigned flags, void *op_ctx)
{
    strata_status_t st;
    while ((st = tp_write(ep, mr, off, dst, dst_off, len, imm, flags,
                          op_ctx)) == STRATA_ERR_AGAIN)
        tpt_progress_stash(ctx);
    TPT_CHECK(st == STRATA_OK, "tp_write: %s", strata_strerror(st));
}

void tpt_send(tp_ctx_t *ctx, tp_ep_t *ep, const void *buf, size_t len)
{
    strata_status_t st;
    while ((st = tp_send(ep, buf, len, NULL)) == STRATA_ERR_AGAIN)
        tpt_progress_stash(ctx);
    TPT_CHECK(st == STRATA_OK, "tp_send: %s", strata_strerror(st));
}

/* ---- peer processes ---- */

tpt_peer_t tpt_spawn_server(const char *secret, int timeout_ms,
                            tpt_server_fn fn, void *arg)
{
    if (tpt_remote_peer()) {
        TPT_CHECK(arg == NULL, "a peer on another host takes no argument");
        return tpt_remote_spawn(secret, timeout_ms, fn);
    }
    int addr_pipe[2], ctl_pipe[2];
    TPT_CHECK(pipe(addr_pipe) == 0 && pipe(ctl_pipe) == 0, "pipe");
    fflush(NULL);
    tpt_peer_t peer = {.pid = fork()};
    TPT_CHECK(peer.pid >= 0, "fork: %s", strerror(errno));
    if (peer.pid == 0) {
        close(addr_pipe[0]);
        close(ctl_pipe[1]);
        tp_ctx_t *ctx = tpt_open(secret, timeout_ms);
        tp_listener_t *l = NULL;
        TPT_CHECK(tp_listen(ctx, tpt_bind(), &l) == STRATA_OK, "listen");
        const char *a = tp_listener_addr(l);
        TPT_CHECK(write(addr_pipe[1], a, strlen(a) + 1) > 0, "addr pipe");
        close(addr_pipe[1]);
        int rc = fn(ctx, l, ctl_pipe[0], arg);
        tp_close(ctx);
        _exit(rc);
    }
    close(addr_pipe[1]);
    close(ctl_pipe[0]);
    peer.ctl = ctl_pipe[1];
    ssize_t n = read(addr_pipe[0], peer.addr, sizeof(peer.addr) - 1);
    close(addr_pipe[0]);
    TPT_CHECK(n > 0, "the server did not start");
    peer.addr[n] = '\0';
    return peer;
}

void tpt_signal(const tpt_peer_t *peer)
{
    TPT_CHECK(write(peer->ctl, "g", 1) == 1, "signal");
}

void tpt_kill(const tpt_peer_t *peer)
{
    if (peer->pid < 0)
        TPT_CHECK(write(peer->ctl, "k", 1) == 1, "kill the remote peer");
    else
        kill(peer->pid, SIGKILL);
}

bool tpt_signalled(int ctl)
{
    struct pollfd pfd = {.fd = ctl, .events = POLLIN};
    char c;
    return poll(&pfd, 1, 0) == 1 && read(ctl, &c, 1) == 1;
}

int tpt_join(tpt_peer_t *peer, int timeout_ms)
{
    if (peer->pid < 0)
        return tpt_remote_join(peer, timeout_ms);
    double deadline = tpt_now_ms() + timeout_ms;
    int status = 0;
    while (waitpid(peer->pid, &status, WNOHANG) == 0) {
        if (tpt_now_ms() > deadline) {
            fprintf(stderr, "peer %d still running after %d ms: killed\n",
                    (int)peer->pid, timeout_ms);
            kill(peer->pid, SIGKILL);
            waitpid(peer->pid, &status, 0);
            status = -1;
            break;
        }
        usleep(1000);
    }
    if (peer->ctl >= 0)
        close(peer->ctl);
    peer->ctl = -1;
    return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* ---- the region server ---- */

void tpt_serve_region(tp_ctx_t *ctx, tp_ep_t *ep, size_t bytes,
                      tpt_region_peer_t *out)
{
    void *addr = NULL;
    out->ep = ep;
    TPT_CHECK(tp_mem_alloc(ctx, bytes, TP_ACCESS_REMOTE_WRITE, &addr,
                           &out->mr) == STRATA_OK,
              "mem_alloc %zu", bytes);
    out->buf = addr;
    memset(out->buf, TPT_GUARD, bytes);
    tp_rdesc_t d;
    TPT_CHECK(tp_mr_export(out->mr, ep, &d) == STRATA_OK, "export");
    tpt_send(ctx, ep, &d, sizeof(d));
}

tp_rdesc_t tpt_recv_rdesc(tp_ctx_t *ctx, int timeout_ms)
{
    tpt_event_t e = tpt_expect(ctx, TP_EV_RECV, 0, timeout_ms);
    tp_rdesc_t d;
    TPT_CHECK(e.ev.len == sizeof(d), "descriptor of %u bytes", e.ev.len);
    memcpy(&d, e.data, sizeof(d));
    return d;
}

/* ---- content ---- */

static uint64_t tpt_rand(uint64_t *s)
{
    /* xorshift64*: fast, and the same sequence on both sides. */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}

void tpt_fill(void *buf, size_t len, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    unsigned char *p = buf;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t r = tpt_rand(&s);
        memcpy(p + i, &r, 8);
    }
    uint64_t r = tpt_rand(&s);
    memcpy(p + i, &r, len - i);
}

long long tpt_check(const void *buf, size_t len, uint64_t seed)
{
    unsigned char chunk[4096];
    const unsigned char *p = buf;
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < len; i += sizeof(chunk)) {
        size_t n = len - i < sizeof(chunk) ? len - i : sizeof(chunk);
        for (size_t j = 0; j < n; j += 8) {
            uint64_t r = tpt_rand(&s);
            memcpy(chunk + j, &r, n - j < 8 ? n - j : 8);
        }
        if (memcmp(chunk, p + i, n) != 0)
            for (size_t j = 0; j < n; j++)
                if (chunk[j] != p[i + j])
                    return (long long)(i + j);
    }
    return -1;
}

int tpt_count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n - 1; /* the directory's own descriptor */
}
