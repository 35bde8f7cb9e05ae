# The state the common send's C path serves with (_sendpath.pyx's _serve):
# what a SendPath shares with the threads serving its chunks (the topics
# the Python path taught it, under their lock), a thread's scratch, and
# what serving a chunk leaves (sp_out_t). All of it is plain C that never
# needs the GIL.
from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memcmp, memcpy, memset


cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_mutexattr_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a)
    int pthread_mutex_destroy(pthread_mutex_t *m)
    int pthread_mutex_lock(pthread_mutex_t *m)
    int pthread_mutex_unlock(pthread_mutex_t *m)


cdef extern from *:
    long long __atomic_add_fetch(long long *p, long long v, int order) nogil
    long long __atomic_load_n(long long *p, int order) nogil
    int __ATOMIC_RELEASE
    int __ATOMIC_ACQUIRE


# The topics the Python path has served a plain send to, with their queue
# count: an open-addressing table (len 0: a free slot) under its lock, read
# by every thread that serves chunks. version grows at each forget_all, and
# a thread's cached topic is good while the version it saw is current.
cdef struct sp_topic_t:
    char name[128]
    int len
    int queue_nums

cdef struct sp_topics_t:
    pthread_mutex_t lock
    sp_topic_t *slots
    size_t cap
    size_t count
    long long version

# What one SendPath shares with the threads serving its chunks.
cdef struct sp_shared_t:
    rmq_store_t *store
    uint8_t store_host[20]
    Py_ssize_t store_host_len
    long long max_message_size
    bint oneway_ok
    sp_topics_t topics

# One thread's scratch: unescaped properties, and its last topic.
cdef struct sp_scratch_t:
    char *props
    size_t props_cap
    char topic[128]
    int topic_len
    int queue_nums
    long long version

# A chunk's results: per topic met, in order, its tally; the queues appended
# to (when want_touched), the answers, and the topic names both refer to.
cdef struct sp_tally_t:
    size_t name_off
    int name_len
    long long n
    long long wrote
    long long body

cdef struct sp_touch_t:
    size_t name_off
    int name_len
    int qid
    long long end

cdef struct sp_out_t:
    char *out
    size_t out_len
    size_t out_cap
    char *names
    size_t names_len
    size_t names_cap
    sp_tally_t *tallies
    int ntallies
    size_t tallies_cap
    sp_touch_t *touched
    int ntouched
    size_t touched_cap
    int handled
    int handled_v2
    bint needs_allocate
    bint want_touched
    bint nomem
    long long end_offset
    Py_ssize_t pos


cdef void _out_reset(sp_out_t *R, bint want_touched) noexcept nogil:
    R.out_len = R.names_len = 0
    R.ntallies = R.ntouched = R.handled = R.handled_v2 = 0
    R.needs_allocate = R.nomem = False
    R.want_touched = want_touched
    R.end_offset = 0
    R.pos = 0


cdef void _out_free(sp_out_t *R) noexcept nogil:
    free(R.out)
    free(R.names)
    free(R.tallies)
    free(R.touched)
    R.out = R.names = NULL
    R.tallies = NULL
    R.touched = NULL
    R.out_cap = R.names_cap = 0
    R.tallies_cap = R.touched_cap = 0


cdef bint _grow(void **p, size_t *cap, size_t need, size_t unit) noexcept nogil:
    """Room for need units at *p (realloc'd, doubling); False: no memory."""
    cdef size_t c
    cdef void *q
    if need <= cap[0]:
        return True
    c = max(2 * cap[0], need, <size_t>16)
    q = realloc(p[0], c * unit)
    if q == NULL:
        return False
    p[0] = q
    cap[0] = c
    return True


cdef size_t _topic_hash(const char *p, size_t n) noexcept nogil:
    cdef size_t h = 14695981039346656037ULL
    cdef size_t i
    for i in range(n):
        h = (h ^ <unsigned char>p[i]) * 1099511628211ULL
    return h


cdef sp_topic_t *_topic_slot(sp_topics_t *t, const char *p, size_t n) noexcept nogil:
    """The slot of topic p, or the free slot it would take (t.cap > 0)."""
    cdef size_t i = _topic_hash(p, n) & (t.cap - 1)
    cdef sp_topic_t *e
    while True:
        e = &t.slots[i]
        if e.len == 0 or (<size_t>e.len == n and memcmp(e.name, p, n) == 0):
            return e
        i = (i + 1) & (t.cap - 1)


cdef int _topic_find(sp_topics_t *t, const char *p, size_t n) noexcept nogil:
    """The queue count learnt for topic p, or -1."""
    cdef int q = -1
    cdef sp_topic_t *e
    pthread_mutex_lock(&t.lock)
    if t.cap:
        e = _topic_slot(t, p, n)
        if e.len:
            q = e.queue_nums
    pthread_mutex_unlock(&t.lock)
    return q


cdef bint _topic_learn(sp_topics_t *t, const char *p, size_t n, int queue_nums) noexcept nogil:
    """False: no memory (the topic then stays with the Python path)."""
    cdef sp_topic_t *old
    cdef sp_topic_t *slots
    cdef sp_topic_t *e
    cdef size_t cap, i
    cdef bint ok = True
    pthread_mutex_lock(&t.lock)
    if 2 * (t.count + 1) > t.cap:
        # rehash into twice the room (at most half full)
        cap = max(2 * t.cap, <size_t>64)
        slots = <sp_topic_t *>calloc(cap, sizeof(sp_topic_t))
        if slots == NULL:
            ok = False
        else:
            old = t.slots
            t.slots = slots
            i = t.cap
            t.cap = cap
            while i > 0:
                i -= 1
                if old[i].len:
                    _topic_slot(t, old[i].name, <size_t>old[i].len)[0] = old[i]
            free(old)
    if ok:
        e = _topic_slot(t, p, n)
        if e.len == 0:
            memcpy(e.name, p, n)
            e.len = <int>n
            t.count += 1
        e.queue_nums = queue_nums
    pthread_mutex_unlock(&t.lock)
    return ok


cdef void _topic_forget_all(sp_topics_t *t) noexcept nogil:
    pthread_mutex_lock(&t.lock)
    if t.cap:
        memset(t.slots, 0, t.cap * sizeof(sp_topic_t))
    t.count = 0
    __atomic_add_fetch(&t.version, 1, __ATOMIC_RELEASE)
    pthread_mutex_unlock(&t.lock)


cdef int _queue_nums(sp_shared_t *S, sp_scratch_t *T, const char *p, size_t n) noexcept nogil:
    """The queue count of topic p if the Python path has served it, else -1:
    the thread's last topic while the table is unchanged, else the table."""
    cdef long long v = __atomic_load_n(&S.topics.version, __ATOMIC_ACQUIRE)
    cdef int q
    if (T.topic_len == <int>n and T.version == v and memcmp(T.topic, p, n) == 0):
        return T.queue_nums
    q = _topic_find(&S.topics, p, n)
    if q >= 0:
        memcpy(T.topic, p, n)
        T.topic_len = <int>n
        T.queue_nums = q
        T.version = v
    return q


cdef bint _tally(sp_out_t *R, const char *topic, size_t tn) noexcept nogil:
    """The chunk's current tally is topic's (a new one when it changes);
    its room, and a touched entry's, are there. False: no memory."""
    cdef sp_tally_t *t
    if R.ntallies:
        t = &R.tallies[R.ntallies - 1]
        if <size_t>t.name_len == tn and memcmp(R.names + t.name_off, topic, tn) == 0:
            return _grow(<void **>&R.touched, &R.touched_cap, <size_t>R.ntouched + 1,
                         sizeof(sp_touch_t)) if R.want_touched else True
    if not (_grow(<void **>&R.tallies, &R.tallies_cap, <size_t>R.ntallies + 1,
                  sizeof(sp_tally_t))
            and _grow(<void **>&R.names, &R.names_cap, R.names_len + tn, 1)
            and (not R.want_touched
                 or _grow(<void **>&R.touched, &R.touched_cap, <size_t>R.ntouched + 1,
                          sizeof(sp_touch_t)))):
        return False
    t = &R.tallies[R.ntallies]
    R.ntallies += 1
    memcpy(R.names + R.names_len, topic, tn)
    t.name_off = R.names_len
    t.name_len = <int>tn
    R.names_len += tn
    t.n = t.wrote = t.body = 0
    return True
