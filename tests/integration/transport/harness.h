/*
 * What the provider-independent transport tests share: the provider under
 * test, contexts, waiting for events (through tp_wait_arm() and
 * tp_wait_fd(), so that path is tested too), forked peer processes and
 * reproducible random content.
 *
 * The provider comes from TP_TEST_PROVIDER (tcp, shm or verbs) and the
 * address to listen on from TP_TEST_BIND (default 127.0.0.1:0 for tcp and
 * verbs, the provider's default for shm); tests/integration/transport/
 * CMakeLists.txt registers every program once per provider.
 *
 * The peer may run on another host (remote.c): TP_TEST_SERVE=host:port on
 * one host makes the program serve peers there, TP_TEST_PEER=host:port on
 * the other makes its tests use them; TP_TEST_BIND names each host's own
 * address. tests/softroce/run-2vm-tests runs them so between two VMs.
 */
#ifndef STRATA_TESTS_TRANSPORT_HARNESS_H
#define STRATA_TESTS_TRANSPORT_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#include "transport/transport.h"

/* A check that works in forked children, where cmocka cannot report: prints
 * the failed condition and exits the process with status 1. */
#define TPT_CHECK(cond, ...)                                                   \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__,   \
                    #cond);                                                    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

const char *tpt_provider(void);
/* NULL: the provider's default. */
const char *tpt_bind(void);

/* A test's bound of ms, times TP_TEST_TIME_SCALE (a whole number, default
 * 1): slower set-ups (two emulated hosts) stretch every bound alike. */
int tpt_ms(int ms);

/* A context of the provider under test with this secret and timeout. */
tp_ctx_t *tpt_open(const char *secret, int timeout_ms);

/* An event with its message copied (ev.data points into data). */
typedef struct tpt_event {
    tp_event_t ev;
    unsigned char data[TP_MSG_MAX];
} tpt_event_t;

/* The next event, waiting up to timeout_ms; false on timeout. */
bool tpt_next(tp_ctx_t *ctx, tpt_event_t *out, int timeout_ms);

/* Waits for an event of this type (failing on any other, except those in
 * the ignore mask, 1u << type). */
tpt_event_t tpt_expect(tp_ctx_t *ctx, tp_event_type_t type, unsigned ignore,
                       int timeout_ms);

/* Connects and waits for TP_EV_CONNECTED; returns its status. */
strata_status_t tpt_connect(tp_ctx_t *ctx, const char *addr, tp_ep_t **ep_out,
                            int timeout_ms);

/* Posts a write or send; while the queue is full, progresses and keeps the
 * events for tpt_next(). */
void tpt_write(tp_ctx_t *ctx, tp_ep_t *ep, tp_mr_t *mr, size_t off,
               const tp_rdesc_t *dst, uint64_t dst_off, size_t len,
               uint32_t imm, unsigned flags, void *op_ctx);
void tpt_send(tp_ctx_t *ctx, tp_ep_t *ep, const void *buf, size_t len);

/* ---- peer processes ---- */

typedef struct tpt_peer {
    pid_t pid;      /* -1 for a peer on another host */
    char addr[128]; /* its listener, for a server */
    int ctl; /* write end of a pipe the peer can wait on; for a remote peer,
                the control connection */
} tpt_peer_t;

/* Runs fn(ctx, listener, ctl_read_fd, arg) in a child process with its own
 * context and listener; fn's return is the child's exit status. With
 * TP_TEST_PEER set, the child runs on that host instead (arg must be
 * NULL). */
typedef int (*tpt_server_fn)(tp_ctx_t *ctx, tp_listener_t *listener, int ctl,
                             void *arg);
tpt_peer_t tpt_spawn_server(const char *secret, int timeout_ms,
                            tpt_server_fn fn, void *arg);
/* Tells the peer to go on (one byte on its control pipe). */
void tpt_signal(const tpt_peer_t *peer);
/* Waits (at most timeout_ms, then kills it) for the peer's exit status; -1
 * if it did not exit normally. */
int tpt_join(tpt_peer_t *peer, int timeout_ms);
/* Kills the peer (SIGKILL), wherever it runs. */
void tpt_kill(const tpt_peer_t *peer);
/* Whether a byte arrived on the control pipe (non-blocking). */
bool tpt_signalled(int ctl);

/* The remote side (remote.c): TP_TEST_PEER or NULL, and what
 * tpt_spawn_server() and tpt_join() do with it. */
const char *tpt_remote_peer(void);
tpt_peer_t tpt_remote_spawn(const char *secret, int timeout_ms,
                            tpt_server_fn fn);
int tpt_remote_join(tpt_peer_t *peer, int timeout_ms);

/* ---- the region server most tests talk to ---- */

/* On every accepted endpoint, allocates a region of bytes (filled with
 * TPT_GUARD), exports it and sends its descriptor as the first message. */
#define TPT_GUARD 0xa5
typedef struct tpt_region_peer {
    tp_ep_t *ep;
    tp_mr_t *mr;
    unsigned char *buf;
} tpt_region_peer_t;
void tpt_serve_region(tp_ctx_t *ctx, tp_ep_t *ep, size_t bytes,
                      tpt_region_peer_t *out);
/* The descriptor the server sends first. */
tp_rdesc_t tpt_recv_rdesc(tp_ctx_t *ctx, int timeout_ms);

/* ---- content ---- */

void tpt_fill(void *buf, size_t len, uint64_t seed);
/* Index of the first byte that differs from tpt_fill(seed), or -1. */
long long tpt_check(const void *buf, size_t len, uint64_t seed);
int tpt_count_fds(void);
double tpt_now_ms(void);

#endif /* STRATA_TESTS_TRANSPORT_HARNESS_H */
