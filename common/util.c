/* Clocks, CSPRNG, integer parsing and the process log (stderr, one line per call). Any thread. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/random.h>
#include <time.h>
#include "err.h"
#include "util.h"

int pdr_log_level = PDR_LOG_INFO;
static int log_fd = -1;

void pdr_log_also_to(int fd)
{
    log_fd = fd;
}

int pdr_set_log_level_name(const char *s)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (s != NULL && strcmp(s, names[i]) == 0) {
            pdr_log_level = i;
            return 0;
        }
    return s == NULL ? 0 : PDR_EINVAL;
}

uint64_t pdr_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t pdr_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000;
}

int pdr_random_bytes(void *buf, size_t len)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return PDR_EIO;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Rooms come from a per-thread buffer of kernel CSPRNG output (one getrandom per 32 rooms, not one per
 * request). A forked child must not replay its parent's buffer: the fork handler empties the forking
 * thread's buffer (the only thread the child has). */
#define ROOM_BUF 32
static __thread uint64_t room_buf[ROOM_BUF];
static __thread unsigned room_left;
static pthread_once_t room_once = PTHREAD_ONCE_INIT;

static void room_forked(void)
{
    room_left = 0;
}

static void room_init(void)
{
    pthread_atfork(NULL, NULL, room_forked);
}

uint64_t pdr_random_u64(void)
{
    pthread_once(&room_once, room_init);
    if (room_left == 0) {
        /* getrandom() on a booted kernel does not fail; on failure abort rather than hand out a
         * predictable room. */
        if (pdr_random_bytes(room_buf, sizeof(room_buf)) != 0) {
            pdr_error("getrandom failed: %s", strerror(errno));
            abort();
        }
        room_left = ROOM_BUF;
    }
    uint64_t v = room_buf[--room_left];
    room_buf[room_left] = 0; /* handed out once */
    return v;
}

uint64_t pdr_random_room(void)
{
    return pdr_random_u64() & INT64_MAX;
}

/* "00" .. "99": two digits per division. */
static const char digit_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* 10^0 .. 10^19: the number of digits of v is t or t + 1, where t comes from its bit length. */
static const uint64_t powers_of_ten[20] = {1ull,
                                           10ull,
                                           100ull,
                                           1000ull,
                                           10000ull,
                                           100000ull,
                                           1000000ull,
                                           10000000ull,
                                           100000000ull,
                                           1000000000ull,
                                           10000000000ull,
                                           100000000000ull,
                                           1000000000000ull,
                                           10000000000000ull,
                                           100000000000000ull,
                                           1000000000000000ull,
                                           10000000000000000ull,
                                           100000000000000000ull,
                                           1000000000000000000ull,
                                           10000000000000000000ull};

size_t pdr_fmt_u64(char *out, uint64_t v)
{
    /* 1233 / 4096 is just above log10(2): t is the digit count of 2^(bits - 1) .. 2^bits - 1, less one
     * where that range holds a power of ten (Bit Twiddling Hacks, "integer log base 10"). */
    size_t t = ((size_t)(64 - __builtin_clzll(v | 1)) * 1233) >> 12;
    size_t n = t + (v >= powers_of_ten[t]);
    if (n == 0)
        n = 1;               /* v is 0 */
    char *p = out + n;       /* written from the end: no copy afterwards */
    while (v >= 100000000) { /* eight digits at a time in 32-bit arithmetic, cheaper than 64-bit */
        uint32_t r = (uint32_t)(v % 100000000);
        v /= 100000000;
        uint32_t hi = r / 10000, lo = r % 10000;
        p -= 8;
        memcpy(p, digit_pairs + 2 * (hi / 100), 2);
        memcpy(p + 2, digit_pairs + 2 * (hi % 100), 2);
        memcpy(p + 4, digit_pairs + 2 * (lo / 100), 2);
        memcpy(p + 6, digit_pairs + 2 * (lo % 100), 2);
    }
    uint32_t u = (uint32_t)v;
    while (u >= 100) {
        p -= 2;
        memcpy(p, digit_pairs + 2 * (u % 100), 2);
        u /= 100;
    }
    if (u >= 10)
        memcpy(p - 2, digit_pairs + 2 * u, 2);
    else
        p[-1] = (char)('0' + u);
    return n;
}

size_t pdr_join2(char *out, size_t cap, const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > cap - 1)
        la = cap - 1;
    if (lb > cap - 1 - la)
        lb = cap - 1 - la;
    memcpy(out, a, la);
    memcpy(out + la, b, lb);
    out[la + lb] = '\0';
    return la + lb;
}

int pdr_parse_int64(const char *s, size_t len, int64_t min, int64_t max, int64_t *out)
{
    char tmp[32];
    if (len == 0 || len >= sizeof(tmp))
        return PDR_EINVAL;
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    char *end;
    errno = 0;
    long long v = strtoll(tmp, &end, 10);
    if (errno != 0 || end != tmp + len || v < min || v > max)
        return PDR_EINVAL;
    *out = v;
    return 0;
}

void pdr_log(int level, const char *fmt, ...)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    if (level < pdr_log_level)
        return;
    char line[2048];
    uint64_t now = pdr_wall_us();
    time_t secs = (time_t)(now / 1000000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ %s ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     (unsigned)(now % 1000000 / 1000),
                     names[level < 0   ? 0
                           : level > 3 ? 3
                                       : level]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(line))
        vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
    if (log_fd >= 0) {
        /* One write per line: O_APPEND keeps the lines of several threads whole. */
        size_t len = strnlen(line, sizeof(line) - 1);
        line[len] = '\n';
        ssize_t w = write(log_fd, line, len + 1);
        (void)w;
    }
}

const char *pdr_http_reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 202:
        return "Accepted";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 410:
        return "Gone";
    case 413:
        return "Payload Too Large";
    case 414:
        return "URI Too Long";
    case 422:
        return "Unprocessable Content";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return status >= 500 ? "Server Error" : status >= 400 ? "Client Error" : "OK";
    }
}

int pdr_split_hostport(const char *s, size_t len, pdr_hostport_t *out)
{
    memset(out, 0, sizeof(*out));
    out->host = s;
    out->hlen = len;
    if (len > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', len);
        if (close == NULL) {
            out->bad = PDR_HOSTPORT_NO_CLOSE;
            return PDR_EINVAL;
        }
        out->host = s + 1;
        out->hlen = (size_t)(close - out->host);
        out->ipv6 = out->bracketed = 1;
        size_t rest = len - (size_t)(close + 1 - s);
        if (rest > 0) {
            if (close[1] != ':') {
                out->bad = PDR_HOSTPORT_AFTER_CLOSE;
                return PDR_EINVAL;
            }
            out->port = close + 2;
            out->plen = rest - 1;
        }
    } else {
        const char *colon = memchr(s, ':', len);
        if (colon != NULL && memchr(colon + 1, ':', len - (size_t)(colon + 1 - s)) != NULL) {
            out->ipv6 = 1;
        } else if (colon != NULL) {
            out->hlen = (size_t)(colon - s);
            out->port = colon + 1;
            out->plen = len - out->hlen - 1;
        }
    }
    if (out->hlen == 0) {
        out->bad = PDR_HOSTPORT_EMPTY;
        return PDR_EINVAL;
    }
    return 0;
}

int pdr_host_copy(const char *s, size_t len, char *buf, size_t cap)
{
    pdr_hostport_t hp;
    if (pdr_split_hostport(s, len, &hp) != 0 || hp.hlen >= cap)
        return PDR_EINVAL;
    memcpy(buf, hp.host, hp.hlen);
    buf[hp.hlen] = '\0';
    return 0;
}

/* Two lower-case hex characters per byte value, "000102...ff" (this runs for ~40 bytes per request). */
static const char hex_pairs[] =
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f"
    "303132333435363738393a3b3c3d3e3f404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
    "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f"
    "909192939495969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
    "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8e9eaebecedeeef"
    "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";

void pdr_hex(const uint8_t *p, size_t n, char *out)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4) { /* four at a time: the loop's own cost was most of it */
        memcpy(out + 2 * i, hex_pairs + 2 * (size_t)p[i], 2);
        memcpy(out + 2 * i + 2, hex_pairs + 2 * (size_t)p[i + 1], 2);
        memcpy(out + 2 * i + 4, hex_pairs + 2 * (size_t)p[i + 2], 2);
        memcpy(out + 2 * i + 6, hex_pairs + 2 * (size_t)p[i + 3], 2);
    }
    for (; i < n; i++)
        memcpy(out + 2 * i, hex_pairs + 2 * (size_t)p[i], 2);
    out[2 * n] = '\0';
}
