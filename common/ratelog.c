/* Rate-limited log lines: see ratelog.h. */
#include "ratelog.h"

int pdr_ratelog_take(pdr_ratelog_t *rl, uint64_t now_ns, uint64_t period_ns, uint64_t *suppressed)
{
    uint64_t next = __atomic_load_n(&rl->next_ns, __ATOMIC_ACQUIRE);
    for (;;) {
        if (now_ns < next) {
            __atomic_add_fetch(&rl->suppressed, 1, __ATOMIC_RELAXED);
            return 0;
        }
        /* One thread wins the period; a loser sees the new deadline and counts itself. */
        if (__atomic_compare_exchange_n(&rl->next_ns, &next, now_ns + period_ns, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            break;
    }
    *suppressed = __atomic_exchange_n(&rl->suppressed, 0, __ATOMIC_RELAXED);
    return 1;
}
