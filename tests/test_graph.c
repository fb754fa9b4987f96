/*
 * Graphs (kite.h "Graphs") through the core, on a device of this test's own: a backend for
 * kDLExtDev whose memory is host memory and whose "recording" keeps the calls' argument structs
 * to run them at each launch, as a GPU's graph keeps its kernels. Checks: no graphs on CPU; the
 * rules while recording (nothing runs, host-waiting calls and workspace growth refused, a second
 * begin refused); a replay reads the recorded addresses as they are at launch; a graph runs only
 * on its device; a ctx destroyed while recording frees the recording (AddressSanitizer builds
 * see leaks).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kite/backend.h"

/* A recording: the rms_norm calls queued while it was the ctx's stream. */
typedef struct rec {
  int magic;
  int n;
  kite_norm_args calls[8];
  float *scratch[8]; /* each call's workspace, written at each replay as a kernel would */
} rec;
enum { REC_MAGIC = 0x6b677261 };

static void rms(const kite_norm_args *a) {
  for (int64_t r = 0; r < a->rows; r++) {
    const float *x = (const float *)a->x + r * a->x_stride;
    float *y = (float *)a->y + r * a->y_stride;
    double ss = 0;
    for (int64_t i = 0; i < a->cols; i++) ss += (double)x[i] * x[i];
    const double inv = 1.0 / sqrt(ss / (double)a->cols + a->eps);
    for (int64_t i = 0; i < a->cols; i++) y[i] = (float)(x[i] * inv * ((const float *)a->w)[i]);
  }
}

/* Asks for rows * cols floats of workspace (so that a larger call grows it), then runs or
 * records. */
static kite_status run_rms(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  (void)k;
  const kite_norm_args *a = args;
  void *ws = NULL;
  kite_status s = kite_ctx_workspace(ctx, (size_t)(a->rows * a->cols) * 4, &ws);
  if (s != KITE_OK) return s;
  rec *r = kite_ctx_stream(ctx);
  if (r && r->magic == REC_MAGIC) {
    if (r->n == 8) return kite_set_error(KITE_ERR_DEVICE, "rms_norm: recording full");
    r->scratch[r->n] = ws;
    r->calls[r->n++] = *a;
    return KITE_OK;
  }
  *(float *)ws = 1.0f;
  rms(a);
  return KITE_OK;
}

static bool f32_only(const kite_kernel *k, const void *args, const char **why) {
  (void)k;
  if (((const kite_norm_args *)args)->dtype == KITE_DTYPE_F32 && ((const kite_norm_args *)args)->w)
    return true;
  *why = "f32 with a weight only";
  return false;
}

static const kite_kernel g_kernels[] = {
    {KITE_OP_RMS_NORM, "recorder", 10, 0, "", f32_only, run_rms, "rms_norm that records", 0},
};

static int device_count(const kite_backend *b) {
  (void)b;
  return 1;
}
static kite_status mem_alloc(const kite_backend *b, int dev, size_t bytes, void **out) {
  (void)b, (void)dev;
  *out = calloc(1, bytes ? bytes : 1);
  return *out ? KITE_OK : KITE_ERR_OUT_OF_MEMORY;
}
static void mem_free(const kite_backend *b, int dev, void *p) {
  (void)b, (void)dev;
  free(p);
}
static kite_status mem_copy(const kite_backend *b, int dev, void *dst, const void *src,
                            size_t bytes, kite_copy_kind kind, void *stream) {
  (void)b, (void)dev, (void)kind, (void)stream;
  memcpy(dst, src, bytes);
  return KITE_OK;
}
static kite_status mem_sync(const kite_backend *b, int dev, void *stream) {
  (void)b, (void)dev, (void)stream;
  return KITE_OK;
}
static kite_status g_begin(const kite_backend *b, int dev, void *stream, void **recording) {
  (void)b, (void)dev, (void)stream;
  rec *r = calloc(1, sizeof *r);
  if (!r) return KITE_ERR_OUT_OF_MEMORY;
  r->magic = REC_MAGIC;
  *recording = r;
  return KITE_OK;
}
static kite_status g_end(const kite_backend *b, int dev, void *recording, void **graph) {
  (void)b, (void)dev;
  *graph = recording; /* the recording is the graph */
  return KITE_OK;
}
static kite_status g_launch(const kite_backend *b, int dev, void *stream, void *graph) {
  (void)b, (void)dev, (void)stream;
  const rec *r = graph;
  for (int i = 0; i < r->n; i++) {
    r->scratch[i][0] = 1.0f;
    rms(&r->calls[i]);
  }
  return KITE_OK;
}
static void g_destroy(const kite_backend *b, int dev, void *graph) {
  (void)b, (void)dev;
  free(graph);
}

static const kite_backend g_backend = {
    .name = "recorder",
    .device_type = kDLExtDev,
    .description = "test device that records graphs",
    .device_count = device_count,
    .alloc = mem_alloc,
    .free = mem_free,
    .copy = mem_copy,
    .synchronize = mem_sync,
    .kernels = g_kernels,
    .num_kernels = 1,
    .graph_begin = g_begin,
    .graph_end = g_end,
    .graph_launch = g_launch,
    .graph_destroy = g_destroy,
};

static kite_status norm(kite_ctx *ctx, DLDevice d, float *x, float *w, float *y, int64_t rows,
                        int64_t cols) {
  int64_t shape[2] = {rows, cols}, wshape[1] = {cols};
  const DLDataType f32 = {kDLFloat, 32, 1};
  DLTensor tx = {.data = x, .device = d, .ndim = 2, .dtype = f32, .shape = shape};
  DLTensor tw = {.data = w, .device = d, .ndim = 1, .dtype = f32, .shape = wshape};
  DLTensor ty = {.data = y, .device = d, .ndim = 2, .dtype = f32, .shape = shape};
  return kite_rms_norm(ctx, &tx, &tw, 1e-6f, 0.0f, &ty);
}

static void expect(const char *what, kite_status got, kite_status want, const char *needle) {
  CHECK(got == want && (!needle || strstr(kite_last_error(), needle)), "%s: got %s, want %s%s%s\n",
        what, kite_status_name(got), kite_status_name(want), needle ? " with " : "",
        needle ? needle : "");
}

/* y == rms_norm(x) * w for rows x 4 */
static int matches(const float *x, const float *w, const float *y, int rows) {
  for (int r = 0; r < rows; r++) {
    double ss = 0;
    for (int i = 0; i < 4; i++) ss += (double)x[4 * r + i] * x[4 * r + i];
    const double inv = 1.0 / sqrt(ss / 4 + 1e-6);
    for (int i = 0; i < 4; i++)
      if (fabs(y[4 * r + i] - x[4 * r + i] * inv * w[i]) > 1e-5) return 0;
  }
  return 1;
}

int main(void) {
  CHECK(kite_backend_register(&g_backend) == KITE_OK, "register the recorder backend\n");
  kite_graph *g = NULL;

  /* CPU: no graphs */
  kite_ctx *cpu = NULL;
  CHECK(kite_ctx_create(NULL, &cpu) == KITE_OK, "cpu ctx\n");
  expect("begin on cpu", kite_graph_begin(cpu), KITE_ERR_UNSUPPORTED, "records no graphs");
  expect("end, not recording", kite_graph_end(cpu, &g), KITE_ERR_INVALID_ARG, "not recording");
  CHECK(g == NULL, "no graph on error\n");
  expect("begin NULL", kite_graph_begin(NULL), KITE_ERR_INVALID_ARG, "ctx is NULL");
  expect("end NULL out", kite_graph_end(cpu, NULL), KITE_ERR_INVALID_ARG, "out is NULL");
  expect("launch NULL", kite_graph_launch(cpu, NULL), KITE_ERR_INVALID_ARG, "graph is NULL");
  kite_graph_destroy(NULL);

  kite_ctx_params p = kite_ctx_params_default();
  p.device = (DLDevice){kDLExtDev, 0};
  kite_ctx *ctx = NULL;
  CHECK(kite_ctx_create(&p, &ctx) == KITE_OK, "recorder ctx\n");
  const DLDevice d = p.device;
  float *x = NULL, *w = NULL, *y = NULL, *big = NULL, host[8] = {0};
  CHECK(kite_malloc(ctx, 8 * 4, (void **)&x) == KITE_OK &&
            kite_malloc(ctx, 4 * 4, (void **)&w) == KITE_OK &&
            kite_malloc(ctx, 8 * 4, (void **)&y) == KITE_OK &&
            kite_malloc(ctx, 64 * 4, (void **)&big) == KITE_OK,
        "device buffers\n");
  for (int i = 0; i < 8; i++) x[i] = (float)(i + 1);
  for (int i = 0; i < 4; i++) w[i] = 0.5f + (float)i;

  /* eager: runs at once, and sizes the workspace for 2 x 4 */
  expect("eager call", norm(ctx, d, x, w, y, 2, 4), KITE_OK, NULL);
  CHECK(matches(x, w, y, 2), "eager result\n");
  memset(y, 0, 8 * 4);

  /* recording: nothing runs; host-waiting calls and workspace growth are refused */
  expect("begin", kite_graph_begin(ctx), KITE_OK, NULL);
  expect("begin twice", kite_graph_begin(ctx), KITE_ERR_INVALID_ARG, "already recording");
  expect("memcpy while recording", kite_memcpy(ctx, host, y, 16, KITE_COPY_DEVICE_TO_HOST),
         KITE_ERR_INVALID_ARG, "recording a graph");
  expect("synchronize while recording", kite_ctx_synchronize(ctx), KITE_ERR_INVALID_ARG,
         "recording a graph");
  expect("launch while recording", kite_graph_launch(ctx, (const kite_graph *)ctx),
         KITE_ERR_INVALID_ARG, "recording");
  expect("recorded call", norm(ctx, d, x, w, y, 2, 4), KITE_OK, NULL);
  expect("workspace growth while recording", norm(ctx, d, big, w, big, 16, 4), KITE_ERR_INVALID_ARG,
         "while recording a graph");
  CHECK(y[0] == 0 && y[7] == 0, "a recorded call does not run\n");
  expect("end", kite_graph_end(ctx, &g), KITE_OK, NULL);
  CHECK(g != NULL, "a graph\n");
  CHECK(y[0] == 0, "ending does not run it\n");
  expect("synchronize after end", kite_ctx_synchronize(ctx), KITE_OK, NULL);

  /* replays read the recorded addresses as they are at launch */
  expect("launch", kite_graph_launch(ctx, g), KITE_OK, NULL);
  CHECK(matches(x, w, y, 2), "replay result\n");
  for (int i = 0; i < 8; i++) x[i] = (float)(3 * i - 7);
  expect("launch again", kite_graph_launch(ctx, g), KITE_OK, NULL);
  CHECK(matches(x, w, y, 2), "replay with new inputs\n");
  CHECK(big[0] == 0, "the refused call left no trace in the graph\n");

  /* a graph runs on its own ctx only */
  expect("launch on cpu", kite_graph_launch(cpu, g), KITE_ERR_INVALID_ARG, "another ctx");

  /* the ctx grows its workspace after the recording: the graph keeps the one it recorded with
   * (AddressSanitizer builds see a use after free otherwise), and still replays */
  expect("a larger eager call", norm(ctx, d, big, w, big, 16, 4), KITE_OK, NULL);
  for (int i = 0; i < 8; i++) x[i] = (float)(i % 3 + 1);
  expect("launch after growth", kite_graph_launch(ctx, g), KITE_OK, NULL);
  CHECK(matches(x, w, y, 2), "replay after the workspace grew\n");
  kite_graph_destroy(g);

  /* a ctx destroyed while recording frees the recording */
  kite_ctx *ctx2 = NULL;
  CHECK(kite_ctx_create(&p, &ctx2) == KITE_OK, "second recorder ctx\n");
  expect("begin on the second ctx", kite_graph_begin(ctx2), KITE_OK, NULL);
  kite_ctx_destroy(ctx2);

  kite_free(ctx, x);
  kite_free(ctx, w);
  kite_free(ctx, y);
  kite_free(ctx, big);
  kite_ctx_destroy(ctx);
  kite_ctx_destroy(cpu);
  return check_summary();
}
