/* Cross-file helpers of the config module (pdr__ names). Not for other modules. */
#ifndef PDR_CONFIG_INTERNAL_H
#define PDR_CONFIG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "config.h"

/* Replaces *dst with a copy of s[0..len). Returns 0 or PDR_ENOMEM (then *dst is unchanged). */
int pdr__config_set_str(char **dst, const char *s, size_t len);

/* Name lookups on a {base,len} slice. Return 0 or PDR_EINVAL. */
int pdr__policy_parse(const char *s, size_t len, pdr_policy_kind_t *out);
int pdr__protocol_parse(const char *s, size_t len, pdr_protocol_t *out);
/* Returns the canonical level name ("warning" gives "warn", "critical" "error") or NULL. */
const char *pdr__log_level_parse(const char *s, size_t len);

/* Index j < i of a worker that addresses the same host and port as ws[i], or -1. */
long pdr__workers_find_dup(const pdr_worker_conf_t *ws, size_t i);

/* Strict decimal integer: optional '-', digits only. Returns 0, PDR_EINVAL (not an integer) or
 * PDR_ETOOBIG (an integer outside int64). */
int pdr__parse_int(const char *s, size_t len, int64_t *out);

/* Copies s[0..len) into out (size outlen) for an error message: at most ~60 bytes, control
 * characters and non-ASCII bytes replaced by '?', "..." when cut. */
const char *pdr__config_show(const char *s, size_t len, char *out, size_t outlen);

/* Checks of the discovery section's strings, shared by the YAML loader (which adds the position) and
 * pdr_config_validate. Each returns 0, or PDR_EINVAL with the reason (no key name) in msg. */
int pdr__check_hostname(const char *s, size_t len, char *msg, size_t msglen);   /* dns.*.name */
int pdr__check_resolver(const char *s, size_t len, char *msg, size_t msglen);   /* dns.resolver */
int pdr__check_selector(const char *s, size_t len, char *msg, size_t msglen);   /* kubernetes.*.selector */
int pdr__check_namespace(const char *s, size_t len, char *msg, size_t msglen);  /* kubernetes.namespace */
int pdr__check_api_server(const char *s, size_t len, char *msg, size_t msglen); /* kubernetes.api_server */

/* cors.allowed_origins: the list's entries (pdr__config_add_origin: 0 or PDR_ENOMEM) and their check. */
void pdr__config_free_origins(pdr_config_t *c);
int pdr__config_add_origin(pdr_config_t *c, const char *s, size_t len);
int pdr__check_origin(const char *s, size_t len, char *msg, size_t msglen);
/* discovery.kubernetes.bootstrap_port_annotation */
int pdr__check_annotation(const char *s, size_t len, char *msg, size_t msglen);

/* Numeric hosts (netaddr.c). pdr__ipv4_parse_host: 1 and the address in out when host[0..len) is an IPv4
 * address in any of the URL Standard's spellings (127.1, 0x7f000001, 0177.0.0.1, 2130706433, one trailing
 * dot allowed), 0 when it is a host name, -1 when it looks numeric but is no address (1.2.3.256). */
int pdr__ipv4_parse_host(const char *host, size_t len, uint8_t out[4]);
/* NULL for an address a worker can have; else why not (unspecified, broadcast, multicast). family is
 * AF_INET (4 bytes at a) or AF_INET6 (16). */
const char *pdr__addr_unusable(int family, const uint8_t *a);
/* 1 for an IPv4-mapped IPv6 address (::ffff:a.b.c.d). */
int pdr__ipv6_is_v4mapped(const uint8_t a[16]);

/* ticket: key files (config.h, pdr_config_t.ticket): load replaces what c held; 0, or an error with
 * the file and the reason in msg. */
int pdr__ticket_conf_load(pdr_config_t *c, const char *const *files, size_t n, char *msg, size_t msglen);
void pdr__ticket_conf_clear(pdr_config_t *c);
/* Protocol pdshim signs tickets: without ticket keys it cannot run. */
#define PDR__PDSHIM_NEEDS_KEYS "protocol pdshim signs tickets: set ticket: { key_file: FILE } (or key_files)"

/* A role with neither static workers nor a discovery source; arguments: the role's name four times. */
#define PDR__NO_WORKERS_FMT                                                                                  \
    "workers.%s: at least one %s worker is required, or a discovery source for it (discovery.dns.%s.name "   \
    "or "                                                                                                    \
    "discovery.kubernetes.%s.selector)"

/* The same in a pool; arguments: the role's name three times, after "pools[i].workers.ROLE: ". */
#define PDR__NO_POOL_WORKERS_FMT                                                                             \
    "at least one %s worker is required, or a discovery source for it (the pool's discovery.dns.%s.name or " \
    "discovery.kubernetes.%s.selector)"

/* Whether role r has a discovery source configured in d (a dns name or a kubernetes selector). */
int pdr__role_discovered(const pdr_discovery_conf_t *d, pdr_role_t r);
/* sidecar: the header's name; with sidecar.enabled, the one-pool form with one static decode. 0, or
 * PDR_ECONFIG with the reason in err. */
int pdr__check_sidecar(const pdr_config_t *c, char *err, size_t errlen);
/* Discovery defaults (no role in use) into a zeroed section. */
void pdr__discovery_conf_defaults(pdr_discovery_conf_t *d);
/* Marks every cache_aware setting of a pool (its own and its roles') as not set. */
void pdr__cache_aware_unset(pdr_pool_conf_t *pc);

/* Secrets and header names (workers.api_key_file, --api-key, request_id_headers). */
void pdr__secure_zero(void *p, size_t n);
void pdr__free_names(char **names, size_t n);
/* 0, or PDR_EINVAL with the reason in msg: an RFC 9110 token of 1..PDR_CONFIG_MAX_HEADER_NAME bytes. */
int pdr__check_header_name(const char *s, size_t len, char *msg, size_t msglen);
/* 0, or PDR_EINVAL: 1..PDR_CONFIG_MAX_API_KEY visible ASCII characters (it goes into a header line). */
int pdr__check_api_key(const char *s, size_t len, char *msg, size_t msglen);
/* Reads a key file: a regular file that other users cannot read or write and that its group cannot
 * write, holding one key (trailing CR/LF dropped) that pdr__check_api_key accepts. 0 with *out
 * malloc'd, or an error with "PATH: reason" in msg. */
int pdr__read_secret_file(const char *path, char **out, char *msg, size_t msglen);

/* Error text into a caller's buffer; always NUL-terminated, safe with errlen 0. */
void pdr__config_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* classes.c: the next name of an admission.classes list at *p (advanced past it and its comma; NULL at the
 * end), its length in *len. */
const char *pdr__config_next_class(const char **p, size_t *len);

#endif
