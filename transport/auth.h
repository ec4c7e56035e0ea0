/*
 * Mutual authentication of two transport peers with the job secret, shared by
 * every provider: an HMAC-SHA256 challenge-response in four fixed-size
 * messages carried over the provider's own connection before the endpoint is
 * reported connected. The secret never crosses the wire; nonces are fresh
 * random bytes, so a recorded exchange cannot be replayed.
 *
 *   1 client -> server  HELLO     magic, version, nonce_c
 *   2 server -> client  CHALLENGE nonce_s, HMAC(K, "server"|nonce_c|nonce_s)
 *   3 client -> server  RESPONSE  HMAC(K, "client"|nonce_s|nonce_c)
 *   4 server -> client  RESULT    accepted or refused
 *
 * K is SHA-256 of the secret. Each side checks the other's MAC in constant
 * time; a peer that fails learns nothing but "refused".
 */
#ifndef STRATA_TRANSPORT_AUTH_H
#define STRATA_TRANSPORT_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <strata/strata.h>

#include "transport/transport.h"

#define TP_AUTH_NONCE_LEN 32
#define TP_AUTH_KEY_LEN 32
/* No auth message is longer; providers size their buffers with it. */
#define TP_AUTH_MSG_MAX 80

typedef struct tp_auth_secret {
    unsigned char key[TP_AUTH_KEY_LEN];
    bool configured; /* false: no secret set (warned once), empty key */
} tp_auth_secret_t;

/* From STRATA_JOB_SECRET or STRATA_JOB_SECRET_FILE (setting both, or an
 * unreadable or empty file, is a configuration error naming the key). */
strata_status_t tp_auth_secret_load(const tp_params_t *params,
                                    tp_auth_secret_t *secret_out);

typedef enum tp_auth_role {
    TP_AUTH_CLIENT, /* the side that called tp_connect() */
    TP_AUTH_SERVER,
} tp_auth_role_t;

typedef struct tp_auth {
    const tp_auth_secret_t *secret;
    tp_auth_role_t role;
    int state;
    unsigned char nonce_self[TP_AUTH_NONCE_LEN];
    unsigned char nonce_peer[TP_AUTH_NONCE_LEN];
} tp_auth_t;

void tp_auth_init(tp_auth_t *auth, const tp_auth_secret_t *secret,
                  tp_auth_role_t role);

/* Advance the exchange. in/in_len: the message just received (NULL, 0 for
 * the client's first call). Writes the message to send, if any, to out
 * (TP_AUTH_MSG_MAX bytes) and its length to *out_len (0: nothing to send).
 * *done_out becomes true when this side is satisfied and, for the client,
 * the server has accepted. STRATA_ERR_AUTH: the peer failed (or refused us);
 * a server that refuses still has its RESULT (refused) in out to send before
 * closing. STRATA_ERR_PROTO: a malformed message. Logging is the caller's,
 * naming the peer. */
strata_status_t tp_auth_step(tp_auth_t *auth, const void *in, size_t in_len,
                             void *out, size_t *out_len, bool *done_out);

#endif /* STRATA_TRANSPORT_AUTH_H */
