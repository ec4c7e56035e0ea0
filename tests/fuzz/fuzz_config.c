/* Fuzz the STRATA_CONFIG file parser: any bytes must give either a config or
 * STRATA_ERR_CONFIG, never a crash, leak or undefined behaviour. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/config.h"
#include "util/log.h"

static void fuzz_config_quiet(void *arg, util_log_level_t level,
                              const char *line)
{
    (void)arg, (void)level, (void)line;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[64];
    if (!path[0]) {
        snprintf(path, sizeof(path), "/tmp/strata-fuzz-config-%d",
                 (int)getpid());
        setenv("STRATA_CONFIG", path, 1);
        util_log_set_sink(fuzz_config_quiet, NULL);
    }
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    fwrite(data, 1, size, f);
    fclose(f);

    eng_config_t *cfg = NULL;
    if (eng_config_load(&cfg) == STRATA_OK) {
        FILE *null = fopen("/dev/null", "w");
        if (null) {
            eng_config_dump(cfg, null);
            fclose(null);
        }
        eng_config_free(cfg);
    }
    unlink(path);
    return 0;
}
