/* "host:port" addresses and the socket options of tcp endpoints. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>

#include "transport/tcp/tcp.h"
#include "util/log.h"

/* Splits "host:port" or "[v6]:port" into its parts. */
static bool tp_tcp_split(const char *addr, char *host, size_t host_len,
                         const char **port_out)
{
    const char *colon = strrchr(addr, ':');
    if (!colon || colon[1] == '\0')
        return false;
    const char *h = addr;
    size_t n = (size_t)(colon - addr);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
        h++;
        n -= 2;
    }
    if (n >= host_len)
        return false;
    memcpy(host, h, n);
    host[n] = '\0';
    *port_out = colon + 1;
    return true;
}

strata_status_t tp_tcp_resolve(const char *addr, bool passive,
                               struct sockaddr_storage *ss_out,
                               socklen_t *len_out)
{
    char host[256];
    const char *port;
    if (!tp_tcp_split(addr, host, sizeof(host), &port)) {
        util_error("tcp: address '%s' is not host:port", addr);
        return STRATA_ERR_INVALID;
    }
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC,
        .ai_socktype = SOCK_STREAM,
        .ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0),
    };
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(*host ? host : NULL, port, &hints, &res);
    if (rc != 0) {
        util_error("tcp: cannot resolve '%s': %s", addr, gai_strerror(rc));
        return STRATA_ERR_INVALID;
    }
    memcpy(ss_out, res->ai_addr, res->ai_addrlen);
    *len_out = res->ai_addrlen;
    freeaddrinfo(res);
    return STRATA_OK;
}

void tp_tcp_format(const struct sockaddr *sa, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        port = ntohs(in->sin_port);
        snprintf(buf, len, "%s:%u", host, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        port = ntohs(in6->sin6_port);
        snprintf(buf, len, "[%s]:%u", host, port);
    } else {
        snprintf(buf, len, "(family %d)", sa->sa_family);
    }
}

/* The first address of an interface that is up and not loopback, so that a
 * wildcard listener advertises something a remote peer can reach. */
static bool tp_tcp_host_addr(int family, struct sockaddr_storage *ss)
{
    struct ifaddrs *ifs = NULL, *i;
    if (getifaddrs(&ifs) != 0)
        return false;
    for (i = ifs; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == family &&
            (i->ifa_flags & IFF_UP) && !(i->ifa_flags & IFF_LOOPBACK))
            break;
    if (i)
        memcpy(ss, i->ifa_addr,
               family == AF_INET ? sizeof(struct sockaddr_in)
                                 : sizeof(struct sockaddr_in6));
    freeifaddrs(ifs);
    return i != NULL;
}

static bool tp_tcp_is_wildcard(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ((const struct sockaddr_in *)ss)->sin_addr.s_addr ==
               htonl(INADDR_ANY);
    return ss->ss_family == AF_INET6 &&
           IN6_IS_ADDR_UNSPECIFIED(
               &((const struct sockaddr_in6 *)ss)->sin6_addr);
}

strata_status_t tp_tcp_listen_addr(int fd, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        util_error("tcp: getsockname of a listener: %s", strerror(errno));
        return STRATA_ERR_IO;
    }
    if (tp_tcp_is_wildcard(&ss)) {
        struct sockaddr_storage host;
        in_port_t port = ((struct sockaddr_in *)&ss)->sin_port;
        _Static_assert(offsetof(struct sockaddr_in, sin_port) ==
                           offsetof(struct sockaddr_in6, sin6_port),
                       "port at the same offset in both families");
        if (tp_tcp_host_addr(ss.ss_family, &host)) {
            ((struct sockaddr_in *)&host)->sin_port = port;
            ss = host;
        } else if (ss.ss_family == AF_INET) {
            ((struct sockaddr_in *)&ss)->sin_addr.s_addr =
                htonl(INADDR_LOOPBACK);
        } else {
            ((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_loopback;
        }
    }
    tp_tcp_format((struct sockaddr *)&ss, buf, len);
    return STRATA_OK;
}

static void tp_tcp_setopt(int fd, int level, int name, int value,
                          const char *what, const char *peer)
{
    if (setsockopt(fd, level, name, &value, sizeof(value)) != 0)
        util_warn("tcp: peer %s: cannot set %s=%d: %s", peer, what, value,
                  strerror(errno));
}

/* No Nagle delay for small frames. A peer that stops acknowledging (dead
 * host, pulled cable, frozen process) fails the connection after timeout_ms
 * of unacknowledged data (TCP_USER_TIMEOUT) or of keepalive silence when
 * idle. The socket buffers are left to the kernel's autotuning: setting
 * SO_SNDBUF/SO_RCVBUF would switch it off and cap them at wmem_max. */
void tp_tcp_sockopts(int fd, int timeout_ms, const char *peer)
{
    int secs = timeout_ms / 1000 > 0 ? timeout_ms / 1000 : 1;
    tp_tcp_setopt(fd, IPPROTO_TCP, TCP_NODELAY, 1, "TCP_NODELAY", peer);
    tp_tcp_setopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, timeout_ms,
                  "TCP_USER_TIMEOUT", peer);
    tp_tcp_setopt(fd, SOL_SOCKET, SO_KEEPALIVE, 1, "SO_KEEPALIVE", peer);
    tp_tcp_setopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, (secs + 1) / 2, "TCP_KEEPIDLE",
                  peer);
    tp_tcp_setopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, secs / 6 > 0 ? secs / 6 : 1,
                  "TCP_KEEPINTVL", peer);
    tp_tcp_setopt(fd, IPPROTO_TCP, TCP_KEEPCNT, 3, "TCP_KEEPCNT", peer);
}
