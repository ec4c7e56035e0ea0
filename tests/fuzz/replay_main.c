/*
 * Stand-in for libFuzzer in ordinary builds: feeds every file of the corpus
 * directory to LLVMFuzzerTestOneInput, then deterministic mutations of each
 * (bit flips, truncations, byte splices), so a gcc build in CI still runs the
 * parsers over thousands of malformed inputs under ASan/UBSan.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPLAY_MAX_INPUT (1u << 20)
#ifndef REPLAY_MUTATIONS /* per target: tests/fuzz/CMakeLists.txt */
#define REPLAY_MUTATIONS 2000
#endif

static uint64_t replay_rng = 0x9e3779b97f4a7c15ull;

static uint64_t replay_next(void)
{
    /* xorshift64*: reproducible across runs and machines */
    replay_rng ^= replay_rng >> 12;
    replay_rng ^= replay_rng << 25;
    replay_rng ^= replay_rng >> 27;
    return replay_rng * 2685821657736338717ull;
}

static void replay_mutate(const uint8_t *seed, size_t size, uint8_t *buf)
{
    for (int m = 0; m < REPLAY_MUTATIONS; m++) {
        size_t n = size;
        memcpy(buf, seed, size);
        switch (replay_next() % 4) {
        case 0: /* flip a few bits */
            for (int k = 0; n && k < 4; k++)
                buf[replay_next() % n] ^= (uint8_t)(1u << (replay_next() % 8));
            break;
        case 1: /* truncate */
            n = n ? replay_next() % n : 0;
            break;
        case 2: /* overwrite with an interesting byte */
            if (n)
                buf[replay_next() % n] = (uint8_t[]){
                    0, 0xff, 0x7f, 0x80, '=', '\n', ','}[replay_next() % 7];
            break;
        case 3: /* duplicate a slice at the end */
            if (n && n < REPLAY_MAX_INPUT / 2) {
                size_t off = replay_next() % n, len = replay_next() % (n - off);
                memcpy(buf + n, buf + off, len);
                n += len;
            }
            break;
        }
        LLVMFuzzerTestOneInput(buf, n);
    }
}

static int replay_file(const char *path, uint8_t *seed, uint8_t *buf)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    size_t n = fread(seed, 1, REPLAY_MAX_INPUT / 2, f);
    fclose(f);
    LLVMFuzzerTestOneInput(seed, n);
    replay_mutate(seed, n, buf);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    uint8_t *seed = malloc(REPLAY_MAX_INPUT), *buf = malloc(REPLAY_MAX_INPUT);
    DIR *dir = opendir(argv[1]);
    if (!seed || !buf || !dir) {
        fprintf(stderr, "replay: cannot read corpus %s\n", argv[1]);
        return 1;
    }
    int files = 0, rc = 0;
    for (struct dirent *e; (e = readdir(dir));) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", argv[1], e->d_name);
        rc |= replay_file(path, seed, buf);
        files++;
    }
    closedir(dir);
    LLVMFuzzerTestOneInput((const uint8_t *)"", 0);
    printf("replayed %d seeds with %d mutations each\n", files,
           REPLAY_MUTATIONS);
    free(seed);
    free(buf);
    return rc || files == 0;
}
