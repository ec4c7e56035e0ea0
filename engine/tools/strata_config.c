/* strata-config: show the effective configuration, or every setting. */
#include <stdio.h>
#include <string.h>

#include <strata/strata.h>

#include "engine/config.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: strata-config --dump | --list | --version\n"
            "  --dump     effective value of every setting and its source\n"
            "             (default, file, environment); exits 1 on a bad "
            "setting\n"
            "  --list     every setting with its type, default and meaning\n"
            "  --version  the library version\n");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("strata %s\n", strata_version_string());
        return 0;
    }
    if (strcmp(argv[1], "--list") == 0) {
        eng_config_list(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--dump") != 0) {
        fprintf(stderr, "strata-config: unknown option '%s'\n", argv[1]);
        usage(stderr);
        return 2;
    }
    eng_config_t *cfg;
    if (eng_config_load(&cfg) != STRATA_OK)
        return 1; /* each bad setting was reported on its own line */
    eng_config_dump(cfg, stdout);
    eng_config_free(cfg);
    return 0;
}
