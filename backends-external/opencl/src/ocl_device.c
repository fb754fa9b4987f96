/*
 * Platforms and devices: every OpenCL device of every platform, GPUs and accelerators first, then
 * the others, each group in platform order (a ctx's device_id). Each device gets, at its first use,
 * one cl_context, one in-order queue with profiling (the default stream) and the backend's program
 * built for it: loaded from the binary cache on disk when the same source was built for the same
 * device and driver before, else compiled with clBuildProgram and saved there. The cache lives in
 * $KITE_OPENCL_CACHE, else $XDG_CACHE_HOME/kite/opencl, else ~/.cache/kite/opencl;
 * KITE_OPENCL_CACHE=off disables it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ocl_internal.h"

#define MAX_DEVICES 16

extern const char ocl_program_source[]; /* generated from the .cl files (cmake/embed.cmake) */

/* the kernels' names in the program, in ocl_kernel_id's order */
static const char *const ocl_kernel_names[OCL_K_COUNT] = {
    "act",        "gated", "embedding", "store_kv",     "rope",   "to_f32",
    "bias_store", "norm",  "softmax",   "paged_decode", "sample",
};

static ocl_dev g_devs[MAX_DEVICES];
static int g_ndevs;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void add_device(cl_platform_id plat, cl_device_id id) {
  ocl_dev *d = &g_devs[g_ndevs++];
  d->platform = plat;
  d->id = id;
  if (clGetDeviceInfo(id, CL_DEVICE_NAME, sizeof d->name, d->name, NULL) != CL_SUCCESS)
    snprintf(d->name, sizeof d->name, "device %d", g_ndevs - 1);
  size_t maxg = 0;
  clGetDeviceInfo(id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof maxg, &maxg, NULL);
  d->row_group = OCL_ROW_GROUP_MAX;
  while (d->row_group > 1 && d->row_group > maxg) d->row_group /= 2;
  pthread_mutex_init(&d->lock, NULL);
}

/* GPUs and accelerators first, then the rest (CPU drivers such as PoCL), each in platform order:
 * device 0 is the first GPU where a machine has both. */
static void enumerate(void) {
  cl_platform_id plats[8];
  cl_uint np = 0;
  if (clGetPlatformIDs(8, plats, &np) != CL_SUCCESS) return;
  if (np > 8) np = 8;
  for (int pass = 0; pass < 2; pass++)
    for (cl_uint p = 0; p < np; p++) {
      cl_device_id ids[MAX_DEVICES];
      cl_uint nd = 0;
      if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES, ids, &nd) != CL_SUCCESS)
        continue;
      for (cl_uint i = 0; i < nd && i < MAX_DEVICES && g_ndevs < MAX_DEVICES; i++) {
        cl_device_type t = 0;
        clGetDeviceInfo(ids[i], CL_DEVICE_TYPE, sizeof t, &t, NULL);
        const int fast = (t & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR)) != 0;
        if (fast == (pass == 0)) add_device(plats[p], ids[i]);
      }
    }
}

int ocl_device_count(void) {
  pthread_once(&g_once, enumerate);
  return g_ndevs;
}

const char *ocl_op_str(kite_op op) {
  const char *s = kite_op_name(op);
  return s ? s : "unknown op";
}

static const char *cl_err_name(cl_int e) {
  switch (e) {
#define E(x)                                                                                       \
  case x:                                                                                          \
    return #x;
    E(CL_DEVICE_NOT_FOUND)
    E(CL_DEVICE_NOT_AVAILABLE)
    E(CL_COMPILER_NOT_AVAILABLE)
    E(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    E(CL_OUT_OF_RESOURCES)
    E(CL_OUT_OF_HOST_MEMORY)
    E(CL_BUILD_PROGRAM_FAILURE)
    E(CL_INVALID_VALUE)
    E(CL_INVALID_DEVICE)
    E(CL_INVALID_CONTEXT)
    E(CL_INVALID_COMMAND_QUEUE)
    E(CL_INVALID_MEM_OBJECT)
    E(CL_INVALID_BINARY)
    E(CL_INVALID_PROGRAM)
    E(CL_INVALID_KERNEL_NAME)
    E(CL_INVALID_KERNEL)
    E(CL_INVALID_ARG_INDEX)
    E(CL_INVALID_ARG_VALUE)
    E(CL_INVALID_ARG_SIZE)
    E(CL_INVALID_KERNEL_ARGS)
    E(CL_INVALID_WORK_GROUP_SIZE)
    E(CL_INVALID_WORK_ITEM_SIZE)
    E(CL_INVALID_GLOBAL_OFFSET)
    E(CL_INVALID_EVENT)
    E(CL_INVALID_BUFFER_SIZE)
    E(CL_INVALID_GLOBAL_WORK_SIZE)
    E(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    E(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    E(CL_PROFILING_INFO_NOT_AVAILABLE)
#undef E
  default:
    return "unknown OpenCL error";
  }
}

kite_status ocl_error(const char *op, const char *call, cl_int e) {
  const kite_status s = e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_OUT_OF_HOST_MEMORY
                            ? KITE_ERR_OUT_OF_MEMORY
                            : KITE_ERR_DEVICE;
  return kite_set_error(s, "%s: opencl: %s: %s (%d)", op, call, cl_err_name(e), (int)e);
}

/* ---- the binary cache ---------------------------------------------------------------------- */

static uint64_t fnv1a(uint64_t h, const char *s) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

/* The cache file of this source on d (its name, driver and platform version in the key). */
static int cache_path(const ocl_dev *d, const char *options, char *path, size_t n) {
  const char *env = getenv("KITE_OPENCL_CACHE");
  char dir[512];
  if (env && strcmp(env, "off") == 0) return 0;
  if (env && *env)
    snprintf(dir, sizeof dir, "%s", env);
  else if (getenv("XDG_CACHE_HOME") && *getenv("XDG_CACHE_HOME"))
    snprintf(dir, sizeof dir, "%s/kite/opencl", getenv("XDG_CACHE_HOME"));
  else if (getenv("HOME"))
    snprintf(dir, sizeof dir, "%s/.cache/kite/opencl", getenv("HOME"));
  else
    return 0;
  char driver[256] = "", pver[256] = "";
  clGetDeviceInfo(d->id, CL_DRIVER_VERSION, sizeof driver, driver, NULL);
  clGetPlatformInfo(d->platform, CL_PLATFORM_VERSION, sizeof pver, pver, NULL);
  uint64_t h = 0xcbf29ce484222325ull;
  h = fnv1a(fnv1a(fnv1a(fnv1a(fnv1a(h, ocl_program_source), d->name), driver), pver), options);
  /* make the directory chain (mkdir -p) */
  for (char *s = dir + 1; *s; s++)
    if (*s == '/') {
      *s = '\0';
      mkdir(dir, 0755);
      *s = '/';
    }
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) return 0;
  snprintf(path, n, "%s/%016llx.bin", dir, (unsigned long long)h);
  return 1;
}

static cl_program load_cached(ocl_dev *d, const char *path, const char *options) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  cl_program prog = NULL;
  unsigned char *bin = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
  if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (bin = malloc((size_t)n)) &&
      fread(bin, 1, (size_t)n, f) == (size_t)n) {
    const size_t len = (size_t)n;
    const unsigned char *bins[1] = {bin};
    cl_int st = CL_SUCCESS, e = CL_SUCCESS;
    prog = clCreateProgramWithBinary(d->context, 1, &d->id, &len, bins, &st, &e);
    if (prog && (e != CL_SUCCESS || st != CL_SUCCESS ||
                 clBuildProgram(prog, 1, &d->id, options, NULL, NULL) != CL_SUCCESS)) {
      clReleaseProgram(prog);
      prog = NULL;
    }
  }
  free(bin);
  fclose(f);
  return prog;
}

/* Writes the program's binary (a temporary file renamed into place: readers never see half). */
static void save_cached(cl_program prog, const char *path) {
  size_t n = 0;
  if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof n, &n, NULL) != CL_SUCCESS || !n)
    return;
  unsigned char *bin = malloc(n);
  unsigned char *bins[1] = {bin};
  char tmp[760];
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
  if (bin && clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) == CL_SUCCESS) {
    FILE *f = fopen(tmp, "wb");
    if (f) {
      const int ok = fwrite(bin, 1, n, f) == n;
      if (fclose(f) == 0 && ok)
        rename(tmp, path);
      else
        remove(tmp);
    }
  }
  free(bin);
}

/* ---- first use of a device ----------------------------------------------------------------- */

static kite_status build_program(ocl_dev *d, const char *op) {
  char options[128], path[700];
  snprintf(options, sizeof options, "-cl-std=CL1.2 -DKITE_GROUP=%zu", d->row_group);
  const int cached = cache_path(d, options, path, sizeof path);
  d->program = cached ? load_cached(d, path, options) : NULL;
  if (d->program) return KITE_OK;
  cl_int e;
  const char *src = ocl_program_source;
  d->program = clCreateProgramWithSource(d->context, 1, &src, NULL, &e);
  if (!d->program) return ocl_error(op, "clCreateProgramWithSource", e);
  e = clBuildProgram(d->program, 1, &d->id, options, NULL, NULL);
  if (e != CL_SUCCESS) {
    char log[2048] = "";
    clGetProgramBuildInfo(d->program, d->id, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
    clReleaseProgram(d->program);
    d->program = NULL;
    return kite_set_error(KITE_ERR_DEVICE, "%s: opencl: building the kernels for %s failed: %s", op,
                          d->name, log);
  }
  if (cached) save_cached(d->program, path);
  return KITE_OK;
}

static void release(ocl_dev *d) {
  for (int i = 0; i < OCL_K_COUNT; i++)
    if (d->kernels[i]) clReleaseKernel(d->kernels[i]), d->kernels[i] = NULL;
  if (d->program) clReleaseProgram(d->program), d->program = NULL;
  if (d->queue) clReleaseCommandQueue(d->queue), d->queue = NULL;
  if (d->context) clReleaseContext(d->context), d->context = NULL;
}

static kite_status prepare(ocl_dev *d, const char *op) {
  cl_int e;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)d->platform, 0};
  d->context = clCreateContext(props, 1, &d->id, NULL, NULL, &e);
  if (!d->context) return ocl_error(op, "clCreateContext", e);
  d->queue = clCreateCommandQueue(d->context, d->id, CL_QUEUE_PROFILING_ENABLE, &e);
  if (!d->queue) return ocl_error(op, "clCreateCommandQueue", e);
  kite_status s = build_program(d, op);
  if (s != KITE_OK) return s;
  for (int i = 0; i < OCL_K_COUNT; i++) {
    d->kernels[i] = clCreateKernel(d->program, ocl_kernel_names[i], &e);
    if (!d->kernels[i]) return ocl_error(op, ocl_kernel_names[i], e);
  }
  return KITE_OK;
}

kite_status ocl_device_get(int device_id, const char *op, ocl_dev **out) {
  if (device_id < 0 || device_id >= ocl_device_count())
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: opencl: no device %d (%d present)", op,
                          device_id, ocl_device_count());
  ocl_dev *d = &g_devs[device_id];
  kite_status s = KITE_OK;
  pthread_mutex_lock(&d->lock);
  if (!d->ready) {
    s = prepare(d, op);
    if (s == KITE_OK)
      d->ready = 1;
    else
      release(d); /* tried again at the next call */
  }
  pthread_mutex_unlock(&d->lock);
  *out = d;
  return s;
}
