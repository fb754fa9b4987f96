/*
 * What the parts of the extension share, private to it: kite_module.c (the module, errors, the
 * op table, registry and config), tensors.c (arguments in, ctxs, one op call), torch_kernel.c
 * (the torch.library kernels) and comm.c (the communicators).
 */
#ifndef KITE_PY_MODULE_H
#define KITE_PY_MODULE_H

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

#include <kite/backend.h>
#include <kite/kite.h>

#define MAX_ARGS 24

/* One op function of kite's table as the module binds it: kinds are one letter per argument
 * (kite_module.c's parse_table: T t W w f i u, and c for a kite_comm). */
typedef struct op_desc {
  const char *name;
  size_t fn; /* kite_fn_call's index */
  int nargs;
  char kinds[MAX_ARGS];
  const char *names[MAX_ARGS];
} op_desc;

/* kite_module.c */
/* The exception class of status s (kite.Error for one it does not know). */
PyObject *kite_py_error_type(kite_status s);
PyObject *kite_py_raise_status(kite_status s);
PyObject *kite_py_raise_invalid(const char *fmt, ...);
PyObject *kite_py_raise_type(const char *fmt, ...);
/* Op index of ops() (the bound op functions in kite's table order), or NULL out of range. */
const op_desc *kite_py_op(int index);
/* The collective named name (all_reduce, ...), or NULL. */
const op_desc *kite_py_comm_op(const char *name);

/* tensors.c */
/* Interns the attribute names it reads; -1 with a Python error. */
int kite_py_tensors_init(void);
/* torch.Tensor once torch is imported (by anyone), else NULL (no error set). */
PyTypeObject *kite_py_torch_tensor_type(void);
/* 1 when torch tensor t's strides are the row-major ones of its shape, as torch's DLPack
 * exchange API reports them; 0 otherwise or without that API (no error set). */
int kite_py_row_major(PyObject *t);
/* The thread's ctx of (dev, stream), made on first use; NULL with *st set or a Python error. */
kite_ctx *kite_py_ctx_for(DLDevice dev, void *stream, kite_status *st);
/* Synchronizes the calling thread's ctxs; the first failure's status. */
kite_status kite_py_synchronize_ctxs(void);
/* Runs op d over args (see tensors.c); from_torch_stream: torch's current stream. */
PyObject *kite_py_run_op(const op_desc *d, PyObject *const *args, void *stream,
                         int from_torch_stream, unsigned fresh);

/* torch_kernel.c */
/* Readies the kernel type; -1 with a Python error. */
int kite_py_torch_kernel_init(void);
/* torch_kernel(op_index, defaults, src, like, alloc, autograd, fast_keysets) -> kernel */
PyObject *kite_py_torch_kernel(PyObject *self, PyObject *args);

/* comm.c: the kite_comm of a comm capsule, or NULL with kite.ArgumentTypeError naming op. */
kite_comm *kite_py_comm_of(PyObject *o, const char *op);
PyObject *kite_py_comm_unique_id(PyObject *self, PyObject *args);
PyObject *kite_py_comm_create(PyObject *self, PyObject *args);
PyObject *kite_py_comm_info(PyObject *self, PyObject *arg);
PyObject *kite_py_comm_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
#define KITE_PY_COMM_METHODS                                                                       \
  {"comm_unique_id", kite_py_comm_unique_id, METH_VARARGS,                                         \
   "comm_unique_id(device_type, device_id) -> 128 bytes: a new group id"},                         \
      {"comm_create", kite_py_comm_create, METH_VARARGS,                                           \
       "comm_create(id, nranks, rank, device_type, device_id) -> comm (freed with the object)"},   \
      {"comm_info", kite_py_comm_info, METH_O, "comm_info(comm) -> (nranks, rank)"},               \
      {"comm_call", (PyCFunction)(void (*)(void))kite_py_comm_call, METH_FASTCALL,                 \
       "comm_call(op_name, comm, *args): a collective on torch's current stream of the tensors' "  \
       "device"},

#endif /* KITE_PY_MODULE_H */
