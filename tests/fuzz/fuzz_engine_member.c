/*
 * Fuzz the engine's messages as a member of the job sends them after the
 * handshake: worker rank 2 of a job of three (rank 0 aggregates and
 * coordinates, ranks 1 and 2 work) joined, and then anything arrives on its
 * own connections to the coordinator and to the aggregator: HELLO and JOIN
 * again, LAYOUT and TENSORS, the round messages. Rank 2's own context is
 * not run once the fuzzer speaks for it. The job runs over the fake
 * transport of tests/unit/engine, in this thread, afresh for every input,
 * under each policy, before or after the layout is committed. Whatever the
 * input, nothing crashes, leaks or waits, and a rank that fails names
 * rank 2: a member that misbehaves is blamed, never another.
 *
 * Input: [setup: bit 0 commit the layout first; bits 1-2 the policy: bsp,
 * ssp, gssp, esync], then records of [target: bit 0 the aggregator, else
 * the coordinator][length: u16 LE][message: type u16 LE, body].
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/worker.h"
#include "tests/fuzz/fuzz_record.h"
#include "tests/unit/engine/fake_tp.h"
#include "util/log.h"

#define NRANKS 3
#define FUZZED 2 /* the rank whose connections the fuzzer speaks on */
#define NT 300   /* floats of each worker's one tensor */

static strata_ctx_t *ranks[NRANKS];
static float params[NRANKS][NT], grads[NRANKS][NT];

static void quiet(void *arg, util_log_level_t level, const char *line)
{
    (void)arg, (void)level, (void)line;
}

static void start_rank(int r, const char *policy)
{
    char rank[16];
    snprintf(rank, sizeof(rank), "RANK=%d", r);
    const char *settings[] = {rank,
                              "SIZE=3",
                              "NUM_AGGREGATORS=1",
                              "COORD=127.0.0.1:9",
                              "HOST=127.0.0.1",
                              "TRANSPORT=tcp",
                              "TIMEOUT_MS=3600000",
                              "PARTITION_BYTES=4096",
                              "STALENESS=1",
                              policy,
                              NULL};
    strata_ctx_t *ctx = fake_tp_rank(settings);
    if (!ctx)
        abort();
    ranks[r] = ctx;
}

/* Turn the loops of the ranks in mask until none has anything to do. */
static void pump(unsigned mask)
{
    for (int turn = 0, idle = 0; idle < 3; turn++) {
        if (turn == 100000) {
            fprintf(stderr, "the ranks never came to rest\n");
            abort();
        }
        bool busy = false;
        for (int r = 0; r < NRANKS; r++)
            if (mask & (1u << r))
                busy |= eng_loop_once(ranks[r]);
        idle = busy ? 0 : idle + 1;
    }
}

static void commit(void)
{
    strata_request_t *req[NRANKS];
    for (int r = 1; r < NRANKS; r++) {
        eng_tensor_desc_t d = {.name = "w", .dtype = STRATA_FP32, .count = NT};
        if (eng_worker_register(ranks[r], &d, params[r], grads[r], NULL) !=
                STRATA_OK ||
            eng_worker_commit_start(ranks[r], &req[r]) != STRATA_OK)
            abort();
    }
    pump(~0u);
    for (int r = 1; r < NRANKS; r++)
        if (eng_worker_commit_end(ranks[r], req[r], 0) != STRATA_OK)
            abort();
}

static void job_start(uint8_t setup)
{
    static const char *const policies[] = {"POLICY=bsp", "POLICY=ssp",
                                           "POLICY=gssp", "POLICY=esync"};
    for (int r = 0; r < NRANKS; r++)
        start_rank(r, policies[(setup >> 1) & 3]);
    pump(~0u);
    for (int r = 0; r < NRANKS; r++)
        if (util_gate_load(&ranks[r]->joined) != 1)
            abort();
    if (setup & 1)
        commit();
}

/* Rank 2's connection to the coordinator (0) or to the aggregator (1). */
static tp_ep_t *member_ep(int target)
{
    strata_ctx_t *m = ranks[FUZZED];
    return target ? m->worker->links[0].peer.ep : m->coord_peer.ep;
}

static void check_blame(void)
{
    for (int r = 0; r < NRANKS; r++) {
        if (r == FUZZED || eng_fatal(ranks[r]) == STRATA_OK)
            continue;
        if (!strstr(ranks[r]->fatal_msg, "rank 2")) {
            fprintf(stderr, "rank %d failed without naming rank 2: %s\n", r,
                    ranks[r]->fatal_msg);
            abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    util_log_set_sink(quiet, NULL);
    if (size < 1)
        return 0;
    job_start(data[0]);
    const unsigned others = ~(1u << FUZZED);
    fuzz_record_t rec;
    for (size_t i = 1; fuzz_record_next(data, size, &i, &rec);) {
        tp_ep_t *ep = member_ep(rec.flags & 1);
        if (ep && tp_send(ep, rec.msg, rec.len, NULL) != STRATA_OK)
            break; /* the rank closed it */
        pump(others);
    }
    pump(others);
    check_blame();
    for (int r = 0; r < NRANKS; r++) {
        eng_ctx_free(ranks[r]);
        ranks[r] = NULL;
    }
    return 0;
}
