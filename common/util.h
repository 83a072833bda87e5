/* Small shared helpers: clocks, hex, CSPRNG, bounded integer parsing, logging. Any thread. */
#ifndef PDR_UTIL_H
#define PDR_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Monotonic clock. */
uint64_t pdr_now_ns(void);
/* Lower-case hex of n bytes into out (2n characters and a NUL). */
void pdr_hex(const uint8_t *p, size_t n, char *out);
/* The value of one hexadecimal digit (either case), or -1. */
static inline int pdr_hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static inline uint64_t pdr_now_us(void)
{
    return pdr_now_ns() / 1000;
}
static inline uint64_t pdr_now_ms(void)
{
    return pdr_now_ns() / 1000000;
}
/* Wall clock, microseconds since the epoch (for logs). */
uint64_t pdr_wall_us(void);

/* Fills buf from the kernel CSPRNG (getrandom). Returns 0 or a PDR_E* code. */
int pdr_random_bytes(void *buf, size_t len);
/* A uniformly random integer in [0, 2^63-1] from the CSPRNG (read 32 at a time into a per-thread
 * buffer; a forked child starts with an empty one). */
uint64_t pdr_random_room(void);
/* 64 uniformly random bits from the same per-thread CSPRNG buffer (trace and span ids). */
uint64_t pdr_random_u64(void);

/* Writes v in decimal at out (at most 20 bytes, no NUL); returns the number of digits. For hot paths
 * where snprintf's cost shows (a PD request formats rooms, ports and URLs). */
size_t pdr_fmt_u64(char *out, uint64_t v);
/* out = a followed by b, truncated to cap - 1 bytes and NUL-terminated (cap > 0); returns the length. */
size_t pdr_join2(char *out, size_t cap, const char *a, const char *b);

/* Parses a whole decimal integer in [min, max]; no trailing garbage. Returns 0 or PDR_EINVAL. */
int pdr_parse_int64(const char *s, size_t len, int64_t min, int64_t max, int64_t *out);

/* A "host[:port]" split by pdr_split_hostport; the spans point into the input. */
typedef struct {
    const char *host; /* without the brackets of "[IPv6]" */
    size_t hlen;
    const char *port; /* the text after the separating ':' (not checked); NULL when there is none */
    size_t plen;
    int ipv6;      /* in brackets, or a bare address with two or more colons */
    int bracketed; /* written "[...]" */
    int bad;       /* on PDR_EINVAL: PDR_HOSTPORT_NO_CLOSE, _AFTER_CLOSE or _EMPTY */
} pdr_hostport_t;
enum { PDR_HOSTPORT_NO_CLOSE = 1, PDR_HOSTPORT_AFTER_CLOSE, PDR_HOSTPORT_EMPTY };

/* The one parser of "host", "host:port", "[IPv6]", "[IPv6]:port" and a bare IPv6 address (two or more
 * colons without brackets: all host, no port) in s[0..len). The host is not checked beyond being
 * non-empty, nor the port (pdr_parse_int64). Returns 0, or PDR_EINVAL with out->bad saying why: a '['
 * without its ']', something other than ':' after the ']', an empty host. */
int pdr_split_hostport(const char *s, size_t len, pdr_hostport_t *out);
/* Copies the host of s (as pdr_split_hostport splits it) NUL-terminated into buf; 0 or PDR_EINVAL (bad
 * syntax, or a host of cap bytes or more). */
int pdr_host_copy(const char *s, size_t len, char *buf, size_t cap);

/* The standard reason phrase of an HTTP status ("Bad Gateway"); a generic one for unlisted codes. */
const char *pdr_http_reason(int status);

enum { PDR_LOG_DEBUG = 0, PDR_LOG_INFO, PDR_LOG_WARN, PDR_LOG_ERROR };
extern int pdr_log_level;
/* "debug", "info", "warn" or "error" -> pdr_log_level; NULL leaves it. 0 or PDR_EINVAL. */
int pdr_set_log_level_name(const char *name);
void pdr_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Every log line also goes to fd (an O_APPEND file: log.dir); -1 stops that. Set before other threads log. */
void pdr_log_also_to(int fd);
#define pdr_debug(...) (pdr_log_level <= PDR_LOG_DEBUG ? pdr_log(PDR_LOG_DEBUG, __VA_ARGS__) : (void)0)
#define pdr_info(...) pdr_log(PDR_LOG_INFO, __VA_ARGS__)
#define pdr_warn(...) pdr_log(PDR_LOG_WARN, __VA_ARGS__)
#define pdr_error(...) pdr_log(PDR_LOG_ERROR, __VA_ARGS__)

#endif
