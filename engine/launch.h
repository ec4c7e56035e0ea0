/*
 * Where a process learns its place in the job: rank, size, local rank and the
 * coordinator's address, from the launcher that started it. In order of
 * precedence, each field separately:
 *   explicit  STRATA_RANK, STRATA_SIZE, STRATA_LOCAL_RANK (strata-run sets
 * them) Open MPI  OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK PMIx      PMIX_RANK
 * (the size from STRATA_SIZE or SLURM_NTASKS) Slurm     SLURM_PROCID,
 * SLURM_NTASKS, SLURM_LOCALID torchrun  RANK, WORLD_SIZE, LOCAL_RANK The
 * coordinator (rank 0) listens at STRATA_COORD=host:port; or, when that is
 * empty, rank 0 publishes the address it bound in STRATA_COORD_FILE (on a
 * filesystem every rank sees) and the others read it there; or, under
 * torchrun, MASTER_ADDR:MASTER_PORT+1 (torchrun's own store holds
 * MASTER_PORT itself).
 */
#ifndef STRATA_ENGINE_LAUNCH_H
#define STRATA_ENGINE_LAUNCH_H

#include <strata/strata.h>

#include "engine/config.h"

#define ENG_ADDR_MAX 256

typedef struct eng_launch {
    int rank, size;
    int local_rank; /* -1: the launcher did not say */
    int num_aggregators;
    const char *launcher; /* which environment gave the rank, for messages */
    char coord[ENG_ADDR_MAX];      /* host:port, or empty with coord_file */
    char coord_file[ENG_ADDR_MAX]; /* empty unless the address is published */
    /* Which job: the launcher's job id (Slurm job and step, the PMIx
     * namespace, Open MPI's job id, torchrun's run id and restart count)
     * and how many jobs this process joined before. Ranks of one job agree;
     * one coordinator address reused by the next job (each size of
     * strata-bench-pushpull, the next step of a batch script) tells them
     * apart. */
    uint64_t incarnation;
    /* STRATA_LAUNCHER_FD: a datagram socket of the launcher, -1 */
    int launcher_fd;
} eng_launch_t;

/* Read the environment. A missing rank, size or coordinator, a malformed
 * variable, or an impossible combination (rank >= size, no worker left after
 * STRATA_NUM_AGGREGATORS) is STRATA_ERR_CONFIG, logged naming the variables
 * involved. */
strata_status_t eng_launch_detect(const eng_config_t *cfg,
                                  eng_launch_t *launch_out);

/* Tell the launcher (STRATA_LAUNCHER_FD) one line about the job: "left R"
 * once rank R said goodbye, "dropped R" when the job goes on without worker
 * R. So strata-run keeps the job when a rank it sees fail was one the job
 * goes on without. Never blocks; with no launcher listening, nothing. */
void eng_launch_tell(const eng_launch_t *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static inline int eng_launch_is_aggregator(const eng_launch_t *l, int rank)
{
    return rank < l->num_aggregators;
}

#endif /* STRATA_ENGINE_LAUNCH_H */
