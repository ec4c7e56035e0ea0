/* strata-agg: run an aggregator rank until every worker has finalized. */
#include <stdio.h>
#include <string.h>

#include <strata/strata.h>

static void usage(FILE *out)
{
    fprintf(out, "usage: strata-agg [--help | --version]\n"
                 "Joins a Strata job as an aggregator rank (ranks 0..S-1, S = "
                 "STRATA_NUM_AGGREGATORS)\nand serves until every worker has "
                 "finalized. The rank comes from the launcher\n(strata-run, "
                 "mpirun, srun, torchrun) or STRATA_RANK; see strata-config "
                 "--list.\n");
}

int main(int argc, char **argv)
{
    if (argc > 1 &&
        (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        printf("strata %s\n", strata_version_string());
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "strata-agg: unknown argument '%s'\n", argv[1]);
        usage(stderr);
        return 2;
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
