/* CRC-32C: published check values and chaining. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <strata/strata_agg.h>

/* The check value of the CRC catalogue and the iSCSI vectors of RFC 3720
 * appendix B.4. */
static void known_values(void **state)
{
    (void)state;
    unsigned char buf[32];
    assert_int_equal(strata_crc32c(0, "123456789", 9), 0xe3069283);
    memset(buf, 0, 32);
    assert_int_equal(strata_crc32c(0, buf, 32), 0x8a9136aa);
    memset(buf, 0xff, 32);
    assert_int_equal(strata_crc32c(0, buf, 32), 0x62a8ab43);
    for (int i = 0; i < 32; i++)
        buf[i] = (unsigned char)i;
    assert_int_equal(strata_crc32c(0, buf, 32), 0x46dd794e);
    for (int i = 0; i < 32; i++)
        buf[i] = (unsigned char)(31 - i);
    assert_int_equal(strata_crc32c(0, buf, 32), 0x113fdb5c);
    assert_int_equal(strata_crc32c(0, NULL, 0), 0);
    assert_int_equal(strata_crc32c(0x1234, buf, 0), 0x1234);
}

static void chaining_equals_one_pass(void **state)
{
    (void)state;
    size_t n = 100003;
    unsigned char *buf = malloc(n);
    for (size_t i = 0; i < n; i++)
        buf[i] = (unsigned char)(i * 2654435761u >> 13);
    uint32_t whole = strata_crc32c(0, buf, n);
    for (size_t cut = 0; cut < n; cut += 9973) {
        uint32_t c = strata_crc32c(0, buf, cut);
        assert_int_equal(strata_crc32c(c, buf + cut, n - cut), whole);
    }
    buf[n / 2] ^= 1; /* a flipped bit shows */
    assert_int_not_equal(strata_crc32c(0, buf, n), whole);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(known_values),
        cmocka_unit_test(chaining_equals_one_pass),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
