# The calling thread's time slice (csrc/sched_slice.h) and its name
# (csrc/thread_name.h); included from _core.pyx.

#: the slices, in µs, a thread may ask for besides 0 (the kernel's default)
SCHED_SLICE_MIN_US = RMQ_SCHED_SLICE_MIN_NS // 1000
SCHED_SLICE_MAX_US = RMQ_SCHED_SLICE_MAX_NS // 1000


def sched_slice(long long slice_us) -> int:
    """Ask Linux for a time slice of slice_us µs for the calling thread
    (0: the kernel's default), leaving its policy and nice value as they
    are. Returns the slice in µs the kernel now reports for the thread: 0
    where it keeps none of its own (kernels before 6.12 ignore the
    request). Raises ValueError for a slice other than 0 or
    SCHED_SLICE_MIN_US..SCHED_SLICE_MAX_US, OSError when the kernel refuses
    it, has no such call (ENOSYS) or the thread is real-time (EINVAL)."""
    if slice_us != 0 and not SCHED_SLICE_MIN_US <= slice_us <= SCHED_SLICE_MAX_US:
        raise ValueError(
            f"slice {slice_us} µs: expected 0 (the kernel's default) or "
            f"{SCHED_SLICE_MIN_US}..{SCHED_SLICE_MAX_US}"
        )
    cdef int64_t got
    with nogil:
        got = rmq_sched_slice(slice_us * 1000)
    _raise_for(<int>got if got < 0 else 0, "sched_setattr")
    return got // 1000


#: the most of a thread's name Linux keeps, in bytes
THREAD_NAME_MAX = RMQ_THREAD_NAME_MAX


def name_thread(str name) -> None:
    """Name the calling thread as the OS shows it (`top -H`, `ps -L`,
    /proc/<pid>/task/<tid>/comm): cut to THREAD_NAME_MAX bytes of its
    UTF-8. Python's own thread name is left as it is. Raises ValueError
    for an empty name or one with a NUL, OSError when the kernel refuses
    it; does nothing elsewhere than Linux."""
    cdef bytes b = name.encode()
    if not b or b"\0" in b:
        raise ValueError(f"a thread name must be non-empty text without NUL, not {name!r}")
    cdef const char *c = b
    cdef int rc
    with nogil:
        rc = rmq_name_thread(c)
    _raise_for(rc, "naming the thread")
