# The only place where C status codes become Python exceptions.
import errno as _errno

from pyrmq.common.errors import (
    CorruptStoreError,
    DiskFullError,
    IllegalMessageError,
    NotAStoreError,
    StoreError,
    StoreLockedError,
)

_ILLEGAL = {RMQ_EINVAL_TOPIC, RMQ_EMSG_TOO_LARGE, RMQ_EPROPS_TOO_LARGE, RMQ_EQUEUE_ID,
            RMQ_EBAD_BATCH, RMQ_EBAD_HOST, RMQ_EBAD_ARG}


cdef int _raise_for(int rc, str what) except -1:
    """Raise the exception for a negative C status; return 0 for RMQ_OK."""
    if rc >= 0:
        return 0
    msg = f"{what}: {rmq_strerror(rc).decode()}"
    if rc > -1000:
        code = -rc
        if code in (_errno.ENOSPC, _errno.EDQUOT):
            raise DiskFullError(msg, rc)
        raise OSError(code, msg)
    if rc in _ILLEGAL:
        raise IllegalMessageError(msg, rc)
    if rc == RMQ_ENOT_STORE:
        raise NotAStoreError(msg, rc)
    if rc == RMQ_ELOCKED:
        raise StoreLockedError(msg, rc)
    if rc == RMQ_ECORRUPT:
        raise CorruptStoreError(msg, rc)
    raise StoreError(msg, rc)
