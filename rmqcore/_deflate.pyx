# Deflater: zlib streams (what a message's sysFlag COMPRESSED says its body
# is) from one z_stream kept for the deflater's life. zlib.compress sets up
# and frees deflate's state, 150 KB or more, for every body; for bodies of a
# few KB that set-up costs more than the compression itself. The state is set
# up at the first body (most producers never compress one), and the output
# scratch kept between bodies is bounded by _KEPT_SCRATCH.
from libc.stdlib cimport free, malloc
from libc.string cimport memset

cdef extern from "zlib.h":
    ctypedef struct z_stream:
        unsigned char *next_in
        unsigned int avail_in
        unsigned char *next_out
        unsigned int avail_out
        const char *msg
        void *zalloc
        void *zfree
        void *opaque
    int Z_OK
    int Z_STREAM_END
    int Z_FINISH
    int Z_DEFLATED
    int Z_DEFAULT_STRATEGY
    int MAX_WBITS
    int deflateInit2(z_stream *strm, int level, int method, int windowBits, int memLevel,
                     int strategy)
    int deflate(z_stream *strm, int flush)
    int deflateReset(z_stream *strm)
    int deflateEnd(z_stream *strm)
    unsigned long deflateBound(z_stream *strm, unsigned long source_len)


#: output scratch a Deflater keeps for the next body; a larger body's is freed
cdef enum:
    _KEPT_SCRATCH = 256 * 1024


cdef class Deflater:
    """deflater.compress(body) -> body as a zlib stream (any zlib reader
    inflates it), at `level` (0..9) with zlib's `mem_level` (1..9, zlib's
    default 8). One deflater is used by one thread at a time (an event
    loop's): it holds the GIL throughout."""

    cdef z_stream zs
    cdef bint ready
    cdef unsigned char *out
    cdef unsigned long out_cap
    cdef readonly int level
    cdef readonly int mem_level

    def __cinit__(self, int level, int mem_level=8):
        if not 0 <= level <= 9:
            raise ValueError(f"level must be 0..9 (zlib), got {level}")
        if not 1 <= mem_level <= 9:
            raise ValueError(f"mem_level must be 1..9 (zlib), got {mem_level}")
        self.out = NULL
        self.out_cap = 0
        self.ready = False
        memset(&self.zs, 0, sizeof(z_stream))
        self.level = level
        self.mem_level = mem_level

    def __dealloc__(self):
        if self.ready:
            deflateEnd(&self.zs)
        free(self.out)

    def compress(self, const unsigned char[::1] body not None):
        cdef Py_ssize_t n = body.shape[0]
        cdef unsigned long bound
        cdef int rc
        if n > 0x7FFFFFFF:
            raise ValueError(f"a body of {n} bytes is too large to compress")
        if not self.ready:
            if deflateInit2(&self.zs, self.level, Z_DEFLATED, MAX_WBITS, self.mem_level,
                            Z_DEFAULT_STRATEGY) != Z_OK:
                raise MemoryError("zlib could not set up a deflate stream")
            self.ready = True
        bound = deflateBound(&self.zs, <unsigned long>n)
        if bound > self.out_cap:
            free(self.out)
            self.out = <unsigned char *>malloc(bound)
            if self.out == NULL:
                self.out_cap = 0
                raise MemoryError()
            self.out_cap = bound
        deflateReset(&self.zs)
        # zlib reads next_in and never writes it (z_const without ZLIB_CONST)
        self.zs.next_in = <unsigned char *>&body[0] if n else NULL
        self.zs.avail_in = <unsigned int>n
        self.zs.next_out = self.out
        self.zs.avail_out = <unsigned int>bound
        rc = deflate(&self.zs, Z_FINISH)
        if rc != Z_STREAM_END:
            deflateReset(&self.zs)
            raise RuntimeError(f"deflate failed ({rc})")
        out = (<char *>self.out)[:bound - self.zs.avail_out]
        if self.out_cap > _KEPT_SCRATCH:
            free(self.out)
            self.out = NULL
            self.out_cap = 0
        return out
