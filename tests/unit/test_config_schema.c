/*
 * Unit test of config/schema.c: the schema table is what the readers use. Every row is read by the YAML
 * loader (its default written in YAML comes back as its default), its field has the size its type says, a
 * new snapshot holds every row's default, and a value one past either end of a row's range is refused by
 * the YAML loader (with the row's range in the message) and by pdr_config_validate (naming the key).
 * Every flag a row names sets its key, from flags alone and on top of a --config file. With --dump it
 * prints the table instead (pdr_conf_schema_print), for the docs check.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check.h"
#include "config.h"
#include "schema.h"

#define WORKERS "workers: {prefill: [http://127.0.0.1:30001], decode: [http://127.0.0.1:30002]"

static int is_number(const pdr_conf_key_t *k)
{
    return k->type == PDR_CT_INT || k->type == PDR_CT_INT64 || k->type == PDR_CT_DOUBLE ||
           k->type == PDR_CT_BPORT;
}

static int is_string(const pdr_conf_key_t *k)
{
    switch (k->type) {
    case PDR_CT_STR:
    case PDR_CT_STR_OPT:
    case PDR_CT_PATH:
    case PDR_CT_LEVEL:
    case PDR_CT_HOSTNAME:
    case PDR_CT_RESOLVER:
    case PDR_CT_SELECTOR:
    case PDR_CT_NAMESPACE:
    case PDR_CT_URL:
    case PDR_CT_ANNOTATION:
        return 1;
    default:
        return 0;
    }
}

/* A value to write for k in YAML: its default, or a sample where it has none. */
static const char *yaml_value(const pdr_conf_key_t *k, char *buf, size_t len)
{
    pdr_conf_default_text(k, buf, len);
    if (buf[0] != '\0' && k->def_doc == NULL)
        return buf;
    switch (k->type) {
    case PDR_CT_STR_OPT:
        return "null";
    case PDR_CT_HOSTNAME:
        return "pd.test";
    case PDR_CT_SELECTOR:
        return "app=pd";
    case PDR_CT_RESOLVER:
        return "10.0.0.53";
    case PDR_CT_NAMESPACE:
        return "pd";
    case PDR_CT_URL:
        return "http://collector.test:4318/v1/traces";
    case PDR_CT_INT:
        return "30000"; /* a required port */
    default:
        return k->def_doc != NULL ? k->def_doc : "/tmp/pd";
    }
}

/* YAML that sets path to value, with the workers and, for a discovery role's key, the role's required
 * keys. */
static void yaml_for(const char *path, const char *value, char *out, size_t len)
{
    char sect[128];
    const char *dot = strrchr(path, '.');
    const char *key = dot != NULL ? dot + 1 : path;
    snprintf(sect, sizeof(sect), "%.*s", dot != NULL ? (int)(dot - path) : 0, path);
    const char *extra = "";
    if (strstr(sect, "discovery.dns.") == sect)
        extra = strcmp(key, "name") == 0   ? "port: 30000, "
                : strcmp(key, "port") == 0 ? "name: pd.test, "
                                           : "name: pd.test, port: 30000, ";
    else if (strstr(sect, "discovery.kubernetes.prefill") == sect ||
             strstr(sect, "discovery.kubernetes.decode") == sect)
        extra = strcmp(key, "selector") == 0 ? "" : "selector: app=pd, ";
    /* The sections, opened one by one: a.b.c: V is {a: {b: {c: V}}}. */
    char open[256] = "", close[64] = "";
    size_t o = 0, c = 0;
    int depth = 0;
    int workers = strncmp(path, "workers.", 8) == 0;
    for (const char *s = path; dot != NULL && s < dot;) {
        const char *e = memchr(s, '.', (size_t)(dot - s));
        if (e == NULL)
            e = dot;
        if (depth == 0 && workers)
            o += (size_t)snprintf(open + o, sizeof(open) - o, ", ");
        else
            o += (size_t)snprintf(open + o, sizeof(open) - o, "%.*s: {", (int)(e - s), s);
        if (!(depth == 0 && workers))
            c += (size_t)snprintf(close + c, sizeof(close) - c, "}");
        depth++;
        s = e + 1;
    }
    if (workers)
        snprintf(out, len, WORKERS "%s%s%s: %s%s}\n", open, extra, key, value, close);
    else
        snprintf(out, len, WORKERS "}\n%s%s%s: %s%s\n", open, extra, key, value, close);
}

/* The value of k in c, as text ("" for NULL). */
static const char *value_text(const pdr_conf_key_t *k, const pdr_config_t *c, char *buf, size_t len)
{
    const char *p = (const char *)c + k->off;
    if (is_string(k)) {
        const char *s = *(char *const *)(const void *)p;
        snprintf(buf, len, "%s", s != NULL ? s : "");
    } else if (k->type == PDR_CT_INT64)
        snprintf(buf, len, "%lld", (long long)*(const int64_t *)(const void *)p);
    else if (k->type == PDR_CT_DOUBLE)
        snprintf(buf, len, "%g", *(const double *)(const void *)p);
    else
        snprintf(buf, len, "%d", *(const int *)(const void *)p);
    return buf;
}

/* The default of k as value_text shows it. */
static const char *default_text(const pdr_conf_key_t *k, char *buf, size_t len)
{
    if (is_string(k))
        snprintf(buf, len, "%s", k->def_s != NULL ? k->def_s : "");
    else if (k->type == PDR_CT_DOUBLE)
        snprintf(buf, len, "%g", k->def_d);
    else
        snprintf(buf, len, "%lld", (long long)k->def_i);
    return buf;
}

static void check_row(const pdr_conf_key_t *k, const pdr_config_t *defaults)
{
    char text[1024], err[1024], val[256], got[256], want[256];
    size_t want_size = k->type == PDR_CT_INT64    ? sizeof(int64_t)
                       : k->type == PDR_CT_DOUBLE ? sizeof(double)
                       : is_string(k)             ? sizeof(char *)
                                                  : sizeof(int);
    if (k->size != want_size)
        fprintf(stderr, "%s: field of %zu bytes, its type needs %zu\n", k->path, k->size, want_size);
    CHECK(k->size == want_size);
    CHECK(k->doc != NULL && k->doc[0] != '\0');
    if (!(k->flags & PDR_KEY_REQUIRED) &&
        strcmp(value_text(k, defaults, got, sizeof(got)), default_text(k, want, sizeof(want))) != 0) {
        fprintf(stderr, "%s: a new snapshot holds '%s', the schema's default is '%s'\n", k->path, got, want);
        check_failures++;
    }

    /* The YAML loader reads the row: its default (or a sample) comes back. */
    const char *v = yaml_value(k, val, sizeof(val));
    yaml_for(k->path, v, text, sizeof(text));
    pdr_config_t *c = pdr_config_load_string(text, strlen(text), "schema.yaml", err, sizeof(err));
    if (c == NULL) {
        fprintf(stderr, "%s: not read:\n%s%s\n", k->path, text, err);
        check_failures++;
        return;
    }
    value_text(k, c, got, sizeof(got));
    const char *expect = strcmp(v, "null") == 0 ? "" : v;
    if (k->type == PDR_CT_BOOL || k->type == PDR_CT_SCHEME || k->type == PDR_CT_TLS_VER ||
        k->type == PDR_CT_PROTOCOL || k->type == PDR_CT_POLICY || k->type == PDR_CT_RELAY ||
        k->type == PDR_CT_SEED || k->type == PDR_CT_UNKNOWN || k->type == PDR_CT_AFFINITY)
        expect = default_text(k, want, sizeof(want)); /* the enumeration's stored value */
    if (strcmp(got, expect) != 0) {
        fprintf(stderr, "%s: YAML '%s' read as '%s', want '%s'\n", k->path, v, got, expect);
        check_failures++;
    }

    /* An enumeration's value past its last name: refused by validation. */
    if (k->type == PDR_CT_PROTOCOL || k->type == PDR_CT_POLICY) {
        int *p = (int *)(void *)((char *)c + k->off), keep = *p;
        *p = (int)k->max + 1;
        int rc = pdr_config_validate(c, err, sizeof(err));
        snprintf(want, sizeof(want), "%s: %lld is out of range, expected 0..%lld", k->path,
                 (long long)k->max + 1, (long long)k->max);
        if (rc == 0 || strcmp(err, want) != 0) {
            fprintf(stderr, "%s = %lld: validation said '%s'\n", k->path, (long long)k->max + 1,
                    rc == 0 ? "(valid)" : err);
            check_failures++;
        }
        *p = keep;
    }

    /* One past either end of the range: refused by the loader and by validation. */
    for (int end = 0; is_number(k) && end < 2; end++) {
        int64_t bad = end == 0 ? k->min - 1 : k->max + 1;
        char num[32], msg[256];
        snprintf(num, sizeof(num), "%lld", (long long)bad);
        yaml_for(k->path, num, text, sizeof(text));
        if (k->type == PDR_CT_DOUBLE)
            snprintf(msg, sizeof(msg), "%s: %s is out of range, expected %g..%g", k->path, num,
                     (double)k->min, (double)k->max);
        else
            snprintf(msg, sizeof(msg), "%s: %s is out of range, expected %lld..%lld", k->path, num,
                     (long long)k->min, (long long)k->max);
        pdr_config_t *b = pdr_config_load_string(text, strlen(text), "schema.yaml", err, sizeof(err));
        const char *colon = strstr(err, ": ");
        if (b != NULL || colon == NULL || strstr(err, msg) == NULL) {
            fprintf(stderr, "%s = %s: loader said '%s', want '...%s'\n", k->path, num, b ? "(loaded)" : err,
                    msg);
            check_failures++;
        }
        pdr_config_unref(b);
        if (k->flags & PDR_KEY_REQUIRED)
            continue; /* a discovery role's port is checked only with the role */
        char *p = (char *)c + k->off;
        int64_t i64 = 0;
        int i32 = 0;
        double d = 0;
        memcpy(k->type == PDR_CT_INT64    ? (void *)&i64
               : k->type == PDR_CT_DOUBLE ? (void *)&d
                                          : (void *)&i32,
               p, k->size);
        if (k->type == PDR_CT_INT64)
            *(int64_t *)(void *)p = bad;
        else if (k->type == PDR_CT_DOUBLE)
            *(double *)(void *)p = (double)bad;
        else
            *(int *)(void *)p = (int)bad;
        int rc = pdr_config_validate(c, err, sizeof(err));
        if (rc == 0 || strncmp(err, k->path, strlen(k->path)) != 0) {
            fprintf(stderr, "%s = %s: validation said '%s'\n", k->path, num, rc == 0 ? "(valid)" : err);
            check_failures++;
        }
        memcpy(p,
               k->type == PDR_CT_INT64    ? (void *)&i64
               : k->type == PDR_CT_DOUBLE ? (void *)&d
                                          : (void *)&i32,
               k->size);
    }
    pdr_config_unref(c);
}

/* A value for flag f of row k other than the default, its text into val and what the snapshot then holds
 * into want (value_text's form). */
static void flag_value(const pdr_conf_key_t *k, int secs, char *val, size_t vlen, char *want, size_t wlen)
{
    if (secs) {
        snprintf(val, vlen, "3");
        snprintf(want, wlen, "3000");
        return;
    }
    switch (k->type) {
    case PDR_CT_INT:
    case PDR_CT_INT64: {
        long long v = k->def_i + 1 <= k->max ? k->def_i + 1 : k->def_i - 1;
        snprintf(val, vlen, "%lld", v);
        snprintf(want, wlen, "%lld", v);
        return;
    }
    case PDR_CT_DOUBLE:
        snprintf(val, vlen, "%g", ((double)k->min + (double)k->max) / 2);
        snprintf(want, wlen, "%s", val);
        return;
    case PDR_CT_PROTOCOL:
        snprintf(val, vlen, "vllm");
        snprintf(want, wlen, "%d", (int)PDR_PROTO_VLLM);
        return;
    case PDR_CT_POLICY:
        snprintf(val, vlen, "random");
        snprintf(want, wlen, "%d", (int)PDR_POLICY_RANDOM);
        return;
    case PDR_CT_UNKNOWN:
        snprintf(val, vlen, "refuse");
        snprintf(want, wlen, "%d", (int)PDR_COMPAT_UNKNOWN_REFUSE);
        return;
    case PDR_CT_AFFINITY:
        snprintf(val, vlen, "hard");
        snprintf(want, wlen, "%d", (int)PDR_AFFINITY_HARD);
        return;
    case PDR_CT_SEED:
        snprintf(val, vlen, "smallest_tree");
        snprintf(want, wlen, "%d", (int)PDR_CA_SEED_SMALLEST_TREE);
        return;
    case PDR_CT_LEVEL:
        snprintf(val, vlen, "debug");
        break;
    case PDR_CT_URL:
        snprintf(val, vlen, "http://collector.test:4318/v1/traces");
        break;
    default:
        snprintf(val, vlen, "/tmp/pd-%s", k->path);
        break;
    }
    snprintf(want, wlen, "%s", val);
}

/* The flag that must come with f (a certificate and its key go together), or NULL. */
static const char *partner(const char *f)
{
    static const char *const pairs[][2] = {{"--tls-cert-path", "--tls-key-path"},
                                           {"--client-cert-path", "--client-key-path"}};
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++)
        for (int j = 0; j < 2; j++)
            if (strcmp(f, pairs[i][j]) == 0)
                return pairs[i][1 - j];
    return NULL;
}

/* Flag f (secs: the row's flag in seconds) sets k, alone and on top of the YAML file at conf. */
static void check_flag(const pdr_conf_key_t *k, const char *f, int secs, const char *conf)
{
    char val[160], want[160], got[256], err[1024];
    flag_value(k, secs, val, sizeof(val), want, sizeof(want));
    for (int file = 0; file < 2; file++) {
        const char *argv[12];
        int n = 0;
        argv[n++] = "pdrouter";
        if (file) {
            argv[n++] = "--config";
            argv[n++] = conf;
        } else {
            argv[n++] = "--prefill";
            argv[n++] = "http://127.0.0.1:30001";
            argv[n++] = "--decode";
            argv[n++] = "http://127.0.0.1:30002";
        }
        argv[n++] = f;
        argv[n++] = val;
        if (partner(f) != NULL) {
            argv[n++] = partner(f);
            argv[n++] = "/tmp/pd-partner";
        }
        argv[n] = NULL;
        pdr_cli_t cli;
        if (pdr_config_parse_args(n, (char **)argv, &cli, err, sizeof(err)) != 0) {
            fprintf(stderr, "%s %s%s: %s\n", f, val, file ? " over --config" : "", err);
            check_failures++;
            continue;
        }
        value_text(k, cli.config, got, sizeof(got));
        if (strcmp(got, want) != 0) {
            fprintf(stderr, "%s %s%s: %s is '%s', want '%s'\n", f, val, file ? " over --config" : "", k->path,
                    got, want);
            check_failures++;
        }
        pdr_config_unref(cli.config);
    }
    /* Out of range: refused, naming the flag and the key's range (a flag read by the table). */
    if ((k->type != PDR_CT_INT && k->type != PDR_CT_DOUBLE && !secs) || (k->flags & PDR_KEY_OWN_FLAG))
        return;
    char bad[32], msg[160];
    long long hi = secs ? 86400 : k->max;
    snprintf(bad, sizeof(bad), "%lld", hi + 1);
    if (k->type == PDR_CT_DOUBLE && !secs)
        snprintf(msg, sizeof(msg), "argv: %s: expected a number in %g..%g, got '%s'", f, (double)k->min,
                 (double)k->max, bad);
    else
        snprintf(msg, sizeof(msg), "argv: %s: expected an integer in %lld..%lld, got '%s'", f,
                 secs ? 1LL : (long long)k->min, hi, bad);
    const char *argv[] = {
        "pdrouter", "--prefill", "http://127.0.0.1:30001", "--decode", "http://127.0.0.1:30002", f,
        bad,        NULL};
    pdr_cli_t cli;
    if (pdr_config_parse_args(7, (char **)argv, &cli, err, sizeof(err)) == 0 || strcmp(err, msg) != 0) {
        fprintf(stderr, "%s %s: got '%s', want '%s'\n", f, bad, err, msg);
        check_failures++;
    }
    if (cli.config != NULL)
        pdr_config_unref(cli.config);
}

static void check_flags(void)
{
    char conf[] = "/tmp/pdr_schema_XXXXXX.yaml";
    int fd = mkstemps(conf, 5);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    static const char yaml[] =
        "workers: {prefill: [http://127.0.0.1:30001], decode: [http://127.0.0.1:30002]}\n";
    CHECK(write(fd, yaml, sizeof(yaml) - 1) == (ssize_t)(sizeof(yaml) - 1));
    close(fd);
    size_t flags = 0;
    for (size_t i = 0; i < pdr_conf_nkeys; i++) {
        const pdr_conf_key_t *k = &pdr_conf_keys[i];
        if (strncmp(k->path, "discovery.", 10) == 0)
            continue; /* the Kubernetes flags go together (--service-discovery): test_config's */
        if (k->flag != NULL)
            check_flag(k, k->flag, 0, conf), flags++;
        if (k->flag_sec != NULL)
            check_flag(k, k->flag_sec, 1, conf), flags++;
    }
    CHECK(flags > 40);

    /* --rate-limit-tokens-per-second sets the burst too: --max-concurrent-requests's value, else the
     * default (0), over the file's. */
    static const char burst[] = "limits: {rate_limit_burst: 5}\n";
    fd = open(conf, O_WRONLY | O_APPEND);
    CHECK(fd >= 0 && write(fd, burst, sizeof(burst) - 1) == (ssize_t)(sizeof(burst) - 1));
    if (fd >= 0)
        close(fd);
    const char *a1[] = {"pdrouter", "--config", conf, "--rate-limit-tokens-per-second", "10", NULL};
    const char *a2[] = {
        "pdrouter", "--config", conf, "--rate-limit-tokens-per-second", "10", "--max-concurrent-requests",
        "7",        NULL};
    const char *a3[] = {"pdrouter", "--config", conf, NULL};
    const char *const *argvs[] = {a1, a2, a3};
    const int argcs[] = {5, 7, 3}, want[] = {0, 7, 5};
    for (int i = 0; i < 3; i++) {
        char err[512];
        pdr_cli_t cli;
        CHECK(pdr_config_parse_args(argcs[i], (char **)argvs[i], &cli, err, sizeof(err)) == 0);
        if (cli.config != NULL) {
            if (cli.config->limits.rate_limit_burst != want[i])
                fprintf(stderr, "case %d: burst %d, want %d\n", i, cli.config->limits.rate_limit_burst,
                        want[i]);
            CHECK(cli.config->limits.rate_limit_burst == want[i]);
            pdr_config_unref(cli.config);
        }
    }
    unlink(conf);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--dump") == 0) {
        pdr_conf_schema_print(stdout);
        return 0;
    }
    pdr_config_t *d = pdr_config_new_default();
    CHECK(d != NULL);
    if (d == NULL)
        return 1;
    CHECK(pdr_conf_nkeys > 100);
    for (size_t i = 0; i < pdr_conf_nkeys; i++) {
        const pdr_conf_key_t *k = &pdr_conf_keys[i];
        CHECK(pdr_conf_key_find(k->path, strlen(k->path)) == k); /* no path twice */
        check_row(k, d);
    }
    CHECK(pdr_conf_key_find("limits.max_body", strlen("limits.max_body")) == NULL);
    check_flags();
    pdr_config_unref(d);
    CHECK_DONE();
}
