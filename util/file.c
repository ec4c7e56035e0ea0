/* The bounded, non-blocking reader of file.h. */
#include "util/file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/alloc.h"
#include "util/log.h"

static const char *util_file_kind(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISCHR(mode) || S_ISBLK(mode))
        return "a device";
    return "not a regular file";
}

/* Reads fd to its end, at most max + 1 bytes (one more than allowed tells
 * a file that grew past the bound since fstat), into a buffer sized for
 * the size fstat gave (size_hint) that grows if the file did: not max's
 * (a megabyte for STRATA_CONFIG), which the sanitizers map and poison at
 * every read. NUL-terminated. */
static strata_status_t util_file_slurp(int fd, const char *what, size_t max,
                                       size_t size_hint, char **buf_out,
                                       size_t *len_out)
{
    size_t len = 0, cap = (size_hint < max ? size_hint : max) + 2;
    char *buf = util_malloc(cap), *more;
    strata_status_t st = STRATA_ERR_NOMEM;
    if (!buf)
        return st;
    while (len <= max) {
        if (len + 1 == cap) { /* full but for the NUL */
            cap = cap - 2 < max / 2 ? 2 * cap : max + 2;
            if (!(more = util_realloc(buf, cap)))
                goto free_buf;
            buf = more;
        }
        ssize_t n = read(fd, buf + len, cap - 1 - len);
        if (n == 0)
            break;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            util_error("%s: read failed: %s", what, strerror(errno));
            st = STRATA_ERR_CONFIG;
            goto free_buf;
        }
        len += (size_t)n;
    }
    if (len > max) {
        util_error("%s: longer than %zu bytes", what, max);
        st = STRATA_ERR_CONFIG;
        goto free_buf;
    }
    buf[len] = '\0';
    *buf_out = buf;
    *len_out = len;
    return STRATA_OK;
free_buf:
    util_free(buf);
    return st;
}

strata_status_t util_file_read(const char *path, const char *what, size_t max,
                               bool missing_ok, char **text_out,
                               size_t *len_out)
{
    /* O_NONBLOCK: opening a FIFO does not wait for a writer. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0 && errno == ENOENT && missing_ok)
        return STRATA_ERR_AGAIN;
    if (fd < 0) {
        util_error("%s: cannot open: %s", what, strerror(errno));
        return STRATA_ERR_CONFIG;
    }
    strata_status_t st = STRATA_ERR_CONFIG;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        util_error("%s: cannot stat: %s", what, strerror(errno));
        goto close_fd;
    }
    if (!S_ISREG(sb.st_mode)) {
        util_error("%s: is %s, not a regular file", what,
                   util_file_kind(sb.st_mode));
        goto close_fd;
    }
    if ((unsigned long long)sb.st_size > max) {
        util_error("%s: %lld bytes, longer than %zu", what,
                   (long long)sb.st_size, max);
        goto close_fd;
    }
    char *buf;
    size_t len;
    st = util_file_slurp(fd, what, max, (size_t)sb.st_size, &buf, &len);
    if (st != STRATA_OK)
        goto close_fd;
    *text_out = buf;
    if (len_out)
        *len_out = len;
close_fd:
    close(fd);
    return st;
}
