/*
 * kite._C.torch_kernel: the kernels that torch.ops.kite registers with the torch dispatcher.
 *
 * A kernel of one op that the torch dispatcher calls directly: the op's schema arguments in,
 * its results allocated here (torch.empty_like, or the Python alloc function of the op's row),
 * one kite call on torch's current stream (tensors.c), the results out; no Python frame on the
 * way.
 *
 * As an Autograd-key kernel (autograd set; called with the dispatch keyset first) it runs the
 * op itself when no gradient is wanted (grad mode off or no tensor argument requires grad) and
 * the keys below autograd are only the dense backend's (one of fast[]: plain CPU or CUDA
 * tensors, no tracing mode or tensor subclass); otherwise it hands the call to autograd, the
 * Python autograd kernel (which redispatches to the backend kernel). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>

#include "module.h"

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
    if (!PyObject_TypeCheck(args[i], kite_py_torch_tensor_type())) continue;
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

/* A new contiguous torch tensor of like's shape, dtype and device: torch.empty_like, without
 * keywords for a row-major like (the cheapest call), else with memory_format=contiguous_format.
 * Not the DLPack exchange API's allocator: on PyTorch 2.11 (H200 host) its round trip cost about
 * 5 us a call more, as torch wraps the tensor it made a second time on the way back to Python. */
static PyObject *empty_like(PyObject *like) {
  if (kite_py_row_major(like)) return PyObject_Vectorcall(g_empty_like, &like, 1, NULL);
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
  if (!kite_py_torch_tensor_type()) {
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
PyObject *kite_py_torch_kernel(PyObject *self, PyObject *args) {
  int op, nparams, like;
  PyObject *defaults, *src, *alloc, *autograd, *fast;
  if (!PyArg_ParseTuple(args, "iO!O!iOOO!", &op, &PyTuple_Type, &defaults, &PyTuple_Type, &src,
                        &like, &alloc, &autograd, &PyTuple_Type, &fast))
    return NULL;
  nparams = (int)PyTuple_GET_SIZE(defaults);
  if (torch_kernel_lookup()) return NULL;
  const op_desc *d = kite_py_op(op);
  if (!d) return kite_py_raise_invalid("torch_kernel: op index %d out of range", op);
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

int kite_py_torch_kernel_init(void) {
  if (PyType_Ready(&kernel_type)) return -1;
  if (!(s_raw_repr = PyUnicode_InternFromString("raw_repr"))) return -1;
  if (!(s_requires_grad = PyUnicode_InternFromString("requires_grad"))) return -1;
  return 0;
}
