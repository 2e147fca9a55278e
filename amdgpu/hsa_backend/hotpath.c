/* The HSA backend's submission, compiled: the one implementation of the publish sequence
 * (amdgpu/hsa_backend/hotpath.py builds and loads it; scripts/setup.sh builds it with gcc).
 *
 * Types, and what goes through them:
 *   Lane(ring_view, size, ..., kernarg_view, ...)    one per QueueLane (QueueLane.aql, made
 *       in QueueLane.__init__). It OWNS the lane's submission state, in its C struct:
 *         - the AQL ring port: the ring memory, the cached indices `hint` (the end of our
 *           latest reservation) and `read` (a read index once seen), the doorbell count,
 *           and the queue's write index and doorbell (done natively where the queue
 *           allows: the virtual queue's words, ROCr's two functions);
 *         - the kernarg ring: head, limit and the live blocks with the timeline values
 *           that free them (KernargRing's algorithm, its slow path included);
 *         - the lock (a LaneLock: QueueLane.lock is it) and the timeline counter
 *           (`submitted`, read-only from Python).
 *       No Python object holds a copy of any of it; Python code reads it through the
 *       Lane's getters and changes it only through its methods:
 *         with lane as value:       the lock, the next timeline value; on a normal exit the
 *                                   counter moves to it (the one `submitted + 1`)
 *         allocate(nbytes, value)   a kernarg block (under the lock)
 *         submit_block(block, first_header=None, headers=None), submit_timed(...)
 *                                   a packet block (ready packets; the first header apart;
 *                                   every header apart), timed for a trace record
 *         submit_rows(block, first_header, base, offsets, signal_row, signal)
 *                                   a kept replay, each row's kernarg address and the
 *                                   completion signal set on the way; `block` may be its
 *                                   Rows (below), expanded into the ring
 *         publisher(size, words, header) -> Publisher    one launch's immediate dispatch
 *         set_timed(flag)           the lane's mode: a DispatchTimer on or off (with the
 *                                   module's set_traced, the trace sink's: see `traced`)
 *       `lane_publish` is the ONE reserve / body / header / doorbell sequence; every packet
 *       of the lane goes through it. What a method refuses goes to packets.ring's check of
 *       that form (ready_view, rows_view, many_view), which raises the one-line
 *       PacketError; room is waited for by packets.ring.Room (the one wait, with its
 *       QueueFullError).
 *   Rows(block, k)    a segment's packet rows deduplicated (each distinct row once, a u32
 *       template index per row), made once at finalize: a replay reads ~12 bytes a row
 *       instead of 72 (docs/BENCHMARKS.md, "The AQL replay of 10,000 ... by parts").
 *   Publisher(data) -> timeline value    lane_submit: lock, value, kernarg block, store,
 *       the template's kernarg address, lane_publish of the template, counter.
 *   Dispatch(dev, slow, ...)(kernel, grid, block, args, lane, wait, ...) -> TimelinePoint
 *       HsaDevice.dispatch's launch-cache fast path; anything else (a first launch, keyword
 *       arguments, waits, a timer or trace sink, a failed lane, arguments the cached
 *       converters refuse) goes to `slow`, the Python method, with the call as it came.
 *   Submit(dev, slow, ...)(cb, bindings, lane, wait) -> TimelinePoint    HsaDevice.submit's
 *       short way (HsaCommandBuffer._submit): a one-segment command buffer whose binding
 *       table has a kept instance on the lane, published through the lane's Lane; anything
 *       else goes to `slow`.
 *
 * Without this build (no gcc or no Python headers, or AMDGPU_PYTHON_HOT_PATH=1) a lane's
 * submission is python_lane.PythonLane: the same methods over packets.Ring and KernargRing
 * (the packets library's implementation of the same protocol). QueueLane picks one of the
 * two, once; they are never used side by side on one lane. tests/test_hot_path.py runs
 * the same sequences through both and compares the ring, the kernarg bytes and blocks, the
 * indices and the timeline values.
 *
 * Why C: CPython spends ~1.6 us on even a minimal Python version of these steps (measured
 * in docs/BENCHMARKS.md); #16's goal is 1.0 us, #31's 0.42 us.
 *
 * Threading contract (what every entry below relies on):
 *   - Every entry runs with the GIL held and never releases it itself, except LaneLock's
 *     blocked acquire; the Python code it calls (a provider's add_write_index or doorbell,
 *     Room's waits, QueueLane.completed/wait from the kernarg ring's slow path) may, so
 *     other threads can run between any two of its Python calls. The Lane's fields are
 *     read where they are used, never kept in locals across such a call.
 *   - One producer per lane at a time: every submission holds the lane's lock from its
 *     timeline value to its counter move (lane_submit, `with lane`, Submit). Submit takes
 *     the command buffer's `_replay_lock`, then the lane's lock (always in that order; no
 *     code takes a lane lock and then a replay lock, or two lane locks: waits on other
 *     lanes are built before the lock, QueueLane.prepare_waits). submit_block, submit_rows
 *     and allocate are called with the lane's lock held by their caller. The one
 *     exception is a packet published as another producer without the lock (a test's
 *     gate barrier, QueueLane.publish): it takes no timeline value and no kernarg block.
 *   - The write index itself is multi-producer safe without the lock (ROCr's
 *     hsa_queue_add_write_index_scacq_screl; the virtual queue's word by one atomic
 *     fetch-add, acq_rel): the lock keeps slots, timeline values and doorbells in one
 *     order per lane. `hint` and `read` only spare index loads: a stale one costs a wait
 *     through Room, never a wrong slot.
 *
 * Backpressure: room in the AQL ring is proven before anything is reserved
 * (hint - read >= size: Room.before_reserve, which raises QueueFullError with the queue
 * intact), and again for the reserved ids (Room.after_reserve). The kernarg block comes
 * from the lane's kernarg ring under the same lock (head + size <= limit; else the slow
 * path: reclaim the blocks whose values completed, wait for the oldest, KernelArgumentError
 * for a block larger than the ring). A dispatch's kernarg bytes are packed before the lock
 * is taken, so a refused argument leaves no reservation behind.
 *
 * Memory ordering: a reserved slot's header is INVALID (queues start so; the packet
 * processor sets a slot back to INVALID before it advances the read index). The kernarg
 * bytes and the packet body (bytes 4..63) are written first, then the 32-bit header word
 * (header | setup << 16) with one release store, which orders every earlier store before
 * the packet becomes valid; then the doorbell (the virtual queue's signal word by a
 * release store, ROCr's hsa_signal_store_screlease). A block goes in as one copy whose
 * first header is INVALID; the kernarg addresses and completion signal of its rows, and
 * the header words of rows 2..N where given apart, are set in the ring, then the first
 * header is stored last (release): an in-order packet processor reaches rows 2..N only
 * through row 1. Kernarg memory is host memory of the kernarg pool, so the header's
 * release store is the only publication it needs (a device-local, write-combined kernarg
 * pool would need a store fence and an HDP flush before it; none is used). The Python
 * steps rely on x86's store order for the same. The counter moves after the doorbell,
 * still under the lock; the packet's completion signal is the lane's timeline signal, so
 * value v completes when the signal reads TIMELINE_START - v.
 *
 * Buffer checks (issue 35): a kept argument tuple's bytes are reused only while
 * buffer.Lifetime.ends is the object it was when they were packed (no buffer freed since);
 * otherwise the launch's converter requires each buffer's `_life.owner` to be this
 * device's owner token (alive, this device's); anything else goes to the Python method,
 * whose check_usable names the buffer. A kept replay instance is used only while its
 * command buffer's `_recorded_checked` is Lifetime.ends.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>
#include <time.h>

#define INVALID_TYPE 1 /* hsa_packet_type_t HSA_PACKET_TYPE_INVALID (packets.layout) */
#define NATIVE_VIRTUAL 1
#define NATIVE_ROCR 2

static PyObject *s_owner_token, *s_device, *s_launches, *s_failed, *s_last,
    *s_args_cacheable, *s_lane, *s_value, *s_timeline, *s_index,
    *s_pack, *s_ends, *s_recorded_checked;

/* ---- Python int helpers: the ids are u64 (ROCr's write index), the arithmetic Python's ---- */

static int as_i128(PyObject *o, __int128 *out) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (!overflow) {
        *out = v;
        return 0;
    }
    unsigned long long u = PyLong_AsUnsignedLongLong(o); /* >= 2**63: a u64 id */
    if (u == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = (__int128)u;
    return 0;
}

static PyObject *from_i128(__int128 v) {
    if (v >= LLONG_MIN && v <= LLONG_MAX)
        return PyLong_FromLongLong((long long)v);
    if (v >= 0 && v <= (__int128)UINT64_MAX)
        return PyLong_FromUnsignedLongLong((unsigned long long)v);
    PyErr_SetString(PyExc_OverflowError, "hot path: a queue index beyond 2**64");
    return NULL;
}

/* Instance attributes through the instance's __dict__ (a dict lookup instead of the
 * generic attribute protocol): only for names no data descriptor on the type shadows, on
 * types with the generic getattr/setattr; a name not in the dict is read through the
 * normal protocol (a class-level default), and writes go into the dict, as Python does. */
typedef struct {
    PyObject *obj, *dict; /* dict NULL: the normal protocol for every name */
} Attrs;

static PyObject *attr_get(Attrs *a, PyObject *name) { /* a new reference */
    if (a->dict != NULL) {
        PyObject *v = PyDict_GetItemWithError(a->dict, name);
        if (v != NULL) {
            Py_INCREF(v);
            return v;
        }
        if (PyErr_Occurred())
            return NULL;
    }
    return PyObject_GetAttr(a->obj, name);
}



/* A writable, C-contiguous buffer: its address and length (the buffer stays exported). */
static int writable(PyObject *obj, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    (void)what;
    return 0;
}

/* A GC-tracked object called through vectorcall (each type below is one): `prefix`_new,
 * _dealloc, _traverse and _clear, and the vectorcall slot at the start of its struct;
 * `flags`: Py_TPFLAGS_METHOD_DESCRIPTOR for a method of a class (Dispatch, Submit: called
 * with the instance first, as a function defined in the class is), else 0. */
#define CALLABLE_TYPE_FIELDS(Struct, prefix, doc, flags)                                 \
    PyVarObject_HEAD_INIT(NULL, 0)                                                       \
    .tp_name = "amdgpu.hsa_backend._hotpath." #Struct,                                   \
    .tp_basicsize = sizeof(Struct),                                                      \
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | flags, \
    .tp_doc = doc,                                                                       \
    .tp_new = prefix##_new,                                                              \
    .tp_dealloc = (destructor)prefix##_dealloc,                                          \
    .tp_traverse = (traverseproc)prefix##_traverse,                                      \
    .tp_clear = (inquiry)prefix##_clear,                                                 \
    .tp_vectorcall_offset = offsetof(Struct, vectorcall),                                \
    .tp_call = PyVectorcall_Call

/* ---- RingPort: one AQL queue's producer side, owned by its Lane ------------------------- */

/* The lane's AQL ring: its packet memory, its cached indices (`hint`: the end of our
 * latest reservation; `read`: a read index once seen; both only spare index loads and
 * never replace them, as in packets.Ring), the doorbell count, and the provider's write
 * index and doorbell, done natively where the queue allows (`native`). */
typedef struct {
    PyObject *add_write_index, *doorbell;        /* the provider's calls */
    PyObject *before_reserve, *after_reserve;    /* packets.ring.Room's waits */
    Py_buffer mem;                               /* the ring's packet memory */
    int have_mem;
    __int128 mask, ring_size;
    __int128 hint, read;
    unsigned long long doorbells;
    /* The write index and doorbell done here, `add_write_index` and `doorbell` then called
     * only off the common case: NATIVE_VIRTUAL, the virtual queue's own words
     * (VirtualQueue.native_ops); NATIVE_ROCR, ROCr's two functions called directly
     * (RocrQueue.native_ops: the queue address, its doorbell signal). */
    int native;
    uint64_t (*add_write_fn)(void *queue, uint64_t n);
    void (*store_signal_fn)(uint64_t signal, int64_t value);
    uint64_t queue_address, doorbell_signal;
    Py_buffer index_mem, bell_mem, flags_mem, rung_mem;
    Py_ssize_t index_off, bell_off;              /* byte offsets of the u64 / i64 words */
    Py_ssize_t read_off;                         /* the read index's, in index_mem; -1: none */
    /* The queue's flag word: the virtual queue's (VirtualQueue.flags) has its first 4
     * bytes (one aligned u32 load) all zero for the lock-free doorbell (no waiter on or
     * note of the doorbell signal, the queue neither destroyed nor failed) and byte
     * `flag_wake` set while the processor sleeps: one load each instead of five attribute
     * reads; ROCr's (RocrQueue.flags) byte 0 is its `destroyed`. */
    Py_ssize_t flag_unusual, flag_wake;
    PyObject *queue, *processor;                 /* processor.wake() when it sleeps */
} RingPort;

static PyObject *s_wake;

static int port_traverse(RingPort *self, visitproc visit, void *arg) {
    Py_VISIT(self->add_write_index);
    Py_VISIT(self->doorbell);
    Py_VISIT(self->before_reserve);
    Py_VISIT(self->after_reserve);
    Py_VISIT(self->queue);
    Py_VISIT(self->processor);
    return 0;
}

static void port_clear(RingPort *self) {
    Py_CLEAR(self->add_write_index);
    Py_CLEAR(self->doorbell);
    Py_CLEAR(self->before_reserve);
    Py_CLEAR(self->after_reserve);
    Py_CLEAR(self->queue);
    Py_CLEAR(self->processor);
    self->native = 0;
}

static void port_release(RingPort *self) { /* the exported buffers (dealloc) */
    if (self->have_mem)
        PyBuffer_Release(&self->mem);
    self->have_mem = 0;
    if (self->index_mem.obj)
        PyBuffer_Release(&self->index_mem);
    if (self->bell_mem.obj)
        PyBuffer_Release(&self->bell_mem);
    if (self->flags_mem.obj)
        PyBuffer_Release(&self->flags_mem);
    if (self->rung_mem.obj)
        PyBuffer_Release(&self->rung_mem);
}

/* add_write_index(n) into *idx: the virtual queue's word (one atomic add, as VirtualQueue's
 * GIL-atomic update), ROCr's function, else the provider's callable. 0, or -1 with an
 * error. No Python object is made on the native ways. */
static int port_reserve(RingPort *self, uint64_t n, __int128 *idx) {
    if (self->native == NATIVE_VIRTUAL) {
        uint64_t *word = (uint64_t *)((char *)self->index_mem.buf + self->index_off);
        *idx = __atomic_fetch_add(word, n, __ATOMIC_ACQ_REL);
        return 0;
    }
    if (self->native == NATIVE_ROCR && !__atomic_load_n((const char *)self->flags_mem.buf,
                                                          __ATOMIC_ACQUIRE)) { /* destroyed */
        *idx = self->add_write_fn((void *)(uintptr_t)self->queue_address, n);
        return 0;
    }
    PyObject *n_obj = PyLong_FromUnsignedLongLong(n);
    PyObject *r = n_obj ? PyObject_CallOneArg(self->add_write_index, n_obj) : NULL;
    Py_XDECREF(n_obj);
    int bad = r == NULL || as_i128(r, idx) < 0;
    Py_XDECREF(r);
    return bad ? -1 : 0;
}

/* VirtualQueue.doorbell's common case (see it): the value into the doorbell signal's word,
 * the processor's rung word raised to it (raise_rung: max, one step under the GIL), a wake
 * only if it sleeps; the unusual cases (waiters, a note, a failed or destroyed queue: a
 * non-zero byte among the flag word's first four; an id beyond int64) through the Python
 * method, which takes the signal table's lock. */
static int port_doorbell(RingPort *self, __int128 idx) {
    PyObject *r;
    if (self->native == NATIVE_ROCR && idx >= 0 && idx <= INT64_MAX &&
        !__atomic_load_n((const char *)self->flags_mem.buf, __ATOMIC_ACQUIRE)) {
        /* RocrQueue.doorbell: hsa_signal_store_screlease(doorbell, id) */
        self->store_signal_fn(self->doorbell_signal, (int64_t)idx);
        return 0;
    }
    if (self->native == NATIVE_VIRTUAL && idx <= INT64_MAX && idx >= INT64_MIN) {
        const unsigned char *flags = (const unsigned char *)self->flags_mem.buf;
        if (!__atomic_load_n((const uint32_t *)flags, __ATOMIC_RELAXED)) { /* bytes 0..3 */
            int64_t *word = (int64_t *)((char *)self->bell_mem.buf + self->bell_off);
            __atomic_store_n(word, (int64_t)idx, __ATOMIC_RELEASE);
            int64_t *rung = (int64_t *)self->rung_mem.buf; /* raised under the GIL */
            if (__atomic_load_n(rung, __ATOMIC_RELAXED) < (int64_t)idx)
                __atomic_store_n(rung, (int64_t)idx, __ATOMIC_RELEASE);
            /* read after the rung is raised (the processor sets it before its last look) */
            if (__atomic_load_n(flags + self->flag_wake, __ATOMIC_ACQUIRE)) {
                if ((r = PyObject_CallMethodNoArgs(self->processor, s_wake)) == NULL)
                    return -1;
                Py_DECREF(r);
            }
            return 0;
        }
    }
    PyObject *idx_obj = from_i128(idx);
    if (idx_obj == NULL)
        return -1;
    r = PyObject_CallOneArg(self->doorbell, idx_obj);
    Py_DECREF(idx_obj);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* `native`: VirtualQueue.native_ops()'s dict, or None. */
static int port_native_rocr(RingPort *self, PyObject *native) {
    PyObject *aw = PyDict_GetItemString(native, "add_write_fn");
    PyObject *ss = PyDict_GetItemString(native, "store_signal_fn");
    PyObject *qa = PyDict_GetItemString(native, "queue_address");
    PyObject *ds = PyDict_GetItemString(native, "doorbell_signal");
    PyObject *q = PyDict_GetItemString(native, "queue");
    PyObject *fw = PyDict_GetItemString(native, "flags");
    if (!aw || !ss || !qa || !ds || !q || !fw) {
        PyErr_SetString(PyExc_KeyError, "hot path: ROCr's native_ops() lacks a key");
        return -1;
    }
    if (writable(fw, &self->flags_mem, "flags") < 0)
        return -1;
    if (self->flags_mem.len < 1) {
        PyErr_SetString(PyExc_ValueError, "hot path: ROCr's native_ops() flags are empty");
        return -1;
    }
    void *add = PyLong_AsVoidPtr(aw), *store = PyLong_AsVoidPtr(ss);
    self->queue_address = PyLong_AsUnsignedLongLong(qa);
    self->doorbell_signal = PyLong_AsUnsignedLongLong(ds);
    if (PyErr_Occurred())
        return -1;
    if (add == NULL || store == NULL || self->queue_address == 0) {
        PyErr_SetString(PyExc_ValueError, "hot path: ROCr's native_ops() has a null address");
        return -1;
    }
    self->add_write_fn = (uint64_t (*)(void *, uint64_t))add;
    self->store_signal_fn = (void (*)(uint64_t, int64_t))store;
    self->queue = Py_NewRef(q);
    self->native = NATIVE_ROCR;
    return 0;
}

static int port_native(RingPort *self, PyObject *native) {
    if (PyDict_GetItemString(native, "add_write_fn") != NULL)
        return port_native_rocr(self, native);
    PyObject *iw = PyDict_GetItemString(native, "index_words");
    PyObject *io = PyDict_GetItemString(native, "index_offset");
    PyObject *bw = PyDict_GetItemString(native, "bell_words");
    PyObject *bo = PyDict_GetItemString(native, "bell_offset");
    PyObject *q = PyDict_GetItemString(native, "queue");
    PyObject *fw = PyDict_GetItemString(native, "flags");
    PyObject *fu = PyDict_GetItemString(native, "flag_unusual_bytes");
    PyObject *fk = PyDict_GetItemString(native, "flag_wake");
    PyObject *proc = PyDict_GetItemString(native, "processor");
    PyObject *rung = PyDict_GetItemString(native, "rung");
    if (!iw || !io || !bw || !bo || !q || !fw || !fu || !fk || !proc || !rung) {
        PyErr_SetString(PyExc_KeyError, "hot path: native_ops() lacks a key");
        return -1;
    }
    self->index_off = PyLong_AsSsize_t(io);
    self->bell_off = PyLong_AsSsize_t(bo);
    PyObject *ro = PyDict_GetItemString(native, "read_offset"); /* optional */
    self->read_off = ro ? PyLong_AsSsize_t(ro) : -1;
    self->flag_unusual = PyLong_AsSsize_t(fu);
    self->flag_wake = PyLong_AsSsize_t(fk);
    if (PyErr_Occurred())
        return -1;
    if (writable(iw, &self->index_mem, "write index") < 0)
        return -1;
    if (writable(bw, &self->bell_mem, "doorbell") < 0)
        return -1;
    if (writable(fw, &self->flags_mem, "flags") < 0)
        return -1;
    if (writable(rung, &self->rung_mem, "rung") < 0)
        return -1;
    if (self->rung_mem.len != 8 || ((uintptr_t)self->rung_mem.buf & 7)) {
        PyErr_SetString(PyExc_ValueError, "hot path: native_ops()'s rung is not one int64");
        return -1;
    }
    if (self->flag_unusual != 4 || self->flags_mem.len < 4 || ((uintptr_t)self->flags_mem.buf & 3) ||
        self->flag_wake < 4 || self->flag_wake >= self->flags_mem.len) {
        PyErr_SetString(PyExc_ValueError,
                        "hot path: native_ops()'s flag word is not 4 aligned unusual bytes and a "
                        "wake byte after them");
        return -1;
    }
    if (self->index_off < 0 || self->index_off % 8 || self->index_off + 8 > self->index_mem.len ||
        (self->read_off >= 0 && (self->read_off % 8 || self->read_off + 8 > self->index_mem.len)) ||
        self->bell_off < 0 || self->bell_off % 8 || self->bell_off + 8 > self->bell_mem.len) {
        PyErr_SetString(PyExc_ValueError, "hot path: native_ops() offsets outside their words");
        return -1;
    }
    self->queue = Py_NewRef(q);
    self->processor = Py_NewRef(proc);
    self->native = NATIVE_VIRTUAL;
    return 0;
}

/* rview: the ring's packet memory; size: its slots; awi, bell: the queue's add_write_index
 * and doorbell callables; room: its packets.ring.Room; hint, read: the write and read
 * indices now; native: VirtualQueue.native_ops()'s dict (or RocrQueue's), or None. */
static int port_init(RingPort *self, PyObject *rview, Py_ssize_t size, PyObject *awi,
                     PyObject *bell, PyObject *room, PyObject *hint, PyObject *read,
                     PyObject *native) {
    self->add_write_index = Py_NewRef(awi);
    self->doorbell = Py_NewRef(bell);
    self->before_reserve = PyObject_GetAttrString(room, "before_reserve");
    self->after_reserve = PyObject_GetAttrString(room, "after_reserve");
    if (self->before_reserve == NULL || self->after_reserve == NULL)
        return -1;
    if (size <= 0 || (size & (size - 1))) {
        PyErr_SetString(PyExc_ValueError, "hot path: the ring size is not a power of two");
        return -1;
    }
    self->ring_size = size;
    self->mask = self->ring_size - 1;
    if (as_i128(hint, &self->hint) < 0 || as_i128(read, &self->read) < 0)
        return -1;
    if (writable(rview, &self->mem, "ring") < 0)
        return -1;
    self->have_mem = 1;
    if (self->mem.len < self->ring_size * 64 || ((uintptr_t)self->mem.buf & 3)) {
        PyErr_SetString(PyExc_ValueError,
                        "hot path: the ring's memory is smaller than its slots or unaligned");
        return -1;
    }
    if (native != Py_None) {
        if (!PyDict_Check(native)) {
            PyErr_SetString(PyExc_TypeError, "hot path: native is a dict or None");
            return -1;
        }
        if (port_native(self, native) < 0)
            return -1;
    }
    return 0;
}

/* ---- LaneLock: the lane's lock ------------------------------------------------------------- */

/* A plain mutex the Lane owns (QueueLane.lock is it): taken from C without a Python call
 * (a pthread mutex: an uncontended take is one atomic, where CPython's lock also reads the
 * clock), and from Python with `with lane.lock:` (or acquire/release, as threading.Lock;
 * released by the thread that took it). A blocked acquire releases the GIL while it
 * waits. */
typedef struct {
    PyObject_HEAD
    pthread_mutex_t mutex;
    int ready, held;
} LaneLock;

static PyTypeObject LaneLockType;

/* 1 taken, 0 not within `us` microseconds (0: do not wait; negative: wait for good) */
static int lock_take(LaneLock *self, long long us) {
    if (pthread_mutex_trylock(&self->mutex) != 0) {
        if (us == 0)
            return 0;
        int r;
        if (us < 0) {
            Py_BEGIN_ALLOW_THREADS
            r = pthread_mutex_lock(&self->mutex);
            Py_END_ALLOW_THREADS
        } else {
            struct timespec at;
            clock_gettime(CLOCK_REALTIME, &at);
            long long ns = at.tv_nsec + (us % 1000000) * 1000;
            at.tv_sec += (time_t)(us / 1000000 + ns / 1000000000);
            at.tv_nsec = (long)(ns % 1000000000);
            Py_BEGIN_ALLOW_THREADS
            r = pthread_mutex_timedlock(&self->mutex, &at);
            Py_END_ALLOW_THREADS
        }
        if (r != 0)
            return 0;
    }
    self->held = 1;
    return 1;
}

static int lock_give(LaneLock *self) {
    if (!self->held) {
        PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
        return -1;
    }
    self->held = 0;
    pthread_mutex_unlock(&self->mutex);
    return 0;
}

static PyObject *lock_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    if (PyTuple_GET_SIZE(args) || (kw && PyDict_GET_SIZE(kw))) {
        PyErr_SetString(PyExc_TypeError, "LaneLock() takes no arguments");
        return NULL;
    }
    LaneLock *self = (LaneLock *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    if (pthread_mutex_init(&self->mutex, NULL) != 0) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->ready = 1;
    return (PyObject *)self;
}

static void lock_dealloc(LaneLock *self) {
    if (self->ready) {
        if (self->held)
            pthread_mutex_unlock(&self->mutex);
        pthread_mutex_destroy(&self->mutex);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *lock_acquire(LaneLock *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"blocking", "timeout", NULL};
    int blocking = 1;
    double timeout = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|pd:acquire", names, &blocking, &timeout))
        return NULL;
    long long us = !blocking ? 0 : timeout < 0 ? -1 : (long long)(timeout * 1e6);
    return PyBool_FromLong(lock_take(self, us));
}

static PyObject *lock_enter(LaneLock *self, PyObject *unused) {
    lock_take(self, -1);
    Py_RETURN_TRUE;
}

static PyObject *lock_release(LaneLock *self, PyObject *const *args, Py_ssize_t nargs) {
    if (lock_give(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *lock_locked(LaneLock *self, PyObject *unused) {
    return PyBool_FromLong(self->held);
}

static PyMethodDef lock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))lock_acquire, METH_VARARGS | METH_KEYWORDS,
     "acquire(blocking=True, timeout=-1) -> bool"},
    {"release", (PyCFunction)(void (*)(void))lock_release, METH_FASTCALL, "release()"},
    {"locked", (PyCFunction)lock_locked, METH_NOARGS, "locked() -> bool"},
    {"__enter__", (PyCFunction)lock_enter, METH_NOARGS, "acquire()"},
    {"__exit__", (PyCFunction)(void (*)(void))lock_release, METH_FASTCALL, "release()"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LaneLockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "amdgpu.hsa_backend._hotpath.LaneLock",
    .tp_basicsize = sizeof(LaneLock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A Lane's lock (acquire/release/with, as threading.Lock)",
    .tp_new = lock_new,
    .tp_dealloc = (destructor)lock_dealloc,
    .tp_methods = lock_methods,
};

/* ---- Lane: the one submission sequence ---------------------------------------------------- */

/* A kernarg block in use: its start offset and the timeline value that frees it. */
typedef struct {
    Py_ssize_t start;
    uint64_t value;
} KernargBlock;

/* One QueueLane's submission, made once per lane (QueueLane.__init__) and owning its state:
 * the AQL ring port (indices, doorbell count), the kernarg ring (KernargRing's algorithm:
 * head, limit and the live blocks, oldest first), the lock and the timeline counter
 * (`submitted`). Every packet the HSA backend publishes on a lane when this module is
 * built goes through lane_publish below, the one reserve/body/header/doorbell sequence. */
typedef struct {
    PyObject_HEAD
    LaneLock *lock;
    uint64_t submitted;                          /* timeline value of the latest submission */
    int timed;                                   /* a DispatchTimer is on (set_timed) */
    PyObject *completed, *wait;                  /* QueueLane.completed, QueueLane.wait */
    PyObject *ready_view, *rows_view, *many_view, *block_view; /* packets.ring's checks */
    Py_buffer kernarg;                           /* kernarg ring memory */
    int have_kernarg;
    unsigned long long base;                     /* its device address */
    Py_ssize_t capacity, head, limit;            /* KernargRing's fields */
    KernargBlock *blocks;                        /* live blocks, a circular array */
    Py_ssize_t first, count, room;
    RingPort port;
} Lane;

static PyTypeObject LaneType;
static PyObject *KernelArgumentError, *SignalTimeout; /* ground.errors */

/* The publish mode, chosen when it changes, never looked up per call: a trace sink is
 * active (`traced`, set through set_traced, which hotpath.py registers with
 * packets.trace.watch_sink: every set_sink and the AMDGPU_TRACE writer's creation call
 * it), or the lane's device has a DispatchTimer (Lane.timed, set by
 * HsaDevice.set_timer). A watched lane's dispatches and replays take the Python methods
 * (the timed and traced publishers); Dispatch and Submit test this one pair of ints. */
static int traced;

static inline int lane_watched(const Lane *lane) { return lane->timed || traced; }

/* ---- the kernarg ring (amdgpu.hsa_backend.kernargs.KernargRing is its Python form) ---- */

static int kr_push(Lane *self, Py_ssize_t start, uint64_t value) {
    if (self->count == self->room) {
        Py_ssize_t room = self->room ? 2 * self->room : 256;
        KernargBlock *b = PyMem_Malloc((size_t)room * sizeof(KernargBlock));
        if (b == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < self->count; i++)
            b[i] = self->blocks[(self->first + i) % self->room];
        PyMem_Free(self->blocks);
        self->blocks = b;
        self->first = 0;
        self->room = room;
    }
    KernargBlock *slot = &self->blocks[(self->first + self->count) % self->room];
    slot->start = start;
    slot->value = value;
    self->count++;
    return 0;
}

static void kr_update_limit(Lane *self) {
    if (self->count == 0) {
        self->limit = self->capacity;
        return;
    }
    Py_ssize_t tail = self->blocks[self->first].start;
    self->limit = self->head > tail ? self->capacity : tail;
}

static Py_ssize_t kr_fit(Lane *self, Py_ssize_t nbytes) { /* -1: no room */
    if (self->count == 0)
        return 0;
    Py_ssize_t head = self->head, tail = self->blocks[self->first].start;
    if (head > tail) /* live run is [tail, head): free at the end, then at the start */
        return head + nbytes <= self->capacity ? head : nbytes <= tail ? 0 : -1;
    return head + nbytes <= tail ? head : -1; /* wrapped: free run is [head, tail) */
}

/* SignalTimeout(e.status, "kernarg ring full and " + e.text, e.call) from e */
static void kr_full(void) {
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    PyObject *status = PyObject_GetAttrString(ev, "status");
    PyObject *text = status ? PyObject_GetAttrString(ev, "text") : NULL;
    PyObject *call = text ? PyObject_GetAttrString(ev, "call") : NULL;
    PyObject *msg = call ? PyUnicode_FromFormat("kernarg ring full and %S", text) : NULL;
    PyObject *err = msg ? PyObject_CallFunctionObjArgs(SignalTimeout, status, msg, call, NULL)
                        : NULL;
    Py_XDECREF(status);
    Py_XDECREF(text);
    Py_XDECREF(call);
    Py_XDECREF(msg);
    if (err == NULL) { /* keep the first error */
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        return;
    }
    if (tb != NULL)
        PyException_SetTraceback(ev, tb);
    PyException_SetCause(err, ev); /* steals ev */
    Py_XDECREF(tb);
    Py_DECREF(et);
    PyErr_SetObject(SignalTimeout, err);
    Py_DECREF(err);
}

/* KernargRing._reclaim: free the blocks whose values completed; when none did and `block`,
 * wait for the oldest (QueueLane.wait) and look again. */
static int kr_reclaim(Lane *self, int block, PyObject *timeout) {
    for (;;) {
        PyObject *r = PyObject_CallNoArgs(self->completed);
        if (r == NULL)
            return -1;
        unsigned long long done = PyLong_AsUnsignedLongLong(r);
        Py_DECREF(r);
        if (done == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        int freed = 0;
        while (self->count && self->blocks[self->first].value <= done) {
            self->first = (self->first + 1) % self->room;
            self->count--;
            freed = 1;
        }
        if (self->count == 0)
            self->head = 0;
        if (freed || !block || self->count == 0) {
            kr_update_limit(self);
            return 0;
        }
        PyObject *oldest = PyLong_FromUnsignedLongLong(self->blocks[self->first].value);
        if (oldest == NULL)
            return -1;
        PyObject *argv[2] = {oldest, timeout};
        r = PyObject_Vectorcall(self->wait, argv, 2, NULL);
        Py_DECREF(oldest);
        if (r == NULL) {
            if (PyErr_ExceptionMatches(SignalTimeout))
                kr_full();
            return -1;
        }
        Py_DECREF(r);
        block = 0;
    }
}

/* KernargRing.allocate: the offset of a fresh 16-byte aligned block of `nbytes` for the
 * submission of timeline value `value`, or -1 with an error. `timeout`: a float (seconds),
 * NULL for the default. */
static Py_ssize_t kr_allocate(Lane *self, Py_ssize_t nbytes, uint64_t value, PyObject *timeout) {
    nbytes = (nbytes + 15) & ~(Py_ssize_t)15;
    Py_ssize_t start = self->head;
    if (nbytes && start + nbytes <= self->limit) { /* the common case: room after head */
        if (kr_push(self, start, value) < 0)
            return -1;
        self->head = start + nbytes;
        return start;
    }
    if (nbytes < 16)
        nbytes = 16;
    if (nbytes > self->capacity) {
        PyErr_Format(KernelArgumentError,
                     "%zd bytes of kernel arguments exceed the %zd-byte kernarg ring: submit "
                     "fewer dispatches at once", nbytes, self->capacity);
        return -1;
    }
    PyObject *t = timeout ? Py_NewRef(timeout) : PyFloat_FromDouble(10.0);
    if (t == NULL)
        return -1;
    for (int block = 0;; block = 1) {
        if (kr_reclaim(self, block, t) < 0) {
            Py_DECREF(t);
            return -1;
        }
        start = kr_fit(self, nbytes);
        if (start >= 0) {
            Py_DECREF(t);
            if (kr_push(self, start, value) < 0)
                return -1;
            self->head = start + nbytes;
            kr_update_limit(self);
            return start;
        }
    }
}

/* ---- the publish sequence ------------------------------------------------------------------ */

/* publish_rows's two fields (Ring.publish_rows), or none (patch NULL), and where the rows
 * come from: row i is the 64 bytes at templates + 64 * index[i] (a Rows: the block's
 * distinct rows once each), or at templates + 64 * i (index NULL: the block itself). */
typedef struct {
    uint64_t base, signal;
    const uint64_t *offsets;
    Py_ssize_t k, signal_row;
    const char *templates;
    const uint32_t *index;
} RowPatch;

/* Rows 1..n-1 of a kept replay into the ring from id idx + 1 on, the kernarg address
 * (u64 word 5) of each of the first k rows set on its way (base + offsets[i]): one pass
 * over the rows, in runs that do not wrap. The stores are plain (the first header's
 * release store publishes them). With the AVX2 form (chosen once, at import, where the
 * CPU has it) a row is two 32-byte loads of its template, word 5 blended into the upper
 * half in a register and two 32-byte stores; the plain form (any CPU) copies 64 bytes and
 * stores word 5 after. A Rows' templates stay in the L1 cache, so a replay reads ~12
 * bytes a row (index, offset) instead of 72: it costs about what the ring's stores cost
 * alone (docs/BENCHMARKS.md, "The AQL replay of 10,000"). */
#define COPY_ROWS_RUNS(ROW_PATCHED, ROW_COPY, SRC)                                          \
    for (Py_ssize_t i = 1; i < n;) {                                                        \
        const Py_ssize_t start = (Py_ssize_t)((idx + (uint64_t)i) & mask);                  \
        Py_ssize_t run = (Py_ssize_t)(mask + 1) - start;                                    \
        if (run > n - i)                                                                    \
            run = n - i;                                                                    \
        char *dst = mem + (start << 6);                                                     \
        Py_ssize_t patched = k - i;                                                         \
        patched = patched < 0 ? 0 : patched > run ? run : patched;                          \
        for (Py_ssize_t j = 0; j < patched; j++)                                            \
            ROW_PATCHED(dst + (j << 6), SRC(i + j), base + offsets[i + j]);                 \
        for (Py_ssize_t j = patched; j < run; j++)                                          \
            ROW_COPY(dst + (j << 6), SRC(i + j));                                           \
        i += run;                                                                           \
    }
/* The fields in locals: the ring's stores may alias *p as far as the compiler knows, and
 * reloading them every row cost ~20% (measured); the index test hoisted out of the loop. */
#define ROW_OF_INDEX(r) (templates + ((size_t)index[r] << 6))
#define ROW_OF_BLOCK(r) (templates + ((size_t)(r) << 6))
#define COPY_ROWS_BODY(ROW_PATCHED, ROW_COPY)                                               \
    const char *const templates = p->templates;                                             \
    const uint32_t *const index = p->index;                                                 \
    const uint64_t *const offsets = p->offsets;                                             \
    const uint64_t base = p->base;                                                          \
    const Py_ssize_t k = p->k;                                                              \
    if (index != NULL)                                                                      \
        COPY_ROWS_RUNS(ROW_PATCHED, ROW_COPY, ROW_OF_INDEX)                                 \
    else                                                                                    \
        COPY_ROWS_RUNS(ROW_PATCHED, ROW_COPY, ROW_OF_BLOCK)

#define ROW_MEMCPY(d, s) memcpy((d), (s), 64)
#define ROW_MEMCPY_PATCHED(d, s, karg)                                                      \
    do {                                                                                    \
        memcpy((d), (s), 64);                                                               \
        ((uint64_t *)(d))[5] = (karg);                                                      \
    } while (0)
static void copy_rows_plain(char *mem, uint64_t mask, uint64_t idx, Py_ssize_t n,
                            const RowPatch *p) {
    COPY_ROWS_BODY(ROW_MEMCPY_PATCHED, ROW_MEMCPY)
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ROW_AVX2(d, s)                                                                      \
    do {                                                                                    \
        __m256i lo_ = _mm256_loadu_si256((const __m256i *)(s));                             \
        __m256i hi_ = _mm256_loadu_si256((const __m256i *)((s) + 32));                      \
        _mm256_storeu_si256((__m256i *)(d), lo_);                                           \
        _mm256_storeu_si256((__m256i *)((d) + 32), hi_);                                    \
    } while (0)
/* word 5 is u32 lanes 2 and 3 of the upper 32 bytes: blended in, one store fewer */
#define ROW_AVX2_PATCHED(d, s, karg)                                                        \
    do {                                                                                    \
        __m256i lo_ = _mm256_loadu_si256((const __m256i *)(s));                             \
        __m256i hi_ = _mm256_loadu_si256((const __m256i *)((s) + 32));                      \
        hi_ = _mm256_blend_epi32(hi_, _mm256_set1_epi64x((long long)(karg)), 0x0c);         \
        _mm256_storeu_si256((__m256i *)(d), lo_);                                           \
        _mm256_storeu_si256((__m256i *)((d) + 32), hi_);                                    \
    } while (0)
__attribute__((target("avx2"))) static void copy_rows_avx2(char *mem, uint64_t mask,
                                                          uint64_t idx, Py_ssize_t n,
                                                          const RowPatch *p) {
    COPY_ROWS_BODY(ROW_AVX2_PATCHED, ROW_AVX2)
}
#endif

static void (*copy_rows)(char *, uint64_t, uint64_t, Py_ssize_t, const RowPatch *) =
    copy_rows_plain;

/* ---- Rows: a packet block's distinct rows, once each ---------------------------------- */

/* Rows(block, k): the rows of a kept packet block (its first header INVALID) as templates
 * (each distinct row once, its kernarg address word zeroed where it is one of the first k
 * rows, which a replay sets) and one u32 template index per row. A command buffer's
 * packets repeat (one kernel and grid for many dispatches, the kernarg address apart), so
 * the templates are few and a replay expands them into the ring instead of reading the
 * whole block (HsaCommandBuffer's finalize makes one per segment whose packets carry no
 * parameter grids; Lane.submit_rows takes it in place of the block). Read-only once made;
 * `block` is the block it was made from (what a refusal names), `n`, `k` and `distinct`
 * its counts. */
typedef struct {
    PyObject_HEAD
    PyObject *block;
    Py_ssize_t n, k, distinct;
    char *templates; /* distinct * 64 bytes */
    uint32_t *index; /* n */
} Rows;

static PyTypeObject RowsType;

static uint64_t row_hash(const uint64_t *w) {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 8; i++)
        h = (h ^ w[i]) * 0xFF51AFD7ED558CCDull;
    return h ^ (h >> 29);
}

static PyObject *rows_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *names[] = {"block", "k", NULL};
    PyObject *block;
    Py_ssize_t k;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "On", names, &block, &k))
        return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(block, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    const Py_ssize_t n = b.len >> 6;
    if (b.len % 64 || n < 1 || n > (Py_ssize_t)UINT32_MAX || k < 0 || k > n ||
        ((const unsigned char *)b.buf)[0] != INVALID_TYPE) {
        PyErr_Format(PyExc_ValueError,
                     "Rows takes a packet block of 1.. packets whose first header is INVALID "
                     "and 0..n kernarg rows (got %zd bytes, k %zd)", b.len, k);
        PyBuffer_Release(&b);
        return NULL;
    }
    Rows *self = (Rows *)type->tp_alloc(type, 0);
    size_t slots = 16;
    while (slots < 2 * (size_t)n)
        slots <<= 1;
    uint32_t *table = PyMem_Malloc(slots * sizeof(uint32_t)); /* template + 1, 0 empty */
    char *templates = PyMem_Malloc((size_t)n * 64);
    uint32_t *index = PyMem_Malloc((size_t)n * sizeof(uint32_t));
    if (self == NULL || table == NULL || templates == NULL || index == NULL) {
        PyMem_Free(table);
        PyMem_Free(templates);
        PyMem_Free(index);
        Py_XDECREF(self);
        PyBuffer_Release(&b);
        return PyErr_NoMemory();
    }
    memset(table, 0, slots * sizeof(uint32_t));
    Py_ssize_t distinct = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t row[8];
        memcpy(row, (const char *)b.buf + (i << 6), 64);
        if (i < k)
            row[5] = 0; /* the kernarg address: set by each replay */
        size_t h = (size_t)row_hash(row) & (slots - 1);
        while (table[h] && memcmp(templates + ((size_t)(table[h] - 1) << 6), row, 64))
            h = (h + 1) & (slots - 1);
        if (!table[h]) {
            memcpy(templates + (distinct << 6), row, 64);
            table[h] = (uint32_t)++distinct;
        }
        index[i] = table[h] - 1;
    }
    PyMem_Free(table);
    PyBuffer_Release(&b);
    char *shrunk = PyMem_Realloc(templates, (size_t)distinct * 64);
    self->templates = shrunk ? shrunk : templates;
    self->index = index;
    self->n = n;
    self->k = k;
    self->distinct = distinct;
    self->block = Py_NewRef(block);
    return (PyObject *)self;
}

static void rows_dealloc(Rows *self) {
    Py_XDECREF(self->block);
    PyMem_Free(self->templates);
    PyMem_Free(self->index);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef rows_members[] = {
    {"block", T_OBJECT, offsetof(Rows, block), READONLY, "the block it was made from"},
    {"n", T_PYSSIZET, offsetof(Rows, n), READONLY, "rows"},
    {"k", T_PYSSIZET, offsetof(Rows, k), READONLY, "kernarg rows (the first k)"},
    {"distinct", T_PYSSIZET, offsetof(Rows, distinct), READONLY, "templates"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject RowsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "amdgpu.hsa_backend._hotpath.Rows",
    .tp_basicsize = sizeof(Rows),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Rows(block, k): a kept packet block's distinct rows once each, and each "
              "row's template (Lane.submit_rows takes it in place of the block)",
    .tp_new = rows_new,
    .tp_dealloc = (destructor)rows_dealloc,
    .tp_members = rows_members,
};

static int64_t now_ns(void) { /* time.monotonic_ns() */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The one publish sequence (see the top of this file): reserve n = nbytes / 64 ids with room
 * for them, bytes [4, nbytes) of `src` into their slots (two copies where the ring wraps;
 * row by row with `patch`'s fields set on the way), the header words of rows 2..n from
 * `headers` where given, `first_header` into the first slot's header word with one
 * release store, the doorbell count, the doorbell with the last id. `src`'s own first
 * header word is never copied: a block keeps it INVALID, a launch's template holds its
 * header apart. `times` (or NULL): the reserve, publish and doorbell times. The first
 * id into *first: 0, or -1 with an error. The common case (room known, a native write
 * index and doorbell) makes no Python object. */
static int lane_publish(RingPort *port, const char *src, Py_ssize_t nbytes,
                        uint32_t first_header, const RowPatch *patch, const uint32_t *headers,
                        int64_t *times, __int128 *first) {
    const __int128 n = nbytes >> 6;
    __int128 idx;
    PyObject *r, *idx_obj = NULL, *n_obj = NULL;

    if (times != NULL)
        times[0] = now_ns();
    if (port->hint + n - port->read > port->ring_size && port->native == NATIVE_VIRTUAL &&
        port->read_off >= 0) { /* Room.before_reserve's first look, at the queue's words */
        const char *words = (const char *)port->index_mem.buf;
        const uint64_t write = __atomic_load_n((const uint64_t *)(words + port->index_off),
                                               __ATOMIC_RELAXED);
        const uint64_t read = __atomic_load_n((const uint64_t *)(words + port->read_off),
                                              __ATOMIC_ACQUIRE);
        if ((__int128)read > port->read)
            port->read = read;
        if ((__int128)write > port->hint)
            port->hint = write;
    }
    if (port->hint + n - port->read > port->ring_size) { /* Room.before_reserve */
        if ((n_obj = from_i128(n)) == NULL)
            return -1;
        r = PyObject_CallOneArg(port->before_reserve, n_obj);
        Py_CLEAR(n_obj);
        if (r == NULL)
            return -1;
        __int128 write, read;
        int bad = !PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2 ||
                  as_i128(PyTuple_GET_ITEM(r, 0), &write) < 0 ||
                  as_i128(PyTuple_GET_ITEM(r, 1), &read) < 0;
        Py_DECREF(r);
        if (bad) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "hot path: Room.before_reserve's answer");
            return -1;
        }
        if (read > port->read)
            port->read = read;
        if (write > port->hint)
            port->hint = write;
    }
    if (port_reserve(port, (uint64_t)n, &idx) < 0)
        return -1;
    /* `hint` and `read` are read again here, not kept from before: a provider's
     * add_write_index or the wait may run Python code, and another thread may have
     * published on this port meanwhile (the native reserve runs none). */
    const __int128 last_id = idx + n - 1;
    if (last_id >= port->hint)
        port->hint = last_id + 1;
    if (last_id - port->read >= port->ring_size) { /* Room.after_reserve */
        idx_obj = from_i128(idx);
        n_obj = idx_obj ? from_i128(n) : NULL;
        PyObject *argv[2] = {idx_obj, n_obj};
        r = n_obj ? PyObject_Vectorcall(port->after_reserve, argv, 2, NULL) : NULL;
        Py_XDECREF(idx_obj);
        Py_XDECREF(n_obj);
        if (r == NULL)
            return -1;
        __int128 read;
        int bad = as_i128(r, &read) < 0;
        Py_DECREF(r);
        if (bad)
            return -1;
        if (read > port->read)
            port->read = read;
    }
    {
        const Py_ssize_t ring_bytes = (Py_ssize_t)(port->ring_size << 6);
        const Py_ssize_t off = (Py_ssize_t)((idx & port->mask) << 6);
        const Py_ssize_t tail = ring_bytes - off; /* >= 64: slots are whole */
        char *mem = (char *)port->mem.buf;
        if (patch != NULL) { /* row by row, each row's fields set on its way in */
            /* the first row: its header stays apart */
            memcpy(mem + off + 4, patch->templates + ((size_t)(patch->index ? patch->index[0] : 0) << 6) + 4, 60);
            if (patch->k > 0)
                ((uint64_t *)(mem + off))[5] = patch->base + patch->offsets[0];
            copy_rows(mem, (uint64_t)port->mask, (uint64_t)idx, (Py_ssize_t)n, patch);
            ((uint64_t *)(mem + (Py_ssize_t)(((idx + patch->signal_row) & port->mask) << 6)))[7] =
                patch->signal;
        } else if (nbytes <= tail) {
            memcpy(mem + off + 4, src + 4, (size_t)(nbytes - 4));
        } else {
            memcpy(mem + off + 4, src + 4, (size_t)(tail - 4));
            memcpy(mem, src + tail, (size_t)(nbytes - tail));
        }
        if (headers != NULL) /* rows 2..n: reached only through row 1, stored last */
            for (Py_ssize_t i = 1; i < (Py_ssize_t)n; i++)
                *(uint32_t *)(mem + (Py_ssize_t)(((idx + i) & port->mask) << 6)) = headers[i];
        __atomic_store_n((uint32_t *)(mem + off), first_header, __ATOMIC_RELEASE);
    }
    port->doorbells++;
    if (times != NULL)
        times[1] = now_ns();
    if (port_doorbell(port, last_id) < 0)
        return -1;
    if (times != NULL)
        times[2] = now_ns();
    *first = idx;
    return 0;
}

/* An immediate dispatch's steps under the lane's lock: the timeline value, a kernarg block
 * of `size` bytes, `data` into it, the template's kernarg address (u64 word 5), the
 * template published with `header`, the lane's counter. The new value, or 0 with an error. */
static uint64_t lane_submit_locked(Lane *self, char *templ, uint32_t header, Py_ssize_t size,
                                   PyObject *data) {
    if (!PyBytes_CheckExact(data) || PyBytes_GET_SIZE(data) != size) {
        PyErr_Format(PyExc_ValueError, "hot path: kernarg data is %zd bytes of %s, want %zd",
                     PyBytes_Check(data) ? PyBytes_GET_SIZE(data) : (Py_ssize_t)-1,
                     Py_TYPE(data)->tp_name, size);
        return 0;
    }
    const uint64_t value = self->submitted + 1;
    Py_ssize_t head = kr_allocate(self, size, value, NULL);
    if (head < 0)
        return 0;
    if (head + size > self->kernarg.len) {
        PyErr_SetString(PyExc_IndexError, "hot path: kernarg block outside the kernarg memory");
        return 0;
    }
    memcpy((char *)self->kernarg.buf + head, PyBytes_AS_STRING(data), (size_t)size);
    ((uint64_t *)templ)[5] = self->base + (uint64_t)head; /* kernarg_address */
    __int128 first;
    if (lane_publish(&self->port, templ, 64, header, NULL, NULL, NULL, &first) < 0)
        return 0;
    self->submitted = value;
    return value;
}

/* lane_submit_locked with the lane's lock held around it: a new reference to the value. */
static PyObject *lane_submit(Lane *self, char *templ, uint32_t header, Py_ssize_t size,
                             PyObject *data) {
    lock_take(self->lock, -1);
    uint64_t value = lane_submit_locked(self, templ, header, size, data);
    lock_give(self->lock);
    return value ? PyLong_FromUnsignedLongLong(value) : NULL;
}

/* `block` as a C-contiguous byte buffer in `view`: its own, else packets.ring.block_view's
 * (a copy of a strided array; PacketError for what is no packet block). */
static int lane_view(Lane *self, PyObject *block, Py_buffer *view) {
    if (PyObject_GetBuffer(block, view, PyBUF_SIMPLE) == 0)
        return 0;
    PyErr_Clear();
    PyObject *v = PyObject_CallOneArg(self->block_view, block);
    if (v == NULL)
        return -1;
    int r = PyObject_GetBuffer(v, view, PyBUF_SIMPLE);
    Py_DECREF(v);
    return r;
}

/* What a form refuses: packets.ring's check of that form (ready_view, rows_view,
 * many_view) called on the block's bytes, which raises its one-line PacketError. */
static int lane_refuse(Lane *self, PyObject *check, Py_buffer *src, PyObject *const *rest,
                       int nrest) {
    PyObject *mv = PyObject_CallOneArg(self->block_view, src->obj); /* its flat bytes */
    if (mv == NULL)
        return -1;
    PyObject *argv[4] = {mv, NULL, NULL, NULL};
    for (int i = 0; i < nrest; i++)
        argv[1 + i] = rest[i];
    PyObject *r = PyObject_Vectorcall(check, argv, (size_t)(1 + nrest), NULL);
    Py_DECREF(mv);
    if (r != NULL) {
        Py_DECREF(r);
        PyErr_SetString(PyExc_SystemError, "hot path: a block the Python check accepts");
    }
    return -1;
}

static int u32_words(Py_buffer *b) {
    const char *f = b->format ? b->format : "B";
    return b->itemsize == 4 && (strcmp(f, "I") == 0 || strcmp(f, "<I") == 0 ||
                                strcmp(f, "=I") == 0);
}

static int u64_words(Py_buffer *b) {
    const char *f = b->format ? b->format : "B";
    return b->itemsize == 8 && (strcmp(f, "Q") == 0 || strcmp(f, "<Q") == 0 ||
                                strcmp(f, "=Q") == 0 || strcmp(f, "L") == 0);
}

/* submit_block(block, first_header=None, headers=None) and its timed form: a packet block
 * published in one sequence.
 *   - block alone: ready packets (a barrier, wait packets, a copy's packets), its own
 *     first header stored last (Ring.publish_many's plain form);
 *   - first_header: a kept block whose first header is INVALID (Ring.publish_ready);
 *   - headers (a uint32 array, one word per packet): a block whose headers are all
 *     INVALID, each stored after the copy, the first last (publish_many(block, headers)).
 * Called with the lane's lock held by the caller, which moves the counter. */
static PyObject *lane_block(Lane *self, PyObject *const *args, Py_ssize_t nargs,
                            int64_t *times) {
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "submit_block(block, first_header=None, headers=None)");
        return NULL;
    }
    PyObject *first = nargs > 1 ? args[1] : Py_None, *hdr = nargs > 2 ? args[2] : Py_None;
    unsigned long long header = 0;
    if (first != Py_None && (header = PyLong_AsUnsignedLongLong(first)) == (unsigned long long)-1 &&
        PyErr_Occurred())
        return NULL;
    if (header > UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "hot path: a header word beyond 32 bits");
        return NULL;
    }
    Py_buffer src, hb;
    hb.obj = NULL;
    if (lane_view(self, args[0], &src) < 0)
        return NULL;
    const Py_ssize_t n = src.len >> 6;
    const unsigned char first_type = src.len ? ((const unsigned char *)src.buf)[0] : 0;
    PyObject *size = PyLong_FromSsize_t((Py_ssize_t)self->port.ring_size), *r = NULL;
    if (size == NULL)
        goto done;
    if (hdr != Py_None) { /* all headers apart */
        if (PyObject_GetBuffer(hdr, &hb, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        if (!u32_words(&hb)) {
            PyErr_SetString(PyExc_TypeError, "hot path: headers is a uint32 array");
            goto done;
        }
        PyObject *rest[2] = {size, hdr};
        if (src.len % 64 || n > self->port.ring_size || hb.len / 4 != n ||
            (n && first_type != INVALID_TYPE)) {
            lane_refuse(self, self->many_view, &src, rest, 2);
            goto done;
        }
        header = n ? ((const uint32_t *)hb.buf)[0] : 0;
    } else if (first != Py_None) { /* the first header apart */
        if (src.len % 64 || n <= 0 || n > self->port.ring_size || first_type != INVALID_TYPE) {
            lane_refuse(self, self->ready_view, &src, &size, 1);
            goto done;
        }
    } else { /* ready packets */
        if (src.len % 64 || n > self->port.ring_size) {
            lane_refuse(self, self->many_view, &src, &size, 1);
            goto done;
        }
        if (n)
            header = *(const uint32_t *)src.buf;
    }
    __int128 idx;
    if (n == 0) { /* nothing to publish: the write index (publish_many's answer) */
        if (port_reserve(&self->port, 0, &idx) == 0 && (r = from_i128(idx)) != NULL &&
            times != NULL)
            times[0] = times[1] = times[2] = now_ns();
        goto done;
    }
    if (lane_publish(&self->port, (const char *)src.buf, src.len, (uint32_t)header, NULL,
                     hb.obj ? (const uint32_t *)hb.buf : NULL, times, &idx) == 0)
        r = from_i128(idx);
done:
    Py_XDECREF(size);
    if (hb.obj)
        PyBuffer_Release(&hb);
    PyBuffer_Release(&src);
    return r;
}

static PyObject *lane_submit_block(Lane *self, PyObject *const *args, Py_ssize_t nargs) {
    return lane_block(self, args, nargs, NULL);
}

static PyObject *lane_submit_timed(Lane *self, PyObject *const *args, Py_ssize_t nargs) {
    int64_t times[3];
    PyObject *idx = lane_block(self, args, nargs, times);
    if (idx == NULL)
        return NULL;
    return Py_BuildValue("(NLLL)", idx, (long long)times[0], (long long)times[1],
                         (long long)times[2]);
}

/* submit_rows(block, first_header, kernarg_base, kernarg_offsets, signal_row, signal) ->
 * first id: Ring.publish_rows (a kept replay: the segment's one block, each row's kernarg
 * address and the completion signal set on the way). `block` may be the block's Rows
 * (its templates expanded into the ring: the same bytes). Called with the lane's lock
 * held. */
static PyObject *lane_submit_rows(Lane *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "submit_rows(block, first_header, kernarg_base, "
                                         "kernarg_offsets, signal_row, signal)");
        return NULL;
    }
    unsigned long long header = PyLong_AsUnsignedLongLong(args[1]);
    RowPatch patch;
    patch.base = PyLong_AsUnsignedLongLong(args[2]);
    patch.signal_row = PyLong_AsSsize_t(args[4]);
    patch.signal = PyLong_AsUnsignedLongLong(args[5]);
    if (PyErr_Occurred())
        return NULL;
    if (header > UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "hot path: a header word beyond 32 bits");
        return NULL;
    }
    Py_buffer src, offs;
    if (PyObject_GetBuffer(args[3], &offs, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (!u64_words(&offs)) {
        PyBuffer_Release(&offs);
        PyErr_SetString(PyExc_TypeError, "hot path: kernarg_offsets is a uint64 array");
        return NULL;
    }
    const Rows *rows = Py_TYPE(args[0]) == &RowsType ? (const Rows *)args[0] : NULL;
    if (lane_view(self, rows ? rows->block : args[0], &src) < 0) {
        PyBuffer_Release(&offs);
        return NULL;
    }
    const Py_ssize_t n = src.len >> 6;
    patch.offsets = (const uint64_t *)offs.buf;
    patch.k = offs.len / 8;
    patch.templates = rows ? rows->templates : (const char *)src.buf;
    patch.index = rows ? rows->index : NULL;
    PyObject *r = NULL;
    if (src.len % 64 || n <= 0 || n > self->port.ring_size || patch.k > n ||
        patch.signal_row < 0 || patch.signal_row >= n ||
        ((const unsigned char *)src.buf)[0] != INVALID_TYPE) {
        PyObject *size = PyLong_FromSsize_t((Py_ssize_t)self->port.ring_size);
        PyObject *k = PyLong_FromSsize_t(patch.k);
        if (size && k) {
            PyObject *rest[3] = {size, k, args[4]};
            lane_refuse(self, self->rows_view, &src, rest, 3);
        }
        Py_XDECREF(size);
        Py_XDECREF(k);
    } else if (rows && (rows->n != n || rows->k != patch.k)) { /* made for other rows */
        PyErr_Format(PyExc_ValueError,
                     "hot path: Rows of %zd rows with %zd kernarg rows given %zd rows and %zd "
                     "kernarg offsets", rows->n, rows->k, n, patch.k);
    } else {
        __int128 idx;
        if (lane_publish(&self->port, (const char *)src.buf, src.len, (uint32_t)header, &patch,
                         NULL, NULL, &idx) == 0)
            r = from_i128(idx);
    }
    PyBuffer_Release(&offs);
    PyBuffer_Release(&src);
    return r;
}

/* with lane as value: the lock taken, the next timeline value given; on a normal exit the
 * counter moves to it; the lock is released either way. One submission's frame for the
 * Python steps (barriers, copies, waits, timed and traced publishes, PM4 replays). */
static PyObject *lane_enter(Lane *self, PyObject *unused) {
    lock_take(self->lock, -1);
    return PyLong_FromUnsignedLongLong(self->submitted + 1);
}

static PyObject *lane_exit(Lane *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs >= 1 && args[0] == Py_None)
        self->submitted++;
    if (lock_give(self->lock) < 0)
        return NULL;
    Py_RETURN_FALSE;
}

/* allocate(nbytes, value, timeout=10.0) -> offset: KernargRing.allocate (call it under the
 * lane's lock) */
static PyObject *lane_allocate(Lane *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 2 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "allocate(nbytes, timeline_value, timeout=10.0)");
        return NULL;
    }
    Py_ssize_t nbytes = PyLong_AsSsize_t(args[0]);
    unsigned long long value = PyLong_AsUnsignedLongLong(args[1]);
    if (PyErr_Occurred())
        return NULL;
    if (nbytes < 0) {
        PyErr_SetString(PyExc_ValueError, "allocate: a negative size");
        return NULL;
    }
    Py_ssize_t off = kr_allocate(self, nbytes, value, nargs > 2 ? args[2] : NULL);
    return off < 0 ? NULL : PyLong_FromSsize_t(off);
}

static PyObject *lane_reclaim(Lane *self, PyObject *unused) {
    if (kr_reclaim(self, 0, Py_None) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* [(start, value)] of the live kernarg blocks, oldest first (tests compare the two forms) */
static PyObject *lane_kernarg_blocks(Lane *self, PyObject *unused) {
    PyObject *out = PyList_New(self->count);
    for (Py_ssize_t i = 0; out && i < self->count; i++) {
        KernargBlock *b = &self->blocks[(self->first + i) % self->room];
        PyObject *t = Py_BuildValue("(nK)", b->start, (unsigned long long)b->value);
        if (t == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, t);
    }
    return out;
}

static PyObject *lane_publisher(Lane *self, PyObject *const *args, Py_ssize_t nargs);

/* set_timed(flag): the lane's device started (True) or stopped (False) a DispatchTimer */
static PyObject *lane_set_timed(Lane *self, PyObject *flag) {
    int t = PyObject_IsTrue(flag);
    if (t < 0)
        return NULL;
    self->timed = t;
    Py_RETURN_NONE;
}

static int lane_traverse(Lane *self, visitproc visit, void *arg) {
    Py_VISIT(self->lock);
    Py_VISIT(self->completed);
    Py_VISIT(self->wait);
    Py_VISIT(self->ready_view);
    Py_VISIT(self->rows_view);
    Py_VISIT(self->many_view);
    Py_VISIT(self->block_view);
    return port_traverse(&self->port, visit, arg);
}

static int lane_clear(Lane *self) {
    Py_CLEAR(self->completed);
    Py_CLEAR(self->wait);
    Py_CLEAR(self->ready_view);
    Py_CLEAR(self->rows_view);
    Py_CLEAR(self->many_view);
    Py_CLEAR(self->block_view);
    port_clear(&self->port);
    return 0;
}

static void lane_dealloc(Lane *self) {
    PyObject_GC_UnTrack(self);
    if (self->have_kernarg)
        PyBuffer_Release(&self->kernarg);
    self->have_kernarg = 0;
    port_release(&self->port);
    lane_clear(self);
    Py_CLEAR(self->lock);
    PyMem_Free(self->blocks);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *lane_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *names[] = {"ring_view", "size", "add_write_index", "doorbell", "room",
                            "write_index", "read_index", "native", "kernarg_view",
                            "kernarg_address", "kernarg_capacity", "completed", "wait",
                            "checks", NULL};
    PyObject *rview, *awi, *bell, *room, *hint, *read, *native, *kview, *completed, *wait;
    PyObject *checks;
    Py_ssize_t size, capacity;
    unsigned long long base;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OnOOOOOOOKnOOO", names, &rview, &size, &awi,
                                     &bell, &room, &hint, &read, &native, &kview, &base,
                                     &capacity, &completed, &wait, &checks))
        return NULL;
    Lane *self = (Lane *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->lock = (LaneLock *)PyObject_CallNoArgs((PyObject *)&LaneLockType);
    if (self->lock == NULL)
        goto fail;
    self->base = base;
    self->capacity = capacity;
    self->limit = capacity;
    self->completed = Py_NewRef(completed);
    self->wait = Py_NewRef(wait);
    self->ready_view = PyObject_GetAttrString(checks, "ready_view");
    self->rows_view = PyObject_GetAttrString(checks, "rows_view");
    self->many_view = PyObject_GetAttrString(checks, "many_view");
    self->block_view = PyObject_GetAttrString(checks, "block_view");
    if (!self->ready_view || !self->rows_view || !self->many_view || !self->block_view)
        goto fail;
    if (writable(kview, &self->kernarg, "kernarg memory") < 0)
        goto fail;
    self->have_kernarg = 1;
    if (capacity <= 0 || capacity > self->kernarg.len) {
        PyErr_SetString(PyExc_ValueError, "hot path: the kernarg capacity is outside its memory");
        goto fail;
    }
    if (port_init(&self->port, rview, size, awi, bell, room, hint, read, native) < 0)
        goto fail;
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

static PyMethodDef lane_methods[] = {
    {"submit_block", (PyCFunction)(void (*)(void))lane_submit_block, METH_FASTCALL,
     "submit_block(block, first_header=None, headers=None) -> first id: a packet block "
     "published (ready packets; the first header apart; every header apart)"},
    {"submit_timed", (PyCFunction)(void (*)(void))lane_submit_timed, METH_FASTCALL,
     "submit_timed(block, first_header=None, headers=None) -> (first id, reserve ns, publish "
     "ns, doorbell ns): submit_block for a traced publish"},
    {"submit_rows", (PyCFunction)(void (*)(void))lane_submit_rows, METH_FASTCALL,
     "submit_rows(block, first_header, kernarg_base, kernarg_offsets, signal_row, signal) -> "
     "first id: Ring.publish_rows"},
    {"publisher", (PyCFunction)(void (*)(void))lane_publisher, METH_FASTCALL,
     "publisher(size, words, header) -> publish(data) -> timeline value: one launch's "
     "immediate dispatch on this lane"},
    {"allocate", (PyCFunction)(void (*)(void))lane_allocate, METH_FASTCALL,
     "allocate(nbytes, timeline_value, timeout=10.0) -> offset: a kernarg block "
     "(KernargRing.allocate)"},
    {"reclaim", (PyCFunction)lane_reclaim, METH_NOARGS, "free the completed kernarg blocks"},
    {"set_timed", (PyCFunction)lane_set_timed, METH_O,
     "set_timed(flag): a DispatchTimer started or stopped on the lane's device"},
    {"kernarg_blocks", (PyCFunction)lane_kernarg_blocks, METH_NOARGS,
     "[(start, value)] of the kernarg blocks in use, oldest first"},
    {"__enter__", (PyCFunction)lane_enter, METH_NOARGS,
     "the lock, then the next timeline value"},
    {"__exit__", (PyCFunction)(void (*)(void))lane_exit, METH_FASTCALL,
     "the counter moved (on a normal exit), the lock released"},
    {NULL, NULL, 0, NULL},
};

static PyObject *lane_get_submitted(Lane *self, void *c) {
    return PyLong_FromUnsignedLongLong(self->submitted);
}
static PyObject *lane_get_doorbells(Lane *self, void *c) {
    return PyLong_FromUnsignedLongLong(self->port.doorbells);
}
static PyObject *lane_get_hint(Lane *self, void *c) { return from_i128(self->port.hint); }
static PyObject *lane_get_head(Lane *self, void *c) { return PyLong_FromSsize_t(self->head); }
static PyObject *lane_get_in_use(Lane *self, void *c) { return PyLong_FromSsize_t(self->count); }
static PyObject *lane_get_lock(Lane *self, void *c) { return Py_NewRef(self->lock); }
static PyObject *lane_get_watched(Lane *self, void *c) {
    return PyBool_FromLong(lane_watched(self));
}
static PyObject *lane_get_timed(Lane *self, void *c) { return PyBool_FromLong(self->timed); }
static PyObject *lane_get_mode(Lane *self, void *c) {
    return PyUnicode_FromString(traced ? "traced" : self->timed ? "timed" : "plain");
}

static PyGetSetDef lane_getset[] = {
    {"submitted", (getter)lane_get_submitted, NULL, "timeline value of the latest submission"},
    {"doorbells", (getter)lane_get_doorbells, NULL, "doorbells rung through this lane"},
    {"hint", (getter)lane_get_hint, NULL, "the end of the latest reservation as known here"},
    {"kernarg_head", (getter)lane_get_head, NULL, "the kernarg ring's next free offset"},
    {"in_use", (getter)lane_get_in_use, NULL, "kernarg blocks in use"},
    {"lock", (getter)lane_get_lock, NULL, "the lane's lock"},
    {"watched", (getter)lane_get_watched, NULL,
     "a trace sink or a DispatchTimer is on: the timed and traced publishers"},
    {"mode", (getter)lane_get_mode, NULL, "'plain', 'timed' or 'traced'"},
    {"timed", (getter)lane_get_timed, NULL, "a DispatchTimer is on (set_timed)"},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef lane_members[] = {
    {"native", T_INT, offsetof(Lane, port) + offsetof(RingPort, native), READONLY,
     "0: the provider's callables; 1: the virtual queue's words; 2: ROCr's functions directly"},
    {"capacity", T_PYSSIZET, offsetof(Lane, capacity), READONLY, "kernarg ring bytes"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject LaneType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "amdgpu.hsa_backend._hotpath.Lane",
    .tp_basicsize = sizeof(Lane),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "One QueueLane's submission, compiled: its ring indices, kernarg ring, lock "
              "and timeline counter, and the one publish sequence",
    .tp_new = lane_new,
    .tp_dealloc = (destructor)lane_dealloc,
    .tp_traverse = (traverseproc)lane_traverse,
    .tp_clear = (inquiry)lane_clear,
    .tp_methods = lane_methods,
    .tp_members = lane_members,
    .tp_getset = lane_getset,
};

/* ---- Publisher: one launch's immediate dispatch on its lane ------------------------------- */

/* What QueueLane.dispatcher binds once per launch and lane (Lane.publisher): the lane, the
 * launch's packet template (its kernarg address patched in place per dispatch), its header
 * word and its kernarg size. publish(data) -> timeline value: lane_submit. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Lane *lane;
    Py_buffer templ;                             /* the launch's packet template */
    int have_templ;
    Py_ssize_t size;                             /* kernarg bytes of this launch */
    uint32_t header;
} Publisher;

static PyTypeObject PublisherType;

static int publisher_traverse(Publisher *self, visitproc visit, void *arg) {
    Py_VISIT(self->lane);
    return 0;
}

static int publisher_clear(Publisher *self) {
    Py_CLEAR(self->lane);
    return 0;
}

static void publisher_dealloc(Publisher *self) {
    PyObject_GC_UnTrack(self);
    if (self->have_templ)
        PyBuffer_Release(&self->templ);
    self->have_templ = 0;
    publisher_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *publish(Publisher *self, PyObject *data) {
    if (self->lane == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "hot path: this launch's publisher was cleared");
        return NULL;
    }
    return lane_submit(self->lane, (char *)self->templ.buf, self->header, self->size, data);
}

static PyObject *publisher_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                      PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "publish(data) takes one argument");
        return NULL;
    }
    return publish((Publisher *)callable, args[0]);
}

static PyObject *publisher_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyErr_SetString(PyExc_TypeError, "a Publisher comes from Lane.publisher(size, words, header)");
    return NULL;
}

/* Lane.publisher(size, words, header) */
static PyObject *lane_publisher(Lane *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "publisher(size, words, header)");
        return NULL;
    }
    Py_ssize_t size = PyLong_AsSsize_t(args[0]);
    unsigned long long header = PyLong_AsUnsignedLongLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    if (size < 0 || header > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "publisher: a negative size or a header beyond 32 bits");
        return NULL;
    }
    Publisher *p = (Publisher *)PublisherType.tp_alloc(&PublisherType, 0);
    if (p == NULL)
        return NULL;
    p->vectorcall = publisher_vectorcall;
    p->size = size;
    p->header = (uint32_t)header;
    p->lane = (Lane *)Py_NewRef(self);
    if (writable(args[1], &p->templ, "packet template") < 0)
        goto fail;
    p->have_templ = 1;
    if (p->templ.len != 64) {
        PyErr_SetString(PyExc_ValueError, "hot path: the packet template is not 64 bytes");
        goto fail;
    }
    return (PyObject *)p;
fail:
    Py_DECREF(p);
    return NULL;
}

static PyTypeObject PublisherType = {
    CALLABLE_TYPE_FIELDS(Publisher, publisher,
                         "One launch's immediate dispatch on its Lane: publish(data) -> "
                         "timeline value", 0),
};

/* The byte offset of the object slot `name` of `type` (a __slots__ member), or -1. */
static Py_ssize_t slot_offset(PyTypeObject *type, PyObject *name) {
    PyObject *d = _PyType_Lookup(type, name);
    if (d == NULL || Py_TYPE(d) != &PyMemberDescr_Type)
        return -1;
    PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
    return m->type == T_OBJECT_EX ? m->offset : -1;
}

/* `obj.name` where `off` is the byte offset of that __slots__ member of obj's type (read in
 * place: no lookup), else (off < 0, or the slot empty) the attribute protocol. A new
 * reference or NULL. */
static inline PyObject *slot_get(PyObject *obj, Py_ssize_t off, PyObject *name) {
    if (off >= 0) {
        PyObject *v = *(PyObject **)((char *)obj + off);
        if (v != NULL)
            return Py_NewRef(v);
    }
    return PyObject_GetAttr(obj, name);
}

/* obj.name = v into the slot at `off` (the member descriptor's store), else the protocol. */
static int slot_set(PyObject *obj, Py_ssize_t off, PyObject *name, PyObject *v) {
    if (off < 0)
        return PyObject_SetAttr(obj, name, v);
    PyObject **slot = (PyObject **)((char *)obj + off), *old = *slot;
    *slot = Py_NewRef(v);
    Py_XDECREF(old);
    return 0;
}

static PyObject *fast_attr(PyObject *obj, PyObject *name);
static int fast_true(PyObject *obj, PyObject *name);

/* TimelinePoint's three slots (lane, value, timeline), filled without its __init__. */
static int point_slots(PyTypeObject *pt, Py_ssize_t *lane, Py_ssize_t *value,
                       Py_ssize_t *timeline) {
    *lane = slot_offset(pt, s_lane);
    *value = slot_offset(pt, s_value);
    *timeline = slot_offset(pt, s_timeline);
    if (*lane < 0 || *value < 0 || *timeline < 0 || pt->tp_new != PyBaseObject_Type.tp_new) {
        PyErr_SetString(PyExc_TypeError, "hot path: point_type is a plain class with slots "
                                         "lane, value and timeline");
        return -1;
    }
    return 0;
}

/* A new TimelinePoint(index, value, ln); the references to index, value and ln move in
 * (all are released on failure). */
static PyObject *new_point(PyTypeObject *pt, Py_ssize_t lane_off, Py_ssize_t value_off,
                           Py_ssize_t timeline_off, PyObject *ln, PyObject *index,
                           PyObject *value) {
    PyObject *point = pt->tp_alloc(pt, 0);
    if (point == NULL) {
        Py_DECREF(index);
        Py_DECREF(value);
        Py_DECREF(ln);
        return NULL;
    }
    *(PyObject **)((char *)point + value_off) = value;
    *(PyObject **)((char *)point + lane_off) = index;
    *(PyObject **)((char *)point + timeline_off) = ln;
    return point;
}


/* A method of a class (Dispatch, Submit) read from an instance: bound to it, as a function
 * is; calls through the class (dev.dispatch(...)) skip this: the interpreter passes the
 * instance first (Py_TPFLAGS_METHOD_DESCRIPTOR). */
static PyObject *method_get(PyObject *self, PyObject *obj, PyObject *type) {
    (void)type;
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

/* ---- Dispatch and Submit: the device's two compiled entries ------------------------------ */

/* What both entries hold, once for the class (HsaDevice's compiled class; the device is the
 * first argument of each call): the Python method for every call they do not take
 * (`slow`), TimelinePoint and its slots, and Lifetime (buffer.py). */
typedef struct {
    PyObject *slow, *point_type, *lifetime_type;
    Py_ssize_t lane_off, value_off, timeline_off; /* TimelinePoint's slots */
} Entry;

static int entry_traverse(Entry *e, visitproc visit, void *arg) {
    Py_VISIT(e->slow);
    Py_VISIT(e->point_type);
    Py_VISIT(e->lifetime_type);
    return 0;
}

static void entry_clear(Entry *e) {
    Py_CLEAR(e->slow);
    Py_CLEAR(e->point_type);
    Py_CLEAR(e->lifetime_type);
}

static int entry_init(Entry *e, PyObject *slow, PyObject *pt, PyObject *lt) {
    if (point_slots((PyTypeObject *)pt, &e->lane_off, &e->value_off, &e->timeline_off) < 0)
        return -1;
    e->slow = Py_NewRef(slow);
    e->point_type = Py_NewRef(pt);
    e->lifetime_type = Py_NewRef(lt);
    return 0;
}

/* The Python method with the call as it came (the device first): what an entry does not take. */
static PyObject *entry_slow(Entry *e, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    return PyObject_Vectorcall(e->slow, args, nargsf, kwnames);
}

/* ---- Dispatch ---------------------------------------------------------------------------- */

/* 1 when the exact ints (or None) `a` and `b` are equal */
static int same_int(PyObject *a, PyObject *b) {
    if (a == b)
        return 1;
    if (!PyLong_CheckExact(a) || !PyLong_CheckExact(b))
        return 0;
    int oa = 0, ob = 0;
    long long x = PyLong_AsLongLongAndOverflow(a, &oa), y = PyLong_AsLongLongAndOverflow(b, &ob);
    if (oa || ob) {
        int r = PyObject_RichCompareBool(a, b, Py_EQ);
        if (r < 0)
            PyErr_Clear();
        return r == 1;
    }
    return x == y;
}

/* 1 when a LaunchPlan's key is (grid, block, 0, lane): what the launch cache would look up
 * for this call (dynamic_lds 0, lane 0 when not given) */
static int plan_key_is(PyObject *key, PyObject *grid, PyObject *block, PyObject *lane) {
    if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != 4)
        return 0;
    PyObject *lds = PyTuple_GET_ITEM(key, 2), *ln = PyTuple_GET_ITEM(key, 3);
    return same_int(PyTuple_GET_ITEM(key, 0), grid) && same_int(PyTuple_GET_ITEM(key, 1), block) &&
           PyLong_CheckExact(lds) && PyLong_AsLong(lds) == 0 && PyLong_CheckExact(ln) &&
           (lane ? same_int(ln, lane) : PyLong_AsLong(ln) == 0);
}

/* The fields of executable.LaunchPlan (a NamedTuple) this file reads, by position. */
enum {
    LAUNCH_EXPLICIT = 1,
    LAUNCH_FAST = 2,
    LAUNCH_HIDDEN = 4,
    LAUNCH_LANE = 9,
    LAUNCH_PUBLISH = 10,
    LAUNCH_KEY = 11,
    LAUNCH_FIELDS = 12,
};

/* The attributes every dispatch reads are __slots__ members of their classes (HsaKernel's
 * device and last, QueueLane's index and failed), read here at their byte offsets, found
 * once; -1 where a class has no such slot (then the attribute protocol). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Entry e;
    PyObject *kernel_type;            /* HsaKernel */
    int kernel_dicts;                 /* _launches, args_cacheable may be read from __dict__ */
    Py_ssize_t device_off, last_off;  /* HsaKernel.device, .last */
    PyObject *lane_type;              /* QueueLane, or None */
    Py_ssize_t index_off, failed_off; /* QueueLane.index, .failed */
} Dispatch;

static int dispatch_traverse(Dispatch *self, visitproc visit, void *arg) {
    Py_VISIT(self->kernel_type);
    Py_VISIT(self->lane_type);
    return entry_traverse(&self->e, visit, arg);
}

static int dispatch_clear(Dispatch *self) {
    Py_CLEAR(self->kernel_type);
    Py_CLEAR(self->lane_type);
    entry_clear(&self->e);
    return 0;
}

static void dispatch_dealloc(Dispatch *self) {
    PyObject_GC_UnTrack(self);
    dispatch_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}


/* The kernarg bytes of `call_args` for this launch entry: the kernel's last bytes when the
 * same tuple comes again, else explicit.pack(*fast(args)) + hidden. NULL without an error
 * set: let the Python path do it (it converts what it can, else names the argument). */
static PyObject *kernarg_bytes(Dispatch *self, Attrs *kernel_a, PyObject *entry,
                               PyObject *call_args, PyObject *dev, PyObject *lifetime_type) {
    PyObject *last = slot_get(kernel_a->obj, self->last_off, s_last);
    if (last == NULL)
        return NULL;
    /* Lifetime.ends: unchanged since `last` was kept, so its buffers are still live */
    PyObject *ends = _PyType_Lookup((PyTypeObject *)lifetime_type, s_ends); /* borrowed */
    if (ends == NULL) {
        Py_DECREF(last);
        return NULL; /* no error set: the Python path */
    }
    if (PyTuple_CheckExact(last) && PyTuple_GET_SIZE(last) >= 4 &&
        PyTuple_GET_ITEM(last, 0) == call_args && PyTuple_GET_ITEM(last, 1) == entry &&
        PyTuple_GET_ITEM(last, 3) == ends) {
        PyObject *data = PyTuple_GET_ITEM(last, 2);
        Py_INCREF(data);
        Py_DECREF(last);
        return data;
    }
    Py_DECREF(last);
    PyObject *explicit = PyTuple_GET_ITEM(entry, LAUNCH_EXPLICIT);
    PyObject *fast = PyTuple_GET_ITEM(entry, LAUNCH_FAST);
    PyObject *hidden = PyTuple_GET_ITEM(entry, LAUNCH_HIDDEN);
    if (explicit == Py_None || fast == Py_None || !PyBytes_CheckExact(hidden))
        return NULL;
    PyObject *owner = fast_attr(dev, s_owner_token); /* what its live buffers carry */
    if (owner == NULL) {
        PyErr_Clear();
        return NULL;
    }
    Py_INCREF(ends); /* held: `fast` may run other threads, which may free a buffer */
    PyObject *fast_argv[2] = {call_args, owner}; /* fast(args, owner): live buffers of dev */
    PyObject *values = PyObject_Vectorcall(fast, fast_argv, 2, NULL);
    Py_DECREF(owner);
    if (values == NULL)
        goto refused;
    PyObject *tup = PySequence_Tuple(values);
    Py_DECREF(values);
    if (tup == NULL)
        goto refused;
    PyObject *pack = PyObject_GetAttr(explicit, s_pack);
    if (pack == NULL) {
        Py_DECREF(tup);
        goto refused;
    }
    PyObject *packed = PyObject_Call(pack, tup, NULL);
    Py_DECREF(pack);
    Py_DECREF(tup);
    if (packed == NULL || !PyBytes_CheckExact(packed)) {
        Py_XDECREF(packed);
        goto refused;
    }
    Py_ssize_t a = PyBytes_GET_SIZE(packed), b = PyBytes_GET_SIZE(hidden);
    PyObject *data = PyBytes_FromStringAndSize(NULL, a + b);
    if (data == NULL) {
        Py_DECREF(packed);
        Py_DECREF(ends);
        return NULL;
    }
    memcpy(PyBytes_AS_STRING(data), PyBytes_AS_STRING(packed), (size_t)a);
    memcpy(PyBytes_AS_STRING(data) + a, PyBytes_AS_STRING(hidden), (size_t)b);
    Py_DECREF(packed);
    if (PyTuple_CheckExact(call_args)) {
        PyObject *cacheable = attr_get(kernel_a, s_args_cacheable);
        int yes = cacheable ? PyObject_IsTrue(cacheable) : -1;
        Py_XDECREF(cacheable);
        if (yes < 0) {
            Py_DECREF(data);
            Py_DECREF(ends);
            return NULL;
        }
        if (yes) {
            PyObject *t = PyTuple_Pack(4, call_args, entry, data, ends);
            if (t == NULL || slot_set(kernel_a->obj, self->last_off, s_last, t) < 0) {
                Py_XDECREF(t);
                Py_DECREF(data);
                Py_DECREF(ends);
                return NULL;
            }
            Py_DECREF(t);
        }
    }
    Py_DECREF(ends);
    return data;
refused:
    Py_DECREF(ends);
    PyErr_Clear(); /* the Python path raises the one-line error for it */
    return NULL;
}

static PyObject *dispatch_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                     PyObject *kwnames) {
    Dispatch *self = (Dispatch *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf); /* the device, then dispatch's own */
    if (self->e.slow == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "hot path: HsaDevice's dispatch was cleared");
        return NULL;
    }
    if (kwnames != NULL || nargs < 3 || nargs > 7)
        return entry_slow(&self->e, args, nargsf, kwnames);
    PyObject *dev = args[0], *kernel = args[1], *grid = args[2];
    PyObject *block = nargs > 3 ? args[3] : Py_None;
    PyObject *call_args = nargs > 4 ? args[4] : NULL;
    PyObject *lane = nargs > 5 ? args[5] : NULL;
    PyObject *wait = nargs > 6 ? args[6] : NULL;
    /* exact ints only (bool and float sizes compare equal to ints: the Python path refuses) */
    if ((PyObject *)Py_TYPE(kernel) != self->kernel_type || !PyLong_CheckExact(grid) ||
        (block != Py_None && !PyLong_CheckExact(block)) || (lane && !PyLong_CheckExact(lane)))
        return entry_slow(&self->e, args, nargsf, kwnames);
    if (wait != NULL && !(PyTuple_CheckExact(wait) && PyTuple_GET_SIZE(wait) == 0)) {
        int w = PyObject_IsTrue(wait);
        if (w != 0)
            return w < 0 ? NULL : entry_slow(&self->e, args, nargsf, kwnames);
    }
    Attrs kernel_a = {kernel, NULL}; /* its __dict__, fetched off the common case */
#define KERNEL_DICT()                                                                      \
    if (self->kernel_dicts && kernel_a.dict == NULL &&                                     \
        (kernel_a.dict = PyObject_GenericGetDict(kernel, NULL)) == NULL)
    PyObject *owner = slot_get(kernel, self->device_off, s_device);
    if (owner == NULL)
        goto error;
    Py_DECREF(owner);
    if (owner != dev)
        goto slow;
    PyObject *empty = NULL;
    if (call_args == NULL && (call_args = empty = PyTuple_New(0)) == NULL)
        goto error;
    /* The same argument tuple and shape as the kernel's last dispatch, no buffer freed
     * since: its plan and bytes (kernel.last), without the launch cache's key and lookup. */
    PyObject *entry = NULL, *data = NULL;
    PyObject *last = slot_get(kernel, self->last_off, s_last);
    if (last == NULL) {
        Py_XDECREF(empty);
        goto error;
    }
    PyObject *ends = _PyType_Lookup((PyTypeObject *)self->e.lifetime_type, s_ends);
    if (ends != NULL && PyTuple_CheckExact(last) && PyTuple_GET_SIZE(last) >= 4 &&
        PyTuple_GET_ITEM(last, 0) == call_args && PyTuple_GET_ITEM(last, 3) == ends) {
        PyObject *plan = PyTuple_GET_ITEM(last, 1);
        if (PyTuple_Check(plan) && PyTuple_GET_SIZE(plan) == LAUNCH_FIELDS &&
            plan_key_is(PyTuple_GET_ITEM(plan, LAUNCH_KEY), grid, block, lane) &&
            PyBytes_CheckExact(PyTuple_GET_ITEM(last, 2))) {
            entry = Py_NewRef(plan);
            data = Py_NewRef(PyTuple_GET_ITEM(last, 2));
        }
    }
    Py_DECREF(last);
    if (entry == NULL) { /* the launch cache: kernel._launches[(grid, block, 0, lane)] */
        KERNEL_DICT() {
            Py_XDECREF(empty);
            goto error;
        }
        PyObject *launches = attr_get(&kernel_a, s_launches);
        if (launches == NULL) {
            Py_XDECREF(empty);
            goto error;
        }
        PyObject *zero = PyLong_FromLong(0);
        PyObject *key = PyTuple_Pack(4, grid, block, zero, lane ? lane : zero);
        Py_DECREF(zero);
        if (key == NULL) {
            Py_DECREF(launches);
            Py_XDECREF(empty);
            goto error;
        }
        entry = PyDict_Check(launches) ? PyDict_GetItemWithError(launches, key) : NULL;
        Py_DECREF(key);
        Py_XINCREF(entry);
        Py_DECREF(launches);
        if (entry == NULL) {
            Py_XDECREF(empty);
            if (PyErr_Occurred())
                goto error;
            goto slow;
        }
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != LAUNCH_FIELDS) {
            Py_DECREF(entry);
            Py_XDECREF(empty);
            goto slow;
        }
    }
    PyObject *ln = PyTuple_GET_ITEM(entry, LAUNCH_LANE);
    PyObject *publisher = PyTuple_GET_ITEM(entry, LAUNCH_PUBLISH);
    /* the lane's compiled publisher, its lane plain: else the timed or traced publishers */
    int bad = Py_TYPE(publisher) != &PublisherType || ((Publisher *)publisher)->lane == NULL ||
              lane_watched(((Publisher *)publisher)->lane);
    if (!bad) { /* set by the queue's error callback, and by close */
        if (Py_TYPE(ln) == (PyTypeObject *)self->lane_type) {
            PyObject *f = slot_get(ln, self->failed_off, s_failed);
            bad = f ? PyObject_IsTrue(f) : -1;
            Py_XDECREF(f);
        } else {
            bad = fast_true(ln, s_failed);
        }
    }
    if (bad != 0) {
        Py_DECREF(entry);
        Py_XDECREF(data);
        Py_XDECREF(empty);
        if (bad < 0)
            goto error;
        goto slow;
    }
    if (data == NULL) {
        KERNEL_DICT() {
            Py_DECREF(entry);
            Py_XDECREF(empty);
            goto error;
        }
        data = kernarg_bytes(self, &kernel_a, entry, call_args, dev, self->e.lifetime_type);
    }
#undef KERNEL_DICT
    Py_XDECREF(empty);
    Py_CLEAR(kernel_a.dict);
    if (data == NULL) {
        Py_DECREF(entry);
        return PyErr_Occurred() ? NULL : entry_slow(&self->e, args, nargsf, kwnames);
    }
    Py_INCREF(ln);
    PyObject *value = publish((Publisher *)publisher, data);
    Py_DECREF(data);
    Py_DECREF(entry);
    PyObject *index = value == NULL ? NULL
                      : Py_TYPE(ln) == (PyTypeObject *)self->lane_type
                          ? slot_get(ln, self->index_off, s_index) : fast_attr(ln, s_index);
    if (index == NULL) {
        Py_XDECREF(value);
        Py_DECREF(ln);
        return NULL;
    }
    /* TimelinePoint(ln.index, value, ln) without its __init__ call: its three slots */
    return new_point((PyTypeObject *)self->e.point_type, self->e.lane_off, self->e.value_off,
                     self->e.timeline_off, ln, index, value);
slow:
    Py_XDECREF(kernel_a.dict);
    return entry_slow(&self->e, args, nargsf, kwnames);
error:
    Py_XDECREF(kernel_a.dict);
    return NULL;
}

static PyObject *dispatch_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *names[] = {"slow", "kernel_type", "point_type", "lifetime_type", "lane_type",
                            NULL};
    PyObject *slow, *kt, *pt, *lt, *lnt = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO!O!O!|O", names, &slow, &PyType_Type, &kt,
                                     &PyType_Type, &pt, &PyType_Type, &lt, &lnt))
        return NULL;
    if (lnt != Py_None && !PyType_Check(lnt)) {
        PyErr_SetString(PyExc_TypeError, "Dispatch: lane_type is a class or None");
        return NULL;
    }
    Dispatch *self = (Dispatch *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = dispatch_vectorcall;
    if (entry_init(&self->e, slow, pt, lt) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    PyObject *kn[] = {s_launches, s_args_cacheable};
    PyTypeObject *ktt = (PyTypeObject *)kt;
    self->kernel_dicts = ktt->tp_getattro == PyObject_GenericGetAttr &&
                         ktt->tp_setattro == PyObject_GenericSetAttr && ktt->tp_dictoffset != 0;
    /* slots are read in place only where the type reads its attributes generically */
    int generic = ktt->tp_getattro == PyObject_GenericGetAttr &&
                  ktt->tp_setattro == PyObject_GenericSetAttr;
    self->device_off = generic ? slot_offset(ktt, s_device) : -1;
    self->last_off = generic ? slot_offset(ktt, s_last) : -1;
    self->lane_type = Py_NewRef(lnt);
    self->index_off = self->failed_off = -1;
    if (lnt != Py_None && ((PyTypeObject *)lnt)->tp_getattro == PyObject_GenericGetAttr) {
        self->index_off = slot_offset((PyTypeObject *)lnt, s_index);
        self->failed_off = slot_offset((PyTypeObject *)lnt, s_failed);
    }
    for (int i = 0; i < 2 && self->kernel_dicts; i++) {
        PyObject *d = _PyType_Lookup(ktt, kn[i]);
        if (d != NULL && Py_TYPE(d)->tp_descr_set != NULL)
            self->kernel_dicts = 0;
    }
    self->kernel_type = Py_NewRef(kt);
    return (PyObject *)self;
}

static PyTypeObject DispatchType = {
    CALLABLE_TYPE_FIELDS(Dispatch, dispatch,
                         "HsaDevice.dispatch's launch-cache fast path, compiled (the rest: "
                         "the Python method)", Py_TPFLAGS_METHOD_DESCRIPTOR),
    .tp_descr_get = method_get,
};

/* ---- Submit ------------------------------------------------------------------------------ */

/* HsaDevice.submit(cb, bindings, lane, wait)'s short way (HsaCommandBuffer._submit): a
 * finalized one-segment command buffer of this device, no waits, no parameters, no timer
 * or trace sink, a binding table the Python checks would accept and that has a kept
 * instance on the lane: under the replay lock and the lane's lock, the instance takes the
 * new timeline value (which also orders its lane's instances by use) and is published (Ring.publish_rows or
 * publish_ready: the ring's own, compiled), the lane's counter moves. Everything else,
 * before anything changed, goes to `slow`, the Python method, with the call as it came. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Entry e;
    PyObject *cb_type, *buffer_type;  /* HsaCommandBuffer, Buffer */
} Submit;

static PyObject *s_lanes_, *s_closed, *s_error_status, *s_fault, *s_queue, *s_error_prop,
    *s_only, *s_used_params, *s_bindings_needed, *s_slot_bytes, *s_replay_lock, *s_life,
    *s_freed, *s_nbytes, *s_address, *s_handle, *s_acquire, *s_release, *s_instances,
    *s_block, *s_last_block, *s_last_rows, *s_block_view, *s_header_list, *s_kernarg_offsets,
    *s_last_row, *s_signal, *s_view, *s_aql, *s_rows;

/* `obj.name` through obj's __dict__ where the generic protocol would find it there (no
 * data descriptor of that name on the type), in place for a __slots__ member, else the
 * protocol: a new reference or NULL. */
static PyObject *fast_attr(PyObject *obj, PyObject *name) {
    PyTypeObject *t = Py_TYPE(obj);
    if (t->tp_getattro == PyObject_GenericGetAttr) {
        PyObject *d = _PyType_Lookup(t, name);
        if (d != NULL && Py_TYPE(d) == &PyMemberDescr_Type &&
            ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX)
            return slot_get(obj, ((PyMemberDescrObject *)d)->d_member->offset, name);
        if (t->tp_dictoffset != 0 && (d == NULL || Py_TYPE(d)->tp_descr_set == NULL)) {
            PyObject **dp = _PyObject_GetDictPtr(obj);
            if (dp != NULL && *dp != NULL) {
                PyObject *v = PyDict_GetItemWithError(*dp, name);
                if (v != NULL) {
                    Py_INCREF(v);
                    return v;
                }
                if (PyErr_Occurred())
                    return NULL;
            }
        }
    }
    return PyObject_GetAttr(obj, name);
}

/* obj.name = v, into obj's __dict__ where the generic protocol would put it there. */
static int fast_set(PyObject *obj, PyObject *name, PyObject *v) {
    PyTypeObject *t = Py_TYPE(obj);
    if (t->tp_setattro == PyObject_GenericSetAttr && t->tp_dictoffset != 0) {
        PyObject *d = _PyType_Lookup(t, name);
        if (d == NULL || Py_TYPE(d)->tp_descr_set == NULL) {
            PyObject **dp = _PyObject_GetDictPtr(obj);
            if (dp != NULL && *dp != NULL)
                return PyDict_SetItem(*dp, name, v);
        }
    }
    return PyObject_SetAttr(obj, name, v);
}

static int submit_traverse(Submit *self, visitproc visit, void *arg) {
    Py_VISIT(self->cb_type);
    Py_VISIT(self->buffer_type);
    return entry_traverse(&self->e, visit, arg);
}

static int submit_clear(Submit *self) {
    Py_CLEAR(self->cb_type);
    Py_CLEAR(self->buffer_type);
    entry_clear(&self->e);
    return 0;
}

static void submit_dealloc(Submit *self) {
    PyObject_GC_UnTrack(self);
    submit_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}


/* 1: `obj.name` is None (or missing from its __dict__ and None by class default), 0: not,
 * -1: error. */
static int attr_is_none(PyObject *obj, PyObject *name) {
    PyObject *v = fast_attr(obj, name);
    if (v == NULL)
        return -1;
    int r = v == Py_None;
    Py_DECREF(v);
    return r;
}

/* 1 when `obj.name` is true, 0 when not, -1 on error (through its __dict__ when it can). */
static int fast_true(PyObject *obj, PyObject *name) {
    PyObject *v = fast_attr(obj, name);
    if (v == NULL)
        return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

/* The lane's queue (a new reference) when QueueLane.check() would pass: not closed or
 * failed, no error status, no fault, no queue error; else NULL with no error set (the
 * Python method then raises what check() says). */
static PyObject *usable_queue(PyObject *ln, PyObject *aql) {
    if (attr_is_none(ln, s_error_status) != 1 || attr_is_none(ln, s_fault) != 1 ||
        fast_true(ln, s_failed) != 0 || fast_true(ln, s_closed) != 0) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *queue = fast_attr(ln, s_queue);
    /* the virtual queue's error is a byte of its flag word (set with queue.error): all of
     * its unusual bytes zero means no error, without a call of the property */
    const RingPort *port = aql && Py_TYPE(aql) == &LaneType ? &((Lane *)aql)->port : NULL;
    int clean = port && port->native == NATIVE_VIRTUAL && port->queue == queue &&
                !__atomic_load_n((const uint32_t *)port->flags_mem.buf, __ATOMIC_ACQUIRE);
    if (queue != NULL && !clean && attr_is_none(queue, s_error_prop) != 1)
        Py_CLEAR(queue);
    PyErr_Clear();
    return queue;
}

/* The binding table's addresses then the queue's (HsaCommandBuffer._binding_addresses), or
 * NULL without an error where the Python check would refuse a binding (it says why). */
static PyObject *table_of(Submit *self, PyObject *dev, PyObject *cb_dict, PyObject *bindings,
                          PyObject *queue) {
    PyObject *needed_obj = PyDict_GetItemWithError(cb_dict, s_bindings_needed);
    if (needed_obj == NULL || !PyLong_CheckExact(needed_obj))
        return NULL;
    Py_ssize_t needed = PyLong_AsSsize_t(needed_obj);
    if (needed < 0 || !(PyList_Check(bindings) || PyTuple_Check(bindings)) ||
        PySequence_Fast_GET_SIZE(bindings) != needed)
        return NULL;
    PyObject *need = PyDict_GetItemWithError(cb_dict, s_slot_bytes); /* borrowed, may be NULL */
    if (need == NULL && PyErr_Occurred())
        return NULL;
    if (need != NULL && !PyDict_CheckExact(need))
        return NULL;
    Py_XINCREF(need); /* held: the attribute lookups below may run other threads */
    PyObject *table = PyTuple_New(needed + 1);
    if (table == NULL) {
        Py_XDECREF(need);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < needed; i++) {
        PyObject *b = PySequence_Fast_GET_ITEM(bindings, i);
        int is_buffer = PyObject_IsInstance(b, self->buffer_type);
        if (is_buffer <= 0)
            goto refuse;
        PyObject *owner = fast_attr(b, s_device);
        if (owner == NULL)
            goto refuse;
        Py_DECREF(owner);
        if (owner != dev)
            goto refuse;
        PyObject *life = fast_attr(b, s_life);
        PyObject *freed = life ? fast_attr(life, s_freed) : NULL;
        Py_XDECREF(life);
        int gone = freed ? PyObject_IsTrue(freed) : -1;
        Py_XDECREF(freed);
        if (gone != 0)
            goto refuse;
        PyObject *nbytes = fast_attr(b, s_nbytes);
        if (nbytes == NULL)
            goto refuse;
        if (need != NULL) {
            PyObject *index = PyLong_FromSsize_t(i);
            PyObject *want = index ? PyDict_GetItemWithError(need, index) : NULL;
            Py_XDECREF(index);
            if (want != NULL) {
                int small_ = PyObject_RichCompareBool(nbytes, want, Py_LT);
                if (small_ != 0) {
                    Py_DECREF(nbytes);
                    goto refuse;
                }
            } else if (PyErr_Occurred()) {
                Py_DECREF(nbytes);
                goto refuse;
            }
        }
        Py_DECREF(nbytes);
        PyObject *address = fast_attr(b, s_address);
        if (address == NULL)
            goto refuse;
        PyTuple_SET_ITEM(table, i, address);
    }
    PyObject *handle = fast_attr(queue, s_handle);
    if (handle == NULL)
        goto refuse;
    PyTuple_SET_ITEM(table, needed, handle);
    Py_XDECREF(need);
    return table;
refuse:
    PyErr_Clear(); /* the Python method meets the same and says what it is */
    Py_XDECREF(need);
    Py_DECREF(table);
    return NULL;
}

static int call_lock(PyObject *lock, PyObject *method) {
    PyObject *r = PyObject_CallMethodNoArgs(lock, method);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* Under both locks: the instance's steps; a new reference to the new value, Py_None (a
 * new reference) when there is no kept instance (nothing changed), or NULL. */
static PyObject *submit_locked(Lane *aql, PyObject *seg, PyObject *key) {
    PyObject *instances = fast_attr(seg, s_instances);
    if (instances == NULL)
        return NULL;
    if (!PyDict_CheckExact(instances)) {
        Py_DECREF(instances);
        Py_RETURN_NONE;
    }
    PyObject *inst = PyDict_GetItemWithError(instances, key);
    if (inst == NULL) {
        Py_DECREF(instances);
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    Py_INCREF(inst);
    PyObject *value = NULL, *r = NULL, *block = NULL, *headers = NULL;
    const uint64_t next = aql->submitted + 1;
    if ((value = PyLong_FromUnsignedLongLong(next)) == NULL)
        goto done;
    /* its value is also its place in the lane's use order (CommandReplay._instance) */
    if (fast_set(inst, s_value, value) < 0)
        goto fail;
    if ((block = fast_attr(inst, s_block)) == NULL ||
        (headers = fast_attr(seg, s_header_list)) == NULL)
        goto fail;
    if (!PyList_Check(headers) || PyList_GET_SIZE(headers) < 1) {
        PyErr_SetString(PyExc_TypeError, "hot path: the segment's header_list is not a list");
        goto fail;
    }
    PyObject *first = PyList_GET_ITEM(headers, 0);
    if (block == Py_None) { /* QueueLane.submit_rows: the segment's block, fields set */
        PyObject *argv[6] = {NULL, first, NULL, NULL, NULL, NULL};
        argv[0] = fast_attr(seg, s_rows); /* its Rows, else the block itself */
        if (argv[0] == Py_None) {
            Py_DECREF(argv[0]);
            argv[0] = fast_attr(seg, s_block_view);
        }
        argv[2] = fast_attr(inst, s_address);
        argv[3] = fast_attr(seg, s_kernarg_offsets);
        argv[4] = fast_attr(seg, s_last_row);
        argv[5] = fast_attr(inst, s_signal);
        /* seg.last_block, seg.last_rows = None, (inst.address, inst.signal) */
        PyObject *fields = argv[2] && argv[5] ? PyTuple_Pack(2, argv[2], argv[5]) : NULL;
        if (argv[0] && argv[3] && argv[4] && fields &&
            fast_set(seg, s_last_block, Py_None) == 0 && fast_set(seg, s_last_rows, fields) == 0)
            r = lane_submit_rows(aql, argv, 6);
        Py_XDECREF(fields);
        Py_XDECREF(argv[0]);
        for (int i = 2; i < 6; i++)
            Py_XDECREF(argv[i]);
    } else { /* QueueLane.submit_block: the instance's own block */
        if (fast_set(seg, s_last_block, block) < 0 ||
            fast_set(seg, s_last_rows, Py_None) < 0)
            goto fail;
        PyObject *view = fast_attr(inst, s_view);
        if (view != NULL) {
            PyObject *argv[2] = {view, first};
            r = lane_submit_block(aql, argv, 2);
        }
        Py_XDECREF(view);
    }
    if (r == NULL)
        goto fail;
    aql->submitted = next;
    goto done;
fail:
    Py_CLEAR(value);
done:
    Py_XDECREF(r);
    Py_XDECREF(block);
    Py_XDECREF(headers);
    Py_DECREF(inst);
    Py_DECREF(instances);
    return value;
}

static PyObject *submit_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames) {
    Submit *self = (Submit *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf); /* the device, then submit's own */
    if (self->e.slow == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "hot path: HsaDevice's submit was cleared");
        return NULL;
    }
    if (kwnames != NULL || nargs < 3 || nargs > 5)
        return entry_slow(&self->e, args, nargsf, kwnames);
    PyObject *dev = args[0], *cb = args[1], *bindings = args[2];
    PyObject *lane = nargs > 3 ? args[3] : NULL, *wait = nargs > 4 ? args[4] : NULL;
    if ((PyObject *)Py_TYPE(cb) != self->cb_type || (lane && !PyLong_CheckExact(lane)))
        return entry_slow(&self->e, args, nargsf, kwnames);
    if (wait != NULL && !(PyTuple_CheckExact(wait) && PyTuple_GET_SIZE(wait) == 0)) {
        int w = PyObject_IsTrue(wait);
        if (w != 0)
            return w < 0 ? NULL : entry_slow(&self->e, args, nargsf, kwnames);
    }
    Py_ssize_t li = lane ? PyLong_AsSsize_t(lane) : 0;
    if (li == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return entry_slow(&self->e, args, nargsf, kwnames);
    }
    PyObject *ln = NULL, *queue = NULL, *cb_dict = NULL, *table = NULL, *key = NULL;
    PyObject *seg = NULL, *replay_lock = NULL, *aql = NULL, *value = NULL;
    PyObject *lanes = fast_attr(dev, s_lanes_);
    if (lanes == NULL)
        return NULL;
    if (PyList_CheckExact(lanes) && li >= 0 && li < PyList_GET_SIZE(lanes)) {
        ln = PyList_GET_ITEM(lanes, li);
        Py_INCREF(ln);
    }
    Py_DECREF(lanes);
    if (ln == NULL)
        goto slow;
    if ((aql = fast_attr(ln, s_aql)) == NULL)
        goto error;
    if ((queue = usable_queue(ln, aql)) == NULL) /* QueueLane.check() would raise: it says why */
        goto slow;
    /* the command buffer: this device's, finalized to one dispatch segment, no parameters */
    if ((cb_dict = PyObject_GenericGetDict(cb, NULL)) == NULL) {
        PyErr_Clear();
        goto slow;
    }
    PyObject *owner = PyDict_GetItemWithError(cb_dict, s_device);
    PyObject *only = owner ? PyDict_GetItemWithError(cb_dict, s_only) : NULL;
    if (owner != dev || only == NULL || only == Py_None)
        goto slow_clear;
    /* its recorded buffers checked live since the last Lifetime end (Recording's
     * check_recorded, in the Python method, checks them again otherwise) */
    PyObject *checked = PyDict_GetItemWithError(cb_dict, s_recorded_checked);
    if (checked == NULL || checked != _PyType_Lookup((PyTypeObject *)self->e.lifetime_type, s_ends))
        goto slow_clear;
    PyObject *used = PyDict_GetItemWithError(cb_dict, s_used_params);
    if (used != NULL) {
        int t = PyObject_IsTrue(used);
        if (t != 0)
            goto slow_clear;
    } else if (PyErr_Occurred()) {
        goto slow_clear;
    }
    replay_lock = PyDict_GetItemWithError(cb_dict, s_replay_lock);
    if (replay_lock == NULL)
        goto slow_clear;
    Py_INCREF(replay_lock);
    seg = only;
    Py_INCREF(seg);
    if ((table = table_of(self, dev, cb_dict, bindings, queue)) == NULL)
        goto slow_clear;
    if ((key = PyTuple_Pack(2, ln, table)) == NULL)
        goto error;
    /* no compiled Lane, or a watched one (timed, traced): the Python method */
    if (Py_TYPE(aql) != &LaneType || lane_watched((Lane *)aql))
        goto slow;
    /* with cb._replay_lock, lane.lock: */
    /* a LaneLock (the compiled build's replay lock) taken without a Python call */
    const int c_lock = Py_TYPE(replay_lock) == &LaneLockType;
    if (c_lock)
        lock_take((LaneLock *)replay_lock, -1);
    else if (call_lock(replay_lock, s_acquire) < 0)
        goto error;
    lock_take(((Lane *)aql)->lock, -1);
    value = submit_locked((Lane *)aql, seg, key);
    {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        int r1 = lock_give(((Lane *)aql)->lock);
        int r2 = c_lock ? lock_give((LaneLock *)replay_lock) : call_lock(replay_lock, s_release);
        if (r1 < 0 || r2 < 0) { /* a release that failed: its error wins */
            Py_XDECREF(et);
            Py_XDECREF(ev);
            Py_XDECREF(tb);
            Py_CLEAR(value);
        } else {
            PyErr_Restore(et, ev, tb);
        }
    }
    if (value == NULL)
        goto error;
    if (value == Py_None) { /* no kept instance: the Python method (nothing changed) */
        Py_CLEAR(value);
        goto slow;
    }
    {
        PyObject *index = fast_attr(ln, s_index);
        PyObject *point = index == NULL ? NULL
                          : new_point((PyTypeObject *)self->e.point_type, self->e.lane_off,
                                      self->e.value_off, self->e.timeline_off, ln, index, value);
        if (index == NULL) {
            Py_DECREF(value);
            Py_DECREF(ln);
        }
        Py_XDECREF(queue);
        Py_XDECREF(cb_dict);
        Py_XDECREF(table);
        Py_XDECREF(key);
        Py_XDECREF(seg);
        Py_XDECREF(replay_lock);
        Py_XDECREF(aql);
        return point;
    }
slow_clear:
    PyErr_Clear();
slow:
    Py_XDECREF(ln);
    Py_XDECREF(queue);
    Py_XDECREF(cb_dict);
    Py_XDECREF(table);
    Py_XDECREF(key);
    Py_XDECREF(seg);
    Py_XDECREF(replay_lock);
    Py_XDECREF(aql);
    return entry_slow(&self->e, args, nargsf, kwnames);
error:
    Py_XDECREF(value);
    Py_XDECREF(ln);
    Py_XDECREF(queue);
    Py_XDECREF(cb_dict);
    Py_XDECREF(table);
    Py_XDECREF(key);
    Py_XDECREF(seg);
    Py_XDECREF(replay_lock);
    Py_XDECREF(aql);
    return NULL;
}

static PyObject *submit_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *names[] = {"slow", "cb_type", "buffer_type", "point_type", "lifetime_type",
                            NULL};
    PyObject *slow, *cbt, *bt, *pt, *lt;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO!O!O!O!", names, &slow, &PyType_Type,
                                     &cbt, &PyType_Type, &bt, &PyType_Type, &pt,
                                     &PyType_Type, &lt))
        return NULL;
    Submit *self = (Submit *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = submit_vectorcall;
    if (entry_init(&self->e, slow, pt, lt) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    self->cb_type = Py_NewRef(cbt);
    self->buffer_type = Py_NewRef(bt);
    return (PyObject *)self;
}

static PyTypeObject SubmitType = {
    CALLABLE_TYPE_FIELDS(Submit, submit,
                         "HsaDevice.submit's kept-instance short way, compiled (the rest: "
                         "the Python method)", Py_TPFLAGS_METHOD_DESCRIPTOR),
    .tp_descr_get = method_get,
};

/* ---- module ------------------------------------------------------------------------------ */

/* set_traced(flag): a trace sink became active (True) or none is (False) */
static PyObject *module_set_traced(PyObject *m, PyObject *flag) {
    int t = PyObject_IsTrue(flag);
    if (t < 0)
        return NULL;
    traced = t;
    Py_RETURN_NONE;
}

/* copy_rows(name=None) -> name: the row copy in use ("avx2" or "plain"); `name` picks one
 * (tests run the replay sequences through both) */
static PyObject *module_copy_rows(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "copy_rows(name=None)");
        return NULL;
    }
    if (nargs == 1 && args[0] != Py_None) {
        const char *name = PyUnicode_Check(args[0]) ? PyUnicode_AsUTF8(args[0]) : NULL;
        if (name != NULL && strcmp(name, "plain") == 0)
            copy_rows = copy_rows_plain;
#if defined(__x86_64__) && defined(__GNUC__)
        else if (name != NULL && strcmp(name, "avx2") == 0 && __builtin_cpu_supports("avx2"))
            copy_rows = copy_rows_avx2;
#endif
        else {
            PyErr_SetString(PyExc_ValueError, "copy_rows: 'plain', or 'avx2' where the CPU has it");
            return NULL;
        }
    }
#if defined(__x86_64__) && defined(__GNUC__)
    if (copy_rows == copy_rows_avx2)
        return PyUnicode_FromString("avx2");
#endif
    return PyUnicode_FromString("plain");
}

static PyMethodDef module_methods[] = {
    {"copy_rows", (PyCFunction)(void (*)(void))module_copy_rows, METH_FASTCALL,
     "copy_rows(name=None) -> the kept replay's row copy in use ('avx2' or 'plain')"},
    {"set_traced", (PyCFunction)module_set_traced, METH_O,
     "set_traced(flag): packets.trace.watch_sink's callback (a trace sink on or off)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_hotpath", "The HSA backend's immediate-dispatch hot path.", -1,
    module_methods,
};

#define INTERN(var, text)                              \
    if ((var = PyUnicode_InternFromString(text)) == NULL) \
        return NULL;

PyMODINIT_FUNC PyInit__hotpath(void) {
    INTERN(s_owner_token, "_owner_token");
    INTERN(s_ends, "ends");
    INTERN(s_recorded_checked, "_recorded_checked");
    INTERN(s_device, "device");
    INTERN(s_launches, "_launches");
    INTERN(s_failed, "failed");
    INTERN(s_last, "last");
    INTERN(s_args_cacheable, "args_cacheable");
    INTERN(s_lane, "lane");
    INTERN(s_value, "value");
    INTERN(s_timeline, "timeline");
    INTERN(s_index, "index");
    INTERN(s_pack, "pack");
    INTERN(s_wake, "wake");
    INTERN(s_lanes_, "lanes_");
    INTERN(s_closed, "closed");
    INTERN(s_error_status, "_error_status");
    INTERN(s_fault, "_fault");
    INTERN(s_queue, "queue");
    INTERN(s_error_prop, "error");
    INTERN(s_only, "_only");
    INTERN(s_used_params, "_used_params");
    INTERN(s_bindings_needed, "_bindings_needed");
    INTERN(s_slot_bytes, "_slot_bytes");
    INTERN(s_replay_lock, "_replay_lock");
    INTERN(s_life, "_life");
    INTERN(s_freed, "freed");
    INTERN(s_nbytes, "nbytes");
    INTERN(s_address, "address");
    INTERN(s_handle, "handle");
    INTERN(s_acquire, "acquire");
    INTERN(s_release, "release");
    INTERN(s_instances, "instances");
    INTERN(s_block, "block");
    INTERN(s_last_block, "last_block");
    INTERN(s_last_rows, "last_rows");
    INTERN(s_block_view, "block_view");
    INTERN(s_header_list, "header_list");
    INTERN(s_kernarg_offsets, "kernarg_offsets");
    INTERN(s_last_row, "last_row");
    INTERN(s_signal, "signal");
    INTERN(s_view, "view");
    INTERN(s_aql, "aql");
    INTERN(s_rows, "rows");
    if (PyType_Ready(&PublisherType) < 0 || PyType_Ready(&DispatchType) < 0 ||
        PyType_Ready(&LaneType) < 0 || PyType_Ready(&SubmitType) < 0 ||
        PyType_Ready(&LaneLockType) < 0 || PyType_Ready(&RowsType) < 0)
        return NULL;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2"))
        copy_rows = copy_rows_avx2;
#endif
    PyObject *errors = PyImport_ImportModule("ground.errors");
    if (errors == NULL)
        return NULL;
    KernelArgumentError = PyObject_GetAttrString(errors, "KernelArgumentError");
    SignalTimeout = PyObject_GetAttrString(errors, "SignalTimeout");
    Py_DECREF(errors);
    if (KernelArgumentError == NULL || SignalTimeout == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&PublisherType);
    Py_INCREF(&DispatchType);
    Py_INCREF(&LaneType);
    Py_INCREF(&SubmitType);
    if (PyModule_AddObject(m, "Publisher", (PyObject *)&PublisherType) < 0 ||
        PyModule_AddObject(m, "Dispatch", (PyObject *)&DispatchType) < 0 ||
        PyModule_AddObject(m, "Lane", (PyObject *)&LaneType) < 0 ||
        PyModule_AddObject(m, "Submit", (PyObject *)&SubmitType) < 0 ||
        PyModule_AddObject(m, "LaneLock", (PyObject *)&LaneLockType) < 0 ||
        PyModule_AddObject(m, "Rows", Py_NewRef((PyObject *)&RowsType)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
