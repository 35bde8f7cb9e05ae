"""Build the C core (csrc/) with cffi for direct tests of its functions.

``load()`` returns ``(ffi, lib)``, built once per process. The compiled module
is cached in a directory keyed by a hash of the C sources, the cdef and the
Python ABI (``$PYRMQ_CFFI_CACHE``, default ``<tmp>/pyrmq-cffi-<uid>``), so
later runs only import it.

Every ``csrc/*.c`` is compiled so the module keeps working as files are added.
If that fails (another file is half-written), only the files these tests need
are built, and ``BUILD_NOTE`` says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
MODULE = "_rmq_cffi_test"
MINIMAL_SOURCES = ("index_file.c", "index_service.c", "mapped_file.c", "paths.c",
                   "checkpoint.c", "crc32.c", "rmq_errors.c")

PREAMBLE = """
#include "checkpoint.h"
#include "index_service.h"
#include "java_hash.h"
#include "crc32.h"
#include "rmq_errors.h"
#include "mapped_file.h"

static int32_t rmq_test_java_string_hash(const uint8_t *s, size_t len) {
    return rmq_java_string_hash(s, len);
}
"""

CDEF = """
#define RMQ_OK ...
#define RMQ_ECORRUPT ...
#define RMQ_EFULL ...
#define RMQ_EBAD_ARG ...

typedef struct rmq_index_file rmq_index_file_t;
typedef struct rmq_index_service rmq_index_service_t;

int rmq_index_file_open(const char *path, int32_t hash_slot_num, int32_t index_num,
                        int create, rmq_index_file_t **out);
int rmq_index_file_put_key(rmq_index_file_t *f, const uint8_t *topic, size_t topic_len,
                           const uint8_t *key, size_t key_len, int64_t phy_offset,
                           int64_t store_timestamp);
int rmq_index_file_select(const rmq_index_file_t *f, const uint8_t *topic, size_t topic_len,
                          const uint8_t *key, size_t key_len, int64_t begin_ts,
                          int64_t end_ts, int64_t *out, int max, int *n);
int64_t rmq_index_file_begin_timestamp(const rmq_index_file_t *f);
int64_t rmq_index_file_end_timestamp(const rmq_index_file_t *f);
int64_t rmq_index_file_begin_phy_offset(const rmq_index_file_t *f);
int64_t rmq_index_file_end_phy_offset(const rmq_index_file_t *f);
int32_t rmq_index_file_index_count(const rmq_index_file_t *f);
int rmq_index_file_flush(rmq_index_file_t *f);
void rmq_index_file_close(rmq_index_file_t *f, int unlink_file);

int rmq_index_service_open(const char *dir, int32_t hash_slot_num, int32_t index_num,
                           rmq_index_service_t **out);
int rmq_index_service_put(rmq_index_service_t *s, const uint8_t *topic, size_t topic_len,
                          const uint8_t *key, size_t key_len, int64_t phy_offset,
                          int64_t store_timestamp);
int rmq_index_service_query(rmq_index_service_t *s, const uint8_t *topic, size_t topic_len,
                            const uint8_t *key, size_t key_len, int64_t begin_ts,
                            int64_t end_ts, int64_t *out, int max, int *n);
int64_t rmq_index_service_end_phy_offset(rmq_index_service_t *s);
int rmq_index_service_flush(rmq_index_service_t *s, int64_t *durable_ts);
int rmq_index_service_delete_before(rmq_index_service_t *s, int64_t min_phy_offset);
int rmq_index_service_truncate(rmq_index_service_t *s, int64_t phy_offset);
void rmq_index_service_close(rmq_index_service_t *s);

int32_t rmq_test_java_string_hash(const uint8_t *s, size_t len);
uint32_t rmq_crc32(const void *buf, size_t len);
const char *rmq_strerror(int rc);
typedef struct rmq_checkpoint {
    int64_t index_msg_timestamp;  /* the rest of its layout: from checkpoint.h */
    ...;
} rmq_checkpoint_t;
int rmq_checkpoint_load(const char *path, rmq_checkpoint_t *cp);

int64_t rmq_mapped_file_live_count(void);
int rmq_mapped_file_create_filled(const char *path, int64_t file_size, int64_t fill, int *made);
"""

#: Set by load(): None after a build of every csrc/*.c, else why not.
BUILD_NOTE: str | None = None

_loaded = None


def _cache_root() -> Path:
    env = os.environ.get("PYRMQ_CFFI_CACHE")
    if env:
        return Path(env)
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"pyrmq-cffi-{uid}"


def _key(sources: list[Path]) -> str:
    h = hashlib.sha256()
    for part in (
        PREAMBLE,
        CDEF,
        sys.version,
        sysconfig.get_config_var("EXT_SUFFIX") or "",
    ):
        h.update(part.encode())
        h.update(b"\0")
    for p in sorted(CSRC.glob("*.h")) + sorted(sources):
        h.update(p.name.encode())
        h.update(b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:20]


def _build(sources: list[Path]) -> Path:
    """Compile into the cache (once per source set) and return the module path."""
    import cffi

    target = _cache_root() / _key(sources)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    so = target / (MODULE + suffix)
    if so.exists():
        return so
    target.mkdir(parents=True, exist_ok=True)
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    ffi.set_source(
        MODULE,
        PREAMBLE,
        sources=[str(p) for p in sources],
        include_dirs=[str(CSRC)],
        libraries=["z"],
        extra_compile_args=["-std=c11", "-D_GNU_SOURCE"],
    )
    # Build privately, then rename into place: concurrent test processes
    # never see a half-written module.
    work = Path(tempfile.mkdtemp(prefix="build-", dir=target))
    try:
        built = Path(ffi.compile(tmpdir=str(work), verbose=False))
        os.replace(built, so)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        with contextlib.suppress(OSError):
            target.rmdir()  # only if the build failed and left it empty
    return so


def _import(so: Path):
    spec = importlib.util.spec_from_file_location(MODULE, so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load():
    """Return (ffi, lib) of the C core, building it on first use."""
    global _loaded, BUILD_NOTE
    if _loaded is not None:
        return _loaded
    everything = sorted(CSRC.glob("*.c"))
    try:
        mod = _import(_build(everything))
    except Exception as exc:  # a half-written sibling file: build what we need
        minimal = sorted(CSRC / name for name in MINIMAL_SOURCES)
        if minimal == everything:
            raise
        mod = _import(_build(minimal))
        BUILD_NOTE = (
            f"built only {', '.join(MINIMAL_SOURCES)}: full build failed ({exc!r})"
        )
    _loaded = (mod.ffi, mod.lib)
    return _loaded
