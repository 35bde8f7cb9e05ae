# Deflater: zlib streams (what a message's sysFlag COMPRESSED says its body
# is) from one rmq_deflater (csrc/deflate.h: one z_stream kept for the
# deflater's life, set up at the first body); the output scratch kept
# between bodies is bounded by _KEPT_SCRATCH.
#
# DeflateWorker: the same, on a C thread of its own (csrc/deflate_worker.c)
# that never takes the GIL, for an event loop that must not spend its time
# compressing (a traced producer's trace messages).
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.stdlib cimport free, malloc
from posix.unistd cimport getpid


#: output scratch a Deflater keeps for the next body; a larger body's is freed
cdef enum:
    _KEPT_SCRATCH = 256 * 1024


cdef class Deflater:
    """deflater.compress(body) -> body as a zlib stream (any zlib reader
    inflates it), at `level` (0..9) with zlib's `mem_level` (1..9, zlib's
    default 8). One deflater is used by one thread at a time (an event
    loop's): it holds the GIL throughout."""

    cdef rmq_deflater d
    cdef unsigned char *out
    cdef size_t out_cap
    cdef readonly int level
    cdef readonly int mem_level

    def __cinit__(self, int level, int mem_level=8):
        self.out = NULL
        self.out_cap = 0
        if not 0 <= level <= 9:
            raise ValueError(f"level must be 0..9 (zlib), got {level}")
        if not 1 <= mem_level <= 9:
            raise ValueError(f"mem_level must be 1..9 (zlib), got {mem_level}")
        rmq_deflater_init(&self.d, level, mem_level)
        self.level = level
        self.mem_level = mem_level

    def __dealloc__(self):
        rmq_deflater_end(&self.d)
        free(self.out)

    def compress(self, const unsigned char[::1] body not None):
        cdef Py_ssize_t n = body.shape[0]
        cdef size_t bound, got
        cdef int rc
        if <size_t>n > RMQ_DEFLATE_MAX_INPUT:
            raise ValueError(f"a body of {n} bytes is too large to compress")
        bound = rmq_deflater_bound(&self.d, <size_t>n)
        if bound == 0:
            raise MemoryError("zlib could not set up a deflate stream")
        if bound > self.out_cap:
            free(self.out)
            self.out = <unsigned char *>malloc(bound)
            if self.out == NULL:
                self.out_cap = 0
                raise MemoryError()
            self.out_cap = bound
        rc = rmq_deflater_compress(&self.d, &body[0] if n else NULL, <size_t>n, self.out,
                                   self.out_cap, &got)
        if rc != 0:
            raise RuntimeError(f"deflate failed ({rmq_strerror(rc).decode()})")
        out = (<char *>self.out)[:got]
        if self.out_cap > _KEPT_SCRATCH:
            free(self.out)
            self.out = NULL
            self.out_cap = 0
        return out


cdef list _take_jobs(rmq_deflate_job *job):
    """(zlib stream or None, body, token) of each job, in order; the jobs
    are freed and their references dropped, whatever happens."""
    cdef rmq_deflate_job *nxt
    cdef list out = []
    try:
        while job != NULL:
            # what can raise (MemoryError) comes before the job is freed or
            # after it is gone: never a job half given back
            stream = (<char *>job.out)[:job.out_len] if job.rc == 0 else None
            item = <tuple>job.token  # a new reference: the job's is dropped
            Py_DECREF(item)
            nxt = rmq_deflate_next(job)
            rmq_deflate_job_free(job)
            job = nxt
            out.append((stream, item[0], item[1]))
    finally:
        while job != NULL:  # only after an exception (MemoryError)
            Py_DECREF(<object>job.token)
            nxt = rmq_deflate_next(job)
            rmq_deflate_job_free(job)
            job = nxt
    return out


cdef class DeflateWorker:
    """Compresses bodies into zlib streams, as Deflater does, on a C thread
    of its own that never takes the GIL: submit(body, token) queues a body
    and returns at once, done() gives back what is compressed so far. The
    thread starts at the first body. Nothing here waits on the thread but
    close() (and a worker's end), which waits for the one body being
    compressed, if any. In a forked child a worker starts a thread of its
    own; the parent's jobs stay with the parent."""

    cdef rmq_deflate_worker *w
    cdef readonly int level
    cdef readonly Py_ssize_t max_pending

    def __cinit__(self, int level, Py_ssize_t max_pending=64):
        if not 0 <= level <= 9:
            raise ValueError(f"level must be 0..9 (zlib), got {level}")
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, got {max_pending}")
        self.w = NULL
        self.level = level
        self.max_pending = max_pending

    cdef bint _mine(self):
        """The worker's thread runs in this process (not a forked parent's)."""
        if self.w == NULL:
            return False
        if rmq_deflate_worker_pid(self.w) != getpid():
            self.w = NULL  # the parent's: its thread is not here; left as it is
            return False
        return True

    def submit(self, bytes body not None, token=None):
        """Queue `body` to be compressed: True, or False when max_pending
        bodies are out (not yet taken back by done); then compress it some
        other way. The body is kept, unchanged, until done gives it back."""
        cdef int rc
        cdef Py_ssize_t n = PyBytes_GET_SIZE(body)
        if <size_t>n > RMQ_DEFLATE_MAX_INPUT:
            raise ValueError(f"a body of {n} bytes is too large to compress")
        if not self._mine():
            rc = rmq_deflate_worker_open(&self.w, self.level, <size_t>self.max_pending)
            if rc != 0:
                self.w = NULL
                _raise_for(rc, "cannot start a compression thread")
        item = (body, token)
        rc = rmq_deflate_worker_submit(
            self.w, <const unsigned char *>PyBytes_AS_STRING(body), <size_t>n,
            <void *>item)
        if rc == RMQ_EFULL:
            return False
        _raise_for(rc, "cannot queue a body to compress")
        Py_INCREF(item)  # the job's reference, dropped when it comes back
        return True

    def done(self):
        """[(zlib stream, body, token), ...] of the bodies compressed since
        the last call, in the order submitted; the stream is None for a
        body zlib could not compress (no memory)."""
        if not self._mine():
            return []
        return _take_jobs(rmq_deflate_worker_done(self.w))

    @property
    def pending(self):
        """Bodies submitted and not yet taken back by done."""
        return rmq_deflate_worker_pending(self.w) if self._mine() else 0

    def close(self):
        """Stop the thread (after the body it is compressing, if any) and
        give back every body not yet taken back, as done() does: the
        stream is None for those it had not compressed."""
        cdef rmq_deflate_job *jobs
        if not self._mine():
            return []
        with nogil:
            jobs = rmq_deflate_worker_close(self.w)
        self.w = NULL
        return _take_jobs(jobs)

    def __dealloc__(self):
        cdef rmq_deflate_job *jobs
        cdef rmq_deflate_job *nxt
        if not self._mine():
            return
        with nogil:
            jobs = rmq_deflate_worker_close(self.w)
        self.w = NULL
        while jobs != NULL:
            Py_DECREF(<object>jobs.token)
            nxt = rmq_deflate_next(jobs)
            rmq_deflate_job_free(jobs)
            jobs = nxt
