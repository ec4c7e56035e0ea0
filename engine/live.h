/*
 * Liveness, known rather than inferred from a timeout. Once the job has come
 * together, every rank's progress thread says BEAT to the coordinator every
 * STRATA_TIMEOUT_MS/8, with its progress (a worker's clock, an aggregator's
 * updates), and the coordinator says BEAT to every rank. Any message or
 * write counts as being heard from its sender. A process that is stopped,
 * hung or cut off falls silent; whoever watches it notices once it has been
 * silent for STRATA_TIMEOUT_MS/2, before a wait on it times out:
 *   - the coordinator watches every rank: a silent one is a lost rank (its
 *     policy may go on without a worker, else the job fails naming it);
 *   - every other rank watches the coordinator: a silent one fails the job
 *     on that rank, naming the coordinator (which is told, for when it
 *     wakes).
 * A rank that itself did not run for that long (stopped, starved) knows the
 * others gave up on it: it gives its peers a fresh STRATA_TIMEOUT_MS/2
 * instead of blaming them, and reads what they said; the coordinator fails
 * the job naming itself (what it reads next are the consequences).
 *
 * Any role may ask who is stalled and how far each rank has got: the table
 * belongs to the context, the progress thread alone reads and writes it.
 */
#ifndef STRATA_ENGINE_LIVE_H
#define STRATA_ENGINE_LIVE_H

#include <stdbool.h>
#include <stdint.h>

#include <strata/strata.h>

typedef struct eng_live {
    uint64_t period_ns; /* between beats */
    uint64_t silent_ns; /* heard nothing for this long: stalled */
    uint64_t ran_ns;    /* the progress thread's last turn */
    int nranks;
    uint64_t *heard_ns; /* [nranks]: last heard from; 0: not watched */
    int64_t *progress;  /* [nranks]: as its last BEAT said, -1 */
    uint64_t *moved_ns; /* [nranks]: when that progress last changed */
} eng_live_t;

strata_status_t eng_live_create(strata_ctx_t *ctx);
void eng_live_free(strata_ctx_t *ctx);

/* Start beating and watching (on WELCOME: every rank has joined). */
void eng_live_start(strata_ctx_t *ctx);
/* The progress thread, before it acts on what it observed (a turn's
 * commands, a batch of events, a timer): whether this process itself was
 * stopped or starved for longer than a peer may be silent. A clock read. */
void eng_live_check(strata_ctx_t *ctx);

/* Watch rank r from now on, or no longer (it left, or it was dropped). */
void eng_live_watch(strata_ctx_t *ctx, int r);
void eng_live_unwatch(strata_ctx_t *ctx, int r);
/* Something arrived from rank r. */
void eng_live_heard(strata_ctx_t *ctx, int r);
/* A BEAT from rank r saying how far it has got. */
void eng_live_progress(strata_ctx_t *ctx, int r, int64_t progress);

/* The watched rank silent the longest, if for at least STRATA_TIMEOUT_MS/2
 * (its silence in *silent_ns_out); -1 if none. */
int eng_live_stalled(const strata_ctx_t *ctx, uint64_t *silent_ns_out);
/* Rank r's progress as it last said (-1: none yet), and since when
 * (monotonic ns) it has not changed. */
int64_t eng_live_progress_of(const strata_ctx_t *ctx, int r,
                             uint64_t *since_ns_out);

/* "nothing from it for 1.6 s (stopped, hung or cut off; ...)", for the
 * messages that name a stalled rank. */
void eng_live_describe(const strata_ctx_t *ctx, uint64_t silent_ns, char *buf,
                       size_t len);

#endif /* STRATA_ENGINE_LIVE_H */
