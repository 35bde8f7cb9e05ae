# The calling thread's time slice (csrc/sched_slice.h); included from _core.pyx.


def sched_slice(long long slice_us) -> int:
    """Ask Linux for a time slice of slice_us µs for the calling thread
    (0: the kernel's default), leaving its policy and nice value as they
    are. Returns the slice in µs the kernel now reports for the thread: 0
    where it keeps none of its own (kernels before 6.12 ignore the
    request). Raises ValueError for a slice outside 0-100,000 µs, OSError
    when the kernel refuses it, has no such call (ENOSYS) or the thread is
    real-time (EINVAL)."""
    if not 0 <= slice_us <= 100_000:
        raise ValueError(f"slice {slice_us} µs: expected 0 (the kernel's default) to 100000")
    cdef int64_t got
    with nogil:
        got = rmq_sched_slice(slice_us * 1000)
    _raise_for(<int>got if got < 0 else 0, "sched_setattr")
    return got // 1000
