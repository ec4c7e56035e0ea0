/*
 * Requests: a pool per context from which the application thread takes
 * one per push, pull or command it waits for; the loop's turns complete
 * them. A pull waits on a gate (the clock of the model every buffer holds)
 * rather than for a completion, and while it polls, turns the loop itself.
 */
#include <stdio.h>

#include "engine/engine.h"
#include "util/alloc.h"
#include "util/log.h"

/* Application thread: a chunk more of free requests. */
static strata_status_t eng_req_grow(strata_ctx_t *ctx)
{
    eng_req_chunk_t *c = util_calloc(1, sizeof(*c));
    if (!c) {
        util_error("out of memory for %d more requests", ENG_REQ_CHUNK);
        return STRATA_ERR_NOMEM;
    }
    for (int i = ENG_REQ_CHUNK - 1; i >= 0; i--) {
        c->reqs[i].ctx = ctx;
        c->reqs[i].next_free = ctx->req_free;
        ctx->req_free = &c->reqs[i];
    }
    if (ctx->req_last) /* the progress thread may be walking the list */
        atomic_store_explicit(&ctx->req_last->next, c, memory_order_release);
    else
        ctx->req_chunks = c;
    ctx->req_last = c;
    return STRATA_OK;
}

strata_status_t eng_req_pool_create(strata_ctx_t *ctx)
{
    return eng_req_grow(ctx);
}

void eng_req_pool_free(strata_ctx_t *ctx)
{
    for (eng_req_chunk_t *c = ctx->req_chunks, *next; c; c = next) {
        next = atomic_load(&c->next);
        for (int i = 0; i < ENG_REQ_CHUNK; i++)
            util_free(c->reqs[i].tensors);
        util_free(c);
    }
    ctx->req_chunks = ctx->req_last = NULL;
    ctx->req_free = NULL;
}

static eng_req_chunk_t *eng_req_chunk_next(eng_req_chunk_t *c)
{
    return atomic_load_explicit(&c->next, memory_order_acquire);
}

static bool eng_req_push_open(const strata_request_t *req)
{
    return req->pushing;
}

bool eng_req_push_pending(strata_ctx_t *ctx)
{
    for (eng_req_chunk_t *c = ctx->req_chunks; c; c = eng_req_chunk_next(c))
        for (int i = 0; i < ENG_REQ_CHUNK; i++)
            if (eng_req_push_open(&c->reqs[i]))
                return true;
    return false;
}

void eng_req_fail_pushes(strata_ctx_t *ctx, strata_status_t status)
{
    for (eng_req_chunk_t *c = ctx->req_chunks; c; c = eng_req_chunk_next(c))
        for (int i = 0; i < ENG_REQ_CHUNK; i++)
            if (eng_req_push_open(&c->reqs[i])) {
                c->reqs[i].outstanding = 0;
                c->reqs[i].pushing = false;
                eng_req_complete(ctx, &c->reqs[i], status);
            }
}

void eng_req_complete(strata_ctx_t *ctx, strata_request_t *req,
                      strata_status_t status)
{
    req->status = status;
    atomic_store_explicit(&req->done, 1, memory_order_release);
    util_waitq_wake(&ctx->reqq);
}

void eng_req_abandon(strata_request_t *req)
{
    req->abandoned = true;
}

static void eng_req_reclaim(strata_ctx_t *ctx)
{
    for (eng_req_chunk_t *c = ctx->req_chunks; c; c = eng_req_chunk_next(c))
        for (int i = 0; i < ENG_REQ_CHUNK; i++) {
            strata_request_t *req = &c->reqs[i];
            if (req->abandoned && atomic_load(&req->done)) {
                req->abandoned = false;
                req->next_free = ctx->req_free;
                ctx->req_free = req;
            }
        }
}

strata_request_t *eng_req_get(strata_ctx_t *ctx, eng_req_kind_t kind)
{
    if (!ctx->req_free)
        eng_req_reclaim(ctx);
    if (!ctx->req_free && eng_req_grow(ctx) != STRATA_OK)
        return NULL;
    strata_request_t *req = ctx->req_free;
    ctx->req_free = req->next_free;
    req->kind = kind;
    req->status = STRATA_OK;
    req->clock = 0;
    req->gate = NULL;
    req->outstanding = 0;
    req->ntensors = 0;
    atomic_store(&req->done, 0);
    return req;
}

void eng_req_put(strata_request_t *req)
{
    strata_ctx_t *ctx = req->ctx;
    req->next_free = ctx->req_free;
    ctx->req_free = req;
}

static strata_status_t eng_req_cond(void *arg)
{
    strata_request_t *req = arg;
    return atomic_load_explicit(&req->done, memory_order_acquire)
               ? STRATA_OK
               : STRATA_ERR_AGAIN;
}

static const char *eng_req_what(const strata_request_t *req, char *buf,
                                size_t len)
{
    static const char *const what[] = {"push", "pull", "operation"};
    snprintf(buf, len, "%s", what[req->kind]);
    if (req->kind == ENG_REQ_PULL)
        snprintf(buf, len, "pull of clock %lld", (long long)req->clock);
    return buf;
}

static void eng_req_turn(void *ctx)
{
    eng_loop_assist(ctx);
}

/* A pull's wait, timing the wake-up once the gate rose for it. It polls
 * (STRATA_SPIN_US) before it parks when the last pull's wait was that
 * short (a round of small tensors), turning the loop itself between its
 * looks (eng_loop_assist): the model write it waits for then raises the
 * gate on this thread. */
static strata_status_t eng_req_wait_pull(strata_request_t *req, int timeout_ms)
{
    strata_ctx_t *ctx = req->ctx;
    bool ready = util_gate_load(req->gate) >= req->clock;
    uint64_t t0 = ready ? 0 : util_now_ns();
    uint64_t spin = ctx->pull_waited_ns <= ctx->spin_ns ? ctx->spin_ns : 0;
    strata_status_t st = util_gate_wait_spin(req->gate, req->clock, timeout_ms,
                                             spin, eng_req_turn, ctx);
    if (st == STRATA_OK && !ready) {
        uint64_t raised = atomic_load_explicit(&ctx->cnt.pull_raised_ns,
                                               memory_order_acquire);
        uint64_t now = util_now_ns();
        ctx->pull_waited_ns = now - t0;
        atomic_fetch_add_explicit(&ctx->cnt.pull_wakeup_ns,
                                  now > raised ? now - raised : 0,
                                  memory_order_relaxed);
    }
    return st;
}

strata_status_t eng_req_wait(strata_request_t *req, int timeout_ms)
{
    strata_ctx_t *ctx = req->ctx;
    if (timeout_ms < 0)
        timeout_ms = ctx->timeout_ms;
    strata_status_t st;
    if (req->kind == ENG_REQ_PULL)
        st = eng_req_wait_pull(req, timeout_ms);
    else if ((st = util_waitq_wait(&ctx->reqq, eng_req_cond, req,
                                   timeout_ms)) == STRATA_OK)
        st = req->status;
    if (st == STRATA_ERR_TIMEOUT && timeout_ms > 0) {
        char what[64];
        util_error("strata_wait: the %s did not complete within %d ms",
                   eng_req_what(req, what, sizeof(what)), timeout_ms);
    }
    return st;
}

strata_status_t eng_req_wait_put(strata_request_t **req, int timeout_ms)
{
    strata_status_t st = eng_req_wait(*req, timeout_ms);
    if (st != STRATA_ERR_TIMEOUT) {
        eng_req_put(*req);
        *req = NULL;
    }
    return st;
}

strata_status_t eng_req_test(strata_request_t **req, bool *done_out)
{
    strata_request_t *r = *req;
    strata_status_t st;
    bool done;
    if (r->kind == ENG_REQ_PULL) {
        st = util_gate_wait(r->gate, r->clock, 0);
        done = st != STRATA_ERR_TIMEOUT;
    } else {
        done = eng_req_cond(r) == STRATA_OK;
        st = r->status;
    }
    *done_out = done;
    if (!done)
        return STRATA_OK;
    eng_req_put(r);
    *req = NULL;
    return st;
}

strata_status_t eng_run(strata_ctx_t *ctx, eng_cmd_t *cmd, int timeout_ms)
{
    cmd->req = eng_req_get(ctx, ENG_REQ_CMD);
    if (!cmd->req)
        return STRATA_ERR_NOMEM;
    strata_status_t st = eng_cmd_submit(ctx, cmd);
    if (st == STRATA_OK)
        st = eng_req_wait(cmd->req, timeout_ms);
    if (st == STRATA_ERR_TIMEOUT)
        eng_req_abandon(cmd->req);
    else
        eng_req_put(cmd->req);
    return st;
}
