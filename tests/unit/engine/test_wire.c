/* Control messages: round trips, and refusal of truncated or malformed ones. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine/wire.h"

static void round_trip(void **state)
{
    (void)state;
    unsigned char buf[64];
    eng_wbuf_t w;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_HELLO);
    eng_put_u8(&w, 0xab);
    eng_put_u16(&w, 0xbeef);
    eng_put_u32(&w, 0xdeadbeef);
    eng_put_u64(&w, 0x0123456789abcdefull);
    eng_put_i64(&w, -5);
    eng_put_f64(&w, 0.25);
    eng_put_str(&w, "tcp");
    size_t len = eng_wbuf_len(&w);
    assert_int_equal(len, 2 + 1 + 2 + 4 + 8 + 8 + 8 + 2 + 3);
    assert_int_equal(buf[0], ENG_MSG_HELLO); /* little endian */
    assert_int_equal(buf[1], 0);

    eng_rbuf_t r;
    unsigned type;
    char s[8];
    eng_rbuf_init(&r, buf, len, &type);
    assert_int_equal(type, ENG_MSG_HELLO);
    assert_int_equal(eng_get_u8(&r), 0xab);
    assert_int_equal(eng_get_u16(&r), 0xbeef);
    assert_int_equal(eng_get_u32(&r), 0xdeadbeef);
    assert_true(eng_get_u64(&r) == 0x0123456789abcdefull);
    assert_true(eng_get_i64(&r) == -5);
    assert_true(eng_get_f64(&r) == 0.25);
    eng_get_str(&r, s, sizeof(s));
    assert_string_equal(s, "tcp");
    assert_true(eng_rbuf_ok(&r));
    assert_string_equal(eng_msg_name(type), "HELLO");
    assert_string_equal(eng_msg_name(999), "unknown");
}

static void writer_overflow_is_reported(void **state)
{
    (void)state;
    unsigned char buf[8];
    eng_wbuf_t w;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_BYE);
    eng_put_u32(&w, 1);
    assert_int_equal(eng_wbuf_room(&w), 2);
    eng_put_u32(&w, 2);
    assert_int_equal(eng_wbuf_len(&w), 0);
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_BYE);
    eng_put_str(&w, "toolong");
    assert_int_equal(eng_wbuf_len(&w), 0);
}

static void reader_refuses_bad_input(void **state)
{
    (void)state;
    unsigned char buf[32] = {0};
    eng_rbuf_t r;
    unsigned type;
    char s[4];

    eng_rbuf_init(&r, buf, 1, &type); /* shorter than a type */
    assert_false(eng_rbuf_ok(&r));

    eng_wbuf_t w;
    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_JOIN);
    eng_put_u32(&w, 7);
    eng_rbuf_init(&r, buf, eng_wbuf_len(&w), &type);
    assert_int_equal(eng_get_u64(&r), 0); /* truncated field */
    assert_false(eng_rbuf_ok(&r));

    eng_rbuf_init(&r, buf, eng_wbuf_len(&w), &type);
    assert_int_equal(eng_get_u16(&r), 7);
    assert_false(eng_rbuf_ok(&r)); /* bytes left over */

    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_JOIN);
    eng_put_str(&w, "abcd"); /* does not fit s[4] */
    eng_rbuf_init(&r, buf, eng_wbuf_len(&w), &type);
    eng_get_str(&r, s, sizeof(s));
    assert_false(eng_rbuf_ok(&r));
    assert_string_equal(s, "");

    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_JOIN);
    eng_put_str(&w, "a");
    buf[4] = '\0'; /* an embedded NUL */
    eng_rbuf_init(&r, buf, eng_wbuf_len(&w), &type);
    eng_get_str(&r, s, sizeof(s));
    assert_false(eng_rbuf_ok(&r));

    eng_wbuf_init(&w, buf, sizeof(buf), ENG_MSG_JOIN);
    eng_put_u16(&w, 200); /* a length beyond the message */
    eng_rbuf_init(&r, buf, eng_wbuf_len(&w), &type);
    eng_get_str(&r, s, sizeof(s));
    assert_false(eng_rbuf_ok(&r));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),
        cmocka_unit_test(writer_overflow_is_reported),
        cmocka_unit_test(reader_refuses_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
