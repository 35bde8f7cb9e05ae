/* remoting_header.h: the JSON form of a RemotingCommand header, parsed and
 * escaped in C (the per-request hot path of the broker).
 *
 * The wire layout of frames and headers is specified once, in the docstring
 * of pyrmq/remoting/command.py; this file implements the JSON header part.
 *
 * Accepted input: one JSON object (RFC 8259; any whitespace, any key order,
 * unknown keys skipped whatever their value), optionally followed by
 * whitespace (the C++ client appends '\n'). Keys used:
 *   code, opaque, flag, version   integers (a JSON number, or a string of one)
 *   language, remark              strings (null allowed)
 *   extFields                     an object (null allowed) of at most
 *                                 RMQ_HEADER_MAX_FIELDS members whose values
 *                                 may be any JSON value: strings are reported
 *                                 as strings, any other value as its raw text
 *                                 (numbers as sent, true/false/null, nested
 *                                 objects/arrays verbatim).
 * Nesting deeper than RMQ_HEADER_MAX_DEPTH is refused (no recursion bomb).
 * Nothing is allocated: results are spans into the input. */
#ifndef RMQ_REMOTING_HEADER_H
#define RMQ_REMOTING_HEADER_H

#include <stddef.h>
#include <stdint.h>

#define RMQ_HEADER_MAX_FIELDS 256
#define RMQ_HEADER_MAX_DEPTH 32

/* A span of the input. For strings: the bytes between the quotes, still
 * escaped when `escaped` is set. kind: 's' string, 'n' number, 't' true,
 * 'f' false, 'z' null, 'o' object, 'a' array. */
typedef struct {
    const char *p;
    size_t n;
    char kind;
    char escaped;
} rmq_json_span_t;

typedef struct {
    int64_t code, opaque, flag, version;
    int has_code;
    int non_ascii; /* a string holds a byte >= 0x80 (UTF-8 not checked) */
    rmq_json_span_t language, remark; /* kind 'z' when absent or null */
    size_t nfields;
    rmq_json_span_t keys[RMQ_HEADER_MAX_FIELDS];
    rmq_json_span_t values[RMQ_HEADER_MAX_FIELDS];
    size_t error_at; /* byte offset of the first error */
    const char *error; /* static text of the first error */
} rmq_json_header_t;

/* Parse a JSON header. RMQ_OK, or RMQ_EBAD_ARG with out->error/error_at set.
 * Pure function of its input; thread-safe. */
int rmq_json_header_parse(const char *buf, size_t n, rmq_json_header_t *out);

/* Unescape a string span into out (which must hold span->n bytes: the
 * result is never longer); writes UTF-8 (a lone surrogate becomes U+FFFD).
 * Returns the output length, or -1 on a malformed escape. */
ptrdiff_t rmq_json_unescape(const char *in, size_t n, char *out);

/* Worst-case output size of rmq_json_escape for n input bytes. */
#define RMQ_JSON_ESCAPE_MAX(n) ((n) * 6)

/* Escape UTF-8 text for a JSON string body (no quotes added): '"', '\\' and
 * control characters below 0x20 are escaped (\u00XX or the short forms).
 * Returns the number of bytes written to out. */
size_t rmq_json_escape(const char *in, size_t n, char *out);

/* Nonzero when in[0..n) needs no escaping. */
int rmq_json_plain(const char *in, size_t n);

#endif /* RMQ_REMOTING_HEADER_H */
