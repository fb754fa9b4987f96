/*
 * kite._C: the CPython extension over kite's public C API.
 *
 * One entry point runs every op: call(op_index, stream, *args), with the op's arguments in the
 * order of kite's op table (include/kite/ops.def, read through kite_fn_get); tensors.c reads the
 * arguments and makes the call, torch_kernel.c makes the kernels that torch.ops.kite registers
 * with the torch dispatcher, comm.c binds the collectives. This file: the module, its exceptions
 * (every kite_status other than KITE_OK raises the matching one with kite's message), the op
 * table, the registry and config functions.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <string.h>

#include <kite/backend.h>
#include <kite/kite.h>

#include "module.h"

/* ---- exceptions ---------------------------------------------------------------------------- */
/* Indexed by kite_status; [0] is kite.Error, the base of the others. */
static PyObject *g_errors[KITE_ERR_INTERNAL + 1];
/* kite.ArgumentTypeError: an argument of the wrong type (a list or None for a tensor, a str for a
 * number); derives from kite.InvalidArgument and TypeError. */
static PyObject *g_type_error;

PyObject *kite_py_error_type(kite_status s) {
  if (s > KITE_OK && s <= KITE_ERR_INTERNAL) return g_errors[s];
  return g_errors[0];
}

/* Raises the exception of status s with kite's message; returns NULL. */
PyObject *kite_py_raise_status(kite_status s) {
  const char *msg = kite_last_error();
  PyErr_SetString(kite_py_error_type(s), msg && *msg ? msg : kite_status_name(s));
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

const op_desc *kite_py_op(int index) {
  return index >= 0 && index < NUM_OPS ? &g_ops[index] : NULL;
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
  kite_status st = kite_py_synchronize_ctxs();
  if (st != KITE_OK) return kite_py_raise_status(st);
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"call", (PyCFunction)(void (*)(void))py_call, METH_FASTCALL,
     "call(op_index, stream, *args): runs op op_index of ops() on the args' device"},
    {"torch_kernel", kite_py_torch_kernel, METH_VARARGS,
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
  if (kite_py_tensors_init() || kite_py_torch_kernel_init()) return NULL;
  PyObject *m = PyModule_Create(&module);
  if (!m) return NULL;
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
