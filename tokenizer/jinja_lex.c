/*
 * The Jinja lexer: template text to tokens, with jinja2's whitespace rules for the environment the
 * engines use (trim_blocks: the first newline after a block or comment tag goes; lstrip_blocks: blanks
 * from the start of a line up to a block or comment tag go; "-" on a tag strips every blank on its side,
 * "+" keeps them). Text tokens come out already stripped. Runs at compile time only.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "jinja_internal.h"
#include "jinja_parse.h"
#include "jinja_str.h"
#include "util.h"

/* Python's \s (str.isspace): what whitespace control strips, with the Unicode spaces. */
static size_t skip_space(const char *s, size_t n, size_t i)
{
    size_t l;
    while (i < n && pdr__jj_space_at(s + i, n - i, &l))
        i += l;
    return i;
}

/* The start of the blanks that end s[from, i). */
static size_t back_space(const char *s, size_t from, size_t i)
{
    while (i > from) {
        size_t q = i - 1, l;
        while (q > from && ((unsigned char)s[q] & 0xc0) == 0x80)
            q--;
        if (!pdr__jj_space_at(s + q, i - q, &l) || q + l != i)
            break;
        i = q;
    }
    return i;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int is_name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

_Noreturn void pdr__jj_perr(jj_parser_t *p, int code, uint32_t pos, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pdr__jj_verr(p->err, p->errlen, p->t->src, p->t->src_len, pos, fmt, ap);
    va_end(ap);
    p->code = code;
    longjmp(p->jmp, 1);
}

void *pdr__jj_palloc(jj_parser_t *p, size_t n)
{
    void *q = pdr__jj_alloc(&p->t->arena, n);
    if (q == NULL)
        pdr__jj_perr(p, PDR_ENOMEM, 0, "out of memory compiling the template");
    return q;
}

const jj_str_t *pdr__jj_pstr(jj_parser_t *p, const char *s, size_t n)
{
    jj_str_t *r = pdr__jj_palloc(p, sizeof(*r) + n + 1);
    r->len = n;
    memcpy(r->p, s, n);
    r->p[n] = '\0';
    return r;
}

static jj_tok_t *push(jj_parser_t *p, int type, uint32_t pos)
{
    if (p->ntoks == p->captoks) {
        size_t cap = p->captoks ? p->captoks * 2 : 256;
        jj_tok_t *nt = realloc(p->toks, cap * sizeof(*nt));
        if (nt == NULL)
            pdr__jj_perr(p, PDR_ENOMEM, pos, "out of memory compiling the template");
        p->toks = nt;
        p->captoks = cap;
    }
    jj_tok_t *tk = &p->toks[p->ntoks++];
    memset(tk, 0, sizeof(*tk));
    tk->type = (uint8_t)type;
    tk->pos = pos;
    return tk;
}

size_t pdr__jj_put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A string literal from s[0] (the quote); Python's escapes (\n \t \\ \' \" \xNN \uNNNN \UNNNNNNNN, octal,
 * \a \b \f \v \r); an unknown escape stays as written. Returns the offset past the closing quote. */
static size_t lex_string(jj_parser_t *p, const char *s, size_t n, size_t i, jj_tok_t *tk)
{
    char q = s[i];
    size_t start = i++;
    char *o = malloc(n - i + 1);
    if (o == NULL)
        pdr__jj_perr(p, PDR_ENOMEM, (uint32_t)start, "out of memory compiling the template");
    size_t k = 0;
    while (i < n && s[i] != q) {
        if (s[i] != '\\' || i + 1 >= n) {
            o[k++] = s[i++];
            continue;
        }
        char c = s[i + 1];
        i += 2;
        int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
        if (digits) {
            uint32_t cp = 0;
            for (int d = 0; d < digits; d++, i++) {
                int h = i < n ? pdr_hex_digit(s[i]) : -1;
                if (h < 0) {
                    free(o);
                    pdr__jj_perr(p, PDR_EINVAL, (uint32_t)start, "truncated \\%c escape in a string", c);
                }
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) {
                free(o);
                pdr__jj_perr(p, PDR_EINVAL, (uint32_t)start, "invalid code point in a string escape");
            }
            k += pdr__jj_put_utf8(o + k, cp);
            continue;
        }
        if (c >= '0' && c <= '7') {
            uint32_t cp = (uint32_t)(c - '0');
            for (int d = 0; d < 2 && i < n && s[i] >= '0' && s[i] <= '7'; d++)
                cp = cp * 8 + (uint32_t)(s[i++] - '0');
            k += pdr__jj_put_utf8(o + k, cp);
            continue;
        }
        const char *from = "ntr\\'\"abfv\n", *to = "\n\t\r\\'\"\a\b\f\v";
        const char *f = c ? strchr(from, c) : NULL;
        if (f == NULL) {
            o[k++] = '\\';
            o[k++] = c;
        } else if (*f != '\n') {
            o[k++] = to[f - from];
        }
    }
    if (i >= n) {
        free(o);
        pdr__jj_perr(p, PDR_EINVAL, (uint32_t)start, "unterminated string");
    }
    tk->s = pdr__jj_pstr(p, o, k);
    free(o);
    return i + 1;
}

static size_t lex_number(jj_parser_t *p, const char *s, size_t n, size_t i, jj_tok_t *tk)
{
    char buf[128];
    size_t k = 0, start = i;
    int is_float = 0;
    for (; i < n && (is_digit(s[i]) || (s[i] == '_' && i + 1 < n && is_digit(s[i + 1]))); i++)
        if (s[i] != '_' && k < sizeof(buf) - 1)
            buf[k++] = s[i];
    if (i + 1 < n && s[i] == '.' && is_digit(s[i + 1])) {
        is_float = 1;
        if (k < sizeof(buf) - 1)
            buf[k++] = '.';
        for (i++; i < n && (is_digit(s[i]) || (s[i] == '_' && i + 1 < n && is_digit(s[i + 1]))); i++)
            if (s[i] != '_' && k < sizeof(buf) - 1)
                buf[k++] = s[i];
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < n && (s[j] == '+' || s[j] == '-'))
            j++;
        if (j < n && is_digit(s[j])) {
            is_float = 1;
            for (; i < j && k < sizeof(buf) - 1; i++)
                buf[k++] = s[i];
            for (; i < n && is_digit(s[i]); i++)
                if (k < sizeof(buf) - 1)
                    buf[k++] = s[i];
        }
    }
    if (k >= sizeof(buf) - 1)
        pdr__jj_perr(p, PDR_EINVAL, (uint32_t)start, "number literal too long");
    buf[k] = '\0';
    char *end;
    if (is_float) {
        tk->type = JT_FLOAT;
        tk->f = strtod(buf, &end);
    } else {
        tk->type = JT_INT;
        errno = 0;
        long long v = strtoll(buf, &end, 10);
        if (errno == ERANGE)
            pdr__jj_perr(p, PDR_EINVAL, (uint32_t)start, "integer literal out of range");
        tk->i = v;
    }
    return i;
}

/* The tokens of one tag, from i (after its opener) to its end marker; returns the offset past the
 * marker and sets *sign to its '-' or '+' (or 0). */
static size_t lex_tag(jj_parser_t *p, const char *s, size_t n, size_t i, int block, int *sign)
{
    static const char *const ops2[] = {"//", "**", "==", "!=", "<=", ">="};
    int balance = 0;
    for (;;) {
        i = skip_space(s, n, i);
        if (i >= n)
            pdr__jj_perr(p, PDR_EINVAL, (uint32_t)n, "unexpected end of template, expected '%s'",
                         block ? "%}" : "}}");
        const char *end = block ? "%}" : "}}";
        if (balance == 0) {
            if ((s[i] == '-' || (block && s[i] == '+')) && i + 2 < n && memcmp(s + i + 1, end, 2) == 0) {
                *sign = s[i];
                return i + 3;
            }
            if (i + 1 < n && memcmp(s + i, end, 2) == 0) {
                *sign = 0;
                return i + 2;
            }
        }
        jj_tok_t *tk = push(p, JT_OP, (uint32_t)i);
        char c = s[i];
        if (is_name_start(c)) {
            size_t j = i;
            while (j < n && (is_name_start(s[j]) || is_digit(s[j])))
                j++;
            tk->type = JT_NAME;
            tk->s = pdr__jj_pstr(p, s + i, j - i);
            i = j;
        } else if (is_digit(c)) {
            i = lex_number(p, s, n, i, tk);
        } else if (c == '\'' || c == '"') {
            tk->type = JT_STR;
            i = lex_string(p, s, n, i, tk);
        } else {
            size_t k;
            for (k = 0; k < sizeof(ops2) / sizeof(ops2[0]); k++)
                if (i + 1 < n && memcmp(s + i, ops2[k], 2) == 0)
                    break;
            if (k < sizeof(ops2) / sizeof(ops2[0])) {
                memcpy(tk->op, ops2[k], 2);
                i += 2;
            } else if (strchr("+-*/%~<>=.,:|()[]{}", c) != NULL && c != '\0') {
                tk->op[0] = c;
                balance += (c == '(' || c == '[' || c == '{') - (c == ')' || c == ']' || c == '}');
                if (balance < 0)
                    balance = 0;
                i++;
            } else {
                pdr__jj_perr(p, PDR_EINVAL, (uint32_t)i, "unexpected character '%c'", c);
            }
        }
    }
}

static void emit_text(jj_parser_t *p, const char *s, size_t from, size_t to)
{
    if (to > from) {
        jj_tok_t *tk = push(p, JT_TEXT, (uint32_t)from);
        tk->s = pdr__jj_pstr(p, s + from, to - from);
    }
}

/* {% raw %} at i (just after "{%" and its sign)? Returns the offset past "%}" of the tag, or 0. */
static size_t raw_begin(const char *s, size_t n, size_t i, int *endsign)
{
    i = skip_space(s, n, i);
    if (n - i < 3 || memcmp(s + i, "raw", 3) != 0)
        return 0;
    i += 3;
    if (i < n && (is_name_start(s[i]) || is_digit(s[i])))
        return 0;
    i = skip_space(s, n, i);
    /* jinja2's raw_begin takes "-%}" or "%}" only: "+%}" makes it an ordinary (unknown) tag. */
    *endsign = 0;
    if (i < n && s[i] == '-')
        *endsign = s[i++];
    return n - i >= 2 && memcmp(s + i, "%}", 2) == 0 ? i + 2 : 0;
}

/* lstrip_blocks: the end of text s[from, to) before a block or comment tag, without the blanks that
 * precede the tag on its line when nothing else does (line_starting: from is at the start of a line). */
static size_t lstrip_end(const char *s, size_t from, size_t to, int line_starting)
{
    size_t l = to;
    while (l > from && s[l - 1] != '\n')
        l--;
    if (l > from || line_starting) {
        if (skip_space(s, to, l) == to && to > l)
            return l;
    }
    return to;
}

/* After a tag's end marker at i: "-" strips the blanks that follow, a block or comment tag without "+"
 * drops one newline (trim_blocks). */
static size_t after_tag(const char *s, size_t n, size_t i, int sign, int block)
{
    if (sign == '-') {
        i = skip_space(s, n, i);
    } else if (block && sign != '+' && i < n && s[i] == '\n') {
        i++;
    }
    return i;
}

void pdr__jj_lex(jj_parser_t *p)
{
    const char *s = p->t->src;
    size_t n = p->t->src_len, i = 0;
    while (i < n) {
        const char *q = s + i;
        size_t tag = n;
        while ((q = memchr(q, '{', (size_t)(s + n - q))) != NULL) {
            if (q + 1 < s + n && (q[1] == '{' || q[1] == '%' || q[1] == '#')) {
                tag = (size_t)(q - s);
                break;
            }
            q++;
        }
        if (tag == n) {
            emit_text(p, s, i, n);
            break;
        }
        int kind = s[tag + 1],
            bsign = tag + 2 < n && (s[tag + 2] == '-' || s[tag + 2] == '+') ? s[tag + 2] : 0;
        size_t tend = tag;
        int line_starting = i == 0 || s[i - 1] == '\n';
        if (bsign == '-') {
            tend = back_space(s, i, tend);
        } else if (bsign != '+' && kind != '{') {
            tend = lstrip_end(s, i, tend, line_starting);
        }
        emit_text(p, s, i, tend);
        size_t j = tag + 2 + (bsign ? 1 : 0);
        int sign;
        if (kind == '#') {
            const char *e = j <= n ? pdr__jj_find(s + j, n - j, "#}", 2) : NULL;
            if (e == NULL)
                pdr__jj_perr(p, PDR_EINVAL, (uint32_t)tag, "unterminated comment");
            size_t at = (size_t)(e - s);
            sign = at > j && (s[at - 1] == '-' || s[at - 1] == '+') ? s[at - 1] : 0;
            i = after_tag(s, n, at + 2, sign, 1);
            continue;
        }
        size_t rawend;
        int rsign;
        if (kind == '%' && (rawend = raw_begin(s, n, j, &rsign)) != 0) {
            /* No trim_blocks after {% raw %}: jinja2's raw_begin has no "\n?". */
            size_t k = after_tag(s, n, rawend, rsign, 0), body = k;
            for (;;) {
                const char *e = k <= n ? pdr__jj_find(s + k, n - k, "{%", 2) : NULL;
                if (e == NULL)
                    pdr__jj_perr(p, PDR_EINVAL, (uint32_t)tag, "unterminated raw block");
                size_t at = (size_t)(e - s), m = at + 2;
                int esign = m < n && (s[m] == '-' || s[m] == '+') ? s[m] : 0;
                m += esign ? 1 : 0;
                m = skip_space(s, n, m);
                if (n - m >= 6 && memcmp(s + m, "endraw", 6) == 0) {
                    size_t x = m + 6;
                    x = skip_space(s, n, x);
                    int xsign = 0;
                    if (x < n && (s[x] == '-' || s[x] == '+'))
                        xsign = s[x++];
                    if (n - x >= 2 && memcmp(s + x, "%}", 2) == 0) {
                        size_t te = at;
                        if (esign == '-')
                            te = back_space(s, body, te);
                        else if (esign != '+')
                            te = lstrip_end(s, body, te, body == 0 || s[body - 1] == '\n');
                        emit_text(p, s, body, te);
                        i = after_tag(s, n, x + 2, xsign, 1);
                        break;
                    }
                }
                k = at + 2;
            }
            continue;
        }
        push(p, kind == '%' ? JT_BBEGIN : JT_VBEGIN, (uint32_t)tag);
        size_t after = lex_tag(p, s, n, j, kind == '%', &sign);
        push(p, kind == '%' ? JT_BEND : JT_VEND, (uint32_t)(after - 2));
        i = after_tag(s, n, after, sign, kind == '%');
    }
    push(p, JT_EOF, (uint32_t)n);
}
