/*
 * libstrata loaded with dlopen into a fresh process, as a framework plug-in
 * is, before or after a C++ library: no environment, preload or re-exec.
 *
 *   test_dlopen LIBSTRATA LIBCXX_USER strata-first|cxx-first
 *
 * Exits 0 when both loaded and worked in that order; otherwise prints what
 * failed (dlerror's text, a wrong answer) and exits 1. An abort inside the
 * C++ library (mismatched operator new/free) fails the test too.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <strata/strata.h>

static void *load(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        fprintf(stderr, "test_dlopen: dlopen(%s) failed: %s\n", path,
                dlerror());
    return h;
}

static void *sym(void *h, const char *name)
{
    void *p = dlsym(h, name);
    if (!p)
        fprintf(stderr, "test_dlopen: %s not found: %s\n", name, dlerror());
    return p;
}

/* The library answers, and a failing strata_init_with (which allocates,
 * parses and logs) returns the configuration error, not a crash. */
static int use_strata(void *h)
{
    const char *(*version)(void);
    strata_status_t (*init_with)(const char *const *, strata_ctx_t **);
    void *v = sym(h, "strata_version_string"), *i = sym(h, "strata_init_with");
    if (!v || !i)
        return 1;
    memcpy(&version, &v, sizeof(v));
    memcpy(&init_with, &i, sizeof(i));
    if (strcmp(version(), STRATA_VERSION_STRING_OF_BUILD) != 0) {
        fprintf(stderr, "test_dlopen: version %s, built as %s\n", version(),
                STRATA_VERSION_STRING_OF_BUILD);
        return 1;
    }
    const char *bad[] = {"STRATA_NO_SUCH_SETTING=1", NULL};
    strata_ctx_t *ctx = NULL;
    strata_status_t st = init_with(bad, &ctx);
    if (st != STRATA_ERR_CONFIG) {
        fprintf(stderr,
                "test_dlopen: strata_init_with of an unknown setting "
                "returned %d, not STRATA_ERR_CONFIG\n",
                (int)st);
        return 1;
    }
    return 0;
}

static int use_cxx(void *h)
{
    int (*roundtrip)(void);
    void *r = sym(h, "cxx_user_roundtrip");
    if (!r)
        return 1;
    memcpy(&roundtrip, &r, sizeof(r));
    int got = roundtrip();
    if (got != 100 + 202) {
        fprintf(stderr, "test_dlopen: cxx_user_roundtrip gave %d\n", got);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 4 || (strcmp(argv[3], "strata-first") != 0 &&
                      strcmp(argv[3], "cxx-first") != 0)) {
        fprintf(stderr, "usage: test_dlopen LIBSTRATA LIBCXX_USER "
                        "strata-first|cxx-first\n");
        return 2;
    }
    const char *strata = argv[1], *cxx = argv[2];
    bool strata_first = strcmp(argv[3], "strata-first") == 0;
    void *h1 = load(strata_first ? strata : cxx);
    if (!h1)
        return 1;
    if (strata_first ? use_strata(h1) : use_cxx(h1))
        return 1;
    void *h2 = load(strata_first ? cxx : strata);
    if (!h2)
        return 1;
    if (strata_first ? use_cxx(h2) : use_strata(h2))
        return 1;
    /* Both still work once both are in. */
    if (use_strata(strata_first ? h1 : h2) || use_cxx(strata_first ? h2 : h1))
        return 1;
    printf("test_dlopen: %s: libstrata and a C++ library loaded and "
           "working\n",
           argv[3]);
    return 0;
}
