# The broker's C send threads (issue 18, more than one core): chunks of a
# connection's frames served by _sendpath.pyx's _serve on plain C threads
# (csrc/lane_pool.c) while the event loop goes on with other connections.
#
# The loop hands a chunk over (SendPath.submit) and reads no more of that
# connection until it comes back: one chunk of a connection in flight at a
# time keeps its requests in order. The pool's eventfd wakes the loop, which
# collects the chunks served (SendPath.collect) and finishes them as it
# finishes an inline split's: bookkeeping, answers, then the frames after
# the taken ones through the Python path. The store serializes the puts of
# the threads and the loop's own store calls by its owner lock
# (csrc/message_store.h); the threads never take the GIL.
from cpython.ref cimport Py_DECREF, Py_INCREF
from posix.unistd cimport getpid


cdef struct sp_job_t:
    rmq_lane_job base  # first: the pool sees an rmq_lane_job
    sp_out_t out
    const uint8_t *buf
    Py_ssize_t n
    Py_ssize_t max_frame
    const uint8_t *born_host
    Py_ssize_t bhl
    PyObject *keep  # (data, born_host, token): alive while the job is out


cdef void _job_free(sp_job_t *j) noexcept nogil:
    """A job and what serving it allocated (not its keep reference)."""
    _out_free(&j.out)
    free(j)


cdef struct sp_lanes_ctx_t:
    sp_shared_t *S
    sp_scratch_t *scratch  # one per thread


cdef void _lane_serve(void *ctx, int lane, rmq_lane_job *job) noexcept nogil:
    cdef sp_lanes_ctx_t *c = <sp_lanes_ctx_t *>ctx
    cdef sp_job_t *j = <sp_job_t *>job
    _serve(c.S, &c.scratch[lane], &j.out, j.buf, j.n, j.max_frame, j.born_host, j.bhl)


cdef class SendLanes:
    """The C send threads of one SendPath (see the module comment)."""
    cdef rmq_lanes *pool
    cdef sp_lanes_ctx_t ctx
    cdef int threads

    def __cinit__(self):
        self.pool = NULL

    cdef int open(self, SendPath sp, int threads) except -1:
        self.ctx.S = &sp.S
        self.ctx.scratch = <sp_scratch_t *>calloc(<size_t>threads, sizeof(sp_scratch_t))
        if self.ctx.scratch == NULL:
            raise MemoryError()
        _raise_for(rmq_lanes_open(&self.pool, threads, b"SendMessage", _lane_serve, &self.ctx),
                   "cannot start the C send threads")
        self.threads = threads
        return 0

    cdef bint mine(self):
        if self.pool == NULL:
            return False
        if rmq_lanes_pid(self.pool) != getpid():
            self.pool = NULL  # a forked parent's: its threads are not here
            return False
        return True

    cdef list take(self, rmq_lane_job *jobs):
        """The chunks of a list of jobs back from the pool, each with its
        token, freed (unserved ones: nothing taken, every frame the Python
        path's)."""
        cdef rmq_lane_job *nxt
        cdef sp_job_t *j
        cdef SendChunk c
        out = []
        while jobs != NULL:
            nxt = jobs.next
            j = <sp_job_t *>jobs
            keep = <object>j.keep
            Py_DECREF(keep)
            try:
                if not jobs.served:
                    _out_reset(&j.out, False)
                c = _chunk_of(&j.out)
                c.token = keep[2]
                c.frames, c.used, c.error = _split_from(j.buf, j.n, j.out.pos, j.max_frame)
                out.append(c)
            finally:
                _job_free(j)
            jobs = nxt
        return out

    def close(self):
        """Stop the threads (each after the chunk it serves); the chunks
        not yet collected, served or not."""
        cdef rmq_lane_job *jobs
        if not self.mine():
            return []
        with nogil:
            jobs = rmq_lanes_close(self.pool)
        self.pool = NULL
        return self.take(jobs)

    def __dealloc__(self):
        cdef rmq_lane_job *jobs
        cdef rmq_lane_job *nxt
        cdef int i
        if self.mine():
            with nogil:
                jobs = rmq_lanes_close(self.pool)
            self.pool = NULL
            while jobs != NULL:
                nxt = jobs.next
                Py_DECREF(<object>(<sp_job_t *>jobs).keep)
                _job_free(<sp_job_t *>jobs)
                jobs = nxt
        if self.ctx.scratch != NULL:
            for i in range(self.threads):
                free(self.ctx.scratch[i].props)
            free(self.ctx.scratch)

