/*
 * The admin API's bearer token (admin.token_file), loop 0: read at start by admin.c and again on every
 * reload by reload.c; kept in r->admin_token and wiped when replaced or dropped. Calls nothing of admin.c,
 * reload.c or server.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <openssl/crypto.h>
#include "control.h"
#include "err.h"
#include "router.h"

#define ADMIN_TOKEN_MAX 4096

/* Reads the token file into *out (malloc'd, length *out_len). 0, or an error described in msg. */
int pdr__admin_token_read(const char *path, char **out, size_t *out_len, char *msg, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(msg, cap, "admin.token_file %s: %s", path, strerror(errno));
        return PDR_EIO;
    }
    char *buf = malloc(ADMIN_TOKEN_MAX + 1);
    size_t len = 0;
    ssize_t n = 0;
    while (buf != NULL && len < ADMIN_TOKEN_MAX + 1 &&
           ((n = read(fd, buf + len, ADMIN_TOKEN_MAX + 1 - len)) > 0 || (n < 0 && errno == EINTR)))
        if (n > 0)
            len += (size_t)n;
    close(fd);
    if (buf == NULL) {
        snprintf(msg, cap, "admin.token_file %s: out of memory", path);
        return PDR_ENOMEM;
    }
    if (n < 0 || len > ADMIN_TOKEN_MAX) {
        snprintf(msg, cap, "admin.token_file %s: %s", path,
                 n < 0 ? strerror(errno) : "longer than 4096 bytes; it should hold one token");
        free(buf);
        return PDR_EINVAL;
    }
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
        len--;
    if (len == 0) {
        snprintf(msg, cap,
                 "admin.token_file %s is empty: write the bearer token into it, or leave the key out to run "
                 "without auth (development only)",
                 path);
        free(buf);
        return PDR_EINVAL;
    }
    *out = buf;
    *out_len = len;
    return 0;
}

void pdr__admin_token_drop(pdr_router_t *r)
{
    if (r->admin_token != NULL)
        OPENSSL_cleanse(r->admin_token, r->admin_token_len);
    free(r->admin_token);
    r->admin_token = NULL;
    r->admin_token_len = 0;
}

int pdr_admin_reload_token(pdr_router_t *r, const pdr_config_t *c, char *msg, size_t cap)
{
    if (!r->admin_on || c->admin_token_file == NULL)
        return 0; /* removing the token file needs a restart (reload.c says so): auth stays on */
    char *tok;
    size_t len;
    int rc = pdr__admin_token_read(c->admin_token_file, &tok, &len, msg, cap);
    if (rc != 0)
        return rc;
    pdr__admin_token_drop(r);
    r->admin_token = tok;
    r->admin_token_len = len;
    return 0;
}
