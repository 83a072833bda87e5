/*
 * Checks of the strings the discovery keys hold (host names, resolver addresses, label selectors,
 * namespaces, API server URLs), shared by the YAML loader, which adds the position, the flags and
 * pdr_config_validate. Pure functions, any thread.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include "err.h"
#include "util.h"
#include "config.h"
#include "config_internal.h"
#include "defaults.h"

static int is_alnum(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
}

/* RFC 1123 host names, with '_' allowed as DNS itself does (it appears in service names); an optional
 * trailing dot marks a fully qualified name. */
int pdr__check_hostname(const char *s, size_t len, char *msg, size_t msglen)
{
    char shown[80];
    pdr__config_show(s, len, shown, sizeof(shown));
    if (len > 0 && s[len - 1] == '.')
        len--;
    if (len == 0) {
        pdr__config_err(msg, msglen, "'%s' is not a host name", shown);
        return PDR_EINVAL;
    }
    if (len > 253) { /* RFC 1035 2.3.4: 255 octets on the wire */
        pdr__config_err(msg, msglen, "'%s' is longer than 253 characters", shown);
        return PDR_EINVAL;
    }
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && s[i] != '.') {
            if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '_') {
                pdr__config_err(msg, msglen,
                                "'%s' is not a host name: only letters, digits, '-', '_' and '.' are allowed",
                                shown);
                return PDR_EINVAL;
            }
            continue;
        }
        size_t llen = i - start;
        if (llen == 0 || llen > 63) {
            pdr__config_err(msg, msglen, "'%s' is not a host name: each label has 1..63 characters", shown);
            return PDR_EINVAL;
        }
        if (s[start] == '-' || s[i - 1] == '-') {
            pdr__config_err(msg, msglen, "'%s' is not a host name: a label starts or ends with '-'", shown);
            return PDR_EINVAL;
        }
        start = i + 1;
    }
    return 0;
}

static int parse_port(const char *s, size_t len)
{
    int64_t v;
    if (len == 0 || s[0] == '-' || pdr__parse_int(s, len, &v) != 0 || v < 1 || v > 65535)
        return -1;
    return (int)v;
}

/* "IPv4", "IPv4:port", "[IPv6]", "[IPv6]:port" or a bare IPv6 address. */
int pdr__check_resolver(const char *s, size_t len, char *msg, size_t msglen)
{
    char shown[80], host[INET6_ADDRSTRLEN + 1];
    pdr__config_show(s, len, shown, sizeof(shown));
    pdr_hostport_t hp;
    if (pdr_split_hostport(s, len, &hp) != 0 || hp.hlen >= sizeof(host))
        goto bad;
    memcpy(host, hp.host, hp.hlen);
    host[hp.hlen] = '\0';
    unsigned char addr[16];
    if (inet_pton(hp.ipv6 ? AF_INET6 : AF_INET, host, addr) != 1)
        goto bad;
    if (hp.port != NULL && parse_port(hp.port, hp.plen) < 0) {
        pdr__config_err(msg, msglen, "'%s': invalid port, expected 1..65535", shown);
        return PDR_EINVAL;
    }
    return 0;
bad:
    pdr__config_err(msg, msglen, "'%s' is not a resolver address: expected IPv4[:port], [IPv6]:port or IPv6",
                    shown);
    return PDR_EINVAL;
}

static int is_selector_key_char(char ch)
{
    return is_alnum(ch) || ch == '.' || ch == '_' || ch == '-' || ch == '/';
}

/* Equality-based label selectors as the API server takes them: "k=v", "k==v", "k!=v", "k" and "!k",
 * separated by commas. Set-based terms ("k in (a,b)") are not accepted. A sanity check: the API server
 * has the last word. */
int pdr__check_selector(const char *s, size_t len, char *msg, size_t msglen)
{
    char shown[80];
    pdr__config_show(s, len, shown, sizeof(shown));
    size_t i = 0;
    while (i <= len) {
        size_t end = i;
        while (end < len && s[end] != ',')
            end++;
        size_t k = i;
        if (k < end && s[k] == '!')
            k++;
        size_t kend = k;
        while (kend < end && is_selector_key_char(s[kend]))
            kend++;
        if (kend == k) {
            pdr__config_err(msg, msglen,
                            "'%s': expected a label key at offset %zu (terms are k=v, k!=v, k "
                            "or !k, separated by ',')",
                            shown, k);
            return PDR_EINVAL;
        }
        size_t v = kend;
        if (v < end) {
            if (k != i) { /* "!k" takes no value */
                pdr__config_err(msg, msglen, "'%s': '!key' takes no value (offset %zu)", shown, v);
                return PDR_EINVAL;
            }
            if (s[v] == '!' && v + 1 < end && s[v + 1] == '=')
                v += 2;
            else if (s[v] == '=' && v + 1 < end && s[v + 1] == '=')
                v += 2;
            else if (s[v] == '=')
                v++;
            else
                v = (size_t)-1;
            for (size_t j = v; v != (size_t)-1 && j < end; j++)
                if (!is_alnum(s[j]) && s[j] != '.' && s[j] != '_' && s[j] != '-')
                    v = (size_t)-1;
            if (v == (size_t)-1) {
                pdr__config_err(msg, msglen,
                                "'%s': invalid term at offset %zu (terms are k=v, k!=v, k or !k, "
                                "separated by ',')",
                                shown, i);
                return PDR_EINVAL;
            }
        }
        i = end + 1;
    }
    return 0;
}

/* RFC 1123 label, as Kubernetes requires of namespace names. */
int pdr__check_namespace(const char *s, size_t len, char *msg, size_t msglen)
{
    char shown[80];
    pdr__config_show(s, len, shown, sizeof(shown));
    int ok = len >= 1 && len <= 63 && s[0] != '-' && s[len - 1] != '-';
    for (size_t i = 0; ok && i < len; i++)
        ok = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-';
    if (!ok) {
        pdr__config_err(msg, msglen,
                        "'%s' is not a namespace name: 1..63 lowercase letters, digits or '-', starting and "
                        "ending with a letter or digit",
                        shown);
        return PDR_EINVAL;
    }
    return 0;
}

int pdr__check_api_server(const char *s, size_t len, char *msg, size_t msglen)
{
    char shown[80];
    pdr__config_show(s, len, shown, sizeof(shown));
    size_t skip = len > 8 && strncasecmp(s, "https://", 8) == 0  ? 8
                  : len > 7 && strncasecmp(s, "http://", 7) == 0 ? 7
                                                                 : 0;
    if (skip == 0 || s[skip] == '/') {
        pdr__config_err(msg, msglen, "'%s' is not a URL: expected https://host[:port] or http://host[:port]",
                        shown);
        return PDR_EINVAL;
    }
    if (len > PDR_CONFIG_MAX_URL) {
        pdr__config_err(msg, msglen, "'%s' is longer than %d bytes", shown, PDR_CONFIG_MAX_URL);
        return PDR_EINVAL;
    }
    for (size_t i = 0; i < len; i++) {
        if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f) {
            pdr__config_err(msg, msglen,
                            "'%s': spaces, control characters and non-ASCII bytes are not allowed", shown);
            return PDR_EINVAL;
        }
    }
    return 0;
}

/* sidecar.prefill_header: lower-case letters, digits and '-' (h2o hands the request's header names in lower
 * case), 1..PDR_CONFIG_MAX_HEADER_NAME bytes. With sidecar.enabled: the one-pool form, exactly one static
 * decode (the local engine) and no decode discovery. */
int pdr__check_sidecar(const pdr_config_t *c, char *err, size_t errlen)
{
    const char *h = c->sidecar.prefill_header != NULL ? c->sidecar.prefill_header : "";
    size_t n = strlen(h);
    int ok = n > 0 && n <= PDR_CONFIG_MAX_HEADER_NAME;
    for (size_t i = 0; ok && i < n; i++)
        ok = (h[i] >= 'a' && h[i] <= 'z') || (h[i] >= '0' && h[i] <= '9') || h[i] == '-';
    if (!ok) {
        pdr__config_err(err, errlen,
                        "sidecar.prefill_header: \"%.64s\" is not a header name (1..%d lower-case letters, "
                        "digits or '-')",
                        h, PDR_CONFIG_MAX_HEADER_NAME);
        return PDR_ECONFIG;
    }
    if (!c->sidecar.enabled)
        return 0;
    if (c->n_pools > 0) {
        pdr__config_err(
            err, errlen,
            "sidecar.enabled: not with pools: (a sidecar serves the decode engine of its own pod: "
            "list it as the one workers.decode, the prefills under workers.prefill or discovery)");
        return PDR_ECONFIG;
    }
    const pdr_discovery_conf_t *d = &c->discovery; /* an InferencePool's decode pods are left alone */
    if (d->dns.role[PDR_ROLE_DECODE].name != NULL || d->kubernetes.role[PDR_ROLE_DECODE].selector != NULL) {
        pdr__config_err(err, errlen,
                        "sidecar.enabled: the decode is the local engine, not discovered: remove the decode "
                        "role of discovery and list it as the one workers.decode (--decode URL)");
        return PDR_ECONFIG;
    }
    if (c->n_decode != 1) {
        pdr__config_err(err, errlen,
                        "sidecar.enabled: needs exactly one decode worker, the engine of this pod (such as "
                        "--decode http://127.0.0.1:8200), got %zu",
                        c->n_decode);
        return PDR_ECONFIG;
    }
    return 0;
}
