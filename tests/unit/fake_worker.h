/*
 * A worker record for the unit tests of code that only reads a worker's identity (uid, target, id): the
 * link table and the breaker. Not in any pool.
 */
#ifndef PDR_TEST_FAKE_WORKER_H
#define PDR_TEST_FAKE_WORKER_H

#include <stdio.h>
#include <string.h>
#include "pool.h"

static inline pdr_worker_t mk(uint64_t uid, const char *target)
{
    pdr_worker_t w;
    memset(&w, 0, sizeof(w));
    w.uid = uid;
    snprintf(w.target, sizeof(w.target), "%s", target);
    snprintf(w.id, sizeof(w.id), "w-%llu", (unsigned long long)uid);
    return w;
}

#endif
