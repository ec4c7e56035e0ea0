/* The job secret and the HMAC-SHA256 challenge-response (transport/auth.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "transport/auth.h"

/* One side of an exchange and the last message it produced. */
typedef struct side {
    tp_auth_t auth;
    unsigned char out[TP_AUTH_MSG_MAX];
    size_t out_len;
    bool done;
    strata_status_t st;
} side_t;

static void step(side_t *s, const side_t *from)
{
    s->st =
        tp_auth_step(&s->auth, from ? from->out : NULL,
                     from ? from->out_len : 0, s->out, &s->out_len, &s->done);
}

static tp_auth_secret_t secret_of(const char *text)
{
    tp_params_t params = {.secret = text};
    tp_auth_secret_t s;
    assert_int_equal(tp_auth_secret_load(&params, &s), STRATA_OK);
    return s;
}

static void start(side_t *c, side_t *s, const tp_auth_secret_t *kc,
                  const tp_auth_secret_t *ks)
{
    memset(c, 0, sizeof(*c));
    memset(s, 0, sizeof(*s));
    tp_auth_init(&c->auth, kc, TP_AUTH_CLIENT);
    tp_auth_init(&s->auth, ks, TP_AUTH_SERVER);
}

static void same_secret_both_accept(void **state)
{
    (void)state;
    tp_auth_secret_t k = secret_of("correct horse battery staple");
    assert_true(k.configured);
    side_t c, s;
    start(&c, &s, &k, &k);
    step(&c, NULL); /* HELLO */
    assert_int_equal(c.st, STRATA_OK);
    assert_true(c.out_len > 0 && !c.done);
    step(&s, &c); /* CHALLENGE */
    assert_int_equal(s.st, STRATA_OK);
    assert_false(s.done);
    step(&c, &s); /* RESPONSE */
    assert_int_equal(c.st, STRATA_OK);
    assert_false(c.done);
    step(&s, &c); /* RESULT */
    assert_int_equal(s.st, STRATA_OK);
    assert_true(s.done);
    assert_true(s.out_len > 0);
    step(&c, &s);
    assert_int_equal(c.st, STRATA_OK);
    assert_true(c.done);
    assert_int_equal(c.out_len, 0);
    /* Nothing more to do on either side. */
    step(&c, &s);
    assert_int_equal(c.st, STRATA_ERR_STATE);
}

static void client_refuses_server_without_secret(void **state)
{
    (void)state;
    tp_auth_secret_t kc = secret_of("alpha"), ks = secret_of("beta");
    side_t c, s;
    start(&c, &s, &kc, &ks);
    step(&c, NULL);
    step(&s, &c);
    assert_int_equal(s.st, STRATA_OK);
    step(&c, &s); /* the server's MAC is wrong */
    assert_int_equal(c.st, STRATA_ERR_AUTH);
    assert_int_equal(c.out_len, 0);
    assert_false(c.done);
}

/* A client that skips checking the server and answers with a MAC under
 * the wrong key: the server refuses it, and says only "refused". */
static void server_refuses_wrong_response(void **state)
{
    (void)state;
    tp_auth_secret_t kc = secret_of("alpha"), ks = secret_of("beta");
    side_t c, s;
    start(&c, &s, &kc, &ks);
    step(&c, NULL);
    step(&s, &c);
    unsigned char msg[6 + 2 * TP_AUTH_NONCE_LEN];
    memcpy(msg, "client", 6);
    memcpy(msg + 6, s.out + 8, TP_AUTH_NONCE_LEN); /* nonce_s */
    memcpy(msg + 6 + TP_AUTH_NONCE_LEN, c.out + 8, TP_AUTH_NONCE_LEN);
    side_t forged = {.out_len = 40};
    memcpy(forged.out, c.out, 8);
    forged.out[5] = 3; /* RESPONSE */
    unsigned int len = 0;
    HMAC(EVP_sha256(), kc.key, TP_AUTH_KEY_LEN, msg, sizeof(msg),
         forged.out + 8, &len);
    step(&s, &forged);
    assert_int_equal(s.st, STRATA_ERR_AUTH);
    assert_false(s.done);
    assert_true(s.out_len > 0); /* the refusal, to send before closing */

    /* A client waiting for its result learns it was refused. */
    side_t c2, s2;
    start(&c2, &s2, &kc, &kc);
    step(&c2, NULL);
    step(&s2, &c2);
    step(&c2, &s2);
    assert_int_equal(c2.st, STRATA_OK);
    step(&c2, &s);
    assert_int_equal(c2.st, STRATA_ERR_AUTH);
    assert_false(c2.done);
}

/* Messages recorded from one exchange are worthless in the next one. */
static void replayed_messages_are_refused(void **state)
{
    (void)state;
    tp_auth_secret_t k = secret_of("alpha");
    side_t c1, s1, c2, s2;
    start(&c1, &s1, &k, &k);
    step(&c1, NULL);
    step(&s1, &c1);
    step(&c1, &s1); /* c1.out: a valid RESPONSE for session 1 */

    start(&c2, &s2, &k, &k);
    step(&c2, NULL);
    step(&s2, &c2);
    step(&s2, &c1); /* session 1's response to session 2's challenge */
    assert_int_equal(s2.st, STRATA_ERR_AUTH);

    side_t c3, s3;
    start(&c3, &s3, &k, &k);
    step(&c3, NULL);
    step(&c3, &s1); /* session 1's challenge to a new client */
    assert_int_equal(c3.st, STRATA_ERR_AUTH);
}

static void malformed_messages_are_proto_errors(void **state)
{
    (void)state;
    tp_auth_secret_t k = secret_of("alpha");
    side_t c, s;
    start(&c, &s, &k, &k);
    step(&c, NULL);
    side_t bad = c;
    bad.out[0] ^= 1; /* magic */
    step(&s, &bad);
    assert_int_equal(s.st, STRATA_ERR_PROTO);

    start(&c, &s, &k, &k);
    step(&c, NULL);
    bad = c;
    bad.out_len--; /* short */
    step(&s, &bad);
    assert_int_equal(s.st, STRATA_ERR_PROTO);

    start(&c, &s, &k, &k);
    step(&c, NULL);
    bad = c;
    bad.out[4] = 99; /* version */
    step(&s, &bad);
    assert_int_equal(s.st, STRATA_ERR_PROTO);

    start(&c, &s, &k, &k);
    step(&c, NULL);
    step(&c, &c); /* a HELLO where a CHALLENGE belongs */
    assert_int_equal(c.st, STRATA_ERR_PROTO);
    step(&c, NULL); /* failed for good */
    assert_int_equal(c.st, STRATA_ERR_STATE);
}

static bool contains(const unsigned char *hay, size_t n,
                     const unsigned char *needle, size_t m)
{
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(hay + i, needle, m) == 0)
            return true;
    return false;
}

static void secret_never_crosses_the_wire(void **state)
{
    (void)state;
    const char *text = "a secret of forty characters, or so it s";
    tp_auth_secret_t k = secret_of(text);
    side_t c, s;
    start(&c, &s, &k, &k);
    side_t *seq[] = {&c, &s, &c, &s};
    step(&c, NULL);
    for (int i = 0; i < 4; i++) {
        const side_t *m = seq[i];
        assert_false(
            contains(m->out, m->out_len, (const unsigned char *)text, 8));
        assert_false(contains(m->out, m->out_len, k.key, 8));
        if (i < 3)
            step(seq[i + 1], m);
    }
}

static strata_status_t load(const char *inline_secret, const char *file,
                            tp_auth_secret_t *out)
{
    tp_params_t params = {.secret = inline_secret, .secret_file = file};
    return tp_auth_secret_load(&params, out);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void secret_from_env_or_file(void **state)
{
    (void)state;
    char path[] = "/tmp/strata-test-secret-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);

    tp_auth_secret_t a, b;
    assert_int_equal(load("s3cret", NULL, &a), STRATA_OK);
    write_file(path, "s3cret\n"); /* as `echo s3cret > file` writes it */
    assert_int_equal(load(NULL, path, &b), STRATA_OK);
    assert_true(a.configured && b.configured);
    assert_memory_equal(a.key, b.key, TP_AUTH_KEY_LEN);

    assert_int_equal(load("s3cret", path, &b), STRATA_ERR_CONFIG);
    write_file(path, "\n");
    assert_int_equal(load(NULL, path, &b), STRATA_ERR_CONFIG);
    unlink(path);
    assert_int_equal(load(NULL, path, &b), STRATA_ERR_CONFIG);

    assert_int_equal(load(NULL, NULL, &b), STRATA_OK);
    assert_false(b.configured);
    assert_memory_not_equal(a.key, b.key, TP_AUTH_KEY_LEN);

    /* A FIFO: opening it waited for a writer forever. */
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(load(NULL, path, &b), STRATA_ERR_CONFIG);
    unlink(path);
    assert_int_equal(load(NULL, "/tmp", &b), STRATA_ERR_CONFIG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(same_secret_both_accept),
        cmocka_unit_test(client_refuses_server_without_secret),
        cmocka_unit_test(server_refuses_wrong_response),
        cmocka_unit_test(replayed_messages_are_refused),
        cmocka_unit_test(malformed_messages_are_proto_errors),
        cmocka_unit_test(secret_never_crosses_the_wire),
        cmocka_unit_test(secret_from_env_or_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
