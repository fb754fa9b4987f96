/*
 * A caller's own OpenCL queue and buffers, as DLPack hands them over: DLTensor.data is the
 * cl_mem, byte_offset the view. x and y of kite_rms_norm at byte offsets inside one buffer of
 * the caller's, on a ctx whose stream is the caller's queue, read back with the caller's own
 * clEnqueueReadBuffer and compared with a float64 rms_norm. Also: views of one buffer are
 * compared for overlap, views of two buffers are not; a view past the buffer's end, a misaligned
 * one and a host pointer are refused (an empty one past the end is taken) naming the op and the
 * argument; kite_malloc gives a cl_mem that kite_memcpy_offset fills and reads at offsets; buffers
 * released and created again (whose handles OpenCL may reuse) are taken with their own sizes.
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kite_opencl.h"

#define ROWS 3
#define COLS 37
#define PAD 5 /* elements before x in the buffer */

static int fails;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                  \
      printf(__VA_ARGS__);                                                                         \
      printf(" (%s)\n", kite_last_error());                                                        \
      fails++;                                                                                     \
    }                                                                                              \
  } while (0)

/* The plugin this program linked must be the file kite loaded: a second copy of the library
 * makes a context of its own, and buffers of that context mean nothing to kite's. */
static int same_plugin(void) {
  Dl_info info;
  char mine[PATH_MAX], kites[PATH_MAX];
  if (!dladdr((void *)&kite_opencl_device, &info) || !realpath(info.dli_fname, mine)) return 0;
  for (size_t i = 0; i < kite_backend_count(); i++) {
    kite_backend_info b;
    if (kite_backend_get(i, &b) == KITE_OK && strcmp(b.name, "opencl") == 0) {
      if (realpath(b.path, kites) && strcmp(mine, kites) == 0) return 1;
      printf("FAIL this program linked %s but kite loaded %s: link the copy kite loads\n", mine,
             b.path);
      return 0;
    }
  }
  printf("FAIL kite loaded no opencl backend\n");
  return 0;
}

/* A failed call: status INVALID_ARG and a message holding both words. */
static int refused(kite_status s, const char *a, const char *b) {
  const char *m = kite_last_error();
  return s == KITE_ERR_INVALID_ARG && strstr(m, a) && strstr(m, b);
}

/* y = rms_norm(x) over [rows, COLS] f32 views of mem at element offsets xo and yo. */
static kite_status rms(kite_ctx *ctx, cl_mem mem, int64_t rows, size_t xo, size_t yo) {
  int64_t shape[2] = {rows, COLS};
  DLTensor x = {mem, {kDLOpenCL, 0}, 2, {kDLFloat, 32, 1}, shape, NULL, xo * sizeof(float)};
  DLTensor y = x;
  y.byte_offset = yo * sizeof(float);
  return kite_rms_norm(ctx, &x, NULL, 1e-6f, 0.0f, &y);
}

int main(void) {
  if (!same_plugin()) return 1;
  cl_context cl;
  cl_device_id dev;
  if (kite_opencl_device(0, &cl, &dev, NULL) != KITE_OK) {
    printf("FAIL no OpenCL device: %s\n", kite_last_error());
    return 1;
  }
  cl_int e;
  cl_command_queue q = clCreateCommandQueue(cl, dev, 0, &e);
  const size_t n = PAD + 2 * ROWS * COLS;
  float host[PAD + 2 * ROWS * COLS], out[ROWS * COLS];
  for (size_t i = 0; i < n; i++) host[i] = (float)sin((double)i * 0.37) * 3.0f;
  cl_mem buf = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof host, NULL, &e);
  cl_mem other = clCreateBuffer(cl, CL_MEM_READ_WRITE, ROWS * COLS * sizeof(float), NULL, &e);
  CHECK(q && buf && other, "clCreateCommandQueue / clCreateBuffer: %d", (int)e);
  if (!q || !buf || !other) return 1;
  clEnqueueWriteBuffer(q, buf, CL_TRUE, 0, sizeof host, host, 0, NULL, NULL);

  kite_ctx_params p = kite_ctx_params_default();
  p.device.device_type = kDLOpenCL;
  p.stream = q;
  kite_ctx *ctx = NULL;
  CHECK(kite_ctx_create(&p, &ctx) == KITE_OK, "kite_ctx_create on the caller's queue");

  /* the caller's cl_mem as data, no call to enter it */
  const size_t yo = PAD + ROWS * COLS;
  CHECK(rms(ctx, buf, ROWS, PAD, yo) == KITE_OK, "kite_rms_norm on the caller's cl_mem");
  CHECK(strncmp(kite_last_dispatch(), "opencl.", 7) == 0, "dispatched to %s", kite_last_dispatch());
  CHECK(kite_ctx_synchronize(ctx) == KITE_OK, "kite_ctx_synchronize");
  clEnqueueReadBuffer(q, buf, CL_TRUE, yo * sizeof(float), sizeof out, out, 0, NULL, NULL);
  double worst = 0;
  for (int r = 0; r < ROWS; r++) {
    const float *xr = host + PAD + r * COLS;
    double ss = 0;
    for (int c = 0; c < COLS; c++) ss += (double)xr[c] * xr[c];
    const double inv = 1.0 / sqrt(ss / COLS + 1e-6);
    for (int c = 0; c < COLS; c++) worst = fmax(worst, fabs(out[r * COLS + c] - xr[c] * inv));
  }
  CHECK(worst < 1e-5, "rms_norm on the caller's buffer: max error %g", worst);

  /* views of one cl_mem are compared as addresses: a residual overlapping x is refused, one in
   * another cl_mem is not */
  int64_t shape[2] = {ROWS, COLS};
  DLTensor x = {buf, {kDLOpenCL, 0}, 2, {kDLFloat, 32, 1}, shape, NULL, PAD * sizeof(float)};
  DLTensor y = x, res = x;
  y.byte_offset = yo * sizeof(float);
  res.byte_offset = (PAD + COLS) * sizeof(float);
  CHECK(refused(kite_add_rms_norm(ctx, &x, &res, NULL, 1e-6f, 0.0f, KITE_NORM_PRE, &y),
                "add_rms_norm: residual", "overlaps x"),
        "a residual overlapping x in the same cl_mem");
  res.data = other;
  res.byte_offset = 0;
  CHECK(kite_add_rms_norm(ctx, &x, &res, NULL, 1e-6f, 0.0f, KITE_NORM_PRE, &y) == KITE_OK,
        "a residual in another cl_mem");

  /* past the end, misaligned, a host pointer: errors naming the op and the argument */
  CHECK(refused(rms(ctx, buf, ROWS, PAD + ROWS * COLS + 1, 0), "rms_norm: x", "past the end"),
        "a view one element past the buffer's end");
  CHECK(refused(rms(ctx, other, ROWS + 1, 0, 0), "rms_norm: x", "past the end"),
        "a view one row past the buffer's end");
  CHECK(rms(ctx, other, 0, 5 * ROWS * COLS, 7 * ROWS * COLS) == KITE_OK,
        "an empty view past the buffer's end addresses nothing");
  x.byte_offset = 2;
  CHECK(refused(kite_rms_norm(ctx, &x, NULL, 1e-6f, 0.0f, &y), "rms_norm: x", "aligned"),
        "a misaligned byte_offset");
  x.data = host;
  x.byte_offset = 0;
  CHECK(refused(kite_rms_norm(ctx, &x, NULL, 1e-6f, 0.0f, &y), "rms_norm: x", "not a cl_mem"),
        "a host pointer on an OpenCL ctx");

  /* kite_malloc gives a cl_mem of the device's context; copies at offsets in and out */
  void *mem = NULL;
  const size_t bytes = 4 * COLS * sizeof(float);
  CHECK(kite_malloc(ctx, bytes, &mem) == KITE_OK && mem, "kite_malloc");
  cl_context mc = NULL;
  size_t msize = 0;
  CHECK(clGetMemObjectInfo(mem, CL_MEM_CONTEXT, sizeof mc, &mc, NULL) == CL_SUCCESS && mc == cl &&
            clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof msize, &msize, NULL) == CL_SUCCESS &&
            msize >= bytes,
        "kite_malloc returns a cl_mem of the context, of %zu bytes at least", bytes);
  float back[COLS];
  CHECK(kite_memcpy_offset(ctx, mem, 8, host, 0, COLS * sizeof(float), KITE_COPY_HOST_TO_DEVICE) ==
            KITE_OK,
        "kite_memcpy_offset host to device");
  CHECK(kite_memcpy_offset(ctx, mem, 8 + COLS * sizeof(float), buf, PAD * sizeof(float),
                           COLS * sizeof(float), KITE_COPY_DEVICE_TO_DEVICE) == KITE_OK,
        "kite_memcpy_offset from the caller's cl_mem to kite's");
  CHECK(kite_memcpy_offset(ctx, back, 0, mem, 8 + COLS * sizeof(float), sizeof back,
                           KITE_COPY_DEVICE_TO_HOST) == KITE_OK &&
            memcmp(back, host + PAD, sizeof back) == 0,
        "the device-to-device copy read back");
  CHECK(kite_memcpy_offset(ctx, back, 0, mem, 8, sizeof back, KITE_COPY_DEVICE_TO_HOST) ==
                KITE_OK &&
            memcmp(back, host, sizeof back) == 0,
        "the host-to-device copy read back");
  CHECK(refused(kite_memcpy_offset(ctx, mem, 0, mem, 8, 64, KITE_COPY_DEVICE_TO_DEVICE),
                "kite_memcpy", "overlap"),
        "overlapping ranges of one cl_mem");
  CHECK(refused(kite_memcpy_offset(ctx, back, 0, mem, bytes - 8, 16, KITE_COPY_DEVICE_TO_HOST),
                "kite_memcpy: src", "past the end"),
        "a copy past the end of kite's cl_mem");
  CHECK(kite_free(ctx, mem) == KITE_OK, "kite_free");

  /* buffers released and created again, of changing sizes: each is taken with its own size,
   * whatever handle OpenCL gives it (a forgotten buffer's range is gone) */
  for (int i = 0; i < 32; i++) {
    const int64_t rows = 1 + i % 3;
    cl_mem b =
        clCreateBuffer(cl, CL_MEM_READ_WRITE, (size_t)(rows * COLS) * sizeof(float), NULL, &e);
    CHECK(b != NULL, "clCreateBuffer %d", i);
    if (!b) break;
    CHECK(rms(ctx, b, rows, 0, 0) == KITE_OK, "buffer %d: a view of all of it", i);
    CHECK(refused(rms(ctx, b, rows + 1, 0, 0), "rms_norm: x", "past the end"),
          "buffer %d: a view past its end", i);
    kite_ctx_synchronize(ctx);
    clReleaseMemObject(b);
  }

  kite_ctx_destroy(ctx);
  clReleaseMemObject(other);
  clReleaseMemObject(buf);
  clReleaseCommandQueue(q);
  printf("%s: %s\n", __FILE__, fails ? "FAILED" : "ok");
  return fails ? 1 : 0;
}
