/*
 * The main() of a fuzz target built without libFuzzer: replays every file named on the command line
 * (a directory stands for the files in it) through LLVMFuzzerTestOneInput, each in an exact-size heap
 * copy so that ASan catches a read past the end. With PDR_REPLAY_MUTATIONS N defined before the
 * include, each file is also replayed as N deterministic mutations (1-4 byte changes, and truncations),
 * a cheap stand-in for a fuzzing session in every test run. Include it once, after the target's
 * LLVMFuzzerTestOneInput, inside #ifndef PDR_LIBFUZZER.
 */
#ifndef PDR_FUZZ_REPLAY_MAIN_H
#define PDR_FUZZ_REPLAY_MAIN_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef PDR_REPLAY_MUTATIONS
#define PDR_REPLAY_MUTATIONS 0
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t replay_inputs;

/* Runs the target on an exact-size copy of data[0..size). */
static void replay_exact(const uint8_t *data, size_t size)
{
    uint8_t *exact = malloc(size ? size : 1);
    if (exact == NULL)
        abort();
    memcpy(exact, data, size);
    LLVMFuzzerTestOneInput(exact, size);
    free(exact);
    replay_inputs++;
}

static void replay_mutations(const uint8_t *data, size_t size)
{
    replay_exact(data, size);
    if (size == 0)
        return;
    uint8_t *m = malloc(size);
    if (m == NULL)
        abort();
    uint64_t s = 0x9E3779B97F4A7C15ull ^ size;
    for (int iter = 0; iter < PDR_REPLAY_MUTATIONS; iter++) {
        memcpy(m, data, size);
        for (int k = 0; k < 1 + iter % 4; k++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            size_t at = (size_t)(s % size);
            switch ((s >> 32) % 4) {
            case 0:
                m[at] ^= (uint8_t)(1u << ((s >> 40) % 8));
                break;
            case 1:
                m[at] = (uint8_t)(s >> 48);
                break;
            case 2:
                m[at] = 0xff;
                break;
            default:
                m[at] = 0;
                break;
            }
        }
        /* Every third mutation (every one for small seeds) is also cut at a random point. */
        size_t cut = (iter % 3 == 0 || size <= 512) ? (size_t)(s % (size + 1)) : size;
        replay_exact(m, cut);
    }
    free(m);
}

/* Reads a whole file; NULL on error. */
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
    *len_out = len;
    return buf;
}

/* Replays a file or every file of a directory; returns the number of files, -1 on error. */
static int replay_path(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        perror(path);
        return -1;
    }
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        if (d == NULL) {
            perror(path);
            return -1;
        }
        int files = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            char sub[4096];
            snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
            int n = replay_path(sub);
            if (n < 0) {
                closedir(d);
                return -1;
            }
            files += n;
        }
        closedir(d);
        return files;
    }
    size_t len;
    uint8_t *data = replay_read_file(path, &len);
    if (data == NULL) {
        perror(path);
        return -1;
    }
    replay_mutations(data, len);
    free(data);
    return 1;
}

int main(int argc, char **argv)
{
    int files = 0;
    for (int i = 1; i < argc; i++) {
        int n = replay_path(argv[i]);
        if (n < 0)
            return 1;
        files += n;
    }
    if (files == 0) {
        fprintf(stderr, "usage: %s CORPUS_DIR|FILE...\n", argv[0]);
        return 1;
    }
    printf("%s: %d files, %zu inputs, no crash\n", argv[0], files, replay_inputs);
    return 0;
}

#endif
