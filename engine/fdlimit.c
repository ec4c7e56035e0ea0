/*
 * File descriptors: a process starts with the soft RLIMIT_NOFILE raised to
 * its hard limit (1024 is a common soft default, and an aggregator of a few
 * hundred workers needs more), and a rank whose connections cannot fit even
 * then fails at once, naming the limit, instead of failing later with
 * whatever call first ran out.
 */
#include <errno.h>
#include <string.h>
#include <sys/resource.h>

#include "engine/engine.h"
#include "util/log.h"

/* Descriptors per connection (the socket, and over shm the ring's memfd
 * while it is sent, the peer's doorbell and the regions it exports), and
 * what a process holds besides (epoll sets, timers, the coordinator's
 * listener, the library's own files). */
#define ENG_FD_PER_TCP 2
#define ENG_FD_PER_SHM 4
#define ENG_FD_BASE 32

static void eng_fd_raise(struct rlimit *rl)
{
    if (rl->rlim_cur >= rl->rlim_max)
        return;
    rlim_t was = rl->rlim_cur;
    rl->rlim_cur = rl->rlim_max;
    if (setrlimit(RLIMIT_NOFILE, rl) != 0) {
        util_debug("cannot raise RLIMIT_NOFILE from %llu to %llu: %s",
                   (unsigned long long)was, (unsigned long long)rl->rlim_max,
                   strerror(errno));
        rl->rlim_cur = was;
        return;
    }
    util_debug("RLIMIT_NOFILE raised from %llu to its hard limit %llu",
               (unsigned long long)was, (unsigned long long)rl->rlim_cur);
}

strata_status_t eng_fd_budget(const strata_ctx_t *ctx)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return STRATA_OK; /* nothing to check against */
    eng_fd_raise(&rl);
    /* An aggregator connects to every worker, a worker to every
     * aggregator; rank 0 also holds a connection per rank. */
    bool agg = ctx->role == STRATA_ROLE_AGGREGATOR;
    uint64_t peers = (uint64_t)(agg ? ctx->nworkers : ctx->naggs);
    uint64_t coord = ctx->rank == 0 ? (uint64_t)ctx->size : 0;
    const char *forced = ctx->tp_params.transport; /* NULL: auto */
    bool shm_possible = !forced || strcmp(forced, "shm") == 0;
    uint64_t least = ENG_FD_BASE + coord + ENG_FD_PER_TCP * peers;
    uint64_t most = ENG_FD_BASE + coord +
                    (shm_possible ? ENG_FD_PER_SHM : ENG_FD_PER_TCP) * peers;
    if (rl.rlim_cur == RLIM_INFINITY || most <= rl.rlim_cur)
        return STRATA_OK;
    const char *what = agg ? "an aggregator of" : "a worker of";
    uint64_t n = agg ? (uint64_t)ctx->nworkers : (uint64_t)ctx->naggs;
    const char *whom = agg ? "workers" : "aggregators";
    if (least > rl.rlim_cur) {
        util_error("rank %d, %s %llu %s%s, needs about %llu file "
                   "descriptors, and RLIMIT_NOFILE allows %llu (hard limit "
                   "%llu): raise it (ulimit -n) or use more aggregators",
                   ctx->rank, what, (unsigned long long)n, whom,
                   coord ? " and the coordinator" : "",
                   (unsigned long long)least, (unsigned long long)rl.rlim_cur,
                   (unsigned long long)rl.rlim_max);
        return STRATA_ERR_NOFILE;
    }
    util_warn("rank %d, %s %llu %s%s, needs up to %llu file descriptors "
              "over shm, and RLIMIT_NOFILE allows %llu (hard limit %llu): "
              "raise it (ulimit -n) if peers on this host fail to connect",
              ctx->rank, what, (unsigned long long)n, whom,
              coord ? " and the coordinator" : "", (unsigned long long)most,
              (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);
    return STRATA_OK;
}
