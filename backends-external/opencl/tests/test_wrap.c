/*
 * A caller's own OpenCL queue and buffer through kite_opencl.h: a cl_mem created on the
 * backend's context, wrapped, used as x and y of kite_rms_norm at byte offsets inside it on a ctx
 * whose stream is the caller's queue, then read back with the caller's own clEnqueueReadBuffer
 * and compared with a float64 rms_norm. Also: kite_opencl_buffer maps an address back, a host
 * pointer on an OpenCL ctx is refused with a message, unwrap releases once.
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

/* The plugin this program linked must be the file kite loaded: two copies of the library keep
 * two address tables, and an address one gave means nothing to the other. */
static int same_plugin(void) {
  Dl_info info;
  char mine[PATH_MAX], kites[PATH_MAX];
  if (!dladdr((void *)&kite_opencl_wrap, &info) || !realpath(info.dli_fname, mine)) return 0;
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
  CHECK(q && buf, "clCreateCommandQueue / clCreateBuffer: %d", (int)e);
  if (!q || !buf) return 1;
  clEnqueueWriteBuffer(q, buf, CL_TRUE, 0, sizeof host, host, 0, NULL, NULL);

  void *addr = NULL;
  CHECK(kite_opencl_wrap(0, buf, &addr) == KITE_OK && addr, "kite_opencl_wrap");
  cl_mem back = NULL;
  size_t off = 1;
  CHECK(kite_opencl_buffer((char *)addr + 8, &back, &off) == KITE_OK && back == buf && off == 8,
        "kite_opencl_buffer");

  kite_ctx_params p = kite_ctx_params_default();
  p.device.device_type = kDLOpenCL;
  p.stream = q;
  kite_ctx *ctx = NULL;
  CHECK(kite_ctx_create(&p, &ctx) == KITE_OK, "kite_ctx_create on the caller's queue");
  int64_t shape[2] = {ROWS, COLS};
  DLTensor x = {addr, {kDLOpenCL, 0}, 2, {kDLFloat, 32, 1}, shape, NULL, PAD * sizeof(float)};
  DLTensor y = x;
  y.byte_offset = (PAD + ROWS * COLS) * sizeof(float);
  CHECK(kite_rms_norm(ctx, &x, NULL, 1e-6f, 0.0f, &y) == KITE_OK, "kite_rms_norm");
  CHECK(strncmp(kite_last_dispatch(), "opencl.", 7) == 0, "dispatched to %s", kite_last_dispatch());
  CHECK(kite_ctx_synchronize(ctx) == KITE_OK, "kite_ctx_synchronize");
  clEnqueueReadBuffer(q, buf, CL_TRUE, y.byte_offset, sizeof out, out, 0, NULL, NULL);
  double worst = 0;
  for (int r = 0; r < ROWS; r++) {
    const float *xr = host + PAD + r * COLS;
    double ss = 0;
    for (int c = 0; c < COLS; c++) ss += (double)xr[c] * xr[c];
    const double inv = 1.0 / sqrt(ss / COLS + 1e-6);
    for (int c = 0; c < COLS; c++) worst = fmax(worst, fabs(out[r * COLS + c] - xr[c] * inv));
  }
  CHECK(worst < 1e-5, "rms_norm on the wrapped buffer: max error %g", worst);

  /* a host pointer is no OpenCL buffer: an error naming the op, nothing written */
  DLTensor h = x;
  h.data = host;
  h.byte_offset = 0;
  CHECK(kite_rms_norm(ctx, &h, NULL, 1e-6f, 0.0f, &y) == KITE_ERR_INVALID_ARG &&
            strstr(kite_last_error(), "rms_norm"),
        "a host pointer on an OpenCL ctx");

  kite_ctx_destroy(ctx);
  CHECK(kite_opencl_unwrap(addr) == KITE_OK, "kite_opencl_unwrap");
  CHECK(kite_opencl_unwrap(addr) == KITE_ERR_INVALID_ARG, "a second unwrap");
  clReleaseMemObject(buf);
  clReleaseCommandQueue(q);
  printf("%s: %s\n", __FILE__, fails ? "FAILED" : "ok");
  return fails ? 1 : 0;
}
