/* Between stream migration's two files (resume_read.c, resume.c): an SSE event's first data payload. */
#ifndef PDR_RESUME_INTERNAL_H
#define PDR_RESUME_INTERNAL_H

#include <stddef.h>

/* The payload of an event's first "data:" line (without one space after the colon and the line's end), or
 * NULL. */
const char *pdr__resume_event_data(const char *ev, size_t len, size_t *dl);
/* Whether the payload is "[DONE]". */
int pdr__resume_is_done(const char *d, size_t dl);

#endif
