/* strata-agg: run an aggregator rank until every worker has finalized. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/strata.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: strata-agg [--spare] [--help | --version]\n"
            "Joins a Strata job as an aggregator rank (ranks 0..S-1, S = "
            "STRATA_NUM_AGGREGATORS)\nand serves until every worker has "
            "finalized. The rank comes from the launcher\n(strata-run, "
            "mpirun, srun, torchrun) or STRATA_RANK; see strata-config "
            "--list.\n\n"
            "  --spare    hold no shard of the model: when an aggregator is "
            "lost, take its\n"
            "             shard over (rebuilt from the protection, "
            "STRATA_PROTECT_EVERY,\n"
            "             which a spare needs). One of the S aggregator ranks, "
            "started with\n"
            "             the job: STRATA_NUM_AGGREGATORS=4 mpirun -np 3 "
            "strata-agg :\n"
            "             -np 1 strata-agg --spare : -np W PROGRAM, or "
            "strata-run --spares 1.\n"
            "             Same as STRATA_SPARE=1.\n");
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--version") == 0) {
            printf("strata %s\n", strata_version_string());
            return 0;
        }
        if (strcmp(argv[i], "--spare") != 0) {
            fprintf(stderr, "strata-agg: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
        /* the rank's own setting, read by strata_init like any other */
        if (setenv("STRATA_SPARE", "1", 1) != 0) {
            perror("strata-agg: setenv STRATA_SPARE");
            return 1;
        }
    }
    strata_ctx_t *ctx;
    strata_status_t st = strata_init(&ctx);
    if (st != STRATA_OK)
        return 1; /* the reason was logged */
    if (strata_role(ctx) != STRATA_ROLE_AGGREGATOR) {
        fprintf(stderr,
                "strata-agg: rank %d is a worker (ranks 0..%d aggregate); "
                "start strata-agg on aggregator ranks only\n",
                strata_rank(ctx), strata_num_aggregators(ctx) - 1);
        strata_finalize(ctx);
        return 1;
    }
    st = strata_serve(ctx);
    strata_status_t fst = strata_finalize(ctx);
    return st == STRATA_OK && fst == STRATA_OK ? 0 : 1;
}
