/* Unit tests for the admission queue's scheduler (router/fleet/fairq.c): classes are served strictly by
 * importance, tenants of a class in round robin whatever each one offers, a skipped item lets the next
 * one of its tenant and the less important classes go, a stop stops everything, and past max_tenants the
 * newcomers share one counted sub-queue. Also the classes of admission.classes (config/validate.c). */
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "runner.h"
#include "config.h"
#include "fairq.h"

#define N_ITEMS 64

typedef struct item {
    pdr_fairq_item_t fq;
    int id;
    int pool; /* the callback skips the items of a full pool */
} item_t;

/* The callback's state: the order items were taken, a budget of takes, the full pool. */
typedef struct order {
    int taken[N_ITEMS];
    int n;
    int budget;
    int full_pool;
} order_t;

static pdr_fairq_verdict_t take_in_order(pdr_fairq_item_t *it, void *arg)
{
    order_t *o = arg;
    item_t *x = PDR_DLINK_ITEM(it, item_t, fq);
    if (o->n >= o->budget)
        return PDR_FAIRQ_STOP;
    if (x->pool == o->full_pool)
        return PDR_FAIRQ_SKIP;
    o->taken[o->n++] = x->id;
    return PDR_FAIRQ_TAKE;
}

static pdr_fairq_t *new_q(void)
{
    pdr_fairq_t *q = calloc(1, sizeof(*q));
    CHECK(q != NULL);
    return q;
}

static void push(pdr_fairq_t *q, item_t *x, int id, int cls, const char *tenant, int max_tenants)
{
    memset(x, 0, sizeof(*x));
    x->id = id;
    x->pool = 0;
    x->fq.cls = cls;
    x->fq.key = pdr_fairq_key(tenant, strlen(tenant));
    (void)pdr_fairq_push(q, &x->fq, max_tenants);
}

/* Less important items queued first still go after every more important one. */
static void test_priority_order(void)
{
    pdr_fairq_t *q = new_q();
    item_t it[6];
    push(q, &it[0], 0, 2, "a", 8);
    push(q, &it[1], 1, 1, "a", 8);
    push(q, &it[2], 2, 2, "a", 8);
    push(q, &it[3], 3, 0, "a", 8);
    push(q, &it[4], 4, 1, "a", 8);
    push(q, &it[5], 5, 0, "a", 8);
    CHECK(pdr_fairq_class_depth(q, 0) == 2 && pdr_fairq_class_depth(q, 2) == 2);
    order_t o = {.budget = 6, .full_pool = -1};
    CHECK(pdr_fairq_pump(q, take_in_order, &o) == 6);
    static const int want[] = {3, 5, 1, 4, 0, 2};
    for (int i = 0; i < 6; i++)
        CHECK(o.taken[i] == want[i]);
    CHECK(pdr_fairq_class_depth(q, 0) == 0 && pdr_fairq_class_depth(q, 2) == 0);
    free(q);
}

/* A tenant offering ten times more still gets one turn in two while both have items queued. */
static void test_round_robin(void)
{
    pdr_fairq_t *q = new_q();
    item_t it[44];
    for (int i = 0; i < 40; i++)
        push(q, &it[i], i, 0, "heavy", 8);
    for (int i = 40; i < 44; i++)
        push(q, &it[i], i, 0, "light", 8);
    order_t o = {.budget = 8, .full_pool = -1};
    CHECK(pdr_fairq_pump(q, take_in_order, &o) == 8);
    int light = 0;
    for (int i = 0; i < 8; i++) {
        light += o.taken[i] >= 40;
        if (i > 0) /* strictly alternating */
            CHECK((o.taken[i] >= 40) != (o.taken[i - 1] >= 40));
    }
    CHECK(light == 4);
    /* The round robin goes on where it stopped: the next pump starts with the other tenant. */
    o.n = 0;
    o.budget = 2;
    CHECK(pdr_fairq_pump(q, take_in_order, &o) == 2);
    CHECK(o.taken[0] < 40 && o.taken[1] < 40); /* light is empty now: heavy alone */
    free(q);
}

/* A skipped item (its pool full) lets the tenant's next item, and a less important class, go; a stop
 * leaves everything queued. */
static void test_skip_and_stop(void)
{
    pdr_fairq_t *q = new_q();
    item_t it[4];
    push(q, &it[0], 0, 0, "a", 8);
    it[0].pool = 1;
    push(q, &it[1], 1, 0, "a", 8);
    push(q, &it[2], 2, 1, "b", 8);
    it[2].pool = 1;
    push(q, &it[3], 3, 1, "b", 8);
    order_t o = {.budget = 10, .full_pool = 1};
    CHECK(pdr_fairq_pump(q, take_in_order, &o) == 2);
    CHECK(o.n == 2 && o.taken[0] == 1 && o.taken[1] == 3);
    CHECK(pdr_fairq_class_depth(q, 0) == 1 && pdr_fairq_class_depth(q, 1) == 1);
    o = (order_t){.budget = 0, .full_pool = -1};
    CHECK(pdr_fairq_pump(q, take_in_order, &o) == 0);
    o.budget = 10;
    CHECK(pdr_fairq_pump(q, take_in_order, &o) == 2);
    CHECK(o.taken[0] == 0 && o.taken[1] == 2);
    free(q);
}

/* Past max_tenants, new tenants share the overflow sub-queue (counted); a tenant's slot is free again once
 * its items are gone; removing an item that is not queued is a no-op. */
static void test_tenant_cap(void)
{
    pdr_fairq_t *q = new_q();
    item_t it[5];
    char name[8];
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof(name), "t%d", i);
        push(q, &it[i], i, 0, name, 2);
    }
    CHECK(q->overflow == 3);
    CHECK(it[0].fq.tenant != it[1].fq.tenant);
    CHECK(it[2].fq.tenant == PDR_FAIRQ_MAX_TENANTS && it[4].fq.tenant == PDR_FAIRQ_MAX_TENANTS);
    /* Three sub-queues in round robin: t0, t1, then the overflow one. */
    order_t o = {.budget = 3, .full_pool = -1};
    CHECK(pdr_fairq_pump(q, take_in_order, &o) == 3);
    CHECK(o.taken[0] == 0 && o.taken[1] == 1 && o.taken[2] == 2);
    pdr_fairq_remove(q, &it[0].fq); /* taken already */
    pdr_fairq_remove(q, &it[3].fq);
    CHECK(pdr_fairq_class_depth(q, 0) == 1);
    item_t late;
    push(q, &late, 9, 0, "new", 2); /* t0 and t1 left: a tracked slot again */
    CHECK(late.fq.tenant != PDR_FAIRQ_MAX_TENANTS && q->overflow == 3);
    /* A class past the last is the last. */
    item_t far;
    push(q, &far, 10, 99, "x", 2);
    CHECK(far.fq.cls == PDR_FAIRQ_MAX_CLASSES - 1);
    free(q);
}

static void test_class_names(void)
{
    CHECK(pdr_config_class_count(NULL) == 1);
    CHECK(pdr_config_class_index(NULL, "any", 3) == 0);
    const char *cl = "critical,standard,sheddable";
    CHECK(pdr_config_class_count(cl) == 3);
    CHECK(pdr_config_class_index(cl, "standard", 8) == 1);
    CHECK(pdr_config_class_index(cl, "sheddable", 9) == 2);
    CHECK(pdr_config_class_index(cl, "stand", 5) == -1);
    char name[PDR_CONFIG_CLASS_NAME_MAX];
    pdr_config_class_name(cl, 2, name, sizeof(name));
    CHECK(strcmp(name, "sheddable") == 0);
    pdr_config_class_name(NULL, 0, name, sizeof(name));
    CHECK(strcmp(name, "default") == 0);
}

/* The admission section's checks: a message naming the key, or a config that loads. */
static int config_error(const char *admission, char *err, size_t cap)
{
    char yaml[512];
    int n = snprintf(yaml, sizeof(yaml),
                     "workers:\n  prefill: [ http://127.0.0.1:30001 ]\n  decode: [ http://127.0.0.1:30002 ]\n"
                     "admission: %s\n",
                     admission);
    err[0] = '\0';
    pdr_config_t *c = pdr_config_load_string(yaml, (size_t)n, "t.yaml", err, cap);
    if (c == NULL)
        return 1;
    pdr_config_unref(c);
    return 0;
}

static void test_config_checks(void)
{
    char err[512];
    CHECK(config_error("{ classes: 'critical,standard,sheddable', default_class: standard, "
                       "fairness_header: authorization, timeout_header: x-request-timeout-ms }",
                       err, sizeof(err)) == 0);
    CHECK(config_error("{ classes: 'a,,b' }", err, sizeof(err)) == 1 &&
          strstr(err, "admission.classes") != NULL);
    CHECK(config_error("{ classes: 'a,b,a' }", err, sizeof(err)) == 1 &&
          strstr(err, "admission.classes") != NULL);
    CHECK(config_error("{ classes: 'A' }", err, sizeof(err)) == 1 &&
          strstr(err, "admission.classes") != NULL);
    CHECK(config_error("{ classes: 'a,b,c,d,e,f,g,h,i' }", err, sizeof(err)) == 1 &&
          strstr(err, "admission.classes") != NULL);
    CHECK(config_error("{ classes: 'a,b', default_class: c }", err, sizeof(err)) == 1 &&
          strstr(err, "admission.default_class") != NULL);
    CHECK(config_error("{ default_class: a }", err, sizeof(err)) == 1 &&
          strstr(err, "admission.default_class") != NULL);
    CHECK(config_error("{ fairness_header: 'x tenant' }", err, sizeof(err)) == 1 &&
          strstr(err, "admission.fairness_header") != NULL);
    CHECK(config_error("{ max_tenants: 0 }", err, sizeof(err)) == 1 &&
          strstr(err, "admission.max_tenants") != NULL);
}

static const pdr_test_case_t cases[] = {
    {"priority_order", test_priority_order, 30}, {"round_robin", test_round_robin, 30},
    {"skip_and_stop", test_skip_and_stop, 30},   {"tenant_cap", test_tenant_cap, 30},
    {"class_names", test_class_names, 30},       {"config_checks", test_config_checks, 30},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
