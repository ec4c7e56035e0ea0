/*
 * Joining the job. Every rank connects to the coordinator (rank 0) over the
 * tcp transport, whose handshake proves the job secret, and says HELLO: its
 * rank, host, the settings every rank must share and, for aggregators, the
 * addresses it listens on. Once every rank has, the coordinator sends each
 * one the aggregators' addresses (AGG_INFO) and WELCOME (its local rank, and
 * whether the job spans hosts); workers then connect to the aggregators.
 * Connecting to a coordinator that is not listening yet is retried, with
 * backoff, until STRATA_TIMEOUT_MS.
 */
#include "engine/engine.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/alloc.h"
#include "util/file.h"
#include "util/log.h"

/* Settings that must be the same on every rank. */
static const eng_cfg_key_t eng_shared_keys[] = {
    ENG_CFG_POLICY,       ENG_CFG_STALENESS,   ENG_CFG_PARTITION_BYTES,
    ENG_CFG_OPTIMIZER,    ENG_CFG_LR,          ENG_CFG_MOMENTUM,
    ENG_CFG_WEIGHT_DECAY, ENG_CFG_MIN_WORKERS, /* aggregator.h: drops */
    ENG_CFG_SHARDS,
};
#define ENG_NSHARED (sizeof(eng_shared_keys) / sizeof(*eng_shared_keys))

static void eng_boot_retry(strata_ctx_t *ctx);
static void eng_boot_on_connected(strata_ctx_t *ctx, eng_peer_t *peer,
                                  strata_status_t status);
static void eng_boot_on_recv(strata_ctx_t *ctx, eng_peer_t *peer, unsigned type,
                             eng_rbuf_t *r);
static void eng_boot_on_disconnected(strata_ctx_t *ctx, eng_peer_t *peer,
                                     strata_status_t status);

/* This rank's connection to the coordinator. */
static const eng_peer_ops_t eng_boot_peer_ops = {
    .what = "the coordinator",
    .singular = true,
    .on_connected = eng_boot_on_connected,
    .on_message = eng_boot_on_recv,
    .on_disconnected = eng_boot_on_disconnected,
};

/* ---- preparing (application thread) ---- */

/* hostname/boot id/network namespace: ranks with the same id reach each
 * other over shm, whose sockets are abstract unix sockets, which exist per
 * network namespace (containers of one node share the hostname and the
 * boot id, not the namespace). */
static void eng_host_id(char *buf, size_t len)
{
    char host[64] = "?", boot[40] = "", net[40] = "";
    gethostname(host, sizeof(host) - 1);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof(boot), f))
            boot[0] = '\0';
        fclose(f);
        boot[strcspn(boot, "\n")] = '\0';
    }
    ssize_t n = readlink("/proc/self/ns/net", net, sizeof(net) - 1);
    net[n > 0 ? n : 0] = '\0';
    snprintf(buf, len, "%s/%s/%s", host, boot, net);
}

/* The host part of "host:port" or "[v6]:port" ("" for ""). */
static void eng_addr_host(const char *addr, char *host, size_t len)
{
    const char *colon = strrchr(addr, ':');
    size_t n = colon ? (size_t)(colon - addr) : strlen(addr);
    if (n >= 2 && addr[0] == '[' && addr[n - 1] == ']') {
        addr++;
        n -= 2;
    }
    snprintf(host, len, "%.*s", (int)n, addr);
}

static bool eng_has_secret(const strata_ctx_t *ctx)
{
    const tp_params_t *p = &ctx->tp_params;
    return (p->secret && *p->secret) || (p->secret_file && *p->secret_file);
}

/* Why this job reaches beyond loopback, or NULL when it does not. The
 * rule depends only on settings every rank shares, so that every rank of a
 * job decides alike. */
static const char *eng_beyond_loopback(const strata_ctx_t *ctx,
                                       const char *coord_host, char *buf,
                                       size_t len)
{
    const char *host = eng_config_str(ctx->cfg, ENG_CFG_HOST);
    const char *forced = ctx->tp_params.transport;
    if (*coord_host && !tp_addr_is_loopback(coord_host))
        snprintf(buf, len, "the coordinator's address %s is not loopback",
                 ctx->launch.coord);
    else if (*host && !tp_addr_is_loopback(host))
        snprintf(buf, len, "STRATA_HOST=%s is not loopback", host);
    else if (!*host && !*coord_host)
        snprintf(buf, len,
                 "rank 0 listens on every interface (STRATA_COORD_FILE=%s "
                 "without STRATA_HOST)",
                 ctx->launch.coord_file);
    else if (forced && strcmp(forced, "verbs") == 0)
        snprintf(buf, len, "STRATA_TRANSPORT=verbs reaches other hosts");
    else
        return NULL;
    return buf;
}

/* Without a job secret, anyone who reaches a port of the job joins it:
 * that is the default on loopback only, elsewhere STRATA_INSECURE=1 must
 * say so. A rank of a loopback job listens on the coordinator's host, not
 * on every interface. */
static strata_status_t eng_boot_exposure(strata_ctx_t *ctx)
{
    char coord_host[ENG_ADDR_MAX], why[ENG_ADDR_MAX + 96];
    eng_addr_host(ctx->launch.coord, coord_host, sizeof(coord_host));
    snprintf(ctx->listen_host, sizeof(ctx->listen_host), "%s",
             eng_config_str(ctx->cfg, ENG_CFG_HOST));
    if (eng_has_secret(ctx))
        return STRATA_OK;
    const char *beyond = eng_beyond_loopback(ctx, coord_host, why, sizeof(why));
    if (!beyond) {
        if (!ctx->listen_host[0])
            snprintf(ctx->listen_host, sizeof(ctx->listen_host), "%s",
                     coord_host);
        return STRATA_OK;
    }
    if (eng_config_int(ctx->cfg, ENG_CFG_INSECURE))
        return STRATA_OK; /* the transport warns that anyone can join */
    util_error("no job secret, and %s: set STRATA_JOB_SECRET or "
               "STRATA_JOB_SECRET_FILE to one secret on every rank (strata-run "
               "makes one; docs/multihost.md shows mpirun, Slurm and "
               "torchrun), or STRATA_INSECURE=1 to let anyone who reaches the "
               "job's ports join it",
               beyond);
    return STRATA_ERR_CONFIG;
}

/* Aggregators of a loopback job without a secret offer no verbs, which
 * other hosts reach. */
static bool eng_offers_verbs(const strata_ctx_t *ctx)
{
    return eng_has_secret(ctx) || eng_config_int(ctx->cfg, ENG_CFG_INSECURE) ||
           !tp_addr_is_loopback(ctx->listen_host);
}

/* host:port to bind: STRATA_HOST if set and an address of this host, else
 * every interface (a launcher gives every rank the same environment: one
 * host's address must not stop the ranks of the others). */
static void eng_bind_addr(const strata_ctx_t *ctx, int port, char *buf,
                          size_t len)
{
    const char *host = ctx->listen_host;
    if (*host && !tp_addr_is_local(host)) {
        util_warn("STRATA_HOST=%s is not an address of this host (%.*s): "
                  "listening on every interface instead (STRATA_IFNAME "
                  "chooses an interface on every host)",
                  host, (int)strcspn(ctx->host_id, "/"), ctx->host_id);
        host = "";
    }
    snprintf(buf, len, "%s:%d", host, port);
}

/* Write the coordinator's address where the other ranks look for it,
 * atomically (a reader sees the old file or the whole new one). */
static strata_status_t eng_publish_coord(const char *path, const char *addr)
{
    char tmp[ENG_ADDR_MAX + 16];
    snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%s\n", addr) < 0 || fclose(f) != 0) {
        util_error("cannot write the coordinator's address to "
                   "STRATA_COORD_FILE=%s: %s",
                   path, strerror(errno));
        return STRATA_ERR_IO;
    }
    if (rename(tmp, path) != 0) {
        util_error("cannot rename %s to STRATA_COORD_FILE=%s: %s", tmp, path,
                   strerror(errno));
        unlink(tmp);
        return STRATA_ERR_IO;
    }
    return STRATA_OK;
}

static strata_status_t eng_listen_coord(strata_ctx_t *ctx)
{
    char bind[ENG_ADDR_MAX + 8];
    int port = 0;
    if (ctx->launch.coord[0])
        port = atoi(strrchr(ctx->launch.coord, ':') + 1);
    eng_bind_addr(ctx, port, bind, sizeof(bind));
    strata_status_t st = tp_listen(ctx->coord_tp, bind, &ctx->coord_listener);
    if (st != STRATA_OK)
        return st;
    snprintf(ctx->coord_addr, sizeof(ctx->coord_addr), "%s",
             tp_listener_addr(ctx->coord_listener));
    /* where the coordinator listens again for a worker back in the job */
    snprintf(ctx->coord_bind, sizeof(ctx->coord_bind), "%.*s%s",
             (int)(strrchr(bind, ':') - bind), bind,
             strrchr(ctx->coord_addr, ':'));
    util_info("coordinator listening on %s", ctx->coord_addr);
    if (ctx->launch.coord_file[0])
        return eng_publish_coord(ctx->launch.coord_file, ctx->coord_addr);
    return STRATA_OK;
}

/* Opens a transport, unless one is already there (tests give their own). */
static strata_status_t eng_boot_open(strata_ctx_t *ctx, const char *name,
                                     tp_ctx_t **tp)
{
    return *tp ? STRATA_OK : tp_open(name, &ctx->tp_params, tp);
}

/* Aggregators listen on every provider a worker may pick. */
static strata_status_t eng_listen_data(strata_ctx_t *ctx)
{
    const char *forced = ctx->tp_params.transport; /* NULL: auto */
    for (int i = 0; i < ENG_NPROV; i++) {
        if (forced ? strcmp(eng_prov_names[i], forced) != 0
                   : i != ENG_PROV_TCP && !tp_available(eng_prov_names[i]))
            continue;
        if (!forced && i == ENG_PROV_VERBS && !eng_offers_verbs(ctx))
            continue;
        strata_status_t st =
            eng_boot_open(ctx, eng_prov_names[i], &ctx->data_tp[i]);
        if (st != STRATA_OK)
            return st;
        char bind[ENG_ADDR_MAX + 8];
        eng_bind_addr(ctx, 0, bind, sizeof(bind));
        st = tp_listen(ctx->data_tp[i], i == ENG_PROV_TCP ? bind : NULL,
                       &ctx->data_listener[i]);
        if (st != STRATA_OK)
            return st;
        util_info("aggregator listening on %s %s", eng_prov_names[i],
                  tp_listener_addr(ctx->data_listener[i]));
    }
    return STRATA_OK;
}

strata_status_t eng_boot_prepare(strata_ctx_t *ctx)
{
    eng_host_id(ctx->host_id, sizeof(ctx->host_id));
    ctx->coord_peer =
        (eng_peer_t){.ops = &eng_boot_peer_ops, .q = &ctx->msgs, .rank = 0};
    ctx->join_deadline_ns =
        util_now_ns() + (uint64_t)ctx->join_timeout_ms * 1000000u;
    /* The progress thread starts by connecting. */
    ctx->join_timer =
        (eng_timer_t){.at_ns = util_now_ns(), .fn = eng_boot_retry};
    ctx->join_last_error = STRATA_ERR_TIMEOUT;
    strata_status_t st = eng_boot_exposure(ctx);
    /* Control messages only: its sockets need no system call per turn. */
    tp_params_t coord_params = ctx->tp_params;
    coord_params.poll_us = ENG_COORD_POLL_US;
    if (st == STRATA_OK && !ctx->coord_tp)
        st = tp_open("tcp", &coord_params, &ctx->coord_tp);
    if (st == STRATA_OK && ctx->rank == 0)
        st = eng_listen_coord(ctx);
    else if (st == STRATA_OK && ctx->launch.coord[0])
        snprintf(ctx->coord_addr, sizeof(ctx->coord_addr), "%s",
                 ctx->launch.coord);
    if (st == STRATA_OK && ctx->role == STRATA_ROLE_AGGREGATOR)
        st = eng_listen_data(ctx);
    if (st != STRATA_OK)
        return st;
    ctx->roster = util_calloc(1, sizeof(*ctx->roster));
    if (ctx->roster) {
        ctx->roster->aggs =
            util_calloc((size_t)ctx->naggs, sizeof(*ctx->roster->aggs));
        ctx->roster->spare = util_calloc((size_t)ctx->naggs, sizeof(bool));
    }
    if (!ctx->roster || !ctx->roster->aggs || !ctx->roster->spare) {
        util_error("out of memory for the roster of %d aggregators",
                   ctx->naggs);
        return STRATA_ERR_NOMEM;
    }
    ctx->roster->naggs = ctx->naggs;
    return STRATA_OK;
}

void eng_boot_free(strata_ctx_t *ctx)
{
    if (ctx->roster) {
        util_free(ctx->roster->aggs);
        util_free(ctx->roster->spare);
    }
    util_free(ctx->roster);
    ctx->roster = NULL;
    if (ctx->rank == 0 && ctx->launch.coord_file[0])
        unlink(ctx->launch.coord_file);
}

/* ---- connecting (progress thread) ---- */

/* The address rank 0 published: STRATA_ERR_AGAIN while there is none
 * yet, STRATA_ERR_CONFIG (logged) when the path cannot hold one (a
 * directory, a FIFO: reading it would block the progress thread). */
static strata_status_t eng_read_coord_file(strata_ctx_t *ctx)
{
    const char *path = ctx->launch.coord_file;
    char what[PATH_MAX + 32], *text;
    snprintf(what, sizeof(what), "STRATA_COORD_FILE=%s", path);
    strata_status_t st = util_file_read(path, what, 4096, true, &text, NULL);
    if (st != STRATA_OK)
        return st;
    text[strcspn(text, "\r\n")] = '\0';
    if (strchr(text, ':') && strlen(text) < sizeof(ctx->coord_addr))
        snprintf(ctx->coord_addr, sizeof(ctx->coord_addr), "%s", text);
    else
        st = STRATA_ERR_AGAIN; /* not (yet) an address */
    util_free(text);
    return st;
}

/* What an attempt to join ended with, kept for the message at the
 * deadline. An answer from a peer (a refused secret, a job that does not
 * fit) says more than a connection's loss and is not replaced by one: a
 * later attempt, reset by a coordinator that gave up on this rank, hid
 * "STRATA_JOB_SECRET differs" behind "Connection reset by peer". */
static void eng_boot_note(strata_ctx_t *ctx, strata_status_t status,
                          const char *why)
{
    bool telling = status == STRATA_ERR_AUTH || status == STRATA_ERR_MISMATCH ||
                   status == STRATA_ERR_PROTO;
    bool kept = ctx->join_last_error == STRATA_ERR_AUTH ||
                ctx->join_last_error == STRATA_ERR_MISMATCH ||
                ctx->join_last_error == STRATA_ERR_PROTO;
    if (kept && !telling)
        return;
    ctx->join_last_error = status;
    snprintf(ctx->join_last_why, sizeof(ctx->join_last_why), "%s",
             why[0] ? why : strata_strerror(status));
}

/* Retry after a backoff that doubles from 10 ms to 1 s, or at the deadline;
 * once connected, the timer stays armed for the deadline. */
static void eng_boot_later(strata_ctx_t *ctx, bool backoff)
{
    uint64_t now = util_now_ns();
    uint64_t left =
        ctx->join_deadline_ns > now ? ctx->join_deadline_ns - now : 0;
    uint64_t delay = left;
    if (backoff) {
        ctx->join_backoff_ms =
            ctx->join_backoff_ms ? ctx->join_backoff_ms * 2 : 10;
        if (ctx->join_backoff_ms > 1000)
            ctx->join_backoff_ms = 1000;
        delay = (uint64_t)ctx->join_backoff_ms * 1000000u;
    }
    ctx->join_timer.at_ns = now + (delay < left ? delay : left);
}

/* The deadline passed without the job coming together: say what is
 * missing, as precisely as this rank knows. */
static void eng_boot_expired(strata_ctx_t *ctx)
{
    if (ctx->coord && eng_coord_missing(ctx))
        return; /* the coordinator named the missing ranks */
    if (!ctx->coord_peer.up) {
        const char *where =
            ctx->coord_addr[0] ? ctx->coord_addr : ctx->launch.coord_file;
        eng_fail(ctx, ctx->join_last_error,
                 "cannot join the job: the coordinator at %s did not "
                 "accept us within %s=%d (last error: %s)",
                 where, ctx->join_timeout_name, ctx->join_timeout_ms,
                 ctx->join_last_why[0] ? ctx->join_last_why
                                       : strata_strerror(ctx->join_last_error));
        return;
    }
    /* The coordinator, whose deadline is the same, names what is missing;
     * this is what we say if it does not. */
    char pending[512] = "the data connections are not all up";
    if (ctx->roster->nreceived < ctx->naggs)
        snprintf(pending, sizeof(pending),
                 "the coordinator is still waiting for other ranks");
    else if (ctx->role_ops->pending)
        ctx->role_ops->pending(ctx, pending, sizeof(pending));
    eng_fail_soon(ctx, STRATA_ERR_TIMEOUT,
                  "the job did not come together within %s=%d: %s",
                  ctx->join_timeout_name, ctx->join_timeout_ms, pending);
}

static void eng_boot_retry(strata_ctx_t *ctx)
{
    if (eng_fatal(ctx) || util_gate_load(&ctx->joined) > 0)
        return;
    if (util_now_ns() >= ctx->join_deadline_ns) {
        eng_boot_expired(ctx);
        return;
    }
    if (ctx->coord_peer.ep) {
        eng_boot_later(ctx, false);
        return;
    }
    if (ctx->rank != 0 && ctx->launch.coord_file[0]) {
        strata_status_t st = eng_read_coord_file(ctx);
        if (st == STRATA_ERR_AGAIN) {
            eng_boot_later(ctx, true);
            return;
        }
        if (st != STRATA_OK) {
            eng_fail(ctx, st,
                     "cannot join the job: no coordinator's address can be "
                     "read from STRATA_COORD_FILE=%s",
                     ctx->launch.coord_file);
            return;
        }
    }
    strata_status_t st = tp_connect(ctx->coord_tp, ctx->coord_addr,
                                    &ctx->coord_peer, &ctx->coord_peer.ep);
    if (st != STRATA_OK) {
        ctx->coord_peer.ep = NULL;
        eng_boot_note(ctx, st, "");
        eng_boot_later(ctx, true);
    }
}

static strata_status_t eng_send_hello(strata_ctx_t *ctx)
{
    unsigned char buf[TP_MSG_MAX];
    eng_wbuf_t w;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_HELLO);
    eng_put_u32(&w, ENG_HELLO_MAGIC);
    eng_put_u16(&w, ENG_PROTO_VERSION);
    eng_put_u64(&w, ctx->launch.incarnation);
    eng_put_u32(&w, (uint32_t)ctx->rank);
    eng_put_u32(&w, (uint32_t)ctx->size);
    eng_put_u32(&w, (uint32_t)ctx->naggs);
    eng_put_u32(&w, (uint32_t)getpid());
    eng_put_str(&w, ctx->host_id);
    eng_put_u16(&w, ENG_NSHARED);
    for (size_t i = 0; i < ENG_NSHARED; i++) {
        eng_cfg_key_t k = eng_shared_keys[i];
        eng_put_u16(&w, (uint16_t)k);
        eng_put_u64(&w, (uint64_t)eng_config_int(ctx->cfg, k));
        eng_put_f64(&w, eng_config_double(ctx->cfg, k));
        eng_put_str(&w, eng_config_str(ctx->cfg, k));
    }
    uint8_t n = 0;
    for (int i = 0; i < ENG_NPROV; i++)
        n += ctx->data_listener[i] != NULL;
    eng_put_u8(&w, n);
    for (int i = 0; i < ENG_NPROV; i++)
        if (ctx->data_listener[i]) {
            eng_put_u8(&w, (uint8_t)i);
            eng_put_str(&w, tp_listener_addr(ctx->data_listener[i]));
        }
    eng_put_u8(&w, eng_config_int(ctx->cfg, ENG_CFG_SPARE) != 0);
    return eng_send(&ctx->coord_peer, &w, NULL);
}

static void eng_boot_on_connected(strata_ctx_t *ctx, eng_peer_t *peer,
                                  strata_status_t status)
{
    if (status == STRATA_OK) {
        peer->up = true;
        status = eng_send_hello(ctx);
        if (status == STRATA_OK) {
            eng_boot_later(ctx, false); /* the deadline still holds */
            return;
        }
    }
    const char *why = tp_ep_error(ctx->coord_peer.ep);
    util_debug("connecting to the coordinator at %s: %s (retrying)",
               ctx->coord_addr, why[0] ? why : strata_strerror(status));
    eng_boot_note(ctx, status, why);
    eng_peer_close(peer);
    peer->up = false;
    eng_boot_later(ctx, true);
}

/* ---- what the coordinator says ---- */

static void eng_on_agg_info(strata_ctx_t *ctx, eng_rbuf_t *r)
{
    eng_roster_t *ro = ctx->roster;
    int rank = (int)eng_get_u32(r);
    eng_agg_info_t info = {.rank = rank};
    eng_get_str(r, info.host_id, sizeof(info.host_id));
    unsigned n = eng_get_u8(r);
    for (unsigned i = 0; i < n && !r->bad; i++) {
        unsigned prov = eng_get_u8(r);
        char addr[ENG_ADDR_MAX];
        eng_get_str(r, addr, sizeof(addr));
        if (prov < ENG_NPROV)
            snprintf(info.addr[prov], sizeof(info.addr[prov]), "%s", addr);
        else
            r->bad = true;
    }
    unsigned spare = eng_get_u8(r);
    info.spare = spare == 1;
    if (!eng_rbuf_ok(r) || spare > 1 || rank < 0 || rank >= ro->naggs) {
        eng_fail(ctx, STRATA_ERR_PROTO,
                 "malformed AGG_INFO from the coordinator");
        return;
    }
    ro->aggs[rank] = info;
    ro->nreceived++;
}

static void eng_on_welcome(strata_ctx_t *ctx, eng_rbuf_t *r)
{
    int local_rank = (int)eng_get_u32(r);
    int64_t start = eng_get_i64(r);
    unsigned spans = eng_get_u8(r);
    if (!eng_rbuf_ok(r) || spans > 1 || ctx->roster->nreceived != ctx->naggs ||
        start < 0 || (start > 0 && ctx->rank < ctx->naggs)) {
        eng_fail(ctx, STRATA_ERR_PROTO,
                 "malformed WELCOME from the coordinator (%d of %d "
                 "aggregators described)",
                 ctx->roster->nreceived, ctx->naggs);
        return;
    }
    if (ctx->launch.local_rank < 0)
        atomic_store(&ctx->local_rank, local_rank);
    ctx->spans_hosts = spans;
    eng_roster_t *ro = ctx->roster;
    ro->nspares = 0;
    for (int a = 0; a < ro->naggs; a++)
        ro->nspares += ro->spare[a] = ro->aggs[a].spare;
    util_debug("welcomed: local rank %d, the job on %s", local_rank,
               spans ? "several hosts" : "one host");
    if (start > 0) { /* in the place of a worker the job dropped */
        ctx->start_clock = start;
        atomic_store(&ctx->clock, start);
        util_info("rejoining the running job: this worker trains from clock "
                  "%lld",
                  (long long)start);
    }
    if (ctx->rank != 0) /* rank 0's coordinator is itself */
        eng_live_watch(ctx, 0);
    eng_live_start(ctx);
    if (ctx->role_ops->on_welcome)
        ctx->role_ops->on_welcome(ctx);
}

/* The coordinator at our address runs another job (the previous one on
 * the same address, still finishing): ours may not have started yet. */
static void eng_boot_refused(strata_ctx_t *ctx, eng_peer_t *peer,
                             const char *reason)
{
    snprintf(ctx->join_last_why, sizeof(ctx->join_last_why),
             "the coordinator there refused us: %.200s", reason);
    util_debug("%s (retrying)", ctx->join_last_why);
    ctx->join_last_error = STRATA_ERR_MISMATCH;
    eng_peer_close(peer);
    peer->up = false;
    eng_boot_later(ctx, true);
}

static void eng_boot_on_recv(strata_ctx_t *ctx, eng_peer_t *peer, unsigned type,
                             eng_rbuf_t *r)
{
    (void)peer;
    char reason[TP_MSG_MAX];
    switch (type) {
    case ENG_MSG_AGG_INFO:
        eng_on_agg_info(ctx, r);
        break;
    case ENG_MSG_WELCOME:
        eng_on_welcome(ctx, r);
        break;
    case ENG_MSG_ABORT: {
        strata_status_t st = (strata_status_t)eng_get_u16(r);
        eng_get_str(r, reason, sizeof(reason));
        if (st == STRATA_OK)
            st = STRATA_ERR_PEER;
        eng_fail(ctx, st, "the job failed: %s", reason);
        break;
    }
    case ENG_MSG_REFUSED:
        eng_get_str(r, reason, sizeof(reason));
        eng_boot_refused(ctx, peer, eng_rbuf_ok(r) ? reason : "(malformed)");
        break;
    case ENG_MSG_BEAT: /* heard: the loop noted it */
        eng_get_i64(r);
        if (!eng_rbuf_ok(r))
            eng_fail(ctx, STRATA_ERR_PROTO,
                     "malformed BEAT from the coordinator");
        break;
    case ENG_MSG_DROPPED:
        eng_get_str(r, reason, sizeof(reason));
        eng_fail(ctx, STRATA_ERR_PEER,
                 "this worker was dropped from the job, which goes on "
                 "without it: %s",
                 eng_rbuf_ok(r) ? reason : "(malformed DROPPED)");
        break;
    default:
        ctx->role_ops->on_coord_msg(ctx, type, r);
    }
}

static void eng_boot_on_disconnected(strata_ctx_t *ctx, eng_peer_t *peer,
                                     strata_status_t status)
{
    eng_peer_close(peer);
    peer->up = false;
    if (ctx->bye_sent)
        return;
    /* An ABORT sent before the close would have arrived before it. */
    eng_fail_soon_now(ctx, "the coordinator left without saying why the job "
                           "failed");
    eng_fail(ctx, STRATA_ERR_PEER, "lost the coordinator (rank 0 at %s): %s",
             ctx->coord_addr,
             status == STRATA_OK ? "it closed the connection"
                                 : strata_strerror(status));
}

strata_status_t eng_boot_bye(strata_ctx_t *ctx, uint32_t *pending)
{
    unsigned char buf[TP_MSG_MAX];
    char json[TP_MSG_MAX - 16];
    if (eng_metrics_json(ctx, json, sizeof(json)) == 0)
        json[0] = '\0';
    eng_wbuf_t w;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_BYE);
    eng_put_str(&w, json);
    (*pending)++;
    strata_status_t st = eng_send(&ctx->coord_peer, &w, pending);
    if (st != STRATA_OK)
        (*pending)--;
    return st;
}
