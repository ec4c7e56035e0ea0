/* The metrics of a context: counters, group clocks, staleness; and JSON. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "util/clock.h"

static uint64_t eng_ld(_Atomic uint64_t *v)
{
    return atomic_load_explicit(v, memory_order_relaxed);
}

void eng_metrics_read(strata_ctx_t *ctx, strata_metrics_t *m)
{
    eng_counters_t *c = &ctx->cnt;
    *m = (strata_metrics_t){
        .bytes_pushed = eng_ld(&c->bytes_pushed),
        .bytes_pulled = eng_ld(&c->bytes_pulled),
        .pushes = eng_ld(&c->pushes),
        .pulls = eng_ld(&c->pulls),
        .staging_copies = eng_ld(&c->staging_copies),
        .staging_bytes = eng_ld(&c->staging_bytes),
        .reductions = eng_ld(&c->reductions),
        .reduce_ns = eng_ld(&c->reduce_ns),
        .updates = eng_ld(&c->updates),
        .clock = atomic_load_explicit(&ctx->clock, memory_order_relaxed),
        .rounds = eng_ld(&c->rounds),
        .push_handoff_ns = eng_ld(&c->push_handoff_ns),
        .push_post_ns = eng_ld(&c->push_post_ns),
        .round_trip_ns = eng_ld(&c->round_trip_ns),
        .pull_wakeup_ns = eng_ld(&c->pull_wakeup_ns),
        .reduce_wait_ns = eng_ld(&c->reduce_wait_ns),
        .serve_ns = eng_ld(&c->serve_ns),
        .in_place_pushes = eng_ld(&c->in_place_pushes),
        .in_place_bytes = eng_ld(&c->in_place_bytes),
        .protected_clock =
            atomic_load_explicit(&c->protected_clock, memory_order_relaxed),
        .takeovers = eng_ld(&c->takeovers),
        .takeover_lost_rank = -1,
        .takeover_taker_rank = -1,
        .takeover_loss_ns = eng_ld(&c->tk_loss_ns),
        .takeover_rebuilt_ns = eng_ld(&c->tk_rebuilt_ns),
        .takeover_told_ns = eng_ld(&c->tk_told_ns),
        .takeover_installed_ns = eng_ld(&c->tk_installed_ns),
        .takeover_resumed_ns = eng_ld(&c->tk_resumed_ns),
    };
    /* The takeover's words, written before its count (release). */
    if (atomic_load_explicit(&c->takeovers, memory_order_acquire)) {
        m->takeover_lost_rank = atomic_load(&c->tk_lost);
        m->takeover_taker_rank = atomic_load(&c->tk_taker);
        m->takeover_protected_clock = atomic_load(&c->tk_protected);
        m->takeover_resume_clock = atomic_load(&c->tk_resume);
        m->takeover_lost_clocks =
            m->takeover_resume_clock - m->takeover_protected_clock;
    }
    const eng_role_ops_t *role = ctx->role_ops;
    if (role->group_clock) { /* an aggregator: the least of its groups' */
        m->clock = INT64_MAX;
        for (uint32_t g = 0; g < ctx->policy->ngroups; g++) {
            int64_t c = role->group_clock(ctx, g);
            m->clock = c < m->clock ? c : m->clock;
        }
    }
    if (role->staleness)
        role->staleness(ctx, m->staleness, STRATA_STALENESS_BUCKETS);
}

void eng_metrics_stamp(_Atomic uint64_t *at)
{
    uint64_t none = 0;
    atomic_compare_exchange_strong_explicit(
        at, &none, util_now_ns(), memory_order_relaxed, memory_order_relaxed);
}

void eng_metrics_protected(strata_ctx_t *ctx, int64_t clock)
{
    atomic_store_explicit(&ctx->cnt.protected_clock, clock,
                          memory_order_relaxed);
}

void eng_metrics_takeover(strata_ctx_t *ctx, uint32_t lost, uint32_t taker,
                          int64_t P, int64_t R)
{
    eng_counters_t *c = &ctx->cnt;
    eng_metrics_stamp(&c->tk_told_ns);
    if (atomic_load_explicit(&c->takeovers, memory_order_relaxed)) {
        if (atomic_load(&c->tk_lost) !=
            (int64_t)lost) /* another: counted only */
            atomic_fetch_add_explicit(&c->takeovers, 1, memory_order_relaxed);
        return; /* or the coordinator's rank: said, then told */
    }
    atomic_store(&c->tk_lost, lost);
    atomic_store(&c->tk_taker, taker);
    atomic_store(&c->tk_protected, P);
    atomic_store(&c->tk_resume, R);
    atomic_store_explicit(&c->takeovers, 1, memory_order_release);
}

void eng_metrics_pulled(strata_ctx_t *ctx, int64_t clock)
{
    eng_counters_t *c = &ctx->cnt;
    if (atomic_load_explicit(&c->takeovers, memory_order_relaxed) &&
        clock >= atomic_load_explicit(&c->tk_resume, memory_order_relaxed))
        eng_metrics_stamp(&c->tk_resumed_ns);
}

/* Appends to buf; counts what would have been written even past cap. */
typedef struct eng_jbuf {
    char *p;
    size_t cap, len;
} eng_jbuf_t;

static void eng_jprintf(eng_jbuf_t *j, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void eng_jprintf(eng_jbuf_t *j, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(j->p + (j->len < j->cap ? j->len : j->cap),
                      j->len < j->cap ? j->cap - j->len : 0, fmt, ap);
    va_end(ap);
    j->len += n > 0 ? (size_t)n : 0;
}

size_t eng_metrics_json(strata_ctx_t *ctx, char *buf, size_t cap)
{
    strata_metrics_t m;
    eng_metrics_read(ctx, &m);
    eng_jbuf_t j = {.p = buf, .cap = cap};
    eng_jprintf(
        &j,
        "{\"rank\": %d, \"role\": \"%s\", \"host\": \"%s\", "
        "\"bytes_pushed\": %llu, \"bytes_pulled\": %llu, "
        "\"pushes\": %llu, \"pulls\": %llu, \"staging_copies\": %llu, "
        "\"staging_bytes\": %llu, \"reductions\": %llu, "
        "\"reduce_ns\": %llu, \"updates\": %llu, \"clock\": %lld, "
        "\"in_place_pushes\": %llu, \"in_place_bytes\": %llu",
        ctx->rank, ctx->role_ops->name, ctx->host_id,
        (unsigned long long)m.bytes_pushed, (unsigned long long)m.bytes_pulled,
        (unsigned long long)m.pushes, (unsigned long long)m.pulls,
        (unsigned long long)m.staging_copies,
        (unsigned long long)m.staging_bytes, (unsigned long long)m.reductions,
        (unsigned long long)m.reduce_ns, (unsigned long long)m.updates,
        (long long)m.clock, (unsigned long long)m.in_place_pushes,
        (unsigned long long)m.in_place_bytes);
    if (ctx->role_ops->group_clock) {
        eng_jprintf(&j, ", \"group_clocks\": [");
        for (uint32_t g = 0; g < ctx->policy->ngroups; g++) {
            int64_t c = ctx->role_ops->group_clock(ctx, g);
            eng_jprintf(&j, "%s%lld", g ? ", " : "", (long long)c);
        }
        size_t last = STRATA_STALENESS_BUCKETS;
        while (last > 1 && m.staleness[last - 1] == 0)
            last--;
        eng_jprintf(&j, "], \"staleness_histogram\": [");
        for (size_t b = 0; b < last; b++)
            eng_jprintf(&j, "%s%llu", b ? ", " : "",
                        (unsigned long long)m.staleness[b]);
        eng_jprintf(&j, "]");
    }
    if (m.protected_clock)
        eng_jprintf(&j, ", \"protected_clock\": %lld",
                    (long long)m.protected_clock);
    if (m.takeovers)
        eng_jprintf(&j,
                    ", \"takeover\": {\"count\": %llu, \"lost_rank\": %lld, "
                    "\"taker_rank\": %lld, \"protected_clock\": %lld, "
                    "\"resume_clock\": %lld, \"lost_clocks\": %lld}",
                    (unsigned long long)m.takeovers,
                    (long long)m.takeover_lost_rank,
                    (long long)m.takeover_taker_rank,
                    (long long)m.takeover_protected_clock,
                    (long long)m.takeover_resume_clock,
                    (long long)m.takeover_lost_clocks);
    const char *report =
        atomic_load_explicit(&ctx->report, memory_order_acquire);
    if (report)
        eng_jprintf(&j, ", \"report\": %s", report);
    eng_jprintf(&j, "}");
    return j.len < cap ? j.len : 0;
}
