/* The job secret and the HMAC-SHA256 challenge-response of auth.h. */
#include "transport/auth.h"

#include <limits.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "util/alloc.h"
#include "util/file.h"
#include "util/log.h"

/* Every message starts with magic, version and type; the rest is fixed per
 * type, so a length mismatch is a malformed message. */
#define TP_AUTH_MAGIC "STRA"
#define TP_AUTH_VERSION 1
#define TP_AUTH_HDR_LEN 8
#define TP_AUTH_MAC_LEN 32
#define TP_AUTH_SECRET_FILE_MAX 4096

enum {
    TP_AUTH_MSG_HELLO = 1,     /* nonce_c */
    TP_AUTH_MSG_CHALLENGE = 2, /* nonce_s, server MAC */
    TP_AUTH_MSG_RESPONSE = 3,  /* client MAC */
    TP_AUTH_MSG_RESULT = 4,    /* one byte: 1 accepted, 0 refused */
};

enum {
    TP_AUTH_ST_START,          /* client: nothing sent; server: await HELLO */
    TP_AUTH_ST_WAIT_CHALLENGE, /* client */
    TP_AUTH_ST_WAIT_RESPONSE,  /* server */
    TP_AUTH_ST_WAIT_RESULT,    /* client */
    TP_AUTH_ST_DONE,
    TP_AUTH_ST_FAILED,
};

static const size_t tp_auth_msg_len[] = {
    [TP_AUTH_MSG_HELLO] = TP_AUTH_HDR_LEN + TP_AUTH_NONCE_LEN,
    [TP_AUTH_MSG_CHALLENGE] =
        TP_AUTH_HDR_LEN + TP_AUTH_NONCE_LEN + TP_AUTH_MAC_LEN,
    [TP_AUTH_MSG_RESPONSE] = TP_AUTH_HDR_LEN + TP_AUTH_MAC_LEN,
    [TP_AUTH_MSG_RESULT] = TP_AUTH_HDR_LEN + 1,
};

_Static_assert(TP_AUTH_HDR_LEN + TP_AUTH_NONCE_LEN + TP_AUTH_MAC_LEN <=
                   TP_AUTH_MSG_MAX,
               "TP_AUTH_MSG_MAX too small for the challenge");

/* ---- the secret ---- */

static strata_status_t
tp_auth_read_secret_file(const char *path, unsigned char *buf, size_t *len_out)
{
    char what[PATH_MAX + 32], *text;
    snprintf(what, sizeof(what), "STRATA_JOB_SECRET_FILE=%s", path);
    size_t len = 0;
    strata_status_t st =
        util_file_read(path, what, TP_AUTH_SECRET_FILE_MAX, false, &text, &len);
    if (st != STRATA_OK)
        return st;
    struct stat sb;
    if (stat(path, &sb) == 0 && (sb.st_mode & (S_IRWXG | S_IRWXO)))
        util_warn("%s is accessible by group or others (mode %04o); "
                  "chmod 600 it",
                  what, (unsigned)(sb.st_mode & 07777));
    memcpy(buf, text, len);
    OPENSSL_cleanse(text, len);
    util_free(text);
    /* A file written by `echo secret > file` ends in a newline that is no
     * part of the secret. */
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
        len--;
    if (len == 0) {
        util_error("%s: the file is empty", what);
        return STRATA_ERR_CONFIG;
    }
    if (len == TP_AUTH_SECRET_FILE_MAX) {
        util_error("%s: longer than %d bytes", what,
                   TP_AUTH_SECRET_FILE_MAX - 1);
        return STRATA_ERR_CONFIG;
    }
    *len_out = len;
    return STRATA_OK;
}

static void tp_auth_warn_no_secret(void)
{
    static atomic_bool warned;
    if (!atomic_exchange(&warned, true))
        util_warn("no job secret set (STRATA_JOB_SECRET or "
                  "STRATA_JOB_SECRET_FILE): any process that can reach this "
                  "job's ports can join it");
}

strata_status_t tp_auth_secret_load(const tp_params_t *params,
                                    tp_auth_secret_t *secret_out)
{
    const char *inline_secret = params->secret ? params->secret : "";
    const char *path = params->secret_file ? params->secret_file : "";
    if (*inline_secret && *path) {
        util_error("STRATA_JOB_SECRET and STRATA_JOB_SECRET_FILE are both set; "
                   "set one of them");
        return STRATA_ERR_CONFIG;
    }
    unsigned char buf[TP_AUTH_SECRET_FILE_MAX];
    const unsigned char *secret = (const unsigned char *)inline_secret;
    size_t len = strlen(inline_secret);
    if (*path) {
        strata_status_t st = tp_auth_read_secret_file(path, buf, &len);
        if (st != STRATA_OK) {
            OPENSSL_cleanse(buf, sizeof(buf));
            return st;
        }
        secret = buf;
    }
    tp_auth_secret_t out = {.configured = len > 0};
    SHA256(secret, len, out.key);
    OPENSSL_cleanse(buf, sizeof(buf));
    if (!out.configured)
        tp_auth_warn_no_secret();
    *secret_out = out;
    OPENSSL_cleanse(&out, sizeof(out));
    return STRATA_OK;
}

/* ---- the exchange ---- */

void tp_auth_init(tp_auth_t *auth, const tp_auth_secret_t *secret,
                  tp_auth_role_t role)
{
    memset(auth, 0, sizeof(*auth));
    auth->secret = secret;
    auth->role = role;
    auth->state = TP_AUTH_ST_START;
}

/* HMAC(K, label | first | second) */
static strata_status_t tp_auth_mac(const tp_auth_t *auth, const char *label,
                                   const unsigned char *first,
                                   const unsigned char *second,
                                   unsigned char mac[TP_AUTH_MAC_LEN])
{
    unsigned char msg[8 + 2 * TP_AUTH_NONCE_LEN];
    size_t label_len = strlen(label);
    memcpy(msg, label, label_len);
    memcpy(msg + label_len, first, TP_AUTH_NONCE_LEN);
    memcpy(msg + label_len + TP_AUTH_NONCE_LEN, second, TP_AUTH_NONCE_LEN);
    unsigned int mac_len = 0;
    if (!HMAC(EVP_sha256(), auth->secret->key, TP_AUTH_KEY_LEN, msg,
              label_len + 2 * TP_AUTH_NONCE_LEN, mac, &mac_len) ||
        mac_len != TP_AUTH_MAC_LEN) {
        util_error("HMAC-SHA256 failed in OpenSSL");
        return STRATA_ERR_IO;
    }
    return STRATA_OK;
}

static unsigned char *tp_auth_put_hdr(void *out, int type)
{
    unsigned char *p = out;
    memcpy(p, TP_AUTH_MAGIC, 4);
    p[4] = TP_AUTH_VERSION;
    p[5] = (unsigned char)type;
    p[6] = p[7] = 0;
    return p + TP_AUTH_HDR_LEN;
}

/* The body of a message of the expected type and length, or NULL. */
static const unsigned char *tp_auth_body(const void *in, size_t in_len,
                                         int type)
{
    const unsigned char *p = in;
    if (!in || in_len != tp_auth_msg_len[type] ||
        memcmp(p, TP_AUTH_MAGIC, 4) != 0 || p[4] != TP_AUTH_VERSION ||
        p[5] != type || p[6] != 0 || p[7] != 0)
        return NULL;
    return p + TP_AUTH_HDR_LEN;
}

static strata_status_t tp_auth_nonce(unsigned char nonce[TP_AUTH_NONCE_LEN])
{
    if (RAND_bytes(nonce, TP_AUTH_NONCE_LEN) != 1) {
        util_error("RAND_bytes failed: no randomness for the auth nonce");
        return STRATA_ERR_IO;
    }
    return STRATA_OK;
}

static strata_status_t tp_auth_client_step(tp_auth_t *auth,
                                           const unsigned char *body, void *out,
                                           size_t *out_len, bool *done_out)
{
    unsigned char mac[TP_AUTH_MAC_LEN];
    strata_status_t st;
    switch (auth->state) {
    case TP_AUTH_ST_START:
        if ((st = tp_auth_nonce(auth->nonce_self)) != STRATA_OK)
            return st;
        memcpy(tp_auth_put_hdr(out, TP_AUTH_MSG_HELLO), auth->nonce_self,
               TP_AUTH_NONCE_LEN);
        *out_len = tp_auth_msg_len[TP_AUTH_MSG_HELLO];
        auth->state = TP_AUTH_ST_WAIT_CHALLENGE;
        return STRATA_OK;
    case TP_AUTH_ST_WAIT_CHALLENGE:
        memcpy(auth->nonce_peer, body, TP_AUTH_NONCE_LEN);
        st = tp_auth_mac(auth, "server", auth->nonce_self, auth->nonce_peer,
                         mac);
        if (st != STRATA_OK)
            return st;
        if (CRYPTO_memcmp(mac, body + TP_AUTH_NONCE_LEN, sizeof(mac)) != 0)
            return STRATA_ERR_AUTH; /* the server does not know the secret */
        st = tp_auth_mac(auth, "client", auth->nonce_peer, auth->nonce_self,
                         tp_auth_put_hdr(out, TP_AUTH_MSG_RESPONSE));
        if (st != STRATA_OK)
            return st;
        *out_len = tp_auth_msg_len[TP_AUTH_MSG_RESPONSE];
        auth->state = TP_AUTH_ST_WAIT_RESULT;
        return STRATA_OK;
    case TP_AUTH_ST_WAIT_RESULT:
        if (body[0] != 1)
            return STRATA_ERR_AUTH; /* the server refused us */
        auth->state = TP_AUTH_ST_DONE;
        *done_out = true;
        return STRATA_OK;
    }
    return STRATA_ERR_STATE;
}

static strata_status_t tp_auth_server_step(tp_auth_t *auth,
                                           const unsigned char *body, void *out,
                                           size_t *out_len, bool *done_out)
{
    unsigned char mac[TP_AUTH_MAC_LEN];
    strata_status_t st;
    switch (auth->state) {
    case TP_AUTH_ST_START: {
        memcpy(auth->nonce_peer, body, TP_AUTH_NONCE_LEN);
        if ((st = tp_auth_nonce(auth->nonce_self)) != STRATA_OK)
            return st;
        unsigned char *p = tp_auth_put_hdr(out, TP_AUTH_MSG_CHALLENGE);
        memcpy(p, auth->nonce_self, TP_AUTH_NONCE_LEN);
        st = tp_auth_mac(auth, "server", auth->nonce_peer, auth->nonce_self,
                         p + TP_AUTH_NONCE_LEN);
        if (st != STRATA_OK)
            return st;
        *out_len = tp_auth_msg_len[TP_AUTH_MSG_CHALLENGE];
        auth->state = TP_AUTH_ST_WAIT_RESPONSE;
        return STRATA_OK;
    }
    case TP_AUTH_ST_WAIT_RESPONSE: {
        st = tp_auth_mac(auth, "client", auth->nonce_self, auth->nonce_peer,
                         mac);
        if (st != STRATA_OK)
            return st;
        bool ok = CRYPTO_memcmp(mac, body, sizeof(mac)) == 0;
        tp_auth_put_hdr(out, TP_AUTH_MSG_RESULT)[0] = ok ? 1 : 0;
        *out_len = tp_auth_msg_len[TP_AUTH_MSG_RESULT];
        auth->state = ok ? TP_AUTH_ST_DONE : TP_AUTH_ST_FAILED;
        *done_out = ok;
        return ok ? STRATA_OK : STRATA_ERR_AUTH;
    }
    }
    return STRATA_ERR_STATE;
}

/* The message each state waits for (0: none). */
static int tp_auth_expected(const tp_auth_t *auth)
{
    switch (auth->state) {
    case TP_AUTH_ST_START:
        return auth->role == TP_AUTH_SERVER ? TP_AUTH_MSG_HELLO : 0;
    case TP_AUTH_ST_WAIT_CHALLENGE:
        return TP_AUTH_MSG_CHALLENGE;
    case TP_AUTH_ST_WAIT_RESPONSE:
        return TP_AUTH_MSG_RESPONSE;
    case TP_AUTH_ST_WAIT_RESULT:
        return TP_AUTH_MSG_RESULT;
    }
    return -1;
}

strata_status_t tp_auth_step(tp_auth_t *auth, const void *in, size_t in_len,
                             void *out, size_t *out_len, bool *done_out)
{
    *out_len = 0;
    *done_out = false;
    int expected = tp_auth_expected(auth);
    if (expected < 0)
        return STRATA_ERR_STATE; /* already done or failed */
    const unsigned char *body = NULL;
    if (expected > 0 && !(body = tp_auth_body(in, in_len, expected))) {
        auth->state = TP_AUTH_ST_FAILED;
        return STRATA_ERR_PROTO;
    }
    if (expected == 0 && in_len != 0) {
        auth->state = TP_AUTH_ST_FAILED;
        return STRATA_ERR_PROTO;
    }
    strata_status_t st =
        auth->role == TP_AUTH_CLIENT
            ? tp_auth_client_step(auth, body, out, out_len, done_out)
            : tp_auth_server_step(auth, body, out, out_len, done_out);
    if (st != STRATA_OK)
        auth->state = TP_AUTH_ST_FAILED;
    if (auth->state == TP_AUTH_ST_DONE || auth->state == TP_AUTH_ST_FAILED) {
        OPENSSL_cleanse(auth->nonce_self, TP_AUTH_NONCE_LEN);
        OPENSSL_cleanse(auth->nonce_peer, TP_AUTH_NONCE_LEN);
    }
    return st;
}
