/* The tcp provider's frame header: encoding, checks, CRC32C. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "transport/tcp/wire.h"

static void round_trip(void **state)
{
    (void)state;
    tp_tcp_hdr_t back, h = {.type = TP_TCP_WRITE,
                            .flags = TP_TCP_F_IMM | TP_TCP_F_CRC,
                            .len = 0xfedcba98u,
                            .key = 0x0102030405060708ull,
                            .off = 0x1112131415161718ull,
                            .imm = 0xdeadbeefu,
                            .crc = 0x12345678u};
    uint8_t b[TP_TCP_HDR_LEN];
    tp_tcp_hdr_encode(&h, b);
    assert_int_equal(b[4], 0x98); /* little-endian on the wire */
    assert_int_equal(b[8], 0x08);
    const char *why = NULL;
    assert_int_equal(tp_tcp_hdr_decode(b, &back, &why), STRATA_OK);
    assert_int_equal(back.type, h.type);
    assert_int_equal(back.flags, h.flags);
    assert_int_equal(back.len, h.len);
    assert_int_equal(back.key, h.key);
    assert_int_equal(back.off, h.off);
    assert_int_equal(back.imm, h.imm);
    assert_int_equal(back.crc, h.crc);
}

static strata_status_t decode(tp_tcp_hdr_t h, int poke, uint8_t value)
{
    uint8_t b[TP_TCP_HDR_LEN];
    tp_tcp_hdr_encode(&h, b);
    if (poke >= 0)
        b[poke] = value;
    tp_tcp_hdr_t out;
    const char *why = NULL;
    strata_status_t st = tp_tcp_hdr_decode(b, &out, &why);
    assert_true(st == STRATA_OK || (why && *why));
    return st;
}

static void malformed_headers_are_refused(void **state)
{
    (void)state;
    tp_tcp_hdr_t msg = {.type = TP_TCP_MSG, .len = 10};
    assert_int_equal(decode(msg, -1, 0), STRATA_OK);
    assert_int_equal(decode(msg, 0, 0), STRATA_ERR_PROTO);  /* type 0 */
    assert_int_equal(decode(msg, 0, 99), STRATA_ERR_PROTO); /* type 99 */
    assert_int_equal(decode(msg, 2, 1), STRATA_ERR_PROTO);  /* reserved */
    assert_int_equal(decode(msg, 1, TP_TCP_F_IMM), STRATA_ERR_PROTO);
    assert_int_equal(decode(msg, 8, 1), STRATA_ERR_PROTO);  /* key */
    assert_int_equal(decode(msg, 24, 1), STRATA_ERR_PROTO); /* imm */
    msg.len = 4097; /* larger than TP_MSG_MAX */
    assert_int_equal(decode(msg, -1, 0), STRATA_ERR_PROTO);
    tp_tcp_hdr_t auth = {.type = TP_TCP_AUTH, .len = 81};
    assert_int_equal(decode(auth, -1, 0), STRATA_ERR_PROTO);
    tp_tcp_hdr_t bye = {.type = TP_TCP_BYE};
    assert_int_equal(decode(bye, -1, 0), STRATA_OK);
    assert_int_equal(decode(bye, 4, 1), STRATA_ERR_PROTO); /* payload */
    tp_tcp_hdr_t w = {.type = TP_TCP_WRITE, .len = 8, .key = 1};
    assert_int_equal(decode(w, -1, 0), STRATA_OK);
    assert_int_equal(decode(w, 24, 1), STRATA_ERR_PROTO); /* imm w/o flag */
    assert_int_equal(decode(w, 28, 1), STRATA_ERR_PROTO); /* crc w/o flag */
    assert_int_equal(decode(w, 1, 4), STRATA_ERR_PROTO);  /* unknown flag */
}

static void fits_checks_without_overflow(void **state)
{
    (void)state;
    tp_tcp_hdr_t h = {.type = TP_TCP_WRITE, .len = 16, .off = 4080};
    assert_true(tp_tcp_write_fits(&h, 4096));
    h.off = 4081;
    assert_false(tp_tcp_write_fits(&h, 4096));
    h.off = UINT64_MAX - 4;
    assert_false(tp_tcp_write_fits(&h, 4096));
    h.off = 0;
    h.len = 0;
    assert_true(tp_tcp_write_fits(&h, 0));
}

static void crc_chains_like_one_pass(void **state)
{
    (void)state;
    static uint8_t data[100000];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i * 131 + 7);
    uint32_t whole = tp_tcp_crc_update(0xffffffffu, data, sizeof(data));
    uint32_t parts = 0xffffffffu;
    for (size_t at = 0, step = 1; at < sizeof(data); at += step, step *= 3)
        parts = tp_tcp_crc_update(parts, data + at,
                                  at + step > sizeof(data) ? sizeof(data) - at
                                                           : step);
    assert_int_equal(whole, parts);
    /* The CRC32C check value: ~crc32c("123456789") == 0xe3069283. */
    uint32_t c = tp_tcp_crc_update(0xffffffffu, "123456789", 9);
    assert_int_equal(c ^ 0xffffffffu, 0xe3069283u);
    data[5000] ^= 1;
    assert_int_not_equal(tp_tcp_crc_update(0xffffffffu, data, sizeof(data)),
                         whole);
    /* The header's own crc field does not feed its CRC. */
    uint8_t h1[TP_TCP_HDR_LEN] = {2}, h2[TP_TCP_HDR_LEN] = {2};
    h2[30] = 0x55;
    assert_int_equal(tp_tcp_crc_hdr(h1), tp_tcp_crc_hdr(h2));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),
        cmocka_unit_test(malformed_headers_are_refused),
        cmocka_unit_test(fits_checks_without_overflow),
        cmocka_unit_test(crc_chains_like_one_pass),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
