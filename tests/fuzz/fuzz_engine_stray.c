/*
 * Fuzz the engine's messages as a connection that authenticated but is no
 * member of the job sends them: HELLO and anything else to a coordinator
 * while its job joins, JOIN and anything else to an aggregator of a job
 * whose workers all joined. Two jobs of three ranks (rank 0 aggregates and
 * coordinates, ranks 1 and 2 work) run over the fake transport of
 * tests/unit/engine, in this thread: in the first, rank 2 never starts, so
 * its coordinator still listens. Whatever the input, no rank fails and
 * every stray connection is forgotten once closed (no memory kept per
 * connection). (A JOIN for a worker that has not joined yet is the worker,
 * as far as the job secret tells: not a stray.)
 *
 * Input: records of [target: bit 0 the aggregator, else the coordinator;
 * bit 1 a new connection first][length: u16 LE][message: type u16 LE,
 * body].
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/aggregator.h"
#include "engine/coord.h"
#include "engine/engine.h"
#include "tests/fuzz/fuzz_record.h"
#include "tests/unit/engine/fake_tp.h"
#include "util/log.h"

#define NJOBS 2
#define NRANKS 3

static strata_ctx_t *ranks[NJOBS][NRANKS]; /* ranks[0][2] never starts */
static tp_ctx_t *stray_tp;

static void quiet(void *arg, util_log_level_t level, const char *line)
{
    (void)arg, (void)level, (void)line;
}

static void start_rank(int j, int r)
{
    char rank[16], coord[32];
    snprintf(rank, sizeof(rank), "RANK=%d", r);
    snprintf(coord, sizeof(coord), "COORD=127.0.0.1:%d", 7 + j);
    const char *settings[] = {rank,
                              "SIZE=3",
                              "NUM_AGGREGATORS=1",
                              coord,
                              "HOST=127.0.0.1",
                              "TRANSPORT=tcp",
                              "TIMEOUT_MS=3600000",
                              "JOIN_TIMEOUT_MS=86400000",
                              NULL};
    strata_ctx_t *ctx = fake_tp_rank(settings);
    if (!ctx)
        abort();
    ranks[j][r] = ctx;
}

static void pump(void)
{
    tp_event_t evs[16];
    int n, idle = 0;
    for (int turn = 0; turn < 100000 && idle < 3; turn++) {
        bool busy = false;
        for (int j = 0; j < NJOBS; j++)
            for (int r = 0; r < NRANKS; r++)
                if (ranks[j][r])
                    busy |= eng_loop_once(ranks[j][r]);
        do { /* the strays' side: read and drop */
            if (tp_progress(stray_tp, evs, 16, &n) != STRATA_OK)
                abort();
            busy |= n > 0;
        } while (n > 0);
        idle = busy ? 0 : idle + 1;
    }
}

static int count_members(void)
{
    int n = 0;
    for (const eng_member_t *m = ranks[0][0]->coord->members; m; m = m->next)
        n++;
    return n;
}

static int count_accepted(void)
{
    int n = 0;
    for (const eng_wlink_t *l = ranks[1][0]->agg->accepted; l; l = l->next)
        n++;
    return n;
}

static int base_members, base_accepted;

static void setup(void)
{
    util_log_set_sink(quiet, NULL);
    stray_tp = fake_tp_open();
    for (int j = 0; j < NJOBS; j++)
        for (int r = 0; r < NRANKS - (j == 0); r++)
            start_rank(j, r);
    pump();
    for (int r = 0; r < NRANKS; r++)
        if (util_gate_load(&ranks[1][r]->joined) != 1)
            abort();
    base_members = count_members();
    base_accepted = count_accepted();
}

/* Where stray connections go: the coordinator, an aggregator. */
static const char *target_addr(int t)
{
    return t ? tp_listener_addr(ranks[1][0]->data_listener[ENG_PROV_TCP])
             : ranks[0][0]->coord_addr;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!stray_tp)
        setup();
    tp_ep_t *ep[2] = {NULL, NULL};
    fuzz_record_t rec;
    for (size_t i = 0; fuzz_record_next(data, size, &i, &rec);) {
        int t = rec.flags & 1;
        if ((rec.flags & 2) && ep[t]) {
            tp_ep_close(ep[t]);
            ep[t] = NULL;
        }
        /* closed by the rank (its peer is gone), or never opened */
        if (!ep[t] || tp_send(ep[t], rec.msg, rec.len, NULL) != STRATA_OK) {
            if (ep[t])
                tp_ep_close(ep[t]);
            if (tp_connect(stray_tp, target_addr(t), NULL, &ep[t]) !=
                    STRATA_OK ||
                tp_send(ep[t], rec.msg, rec.len, NULL) != STRATA_OK)
                abort();
        }
        pump();
    }
    for (int t = 0; t < 2; t++)
        if (ep[t])
            tp_ep_close(ep[t]);
    pump();
    for (int j = 0; j < NJOBS; j++)
        for (int r = 0; r < NRANKS; r++)
            if (ranks[j][r] && eng_fatal(ranks[j][r]) != STRATA_OK) {
                fprintf(stderr, "a stray failed job %d: rank %d: %s\n", j, r,
                        ranks[j][r]->fatal_msg);
                abort();
            }
    if (count_members() != base_members || count_accepted() != base_accepted) {
        fprintf(stderr,
                "strays kept: %d members (%d before), %d accepted "
                "(%d before)\n",
                count_members(), base_members, count_accepted(), base_accepted);
        abort();
    }
    return 0;
}
