# The producer's auto-batching, its per-message part: the entries of one
# open batch side by side (SendBatch.add, once a send) and their settling
# when the batch is answered (SendBatch.settle, one call for all of them).
# pyrmq/producer/batching.py says what is batched and when a batch leaves;
# this is only the part that runs once a message, out of the interpreter's
# loop. SlotsBuilder makes the per-message SendResults.
cimport cython

from asyncio import get_running_loop
from types import MemberDescriptorType

from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyTypeObject, Py_TYPE
from cpython.tuple cimport PyTuple_GET_ITEM


cdef extern from "Python.h":
    # two type slots (public C API): a member descriptor's setter, a type's
    # allocator; and whether instances have a __dict__
    ctypedef int (*_descr_set_fn)(object, object, object) except -1
    ctypedef object (*_alloc_fn)(PyTypeObject *, Py_ssize_t)
    ctypedef struct _TypeSlots "PyTypeObject":
        _descr_set_fn tp_descr_set
        _alloc_fn tp_alloc
        Py_ssize_t tp_dictoffset


cdef class SlotsBuilder:
    """Makes instances of a class whose fields are all its own __slots__
    (a ``dataclass(slots=True)``, frozen or not) without running its
    __init__ or __setattr__: the object is allocated and each slot stored
    through its member descriptor's C setter. ``make(*values)`` takes one
    value a name of `names`, in that order. For results made once a message:
    a frozen dataclass's __init__ is seven object.__setattr__ calls looked
    up by name. Raises TypeError at construction for a class with a
    __dict__, or names that are not exactly its own slots."""

    cdef type cls
    cdef tuple descrs
    cdef Py_ssize_t n

    def __init__(self, type cls, names):
        names = tuple(names)
        slots = cls.__dict__.get("__slots__")
        if slots is None or (<_TypeSlots *>cls).tp_dictoffset != 0:
            raise TypeError(f"{cls.__name__} must have __slots__ and no __dict__")
        if isinstance(slots, str):
            slots = (slots,)
        if sorted(names) != sorted(slots):
            raise TypeError(f"names {names} must be exactly {cls.__name__}'s slots {tuple(slots)}")
        for name in names:
            if type(cls.__dict__[name]) is not MemberDescriptorType:
                raise TypeError(f"{cls.__name__}.{name} is not a __slots__ member")
        self.cls = cls
        self.descrs = tuple(cls.__dict__[name] for name in names)
        self.n = len(names)

    cdef inline object _new(self):
        return (<_TypeSlots *>self.cls).tp_alloc(<PyTypeObject *>self.cls, 0)

    cdef inline int _set(self, object obj, Py_ssize_t i, object value) except -1:
        d = <object>PyTuple_GET_ITEM(self.descrs, i)
        return (<_TypeSlots *>Py_TYPE(d)).tp_descr_set(d, obj, value)

    def __call__(self, *values):
        if len(values) != self.n:
            raise TypeError(f"{self.cls.__name__} takes {self.n} values, got {len(values)}")
        obj = self._new()
        for i in range(self.n):
            self._set(obj, i, values[i])
        return obj


@cython.final
cdef class SendBatch:
    """One key's open auto-batch: its callers' messages, futures, send
    callbacks, and whether each counts in the producer's in-flight sends,
    side by side (no object a message beyond those the caller made); the
    batch's bytes, the earliest deadline and fewest retries among its
    callers', when it opened, and its flush timer. The deadline counts
    from when the batch opened: it leaves within max_delay of that, or at
    once when the deadline is shorter."""

    cdef readonly list msgs
    cdef readonly list outs
    #: None until an entry has a callback; then one item an entry
    cdef list callbacks
    cdef bytearray counted
    #: entries that count in the producer's in-flight sends
    cdef readonly Py_ssize_t counted_total
    cdef public double opened
    cdef public double timeout
    cdef public int retries
    cdef public Py_ssize_t size
    cdef public object handle

    def __init__(self, double opened, double timeout, int retries):
        self.msgs = []
        self.outs = []
        self.callbacks = None
        self.counted = bytearray()
        self.counted_total = 0
        self.opened = opened
        self.timeout = timeout
        self.retries = retries
        self.size = 0
        self.handle = None

    def __len__(self):
        return PyList_GET_SIZE(self.msgs)

    cpdef Py_ssize_t add(self, msg, out, callback, bint counted, Py_ssize_t size, timeout,
                         int retries) except -1:
        """One caller's send: its message, future and callback (or None),
        whether it counts in the in-flight sends, its bytes, its timeout
        (None: the producer's) and retries. Returns the entries now."""
        cdef Py_ssize_t n = PyList_GET_SIZE(self.msgs)
        if timeout is not None and <double>timeout < self.timeout:
            self.timeout = timeout
        if retries < self.retries:
            self.retries = retries
        if callback is not None:
            if self.callbacks is None:
                self.callbacks = [None] * n
            self.callbacks.append(callback)
        elif self.callbacks is not None:
            self.callbacks.append(None)
        self.msgs.append(msg)
        self.outs.append(out)
        self.counted.append(counted)
        if counted:
            self.counted_total += 1
        self.size += size
        return n + 1

    def entry(self, Py_ssize_t i):
        """(message, future, callback or None, counted) of entry i."""
        cb = None if self.callbacks is None else self.callbacks[i]
        return self.msgs[i], self.outs[i], cb, bool(self.counted[i])

    def settle(self, SlotsBuilder make, status, str uniq_ids, str offset_ids, mq,
               long long first, tx, region, tracer, addr, long long born, long long cost,
               log):
        """The batch's answer, to each caller: entry i's result is
        ``make(status, uniq i, offset id i, mq, first + i, tx, region)``
        (first as it is when negative), set on its future unless the caller
        cancelled it, then handed to its callback; what a callback raises
        is logged with `log.exception`. uniq_ids and offset_ids are
        comma-joined, one id an entry (offset ids: "" each when they are
        not). tracer: None, or its append_pub(msg, result, addr, born, cost)
        gets each result."""
        cdef Py_ssize_t i, n = PyList_GET_SIZE(self.outs)
        cdef list uniq = uniq_ids.split(",")
        cdef list offsets = offset_ids.split(",")
        cdef list cbs = self.callbacks
        if make.n != 7:
            raise TypeError("make must build SendResult's seven fields")
        if PyList_GET_SIZE(uniq) != n:
            raise ValueError(f"{PyList_GET_SIZE(uniq)} unique ids for {n} messages")
        if PyList_GET_SIZE(offsets) != n:
            offsets = [""] * n
        for i in range(n):
            r = make._new()
            make._set(r, 0, status)
            make._set(r, 1, <object>PyList_GET_ITEM(uniq, i))
            make._set(r, 2, <object>PyList_GET_ITEM(offsets, i))
            make._set(r, 3, mq)
            make._set(r, 4, first + i if first >= 0 else first)
            make._set(r, 5, tx)
            make._set(r, 6, region)
            if tracer is not None:
                tracer.append_pub(<object>PyList_GET_ITEM(self.msgs, i), r, addr, born, cost)
            out = <object>PyList_GET_ITEM(self.outs, i)
            if not out.done():
                out.set_result(r)
            if cbs is not None:
                cb = <object>PyList_GET_ITEM(cbs, i)
                if cb is not None:
                    try:
                        cb(r, None)
                    except Exception:
                        log.exception("send callback raised")

    def fail(self, error, log):
        """The same error to every caller: set on each future not done yet
        (and marked retrieved where a callback receives it), then each
        callback called; what a callback raises is logged with
        `log.exception`."""
        cdef Py_ssize_t i, n = PyList_GET_SIZE(self.outs)
        cdef list cbs = self.callbacks
        for i in range(n):
            out = <object>PyList_GET_ITEM(self.outs, i)
            if not out.done():
                out.set_exception(error)
                if cbs is not None and <object>PyList_GET_ITEM(cbs, i) is not None:
                    out.exception()  # the callback receives it
        if cbs is None:
            return
        for i in range(n):
            cb = <object>PyList_GET_ITEM(cbs, i)
            if cb is not None:
                try:
                    cb(None, error)
                except Exception:
                    log.exception("send callback raised")


cdef class SendAccumulatorCore:
    """The per-send part of a Producer's auto-batching (the Python subclass,
    pyrmq.producer.batching.SendAccumulator, is the rest: its rules are
    written there; this is offer(), the one step every send takes, out of
    the interpreter). Set up by the subclass: the producer, the Message
    class, `max_bytes`, `max_delay` (seconds), `max_count`, and
    `entry_fixed` / `uniq_bytes` (a batch entry's fixed bytes, and what a
    UNIQ_KEY the encoder adds takes). `single_only`: property names whose
    presence sends a message alone, `single_only_prefixes` name prefixes
    that do; `wait_key`: the property whose value "false" does.

    The subclass provides the Python steps offer() takes off its common
    path: `_check_topic(msg)` (True when msg's topic may be batched; raises
    what a broker would refuse, called for a topic's first send and for an
    empty or oversized body), `_select(msg, selector, arg)`,
    `_refuse_queue(mq, topic)`, `_send_now(key, msg, timeout, retries,
    callback, counted)` and `_flush(key[, batch])`."""

    cdef public object _p
    cdef public dict _open
    #: requests of each key sent and not yet answered
    cdef public dict _busy
    #: topic -> whether its sends may be batched (checked once)
    cdef public dict _topics
    cdef public Py_ssize_t max_bytes
    cdef public double max_delay
    cdef public Py_ssize_t max_count
    cdef public Py_ssize_t batches
    cdef public Py_ssize_t batched
    cdef public Py_ssize_t singles
    cdef type message_cls
    cdef Py_ssize_t entry_fixed
    cdef Py_ssize_t uniq_bytes
    cdef str uniq_key
    cdef frozenset single_only
    cdef tuple single_only_prefixes
    cdef str wait_key

    def __init__(self, producer, type message_cls, Py_ssize_t max_bytes, double max_delay,
                 Py_ssize_t max_count, Py_ssize_t entry_fixed, str uniq_key,
                 Py_ssize_t uniq_bytes, single_only, tuple single_only_prefixes,
                 str wait_key):
        self._p = producer
        self.message_cls = message_cls
        self.max_bytes = max_bytes
        self.max_delay = max_delay
        self.max_count = max_count
        self.entry_fixed = entry_fixed
        self.uniq_key = uniq_key
        self.uniq_bytes = uniq_bytes
        self.single_only = frozenset(single_only)
        self.single_only_prefixes = single_only_prefixes
        self.wait_key = wait_key
        self._open = {}
        self._busy = {}
        self._topics = {}
        self.batches = self.batched = self.singles = 0

    cdef Py_ssize_t _props_bytes(self, dict props) except -2:
        """The encoded properties' bytes (characters, not UTF-8 bytes: an
        estimate) with the UNIQ_KEY the encoder adds when there is none;
        -1 when a property sends the message alone."""
        cdef Py_ssize_t total = 0
        for k, v in props.items():
            if type(k) is not str or type(v) is not str:
                return -1  # the single path's encoder says what is wrong
            if k in self.single_only or (k == self.wait_key and v == "false"):
                return -1
            if (<str>k).startswith(self.single_only_prefixes):
                return -1
            total += len(<str>k) + len(<str>v) + 2
        if self.uniq_key not in props:
            total += self.uniq_bytes
        return total

    def offer(self, msg, mq, selector, arg, timeout, int retries, callback, bint counted):
        """The future of msg's send when it joins a batch; None when it
        cannot be batched (the caller sends it alone). timeout None: the
        producer's send_msg_timeout."""
        cdef Py_ssize_t n, size, pb
        if type(msg) is not self.message_cls:
            return None
        props = msg.properties
        topic = msg.topic
        n = len(msg.body)
        if props:
            pb = self._props_bytes(props)
            if pb < 0:
                return None
            size = self.entry_fixed + n + pb
        else:
            size = self.entry_fixed + n + self.uniq_bytes
        p = self._p
        if n >= p.compress_msg_body_over_howmuch or size > self.max_bytes:
            return None
        ok = self._topics.get(topic)
        if ok is None or n == 0 or n > p.max_message_size:
            ok = self._check_topic(msg)
        if not ok:
            return None
        if selector is not None:
            mq = self._select(msg, selector, arg)
            if mq is None:
                return None
        elif mq is not None and mq.topic != topic:
            self._refuse_queue(mq, topic)
        key = topic if mq is None else mq
        batch = self._open.get(key)
        if batch is None and key not in self._busy:
            # nothing of its queue in flight to wait for: it goes now, alone,
            # and what comes while it is in flight joins a batch
            return self._send_now(key, msg, timeout, retries, callback, counted)
        loop = p._loop
        if loop is None:
            loop = get_running_loop()
        out = loop.create_future()
        if batch is not None and (
            (<SendBatch>batch).size + size > self.max_bytes
            or PyList_GET_SIZE((<SendBatch>batch).msgs) >= self.max_count
        ):
            self._flush(key)
            batch = None
        if batch is None:
            batch = SendBatch(loop.time(), p.send_msg_timeout if timeout is None else timeout,
                              retries)
            self._open[key] = batch
            if self.max_delay == 0:
                (<SendBatch>batch).handle = loop.call_soon(self._flush, key, batch)
            else:
                (<SendBatch>batch).handle = loop.call_later(self.max_delay, self._flush, key,
                                                            batch)
        if counted:
            p._inflight += 1
        if (
            (<SendBatch>batch).add(msg, out, callback, counted, size, timeout, retries)
            >= self.max_count
            or (<SendBatch>batch).size >= self.max_bytes
        ):
            self._flush(key)
        return out
