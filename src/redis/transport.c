/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the transport of every connection (struct
 * tw_rr_link): a socket (TCP or unix), TLS over it when the configuration
 * asks (OpenSSL), hiredis' reply reader for what comes back and its
 * command formatter for what goes out, and an output buffer.
 *
 * Why not hiredis' redisContext: Debian 12's hiredis 0.14 has no TLS (its
 * TLS came with 1.0, as a separate library). The protocol stays hiredis':
 * requests are formatted by redisFormatSdsCommandArgv (the formatter of
 * redisAppendCommandArgv: its char * twin, redisFormatCommandArgv, formats
 * with sprintf and costs a set ~460 more instructions) and replies parsed
 * by a redisReader, exactly as a redisContext does; only the socket I/O is
 * ours.
 *
 * Plain connections do what hiredis' blocking context did, syscall for
 * syscall: a blocking socket with SO_RCVTIMEO / SO_SNDTIMEO at the command
 * timeout, TCP_NODELAY, one write per flush (send with MSG_NOSIGNAL), one
 * read of at most 16 KB per wait; a read that must not wait passes
 * MSG_DONTWAIT. TLS connections (and a probe's, tw_rr_link_start) keep their
 * socket non-blocking and wait in poll, because OpenSSL may need to read to
 * write and write to read, and a socket readable by poll may hold only part
 * of a record. A TLS read drains what OpenSSL can decrypt without waiting,
 * so that nothing decrypted is left inside OpenSSL where poll cannot see
 * it: after every read, a poll on the socket tells the truth.
 *
 * TLS writes use SSL_MODE_ENABLE_PARTIAL_WRITE: a write reports the bytes
 * of each record wholly in the socket, so that what the router counts as
 * written (a command that may have run) is never short of what the server
 * could have read, and never more (a record cut short cannot be decrypted).
 *
 * Verification: the peer's chain against the CA file and/or directory (or
 * the system's store), and, unless turned off, its name: tls_server_name if
 * set, else the host connected to (an IP literal is matched against the
 * certificate's IP SANs, a name against its DNS names; SNI carries names
 * only). A failure names OpenSSL's verify text (TW_ETLS).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <hiredis/sds.h>

#include "redis/internal.h"

#ifdef TWHEEL_TLS
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#endif

#define LK_READ_BYTES (16 * 1024) /* one read, as hiredis reads */

enum { LK_CONNECTING, LK_HANDSHAKE, LK_READY };

struct tw_rr_tls {
#ifdef TWHEEL_TLS
    SSL_CTX *ctx;
#endif
    char *name;       /* verification and SNI name for every server; NULL: the host */
    bool verify_host; /* check the certificate's name */
};

/* The first failure of a link: its code and text (later ones are echoes). */
static int lk_fail(struct tw_rr_link *l, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int lk_fail(struct tw_rr_link *l, int code, const char *fmt, ...)
{
    if (!l->err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(l->errstr, sizeof l->errstr, fmt, ap);
        va_end(ap);
        l->err = code;
    }
    return -1;
}

static int lk_errno(struct tw_rr_link *l, int e)
{
    return e == ENOMEM ? lk_fail(l, TW_ENOMEM, "%s", strerror(e))
                       : lk_fail(l, TW_EIO, "%s", strerror(e));
}

/* Milliseconds left until deadline_ns (0 when past). */
static int lk_left_ms(uint64_t deadline_ns)
{
    uint64_t now = tw_rr_mono_ns();
    return now >= deadline_ns ? 0 : (int)((deadline_ns - now + 999999) / 1000000);
}

/* Wait for fd to be ready for `ev` until deadline_ns: 1 ready, 0 not by
 * then. */
static int lk_wait(int fd, short ev, uint64_t deadline_ns)
{
    for (;;) {
        struct pollfd p = {fd, ev, 0};
        int r = poll(&p, 1, lk_left_ms(deadline_ns));
        if (r > 0)
            return 1;
        if (r == 0 || errno != EINTR)
            return 0;
    }
}

static uint64_t lk_deadline(uint32_t ms)
{
    return tw_rr_mono_ns() + (uint64_t)ms * 1000000u;
}

/* A read or write that found the socket not ready: 0 when not waiting
 * (the caller returns 0), 1 once it is ready for ev (try again), -1 when
 * the wait failed (l->err): a blocking socket's SO_RCVTIMEO / SO_SNDTIMEO
 * ran out, or wait_ms passed since the first wait (*deadline, 0 at first). */
static int lk_blocked(struct tw_rr_link *l, bool wait, short ev, uint64_t *deadline)
{
    if (!wait)
        return 0;
    if (!l->nb)
        return lk_errno(l, EAGAIN);
    if (!*deadline)
        *deadline = lk_deadline(l->wait_ms);
    return lk_wait(l->fd, ev, *deadline) ? 1 : lk_errno(l, EAGAIN);
}

/* ---- TLS configuration ------------------------------------------------------ */

#ifdef TWHEEL_TLS
/* Before an SSL call on a link: its failure is then read from a clean
 * error queue and errno (SSL_get_error, lk_ssl_fail). */
static void lk_ossl_clear(void)
{
    ERR_clear_error();
    errno = 0;
}

/* OpenSSL's reason for the last failure on this thread (its queue cleared). */
static const char *lk_ossl_why(char *buf, size_t len)
{
    unsigned long e = ERR_peek_last_error();
    const char *why = e ? ERR_reason_error_string(e) : NULL;
    snprintf(buf, len, "%s", why ? why : e ? "OpenSSL error" : "no details");
    ERR_clear_error();
    return buf;
}
#endif

int tw_rr_tls_new(const struct tw_rr_tls_config *tc, struct tw_rr_tls **out, char *err,
                  size_t errlen)
{
    *out = NULL;
#ifndef TWHEEL_TLS
    (void)tc;
    snprintf(err, errlen, "TLS asked for, but twheel_redis was built without TLS "
                          "(CMake option TWHEEL_TLS, needs OpenSSL)");
    return TW_ETLS;
#else
    char why[128];
    if (!tc->cert_file != !tc->key_file) {
        snprintf(err, errlen, "tls_cert_file and tls_key_file go together");
        return TW_EINVAL;
    }
    struct tw_rr_tls *t = calloc(1, sizeof *t);
    if (!t || (tc->server_name && !(t->name = strdup(tc->server_name)))) {
        free(t);
        snprintf(err, errlen, "%s", tw_strerror(TW_ENOMEM));
        return TW_ENOMEM;
    }
    t->verify_host = !tc->skip_hostname_check;
    int rc = TW_ETLS;
    ERR_clear_error();
    if (!(t->ctx = SSL_CTX_new(TLS_client_method()))) {
        snprintf(err, errlen, "TLS: cannot create a context: %s", lk_ossl_why(why, sizeof why));
        goto fail;
    }
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* A server that closes without close_notify (killed, restarted) is a
     * lost connection (TW_EIO, retried), not a TLS failure (TW_ETLS, final). */
    SSL_CTX_set_options(t->ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    if (tc->ca_file || tc->ca_dir) {
        if (SSL_CTX_load_verify_locations(t->ctx, tc->ca_file, tc->ca_dir) != 1) {
            snprintf(err, errlen, "TLS: cannot load the CA %s: %s",
                     tc->ca_file ? "file" : "directory", lk_ossl_why(why, sizeof why));
            goto fail;
        }
    } else if (SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
        snprintf(err, errlen, "TLS: cannot load the system's CA store: %s",
                 lk_ossl_why(why, sizeof why));
        goto fail;
    }
    if (tc->cert_file) {
        if (SSL_CTX_use_certificate_chain_file(t->ctx, tc->cert_file) != 1) {
            snprintf(err, errlen, "TLS: cannot load the client certificate: %s",
                     lk_ossl_why(why, sizeof why));
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(t->ctx, tc->key_file, SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(t->ctx) != 1) {
            snprintf(err, errlen, "TLS: cannot load the client key: %s",
                     lk_ossl_why(why, sizeof why));
            goto fail;
        }
    }
    *out = t;
    return 0;
fail:
    tw_rr_tls_free(t);
    return rc;
#endif
}

void tw_rr_tls_free(struct tw_rr_tls *t)
{
    if (!t)
        return;
#ifdef TWHEEL_TLS
    SSL_CTX_free(t->ctx);
#endif
    free(t->name);
    free(t);
}

/* ---- sockets ------------------------------------------------------------------ */

/* Finish a non-blocking connect of fd until deadline_ns: 0, or -1 and errno. */
static int lk_connected(int fd, uint64_t deadline_ns)
{
    if (!lk_wait(fd, POLLOUT, deadline_ns)) {
        errno = ETIMEDOUT;
        return -1;
    }
    int e = 0;
    socklen_t el = sizeof e;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0)
        return -1;
    errno = e;
    return e ? -1 : 0;
}

/* A non-blocking socket connected to host:port, or to the unix socket at
 * host (port 0). wait: finish the connect until deadline_ns (else it may be
 * in progress: *pending). The fd, or -1 with l's error set. */
static int lk_socket(struct tw_rr_link *l, const char *host, int port, bool wait,
                     uint64_t deadline_ns, bool *pending)
{
    *pending = false;
    if (port == 0) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(host) >= sizeof sa.sun_path)
            return lk_fail(l, TW_EIO, "socket path too long");
        strcpy(sa.sun_path, host);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
            return lk_errno(l, errno);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
            int e = errno;
            close(fd);
            return lk_errno(l, e);
        }
        return fd;
    }
    char ps[8];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int g = getaddrinfo(host, ps, &hints, &ai);
    if (g != 0)
        return g == EAI_MEMORY ? lk_fail(l, TW_ENOMEM, "%s", gai_strerror(g))
                               : lk_fail(l, TW_EIO, "%s", gai_strerror(g));
    int fd = -1, e = ECONNREFUSED;
    for (const struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        int one = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            break;
        if (errno == EINPROGRESS && !wait) {
            *pending = true;
            break;
        }
        if (errno == EINPROGRESS && lk_connected(fd, deadline_ns) == 0)
            break;
        e = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd >= 0 ? fd : lk_errno(l, e);
}

/* A plain connection's socket made blocking, with the command timeout on
 * its reads and writes (what hiredis' redisSetTimeout did). */
static int lk_blocking(struct tw_rr_link *l, uint32_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    int fl = fcntl(l->fd, F_GETFL);
    if (fl < 0 || fcntl(l->fd, F_SETFL, fl & ~O_NONBLOCK) < 0 ||
        setsockopt(l->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
        setsockopt(l->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0)
        return lk_errno(l, errno);
    l->nb = false;
    return 0;
}

/* ---- TLS on a link ------------------------------------------------------------ */

#ifdef TWHEEL_TLS
/* The failure of an SSL call that returned ret. */
static int lk_ssl_fail(struct tw_rr_link *l, int ret)
{
    SSL *ssl = l->ssl;
    int sys = errno; /* the socket call's, before OpenSSL's calls below */
    int e = SSL_get_error(ssl, ret);
    char why[128];
    long vr = SSL_get_verify_result(ssl);
    if (l->state != LK_READY && vr != X509_V_OK) {
        ERR_clear_error();
        return lk_fail(l, TW_ETLS, "TLS: certificate verify failed: %s",
                       X509_verify_cert_error_string(vr));
    }
    if (e == SSL_ERROR_SSL)
        return lk_fail(l, TW_ETLS, "TLS: %s", lk_ossl_why(why, sizeof why));
    ERR_clear_error();
    if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && sys == 0))
        return lk_fail(l, TW_EIO, "Server closed the connection");
    return lk_errno(l, sys ? sys : EIO);
}

/* A write that failed on a closed socket (EPIPE, ECONNRESET): the server
 * may have said why before it closed (TLS 1.3 refuses a client certificate
 * after the handshake, with an alert: "certificate required"). That alert
 * is read, if it came, and told instead of the write's errno. */
static int lk_why_closed(struct tw_rr_link *l, int w)
{
    int saved = errno;
    char b[256];
    lk_ossl_clear();
    int r = SSL_read(l->ssl, b, sizeof b);
    if (r <= 0 && SSL_get_error(l->ssl, r) == SSL_ERROR_SSL)
        return lk_ssl_fail(l, r);
    ERR_clear_error();
    errno = saved;
    return lk_ssl_fail(l, w);
}

/* Whether s is an IP literal (IPv4 or IPv6). */
static bool lk_is_ip(const char *s)
{
    unsigned char b[16];
    return inet_pton(AF_INET, s, b) == 1 || inet_pton(AF_INET6, s, b) == 1;
}

/* An SSL object for l, to name host (SNI, verification). */
static int lk_ssl_new(struct tw_rr_link *l, const struct tw_rr_tls *t, const char *host)
{
    SSL *ssl = SSL_new(t->ctx);
    if (!ssl)
        return lk_fail(l, TW_ENOMEM, "TLS: %s", tw_strerror(TW_ENOMEM));
    l->ssl = ssl;
    const char *name = t->name ? t->name : host;
    bool ip = lk_is_ip(name);
    if (SSL_set_fd(ssl, l->fd) != 1 || (!ip && SSL_set_tlsext_host_name(ssl, name) != 1))
        return lk_fail(l, TW_ETLS, "TLS: cannot set up the connection");
    if (t->verify_host) {
        int ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name)
                    : SSL_set1_host(ssl, name);
        if (ok != 1)
            return lk_fail(l, TW_ETLS, "TLS: cannot check the name %s", name);
    }
    return 0;
}

/* One handshake step: 1 done, 0 waiting for `*ev`, -1 failed. */
static int lk_handshake(struct tw_rr_link *l, short *ev)
{
    lk_ossl_clear();
    int r = SSL_connect(l->ssl);
    if (r == 1) {
        l->state = LK_READY;
        return 1;
    }
    int e = SSL_get_error(l->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        *ev = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        return 0;
    }
    return lk_ssl_fail(l, r);
}
#endif

/* ---- links ------------------------------------------------------------------------- */

static struct tw_rr_link *lk_alloc(uint32_t wait_ms)
{
    struct tw_rr_link *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->fd = -1;
    l->nb = true;
    l->wait_ms = wait_ms;
    if (!(l->reader = redisReaderCreate())) {
        free(l);
        return NULL;
    }
    return l;
}

void tw_rr_link_free(struct tw_rr_link *l)
{
    if (!l)
        return;
#ifdef TWHEEL_TLS
    if (l->ssl)
        SSL_free(l->ssl); /* no close_notify: the server takes a closed socket as the end */
#endif
    if (l->fd >= 0)
        close(l->fd);
    redisReaderFree(l->reader);
    free(l->ob);
    free(l);
}

#ifndef TWHEEL_TLS
/* TLS asked for but not built in: the same words as tw_rr_tls_new. */
static int lk_no_tls(struct tw_rr_link *l)
{
    return lk_fail(l, TW_ETLS, "TLS asked for, but twheel_redis was built without TLS");
}
#endif

int tw_rr_link_open(const struct tw_rr_tls *tls, const char *host, int port,
                    uint32_t connect_timeout_ms, uint32_t command_timeout_ms,
                    struct tw_rr_link **out)
{
    struct tw_rr_link *l = lk_alloc(command_timeout_ms);
    *out = l;
    if (!l)
        return TW_ENOMEM;
    uint64_t deadline = lk_deadline(connect_timeout_ms);
    bool pending;
    if ((l->fd = lk_socket(l, host, port, true, deadline, &pending)) < 0)
        return l->err;
    if (!tls || port == 0) {
        l->state = LK_READY;
        return lk_blocking(l, command_timeout_ms) == 0 ? 0 : l->err;
    }
#ifdef TWHEEL_TLS
    if (lk_ssl_new(l, tls, host) != 0)
        return l->err;
    for (;;) {
        short ev;
        int h = lk_handshake(l, &ev);
        if (h < 0)
            return l->err;
        if (h > 0)
            return 0;
        if (!lk_wait(l->fd, ev, deadline))
            return lk_fail(l, TW_EIO, "TLS handshake: %s", strerror(ETIMEDOUT)), l->err;
    }
#else
    return lk_no_tls(l), l->err;
#endif
}

int tw_rr_link_start(const struct tw_rr_tls *tls, const char *host, int port,
                     uint32_t command_timeout_ms, struct tw_rr_link **out)
{
    struct tw_rr_link *l = lk_alloc(command_timeout_ms);
    *out = l;
    if (!l)
        return TW_ENOMEM;
    bool pending;
    if ((l->fd = lk_socket(l, host, port, false, 0, &pending)) < 0)
        return l->err;
    l->state = pending ? LK_CONNECTING : LK_HANDSHAKE;
    if (tls && port != 0) {
#ifdef TWHEEL_TLS
        if (lk_ssl_new(l, tls, host) != 0)
            return l->err;
#else
        return lk_no_tls(l), l->err;
#endif
    }
    return 0;
}

int tw_rr_link_append(struct tw_rr_link *l, int argc, const char **argv, const size_t *lens)
{
    sds cmd;
    int len = redisFormatSdsCommandArgv(&cmd, argc, argv, lens);
    if (len < 0)
        return lk_fail(l, TW_ENOMEM, "%s", tw_strerror(TW_ENOMEM)), TW_ENOMEM;
    if (l->olen + (size_t)len > l->ocap) {
        if (l->opos) { /* what was written makes room first */
            memmove(l->ob, l->ob + l->opos, l->olen - l->opos);
            l->olen -= l->opos;
            l->opos = 0;
        }
        size_t cap = l->ocap ? l->ocap : 1024;
        while (cap < l->olen + (size_t)len)
            cap *= 2;
        char *ob = cap > l->ocap ? realloc(l->ob, cap) : l->ob;
        if (!ob) {
            sdsfree(cmd);
            return lk_fail(l, TW_ENOMEM, "%s", tw_strerror(TW_ENOMEM)), TW_ENOMEM;
        }
        l->ob = ob;
        l->ocap = cap;
    }
    memcpy(l->ob + l->olen, cmd, (size_t)len);
    l->olen += (size_t)len;
    sdsfree(cmd);
    return 0;
}

/* Write what is buffered: everything (wait: up to the command timeout per
 * wait), or what goes without waiting. 0, or -1 (l->err). */
static int lk_write(struct tw_rr_link *l, bool wait)
{
    uint64_t deadline = 0;
    while (l->opos < l->olen) {
        size_t n = l->olen - l->opos;
#ifdef TWHEEL_TLS
        if (l->ssl) {
            lk_ossl_clear();
            int w = SSL_write(l->ssl, l->ob + l->opos, n > INT32_MAX ? INT32_MAX : (int)n);
            if (w > 0) {
                l->opos += (size_t)w;
                continue;
            }
            int e = SSL_get_error(l->ssl, w);
            if (e == SSL_ERROR_SYSCALL)
                return lk_why_closed(l, w);
            if (e != SSL_ERROR_WANT_WRITE && e != SSL_ERROR_WANT_READ)
                return lk_ssl_fail(l, w);
            int b = lk_blocked(l, wait, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, &deadline);
            if (b <= 0)
                return b;
            continue;
        }
#endif
        ssize_t w = send(l->fd, l->ob + l->opos, n, MSG_NOSIGNAL | (wait ? 0 : MSG_DONTWAIT));
        if (w > 0) {
            l->opos += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int b = lk_blocked(l, wait, POLLOUT, &deadline);
            if (b <= 0)
                return b;
            continue;
        }
        return lk_errno(l, w < 0 ? errno : EIO);
    }
    l->opos = l->olen = 0;
    return 0;
}

int tw_rr_link_flush(struct tw_rr_link *l)
{
    if (l->err)
        return l->err;
    return lk_write(l, true) == 0 ? 0 : l->err;
}

#ifdef TWHEEL_TLS
/* lk_read for a TLS link: drains what OpenSSL can give without waiting. */
static int lk_read_tls(struct tw_rr_link *l, bool wait)
{
    char buf[LK_READ_BYTES];
    uint64_t deadline = 0;
    int got = 0;
    for (;;) {
        lk_ossl_clear();
        int r = SSL_read(l->ssl, buf, sizeof buf);
        if (r > 0) {
            if (redisReaderFeed(l->reader, buf, (size_t)r) != REDIS_OK)
                return lk_fail(l, TW_ENOMEM, "%s", tw_strerror(TW_ENOMEM));
            got = 1;
            continue;
        }
        int e = SSL_get_error(l->ssl, r);
        if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
            return lk_ssl_fail(l, r);
        if (got)
            return got;
        int b = lk_blocked(l, wait, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, &deadline);
        if (b <= 0)
            return b;
    }
}
#endif

/* Read into the reader: wait (up to the command timeout) for something,
 * or take what has come without waiting. 1 read, 0 nothing (no wait),
 * -1 failed (l->err). A TLS read drains what OpenSSL holds. */
static int lk_read(struct tw_rr_link *l, bool wait)
{
#ifdef TWHEEL_TLS
    if (l->ssl)
        return lk_read_tls(l, wait);
#endif
    char buf[LK_READ_BYTES];
    uint64_t deadline = 0;
    for (;;) {
        ssize_t n = wait && !l->nb ? read(l->fd, buf, sizeof buf)
                                   : recv(l->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
            if (redisReaderFeed(l->reader, buf, (size_t)n) != REDIS_OK)
                return lk_fail(l, TW_ENOMEM, "%s", tw_strerror(TW_ENOMEM));
            return 1;
        }
        if (n == 0)
            return lk_fail(l, TW_EIO, "Server closed the connection");
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return lk_errno(l, errno);
        int b = lk_blocked(l, wait, POLLIN, &deadline);
        if (b <= 0)
            return b;
    }
}

int tw_rr_link_read(struct tw_rr_link *l)
{
    if (l->err)
        return l->err;
    return lk_read(l, false) < 0 ? l->err : 0;
}

int tw_rr_link_next(struct tw_rr_link *l, void **reply)
{
    *reply = NULL;
    if (redisReaderGetReply(l->reader, reply) != REDIS_OK) {
        /* the reader's own allocation failed: out of memory, not a bad reply */
        if (l->reader->err == REDIS_ERR_OOM)
            lk_fail(l, TW_ENOMEM, "Out of memory reading a reply");
        else
            lk_fail(l, TW_EPROTO, "Protocol error: %s", l->reader->errstr);
        return l->err;
    }
    return 0;
}

int tw_rr_link_get(struct tw_rr_link *l, void **reply)
{
    *reply = NULL;
    for (;;) {
        int rc = tw_rr_link_next(l, reply);
        if (rc || *reply)
            return rc;
        if (l->err)
            return l->err;
        if (l->opos < l->olen && lk_write(l, true) < 0)
            return l->err;
        if (lk_read(l, true) < 0)
            return l->err;
    }
}

int tw_rr_link_command(struct tw_rr_link *l, int argc, const char **argv, const size_t *lens,
                       redisReply **reply)
{
    *reply = NULL;
    if (l->err)
        return l->err;
    if (tw_rr_link_append(l, argc, argv, lens) != 0)
        return l->err;
    return tw_rr_link_get(l, (void **)reply);
}

bool tw_rr_link_closed(struct tw_rr_link *l)
{
    char b;
    if (l->err)
        return true;
#ifdef TWHEEL_TLS
    if (l->ssl) {
        lk_ossl_clear();
        int k = SSL_peek(l->ssl, &b, 1);
        if (k > 0)
            return false;
        int e = SSL_get_error(l->ssl, k);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
            return false;
        lk_ssl_fail(l, k);
        return true;
    }
#endif
    ssize_t k = recv(l->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

int tw_rr_link_step(struct tw_rr_link *l, void **reply)
{
    *reply = NULL;
    if (l->err)
        return l->err;
    if (l->state == LK_CONNECTING) {
        struct pollfd p = {l->fd, POLLOUT, 0};
        if (poll(&p, 1, 0) <= 0)
            return 0;
        if (lk_connected(l->fd, 0) != 0)
            return lk_errno(l, errno), l->err;
        l->state = LK_HANDSHAKE;
    }
    if (l->state == LK_HANDSHAKE) {
#ifdef TWHEEL_TLS
        short ev;
        if (l->ssl && lk_handshake(l, &ev) <= 0)
            return l->err;
#endif
        l->state = LK_READY;
    }
    if (lk_write(l, false) < 0 || lk_read(l, false) < 0)
        return l->err;
    return tw_rr_link_next(l, reply);
}
