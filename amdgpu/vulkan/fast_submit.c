/* The Vulkan backend's replay of the last submission's buffers, compiled (issue 31): from
 * `dev.submit(cb, bindings)` to the driver's vkQueueSubmit2 without a Python frame.
 * amdgpu/vulkan/fast_submit.py builds and loads it (scripts/setup.sh builds it with gcc);
 * without the build the same steps run as Python (CommandBuffer._same_buffers), never both.
 *
 *   Port(fn, queue, info, wait_count, command_count, command, signal_value,
 *        wait_semaphore, wait_value, semaphore)
 *       One per timeline.Lane (Lane._port): the device's vkQueueSubmit2 as the loader
 *       returned it (vkGetDeviceProcAddr: no loader trampoline), the VkQueue, and the
 *       addresses of the lane's own reused VkSubmitInfo2 and of the fields a submission
 *       rewrites (cffi memory the Lane keeps). It holds no state of its own: the timeline
 *       counters stay the Lane's (`submitted`, `reached`, `_in_struct`), read and written
 *       here as the Python Lane.submit does, under the same lock (Lane.lock).
 *   Submit(slow, lifetime, point_type, trace_state, check)
 *       VulkanDevice.submit: (dev, cb, bindings=(), lane=0, wait=()) positional. The short
 *       way is CommandBuffer._same_buffers' (the Python form, used only without this build):
 *       no waits, no keywords (params), the command buffer of this device; the same buffer
 *       objects as its last checked submit and no buffer lifetime ended since
 *       (cb._last_checked against Lifetime.ends); the last submission's instance on the
 *       same lane idle by the lane's last-seen value, or else another idle instance of that
 *       key whose binding table already holds these buffers; no trace sink; both locks
 *       (the command buffer's _submit_lock, the lane's) free. Then, under them: the lane's
 *       wait on its own previous value when it is not reached, the signal value, the
 *       VkCommandBuffer when another one was in the struct, vkQueueSubmit2 (the GIL
 *       released), the counter, the TimelinePoint, the instance's point and keepalive.
 *       Everything else goes to `slow` (the Python VulkanDevice.submit) with the call as it
 *       came, before anything changed. A driver error calls `check` (instance.check) for
 *       the same one-line VulkanError the Python lane raises.
 *   set_driver_clock(on), driver_clock() -> (entered, left)
 *       benchmarks only: while on, each submit notes CLOCK_MONOTONIC (time.perf_counter's
 *       clock) around the driver call, so a submit's host time splits as the Python one's
 *       does (bench_vulkan.py --submit-forms).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <structmember.h>
#include <time.h>

typedef int32_t (*QueueSubmit2)(void *queue, uint32_t count, const void *submits,
                                uint64_t fence);

static PyObject *s_device, *s_last_checked, *s_last_instance, *s_submit_lock, *s_instances,
    *s_plan, *s_bda_patches, *s_point, *s_keepalive, *s_last_handle, *s_handle, *s_late_count,
    *s_table_signature, *s_submitted, *s_reached, *s_in_struct, *s_index, *s_lock, *s_port,
    *s_command_buffer, *s_acquire, *s_release, *s_sink, *s_env_checked, *s_ends, *s_lane,
    *s_value, *s_timeline, *s_vkQueueSubmit2, *s_submit_instance, *zero, *empty;

static int clocked;
static double entered, left;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- Port ---------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    QueueSubmit2 fn;
    void *queue, *info;
    uint32_t *wait_count, *command_count;
    void **command;
    uint64_t *signal_value, *wait_semaphore, *wait_value;
    uint64_t semaphore;
} Port;

static PyObject *port_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    unsigned long long v[10];
    if (kw != NULL && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Port() takes positional addresses");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "KKKKKKKKKK:Port", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                          &v[6], &v[7], &v[8], &v[9]))
        return NULL;
    for (int i = 0; i < 9; i++)
        if (v[i] == 0) {
            PyErr_Format(PyExc_ValueError, "Port(): address %d is NULL", i);
            return NULL;
        }
    Port *self = (Port *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->fn = (QueueSubmit2)(uintptr_t)v[0];
    self->queue = (void *)(uintptr_t)v[1];
    self->info = (void *)(uintptr_t)v[2];
    self->wait_count = (uint32_t *)(uintptr_t)v[3];
    self->command_count = (uint32_t *)(uintptr_t)v[4];
    self->command = (void **)(uintptr_t)v[5];
    self->signal_value = (uint64_t *)(uintptr_t)v[6];
    self->wait_semaphore = (uint64_t *)(uintptr_t)v[7];
    self->wait_value = (uint64_t *)(uintptr_t)v[8];
    self->semaphore = v[9];
    return (PyObject *)self;
}

static PyTypeObject PortType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "amdgpu.vulkan._fast_submit.Port",
    .tp_basicsize = sizeof(Port),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A Lane's vkQueueSubmit2 and the addresses of its reused submit structures",
    .tp_new = port_new,
};

/* ---- Submit -------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *slow, *lifetime, *point_type, *trace_state, *check;
    Py_ssize_t lane_off, value_off, timeline_off; /* TimelinePoint's slots */
} Submit;

static Py_ssize_t slot_offset(PyTypeObject *type, PyObject *name) {
    PyObject *d = _PyType_Lookup(type, name);
    if (d == NULL || Py_TYPE(d) != &PyMemberDescr_Type)
        return -1;
    PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
    return m->type == T_OBJECT_EX ? m->offset : -1;
}

/* A borrowed slot value (NULL: empty). */
static inline PyObject *slot(PyObject *obj, Py_ssize_t off) {
    return *(PyObject **)((char *)obj + off);
}

/* Borrowed `d[name]`, or NULL (no error set: a missing attribute sends the call to slow). */
static inline PyObject *dget(PyObject *d, PyObject *name) {
    PyObject *v = PyDict_GetItemWithError(d, name);
    if (v == NULL)
        PyErr_Clear();
    return v;
}

/* The object's __dict__ (a new reference) or NULL with no error set. */
static PyObject *dict_of(PyObject *obj) {
    if (Py_TYPE(obj)->tp_dictoffset == 0)
        return NULL;
    PyObject *d = PyObject_GenericGetDict(obj, NULL);
    if (d == NULL)
        PyErr_Clear();
    return d;
}

/* 1: taken; 0: held elsewhere (or an error, cleared): the caller goes the slow way. */
static int try_take(PyObject *lock) {
    PyObject *args[2] = {lock, Py_False};
    PyObject *r = PyObject_VectorcallMethod(s_acquire, args, 2, NULL);
    if (r == NULL) {
        PyErr_Clear();
        return 0;
    }
    int taken = r == Py_True;
    Py_DECREF(r);
    return taken;
}

/* lock.release(), keeping an error already raised (the driver's) as it is. */
static void give(PyObject *lock) {
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *raised = PyErr_GetRaisedException();
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
#endif
    PyObject *r = PyObject_CallMethodNoArgs(lock, s_release);
    if (r == NULL)
        PyErr_WriteUnraisable(lock);
    Py_XDECREF(r);
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(raised);
#else
    PyErr_Restore(type, value, tb);
#endif
}

/* u64 of a Python int, or -1 (as uint64 max) with the error cleared. */
static inline int u64_of(PyObject *o, uint64_t *out) {
    if (o == NULL || !PyLong_CheckExact(o))
        return -1;
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    *out = v;
    return 0;
}

/* 1: the instance is idle by what its lane last saw (no point, or point.value <=
 * point.timeline.reached); 0: not, or unknown. */
static int idle(Submit *self, PyObject *inst_dict) {
    PyObject *p = dget(inst_dict, s_point);
    if (p == NULL)
        return 0;
    if (p == Py_None)
        return 1;
    if (Py_TYPE(p) != (PyTypeObject *)self->point_type)
        return 0;
    PyObject *value = slot(p, self->value_off), *tl = slot(p, self->timeline_off);
    if (value == NULL || tl == NULL)
        return 0;
    PyObject *td = dict_of(tl);
    if (td == NULL)
        return 0;
    uint64_t v, reached;
    int ok = u64_of(value, &v) == 0 && u64_of(dget(td, s_reached), &reached) == 0 &&
             v <= reached;
    Py_DECREF(td);
    return ok;
}

/* What the call becomes when the short way does not apply: the Python method. */
static PyObject *go_slow(Submit *self, PyObject *const *args, size_t nargsf, PyObject *kw) {
    return PyObject_Vectorcall(self->slow, args, nargsf, kw);
}

/* Another instance of `key` than `busy`, idle, with no descriptors written at submit, its
 * binding table written for `addresses` when the plan patches one (a borrowed reference in
 * *twin, its __dict__ a new one in *twin_dict), or 0. */
static int find_twin(Submit *self, PyObject *cb_dict, PyObject *key, PyObject *busy,
                     PyObject *addresses, PyObject **twin, PyObject **twin_dict) {
    PyObject *plan = dget(cb_dict, s_plan), *instances = dget(cb_dict, s_instances);
    if (plan == NULL || instances == NULL || !PyDict_Check(instances))
        return 0;
    PyObject *plan_dict = dict_of(plan);
    if (plan_dict == NULL)
        return 0;
    PyObject *patches = dget(plan_dict, s_bda_patches);
    int patched = patches != NULL ? PyObject_IsTrue(patches) : -1;
    Py_DECREF(plan_dict);
    if (patched < 0 || (patched && addresses == Py_None)) {
        PyErr_Clear();
        return 0;
    }
    PyObject *pool = PyDict_GetItemWithError(instances, key); /* OrderedDict: a dict */
    if (pool == NULL || !PyList_CheckExact(pool)) {
        PyErr_Clear();
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(pool); i++) {
        PyObject *inst = PyList_GET_ITEM(pool, i);
        if (inst == busy)
            continue;
        PyObject *d = dict_of(inst);
        if (d == NULL)
            continue;
        PyObject *late = dget(d, s_late_count);
        int ok = late != NULL && PyLong_CheckExact(late) && PyLong_AsLong(late) == 0 &&
                 idle(self, d);
        if (ok && patched) {
            PyObject *sig = dget(d, s_table_signature);
            ok = sig != NULL && (sig == addresses ||
                                 PyObject_RichCompareBool(sig, addresses, Py_EQ) == 1);
            PyErr_Clear();
        }
        if (ok) {
            *twin = inst;
            *twin_dict = d;
            return 1;
        }
        Py_DECREF(d);
    }
    return 0;
}

/* Lane.submit's steps for `inst` (its __dict__ inst_dict) on the Lane `timeline` (its
 * __dict__ tl_dict): under the lane's lock (taken here, without waiting), its wait on its
 * own previous value when that is not reached, the signal value, the VkCommandBuffer when
 * another one is in the struct, the driver's call with the GIL released, the counter. A
 * new TimelinePoint; NULL with an error (the driver's, raised by `check`); NULL without
 * one when the lock is held elsewhere or an attribute is not as expected (nothing done). */
static PyObject *lane_submit(Submit *self, PyObject *timeline, PyObject *tl_dict,
                             PyObject *inst_dict) {
    PyObject *port_obj = dget(tl_dict, s_port), *lock = dget(tl_dict, s_lock);
    PyObject *command_buffer = dget(inst_dict, s_command_buffer);
    uint64_t handle, submitted, reached;
    if (port_obj == NULL || Py_TYPE(port_obj) != &PortType || lock == NULL ||
        command_buffer == NULL || u64_of(dget(inst_dict, s_handle), &handle) < 0)
        return NULL;
    Port *port = (Port *)port_obj;
    PyObject *index = Py_XNewRef(dget(tl_dict, s_index));
    if (index == NULL)
        return NULL;
    Py_INCREF(lock);
    PyObject *point = NULL;
    if (!try_take(lock))
        goto out;
    if (u64_of(dget(tl_dict, s_submitted), &submitted) < 0 ||
        u64_of(dget(tl_dict, s_reached), &reached) < 0)
        goto unlock;
    if (dget(tl_dict, s_in_struct) != command_buffer) {
        if (PyDict_SetItem(tl_dict, s_in_struct, command_buffer) < 0)
            goto unlock;
        *port->command = (void *)(uintptr_t)handle;
        *port->command_count = 1;
    }
    uint32_t count = 0;
    if (submitted > reached) { /* in order: after this lane's previous work */
        *port->wait_semaphore = port->semaphore;
        *port->wait_value = submitted;
        count = 1;
    }
    uint64_t value = submitted + 1;
    *port->wait_count = count;
    *port->signal_value = value;
    int32_t status;
    QueueSubmit2 fn = port->fn;
    void *queue = port->queue, *info = port->info;
    Py_BEGIN_ALLOW_THREADS
    if (clocked)
        entered = now();
    status = fn(queue, 1, info, 0);
    if (clocked)
        left = now();
    Py_END_ALLOW_THREADS
    if (status != 0) { /* the Python lane's line: check(result, "vkQueueSubmit2", ...) */
        PyObject *detail = PyUnicode_FromFormat("lane %S, value %llu", index,
                                                (unsigned long long)value);
        PyObject *code = PyLong_FromLong(status);
        if (detail != NULL && code != NULL) {
            PyObject *r = PyObject_CallFunctionObjArgs(self->check, code, s_vkQueueSubmit2,
                                                       detail, NULL);
            if (r != NULL) {
                Py_DECREF(r);
                PyErr_Format(PyExc_RuntimeError, "vkQueueSubmit2 returned %d", status);
            }
        }
        Py_XDECREF(detail);
        Py_XDECREF(code);
        goto unlock;
    }
    PyObject *value_obj = PyLong_FromUnsignedLongLong(value);
    if (value_obj == NULL || PyDict_SetItem(tl_dict, s_submitted, value_obj) < 0) {
        Py_XDECREF(value_obj);
        goto unlock;
    }
    PyTypeObject *pt = (PyTypeObject *)self->point_type;
    point = pt->tp_alloc(pt, 0);
    if (point == NULL) {
        Py_DECREF(value_obj);
        goto unlock;
    }
    *(PyObject **)((char *)point + self->value_off) = value_obj;
    *(PyObject **)((char *)point + self->lane_off) = Py_NewRef(index);
    *(PyObject **)((char *)point + self->timeline_off) = Py_NewRef(timeline);
unlock:
    give(lock);
out:
    Py_DECREF(lock);
    Py_DECREF(index);
    return point;
}

/* Under the command buffer's submit lock: the last submission's instance when it is idle,
 * else an idle twin holding the same buffers, through lane_submit; the instance's point
 * and keepalive, and (a twin) the command buffer's last handle and instance. NULL without
 * an error: not this case (*fallback_timeline: the Lane to hand on when the last
 * submission was of this key on this lane). */
static PyObject *short_way(Submit *self, PyObject *cb_dict, PyObject *last,
                           PyObject *bindings, PyObject *lane, PyObject **fallback_timeline) {
    PyObject *recent = Py_XNewRef(dget(cb_dict, s_last_instance));
    PyObject *key = PyTuple_GET_ITEM(last, 2), *result = NULL, *tl_dict = NULL,
             *inst_dict = NULL, *twin = NULL;
    if (recent == NULL || !PyTuple_CheckExact(recent) || PyTuple_GET_SIZE(recent) != 4 ||
        PyTuple_GET_ITEM(recent, 0) != key || PyTuple_GET_ITEM(recent, 2) != lane)
        goto out;
    PyObject *timeline = PyTuple_GET_ITEM(recent, 3);
    *fallback_timeline = Py_NewRef(timeline);
    PyObject *sink = PyObject_GetAttr(self->trace_state, s_sink);
    PyObject *env_checked = PyObject_GetAttr(self->trace_state, s_env_checked);
    int traced = sink != Py_None || env_checked != Py_True;
    Py_XDECREF(sink);
    Py_XDECREF(env_checked);
    PyErr_Clear();
    if (traced || (tl_dict = dict_of(timeline)) == NULL)
        goto out;
    PyObject *inst = PyTuple_GET_ITEM(recent, 1);
    if ((inst_dict = dict_of(inst)) == NULL)
        goto out;
    if (!idle(self, inst_dict)) { /* still in flight: another one ready with these buffers */
        Py_CLEAR(inst_dict);
        if (!find_twin(self, cb_dict, key, inst, PyTuple_GET_ITEM(last, 5), &inst, &inst_dict))
            goto out;
        twin = Py_NewRef(inst); /* held: the pool may change while the driver runs */
    }
    PyObject *point = lane_submit(self, timeline, tl_dict, inst_dict);
    if (point == NULL)
        goto out;
    if (PyDict_SetItem(inst_dict, s_point, point) < 0 ||
        PyDict_SetItem(inst_dict, s_keepalive, bindings) < 0) {
        Py_DECREF(point);
        goto out;
    }
    if (twin != NULL) { /* the twin is now the last submission's instance */
        PyObject *now_recent = PyTuple_Pack(4, key, twin, lane, timeline);
        PyObject *handle = dget(inst_dict, s_handle);
        if (now_recent == NULL || handle == NULL ||
            PyDict_SetItem(cb_dict, s_last_handle, handle) < 0 ||
            PyDict_SetItem(cb_dict, s_last_instance, now_recent) < 0) {
            Py_XDECREF(now_recent);
            Py_DECREF(point);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "fast_submit: an instance lost its handle");
            goto out;
        }
        Py_DECREF(now_recent);
    }
    result = point;
out:
    Py_XDECREF(twin);
    Py_XDECREF(inst_dict);
    Py_XDECREF(tl_dict);
    Py_XDECREF(recent);
    return result;
}

static PyObject *submit_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames) {
    Submit *self = (Submit *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL || nargs < 3 || nargs > 5)
        return go_slow(self, args, nargsf, kwnames);
    PyObject *dev = args[0], *cb = args[1], *bindings = args[2];
    PyObject *lane = nargs > 3 ? args[3] : zero, *wait = nargs > 4 ? args[4] : empty;
    if (!(PyTuple_CheckExact(wait) || PyList_CheckExact(wait)) || Py_SIZE(wait) != 0 ||
        !(PyList_CheckExact(bindings) || PyTuple_CheckExact(bindings)))
        return go_slow(self, args, nargsf, kwnames);
    PyObject *cb_dict = dict_of(cb);
    if (cb_dict == NULL)
        return go_slow(self, args, nargsf, kwnames);
    /* held: other threads run while the driver's call has the GIL released */
    PyObject *last = Py_XNewRef(dget(cb_dict, s_last_checked));
    PyObject *ends = NULL, *submit_lock = NULL, *result = NULL, *timeline = NULL;
    /* the same buffer objects as the last checked submit, no lifetime ended since: every
     * check would pass again, with the same key */
    if (dget(cb_dict, s_device) != dev || last == NULL || !PyTuple_CheckExact(last) ||
        PyTuple_GET_SIZE(last) != 6)
        goto slow;
    if ((ends = PyObject_GetAttr(self->lifetime, s_ends)) == NULL) {
        PyErr_Clear();
        goto slow;
    }
    PyObject *last_ends = PyTuple_GET_ITEM(last, 0), *last_bindings = PyTuple_GET_ITEM(last, 1);
    if ((last_ends != ends && PyObject_RichCompareBool(last_ends, ends, Py_EQ) != 1) ||
        !PyTuple_CheckExact(last_bindings) || Py_SIZE(bindings) != Py_SIZE(last_bindings)) {
        PyErr_Clear();
        goto slow;
    }
    PyObject **items = PySequence_Fast_ITEMS(bindings);
    for (Py_ssize_t i = 0; i < Py_SIZE(bindings); i++)
        if (items[i] != PyTuple_GET_ITEM(last_bindings, i))
            goto slow;
    submit_lock = Py_XNewRef(dget(cb_dict, s_submit_lock));
    if (submit_lock == NULL || !try_take(submit_lock)) {
        Py_CLEAR(submit_lock);
        goto slow;
    }
    result = short_way(self, cb_dict, last, bindings, lane, &timeline);
    if (result == NULL && !PyErr_Occurred()) {
        /* as CommandBuffer._same_buffers: the instance picked (polled, recorded or waited
         * for) by _submit_instance, with the checks already made */
        PyObject *call[] = {cb, PyTuple_GET_ITEM(last, 2), bindings, lane, wait, empty,
                            Py_None, PyTuple_GET_ITEM(last, 3), PyTuple_GET_ITEM(last, 5),
                            timeline != NULL ? timeline : Py_None};
        result = PyObject_VectorcallMethod(s_submit_instance, call, 10, NULL);
    }
    give(submit_lock);
    Py_DECREF(submit_lock);
    Py_XDECREF(timeline);
    Py_DECREF(ends);
    Py_DECREF(last);
    Py_DECREF(cb_dict);
    return result;
slow:
    Py_XDECREF(ends);
    Py_XDECREF(last);
    Py_DECREF(cb_dict);
    return go_slow(self, args, nargsf, kwnames);
}

static PyObject *submit_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *slow, *lifetime, *point_type, *trace_state, *check;
    if (kw != NULL && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Submit() takes positional arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OOOOO:Submit", &slow, &lifetime, &point_type, &trace_state,
                          &check))
        return NULL;
    if (!PyType_Check(point_type)) {
        PyErr_SetString(PyExc_TypeError, "Submit(): point_type is a class");
        return NULL;
    }
    PyTypeObject *pt = (PyTypeObject *)point_type;
    Py_ssize_t lane_off = slot_offset(pt, s_lane), value_off = slot_offset(pt, s_value),
               timeline_off = slot_offset(pt, s_timeline);
    if (lane_off < 0 || value_off < 0 || timeline_off < 0) {
        PyErr_SetString(PyExc_TypeError, "Submit(): point_type has slots lane, value and "
                                         "timeline");
        return NULL;
    }
    Submit *self = (Submit *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = submit_vectorcall;
    self->slow = Py_NewRef(slow);
    self->lifetime = Py_NewRef(lifetime);
    self->point_type = Py_NewRef(point_type);
    self->trace_state = Py_NewRef(trace_state);
    self->check = Py_NewRef(check);
    self->lane_off = lane_off;
    self->value_off = value_off;
    self->timeline_off = timeline_off;
    return (PyObject *)self;
}

static int submit_traverse(Submit *self, visitproc visit, void *arg) {
    Py_VISIT(self->slow);
    Py_VISIT(self->lifetime);
    Py_VISIT(self->point_type);
    Py_VISIT(self->trace_state);
    Py_VISIT(self->check);
    return 0;
}

static int submit_clear(Submit *self) {
    Py_CLEAR(self->slow);
    Py_CLEAR(self->lifetime);
    Py_CLEAR(self->point_type);
    Py_CLEAR(self->trace_state);
    Py_CLEAR(self->check);
    return 0;
}

static void submit_dealloc(Submit *self) {
    PyObject_GC_UnTrack(self);
    submit_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Read from an instance (dev.submit): bound to it, as a function is; a call through the
 * class passes the device first (Py_TPFLAGS_METHOD_DESCRIPTOR). */
static PyObject *method_get(PyObject *self, PyObject *obj, PyObject *type) {
    (void)type;
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyMemberDef submit_members[] = {
    {"slow", T_OBJECT_EX, offsetof(Submit, slow), READONLY,
     "the Python method every other call goes to"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject SubmitType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "amdgpu.vulkan._fast_submit.Submit",
    .tp_basicsize = sizeof(Submit),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "VulkanDevice.submit: the same-buffers replay compiled, else the Python method",
    .tp_new = submit_new,
    .tp_dealloc = (destructor)submit_dealloc,
    .tp_traverse = (traverseproc)submit_traverse,
    .tp_clear = (inquiry)submit_clear,
    .tp_vectorcall_offset = offsetof(Submit, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = method_get,
    .tp_members = submit_members,
};

/* ---- module -------------------------------------------------------------------------- */

static PyObject *set_driver_clock(PyObject *m, PyObject *on) {
    int v = PyObject_IsTrue(on);
    if (v < 0)
        return NULL;
    clocked = v;
    Py_RETURN_NONE;
}

static PyObject *driver_clock(PyObject *m, PyObject *unused) {
    return Py_BuildValue("(dd)", entered, left);
}

static PyMethodDef module_methods[] = {
    {"set_driver_clock", set_driver_clock, METH_O,
     "set_driver_clock(on): note the driver call's start and end (benchmarks)"},
    {"driver_clock", driver_clock, METH_NOARGS,
     "driver_clock() -> (entered, left): the last driver call's, time.perf_counter's clock"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_fast_submit",
    "The Vulkan backend's compiled same-buffers replay (fast_submit.c)", -1, module_methods,
};

#define INTERN(var, text)                                      \
    if ((var = PyUnicode_InternFromString(text)) == NULL)      \
        return NULL;

PyMODINIT_FUNC PyInit__fast_submit(void) {
    INTERN(s_device, "device");
    INTERN(s_last_checked, "_last_checked");
    INTERN(s_last_instance, "_last_instance");
    INTERN(s_submit_lock, "_submit_lock");
    INTERN(s_instances, "_instances");
    INTERN(s_plan, "_plan");
    INTERN(s_bda_patches, "bda_patches");
    INTERN(s_point, "point");
    INTERN(s_keepalive, "keepalive");
    INTERN(s_last_handle, "last_handle");
    INTERN(s_handle, "handle");
    INTERN(s_late_count, "late_count");
    INTERN(s_table_signature, "table_signature");
    INTERN(s_submitted, "submitted");
    INTERN(s_reached, "reached");
    INTERN(s_in_struct, "_in_struct");
    INTERN(s_index, "index");
    INTERN(s_lock, "lock");
    INTERN(s_port, "_port");
    INTERN(s_command_buffer, "command_buffer");
    INTERN(s_acquire, "acquire");
    INTERN(s_release, "release");
    INTERN(s_sink, "sink");
    INTERN(s_env_checked, "env_checked");
    INTERN(s_ends, "ends");
    INTERN(s_lane, "lane");
    INTERN(s_value, "value");
    INTERN(s_timeline, "timeline");
    INTERN(s_vkQueueSubmit2, "vkQueueSubmit2");
    INTERN(s_submit_instance, "_submit_instance");
    if ((zero = PyLong_FromLong(0)) == NULL || (empty = PyTuple_New(0)) == NULL)
        return NULL;
    if (PyType_Ready(&PortType) < 0 || PyType_Ready(&SubmitType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    Py_INCREF(&PortType);
    Py_INCREF(&SubmitType);
    if (PyModule_AddObject(m, "Port", (PyObject *)&PortType) < 0 ||
        PyModule_AddObject(m, "Submit", (PyObject *)&SubmitType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
