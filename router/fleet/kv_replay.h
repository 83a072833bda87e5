/* A KV event gap's replay through the publisher's replay socket (kv_replay.c). Loop 0. */
#ifndef PDR_KV_REPLAY_H
#define PDR_KV_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "kv_events_internal.h"

/* Logs at most once per KV_LOG_EVERY_MS per publisher: 1 when this line may be logged. */
int pdr__kv_may_log(kv_sub_t *s);

/* Decodes one payload and applies it to the index as message seq (a malformed one drops the worker's
 * blocks, its number still counting). */
void pdr__kv_apply(kv_sub_t *s, uint64_t seq, const void *payload, size_t len);

/*
 * A live message seq arrived: a copy of a batch the last replay applied already is dropped (1: taken).
 * With a replay running, it is held (1). Otherwise, when it shows
 * numbers missing (a gap, or a first number not 0 or a restart not from 0), a replay starts from the first
 * one missing, the message held (1); without a replay endpoint the miss is counted (unavailable) and 0
 * returned, as when the replay cannot start (counted, failed): the caller applies the message.
 */
int pdr__kv_replay_offer(kv_sub_t *s, uint64_t seq, const void *payload, size_t len);

/* The sub goes: its replay (if any) is dropped with what it holds, nothing applied or counted. */
void pdr__kv_replay_abort(kv_sub_t *s);

#endif
