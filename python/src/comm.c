/*
 * kite._C's communicators: a kite_comm in a capsule (destroyed with it) and the collectives run
 * through kite_module.c's op path with the capsule as their comm argument. kite.torch.comm
 * makes one per torch.distributed process group.
 */
#include <string.h>

#include "module.h"

#define CAPSULE "kite.comm"

static void comm_free(PyObject *cap) {
  kite_comm_destroy(PyCapsule_GetPointer(cap, CAPSULE));
}

kite_comm *kite_py_comm_of(PyObject *o, const char *op) {
  if (!PyCapsule_IsValid(o, CAPSULE)) {
    kite_py_raise_type("%s: comm: expected a kite communicator (kite._C.comm_create), got %s", op,
                       Py_TYPE(o)->tp_name);
    return NULL;
  }
  return PyCapsule_GetPointer(o, CAPSULE);
}

/* The ctx that makes comms for a device (no stream: creation runs its own). */
static kite_ctx *device_ctx(int type, int id) {
  kite_status st = KITE_OK;
  kite_ctx *c = kite_py_ctx_for((DLDevice){(DLDeviceType)type, id}, NULL, &st);
  if (!c && !PyErr_Occurred()) kite_py_raise_status(st);
  return c;
}

PyObject *kite_py_comm_unique_id(PyObject *self, PyObject *args) {
  (void)self;
  int type, id;
  if (!PyArg_ParseTuple(args, "ii", &type, &id)) return NULL;
  kite_ctx *c = device_ctx(type, id);
  if (!c) return NULL;
  kite_comm_id cid;
  kite_status st = kite_comm_get_unique_id(c, &cid);
  if (st != KITE_OK) return kite_py_raise_status(st);
  return PyBytes_FromStringAndSize((const char *)cid.bytes, KITE_COMM_ID_BYTES);
}

PyObject *kite_py_comm_create(PyObject *self, PyObject *args) {
  (void)self;
  const char *bytes;
  Py_ssize_t len;
  int nranks, rank, type, id;
  if (!PyArg_ParseTuple(args, "y#iiii", &bytes, &len, &nranks, &rank, &type, &id)) return NULL;
  if (len != KITE_COMM_ID_BYTES)
    return kite_py_raise_invalid("kite_comm_create: id: %zd bytes, expected %d", len,
                                 KITE_COMM_ID_BYTES);
  kite_ctx *c = device_ctx(type, id);
  if (!c) return NULL;
  kite_comm_id cid;
  memcpy(cid.bytes, bytes, KITE_COMM_ID_BYTES);
  kite_comm *comm = NULL;
  kite_status st;
  /* every rank waits here for the others (NCCL): let their threads run */
  Py_BEGIN_ALLOW_THREADS st = kite_comm_create(c, &cid, nranks, rank, &comm);
  Py_END_ALLOW_THREADS if (st != KITE_OK) return kite_py_raise_status(st);
  PyObject *cap = PyCapsule_New(comm, CAPSULE, comm_free);
  if (!cap) kite_comm_destroy(comm);
  return cap;
}

PyObject *kite_py_comm_info(PyObject *self, PyObject *arg) {
  (void)self;
  kite_comm *comm = kite_py_comm_of(arg, "kite_comm_info");
  if (!comm) return NULL;
  int nranks, rank;
  kite_status st = kite_comm_info(comm, &nranks, &rank);
  if (st != KITE_OK) return kite_py_raise_status(st);
  return Py_BuildValue("(ii)", nranks, rank);
}

/* comm_call(op_name, comm, *args): the collective's arguments in kite's order, comm first. */
PyObject *kite_py_comm_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs < 1 || !PyUnicode_Check(args[0]))
    return kite_py_raise_type("kite._C.comm_call: needs (op_name, comm, *args)");
  const char *name = PyUnicode_AsUTF8(args[0]);
  if (!name) return NULL;
  const op_desc *d = kite_py_comm_op(name);
  if (!d) return kite_py_raise_invalid("kite._C.comm_call: %s is not a collective", name);
  if (nargs - 1 != d->nargs)
    return kite_py_raise_invalid("%s: takes %d arguments, got %zd", d->name, d->nargs, nargs - 1);
  return kite_py_run_op(d, args + 1, NULL, 1, 0);
}
