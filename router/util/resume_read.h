/*
 * Stream migration's reading side (resume.h has the whole story): the state of what a stream's client has,
 * read back from the events relayed to it (resume_read.c). Pure; any thread, one pdr_resume_t per stream.
 */
#ifndef PDR_RESUME_READ_H
#define PDR_RESUME_READ_H

#include <stddef.h>
#include <stdint.h>
#include "buf.h"
#include "rewrite.h"

/* The log of relayed events is read back into the state once it holds this much (and before a migration):
 * the state, not the log, is what a long stream keeps. */
#define PDR_RESUME_LOG_FOLD (64u * 1024u)

typedef struct pdr_resume {
    pdr_route_t route;
    size_t max_text; /* the text a stream may carry to a new pair (migration.max_bytes) */
    pdr_buf_t log;   /* whole events relayed to the client, not read back yet */
    pdr_buf_t text;  /* the answer's text the client has */
    int64_t *ids;    /* /generate: the output ids the client has (have_ids) */
    size_t n_ids, cap_ids;
    uint64_t tokens; /* completion tokens the client has */
    char id[128];    /* the first stream's id ("id"; /generate: meta_info.id), "" until seen */
    /* What the current stream's prompt already holds (set by pdr_resume_body): its events are put behind it.
     */
    size_t base_text, base_ids;
    uint64_t base_tokens;
    unsigned resumed : 1;  /* the current stream is a migration's: its events are rewritten */
    unsigned have_ids : 1; /* /generate's events carried output_ids */
    unsigned finished : 1; /* an event carried a finish_reason */
    unsigned done : 1;     /* "data: [DONE]" went */
    unsigned bad : 1;      /* an event could not be read, or the text outgrew max_text: no migration */
    /* /generate: the first events were read (decided), and each held everything so far (cumulative, sglang's
     * default): only the last data event of each send is kept, not every event. */
    unsigned decided : 1, cumulative : 1;
} pdr_resume_t;

void pdr_resume_init(pdr_resume_t *s, pdr_route_t route, size_t max_text);
void pdr_resume_free(pdr_resume_t *s);

/* Whole events (each ending with an empty line) relayed to the client: kept, and read back once the log
 * holds PDR_RESUME_LOG_FOLD (a cumulative /generate stream keeps only its last data event). A stream that
 * cannot be read back is marked bad (no migration), never fails. */
void pdr_resume_note(pdr_resume_t *s, const char *p, size_t n);
/* Reads the log back into the state. 0, or -1 when the stream is bad. */
int pdr_resume_fold(pdr_resume_t *s);

/* The end of the last whole event in p[0..n) (the offset just past its empty line), 0 when none ends. */
size_t pdr_resume_events_end(const char *p, size_t n);
/* The end of the first whole event in p[0..n) (the offset just past its empty line: the first "\n" at p[1] or
 * later that follows "\n" or "\n\r"), 0 when none ends. */
size_t pdr_resume_first_event_end(const char *p, size_t n);

#endif
