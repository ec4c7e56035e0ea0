/* Fuzz the authentication exchange with what an unauthenticated peer may
 * send: the server's first and second message, and the client's. Nothing
 * but a valid exchange with the key may succeed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport/auth.h"
#include "util/log.h"

static void fuzz_auth_quiet(void *arg, util_log_level_t level, const char *l)
{
    (void)arg, (void)level, (void)l;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tp_auth_secret_t secret = {.configured = true};
    util_log_set_sink(fuzz_auth_quiet, NULL);
    uint8_t out[TP_AUTH_MSG_MAX];
    size_t out_len, half = size / 2;
    bool done = false;

    tp_auth_t server;
    tp_auth_init(&server, &secret, TP_AUTH_SERVER);
    if (tp_auth_step(&server, data, half, out, &out_len, &done) == STRATA_OK &&
        tp_auth_step(&server, data + half, size - half, out, &out_len, &done) ==
            STRATA_OK)
        abort(); /* a response guessed without the key */
    if (done || out_len > TP_AUTH_MSG_MAX)
        abort();

    tp_auth_t client;
    tp_auth_init(&client, &secret, TP_AUTH_CLIENT);
    if (tp_auth_step(&client, NULL, 0, out, &out_len, &done) != STRATA_OK)
        abort();
    if (tp_auth_step(&client, data, size, out, &out_len, &done) == STRATA_OK)
        abort(); /* a challenge forged without the key */
    return 0;
}
