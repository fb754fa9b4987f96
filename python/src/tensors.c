/*
 * kite._C: arguments in and one op call. Tensors come as torch tensors (read through torch's
 * DLPack C exchange API where it has one, else through their attributes: no DLPack capsule per
 * call) or as any DLPack producer (__dlpack__: numpy, cupy, jax). A kite_ctx per (device, stream)
 * is created on first use and kept, per thread (a ctx is used by one thread at a time; a thread's
 * ctxs live until the process ends); a device ctx reserves its workspace when made. The GIL is
 * released around the op.
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
    PyErr_Format(kite_py_error_type(KITE_ERR_DEVICE),
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

PyTypeObject *kite_py_torch_tensor_type(void) {
  if (!g_torch_tensor) torch_lookup();
  return g_torch_tensor;
}

int kite_py_row_major(PyObject *t) {
  DLTensor dl;
  if (!g_xapi) return 0;
  if (g_xapi->dltensor_from_py_object_no_sync(t, &dl) != 0) {
    PyErr_Clear();
    return 0;
  }
  if (!dl.strides) return 1;
  int64_t want = 1;
  for (int i = dl.ndim - 1; i >= 0; i--) {
    if (dl.strides[i] != want) return 0;
    want *= dl.shape[i];
  }
  return 1;
}

kite_status kite_py_synchronize_ctxs(void) {
  for (int i = 0; i < g_nctx; i++) {
    kite_status st = kite_ctx_synchronize(g_ctx[i].ctx);
    if (st != KITE_OK) return st;
  }
  return KITE_OK;
}

int kite_py_tensors_init(void) {
#define INTERN(var, s)                                                                             \
  if (!(var = PyUnicode_InternFromString(s))) return -1;
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
#undef INTERN
  return 0;
}
