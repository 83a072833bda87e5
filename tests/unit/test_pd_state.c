/* Unit tests for the PD request's transition table (router/pd/state.c): exactly the transitions of
 * docs/internals/request.md ("The request's state") are legal; every state is reached from the first and
 * reaches the last; the paths the request path takes (served, retried, lingering, refused, gone while
 * queued) are sequences of legal transitions, and the ones it must never take are not. */
#include <string.h>
#include "check.h"
#include "state.h"
#include "runner.h"

#define S(st) (1u << (st))

/* The table as the documentation states it: from each state, where it may go. */
static const unsigned documented[PD_STATES] = {
    [PD_QUEUED] = S(PD_PICKING) | S(PD_RESPONDING) | S(PD_DONE),
    [PD_PICKING] = S(PD_PICKING) | S(PD_LEGS) | S(PD_RESPONDING) | S(PD_DONE),
    [PD_LEGS] = S(PD_PICKING) | S(PD_RETRY_WAIT) | S(PD_RESPONDING) | S(PD_DONE),
    [PD_RETRY_WAIT] = S(PD_PICKING) | S(PD_RESPONDING) | S(PD_DONE),
    [PD_RESPONDING] = S(PD_ANSWERED) | S(PD_PICKING) | S(PD_DONE),
    [PD_ANSWERED] = S(PD_LINGER) | S(PD_DONE),
    [PD_LINGER] = S(PD_DONE),
    [PD_DONE] = 0,
};

static void test_table(void)
{
    for (int f = 0; f < PD_STATES; f++)
        for (int t = 0; t < PD_STATES; t++) {
            int want = (documented[f] & S(t)) != 0;
            if (pdr__pd_state_legal((pd_state_t)f, (pd_state_t)t) != want) {
                fprintf(stderr, "%s -> %s: legal %d, documented %d\n", pdr__pd_state_name((pd_state_t)f),
                        pdr__pd_state_name((pd_state_t)t), !want, want);
                CHECK(0);
            }
        }
    /* Out of range: never legal. */
    CHECK(!pdr__pd_state_legal(PD_STATES, PD_DONE) && !pdr__pd_state_legal(PD_QUEUED, PD_STATES));
    CHECK(!pdr__pd_state_legal((pd_state_t)-1, PD_DONE));
}

static void test_names(void)
{
    for (int a = 0; a < PD_STATES; a++) {
        const char *n = pdr__pd_state_name((pd_state_t)a);
        CHECK(n != NULL && strcmp(n, "unknown") != 0);
        for (int b = 0; b < a; b++)
            CHECK(strcmp(n, pdr__pd_state_name((pd_state_t)b)) != 0);
    }
    CHECK(strcmp(pdr__pd_state_name(PD_STATES), "unknown") == 0);
}

/* Every state is reached from PD_QUEUED and reaches PD_DONE; only PD_DONE has no way out; no state but
 * PD_PICKING (decode admission's poll) goes to itself; a response that began never goes back. */
static void test_graph(void)
{
    unsigned seen = S(PD_QUEUED);
    for (int round = 0; round < PD_STATES; round++)
        for (int f = 0; f < PD_STATES; f++)
            if (seen & S(f))
                for (int t = 0; t < PD_STATES; t++)
                    if (pdr__pd_state_legal((pd_state_t)f, (pd_state_t)t))
                        seen |= S(t);
    CHECK(seen == S(PD_STATES) - 1);
    for (int f = 0; f < PD_STATES; f++) {
        unsigned reach = S(f);
        for (int round = 0; round < PD_STATES; round++)
            for (int a = 0; a < PD_STATES; a++)
                if (reach & S(a))
                    for (int t = 0; t < PD_STATES; t++)
                        if (pdr__pd_state_legal((pd_state_t)a, (pd_state_t)t))
                            reach |= S(t);
        CHECK(reach & S(PD_DONE));
        int exits = 0;
        for (int t = 0; t < PD_STATES; t++)
            exits += pdr__pd_state_legal((pd_state_t)f, (pd_state_t)t);
        CHECK((exits == 0) == (f == PD_DONE));
        CHECK(pdr__pd_state_legal((pd_state_t)f, (pd_state_t)f) == (f == PD_PICKING));
    }
    /* A response that began goes back to an attempt only by a stream migration (responding -> picking). */
    for (int f = PD_RESPONDING; f < PD_STATES; f++)
        for (int t = PD_QUEUED; t <= PD_RETRY_WAIT; t++)
            CHECK(pdr__pd_state_legal((pd_state_t)f, (pd_state_t)t) ==
                  (f == PD_RESPONDING && t == PD_PICKING));
}

static int path_legal(const pd_state_t *p, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++)
        if (!pdr__pd_state_legal(p[i], p[i + 1]))
            return 0;
    return 1;
}

#define PATH(...)                                                                                            \
    ((const pd_state_t[]){__VA_ARGS__}), sizeof((const pd_state_t[]){__VA_ARGS__}) / sizeof(pd_state_t)

static void test_paths(void)
{
    /* Served: admitted, a pair picked, the legs out, the decode's answer relayed to its end. */
    CHECK(path_legal(PATH(PD_QUEUED, PD_PICKING, PD_LEGS, PD_RESPONDING, PD_ANSWERED, PD_DONE)));
    /* pd.relay first_byte: the answer is over before the prefill's; the request lingers. */
    CHECK(path_legal(PATH(PD_QUEUED, PD_PICKING, PD_LEGS, PD_RESPONDING, PD_ANSWERED, PD_LINGER, PD_DONE)));
    /* Retried: at once, then after a back-off, then served. */
    CHECK(path_legal(PATH(PD_QUEUED, PD_PICKING, PD_LEGS, PD_PICKING, PD_LEGS, PD_RETRY_WAIT, PD_PICKING,
                          PD_LEGS, PD_RESPONDING, PD_ANSWERED, PD_DONE)));
    /* Decode admission polls, then no worker: the error answer (its status line, then its end at once). */
    CHECK(path_legal(PATH(PD_QUEUED, PD_PICKING, PD_PICKING, PD_RESPONDING, PD_ANSWERED, PD_DONE)));
    /* Refused by admission; a client gone while queued; a shutdown during a back-off. */
    CHECK(path_legal(PATH(PD_QUEUED, PD_RESPONDING, PD_ANSWERED, PD_DONE)));
    CHECK(path_legal(PATH(PD_QUEUED, PD_DONE)));
    CHECK(path_legal(PATH(PD_LEGS, PD_RETRY_WAIT, PD_RESPONDING, PD_ANSWERED, PD_DONE)));
    /* Never: legs without a pick, a retry after the response began, a linger without the answer's end,
     * anything after the end. */
    CHECK(!path_legal(PATH(PD_QUEUED, PD_LEGS)));
    CHECK(!path_legal(PATH(PD_RESPONDING, PD_RETRY_WAIT)));
    /* A stream migration: the response began, the decode broke it, a new pair goes on with it. */
    CHECK(path_legal(PATH(PD_QUEUED, PD_PICKING, PD_LEGS, PD_RESPONDING, PD_PICKING, PD_LEGS, PD_RETRY_WAIT,
                          PD_PICKING, PD_LEGS, PD_RESPONDING, PD_ANSWERED, PD_DONE)));
    CHECK(!path_legal(PATH(PD_LEGS, PD_LINGER)));
    CHECK(!path_legal(PATH(PD_RESPONDING, PD_LINGER)));
    CHECK(!path_legal(PATH(PD_QUEUED, PD_RETRY_WAIT)));
    CHECK(!path_legal(PATH(PD_LINGER, PD_ANSWERED)));
    CHECK(!path_legal(PATH(PD_DONE, PD_QUEUED)));
    CHECK(!path_legal(PATH(PD_ANSWERED, PD_ANSWERED)));
}

static const pdr_test_case_t cases[] = {
    {"table", test_table, 60},
    {"names", test_names, 60},
    {"graph", test_graph, 60},
    {"paths", test_paths, 60},
};

int main(int argc, char **argv)
{
    return PDR_TEST_RUN(cases, argc, argv);
}
