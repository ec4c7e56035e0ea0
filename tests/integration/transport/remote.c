/*
 * The transport tests with their peer on another host (harness.h, "peer
 * runs elsewhere"): the same program runs on both. On the serving host,
 * TP_TEST_SERVE=host:port makes it a server of peers instead of a test: it
 * accepts control connections there and runs each requested server
 * function in a child, as tpt_spawn_server() does locally. On the testing
 * host, TP_TEST_PEER=host:port makes tpt_spawn_server() ask that server for
 * its peer, and tpt_signal(), tpt_kill() and tpt_join() go over the same
 * connection.
 *
 * The control protocol is lines of text over TCP, one connection per peer:
 *   -> spawn PROGRAM OFFSET TIMEOUT_MS HAS_SECRET\nSECRET\n
 *   <- addr LISTENER\n                 (or "error WHY\n")
 *   -> g (signal) | k (kill)           any number, one byte each
 *   <- exit STATUS\n                   the peer's exit status, -1 if killed
 * and "end\n" (answered "bye\n") on a connection of its own when the tests
 * are done. A server
 * function is named by its offset from tpt_spawn_server(): both hosts run
 * the same binary (the build is shared), so the offset is the same, and the
 * program's name is checked so that another binary is refused.
 */
#include "harness.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define TPT_LINE 512
#define TPT_CONNECT_MS 120000 /* the other VM may still be booting */
#define TPT_IDLE_MS 300000    /* a server with no client for this long quits */

static const char *tpt_program(void)
{
    static char name[256];
    if (!name[0]) {
        ssize_t n = readlink("/proc/self/exe", name, sizeof(name) - 1);
        name[n > 0 ? n : 0] = '\0';
    }
    const char *slash = strrchr(name, '/');
    return slash ? slash + 1 : name;
}

const char *tpt_remote_peer(void)
{
    const char *p = getenv("TP_TEST_PEER");
    return p && *p ? p : NULL;
}

/* "host:port" resolved for TCP; exits naming the address if it cannot be. */
static struct addrinfo *tpt_resolve(const char *addr, bool passive)
{
    char host[256];
    const char *colon = strrchr(addr, ':');
    TPT_CHECK(colon && colon - addr < (long)sizeof(host),
              "address %s: want host:port", addr);
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = passive ? AI_PASSIVE : 0};
    struct addrinfo *ai = NULL;
    int rc = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &ai);
    TPT_CHECK(rc == 0, "address %s: %s", addr, gai_strerror(rc));
    return ai;
}

/* Reads one line (without its newline) within timeout_ms; false on EOF or
 * timeout. Reads byte by byte: the lines are few and short. */
static bool tpt_read_line(int fd, char *line, size_t cap, int timeout_ms)
{
    double deadline = tpt_now_ms() + timeout_ms;
    size_t n = 0;
    for (;;) {
        int left = (int)(deadline - tpt_now_ms());
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&pfd, 1, left) != 1)
            return false;
        char c;
        if (read(fd, &c, 1) != 1)
            return false;
        if (c == '\n') {
            line[n] = '\0';
            return true;
        }
        if (n + 1 < cap)
            line[n++] = c;
    }
}

static void tpt_write_all(int fd, const char *s)
{
    size_t len = strlen(s);
    while (len > 0) {
        ssize_t n = send(fd, s, len, MSG_NOSIGNAL);
        if (n <= 0 && errno == EINTR)
            continue;
        TPT_CHECK(n > 0, "control connection: %s", strerror(errno));
        s += n, len -= (size_t)n;
    }
}

/* ---- the testing host's side ---- */

/* A control connection to TP_TEST_PEER, retried while the server is not up
 * yet (it may be booting). */
static int tpt_dial(void)
{
    const char *peer = tpt_remote_peer();
    double deadline = tpt_now_ms() + TPT_CONNECT_MS;
    for (;;) {
        struct addrinfo *ai = tpt_resolve(peer, false);
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        TPT_CHECK(fd >= 0, "socket: %s", strerror(errno));
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        int err = errno;
        freeaddrinfo(ai);
        if (rc == 0)
            return fd;
        close(fd);
        TPT_CHECK(tpt_now_ms() < deadline,
                  "no peer server at TP_TEST_PEER=%s within %d ms: %s", peer,
                  TPT_CONNECT_MS, strerror(err));
        usleep(200 * 1000);
    }
}

static pid_t tpt_end_owner;

/* Tells the peer server that the tests are done (at exit of the process
 * that spawned peers, not of its forked children). */
static void tpt_send_end(void)
{
    if (getpid() != tpt_end_owner)
        return;
    int fd = tpt_dial();
    tpt_write_all(fd, "end\n");
    /* The server closes its listener before it answers: the next program's
     * server may then listen on the same address, and its tester cannot
     * reach this one instead. */
    char line[TPT_LINE];
    if (!tpt_read_line(fd, line, sizeof(line), TPT_CONNECT_MS))
        fprintf(stderr, "the peer server did not answer \"end\"\n");
    close(fd);
}

tpt_peer_t tpt_remote_spawn(const char *secret, int timeout_ms,
                            tpt_server_fn fn)
{
    if (!tpt_end_owner) {
        tpt_end_owner = getpid();
        atexit(tpt_send_end);
    }
    tpt_peer_t peer = {.pid = -1, .ctl = tpt_dial()};
    char req[TPT_LINE];
    long long off = (long long)((intptr_t)fn - (intptr_t)tpt_spawn_server);
    snprintf(req, sizeof(req), "spawn %s %lld %d %d\n%s\n", tpt_program(), off,
             timeout_ms, secret != NULL, secret ? secret : "");
    tpt_write_all(peer.ctl, req);
    char line[TPT_LINE];
    TPT_CHECK(tpt_read_line(peer.ctl, line, sizeof(line), TPT_CONNECT_MS),
              "the peer server at %s did not start the peer",
              tpt_remote_peer());
    TPT_CHECK(strncmp(line, "addr ", 5) == 0, "the peer server at %s: %s",
              tpt_remote_peer(), line);
    snprintf(peer.addr, sizeof(peer.addr), "%.*s", (int)sizeof(peer.addr) - 1,
             line + 5);
    return peer;
}

int tpt_remote_join(tpt_peer_t *peer, int timeout_ms)
{
    char line[TPT_LINE];
    bool killed = false;
    if (!tpt_read_line(peer->ctl, line, sizeof(line), timeout_ms)) {
        fprintf(stderr, "remote peer still running after %d ms: killed\n",
                timeout_ms);
        tpt_write_all(peer->ctl, "k");
        TPT_CHECK(tpt_read_line(peer->ctl, line, sizeof(line), timeout_ms),
                  "the peer server did not report the killed peer");
        killed = true;
    }
    int status = -1;
    TPT_CHECK(sscanf(line, "exit %d", &status) == 1, "the peer server said: %s",
              line);
    close(peer->ctl);
    peer->ctl = -1;
    return killed ? -1 : status;
}

/* ---- the serving host's side ---- */

/* Relays signals and kills to the peer until it exits; its exit status. */
static int tpt_relay(int conn, tpt_peer_t *peer)
{
    int status = 0;
    for (;;) {
        pid_t done = waitpid(peer->pid, &status, WNOHANG);
        if (done == peer->pid)
            break;
        struct pollfd pfd = {.fd = conn, .events = POLLIN};
        if (poll(&pfd, 1, 10) != 1)
            continue;
        char c;
        if (read(conn, &c, 1) != 1 || c == 'k') /* EOF: the tester is gone */
            kill(peer->pid, SIGKILL);
        else if (c == 'g')
            tpt_signal(peer);
    }
    close(peer->ctl);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Serves one control connection; false once the tester said "end" (then
 * conn is left open for the answer). */
static bool tpt_serve_one(int conn)
{
    char line[TPT_LINE], secret[TPT_LINE], prog[256], reply[TPT_LINE];
    long long off = 0;
    int timeout_ms = 0, has_secret = 0;
    if (!tpt_read_line(conn, line, sizeof(line), TPT_CONNECT_MS))
        return true;
    if (strcmp(line, "end") == 0)
        return false;
    if (sscanf(line, "spawn %255s %lld %d %d", prog, &off, &timeout_ms,
               &has_secret) != 4 ||
        !tpt_read_line(conn, secret, sizeof(secret), TPT_CONNECT_MS)) {
        fprintf(stderr, "peer server: bad request: %s\n", line);
        tpt_write_all(conn, "error bad request\n");
        return true;
    }
    if (strcmp(prog, tpt_program()) != 0) {
        snprintf(reply, sizeof(reply), "error this is %.100s, not %.100s\n",
                 tpt_program(), prog);
        tpt_write_all(conn, reply);
        return true;
    }
    tpt_server_fn fn = (tpt_server_fn)((intptr_t)tpt_spawn_server + off);
    tpt_peer_t peer =
        tpt_spawn_server(has_secret ? secret : NULL, timeout_ms, fn, NULL);
    snprintf(reply, sizeof(reply), "addr %s\n", peer.addr);
    tpt_write_all(conn, reply);
    snprintf(reply, sizeof(reply), "exit %d\n", tpt_relay(conn, &peer));
    tpt_write_all(conn, reply);
    return true;
}

/* Runs before main(): with TP_TEST_SERVE set, this program serves peers
 * until told "end" and never runs its tests. */
__attribute__((constructor)) static void tpt_serve_if_asked(void)
{
    const char *at = getenv("TP_TEST_SERVE");
    if (!at || !*at)
        return;
    struct addrinfo *ai = tpt_resolve(at, true);
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    TPT_CHECK(
        fd >= 0 &&
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
            bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 4) == 0,
        "cannot serve peers at TP_TEST_SERVE=%s: %s", at, strerror(errno));
    freeaddrinfo(ai);
    /* The port actually bound, for a TP_TEST_SERVE with port 0. */
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char host[128], port[16];
    TPT_CHECK(getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
                  getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host),
                              port, sizeof(port),
                              NI_NUMERICHOST | NI_NUMERICSERV) == 0,
              "the address of TP_TEST_SERVE=%s", at);
    fprintf(stderr, "%s: serving peers at %s:%s\n", tpt_program(), host, port);
    for (bool more = true; more;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        TPT_CHECK(poll(&pfd, 1, TPT_IDLE_MS) == 1,
                  "no tester at TP_TEST_SERVE=%s for %d ms", at, TPT_IDLE_MS);
        int conn = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
        if (conn < 0)
            continue;
        more = tpt_serve_one(conn);
        if (!more) {
            close(fd);
            tpt_write_all(conn, "bye\n");
        }
        close(conn);
    }
    exit(0);
}
