/*
 * Worker addresses: worker URLs (pdr_worker_conf_parse_url) and KV event endpoints, the numeric
 * spellings a URL may give an IP address (normalized to one, so that two spellings of one worker compare
 * equal), the addresses no worker can have, and IP networks (admin.deny_worker_networks). Pure functions,
 * any thread.
 *
 * Numeric hosts follow the WHATWG URL Standard's IPv4 parser, the reading browsers give them and much
 * like glibc's inet_aton (which getaddrinfo applies to such names): a host whose last label is a number
 * is an IPv4 address of 1 to 4 parts, each decimal, 0x-hex or 0-octal, the last part filling the
 * remaining bytes. So 127.1, 0x7f000001, 2130706433 and 0177.0.0.1 are all 127.0.0.1.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "err.h"
#include "config.h"
#include "config_internal.h"
#include "defaults.h"
#include "util.h"

static int is_hex(char c)
{
    return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
}

static int hex_value(char c)
{
    return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
}

/* One part: "0x..." hex (digits may be absent: 0), "0..." octal, else decimal. Saturates above 2^32. */
static int ipv4_part(const char *s, size_t len, uint64_t *out)
{
    unsigned base = 10;
    uint64_t v = 0;
    if (len >= 2 && s[0] == '0' && (s[1] | 0x20) == 'x') {
        base = 16;
        s += 2;
        len -= 2;
    } else if (len >= 2 && s[0] == '0') {
        base = 8;
        s++;
        len--;
    } else if (len == 0) {
        return PDR_EINVAL;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned d;
        if (base == 16 && is_hex(s[i]))
            d = (unsigned)hex_value(s[i]);
        else if (s[i] >= '0' && s[i] <= '9' && (unsigned)(s[i] - '0') < base)
            d = (unsigned)(s[i] - '0');
        else
            return PDR_EINVAL;
        if (v <= UINT32_MAX)
            v = v * base + d;
    }
    *out = v;
    return 0;
}

/* The last label is a number (all digits, or 0x followed by hex digits only): the host is IPv4. */
static int ends_in_number(const char *s, size_t len)
{
    size_t i = len;
    while (i > 0 && s[i - 1] != '.')
        i--;
    const char *l = s + i;
    size_t n = len - i;
    if (n == 0)
        return 0;
    if (n >= 2 && l[0] == '0' && (l[1] | 0x20) == 'x') {
        for (size_t k = 2; k < n; k++)
            if (!is_hex(l[k]))
                return 0;
        return 1;
    }
    for (size_t k = 0; k < n; k++)
        if (l[k] < '0' || l[k] > '9')
            return 0;
    return 1;
}

int pdr__ipv4_parse_host(const char *s, size_t len, uint8_t out[4])
{
    if (len > 1 && s[len - 1] == '.')
        len--; /* one trailing dot, as in a fully qualified name */
    if (!ends_in_number(s, len))
        return 0;
    uint64_t parts[4];
    size_t n = 0, start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && s[i] != '.')
            continue;
        if (n == 4 || ipv4_part(s + start, i - start, &parts[n]) != 0)
            return -1;
        n++;
        start = i + 1;
    }
    uint64_t v = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        if (parts[i] > 255)
            return -1;
        v = v << 8 | parts[i];
    }
    if (parts[n - 1] >= (uint64_t)1 << (8 * (5 - n)))
        return -1;
    v = v << (8 * (5 - n)) | parts[n - 1];
    for (int i = 0; i < 4; i++)
        out[i] = (uint8_t)(v >> (24 - 8 * i));
    return 1;
}

const char *pdr__addr_unusable(int family, const uint8_t *a)
{
    static const uint8_t zero[16];
    if (family == AF_INET) {
        if (memcmp(a, zero, 4) == 0)
            return "the unspecified address (it means 'any' when binding), not one a worker can be reached "
                   "at";
        if (a[0] == 255 && a[1] == 255 && a[2] == 255 && a[3] == 255)
            return "the limited broadcast address, not one worker's address";
        if ((a[0] & 0xf0) == 0xe0)
            return "a multicast address (224.0.0.0/4); a worker needs a unicast address";
        return NULL;
    }
    if (memcmp(a, zero, 16) == 0)
        return "the unspecified address (it means 'any' when binding), not one a worker can be reached at";
    if (a[0] == 0xff)
        return "a multicast address (ff00::/8); a worker needs a unicast address";
    return NULL;
}

int pdr__ipv6_is_v4mapped(const uint8_t a[16])
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(a, prefix, 12) == 0;
}

static int prefix_match(const uint8_t *a, const uint8_t *b, int bits)
{
    int bytes = bits / 8, rest = bits % 8;
    if (memcmp(a, b, (size_t)bytes) != 0)
        return 0;
    if (rest == 0)
        return 1;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (a[bytes] & mask) == (b[bytes] & mask);
}

int pdr_ipnet_parse(const char *s, size_t len, pdr_ipnet_t *net, char *err, size_t errlen)
{
    char shown[80], addr[INET6_ADDRSTRLEN + 1];
    const char *slash = memchr(s, '/', len);
    size_t alen = slash != NULL ? (size_t)(slash - s) : len;
    memset(net, 0, sizeof(*net));
    pdr__config_show(s, len, shown, sizeof(shown));
    if (alen == 0 || alen >= sizeof(addr)) {
        pdr__config_err(err, errlen, "'%s' is not an IP network: expected ADDRESS or ADDRESS/PREFIX", shown);
        return PDR_EINVAL;
    }
    memcpy(addr, s, alen);
    addr[alen] = '\0';
    int max;
    if (inet_pton(AF_INET, addr, net->addr) == 1) {
        net->family = AF_INET;
        max = 32;
    } else if (inet_pton(AF_INET6, addr, net->addr) == 1) {
        net->family = AF_INET6;
        max = 128;
    } else {
        pdr__config_err(err, errlen,
                        "'%s' is not an IP network: '%s' is not an IPv4 (a.b.c.d) or IPv6 address", shown,
                        pdr__config_show(addr, alen, shown, sizeof(shown)));
        return PDR_EINVAL;
    }
    net->prefix = max;
    if (slash != NULL) {
        const char *p = slash + 1;
        size_t plen = len - alen - 1;
        int64_t v;
        if (plen == 0 || plen > 3 || p[0] < '0' || p[0] > '9' || pdr__parse_int(p, plen, &v) != 0 ||
            v > max) {
            pdr__config_err(err, errlen, "'%s': the prefix length must be 0..%d", shown, max);
            return PDR_EINVAL;
        }
        net->prefix = (int)v;
    }
    /* Worker hosts in ::ffff:0:0/96 are compared as IPv4, so such a network is one too. */
    if (net->family == AF_INET6 && net->prefix >= 96 && pdr__ipv6_is_v4mapped(net->addr)) {
        memmove(net->addr, net->addr + 12, 4);
        memset(net->addr + 4, 0, 12);
        net->family = AF_INET;
        net->prefix -= 96;
    }
    uint8_t masked[16] = {0};
    int bytes = net->prefix / 8, rest = net->prefix % 8;
    memcpy(masked, net->addr, (size_t)bytes);
    if (rest != 0)
        masked[bytes] = (uint8_t)(net->addr[bytes] & (0xff << (8 - rest)));
    inet_ntop(net->family, masked, addr, sizeof(addr));
    snprintf(net->text, sizeof(net->text), "%s/%d", addr, net->prefix);
    if (memcmp(masked, net->addr, sizeof(masked)) != 0) {
        pdr__config_err(err, errlen, "'%s' has bits set past the prefix; the network is %s", shown,
                        net->text);
        return PDR_EINVAL;
    }
    return 0;
}

long pdr_ipnet_find(const pdr_ipnet_t *nets, size_t n, const pdr_worker_conf_t *w)
{
    uint8_t a[16];
    int family = w->is_ipv6 ? AF_INET6 : AF_INET;
    if (w->host == NULL || inet_pton(family, w->host, a) != 1)
        return -1; /* a host name: resolved when connecting, not here */
    for (size_t i = 0; i < n; i++)
        if (nets[i].family == family && prefix_match(a, nets[i].addr, nets[i].prefix))
            return (long)i;
    return -1;
}

static int is_host_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
           ch == '.' || ch == '_';
}

/*
 * Writes the normalized host into out (at least INET6_ADDRSTRLEN bytes, and more than hlen): numeric
 * forms as canonical addresses, names in lower case; sets *is_ipv6. is_bracketed: the URL held the host
 * in [ ]. Returns 0, or PDR_EINVAL with the reason in err.
 */
static int normalize_host(const char *host, size_t hlen, int is_bracketed, const char *shown, char *out,
                          size_t outlen, int *is_ipv6, char *err, size_t errlen)
{
    uint8_t a[16];
    int family = AF_INET;
    char tmp[INET6_ADDRSTRLEN + 1];
    *is_ipv6 = 0;
    if (is_bracketed) {
        if (hlen == 0 || hlen >= sizeof(tmp)) {
            pdr__config_err(err, errlen, "'%s': not an IPv6 address between '[' and ']'", shown);
            return PDR_EINVAL;
        }
        memcpy(tmp, host, hlen);
        tmp[hlen] = '\0';
        if (inet_pton(AF_INET6, tmp, a) != 1) {
            pdr__config_err(err, errlen, "'%s': '%s' is not an IPv6 address", shown, tmp);
            return PDR_EINVAL;
        }
        if (pdr__ipv6_is_v4mapped(a)) {
            memmove(a, a + 12, 4); /* ::ffff:a.b.c.d is a.b.c.d on the wire */
        } else {
            family = AF_INET6;
            *is_ipv6 = 1;
        }
    } else {
        int r = pdr__ipv4_parse_host(host, hlen, a);
        if (r < 0) {
            char hshown[80];
            pdr__config_err(err, errlen,
                            "'%s': '%s' is read as an IPv4 address (its last label is a number) but is not "
                            "one: expected 1 to 4 parts, each decimal, 0x-hex or 0-octal, within 0..255 "
                            "(the last part may fill the remaining bytes)",
                            shown, pdr__config_show(host, hlen, hshown, sizeof(hshown)));
            return PDR_EINVAL;
        }
        if (r == 0) {
            for (size_t i = 0; i < hlen; i++)
                out[i] = host[i] >= 'A' && host[i] <= 'Z' ? (char)(host[i] | 0x20) : host[i];
            out[hlen] = '\0';
            return 0;
        }
    }
    inet_ntop(family, a, out, (socklen_t)outlen);
    const char *why = pdr__addr_unusable(family, a);
    if (why != NULL) {
        pdr__config_err(err, errlen, "'%s': %s is %s", shown, out, why);
        return PDR_EINVAL;
    }
    return 0;
}

int pdr_worker_conf_parse_url(const char *url, pdr_worker_conf_t *w, char *err, size_t errlen)
{
    char shown[80];
    memset(w, 0, sizeof(*w));
    w->bootstrap_port = -1;
    if (url == NULL || url[0] == '\0') {
        pdr__config_err(err, errlen, "empty worker URL; expected http://host[:port]");
        return PDR_EINVAL;
    }
    size_t len = strlen(url);
    pdr__config_show(url, len, shown, sizeof(shown));
    if (len > PDR_CONFIG_MAX_URL) {
        pdr__config_err(err, errlen, "worker URL '%s' is longer than %d bytes", shown, PDR_CONFIG_MAX_URL);
        return PDR_EINVAL;
    }
    /* https://: the worker is reached over TLS (workers.tls; router/upstream/upstream_tls.c). */
    int tls = strncasecmp(url, "https://", 8) == 0;
    if (!tls && strncasecmp(url, "http://", 7) != 0) {
        if (strstr(url, "://") != NULL)
            pdr__config_err(err, errlen, "'%s': unsupported URL scheme; use http://host[:port] or https://",
                            shown);
        else
            pdr__config_err(err, errlen, "'%s' is not a URL; expected http://host[:port]", shown);
        return PDR_EINVAL;
    }
    const char *auth = url + (tls ? 8 : 7);
    size_t alen = strcspn(auth, "/?#");
    const char *rest = auth + alen;
    if (memchr(auth, '@', alen) != NULL) {
        pdr__config_err(err, errlen, "'%s': user information in worker URLs is not supported", shown);
        return PDR_EINVAL;
    }

    pdr_hostport_t hp;
    if (pdr_split_hostport(auth, alen, &hp) != 0 && hp.bad != PDR_HOSTPORT_EMPTY) {
        pdr__config_err(err, errlen,
                        hp.bad == PDR_HOSTPORT_NO_CLOSE ? "'%s': missing ']' after the IPv6 address"
                                                        : "'%s': expected ':' or '/' after the host",
                        shown);
        return PDR_EINVAL;
    }
    const char *host = hp.host;
    size_t hlen = hp.hlen;
    int bracketed = hp.bracketed;
    if (!bracketed) {
        if (hp.ipv6) {
            pdr__config_err(err, errlen,
                            "'%s': invalid port; write IPv6 addresses in brackets: http://[::1]:30001",
                            shown);
            return PDR_EINVAL;
        }
        if (hlen == 0) {
            pdr__config_err(err, errlen, "'%s': missing host", shown);
            return PDR_EINVAL;
        }
        for (size_t i = 0; i < hlen; i++) {
            if (!is_host_char(host[i])) {
                pdr__config_err(err, errlen, "'%s': invalid character in host", shown);
                return PDR_EINVAL;
            }
        }
    }

    int port = tls ? 443 : 80; /* RFC 9110: the schemes' default ports */
    if (hp.port != NULL) {
        const char *p = hp.port;
        size_t plen = hp.plen;
        int64_t v;
        if (plen == 0 || pdr__parse_int(p, plen, &v) != 0 || p[0] == '-' || v < 1 || v > 65535) {
            pdr__config_err(err, errlen, "'%s': invalid port, expected 1..65535", shown);
            return PDR_EINVAL;
        }
        port = (int)v;
    }

    if (rest[0] != '\0' && !(rest[0] == '/' && rest[1] == '\0')) {
        char rshown[80];
        pdr__config_err(err, errlen, "'%s': worker URLs take no path, query or fragment (got '%s')", shown,
                        pdr__config_show(rest, strlen(rest), rshown, sizeof(rshown)));
        return PDR_EINVAL;
    }

    int is_ipv6;
    size_t hcap = hlen + INET6_ADDRSTRLEN + 1;
    char *h = malloc(hcap);
    if (h == NULL) {
        pdr__config_err(err, errlen, "out of memory");
        return PDR_ENOMEM;
    }
    if (normalize_host(host, hlen, bracketed, shown, h, hcap, &is_ipv6, err, errlen) != 0) {
        free(h);
        return PDR_EINVAL;
    }
    /* "https://" + [host] + ":65535" */
    size_t ucap = 8 + strlen(h) + 2 + 6 + 1;
    char *u = malloc(ucap);
    if (u == NULL) {
        free(h);
        pdr__config_err(err, errlen, "out of memory");
        return PDR_ENOMEM;
    }
    const char *sch = tls ? "https" : "http";
    if (port == (tls ? 443 : 80))
        snprintf(u, ucap, is_ipv6 ? "%s://[%s]" : "%s://%s", sch, h);
    else
        snprintf(u, ucap, is_ipv6 ? "%s://[%s]:%d" : "%s://%s:%d", sch, h, port);
    w->url = u;
    w->host = h;
    w->port = port;
    w->is_ipv6 = is_ipv6;
    return 0;
}

int pdr_kv_endpoint_check(const char *s, size_t len, char *msg, size_t msglen)
{
    int ok = len < 256 && memchr(s, '\0', len) == NULL;
    if (ok && len > 6 && memcmp(s, "ipc://", 6) == 0) {
        for (size_t i = 6; i < len; i++)
            ok = ok && (unsigned char)s[i] > 0x20 && s[i] != 0x7f;
    } else if (ok && len > 6 && memcmp(s, "tcp://", 6) == 0) {
        pdr_hostport_t hp;
        ok = pdr_split_hostport(s + 6, len - 6, &hp) == 0 && hp.port != NULL && hp.ipv6 == hp.bracketed;
        for (size_t i = 0; ok && i < hp.hlen; i++) {
            char q = hp.host[i];
            ok = hp.bracketed ? (q >= '0' && q <= '9') || (q >= 'a' && q <= 'f') || (q >= 'A' && q <= 'F') ||
                                    q == ':' || q == '.'
                              : is_host_char(q);
        }
        int64_t port;
        ok = ok && pdr_parse_int64(hp.port, hp.plen, 1, 65535, &port) == 0;
    } else {
        ok = 0;
    }
    if (!ok) {
        pdr__config_err(msg, msglen,
                        "expected a ZMQ endpoint tcp://HOST:PORT (PORT 1..65535, IPv6 in brackets) or "
                        "ipc://PATH, under 256 bytes");
        return PDR_EINVAL;
    }
    return 0;
}

/* A Kubernetes annotation key: [prefix/]name, the prefix a DNS subdomain (at most 253 bytes), the name
 * 1..63 letters, digits, '-', '_' or '.' starting and ending with a letter or digit. */
