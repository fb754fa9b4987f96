/*
 * kite._C: the CPython extension over kite's public C API.
 *
 * One entry point runs every op: call(op_index, stream, *args), with the op's arguments in the
 * order of kite's op table (include/kite/ops.def, read through kite_fn_get). Tensors come as torch
 * tensors (read through torch's DLPack C exchange API where it has one, else through their
 * attributes: no DLPack capsule per call) or as any DLPack producer (__dlpack__: numpy, cupy, jax).
 * torch_kernel makes the kernels that torch.ops.kite registers with the torch dispatcher. A
 * kite_ctx per (device, stream) is created on first use and kept, per thread (a ctx is used by one
 * thread at a time; a thread's ctxs live until the process ends); a device ctx reserves its
 * workspace when made. The GIL is released around the op. Every kite_status other than KITE_OK
 * raises the matching kite exception with kite's message.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <string.h>

#include <kite/backend.h>
#include <kite/kite.h>

#include "module.h"

#define MAX_DIMS 8
#define MAX_CTX 16
/* Workspace a device ctx reserves when made, so that ops under CUDA-graph capture find it
 * allocated (kite grows a workspace with cudaMalloc, which capture forbids). */
#define DEVICE_WORKSPACE_BYTES ((size_t)64 << 20)

/* ---- exceptions ---------------------------------------------------------------------------- */
/* Indexed by kite_status; [0] is kite.Error, the base of the others. */
static PyObject *g_errors[KITE_ERR_INTERNAL + 1];
/* kite.ArgumentTypeError: an argument of the wrong type (a list or None for a tensor, a str for a
 * number); derives from kite.InvalidArgument and TypeError. */
static PyObject *g_type_error;

static PyObject *error_type(kite_status s) {
  if (s > KITE_OK && s <= KITE_ERR_INTERNAL) return g_errors[s];
  return g_errors[0];
}

/* Raises the exception of status s with kite's message; returns NULL. */
PyObject *kite_py_raise_status(kite_status s) {
  const char *msg = kite_last_error();
  PyErr_SetString(error_type(s), msg && *msg ? msg : kite_status_name(s));
  return NULL;
}

PyObject *kite_py_raise_invalid(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  PyErr_SetString(g_errors[KITE_ERR_INVALID_ARG], buf);
  return NULL;
}

PyObject *kite_py_raise_type(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  PyErr_SetString(g_type_error, buf);
  return NULL;
}

/* ---- the op table -------------------------------------------------------------------------- */
/* kite's op table (kite_fn_get), as this module binds it: every op function whose arguments are
 * tensors and numbers (the collectives, which take a kite_comm, are listed by unbound()). The
 * kinds are one letter each: T input tensor, t optional input, W written tensor, w optional
 * written, f float, i integer (int64; kite checks the range of a C int), u unsigned 64-bit. */
static op_desc g_ops[64];
static int NUM_OPS;
/* the collectives: their kite_comm argument is kind 'c', a comm capsule of comm.c */
static op_desc g_comm_ops[8];
static int NUM_COMM_OPS;

const op_desc *kite_py_comm_op(const char *name) {
  for (int i = 0; i < NUM_COMM_OPS; i++)
    if (!strcmp(g_comm_ops[i].name, name)) return &g_comm_ops[i];
  return NULL;
}

/* Builds g_ops from kite's table once, at import. */
static int parse_table(void) {
  static const char letter[] = {
      [KITE_ARG_IN] = 'T',      [KITE_ARG_IN_OPT] = 't', [KITE_ARG_OUT] = 'W',
      [KITE_ARG_OUT_OPT] = 'w', [KITE_ARG_FLOAT] = 'f',  [KITE_ARG_INT] = 'i',
      [KITE_ARG_INT64] = 'i',   [KITE_ARG_UINT64] = 'u', [KITE_ARG_COMM] = 'c'};
  for (size_t i = 0; i < kite_fn_count(); i++) {
    const kite_fn_info *f = kite_fn_get(i);
    int bindable = f->nargs <= MAX_ARGS, comm = 0;
    for (size_t n = 0; n < f->nargs && bindable; n++) comm |= f->args[n].kind == KITE_ARG_COMM;
    if (!bindable) continue;
    op_desc *ops = comm ? g_comm_ops : g_ops;
    int *count = comm ? &NUM_COMM_OPS : &NUM_OPS;
    if (*count == (comm ? (int)(sizeof g_comm_ops / sizeof g_comm_ops[0])
                        : (int)(sizeof g_ops / sizeof g_ops[0]))) {
      PyErr_SetString(PyExc_SystemError, "kite._C: more op functions than the binding holds");
      return -1;
    }
    op_desc *d = &ops[(*count)++];
    d->name = f->name;
    d->fn = i;
    d->nargs = (int)f->nargs;
    for (size_t n = 0; n < f->nargs; n++) {
      d->kinds[n] = letter[f->args[n].kind];
      d->names[n] = f->args[n].name;
    }
  }
  return 0;
}

/* ---- tensors in ---------------------------------------------------------------------------- */
/* torch objects, looked up once torch is imported by the caller. */
static PyTypeObject *g_torch_tensor;
static PyObject *g_torch_dtypes[12];
static DLDataType g_torch_dl[12];
static int g_torch_ndtypes;
static PyObject *s_data_ptr, *s_shape, *s_stride, *s_dtype, *s_is_cuda, *s_is_cpu, *s_get_device,
    *s_contiguous, *s_dlpack, *s_is_neg, *s_resolve_neg;

/* The DLPack C exchange API (DLPack 1.x, `type(tensor).__dlpack_c_exchange_api__`, a capsule
 * named "dlpack_exchange_api"): a producer's C functions that fill a DLTensor from a Python tensor
 * and give the current work stream of a device, without a Python call. Declared here with the
 * layout the DLPack standard fixes, as the dlpack.h kite builds against may predate it. */
typedef struct xapi_version {
  uint32_t major, minor;
} xapi_version;
typedef struct xapi_header {
  xapi_version version;
  struct xapi_header *prev_api;
} xapi_header;
typedef struct dlpack_xapi {
  xapi_header header;
  /* managed_tensor_allocator, managed_tensor_from_py_object_no_sync,
   * managed_tensor_to_py_object_no_sync: not used here (see empty_like) */
  void *unused[3];
  /* fills out (shape and strides owned by the tensor, valid while it lives); 0 or -1 with a
   * Python exception set */
  int (*dltensor_from_py_object_no_sync)(void *py_object, DLTensor *out);
  int (*current_work_stream)(DLDeviceType device_type, int32_t device_id, void **out_stream);
} dlpack_xapi;

/* torch.Tensor's exchange API, or NULL (an older torch: attributes are read instead). */
static const dlpack_xapi *g_xapi;

static void xapi_lookup(void) {
  PyObject *cap = PyObject_GetAttrString((PyObject *)g_torch_tensor, "__dlpack_c_exchange_api__");
  const dlpack_xapi *x = cap ? PyCapsule_GetPointer(cap, "dlpack_exchange_api") : NULL;
  Py_XDECREF(cap);
  PyErr_Clear();
  /* major version 1 is the layout above; the capsule lives as long as torch (the process) */
  if (x && x->header.version.major == 1 && x->dltensor_from_py_object_no_sync &&
      x->current_work_stream)
    g_xapi = x;
}

/* The kite dtype code of a torch export, when kite takes it. */
static int known_dl_dtype(DLDataType t) {
  for (int i = 0; i < g_torch_ndtypes; i++)
    if (g_torch_dl[i].code == t.code && g_torch_dl[i].bits == t.bits && t.lanes == 1) return 1;
  return 0;
}

static int torch_lookup(void) {
  PyObject *mods = PyImport_GetModuleDict();
  PyObject *torch = PyDict_GetItemString(mods, "torch"); /* borrowed */
  if (!torch) return 0;
  PyObject *t = PyObject_GetAttrString(torch, "Tensor");
  if (!t || !PyType_Check(t)) {
    Py_XDECREF(t);
    PyErr_Clear();
    return 0;
  }
  static const struct {
    const char *name;
    DLDataType dl;
  } map[] = {
      {"float32", {kDLFloat, 32, 1}},
      {"float16", {kDLFloat, 16, 1}},
      {"bfloat16", {kDLBfloat, 16, 1}},
      {"float64", {kDLFloat, 64, 1}},
      {"int32", {kDLInt, 32, 1}},
      {"int64", {kDLInt, 64, 1}},
      {"int8", {kDLInt, 8, 1}},
      {"uint8", {kDLUInt, 8, 1}},
      {"int16", {kDLInt, 16, 1}},
      {"bool", {KITE_DL_BOOL, 8, 1}},
      {"float8_e4m3fn", {KITE_DL_FLOAT8_E4M3FN, 8, 1}},
  };
  int n = 0;
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
    PyObject *d = PyObject_GetAttrString(torch, map[i].name);
    if (!d) {
      PyErr_Clear();
      continue;
    }
    g_torch_dtypes[n] = d; /* kept for the life of the process */
    g_torch_dl[n] = map[i].dl;
    n++;
  }
  g_torch_ndtypes = n;
  g_torch_tensor = (PyTypeObject *)t;
  xapi_lookup();
  return 1;
}

static int is_torch_tensor(PyObject *o) {
  if (!g_torch_tensor && !torch_lookup()) return 0;
  return PyObject_TypeCheck(o, g_torch_tensor);
}

static int tuple_to_i64(PyObject *tup, int64_t *out, int max, int *n) {
  if (!PyTuple_Check(tup)) return -1;
  Py_ssize_t len = PyTuple_GET_SIZE(tup);
  if (len > max) return -1;
  for (Py_ssize_t i = 0; i < len; i++) {
    long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(tup, i));
    if (v == -1 && PyErr_Occurred()) return -1;
    out[i] = (int64_t)v;
  }
  *n = (int)len;
  return 0;
}

/* The storage of one call: DLTensors and the references that keep their memory alive. */
typedef struct frame {
  DLTensor dl[MAX_ARGS];
  int64_t shape[MAX_ARGS][MAX_DIMS];
  int64_t strides[MAX_ARGS][MAX_DIMS];
  PyObject *keep[2 * MAX_ARGS];
  int nkeep;
  /* arguments from the torch dispatcher: its Negative-key fallback has resolved negative views
   * already, so they need no check here (a Python method call per tensor on the hot path) */
  int dispatched;
} frame;

static void frame_release(frame *f) {
  for (int i = 0; i < f->nkeep; i++) Py_DECREF(f->keep[i]);
  f->nkeep = 0;
}

/* Fills dl from a torch tensor. A read-only argument whose last dim is not unit-stride is first
 * made contiguous (the copy is kept alive in the frame). */
static int from_torch(const op_desc *d, int n, PyObject *o, frame *f, DLTensor *dl, int input) {
  /* a negative view (x._neg_view(), what conj() of a real tensor gives) shares x's memory with a
   * flag that DLPack does not carry: an input is read through a resolved copy, an output refused */
  int is_neg = 0;
  if (!f->dispatched) {
    PyObject *neg = PyObject_CallMethodNoArgs(o, s_is_neg);
    if (!neg) return -1;
    is_neg = neg == Py_True;
    Py_DECREF(neg);
  }
  if (is_neg) {
    if (!input) {
      kite_py_raise_invalid(
          "%s: %s: a negative view (is_neg()) cannot be written: resolve_neg() first", d->name,
          d->names[n]);
      return -1;
    }
    PyObject *c = PyObject_CallMethodNoArgs(o, s_resolve_neg);
    if (!c) return -1;
    f->keep[f->nkeep++] = c;
    return from_torch(d, n, c, f, dl, input);
  }
  if (g_xapi) {
    /* one C call; anything unusual (another device, dtype, a view to copy) takes the attribute
     * path below, which copies or words the error */
    if (g_xapi->dltensor_from_py_object_no_sync(o, dl) == 0) {
      int nd = dl->ndim;
      if (nd <= MAX_DIMS && dl->strides && known_dl_dtype(dl->dtype) &&
          (dl->device.device_type == kDLCPU || dl->device.device_type == kDLCUDA) &&
          !(input && nd > 0 && dl->strides[nd - 1] != 1 && dl->shape[nd - 1] > 1))
        return 0;
    } else
      PyErr_Clear();
  }
  int64_t *shape = f->shape[n], *strides = f->strides[n];
  int ndim = 0, nstr = 0;
  PyObject *v = PyObject_GetAttr(o, s_shape);
  if (!v) return -1;
  int bad = tuple_to_i64(v, shape, MAX_DIMS, &ndim);
  Py_DECREF(v);
  if (bad) {
    if (!PyErr_Occurred())
      kite_py_raise_invalid("%s: %s: more than %d dimensions", d->name, d->names[n], MAX_DIMS);
    return -1;
  }
  v = PyObject_CallMethodNoArgs(o, s_stride);
  if (!v) return -1;
  bad = tuple_to_i64(v, strides, MAX_DIMS, &nstr);
  Py_DECREF(v);
  if (bad) return -1;
  if (input && ndim > 0 && strides[ndim - 1] != 1 && shape[ndim - 1] > 1) {
    PyObject *c = PyObject_CallMethodNoArgs(o, s_contiguous);
    if (!c) return -1;
    f->keep[f->nkeep++] = c;
    return from_torch(d, n, c, f, dl, 0);
  }
  v = PyObject_GetAttr(o, s_dtype);
  if (!v) return -1;
  int found = 0;
  for (int i = 0; i < g_torch_ndtypes; i++)
    if (v == g_torch_dtypes[i]) {
      dl->dtype = g_torch_dl[i];
      found = 1;
      break;
    }
  if (!found) {
    PyObject *r = PyObject_Str(v);
    kite_py_raise_invalid("%s: %s: dtype %s has no kite equivalent", d->name, d->names[n],
                          r ? PyUnicode_AsUTF8(r) : "?");
    Py_XDECREF(r);
    Py_DECREF(v);
    return -1;
  }
  Py_DECREF(v);
  v = PyObject_GetAttr(o, s_is_cuda);
  if (!v) return -1;
  int cuda = v == Py_True;
  Py_DECREF(v);
  if (cuda) {
    v = PyObject_CallMethodNoArgs(o, s_get_device);
    if (!v) return -1;
    dl->device = (DLDevice){kDLCUDA, (int32_t)PyLong_AsLong(v)};
    Py_DECREF(v);
  } else {
    v = PyObject_GetAttr(o, s_is_cpu);
    if (!v) return -1;
    int cpu = v == Py_True;
    Py_DECREF(v);
    if (!cpu) {
      kite_py_raise_invalid(
          "%s: %s: a torch tensor on a device kite does not drive (neither cpu nor "
          "cuda)",
          d->name, d->names[n]);
      return -1;
    }
    dl->device = (DLDevice){kDLCPU, 0};
  }
  v = PyObject_CallMethodNoArgs(o, s_data_ptr);
  if (!v) return -1;
  dl->data = PyLong_AsVoidPtr(v);
  Py_DECREF(v);
  if (PyErr_Occurred()) return -1;
  dl->ndim = ndim;
  dl->shape = shape;
  dl->strides = strides;
  dl->byte_offset = 0;
  return 0;
}

/* Fills dl from any DLPack producer; the capsule stays in the frame until the call is over (its
 * destructor returns the tensor to its producer: kite does not take ownership). */
static int from_dlpack(const op_desc *d, int n, PyObject *o, frame *f, DLTensor *dl) {
  PyObject *cap = PyObject_CallMethodNoArgs(o, s_dlpack);
  if (!cap) return -1;
  f->keep[f->nkeep++] = cap;
  DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
  if (!m) return -1;
  *dl = m->dl_tensor;
  if (dl->ndim > MAX_DIMS) {
    kite_py_raise_invalid("%s: %s: more than %d dimensions", d->name, d->names[n], MAX_DIMS);
    return -1;
  }
  return 0;
}

/* ---- ctx cache ----------------------------------------------------------------------------- */
typedef struct ctx_entry {
  DLDevice dev;
  void *stream;
  kite_ctx *ctx;
} ctx_entry;
static _Thread_local ctx_entry g_ctx[MAX_CTX];
static _Thread_local int g_nctx;

/* 1 when torch says its current CUDA stream is capturing a graph. Making a device ctx allocates
 * its workspace (cudaMalloc), which a capture forbids and which would end that capture broken. */
static int torch_capturing(void) {
  static PyObject *fn;
  if (!g_torch_tensor) return 0;
  if (!fn) {
    PyObject *torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch"); /* borrowed */
    PyObject *tc = torch ? PyObject_GetAttrString(torch, "_C") : NULL;
    fn = tc ? PyObject_GetAttrString(tc, "_cuda_isCurrentStreamCapturing") : NULL;
    Py_XDECREF(tc);
    if (!fn) {
      PyErr_Clear();
      return 0;
    }
  }
  PyObject *r = PyObject_CallNoArgs(fn);
  if (!r) PyErr_Clear();
  int capturing = r == Py_True;
  Py_XDECREF(r);
  return capturing;
}

/* The ctx of (dev, stream), made on first use; NULL with *st set, or with a Python error set. */
kite_ctx *kite_py_ctx_for(DLDevice dev, void *stream, kite_status *st) {
  if (dev.device_type == kDLCPU) stream = NULL;
  for (int i = 0; i < g_nctx; i++)
    if (g_ctx[i].dev.device_type == dev.device_type && g_ctx[i].dev.device_id == dev.device_id &&
        g_ctx[i].stream == stream)
      return g_ctx[i].ctx;
  if (dev.device_type != kDLCPU && torch_capturing()) {
    PyErr_Format(g_errors[KITE_ERR_DEVICE],
                 "kite: first call on stream %p of device %d during CUDA-graph capture: kite "
                 "makes a ctx per (device, stream) on the first call, which allocates device "
                 "memory; run the op once on the capture stream before capturing",
                 stream, (int)dev.device_id);
    return NULL;
  }
  kite_ctx_params p = kite_ctx_params_default();
  p.device = dev;
  p.stream = stream;
  kite_ctx *c = NULL;
  *st = kite_ctx_create(&p, &c);
  if (*st != KITE_OK) return NULL;
  if (dev.device_type != kDLCPU) {
    void *ws;
    *st = kite_ctx_workspace(c, DEVICE_WORKSPACE_BYTES, &ws);
    if (*st != KITE_OK) {
      kite_ctx_destroy(c);
      return NULL;
    }
  }
  int slot_i = g_nctx < MAX_CTX ? g_nctx++ : (int)(((uintptr_t)stream >> 4) % MAX_CTX);
  if (g_ctx[slot_i].ctx) kite_ctx_destroy(g_ctx[slot_i].ctx); /* only when the table is full */
  g_ctx[slot_i] = (ctx_entry){dev, stream, c};
  return c;
}

/* ---- call ---------------------------------------------------------------------------------- */
static const char *type_name(PyObject *o) {
  return Py_TYPE(o)->tp_name;
}

/* torch._C._cuda_getCurrentRawStream, looked up on the first CUDA tensor (without the exchange
 * API) */
static PyObject *g_raw_stream;

/* torch's current stream on CUDA device id, as kite takes it. */
static int torch_stream(int32_t id, void **stream) {
  if (g_xapi) return g_xapi->current_work_stream(kDLCUDA, id, stream);
  if (!g_raw_stream) {
    PyObject *mods = PyImport_GetModuleDict();
    PyObject *torch = PyDict_GetItemString(mods, "torch"); /* borrowed */
    PyObject *tc = torch ? PyObject_GetAttrString(torch, "_C") : NULL;
    g_raw_stream = tc ? PyObject_GetAttrString(tc, "_cuda_getCurrentRawStream") : NULL;
    Py_XDECREF(tc);
    if (!g_raw_stream) return -1;
  }
  PyObject *i = PyLong_FromLong(id);
  if (!i) return -1;
  PyObject *v = PyObject_CallOneArg(g_raw_stream, i);
  Py_DECREF(i);
  if (!v) return -1;
  *stream = PyLong_AsVoidPtr(v);
  Py_DECREF(v);
  return PyErr_Occurred() ? -1 : 0;
}

/* torch._C._increment_version, looked up at the first write into a torch tensor; NULL on a torch
 * without it (then versions are not bumped). */
static PyObject *g_increment_version;
static int g_increment_version_looked;

/* Bumps the autograd version counters of the n torch tensors a call wrote, as torch does for its
 * own in-place and out= writes: autograd then refuses a backward that needs a saved tensor kite
 * overwrote. */
static int bump_versions(PyObject *const *written, int n) {
  if (!g_increment_version_looked) {
    g_increment_version_looked = 1;
    PyObject *torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch"); /* borrowed */
    PyObject *tc = torch ? PyObject_GetAttrString(torch, "_C") : NULL;
    g_increment_version = tc ? PyObject_GetAttrString(tc, "_increment_version") : NULL;
    Py_XDECREF(tc);
    PyErr_Clear();
  }
  if (!g_increment_version) return 0;
  PyObject *tup = PyTuple_New(n);
  if (!tup) return -1;
  for (int i = 0; i < n; i++) {
    Py_INCREF(written[i]);
    PyTuple_SET_ITEM(tup, i, written[i]);
  }
  PyObject *r = PyObject_CallOneArg(g_increment_version, tup);
  Py_DECREF(tup);
  Py_XDECREF(r);
  return r ? 0 : -1;
}

/* Runs op d over args[0 .. d->nargs). With from_torch set, stream is ignored and a CUDA op runs
 * on torch's current stream of the first tensor's device. The torch tensors of written arguments
 * (kinds W, w) have their version counters bumped after the call, except those whose bit is set
 * in fresh (results the caller allocated for this call alone). */
PyObject *kite_py_run_op(const op_desc *d, PyObject *const *args, void *stream,
                         int from_torch_stream, unsigned fresh) {
  frame f;
  f.nkeep = 0;
  f.dispatched = from_torch_stream;
  kite_value a[MAX_ARGS];
  PyObject *written[MAX_ARGS];
  int nwritten = 0;
  DLDevice dev = {kDLCPU, 0};
  int have_dev = 0;
  for (int n = 0; n < d->nargs; n++) {
    PyObject *o = args[n];
    char kind = d->kinds[n];
    a[n] = (kite_value){.t = NULL};
    if (kind == 'c') {
      if (!(a[n].comm = kite_py_comm_of(o, d->name))) goto fail;
      continue;
    }
    if (kind == 'f') {
      double v = PyFloat_AsDouble(o);
      if (v == -1.0 && PyErr_Occurred()) {
        int overflow = PyErr_ExceptionMatches(PyExc_OverflowError);
        PyErr_Clear();
        if (overflow)
          kite_py_raise_invalid("%s: %s: out of the range of a double", d->name, d->names[n]);
        else
          kite_py_raise_type("%s: %s: expected a number, got %s", d->name, d->names[n],
                             type_name(o));
        goto fail;
      }
      a[n].f = v;
      continue;
    }
    if (kind == 'i' || kind == 'u') {
      if (!PyIndex_Check(o)) {
        kite_py_raise_type("%s: %s: expected an integer, got %s", d->name, d->names[n],
                           type_name(o));
        goto fail;
      }
      PyObject *iv = PyNumber_Index(o);
      if (!iv) goto fail;
      if (kind == 'i')
        a[n].i = PyLong_AsLongLong(iv);
      else
        a[n].u = PyLong_AsUnsignedLongLong(iv);
      Py_DECREF(iv);
      if (PyErr_Occurred()) {
        PyErr_Clear();
        kite_py_raise_invalid("%s: %s: out of the range of %s", d->name, d->names[n],
                              kind == 'i' ? "int64" : "uint64");
        goto fail;
      }
      continue;
    }
    if (o == Py_None) {
      if (kind == 't' || kind == 'w') continue;
      kite_py_raise_type("%s: %s: a tensor is required, got None", d->name, d->names[n]);
      goto fail;
    }
    DLTensor *dl = &f.dl[n];
    int rc;
    if (is_torch_tensor(o)) {
      rc = from_torch(d, n, o, &f, dl, kind == 'T' || kind == 't');
      if ((kind == 'W' || kind == 'w') && !(fresh & (1u << n))) written[nwritten++] = o;
    } else if (PyObject_HasAttr(o, s_dlpack))
      rc = from_dlpack(d, n, o, &f, dl);
    else {
      kite_py_raise_type(
          "%s: %s: expected a tensor (torch, numpy or another DLPack producer)%s, got %s", d->name,
          d->names[n], kind == 't' || kind == 'w' ? " or None" : "", type_name(o));
      goto fail;
    }
    if (rc) goto fail;
    a[n].t = dl;
    if (!have_dev) {
      dev = dl->device;
      have_dev = 1;
    }
  }
  if (from_torch_stream) {
    stream = NULL;
    if (dev.device_type == kDLCUDA && torch_stream(dev.device_id, &stream)) goto fail;
  }
  kite_status st = KITE_OK;
  kite_ctx *c = kite_py_ctx_for(dev, stream, &st);
  if (!c) {
    frame_release(&f);
    return PyErr_Occurred() ? NULL : kite_py_raise_status(st);
  }
  Py_BEGIN_ALLOW_THREADS st = kite_fn_call(c, d->fn, a, (size_t)d->nargs);
  Py_END_ALLOW_THREADS frame_release(&f);
  if (st != KITE_OK) return kite_py_raise_status(st);
  if (nwritten && bump_versions(written, nwritten)) return NULL;
  Py_RETURN_NONE;
fail:
  frame_release(&f);
  return NULL;
}

/* call(op_index, stream, *args) */
static PyObject *py_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs < 2) return kite_py_raise_invalid("kite._C.call: needs (op_index, stream, *args)");
  long k = PyLong_AsLong(args[0]);
  if (k < 0 || k >= NUM_OPS) {
    if (!PyErr_Occurred()) kite_py_raise_invalid("kite._C.call: op index %ld out of range", k);
    return NULL;
  }
  const op_desc *d = &g_ops[k];
  void *stream = PyLong_AsVoidPtr(args[1]);
  if (PyErr_Occurred()) return NULL;
  if (nargs - 2 != d->nargs)
    return kite_py_raise_invalid("%s: takes %d arguments, got %zd", d->name, d->nargs, nargs - 2);
  return kite_py_run_op(d, args + 2, stream, 0, 0);
}

/* ---- torch.library kernels ------------------------------------------------------------------- */
/* A kernel of one op that the torch dispatcher calls directly: the op's schema arguments in,
 * its results allocated here (torch.empty_like, or the Python alloc function of the op's row),
 * one kite call on torch's current stream, the results out; no Python frame on the way.
 *
 * As an Autograd-key kernel (autograd set; called with the dispatch keyset first) it runs the
 * op itself when no gradient is wanted (grad mode off or no tensor argument requires grad) and
 * the keys below autograd are only the dense backend's (one of fast[]: plain CPU or CUDA
 * tensors, no tracing mode or tensor subclass); otherwise it hands the call to autograd, the
 * Python autograd kernel (which redispatches to the backend kernel). */
#define SRC_NONE (-100)
typedef struct kernel_obj {
  PyObject_HEAD vectorcallfunc vectorcall;
  const op_desc *d;
  int nparams;
  signed char src[MAX_ARGS]; /* per C argument: param index; -1 - k: result k; SRC_NONE */
  int nresults;
  int like;           /* >= 0: the single result is an empty_like of that param */
  PyObject *alloc;    /* otherwise, with results: alloc(*params) -> tensor or tuple of them */
  PyObject *defaults; /* tuple of nparams: what a trailing argument the dispatcher left out is */
  PyObject *autograd;
  unsigned long long fast[4];
  int nfast;
} kernel_obj;

static PyObject *g_empty_like, *g_like_kwnames, *g_contiguous_format, *g_is_grad_enabled;
static PyObject *s_raw_repr, *s_requires_grad;

static int wants_grad(kernel_obj *k, PyObject *const *args, Py_ssize_t n) {
  PyObject *on = PyObject_CallNoArgs(g_is_grad_enabled);
  if (!on) return -1;
  int enabled = on == Py_True;
  Py_DECREF(on);
  if (!enabled) return 0;
  for (Py_ssize_t i = 0; i < n; i++) {
    if (!PyObject_TypeCheck(args[i], g_torch_tensor)) continue;
    PyObject *r = PyObject_GetAttr(args[i], s_requires_grad);
    if (!r) return -1;
    int req = r == Py_True;
    Py_DECREF(r);
    if (req) return 1;
  }
  return 0;
}

/* 1 when keyset is one of k's fast keysets, 0 if not, -1 on error. */
static int fast_keyset(kernel_obj *k, PyObject *keyset) {
  PyObject *r = PyObject_CallMethodNoArgs(keyset, s_raw_repr);
  if (!r) return -1;
  unsigned long long raw = PyLong_AsUnsignedLongLong(r);
  Py_DECREF(r);
  if (PyErr_Occurred()) return -1;
  for (int i = 0; i < k->nfast; i++)
    if (k->fast[i] == raw) return 1;
  return 0;
}

/* 1 when t's strides are exactly the row-major ones of its shape (size-1 dims included): then
 * torch.empty_like's default (preserve_format) gives those strides too. */
static int row_major(const DLTensor *t) {
  if (!t->strides) return 1;
  int64_t want = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->strides[i] != want) return 0;
    want *= t->shape[i];
  }
  return 1;
}

/* A new contiguous torch tensor of like's shape, dtype and device: torch.empty_like, without
 * keywords for a row-major like (the cheapest call), else with memory_format=contiguous_format.
 * Not the DLPack exchange API's allocator: on PyTorch 2.11 (H200 host) its round trip cost about
 * 5 us a call more, as torch wraps the tensor it made a second time on the way back to Python. */
static PyObject *empty_like(PyObject *like) {
  DLTensor t;
  if (g_xapi) {
    if (g_xapi->dltensor_from_py_object_no_sync(like, &t) == 0) {
      if (row_major(&t)) return PyObject_Vectorcall(g_empty_like, &like, 1, NULL);
    } else
      PyErr_Clear();
  }
  PyObject *la[2] = {like, g_contiguous_format};
  return PyObject_Vectorcall(g_empty_like, la, 1, g_like_kwnames);
}

static PyObject *kernel_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames) {
  kernel_obj *k = (kernel_obj *)self;
  Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  if (kwnames && PyTuple_GET_SIZE(kwnames))
    return kite_py_raise_invalid("%s: the torch kernel takes positional arguments only",
                                 k->d->name);
  if (k->autograd) {
    if (n < 1)
      return kite_py_raise_invalid("%s: the autograd kernel needs the dispatch keyset", k->d->name);
    int fast = fast_keyset(k, args[0]);
    if (fast == 1) {
      int g = wants_grad(k, args + 1, n - 1);
      if (g < 0) return NULL;
      fast = !g;
    }
    if (fast < 0) return NULL;
    if (!fast) return PyObject_Vectorcall(k->autograd, args, (size_t)n, NULL);
    args++;
    n--;
  }
  /* the dispatcher leaves out trailing arguments equal to their defaults */
  PyObject *filled[MAX_ARGS];
  if (n > k->nparams)
    return kite_py_raise_invalid("%s: takes %d arguments, got %zd", k->d->name, k->nparams, n);
  if (n < k->nparams) {
    for (Py_ssize_t i = 0; i < k->nparams; i++)
      filled[i] = i < n ? args[i] : PyTuple_GET_ITEM(k->defaults, i);
    args = filled;
    n = k->nparams;
  }
  PyObject *res = NULL, *r[MAX_ARGS];
  if (k->like >= 0) {
    res = empty_like(args[k->like]);
    if (!res) return NULL;
    r[0] = res;
  } else if (k->nresults) {
    res = PyObject_Vectorcall(k->alloc, args, (size_t)n, NULL);
    if (!res) return NULL;
    if (k->nresults == 1)
      r[0] = res;
    else if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != k->nresults) {
      Py_DECREF(res);
      return kite_py_raise_invalid("%s: the result allocation returned no %d-tuple", k->d->name,
                                   k->nresults);
    } else
      for (int i = 0; i < k->nresults; i++) r[i] = PyTuple_GET_ITEM(res, i);
  }
  PyObject *full[MAX_ARGS];
  unsigned fresh = 0;
  for (int i = 0; i < k->d->nargs; i++) {
    int s = k->src[i];
    full[i] = s == SRC_NONE ? Py_None : s >= 0 ? args[s] : r[-1 - s];
    if (s < 0 && s != SRC_NONE) fresh |= 1u << i;
  }
  PyObject *st = kite_py_run_op(k->d, full, NULL, 1, fresh);
  if (!st) {
    Py_XDECREF(res);
    return NULL;
  }
  Py_DECREF(st);
  if (res) return res;
  Py_RETURN_NONE;
}

static void kernel_dealloc(PyObject *self) {
  kernel_obj *k = (kernel_obj *)self;
  Py_XDECREF(k->alloc);
  Py_XDECREF(k->autograd);
  Py_XDECREF(k->defaults);
  Py_TYPE(self)->tp_free(self);
}

static PyTypeObject kernel_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kite._C.TorchKernel",
    .tp_basicsize = sizeof(kernel_obj),
    .tp_dealloc = kernel_dealloc,
    .tp_vectorcall_offset = offsetof(kernel_obj, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A torch.library kernel of one kite op (made by kite._C.torch_kernel).",
};

/* Looks up what the kernels call in torch (imported by the caller). */
static int torch_kernel_lookup(void) {
  if (g_empty_like) return 0;
  if (!g_torch_tensor && !torch_lookup()) {
    PyErr_SetString(PyExc_ImportError, "kite._C.torch_kernel: import torch first");
    return -1;
  }
  PyObject *torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch"); /* borrowed */
  PyObject *tc = PyObject_GetAttrString(torch, "_C");
  g_is_grad_enabled = tc ? PyObject_GetAttrString(tc, "is_grad_enabled") : NULL;
  Py_XDECREF(tc);
  g_contiguous_format = PyObject_GetAttrString(torch, "contiguous_format");
  g_like_kwnames = Py_BuildValue("(s)", "memory_format");
  g_empty_like = PyObject_GetAttrString(torch, "empty_like");
  if (!g_is_grad_enabled || !g_contiguous_format || !g_like_kwnames || !g_empty_like) {
    Py_CLEAR(g_empty_like);
    return -1;
  }
  return 0;
}

/* torch_kernel(op_index, defaults, src, like, alloc, autograd, fast_keysets) */
static PyObject *py_torch_kernel(PyObject *self, PyObject *args) {
  int op, nparams, like;
  PyObject *defaults, *src, *alloc, *autograd, *fast;
  if (!PyArg_ParseTuple(args, "iO!O!iOOO!", &op, &PyTuple_Type, &defaults, &PyTuple_Type, &src,
                        &like, &alloc, &autograd, &PyTuple_Type, &fast))
    return NULL;
  nparams = (int)PyTuple_GET_SIZE(defaults);
  if (torch_kernel_lookup()) return NULL;
  if (op < 0 || op >= NUM_OPS)
    return kite_py_raise_invalid("torch_kernel: op index %d out of range", op);
  const op_desc *d = &g_ops[op];
  if (PyTuple_GET_SIZE(src) != d->nargs || nparams < 0 || nparams > MAX_ARGS ||
      PyTuple_GET_SIZE(fast) > 4 || like >= nparams)
    return kite_py_raise_invalid("torch_kernel: %s: bad layout", d->name);
  kernel_obj *k = PyObject_New(kernel_obj, &kernel_type);
  if (!k) return NULL;
  k->vectorcall = kernel_vectorcall;
  k->d = d;
  k->nparams = nparams;
  k->like = like;
  k->nresults = 0;
  k->alloc = alloc == Py_None ? NULL : alloc;
  k->autograd = autograd == Py_None ? NULL : autograd;
  Py_XINCREF(k->alloc);
  Py_XINCREF(k->autograd);
  k->defaults = defaults;
  Py_INCREF(defaults);
  k->nfast = (int)PyTuple_GET_SIZE(fast);
  for (int i = 0; i < k->nfast; i++)
    k->fast[i] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(fast, i));
  for (int i = 0; i < d->nargs; i++) {
    long s = PyLong_AsLong(PyTuple_GET_ITEM(src, i));
    if (s != SRC_NONE && (s >= nparams || s < -MAX_ARGS))
      PyErr_Format(PyExc_ValueError, "bad src %ld", s);
    k->src[i] = (signed char)s;
    if (s < 0 && s != SRC_NONE && -s > k->nresults) k->nresults = (int)-s;
  }
  if (!PyErr_Occurred() && k->nresults && like < 0 && !k->alloc)
    PyErr_SetString(PyExc_ValueError, "torch_kernel: results and no allocation");
  if (!PyErr_Occurred() && like >= 0 && k->nresults != 1)
    PyErr_SetString(PyExc_ValueError, "torch_kernel: like takes one result");
  if (PyErr_Occurred()) {
    Py_DECREF(k);
    return NULL;
  }
  return (PyObject *)k;
}

/* ---- registry, config ------------------------------------------------------------------------ */
static PyObject *py_ops(PyObject *self, PyObject *unused) {
  PyObject *list = PyList_New(NUM_OPS);
  if (!list) return NULL;
  for (int k = 0; k < NUM_OPS; k++) {
    const op_desc *d = &g_ops[k];
    PyObject *args = PyList_New(d->nargs);
    if (!args) goto fail;
    for (int n = 0; n < d->nargs; n++)
      PyList_SET_ITEM(args, n, Py_BuildValue("(s#s)", &d->kinds[n], (Py_ssize_t)1, d->names[n]));
    PyList_SET_ITEM(list, k,
                    Py_BuildValue("(sNss)", d->name, args, kite_op_name(kite_fn_get(d->fn)->op),
                                  kite_fn_get(d->fn)->family));
  }
  return list;
fail:
  Py_DECREF(list);
  return NULL;
}

/* The op functions of the library this module does not bind (their arguments are not tensors
 * and numbers: the collectives' kite_comm). */
static PyObject *py_unbound(PyObject *self, PyObject *unused) {
  PyObject *list = PyList_New(0);
  if (!list) return NULL;
  for (size_t i = 0, k = 0; i < kite_fn_count(); i++) {
    if (k < (size_t)NUM_OPS && g_ops[k].fn == i) {
      k++;
      continue;
    }
    PyObject *name = PyUnicode_FromString(kite_fn_get(i)->name);
    int bad = !name || PyList_Append(list, name);
    Py_XDECREF(name);
    if (bad) {
      Py_DECREF(list);
      return NULL;
    }
  }
  return list;
}

/* Appends a new reference (NULL: a failed constructor) to list, giving it up; on failure drops
 * the list too and returns -1 with the Python error set. */
static int append_new(PyObject *list, PyObject *item) {
  int bad = !item || PyList_Append(list, item);
  Py_XDECREF(item);
  if (bad) Py_DECREF(list);
  return bad ? -1 : 0;
}

/* Every op of the library (kite_op_name over the ids), bound here or not. */
static PyObject *py_op_names(PyObject *self, PyObject *unused) {
  PyObject *list = PyList_New(0);
  if (!list) return NULL;
  for (int i = 0;; i++) {
    const char *name = kite_op_name((kite_op)i);
    if (!name) break;
    PyObject *s = PyUnicode_FromString(name);
    if (append_new(list, s)) return NULL;
  }
  return list;
}

static PyObject *py_kernels(PyObject *self, PyObject *unused) {
  size_t n = kite_kernel_count();
  PyObject *list = PyList_New(0);
  if (!list) return NULL;
  for (size_t i = 0; i < n; i++) {
    kite_kernel_info k;
    kite_status st = kite_kernel_get(i, &k);
    if (st != KITE_OK) {
      Py_DECREF(list);
      return kite_py_raise_status(st);
    }
    PyObject *rec =
        Py_BuildValue("{s:s,s:s,s:s,s:s,s:i,s:s,s:s,s:O,s:s}", "op", k.op_name, "backend",
                      k.backend, "variant", k.variant, "device", kite_device_name(k.device_type),
                      "priority", k.priority, "features", k.features, "description", k.description,
                      "runs_here", k.runs_here ? Py_True : Py_False, "why_not", k.why_not);
    if (append_new(list, rec)) return NULL;
  }
  return list;
}

static PyObject *py_backends(PyObject *self, PyObject *unused) {
  size_t n = kite_backend_count();
  PyObject *list = PyList_New(0);
  if (!list) return NULL;
  for (size_t i = 0; i < n; i++) {
    kite_backend_info b;
    if (kite_backend_get(i, &b) != KITE_OK) continue;
    PyObject *rec = Py_BuildValue("{s:s,s:s,s:i,s:n,s:s}", "name", b.name, "device",
                                  kite_device_name(b.device_type), "device_count", b.device_count,
                                  "num_kernels", (Py_ssize_t)b.num_kernels, "path", b.path);
    if (append_new(list, rec)) return NULL;
  }
  return list;
}

static PyObject *py_plugin_failures(PyObject *self, PyObject *unused) {
  size_t n = kite_plugin_failure_count();
  PyObject *list = PyList_New(0);
  if (!list) return NULL;
  for (size_t i = 0; i < n; i++) {
    const char *path = "", *reason = "";
    if (kite_plugin_failure_get(i, &path, &reason) != KITE_OK) continue;
    PyObject *rec = Py_BuildValue("(ss)", path, reason);
    if (append_new(list, rec)) return NULL;
  }
  return list;
}

/* kite_config_set / kite_config_set_thread of a str, or of None (NULL: the defaults). */
static PyObject *config_set_with(kite_status (*set)(const char *), PyObject *arg) {
  const char *s = arg == Py_None ? NULL : PyUnicode_AsUTF8(arg);
  if (!s && arg != Py_None) return NULL;
  kite_status st = set(s);
  if (st != KITE_OK) return kite_py_raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_config_set(PyObject *self, PyObject *arg) {
  return config_set_with(kite_config_set, arg);
}

static PyObject *py_config_get(PyObject *self, PyObject *unused) {
  return PyUnicode_FromString(kite_config_get());
}

static PyObject *py_config_set_thread(PyObject *self, PyObject *arg) {
  return config_set_with(kite_config_set_thread, arg);
}

static PyObject *py_config_get_thread(PyObject *self, PyObject *unused) {
  return PyUnicode_FromString(kite_config_get_thread());
}

static PyObject *py_last_dispatch(PyObject *self, PyObject *unused) {
  return PyUnicode_FromString(kite_last_dispatch());
}

static PyObject *py_backend_load(PyObject *self, PyObject *arg) {
  const char *s = PyUnicode_AsUTF8(arg);
  if (!s) return NULL;
  kite_status st = kite_backend_load(s);
  if (st != KITE_OK) return kite_py_raise_status(st);
  Py_RETURN_NONE;
}

/* The scaling fields after theta: type, factor, low, high, original, beta_fast, beta_slow, mscale,
 * mscale_all_dim, attention_factor, no_truncate (kite_rope_scaling's order). */
#define ROPE_SCALING_FMT "idddLdddddi"
#define ROPE_SCALING_ARGS(sc, type, orig)                                                          \
  &type, &sc.factor, &sc.low_freq_factor, &sc.high_freq_factor, &orig, &sc.beta_fast,              \
      &sc.beta_slow, &sc.mscale, &sc.mscale_all_dim, &sc.attention_factor, &sc.no_truncate

/* rope_cache_build(max_pos, rot_dim, theta, <scaling fields>) -> bytes of max_pos * rot_dim f32 */
static PyObject *py_rope_cache_build(PyObject *self, PyObject *args) {
  long long max_pos, rot_dim, orig;
  double theta;
  int type;
  kite_rope_scaling sc = {0};
  if (!PyArg_ParseTuple(args, "LLd" ROPE_SCALING_FMT, &max_pos, &rot_dim, &theta,
                        ROPE_SCALING_ARGS(sc, type, orig)))
    return NULL;
  sc.type = (kite_rope_scaling_type)type, sc.original_max_pos = (int64_t)orig;
  if (max_pos < 1 || rot_dim < 2 || max_pos > (1LL << 40) / rot_dim) {
    kite_status st = kite_rope_cache_build(NULL, max_pos, rot_dim, theta, &sc);
    return kite_py_raise_status(st == KITE_OK ? KITE_ERR_INVALID_ARG : st);
  }
  PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(max_pos * rot_dim * 4));
  if (!b) return NULL;
  kite_status st = kite_rope_cache_build((float *)PyBytes_AS_STRING(b), max_pos, rot_dim, theta,
                                         type == KITE_ROPE_SCALING_NONE ? NULL : &sc);
  if (st != KITE_OK) {
    Py_DECREF(b);
    return kite_py_raise_status(st);
  }
  return b;
}

/* rope_inv_freq(rot_dim, theta, <scaling fields>) -> (bytes of rot_dim / 2 f64, attention
 * factor) */
static PyObject *py_rope_inv_freq(PyObject *self, PyObject *args) {
  long long rot_dim, orig;
  double theta, att = 0.0;
  int type;
  kite_rope_scaling sc = {0};
  if (!PyArg_ParseTuple(args, "Ld" ROPE_SCALING_FMT, &rot_dim, &theta,
                        ROPE_SCALING_ARGS(sc, type, orig)))
    return NULL;
  sc.type = (kite_rope_scaling_type)type, sc.original_max_pos = (int64_t)orig;
  if (rot_dim < 2 || rot_dim > (1LL << 30)) {
    kite_status st = kite_rope_inv_freq(NULL, rot_dim, theta, &sc, &att);
    return kite_py_raise_status(st == KITE_OK ? KITE_ERR_INVALID_ARG : st);
  }
  PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(rot_dim / 2 * 8));
  if (!b) return NULL;
  kite_status st = kite_rope_inv_freq((double *)PyBytes_AS_STRING(b), rot_dim, theta, &sc, &att);
  if (st != KITE_OK) {
    Py_DECREF(b);
    return kite_py_raise_status(st);
  }
  return Py_BuildValue("(Nd)", b, att);
}

static PyObject *py_synchronize_all(PyObject *self, PyObject *unused) {
  for (int i = 0; i < g_nctx; i++) {
    kite_status st = kite_ctx_synchronize(g_ctx[i].ctx);
    if (st != KITE_OK) return kite_py_raise_status(st);
  }
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"call", (PyCFunction)(void (*)(void))py_call, METH_FASTCALL,
     "call(op_index, stream, *args): runs op op_index of ops() on the args' device"},
    {"torch_kernel", py_torch_kernel, METH_VARARGS,
     "torch_kernel(op_index, defaults, src, like, alloc, autograd, fast_keysets): a torch.library "
     "kernel of one op (see kite/torch/__init__.py)"},
    {"ops", py_ops, METH_NOARGS,
     "[(name, [(kind, arg name), ...], kernel op name, family), ...] in op-index order"},
    {"op_names", py_op_names, METH_NOARGS, "every op of the library, bound or not"},
    {"unbound", py_unbound, METH_NOARGS, "the op functions of the library not bound here"},
    {"kernels", py_kernels, METH_NOARGS, "every registered kernel, as dicts"},
    {"backends", py_backends, METH_NOARGS, "every registered backend, as dicts"},
    {"plugin_failures", py_plugin_failures, METH_NOARGS, "[(path, reason), ...]"},
    {"config_set", py_config_set, METH_O, "replaces the kernel-selection config"},
    {"config_get", py_config_get, METH_NOARGS, "the config in force"},
    {"config_set_thread", py_config_set_thread, METH_O,
     "replaces the calling thread's config, applied after the global one"},
    {"config_get_thread", py_config_get_thread, METH_NOARGS, "the calling thread's config"},
    {"last_dispatch", py_last_dispatch, METH_NOARGS, "backend.variant of this thread's last op"},
    {"backend_load", py_backend_load, METH_O, "loads a plugin by path"},
    {"rope_cache_build", py_rope_cache_build, METH_VARARGS, "cos/sin cache as f32 bytes"},
    {"rope_inv_freq", py_rope_inv_freq, METH_VARARGS,
     "(inverse frequencies as f64 bytes, attention factor)"},
    {"synchronize", py_synchronize_all, METH_NOARGS, "synchronizes this thread's ctxs"},
    KITE_PY_COMM_METHODS{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kite._C", NULL, -1, methods, NULL, NULL, NULL, NULL};

static int add_error(PyObject *m, kite_status s, const char *name, PyObject *also,
                     const char *doc) {
  PyObject *bases = also ? PyTuple_Pack(2, g_errors[0], also) : PyTuple_Pack(1, g_errors[0]);
  if (!bases) return -1;
  char full[64];
  snprintf(full, sizeof full, "kite.%s", name);
  g_errors[s] = PyErr_NewExceptionWithDoc(full, doc, bases, NULL);
  Py_DECREF(bases);
  if (!g_errors[s]) return -1;
  Py_INCREF(g_errors[s]);
  return PyModule_AddObject(m, name, g_errors[s]);
}

PyMODINIT_FUNC PyInit__C(void) {
  if (parse_table()) return NULL;
  if (PyType_Ready(&kernel_type)) return NULL;
  PyObject *m = PyModule_Create(&module);
  if (!m) return NULL;
#define INTERN(var, s)                                                                             \
  if (!(var = PyUnicode_InternFromString(s))) return NULL;
  INTERN(s_data_ptr, "data_ptr")
  INTERN(s_shape, "shape")
  INTERN(s_stride, "stride")
  INTERN(s_dtype, "dtype")
  INTERN(s_is_cuda, "is_cuda")
  INTERN(s_is_cpu, "is_cpu")
  INTERN(s_get_device, "get_device")
  INTERN(s_contiguous, "contiguous")
  INTERN(s_is_neg, "is_neg")
  INTERN(s_resolve_neg, "resolve_neg")
  INTERN(s_dlpack, "__dlpack__")
  INTERN(s_raw_repr, "raw_repr")
  INTERN(s_requires_grad, "requires_grad")
#undef INTERN
  g_errors[0] = PyErr_NewExceptionWithDoc("kite.Error",
                                          "A kite call failed; the message is kite's.", NULL, NULL);
  if (!g_errors[0]) return NULL;
  Py_INCREF(g_errors[0]);
  if (PyModule_AddObject(m, "Error", g_errors[0])) return NULL;
  if (add_error(m, KITE_ERR_INVALID_ARG, "InvalidArgument", PyExc_ValueError,
                "Bad argument (shape, dtype, device, value).") ||
      add_error(m, KITE_ERR_UNSUPPORTED, "Unsupported", PyExc_NotImplementedError,
                "No kernel can run these arguments, or a pinned one cannot.") ||
      add_error(m, KITE_ERR_OUT_OF_MEMORY, "OutOfMemory", PyExc_MemoryError, "Out of memory.") ||
      add_error(m, KITE_ERR_DEVICE, "DeviceError", PyExc_RuntimeError,
                "A device runtime reported an error.") ||
      add_error(m, KITE_ERR_PLUGIN, "PluginError", PyExc_RuntimeError,
                "A plugin failed to load.") ||
      add_error(m, KITE_ERR_CONFIG, "ConfigError", PyExc_ValueError,
                "A kernel-selection string could not be parsed.") ||
      add_error(m, KITE_ERR_INTERNAL, "InternalError", PyExc_RuntimeError, "A bug in kite."))
    return NULL;
  PyObject *bases = PyTuple_Pack(2, g_errors[KITE_ERR_INVALID_ARG], PyExc_TypeError);
  if (!bases) return NULL;
  g_type_error = PyErr_NewExceptionWithDoc(
      "kite.ArgumentTypeError",
      "An argument of the wrong type (a list or None where a tensor is required, a str for a "
      "number): a kite.InvalidArgument and a TypeError.",
      bases, NULL);
  Py_DECREF(bases);
  if (!g_type_error) return NULL;
  Py_INCREF(g_type_error);
  if (PyModule_AddObject(m, "ArgumentTypeError", g_type_error)) return NULL;
  PyModule_AddStringConstant(m, "version", kite_version());
  return m;
}
