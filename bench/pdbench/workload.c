/*
 * pdbench's workloads: the prompts and request bodies. Every prompt is a function of --seed, the run and
 * the request's index (and, for multi-turn, its conversation and turn) only, so a seed gives the same
 * requests against any server. Pure; single-threaded like the rest of pdbench.
 */
#include <stdio.h>
#include <string.h>

#include "buf.h"
#include "pdbench_internal.h"

/* 256 short, common English words: each is one token (with its leading space) in the BPE
 * vocabularies of GPT-2/3/4, Llama and Qwen, and exactly one token on pdsim (which splits on
 * whitespace). */
static const char *const WORDS[256] = {
    "the",       "of",        "and",      "to",      "in",       "is",      "you",     "that",    "it",
    "he",        "was",       "for",      "on",      "are",      "as",      "with",    "his",     "they",
    "at",        "be",        "this",     "have",    "from",     "or",      "one",     "had",     "by",
    "word",      "but",       "not",      "what",    "all",      "were",    "we",      "when",    "your",
    "can",       "said",      "there",    "use",     "an",       "each",    "which",   "she",     "do",
    "how",       "their",     "if",       "will",    "up",       "other",   "about",   "out",     "many",
    "then",      "them",      "these",    "so",      "some",     "her",     "would",   "make",    "like",
    "him",       "into",      "time",     "has",     "look",     "two",     "more",    "write",   "go",
    "see",       "number",    "no",       "way",     "could",    "people",  "my",      "than",    "first",
    "water",     "been",      "call",     "who",     "oil",      "its",     "now",     "find",    "long",
    "down",      "day",       "did",      "get",     "come",     "made",    "may",     "part",    "over",
    "new",       "sound",     "take",     "only",    "little",   "work",    "know",    "place",   "year",
    "live",      "me",        "back",     "give",    "most",     "very",    "after",   "thing",   "our",
    "just",      "name",      "good",     "man",     "think",    "say",     "great",   "where",   "help",
    "through",   "much",      "before",   "line",    "right",    "too",     "mean",    "old",     "any",
    "same",      "tell",      "boy",      "follow",  "came",     "want",    "show",    "also",    "around",
    "form",      "three",     "small",    "set",     "put",      "end",     "does",    "another", "well",
    "large",     "must",      "big",      "even",    "such",     "because", "turn",    "here",    "why",
    "ask",       "went",      "men",      "read",    "need",     "land",    "home",    "us",      "move",
    "try",       "kind",      "hand",     "picture", "again",    "change",  "off",     "play",    "spell",
    "air",       "away",      "animal",   "house",   "point",    "page",    "letter",  "mother",  "answer",
    "found",     "study",     "still",    "learn",   "should",   "world",   "high",    "every",   "near",
    "add",       "food",      "between",  "own",     "below",    "country", "plant",   "last",    "school",
    "father",    "keep",      "tree",     "never",   "start",    "city",    "earth",   "eye",     "light",
    "head",      "under",     "story",    "saw",     "left",     "few",     "while",   "along",   "might",
    "close",     "something", "seem",     "next",    "hard",     "open",    "example", "begin",   "life",
    "always",    "those",     "both",     "paper",   "together", "got",     "group",   "often",   "run",
    "important", "until",     "children", "side",    "feet",     "car",     "mile",    "night",   "walk",
    "white",     "sea",       "began",    "river",
};

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The PRNG state of one request: a function of --seed, the run and the request's index only. */
uint64_t pdb__request_seed(const pdb_opts_t *o, const pdb_run_t *r, uint64_t index)
{
    uint64_t s = o->seed;
    uint64_t parts[6] = {
        (uint64_t)r->isl, (uint64_t)r->osl, (uint64_t)r->concurrency, (uint64_t)r->repeat, index,
        0x70646265ull};
    for (size_t i = 0; i < 6; i++) {
        s ^= parts[i];
        s = splitmix64(&s);
    }
    return s;
}

static int put(pdr_buf_t *b, const char *s)
{
    return pdr_buf_append(b, s, strlen(s), BODY_LIMIT);
}

static int put_json_string(pdr_buf_t *b, const char *s)
{
    int r = put(b, "\"");
    for (; r == 0 && *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            r = pdr_buf_append(b, esc, 2, BODY_LIMIT);
        } else if (c < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            r = put(b, esc);
        } else {
            r = pdr_buf_append(b, s, 1, BODY_LIMIT);
        }
    }
    return r == 0 ? put(b, "\"") : r;
}

/* Appends n words drawn uniformly from WORDS (or token ids in [1000, 31000) for --input-ids) from the
 * PRNG state seed; *count is the number of words already in the prompt (for the separators). */
static int put_words(pdr_buf_t *b, int n, int ids, uint64_t seed, int *count)
{
    int r = 0;
    char num[24];
    for (int i = 0; r == 0 && i < n; i++, (*count)++) {
        uint64_t x = splitmix64(&seed);
        if (ids) {
            int k = snprintf(num, sizeof(num), "%s%llu", *count ? "," : "",
                             (unsigned long long)(1000 + x % 30000));
            r = pdr_buf_append(b, num, (size_t)k, BODY_LIMIT);
        } else {
            if (*count > 0)
                r = pdr_buf_append(b, " ", 1, BODY_LIMIT);
            if (r == 0)
                r = put(b, WORDS[x & 255]);
        }
    }
    return r;
}

/* A PRNG state for one part of a workload: a function of --seed, a tag and two numbers only. */
static uint64_t part_seed(const pdb_opts_t *o, uint64_t tag, uint64_t a, uint64_t c)
{
    uint64_t s = o->seed ^ tag;
    s = splitmix64(&s) ^ a;
    s = splitmix64(&s) ^ c;
    return splitmix64(&s);
}

/* The prompt of a request whose PRNG state is seed, by --workload:
 *  random:        isl words from seed;
 *  shared-prefix: system prompt k (prefix_tokens words from part_seed("sys", k), k drawn from seed
 *                 modulo prefixes), then isl - prefix_tokens words from seed;
 *  multi-turn:    conversation `conv` at turn `turn`: user turn 0, answer 0, user turn 1, ... user turn
 *                 `turn`, each user turn isl words and each answer osl words, all from part_seed(conv, j).
 *                 The answers are synthesized, not the server's: the prompts do not depend on what the
 *                 server said, so a seed gives the same prompts against any server. */
static int put_prompt(const pdb_opts_t *o, const pdb_run_t *run, pdr_buf_t *b, uint64_t seed, uint64_t conv,
                      int turn)
{
    int count = 0, r = 0;
    if (o->workload == PDB_WL_SHARED_PREFIX) {
        uint64_t k = splitmix64(&seed) % (uint64_t)o->prefixes;
        r = put_words(b, o->prefix_tokens, o->input_ids, part_seed(o, 0x73797370ull, k, 0), &count);
        return r == 0 ? put_words(b, run->isl - o->prefix_tokens, o->input_ids, seed, &count) : r;
    }
    if (o->workload == PDB_WL_MULTI_TURN) {
        for (int j = 0; r == 0 && j <= turn; j++) {
            r = put_words(b, run->isl, o->input_ids, part_seed(o, 0x75736572ull, conv, (uint64_t)j), &count);
            if (r == 0 && j < turn)
                r = put_words(b, run->osl, o->input_ids, part_seed(o, 0x616e7377ull, conv, (uint64_t)j),
                              &count);
        }
        return r;
    }
    return put_words(b, run->isl, o->input_ids, seed, &count);
}

int pdb__build_body(const bench_t *b, const pdb_run_t *run, uint64_t seed, uint64_t conv, int turn,
                    pdr_buf_t *out)
{
    const pdb_opts_t *o = &b->o;
    char tail[256];
    out->len = 0;
    int r;
    if (o->api == PDB_API_GENERATE) {
        r = put(out, o->input_ids ? "{\"input_ids\":[" : "{\"text\":\"");
        if (r == 0)
            r = put_prompt(o, run, out, seed, conv, turn);
        snprintf(tail, sizeof(tail),
                 "%s,\"sampling_params\":{\"max_new_tokens\":%d,%s\"temperature\":%g},\"stream\":true}",
                 o->input_ids ? "]" : "\"", run->osl, o->ignore_eos ? "\"ignore_eos\":true," : "",
                 o->temperature);
    } else {
        r = put(out, "{\"model\":");
        if (r == 0)
            r = put_json_string(out, o->model);
        if (r == 0)
            r = put(out, o->api == PDB_API_COMPLETIONS ? ",\"prompt\":\""
                                                       : ",\"messages\":[{\"role\":\"user\",\"content\":\"");
        if (r == 0)
            r = put_prompt(o, run, out, seed, conv, turn);
        snprintf(tail, sizeof(tail),
                 "\"%s,\"max_tokens\":%d,%s\"temperature\":%g,\"stream\":true,"
                 "\"stream_options\":{\"include_usage\":true}}",
                 o->api == PDB_API_CHAT ? "}]" : "", run->osl, o->ignore_eos ? "\"ignore_eos\":true," : "",
                 o->temperature);
    }
    return r == 0 ? put(out, tail) : r;
}
