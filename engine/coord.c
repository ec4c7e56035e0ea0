/*
 * The coordinator, run by rank 0's progress thread. It admits ranks (HELLO:
 * right job size, settings every rank shares, no rank twice), hands out the
 * roster once all are in, checks that every worker registered the layout of
 * the first worker and sends that layout to the aggregators, collects BYE
 * (with each rank's metrics), and turns any rank's unannounced disconnect
 * into an ABORT of the whole job.
 */
#include "engine/coord.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/layout_wire.h"
#include "engine/protect.h"
#include "util/alloc.h"
#include "util/log.h"

static void eng_coord_on_recv(strata_ctx_t *ctx, eng_peer_t *peer,
                              unsigned type, eng_rbuf_t *r);
static void eng_coord_on_disconnected(strata_ctx_t *ctx, eng_peer_t *peer,
                                      strata_status_t status);

static void eng_coord_on_accept(strata_ctx_t *ctx, tp_ep_t *ep, tp_ctx_t *tp);
static void eng_coord_abort(strata_ctx_t *ctx, strata_status_t st,
                            const char *reason);
static void eng_coord_beat(strata_ctx_t *ctx);
static void eng_coord_stalled(strata_ctx_t *ctx, int r, uint64_t silent_ns);

/* What the loop calls in the coordinator. */
static const eng_role_ops_t eng_coord_role = {
    .name = "coordinator",
    .on_accept = eng_coord_on_accept,
    .fail = eng_coord_abort,
    .beat = eng_coord_beat,
    .stalled = eng_coord_stalled,
};

/* The coordinator's connection to a rank. */
static const eng_peer_ops_t eng_member_ops = {
    .what = "rank",
    .on_message = eng_coord_on_recv,
    .on_disconnected = eng_coord_on_disconnected,
};

strata_status_t eng_coord_create(strata_ctx_t *ctx)
{
    eng_coord_t *c = util_calloc(1, sizeof(*c));
    if (c)
        c->by_rank = util_calloc((size_t)ctx->size, sizeof(*c->by_rank));
    if (!c || !c->by_rank) {
        util_error("out of memory for the coordinator of %d ranks", ctx->size);
        util_free(c);
        return STRATA_ERR_NOMEM;
    }
    c->dropping = c->joining = -1;
    ctx->coord = c;
    eng_coord_protect_init(ctx);
    ctx->coord_ops = &eng_coord_role;
    const eng_coord_policy_t *pol = eng_coord_policy(ctx);
    return pol->create ? pol->create(ctx) : STRATA_OK;
}

const char *eng_member_name(eng_member_t *m)
{
    if (!m->hello)
        return eng_peer_name(&m->peer);
    /* host ids are hostname/boot id: the name is what people know */
    if (!m->name[0])
        snprintf(m->name, sizeof(m->name), "rank %d (pid %d on %.*s)",
                 m->peer.rank, m->pid, (int)strcspn(m->host_id, "/"),
                 m->host_id);
    return m->name;
}

static void eng_member_free(eng_member_t *m)
{
    eng_peer_close(&m->peer);
    eng_layout_rx_free(&m->layout);
    util_free(m->metrics);
    util_free(m->lost_first);
    util_free(m);
}

void eng_coord_free(strata_ctx_t *ctx)
{
    eng_coord_t *c = ctx->coord;
    if (!c)
        return;
    if (eng_coord_policy(ctx)->free)
        eng_coord_policy(ctx)->free(ctx);
    for (eng_member_t *m = c->members, *next; m; m = next) {
        next = m->next;
        eng_member_free(m);
    }
    util_free(c->by_rank);
    util_free(c);
    ctx->coord = NULL;
    ctx->coord_ops = NULL;
}

/* A connection that is no member of the job (it authenticated, but said no
 * fitting HELLO) is closed and forgotten: the job goes on, and its memory
 * goes with it (every connection's used to stay until the end). */
static void eng_coord_forget(strata_ctx_t *ctx, eng_member_t *m,
                             const char *why)
{
    if (why)
        util_warn("closed %s: %s; the job goes on", eng_member_name(m), why);
    eng_member_t **pp = &ctx->coord->members;
    while (*pp != m)
        pp = &(*pp)->next;
    *pp = m->next;
    eng_member_free(m);
}

static void eng_coord_on_accept(strata_ctx_t *ctx, tp_ep_t *ep, tp_ctx_t *tp)
{
    eng_member_t *m = util_calloc(1, sizeof(*m));
    if (!m) {
        util_error("out of memory admitting %s", tp_ep_peer(ep));
        tp_ep_close(ep);
        return;
    }
    m->peer = (eng_peer_t){.ops = &eng_member_ops,
                           .q = &ctx->msgs,
                           .rank = -1,
                           .ep = ep,
                           .tp = tp,
                           .up = true,
                           .owner = m};
    m->drop_at = -1;
    tp_ep_set_ctx(ep, &m->peer);
    m->next = ctx->coord->members;
    ctx->coord->members = m;
}

static void eng_send_abort(strata_ctx_t *ctx, eng_member_t *m,
                           strata_status_t status, const char *reason)
{
    unsigned char buf[TP_MSG_MAX];
    eng_wbuf_t w;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_ABORT);
    eng_put_u16(&w, (uint16_t)status);
    char clipped[TP_MSG_MAX - 16];
    snprintf(clipped, sizeof(clipped), "%s", reason);
    eng_put_str(&w, clipped);
    if (!m->peer.ep || m->bye)
        return;
    ctx->abort_pending++;
    if (eng_send(&m->peer, &w, &ctx->abort_pending) != STRATA_OK)
        ctx->abort_pending--;
}

/* The job failed: tell every rank why. */
static void eng_coord_abort(strata_ctx_t *ctx, strata_status_t st,
                            const char *reason)
{
    for (eng_member_t *m = ctx->coord->members; m; m = m->next)
        if (m->peer.rank != 0) /* rank 0 shares this context */
            eng_send_abort(ctx, m, st, reason);
    if (ctx->abort_pending == 0)
        util_gate_raise(&ctx->flushed, 1);
}

bool eng_coord_missing(strata_ctx_t *ctx)
{
    eng_coord_t *c = ctx->coord;
    if (c->nhello == ctx->size)
        return false;
    char list[256] = "";
    size_t len = 0;
    int shown = 0;
    for (int r = 0; r < ctx->size && len < sizeof(list) - 16; r++)
        if (!c->by_rank[r] && shown++ < 16)
            len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%d",
                                    shown > 1 ? ", " : "", r);
    /* Ranks still arriving in the last quarter of the wait: the launcher
     * is still starting them (hundreds of processes on busy hosts), which
     * a longer join deadline fixes; otherwise they are not coming. Counted
     * back from the deadline, not from now: a coordinator that a busy
     * machine wakes late must not turn a job still starting into one whose
     * ranks never came. */
    uint64_t window = (uint64_t)ctx->join_timeout_ms * 1000000u;
    uint64_t since = ctx->join_deadline_ns > c->last_hello_ns
                         ? ctx->join_deadline_ns - c->last_hello_ns
                         : 0;
    char cause[256];
    if (c->nhello > 0 && since < window / 4)
        snprintf(cause, sizeof(cause),
                 "the job is still starting: ranks kept joining until %.1f s "
                 "before the deadline, so raise STRATA_JOIN_TIMEOUT_MS",
                 (double)since / 1e9);
    else
        snprintf(cause, sizeof(cause),
                 "not started, a different job secret, or the coordinator's "
                 "address is wrong for them");
    eng_fail(ctx, STRATA_ERR_TIMEOUT,
             "%d of %d ranks did not join within %s=%d (ranks %s%s): %s%s",
             ctx->size - c->nhello, ctx->size, ctx->join_timeout_name,
             ctx->join_timeout_ms, list, shown > 16 ? ", ..." : "", cause,
             c->misfit);
    return true;
}

bool eng_coord_done(const strata_ctx_t *ctx)
{
    return ctx->coord->nbye == ctx->size;
}

/* ---- admission ---- */

bool eng_coord_settings_match(strata_ctx_t *ctx, eng_member_t *m, eng_rbuf_t *r,
                              char *why, size_t cap)
{
    unsigned n = eng_get_u16(r);
    for (unsigned i = 0; i < n && !r->bad; i++) {
        unsigned key = eng_get_u16(r);
        int64_t iv = (int64_t)eng_get_u64(r);
        double dv = eng_get_f64(r);
        char raw[256];
        eng_get_str(r, raw, sizeof(raw));
        if (r->bad || key >= ENG_CFG__COUNT)
            break;
        if (iv == eng_config_int(ctx->cfg, key) &&
            dv == eng_config_double(ctx->cfg, key))
            continue;
        snprintf(why, cap,
                 "settings differ between ranks: %s has %s=%s but rank 0 "
                 "has %s",
                 eng_member_name(m), eng_config_name((eng_cfg_key_t)key), raw,
                 eng_config_str(ctx->cfg, key));
        return false;
    }
    return true;
}

static bool eng_check_settings(strata_ctx_t *ctx, eng_member_t *m,
                               eng_rbuf_t *r)
{
    char why[512];
    if (eng_coord_settings_match(ctx, m, r, why, sizeof(why)))
        return true;
    eng_fail(ctx, STRATA_ERR_CONFIG, "%s", why);
    return false;
}

static bool eng_read_addrs(eng_member_t *m, eng_rbuf_t *r)
{
    unsigned n = eng_get_u8(r);
    m->info.rank = m->peer.rank;
    snprintf(m->info.host_id, sizeof(m->info.host_id), "%s", m->host_id);
    for (unsigned i = 0; i < n && !r->bad; i++) {
        unsigned prov = eng_get_u8(r);
        char addr[ENG_ADDR_MAX];
        eng_get_str(r, addr, sizeof(addr));
        if (prov >= ENG_NPROV)
            return false;
        snprintf(m->info.addr[prov], sizeof(m->info.addr[prov]), "%s", addr);
    }
    unsigned spare = eng_get_u8(r);
    m->info.spare = spare == 1;
    return eng_rbuf_ok(r) && spare <= 1;
}

void eng_coord_send_roster(strata_ctx_t *ctx, eng_member_t *m, int64_t start)
{
    eng_coord_t *c = ctx->coord;
    unsigned char buf[TP_MSG_MAX];
    eng_wbuf_t w;
    for (int a = 0; a < ctx->naggs; a++) {
        const eng_agg_info_t *info = &c->by_rank[a]->info;
        eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_AGG_INFO);
        eng_put_u32(&w, (uint32_t)a);
        eng_put_str(&w, info->host_id);
        uint8_t n = 0;
        for (int i = 0; i < ENG_NPROV; i++)
            n += info->addr[i][0] != '\0';
        eng_put_u8(&w, n);
        for (int i = 0; i < ENG_NPROV; i++)
            if (info->addr[i][0]) {
                eng_put_u8(&w, (uint8_t)i);
                eng_put_str(&w, info->addr[i]);
            }
        eng_put_u8(&w, info->spare);
        eng_send(&m->peer, &w, NULL);
    }
    int local = 0;
    for (int r = 0; r < m->peer.rank; r++)
        local += strcmp(c->by_rank[r]->host_id, m->host_id) == 0;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_WELCOME);
    eng_put_u32(&w, (uint32_t)local);
    eng_put_i64(&w, start);
    eng_put_u8(&w, c->spans_hosts);
    eng_send(&m->peer, &w, NULL);
}

/* A HELLO that is not of this job: another job on this address (the next
 * job, started while this one still runs, or a stale rank of a previous
 * one), or a rank that does not fit (another size, a rank already here).
 * It is told why, and the connection closed once it read that, while this
 * job goes on. */
void eng_coord_refuse(eng_member_t *m, util_log_level_t level, const char *why)
{
    util_log(level, "refused %s (pid %d on %s): %s", eng_peer_name(&m->peer),
             m->pid, m->host_id, why);
    m->refused = true;
    unsigned char buf[TP_MSG_MAX];
    eng_wbuf_t w;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_REFUSED);
    eng_put_str(&w, why);
    eng_send(&m->peer, &w, NULL); /* it closes the connection */
}

/* Spare aggregators (strata-agg --spare) leave at least one to hold the
 * model, on shards of one per aggregator (protection's geometry). */
static bool eng_coord_spares_fit(strata_ctx_t *ctx)
{
    int spares = 0;
    for (int a = 0; a < ctx->naggs; a++)
        spares += ctx->coord->by_rank[a]->info.spare;
    if (spares == ctx->naggs) {
        eng_fail(ctx, STRATA_ERR_CONFIG,
                 "every one of the %d aggregators was started as a spare "
                 "(strata-agg --spare, STRATA_SPARE): at least one must "
                 "hold the model",
                 ctx->naggs);
        return false;
    }
    if (spares && ctx->nshards != (uint32_t)ctx->naggs) {
        eng_fail(ctx, STRATA_ERR_CONFIG,
                 "%d spare aggregators with STRATA_SHARDS=%u: a spare takes "
                 "over the one shard of a lost aggregator (leave "
                 "STRATA_SHARDS unset or at %d)",
                 spares, ctx->nshards, ctx->naggs);
        return false;
    }
    if (spares)
        util_info("%d of the %d aggregators are spares: they hold no shard "
                  "until they take over that of an aggregator lost",
                  spares, ctx->naggs);
    return true;
}

static void eng_on_hello(strata_ctx_t *ctx, eng_member_t *m, eng_rbuf_t *r)
{
    eng_coord_t *c = ctx->coord;
    uint32_t magic = eng_get_u32(r);
    unsigned version = eng_get_u16(r);
    uint64_t incarnation = eng_get_u64(r);
    int rank = (int)eng_get_u32(r), size = (int)eng_get_u32(r);
    int naggs = (int)eng_get_u32(r);
    m->pid = (int)eng_get_u32(r);
    eng_get_str(r, m->host_id, sizeof(m->host_id));
    char why[256];
    if (r->bad || magic != ENG_HELLO_MAGIC || version != ENG_PROTO_VERSION) {
        eng_coord_forget(ctx, m,
                         "it sent a malformed HELLO (another program, or a "
                         "different version of Strata)");
        return;
    }
    if (incarnation != ctx->launch.incarnation) {
        snprintf(why, sizeof(why),
                 "it runs another job (rank %d of %d of a job with another "
                 "launcher job id, or a later job of the same processes)",
                 rank, size);
        eng_coord_refuse(m, UTIL_LOG_INFO, why);
        return;
    }
    if (size == ctx->size && naggs == ctx->naggs && rank >= 0 && rank < size &&
        c->by_rank[rank] && c->nhello == ctx->size) {
        eng_coord_rejoin_hello(ctx, m, rank, r); /* the job runs */
        return;
    }
    if (size != ctx->size || naggs != ctx->naggs || rank < 0 || rank >= size ||
        c->by_rank[rank]) {
        snprintf(why, sizeof(why),
                 "it does not fit this job: it says rank %d of %d with %d "
                 "aggregators, the job has %d ranks and %d aggregators%s",
                 rank, size, naggs, ctx->size, ctx->naggs,
                 rank >= 0 && rank < ctx->size && c->by_rank[rank]
                     ? ", and that rank has already joined"
                     : "");
        eng_coord_refuse(m, UTIL_LOG_WARN, why);
        snprintf(c->misfit, sizeof(c->misfit),
                 "; refused pid %d on %.64s: %.200s", m->pid, m->host_id, why);
        return;
    }
    m->peer.rank = rank;
    m->hello = true;
    if (!eng_check_settings(ctx, m, r))
        return;
    if (!eng_read_addrs(m, r) || (m->info.spare && rank >= ctx->naggs)) {
        eng_fail(ctx, STRATA_ERR_PROTO, "%s sent a malformed HELLO",
                 eng_member_name(m));
        return;
    }
    c->by_rank[rank] = m;
    c->last_hello_ns = util_now_ns();
    util_debug("%s joined (%d of %d)", eng_member_name(m), c->nhello + 1,
               ctx->size);
    if (++c->nhello < ctx->size || !eng_coord_spares_fit(ctx))
        return;
    /* A job-wide fact, fixed now: a worker that rejoins later, from
     * elsewhere, is told the same (the layout depends on it). */
    for (int i = 1; i < ctx->size && !c->spans_hosts; i++)
        c->spans_hosts = strcmp(c->by_rank[i]->host_id, ctx->host_id) != 0;
    for (int i = 0; i < ctx->size; i++)
        eng_coord_send_roster(ctx, c->by_rank[i], 0);
    for (int i = 1; i < ctx->size; i++) /* rank 0 is this process */
        eng_live_watch(ctx, i);
    eng_live_start(ctx);
    /* Nobody else may join: the next job on this address must find no
     * listener (and retry) rather than this job. A worker the job drops
     * opens it again, for its new process (coord_rejoin.c). */
    tp_listener_close(ctx->coord_listener);
    ctx->coord_listener = NULL;
    util_debug("every rank joined: the coordinator stops listening");
}

/* ---- layout ---- */

static void eng_send_layout_ok(eng_member_t *m)
{
    unsigned char buf[16];
    eng_wbuf_t w;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_LAYOUT_OK);
    eng_send(&m->peer, &w, NULL);
}

/* Every worker's layout is in and matches the first worker's: tell the
 * aggregators the layout, then the workers that it is accepted. */
static void eng_layout_accepted(strata_ctx_t *ctx)
{
    eng_coord_t *c = ctx->coord;
    const eng_layout_rx_t *ref = &c->by_rank[ctx->naggs]->layout;
    for (int a = 0; a < ctx->naggs; a++) {
        eng_member_t *m = c->by_rank[a];
        eng_layout_send(&m->peer, ref->tensors, ref->ntensors,
                        ref->partition_bytes);
        eng_send_layout_ok(m);
    }
    for (int r = ctx->naggs; r < ctx->size; r++)
        eng_send_layout_ok(c->by_rank[r]);
    c->layout_sent = true;
    c->layout_ref = c->by_rank[ctx->naggs];
    if (eng_coord_policy(ctx)->start)
        eng_coord_policy(ctx)->start(ctx);
    util_info("layout of %u tensors accepted from %d workers", ref->ntensors,
              ctx->nworkers);
}

static void eng_check_layouts(strata_ctx_t *ctx)
{
    eng_coord_t *c = ctx->coord;
    eng_member_t *refm = c->layout_ref ? c->layout_ref : c->by_rank[ctx->naggs];
    if (!refm || !refm->layout.complete)
        return;
    const eng_layout_rx_t *ref = &refm->layout;
    for (int r = ctx->naggs; r < ctx->size; r++) {
        eng_member_t *m = c->by_rank[r];
        if (!m || !m->layout.complete || m->layout_checked)
            continue;
        m->layout_checked = true;
        char msg[1024];
        if (m->layout.hash != ref->hash &&
            eng_layout_compare(
                ref->tensors, ref->ntensors, ref->partition_bytes, ctx->naggs,
                m->layout.tensors, m->layout.ntensors,
                m->layout.partition_bytes, r, msg, sizeof(msg)) != 0) {
            if (c->layout_sent) /* a rejoiner: the job goes on without it */
                eng_coord_drop_lost(ctx, m, msg);
            else
                eng_fail(ctx, STRATA_ERR_MISMATCH, "%s", msg);
            return;
        }
        c->nlayouts++;
        if (c->layout_sent) /* a rejoiner's */
            eng_send_layout_ok(m);
    }
    if (c->nlayouts == ctx->nworkers && !c->layout_sent)
        eng_layout_accepted(ctx);
}

static void eng_on_layout_msg(strata_ctx_t *ctx, eng_member_t *m, unsigned type,
                              eng_rbuf_t *r)
{
    const char *who = eng_member_name(m);
    if (m->peer.rank < ctx->naggs || ctx->coord->nhello < ctx->size) {
        eng_fail(ctx, STRATA_ERR_PROTO, "%s sent a layout out of turn", who);
        return;
    }
    strata_status_t st = eng_layout_rx_msg(&m->layout, type, r, who);
    if (st != STRATA_OK)
        eng_fail(ctx, st, "the layout from %s was refused", who);
    else if (m->layout.complete)
        eng_check_layouts(ctx);
}

/* ---- failures ---- */

void eng_coord_send_dropped(eng_member_t *m)
{
    unsigned char buf[TP_MSG_MAX];
    eng_wbuf_t w;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_DROPPED);
    eng_put_str(&w, m->drop_why);
    if (eng_send(&m->peer, &w, NULL) != STRATA_OK)
        util_debug("cannot tell dropped %s why", eng_member_name(m));
}

/* A rank saw a failure (FAILED). If the job has already failed, the ABORT
 * naming the first failure is on its way to that rank too; a dropped worker
 * is told why it was dropped; if ranks are missing, they are the cause;
 * otherwise what it saw is the job's first failure, and every rank is
 * told. */
static void eng_on_failed(strata_ctx_t *ctx, eng_member_t *m, eng_rbuf_t *r)
{
    strata_status_t st = (strata_status_t)eng_get_u16(r);
    char reason[TP_MSG_MAX];
    eng_get_str(r, reason, sizeof(reason));
    if (!eng_rbuf_ok(r)) {
        eng_fail(ctx, STRATA_ERR_PROTO, "malformed FAILED from %s",
                 eng_member_name(m));
        return;
    }
    if (eng_fatal(ctx) != STRATA_OK)
        return;
    if (m->dropped) {
        eng_coord_send_dropped(m);
        return;
    }
    if (eng_coord_missing(ctx) ||
        eng_coord_protect_hold(ctx, m, st == STRATA_OK ? STRATA_ERR_PEER : st,
                               reason))
        return;
    eng_fail(ctx, st == STRATA_OK ? STRATA_ERR_PEER : st, "%s: %s",
             eng_member_name(m), reason);
}

/* ---- leaving ---- */

static void eng_on_bye(strata_ctx_t *ctx, eng_member_t *m, eng_rbuf_t *r)
{
    char json[TP_MSG_MAX];
    eng_get_str(r, json, sizeof(json));
    if (!eng_rbuf_ok(r) || m->bye) {
        eng_fail(ctx, STRATA_ERR_PROTO, "malformed or repeated BYE from %s",
                 eng_member_name(m));
        return;
    }
    m->bye = true;
    m->peer.left = true;
    eng_live_unwatch(ctx, m->peer.rank);
    m->metrics = json[0] ? util_strdup(json) : NULL;
    eng_launch_tell(&ctx->launch, "left %d", m->peer.rank);
    eng_coord_rejoin_close(ctx, true); /* the job ends */
    if (!m->dropped)                   /* a dropped worker was counted then */
        ctx->coord->nbye++;
    if (eng_coord_policy(ctx)->left)
        eng_coord_policy(ctx)->left(ctx, m);
}

/* A rank is lost without BYE (how: "disconnected without finalizing",
 * "stopped responding"; why: the details): the policy may go on without a
 * worker, else the job fails naming it. */
static void eng_coord_lost(strata_ctx_t *ctx, eng_member_t *m, const char *how,
                           const char *why)
{
    char msg[sizeof(m->drop_why)];
    snprintf(msg, sizeof(msg), "%s: %s", how, why);
    if (eng_coord_protect_lost(ctx, m, msg) || eng_coord_drop_lost(ctx, m, msg))
        return;
    bool agg = m->peer.rank < ctx->naggs;
    eng_fail(ctx, STRATA_ERR_PEER, "%s %s %s%s", agg ? "aggregator" : "worker",
             eng_member_name(m), msg,
             agg ? eng_protect_loss_note(ctx->cfg, ctx->policy->sum_only) : "");
}

/* PIECE: a chunk of an aggregator's protected shard, passed on to the
 * aggregator that holds the parity it is for (agg_protect.c); FRAG: a chunk
 * of a fragment of a lost shard, to its rebuilder. One whose addressee
 * already left or is lost is not passed on: that protection is incomplete,
 * which the next one replaces (a rebuild's deadline ends it). */
static void eng_coord_relay_piece(strata_ctx_t *ctx, eng_member_t *m,
                                  unsigned type, eng_rbuf_t *r)
{
    uint32_t dst = eng_get_u32(r);
    if (r->bad || r->len > TP_MSG_MAX || m->peer.rank >= ctx->naggs ||
        dst >= (uint32_t)ctx->naggs || dst == (uint32_t)m->peer.rank) {
        eng_fail(ctx, STRATA_ERR_PROTO,
                 "%s sent a %s for rank %u, which is not another "
                 "aggregator's to hold",
                 eng_member_name(m), eng_msg_name(type), dst);
        return;
    }
    eng_member_t *to = ctx->coord->by_rank[dst];
    if (!to || !to->peer.up || to->bye)
        return;
    unsigned char buf[TP_MSG_MAX];
    memcpy(buf, r->p, r->len);
    eng_wbuf_t w = {.p = buf, .len = r->len, .cap = sizeof(buf)};
    if (eng_send(&to->peer, &w, NULL) != STRATA_OK)
        util_debug("cannot pass a %s on to %s (its disconnect says why)",
                   eng_msg_name(type), eng_member_name(to));
}

/* ---- liveness (engine/live.h) ---- */

static void eng_coord_beat(strata_ctx_t *ctx)
{
    eng_coord_protect_check(ctx);
    unsigned char buf[16];
    eng_wbuf_t w;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_BEAT);
    eng_put_i64(&w, 0);
    for (eng_member_t *m = ctx->coord->members; m; m = m->next)
        if (m->hello && m->peer.rank != 0 && m->peer.ep && !m->bye &&
            !m->dropped && eng_send(&m->peer, &w, NULL) != STRATA_OK)
            util_debug("cannot say BEAT to %s", eng_member_name(m));
}

static void eng_coord_stalled(strata_ctx_t *ctx, int r, uint64_t silent_ns)
{
    eng_member_t *m = ctx->coord->by_rank[r];
    if (!m || m->bye || m->dropped)
        return;
    char why[256];
    eng_live_describe(ctx, silent_ns, why, sizeof(why));
    eng_coord_lost(ctx, m, "stopped responding", why);
}

static void eng_coord_on_beat(strata_ctx_t *ctx, eng_member_t *m, eng_rbuf_t *r)
{
    int64_t progress = eng_get_i64(r);
    if (!eng_rbuf_ok(r)) {
        eng_fail(ctx, STRATA_ERR_PROTO, "malformed BEAT from %s",
                 eng_member_name(m));
        return;
    }
    eng_live_progress(ctx, m->peer.rank, progress);
}

static void eng_coord_on_recv(strata_ctx_t *ctx, eng_peer_t *peer,
                              unsigned type, eng_rbuf_t *r)
{
    eng_member_t *m = peer->owner;
    const eng_coord_policy_t *pol = eng_coord_policy(ctx);
    if (!m->hello) { /* not a member (yet): it costs the job nothing */
        char why[96];
        if (type == ENG_MSG_HELLO && !m->refused) {
            eng_on_hello(ctx, m, r);
            return;
        }
        snprintf(why, sizeof(why), "it sent %s (type %u) %s",
                 eng_msg_name(type), type,
                 m->refused ? "after it was refused" : "before HELLO");
        eng_coord_forget(ctx, m, why);
        return;
    }
    switch (type) {
    case ENG_MSG_HELLO:
        eng_fail(ctx, STRATA_ERR_PROTO, "%s said HELLO twice",
                 eng_member_name(m));
        break;
    case ENG_MSG_LAYOUT:
    case ENG_MSG_TENSORS:
        eng_on_layout_msg(ctx, m, type, r);
        break;
    case ENG_MSG_BYE:
        eng_on_bye(ctx, m, r);
        break;
    case ENG_MSG_FAILED:
        eng_on_failed(ctx, m, r);
        break;
    case ENG_MSG_BEAT:
        eng_coord_on_beat(ctx, m, r);
        break;
    case ENG_MSG_DROP_AT:
        eng_coord_on_drop_at(ctx, m, r);
        break;
    case ENG_MSG_PIECE:
    case ENG_MSG_FRAG:
        eng_coord_relay_piece(ctx, m, type, r);
        break;
    case ENG_MSG_PROTECTED:
        eng_coord_on_protected(ctx, m, r);
        break;
    case ENG_MSG_REBUILT:
        eng_coord_on_rebuilt(ctx, m, r);
        break;
    case ENG_MSG_LOST:
        eng_coord_on_lost(ctx, m, r);
        break;
    case ENG_MSG_REJOIN_AT:
        eng_coord_on_rejoin_at(ctx, m, r);
        break;
    default:
        if (pol->on_msg && pol->on_msg(ctx, m, type, r))
            break;
        eng_fail(ctx, STRATA_ERR_PROTO,
                 "%s sent an unexpected message %s (type %u)",
                 eng_member_name(m), eng_msg_name(type), type);
    }
}

static void eng_coord_on_disconnected(strata_ctx_t *ctx, eng_peer_t *peer,
                                      strata_status_t status)
{
    eng_member_t *m = peer->owner;
    if (!m->hello) {
        eng_coord_forget(ctx, m, NULL);
        return;
    }
    eng_peer_close(peer);
    eng_live_unwatch(ctx, m->peer.rank);
    if (m->bye || m->dropped || eng_fatal(ctx))
        return;
    eng_coord_lost(ctx, m, "disconnected without finalizing",
                   status == STRATA_OK ? "it closed the connection"
                                       : strata_strerror(status));
}

/* ---- metrics ---- */

/* "%r" replaced by the rank... here the path is rank 0's alone. */
strata_status_t eng_coord_write_metrics(strata_ctx_t *ctx, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        util_error("cannot write STRATA_METRICS=%s: %s", path, strerror(errno));
        return STRATA_ERR_IO;
    }
    fprintf(f, "{\"ranks\": [");
    bool first = true;
    for (int r = 0; r < ctx->size; r++) {
        eng_member_t *m = ctx->coord->by_rank[r];
        if (!m || !m->metrics)
            continue;
        fprintf(f, "%s\n  %s", first ? "" : ",", m->metrics);
        first = false;
    }
    fprintf(f, "\n]}\n");
    if (fclose(f) != 0) {
        util_error("cannot write STRATA_METRICS=%s: %s", path, strerror(errno));
        return STRATA_ERR_IO;
    }
    return STRATA_OK;
}
