/*
 * kite bench --dispatch (bench.h): what one call through the public API costs over a direct call
 * of the same kernel (kite_kernel_run), on shapes so small that the call is all there is to time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define DISPATCH_CALLS 1000000

/* The highest-priority CPU kernel of op that runs here and accepts args. */
static const kt_kernel *direct_kernel(const kt_bench *b, kite_op op, const void *args) {
  const kt_kernel *best = NULL;
  for (size_t i = 0; i < b->reg.n; i++) {
    const kt_kernel *k = &b->reg.k[i];
    if (k->op != op || k->device != kDLCPU || !k->runs_here) continue;
    const kite_kernel *e = kite_kernel_entry(k->index);
    const char *why = NULL;
    if (!e || !e->run || (e->supports && !e->supports(e, args, &why))) continue;
    if (!best || k->priority > best->priority) best = k;
  }
  return best;
}

typedef kite_status (*api_fn)(kite_ctx *ctx, const DLTensor *x, const DLTensor *w, DLTensor *y);

static kite_status api_relu(kite_ctx *ctx, const DLTensor *x, const DLTensor *w, DLTensor *y) {
  return kite_relu(ctx, x, y);
}

static kite_status api_rms_norm(kite_ctx *ctx, const DLTensor *x, const DLTensor *w, DLTensor *y) {
  return kite_rms_norm(ctx, x, w, 1e-6f, 0.0f, y);
}

/* ns per call: the median of 3 runs of DISPATCH_CALLS calls. */
static double ns_per_call(kite_ctx *ctx, api_fn api, const DLTensor *x, const DLTensor *w,
                          DLTensor *y, const kite_kernel *e, const void *args, int *ok) {
  double t[3];
  for (int rep = 0; rep < 3; rep++) {
    kite_status s = KITE_OK;
    double t0 = kt_now();
    if (api)
      for (int i = 0; i < DISPATCH_CALLS; i++) s |= api(ctx, x, w, y);
    else
      for (int i = 0; i < DISPATCH_CALLS; i++) s |= kite_kernel_run(e, ctx, args);
    t[rep] = (kt_now() - t0) * 1e9 / DISPATCH_CALLS;
    if (s != KITE_OK) *ok = 0;
  }
  return kt_median(t, 3);
}

int kt_bench_dispatch(const kt_opts *o) {
  kt_bench b;
  if (kt_bench_open(&b, o)) return 2;
  kite_ctx *ctx = kt_devices_ctx(&b.dev, kDLCPU);
  size_t cfg_len = strlen(kite_config_get());
  char *saved = malloc(cfg_len + 1);
  float *mem = NULL;
  if (!saved || kite_malloc(ctx, 32 * sizeof(float), (void **)&mem) != KITE_OK) {
    fprintf(stderr, "kite bench: out of memory\n");
    free(saved);
    kt_bench_close(&b);
    return 2;
  }
  memcpy(saved, kite_config_get(), cfg_len + 1);
  kite_config_set(""); /* default dispatch, as users call it */
  float host[32];
  for (int i = 0; i < 32; i++) host[i] = (float)(i % 7) - 3.0f;
  kite_memcpy(ctx, mem, host, sizeof host, KITE_COPY_HOST_TO_DEVICE);
  float *x = mem, *w = mem + 8, *y = mem + 16;

  if (o->json) {
    printf("{\"dispatch_calls\":%d,\"machine\":{\"cpu_model\":", DISPATCH_CALLS);
    kt_json_str(kt_cpu_model());
    printf(",\"cpus\":%d}}\n", kt_online_cpus());
  } else {
    printf("dispatch overhead: public API call vs direct kernel run, %d calls each, cpu ctx\n",
           DISPATCH_CALLS);
    printf("%-10s %-22s %-6s %12s %15s %12s\n", "op", "kernel", "shape", "api ns/call",
           "direct ns/call", "overhead ns");
  }

  double worst_overhead = 0;
  for (int which = 0; which < 2; which++) {
    int64_t shape1[1] = {1}, shape2[2] = {1, 8}, wshape[1] = {8};
    DLDataType f32 = {kDLFloat, 32, 1};
    DLDevice dev = kite_ctx_device(ctx);
    DLTensor tx = {x, dev, which ? 2 : 1, f32, which ? shape2 : shape1, NULL, 0};
    DLTensor ty = {y, dev, which ? 2 : 1, f32, which ? shape2 : shape1, NULL, 0};
    DLTensor tw = {w, dev, 1, f32, wshape, NULL, 0};
    kite_act_args act = {KITE_OP_RELU, KITE_DTYPE_F32, 1, 1, x, 1, y, 1};
    kite_norm_args norm = {
        KITE_OP_RMS_NORM, KITE_DTYPE_F32, 1, 8, x, 8, NULL, 0, w, NULL, y, 8, 1e-6f, 0.0f,
        KITE_NORM_PRE};
    kite_op op = which ? KITE_OP_RMS_NORM : KITE_OP_RELU;
    const void *args = which ? (const void *)&norm : (const void *)&act;
    api_fn api = which ? api_rms_norm : api_relu;
    const char *shape = which ? "1x8" : "1";
    const kt_kernel *k = direct_kernel(&b, op, args);
    if (!k) {
      printf("%-10s no CPU kernel accepts the call\n", kite_op_name(op));
      continue;
    }
    const kite_kernel *e = kite_kernel_entry(k->index);
    int ok = 1;
    double api_ns = ns_per_call(ctx, api, &tx, &tw, &ty, e, args, &ok);
    double direct_ns = ns_per_call(ctx, NULL, &tx, &tw, &ty, e, args, &ok);
    if (api_ns - direct_ns > worst_overhead) worst_overhead = api_ns - direct_ns;
    if (o->json) {
      printf("{\"op\":\"%s\",\"kernel\":", kite_op_name(op));
      kt_json_str(k->name);
      printf(",\"shape\":\"%s\",\"api_ns\":%.2f,\"direct_ns\":%.2f,\"overhead_ns\":%.2f,"
             "\"calls\":%d,\"ok\":%s}\n",
             shape, api_ns, direct_ns, api_ns - direct_ns, DISPATCH_CALLS, ok ? "true" : "false");
    } else {
      printf("%-10s %-22s %-6s %12.1f %15.1f %12.1f%s\n", kite_op_name(op), k->name, shape, api_ns,
             direct_ns, api_ns - direct_ns, ok ? "" : "  (some calls failed)");
    }
  }
  if (!o->json)
    printf("target: overhead < 100 ns per call%s\n",
           worst_overhead > 100 ? " -- MISSED on this host (see the rows above)" : " -- met");
  kite_config_set(saved);
  free(saved);
  kite_free(ctx, mem);
  kt_bench_close(&b);
  return 0;
}
