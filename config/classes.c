/*
 * admission.classes, the ordered list of request classes: a name's index, the count, the i-th name.
 * Pure functions, any thread.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include "err.h"
#include "util.h"
#include "config.h"
#include "config_internal.h"
#include "defaults.h"
#include "schema.h"

/* The next class name of a list at *p: its start and length; *p moves past it and its comma. */
const char *pdr__config_next_class(const char **p, size_t *len)
{
    const char *s = *p, *e = strchr(s, ',');
    *len = e != NULL ? (size_t)(e - s) : strlen(s);
    *p = e != NULL ? e + 1 : NULL;
    return s;
}

int pdr_config_class_index(const char *classes, const char *name, size_t len)
{
    if (classes == NULL)
        return 0;
    const char *p = classes;
    for (int i = 0; p != NULL; i++) {
        size_t n;
        const char *s = pdr__config_next_class(&p, &n);
        if (n == len && memcmp(s, name, len) == 0)
            return i;
    }
    return -1;
}

int pdr_config_class_count(const char *classes)
{
    if (classes == NULL)
        return 1;
    int k = 0;
    for (const char *p = classes; p != NULL; k++) {
        size_t n;
        (void)pdr__config_next_class(&p, &n);
    }
    return k;
}

void pdr_config_class_name(const char *classes, int i, char *out, size_t cap)
{
    if (classes == NULL) {
        snprintf(out, cap, "default");
        return;
    }
    const char *p = classes;
    size_t n = 0;
    const char *s = "";
    for (int k = 0; k <= i && p != NULL; k++)
        s = pdr__config_next_class(&p, &n);
    snprintf(out, cap, "%.*s", (int)n, s);
}

/* admission.classes: 1..PDR_CONFIG_MAX_CLASSES names of [a-z0-9_-], each shorter than
 * PDR_CONFIG_CLASS_NAME_MAX and named once; admission.default_class one of them. */
