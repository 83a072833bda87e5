/*
 * The main() of a fuzz target built without libFuzzer: replays every file named on the command line
 * through LLVMFuzzerTestOneInput, each in an exact-size heap copy so that ASan catches a read past
 * the end. Include it once, after the target's LLVMFuzzerTestOneInput, inside #ifndef PDR_LIBFUZZER.
 */
#ifndef PDR_FUZZ_REPLAY_MAIN_H
#define PDR_FUZZ_REPLAY_MAIN_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads a whole file into an exact-size buffer (1 byte for an empty file). NULL on error. */
static uint8_t *replay_read_file(const char *path, size_t *len_out)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 1 << 16, len = 0, n;
    uint8_t *buf = malloc(cap);
    while (buf != NULL && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    uint8_t *exact = buf != NULL ? malloc(len ? len : 1) : NULL;
    if (exact != NULL)
        memcpy(exact, buf, len);
    free(buf);
    *len_out = len;
    return exact;
}

int main(int argc, char **argv)
{
    int failed = 0;
    for (int i = 1; i < argc; i++) {
        size_t len;
        uint8_t *data = replay_read_file(argv[i], &len);
        if (data == NULL) {
            perror(argv[i]);
            failed = 1;
            continue;
        }
        LLVMFuzzerTestOneInput(data, len);
        free(data);
        printf("%s: ok\n", argv[i]);
    }
    return failed;
}

#endif
