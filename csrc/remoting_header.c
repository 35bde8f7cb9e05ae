/* remoting_header.c: see remoting_header.h. */
#include "remoting_header.h"

#include <stdint.h>
#include <string.h>

#include "rmq_errors.h"

typedef struct {
    const char *p, *end, *start;
    const char *error;
    const char *error_p;
    uint64_t seen; /* string bytes OR'ed together (and some after them) */
} cur_t;

static int fail(cur_t *c, const char *msg) {
    if (!c->error) {
        c->error = msg;
        c->error_p = c->p;
    }
    return -1;
}

static void ws(cur_t *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* Of 8 bytes, those string_span must look at one by one: a quote, a
 * backslash, a control character. Nonzero when there is one; each of the
 * three has-a-byte tests is exact for "any", and its lowest flagged byte is
 * a true one (a false flag only follows a true one), so on a little-endian
 * machine the lowest flag is the first stop. */
static inline uint64_t string_stops(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ULL;
    uint64_t q = w ^ (ones * (uint64_t)'"');
    uint64_t b = w ^ (ones * (uint64_t)'\\');
    return (((q - ones) & ~q) | ((b - ones) & ~b) | ((w - ones * 0x20U) & ~w)) &
           0x8080808080808080ULL;
}

/* At an opening quote: scan the string, set span to its body. Plain bytes
 * are skipped eight at a time (the C++ client's header is ~300 bytes of
 * strings; byte by byte this was a tenth of the broker's instructions a
 * send). Every byte of the string goes into c->seen, and so may up to 7
 * bytes after it: they are the header's too, and a byte outside a string
 * with its high bit set fails the parse anyway. */
static int string_span(cur_t *c, rmq_json_span_t *s) {
    c->p++; /* the quote */
    const char *b = c->p;
    char escaped = 0;
    while (c->p < c->end) {
        if (c->end - c->p >= 8) {
            uint64_t w;
            memcpy(&w, c->p, 8);
            c->seen |= w;
            uint64_t stops = string_stops(w);
            if (!stops) {
                c->p += 8;
                continue;
            }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            c->p += __builtin_ctzll(stops) >> 3;
#endif
        }
        unsigned char ch = (unsigned char)*c->p;
        c->seen |= ch;
        if (ch == '"') {
            s->p = b;
            s->n = (size_t)(c->p - b);
            s->kind = 's';
            s->escaped = escaped;
            c->p++;
            return 0;
        }
        if (ch < 0x20) return fail(c, "control character in a string");
        if (ch == '\\') {
            escaped = 1;
            if (c->end - c->p < 2) break;
            char e = c->p[1];
            if (e == 'u') {
                if (c->end - c->p < 6) break;
                for (int i = 2; i < 6; i++)
                    if (hexval(c->p[i]) < 0) return fail(c, "bad \\u escape");
                c->p += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || e == 0) return fail(c, "bad escape in a string");
            c->p += 2;
            continue;
        }
        c->p++;
    }
    return fail(c, "unterminated string");
}

static int number_span(cur_t *c, rmq_json_span_t *s) {
    const char *b = c->p;
    if (c->p < c->end && *c->p == '-') c->p++;
    if (c->p >= c->end) return fail(c, "bad number");
    if (*c->p == '0') {
        c->p++;
    } else if (*c->p >= '1' && *c->p <= '9') {
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') c->p++;
    } else {
        return fail(c, "bad number");
    }
    if (c->p < c->end && *c->p == '.') {
        c->p++;
        if (c->p >= c->end || *c->p < '0' || *c->p > '9') return fail(c, "bad number");
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') c->p++;
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        c->p++;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-')) c->p++;
        if (c->p >= c->end || *c->p < '0' || *c->p > '9') return fail(c, "bad number");
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') c->p++;
    }
    s->p = b;
    s->n = (size_t)(c->p - b);
    s->kind = 'n';
    s->escaped = 0;
    return 0;
}

static int literal(cur_t *c, const char *word, char kind, rmq_json_span_t *s) {
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return fail(c, "bad literal");
    s->p = c->p;
    s->n = n;
    s->kind = kind;
    s->escaped = 0;
    c->p += n;
    return 0;
}

/* Any JSON value; containers are skipped and reported as their raw text. */
static int value(cur_t *c, rmq_json_span_t *s, int depth) {
    ws(c);
    if (c->p >= c->end) return fail(c, "value expected");
    char ch = *c->p;
    if (ch == '"') return string_span(c, s);
    if (ch == '-' || (ch >= '0' && ch <= '9')) return number_span(c, s);
    if (ch == 't') return literal(c, "true", 't', s);
    if (ch == 'f') return literal(c, "false", 'f', s);
    if (ch == 'n') return literal(c, "null", 'z', s);
    if (ch != '{' && ch != '[') return fail(c, "value expected");
    if (depth >= RMQ_HEADER_MAX_DEPTH) return fail(c, "nested too deep");
    const char *b = c->p;
    char close = ch == '{' ? '}' : ']';
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
    } else {
        for (;;) {
            rmq_json_span_t tmp;
            if (close == '}') {
                ws(c);
                if (c->p >= c->end || *c->p != '"') return fail(c, "object key expected");
                if (string_span(c, &tmp)) return -1;
                ws(c);
                if (c->p >= c->end || *c->p != ':') return fail(c, "':' expected");
                c->p++;
            }
            if (value(c, &tmp, depth + 1)) return -1;
            ws(c);
            if (c->p < c->end && *c->p == ',') {
                c->p++;
                continue;
            }
            if (c->p < c->end && *c->p == close) {
                c->p++;
                break;
            }
            return fail(c, "',' or end of container expected");
        }
    }
    s->p = b;
    s->n = (size_t)(c->p - b);
    s->kind = close == '}' ? 'o' : 'a';
    s->escaped = 0;
    return 0;
}

static int key_is(const rmq_json_span_t *k, const char *name) {
    size_t n = strlen(name);
    return !k->escaped && k->n == n && memcmp(k->p, name, n) == 0;
}

/* An integer header member: a number without fraction/exponent, or a string
 * holding one. */
static int to_int(cur_t *c, const rmq_json_span_t *v, int64_t *out) {
    if (v->kind != 'n' && v->kind != 's') return fail(c, "integer expected");
    const char *p = v->p, *e = v->p + v->n;
    int neg = 0;
    if (p < e && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= e) return fail(c, "integer expected");
    uint64_t acc = 0;
    for (; p < e; p++) {
        if (*p < '0' || *p > '9') return fail(c, "integer expected");
        acc = acc * 10 + (uint64_t)(*p - '0');
        if (acc > (uint64_t)INT64_MAX) return fail(c, "integer out of range");
    }
    *out = neg ? -(int64_t)acc : (int64_t)acc;
    return 0;
}

static int ext_fields(cur_t *c, rmq_json_header_t *out) {
    c->p++; /* '{' */
    ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 0;
    }
    for (;;) {
        ws(c);
        if (c->p >= c->end || *c->p != '"') return fail(c, "extFields key expected");
        if (out->nfields >= RMQ_HEADER_MAX_FIELDS) return fail(c, "too many extFields");
        rmq_json_span_t *k = &out->keys[out->nfields];
        rmq_json_span_t *v = &out->values[out->nfields];
        if (string_span(c, k)) return -1;
        ws(c);
        if (c->p >= c->end || *c->p != ':') return fail(c, "':' expected");
        c->p++;
        if (value(c, v, 1)) return -1;
        out->nfields++;
        ws(c);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            continue;
        }
        if (c->p < c->end && *c->p == '}') {
            c->p++;
            return 0;
        }
        return fail(c, "',' or '}' expected in extFields");
    }
}

int rmq_json_header_parse(const char *buf, size_t n, rmq_json_header_t *out) {
    cur_t c = {buf, buf + n, buf, NULL, NULL, 0};
    memset(out, 0, offsetof(rmq_json_header_t, keys));
    out->language.kind = 'z';
    out->remark.kind = 'z';
    out->error = NULL;
    ws(&c);
    if (c.p >= c.end || *c.p != '{') {
        fail(&c, "a JSON object expected");
        goto bad;
    }
    c.p++;
    ws(&c);
    if (c.p < c.end && *c.p == '}') {
        c.p++;
    } else {
        for (;;) {
            rmq_json_span_t k, v;
            ws(&c);
            if (c.p >= c.end || *c.p != '"') {
                fail(&c, "object key expected");
                goto bad;
            }
            if (string_span(&c, &k)) goto bad;
            ws(&c);
            if (c.p >= c.end || *c.p != ':') {
                fail(&c, "':' expected");
                goto bad;
            }
            c.p++;
            ws(&c);
            if (key_is(&k, "extFields") && c.p < c.end && *c.p == '{') {
                if (ext_fields(&c, out)) goto bad;
            } else {
                if (value(&c, &v, 1)) goto bad;
                if (key_is(&k, "code")) {
                    if (to_int(&c, &v, &out->code)) goto bad;
                    out->has_code = 1;
                } else if (key_is(&k, "opaque")) {
                    if (v.kind != 'z' && to_int(&c, &v, &out->opaque)) goto bad;
                } else if (key_is(&k, "flag")) {
                    if (v.kind != 'z' && to_int(&c, &v, &out->flag)) goto bad;
                } else if (key_is(&k, "version")) {
                    if (v.kind != 'z' && to_int(&c, &v, &out->version)) goto bad;
                } else if (key_is(&k, "language")) {
                    if (v.kind == 's') out->language = v;
                } else if (key_is(&k, "remark")) {
                    if (v.kind == 's') out->remark = v;
                } else if (key_is(&k, "extFields")) {
                    if (v.kind != 'z') {
                        fail(&c, "extFields is not an object");
                        goto bad;
                    }
                }
            }
            ws(&c);
            if (c.p < c.end && *c.p == ',') {
                c.p++;
                continue;
            }
            if (c.p < c.end && *c.p == '}') {
                c.p++;
                break;
            }
            fail(&c, "',' or '}' expected");
            goto bad;
        }
    }
    ws(&c);
    if (c.p != c.end) {
        fail(&c, "bytes after the header object");
        goto bad;
    }
    if (!out->has_code) {
        c.error_p = c.p;
        c.error = "the header has no code";
        goto bad;
    }
    out->non_ascii = (c.seen & 0x8080808080808080ULL) != 0;
    return RMQ_OK;
bad:
    out->error = c.error ? c.error : "malformed header";
    out->error_at = (size_t)((c.error_p ? c.error_p : c.p) - buf);
    return RMQ_EBAD_ARG;
}

static size_t put_utf8(uint32_t cp, char *o) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int hex4(const char *p, uint32_t *v) {
    uint32_t acc = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return -1;
        acc = acc * 16 + (uint32_t)h;
    }
    *v = acc;
    return 0;
}

ptrdiff_t rmq_json_unescape(const char *in, size_t n, char *out) {
    const char *p = in, *e = in + n;
    char *o = out;
    while (p < e) {
        if (*p != '\\') {
            *o++ = *p++;
            continue;
        }
        if (e - p < 2) return -1;
        char c = p[1];
        p += 2;
        switch (c) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (e - p < 4 || hex4(p, &cp)) return -1;
            p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (e - p >= 6 && p[0] == '\\' && p[1] == 'u' && !hex4(p + 2, &lo) &&
                    lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                } else {
                    cp = 0xFFFD;
                }
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                cp = 0xFFFD;
            }
            o += put_utf8(cp, o);
            break;
        }
        default:
            return -1;
        }
    }
    return o - out;
}

static const char HEX[] = "0123456789abcdef";

int rmq_json_plain(const char *in, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)in[i];
        if (ch < 0x20 || ch == '"' || ch == '\\') return 0;
    }
    return 1;
}

size_t rmq_json_escape(const char *in, size_t n, char *out) {
    char *o = out;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)in[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\') {
            *o++ = (char)ch;
            continue;
        }
        *o++ = '\\';
        switch (ch) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\n': *o++ = 'n'; break;
        case '\r': *o++ = 'r'; break;
        case '\t': *o++ = 't'; break;
        case '\b': *o++ = 'b'; break;
        case '\f': *o++ = 'f'; break;
        default:
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = HEX[ch >> 4];
            *o++ = HEX[ch & 15];
        }
    }
    return (size_t)(o - out);
}
