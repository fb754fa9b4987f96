/*
 * Bad-input suite: every public function of kite.h, called with broken arguments, must return
 * the expected status and a message naming the op and the argument at fault ("rms_norm: w: ..."),
 * without crashing or touching memory it does not own (the suite also runs under ASan + UBSan),
 * and a failed op call writes nothing: every tensor's bytes are as they were before it.
 * Valid calls prove that the checks do not simply reject everything.
 *
 * Op calls come from the op table (kite/ops.def, built by tests/op_spec.h) and go through
 * kite_fn_call, so a new op is covered without an edit here:
 * - the sweep runs every function of the table in f32 and bf16 with the table's palette: the
 *   valid call; each tensor NULL, of another dtype, with one more dim, on another device; each
 *   dim whose letter another tensor shares, grown by one; each INT scalar outside int32;
 * - each row of g_cases breaks one thing in the valid call of a set of functions ("*" = every
 *   function, every tensor) and names the status wanted; the rows are written for the shapes
 *   of g_setups (f32).
 * The op table's calls are in bad_input_ops.c, the rows of g_cases in bad_input_rows.c
 * (bad_input.h); this file holds the checks, the functions outside the op table and main.
 */
#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bad_input.h"
#include "check.h"
#include "kite/kite.h"
#include "op_spec.h"

/* Huge allocations must come back as NULL (then OUT_OF_MEMORY), not abort the sanitizer run.
 * Exported, so that the sanitizer runtime finds it despite -fvisibility=hidden. */
#if defined(__SANITIZE_ADDRESS__)
__attribute__((visibility("default"))) const char *__asan_default_options(void);
const char *__asan_default_options(void) {
  return "allocator_may_return_null=1";
}
#endif

static bool g_verbose; /* argv[1] == "-v": print every message */
kite_comm *g_comm;

/* Records one outcome of `what`: why is NULL when it passed. */
void record(const char *what, const char *why, const char *detail) {
  if (!why) {
    g_pass++;
    return;
  }
  g_fail++;
  printf("FAIL %s: %s: %s\n", what, why, detail);
}

/* Records one outcome. A failure wants a message containing `who` ("rms_norm: w", "config"); a
 * success wants no message. */
void expect(const char *what, kite_status got, kite_status want, const char *who) {
  const char *msg = kite_last_error();
  const char *why = NULL;
  if (got != want)
    why = "wrong status";
  else if (want != OK && !msg[0])
    why = "empty message";
  else if (want != OK && who && !strstr(msg, who))
    why = "message does not name the culprit";
  else if (want == OK && msg[0])
    why = "message left after success";
  if (g_verbose) printf("%-60s %-22s %s\n", what, kite_status_name(got), msg);
  char detail[512];
  snprintf(detail, sizeof detail, "got %s, want %s; wanted \"%s\" in \"%s\"", kite_status_name(got),
           kite_status_name(want), who ? who : "", msg);
  record(what, why, detail);
}

static bool ident_char(char c) {
  return c == '_' || isalnum((unsigned char)c);
}

/* Whether word stands in msg as a whole name (not inside a longer identifier). */
static bool names(const char *msg, const char *word) {
  const size_t n = strlen(word);
  for (const char *p = msg; (p = strstr(p, word)) != NULL; p++)
    if ((p == msg || !ident_char(p[-1])) && !ident_char(p[n])) return true;
  return false;
}

/* A call that must fail: with status want (any error when want is OK) and a message naming the
 * function or its op and, when arg is not NULL, the argument. */
void expect_error(const char *what, kite_status got, kite_status want, const kite_fn_info *f,
                  const char *arg) {
  char msg[512];
  snprintf(msg, sizeof msg, "%s", kite_last_error());
  const char *why = NULL;
  if (got == OK || (want != OK && got != want))
    why = "wrong status";
  else if (!msg[0])
    why = "empty message";
  else if (!names(msg, f->name) && !names(msg, kite_op_name(f->op)))
    why = "message does not name the op";
  else if (arg && !names(msg, arg))
    why = "message does not name the argument";
  if (g_verbose) printf("%-60s %-22s %s\n", what, kite_status_name(got), msg);
  char detail[640];
  snprintf(detail, sizeof detail, "got %s, want %s naming %s%s%s; message \"%s\"",
           kite_status_name(got), want == OK ? "an error" : kite_status_name(want), f->name,
           arg ? " and " : "", arg ? arg : "", msg);
  record(what, why, detail);
}

/* ---- strides that address nothing ---------------------------------------------------------
 * A dim of size 1 never steps, and an empty tensor has no element: whatever stride such a dim
 * carries (huge ones that overflow int64 once multiplied, NumPy's 0, negative ones) is ignored,
 * and NULL data with a zero-size dim is fine. Each call must succeed on every backend and give
 * what the compact call gives (under UBSan: without overflowing any offset arithmetic). */
static DLTensor dlt(void *data, DLDataType t, int ndim, int64_t *shape, int64_t *strides) {
  DLTensor d = {.data = data,
                .device = {kDLCPU, 0},
                .ndim = ndim,
                .dtype = t,
                .shape = shape,
                .strides = strides,
                .byte_offset = 0};
  return d;
}

static void test_strides_that_address_nothing(kite_ctx *ctx) {
  const DLDataType f32 = {kDLFloat, 32, 1}, i32 = {kDLInt, 32, 1}, i8 = {kDLInt, 8, 1};
  const int64_t huge = INT64_MAX / 2;
  static const char *const configs[] = {"", "-cpu"}; /* the best kernels, then ref */
  for (int cfg = 0; cfg < 2; cfg++) {
    char what[160];
    kite_config_set(configs[cfg]);
    /* quant of one row: x[1, 16], q[1, 16], scales[1], each leading stride huge */
    float x[16], scales[2];
    int8_t q[2][16];
    for (int i = 0; i < 16; i++) x[i] = (float)(i * 7 % 11) - 5.0f;
    int64_t xs[2] = {1, 16}, ss[1] = {1}, st_big[2] = {huge, 1}, st1_big[1] = {huge};
    for (int v = 0; v < 2; v++) {
      DLTensor xt = dlt(x, f32, 2, xs, v ? st_big : NULL),
               qt = dlt(q[v], i8, 2, xs, v ? st_big : NULL),
               sc = dlt(&scales[v], f32, 1, ss, v ? st1_big : NULL);
      snprintf(what, sizeof what, "quant [1,16], leading strides %s (config \"%s\")",
               v ? "huge" : "compact", configs[cfg]);
      expect(what, kite_quant(ctx, &xt, &qt, &sc), OK, NULL);
    }
    CHECK(!memcmp(q[0], q[1], sizeof q[0]) && scales[0] == scales[1],
          "quant: huge strides on size-1 dims give the compact call's codes and scale");

    /* sdpa, B = 1 and Hkv = 1 with huge strides: q[1, 2, 3, 8], k/v[1, 1, 5, 8] */
    float qa[48], ka[40], va[40], o[2][48], lse[2][6];
    for (int i = 0; i < 48; i++) qa[i] = (float)(i % 5) * 0.25f - 0.5f;
    for (int i = 0; i < 40; i++) ka[i] = (float)(i % 7) * 0.125f, va[i] = (float)(i % 3) - 1.0f;
    int64_t qsh[4] = {1, 2, 3, 8}, ksh[4] = {1, 1, 5, 8}, lsh[3] = {1, 2, 3};
    int64_t qst[4] = {huge, 24, 8, 1}, kst[4] = {huge, huge, 8, 1}, lst[3] = {huge, 3, 1};
    for (int v = 0; v < 2; v++) {
      DLTensor qt = dlt(qa, f32, 4, qsh, v ? qst : NULL), kt = dlt(ka, f32, 4, ksh, v ? kst : NULL),
               vt = dlt(va, f32, 4, ksh, v ? kst : NULL),
               ot = dlt(o[v], f32, 4, qsh, v ? qst : NULL),
               lt = dlt(lse[v], f32, 3, lsh, v ? lst : NULL);
      snprintf(what, sizeof what, "sdpa B=1 Hkv=1, strides %s (config \"%s\")",
               v ? "huge" : "compact", configs[cfg]);
      expect(what, kite_sdpa(ctx, &qt, &kt, &vt, NULL, NULL, NULL, &ot, &lt), OK, NULL);
    }
    CHECK(!memcmp(o[0], o[1], sizeof o[0]) && !memcmp(lse[0], lse[1], sizeof lse[0]),
          "sdpa: huge strides on size-1 dims give the compact call's o and lse");

    /* paged_decode of one sequence: q[1, 2, 8], caches [2, 1, 4, 8] (Hkv = 1), block_table[1, 2],
     * seq_lens[1], o[1, 2, 8], lse[1, 2] */
    float cache_k[64], cache_v[64], od[2][16], ld[2][2];
    for (int i = 0; i < 64; i++) cache_k[i] = (float)(i % 9) * 0.1f, cache_v[i] = (float)(i % 4);
    int32_t bt[2] = {1, 0}, sl[1] = {6};
    int64_t dq[3] = {1, 2, 8}, dc[4] = {2, 1, 4, 8}, db[2] = {1, 2}, dsl[1] = {1}, dl[2] = {1, 2};
    int64_t dqs[3] = {huge, 8, 1}, dcs[4] = {32, huge, 8, 1}, dbs[2] = {huge, 1},
            dls[2] = {huge, 1};
    for (int v = 0; v < 2; v++) {
      DLTensor qt = dlt(qa, f32, 3, dq, v ? dqs : NULL),
               kc = dlt(cache_k, f32, 4, dc, v ? dcs : NULL),
               vc = dlt(cache_v, f32, 4, dc, v ? dcs : NULL),
               btt = dlt(bt, i32, 2, db, v ? dbs : NULL),
               slt = dlt(sl, i32, 1, dsl, v ? st1_big : NULL),
               ot = dlt(od[v], f32, 3, dq, v ? dqs : NULL),
               lt = dlt(ld[v], f32, 2, dl, v ? dls : NULL);
      snprintf(what, sizeof what, "paged_decode B=1 Hkv=1, strides %s (config \"%s\")",
               v ? "huge" : "compact", configs[cfg]);
      expect(what, kite_paged_decode(ctx, &qt, &kc, &vc, &btt, &slt, NULL, NULL, &ot, &lt), OK,
             NULL);
    }
    CHECK(!memcmp(od[0], od[1], sizeof od[0]) && !memcmp(ld[0], ld[1], sizeof ld[0]),
          "paged_decode: huge strides on size-1 dims give the compact call's o and lse");

    /* empty tensors: NULL data, NumPy's stride 0, huge and negative strides on empty dims */
    int64_t esh[2] = {0, 8}, est0[2] = {0, 0}, estn[2] = {-5, huge};
    DLTensor ex = dlt(NULL, f32, 2, esh, est0), ey = dlt(NULL, f32, 2, esh, estn);
    snprintf(what, sizeof what, "rms_norm x[0, 8] NULL data, strides {0,0} / {-5,huge} (\"%s\")",
             configs[cfg]);
    expect(what, kite_rms_norm(ctx, &ex, NULL, 1e-6f, 0.0f, &ey), OK, NULL);
    int64_t msh[2] = {2, 0}, msc[1] = {2}, mst[2] = {huge, -1};
    float msc_out[2] = {-1.0f, -1.0f};
    DLTensor mx = dlt(NULL, f32, 2, msh, mst), mq = dlt(NULL, i8, 2, msh, mst),
             ms = dlt(msc_out, f32, 1, msc, NULL);
    snprintf(what, sizeof what, "quant x[2, 0] NULL data, strides {huge,-1} (\"%s\")",
             configs[cfg]);
    expect(what, kite_quant(ctx, &mx, &mq, &ms), OK, NULL);
    CHECK(msc_out[0] == 0.0f && msc_out[1] == 0.0f, "quant of empty rows: scales 0");
    /* sdpa with no keys: k/v[1, 1, 0, 8] NULL: o = 0 and lse = -inf */
    int64_t k0[4] = {1, 1, 0, 8}, k0s[4] = {0, 0, 0, 0};
    DLTensor qt = dlt(qa, f32, 4, qsh, NULL), kt = dlt(NULL, f32, 4, k0, k0s),
             vt = dlt(NULL, f32, 4, k0, k0s), ot = dlt(o[0], f32, 4, qsh, NULL),
             lt = dlt(lse[0], f32, 3, lsh, NULL);
    snprintf(what, sizeof what, "sdpa Sk = 0, k/v NULL data (\"%s\")", configs[cfg]);
    kite_attn_opts nc = kite_attn_opts_default();
    nc.causal = 0;
    expect(what, kite_sdpa(ctx, &qt, &kt, &vt, NULL, NULL, &nc, &ot, &lt), OK, NULL);
    CHECK(o[0][0] == 0.0f && o[0][47] == 0.0f && isinf(lse[0][0]) && lse[0][0] < 0,
          "sdpa with no keys: o = 0, lse = -inf");
  }
  kite_config_set(NULL);
}

/* Overlapping host ranges have no single meaning for a copy. */
static void test_memcpy_overlap(kite_ctx *ctx) {
  char buf[64] = {0};
  expect("memcpy overlapping ranges", kite_memcpy(ctx, buf + 8, buf, 16, KITE_COPY_HOST_TO_DEVICE),
         INV, "kite_memcpy");
  expect("memcpy the same range", kite_memcpy(ctx, buf, buf, 16, KITE_COPY_DEVICE_TO_DEVICE), INV,
         "kite_memcpy");
  expect("memcpy adjacent ranges", kite_memcpy(ctx, buf + 16, buf, 16, KITE_COPY_HOST_TO_DEVICE),
         OK, NULL);
}

/* ---- everything else in kite.h ----------------------------------------------------------- */
static void test_rope_cache(void) {
  static float buf[16 * 8];
  const char *who = "rope_cache_build";
  const kite_rope_scaling linear = {.type = KITE_ROPE_SCALING_LINEAR, .factor = 2.0};
  const kite_rope_scaling llama3 = {.type = KITE_ROPE_SCALING_LLAMA3,
                                    .factor = 8.0,
                                    .low_freq_factor = 1.0,
                                    .high_freq_factor = 4.0,
                                    .original_max_pos = 8192};
  kite_rope_scaling bad;
  expect("cache NULL", kite_rope_cache_build(NULL, 16, 8, 1e4, NULL), INV,
         "rope_cache_build: cos_sin");
  expect("cache max_pos 0", kite_rope_cache_build(buf, 0, 8, 1e4, NULL), INV,
         "rope_cache_build: max_pos");
  expect("cache max_pos -1", kite_rope_cache_build(buf, -1, 8, 1e4, NULL), INV, who);
  expect("cache rot_dim 7", kite_rope_cache_build(buf, 16, 7, 1e4, NULL), INV,
         "rope_cache_build: rot_dim");
  expect("cache rot_dim 0", kite_rope_cache_build(buf, 16, 0, 1e4, NULL), INV,
         "rope_cache_build: rot_dim");
  expect("cache rot_dim -2", kite_rope_cache_build(buf, 16, -2, 1e4, NULL), INV, who);
  expect("cache overflow", kite_rope_cache_build(buf, INT64_MAX / 2, 4, 1e4, NULL), INV, who);
  expect("cache theta 0", kite_rope_cache_build(buf, 16, 8, 0, NULL), INV,
         "rope_cache_build: theta");
  expect("cache theta -1", kite_rope_cache_build(buf, 16, 8, -1, NULL), INV,
         "rope_cache_build: theta");
  expect("cache theta NaN", kite_rope_cache_build(buf, 16, 8, NAN, NULL), INV,
         "rope_cache_build: theta");
  expect("cache theta inf", kite_rope_cache_build(buf, 16, 8, INFINITY, NULL), INV, who);
  bad = linear, bad.type = (kite_rope_scaling_type)9;
  expect("cache scaling type", kite_rope_cache_build(buf, 16, 8, 1e4, &bad), INV,
         "rope_cache_build: scaling");
  bad = linear, bad.factor = 0;
  expect("cache linear factor 0", kite_rope_cache_build(buf, 16, 8, 1e4, &bad), INV,
         "rope_cache_build: scaling");
  bad = linear, bad.factor = NAN;
  expect("cache linear factor NaN", kite_rope_cache_build(buf, 16, 8, 1e4, &bad), INV, who);
  bad = llama3, bad.high_freq_factor = 1.0;
  expect("cache llama3 low == high", kite_rope_cache_build(buf, 16, 8, 1e4, &bad), INV, who);
  bad = llama3, bad.low_freq_factor = 0;
  expect("cache llama3 low 0", kite_rope_cache_build(buf, 16, 8, 1e4, &bad), INV, who);
  bad = llama3, bad.original_max_pos = 0;
  expect("cache llama3 original_max_pos 0", kite_rope_cache_build(buf, 16, 8, 1e4, &bad), INV, who);
  bad = llama3, bad.factor = -8;
  expect("cache llama3 factor < 0", kite_rope_cache_build(buf, 16, 8, 1e4, &bad), INV, who);

  /* Valid builds, spot-checked: row p, pair i holds cos/sin(p * inv_freq[i]). */
  expect("cache plain", kite_rope_cache_build(buf, 16, 8, 1e4, NULL), OK, NULL);
  CHECK(buf[0] == 1.0f && buf[4] == 0.0f, "cache row 0 is cos 1, sin 0");
  CHECK(fabsf(buf[8] - (float)cos(1.0)) < 1e-6f && fabsf(buf[12] - (float)sin(1.0)) < 1e-6f,
        "cache row 1 pair 0 is cos(1), sin(1)");
  CHECK(fabsf(buf[5 * 8 + 1] - (float)cos(5.0 * pow(1e4, -0.25))) < 1e-6f, "cache row 5 pair 1");
  expect("cache linear", kite_rope_cache_build(buf, 16, 8, 1e4, &linear), OK, NULL);
  CHECK(fabsf(buf[8] - (float)cos(0.5)) < 1e-6f, "linear factor 2 halves the angle");
  expect("cache llama3", kite_rope_cache_build(buf, 16, 8, 5e5, &llama3), OK, NULL);
  CHECK(fabsf(buf[8] - (float)cos(1.0)) < 1e-6f, "llama3 keeps the highest frequency");
  /* pair 3 of rot_dim 8: inv = 5e5^-0.75 ~ 5.3e-5, wavelength ~ 1.2e5 > 8192: divided by 8 */
  CHECK(fabsf(buf[15 * 8 + 3] - (float)cos(15.0 * pow(5e5, -0.75) / 8.0)) < 1e-6f,
        "llama3 divides low frequencies by factor");

  /* yarn (DeepSeek-V3's values over rot_dim 64): every bad field, then the attention factor */
  const kite_rope_scaling yarn = {.type = KITE_ROPE_SCALING_YARN,
                                  .factor = 40.0,
                                  .original_max_pos = 4096,
                                  .beta_fast = 32.0,
                                  .beta_slow = 1.0,
                                  .mscale = 1.0,
                                  .mscale_all_dim = 1.0};
  double freq[32], att = 0.0;
  const char *inv_who = "rope_inv_freq";
  bad = yarn, bad.original_max_pos = 0;
  expect("yarn original_max_pos 0", kite_rope_inv_freq(freq, 64, 1e4, &bad, &att), INV, inv_who);
  bad = yarn, bad.beta_fast = 0.5;
  expect("yarn beta_fast < beta_slow", kite_rope_inv_freq(freq, 64, 1e4, &bad, &att), INV,
         "rope_inv_freq: scaling");
  bad = yarn, bad.beta_slow = -1.0;
  expect("yarn beta_slow < 0", kite_rope_inv_freq(freq, 64, 1e4, &bad, &att), INV, inv_who);
  bad = yarn, bad.mscale = NAN;
  expect("yarn mscale NaN", kite_rope_inv_freq(freq, 64, 1e4, &bad, &att), INV, inv_who);
  bad = yarn, bad.attention_factor = -1.0;
  expect("yarn attention_factor < 0", kite_rope_inv_freq(freq, 64, 1e4, &bad, &att), INV, inv_who);
  bad = yarn, bad.factor = 0.0;
  expect("yarn factor 0", kite_rope_cache_build(buf, 16, 8, 1e4, &bad), INV, who);
  expect("inv_freq NULL", kite_rope_inv_freq(NULL, 64, 1e4, &yarn, &att), INV,
         "rope_inv_freq: inv_freq");
  expect("inv_freq rot_dim 3", kite_rope_inv_freq(freq, 3, 1e4, &yarn, &att), INV,
         "rope_inv_freq: rot_dim");
  expect("yarn", kite_rope_inv_freq(freq, 64, 1e4, &yarn, &att), OK, NULL);
  CHECK(att == 1.0, "yarn with mscale == mscale_all_dim has attention factor 1");
  CHECK(freq[0] == 1.0, "yarn keeps the highest frequency");
  CHECK(fabs(freq[31] - pow(1e4, -62.0 / 64.0) / 40.0) < 1e-18,
        "yarn divides the lowest by factor");
  bad = yarn, bad.mscale = 0.0;
  expect("yarn no mscale", kite_rope_inv_freq(freq, 64, 1e4, &bad, &att), OK, NULL);
  CHECK(fabs(att - (0.1 * log(40.0) + 1.0)) < 1e-15, "yarn attention factor 0.1 ln(factor) + 1");
  CHECK(kite_rope_yarn_mscale(0.5, 1.0) == 1.0, "yarn mscale is 1 for factor <= 1");
}

static void test_ctx_and_memory(kite_ctx *ctx) {
  kite_ctx *c2 = NULL;
  kite_ctx_params p = kite_ctx_params_default();
  CHECK(p.device.device_type == kDLCPU && p.device.device_id == 0, "default params: cpu:0");
  expect("ctx_create out NULL", kite_ctx_create(NULL, NULL), INV, "kite_ctx_create");
  p.num_threads = -1;
  expect("ctx_create threads -1", kite_ctx_create(&p, &c2), INV, "kite_ctx_create");
  CHECK(c2 == NULL, "ctx_create leaves *out NULL on failure");
  p = kite_ctx_params_default(), p.device.device_id = -1;
  expect("ctx_create device_id -1", kite_ctx_create(&p, &c2), INV, "kite_ctx_create");
  p = kite_ctx_params_default(), p.device.device_id = 7;
  expect("ctx_create cpu:7", kite_ctx_create(&p, &c2), UNS, "kite_ctx_create");
  p = kite_ctx_params_default(), p.device.device_type = kDLMetal;
  expect("ctx_create metal", kite_ctx_create(&p, &c2), UNS, "kite_ctx_create");
  p = kite_ctx_params_default(), p.device.device_type = (DLDeviceType)999;
  expect("ctx_create device 999", kite_ctx_create(&p, &c2), UNS, "kite_ctx_create");
  kite_ctx_destroy(NULL);
  expect("ctx_synchronize NULL", kite_ctx_synchronize(NULL), INV, "kite_ctx_synchronize");
  expect("ctx_synchronize", kite_ctx_synchronize(ctx), OK, NULL);

  void *mem = NULL;
  char host[16] = {0};
  expect("malloc ctx NULL", kite_malloc(NULL, 16, &mem), INV, "kite_malloc");
  expect("malloc out NULL", kite_malloc(ctx, 16, NULL), INV, "kite_malloc");
  expect("malloc SIZE_MAX", kite_malloc(ctx, SIZE_MAX, &mem), INV, "kite_malloc");
  expect("malloc 2^50", kite_malloc(ctx, (size_t)1 << 50, &mem), KITE_ERR_OUT_OF_MEMORY, NULL);
  CHECK(mem == NULL, "failed malloc leaves *out NULL");
  expect("free ctx NULL", kite_free(NULL, host), INV, "kite_free");
  expect("malloc 16", kite_malloc(ctx, 16, &mem), OK, NULL);
  expect("memcpy ctx NULL", kite_memcpy(NULL, mem, host, 16, KITE_COPY_HOST_TO_DEVICE), INV,
         "kite_memcpy");
  expect("memcpy dst NULL", kite_memcpy(ctx, NULL, host, 16, KITE_COPY_HOST_TO_DEVICE), INV,
         "kite_memcpy");
  expect("memcpy src NULL", kite_memcpy(ctx, mem, NULL, 16, KITE_COPY_HOST_TO_DEVICE), INV,
         "kite_memcpy");
  expect("memcpy kind 42", kite_memcpy(ctx, mem, host, 16, (kite_copy_kind)42), INV, "kite_memcpy");
  expect("memcpy", kite_memcpy(ctx, mem, host, 16, KITE_COPY_HOST_TO_DEVICE), OK, NULL);
  expect("free", kite_free(ctx, mem), OK, NULL);
}

static void test_config(kite_ctx *ctx) {
  static const char *const bad[] = {"nosuchop=ref", "rms_norm=",     "=ref",         "-", "+",
                                    "rms_norm",     "-nosuchop:ref", "rms_norm==ref"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char what[64];
    snprintf(what, sizeof what, "config_set \"%s\"", bad[i]);
    expect(what, kite_config_set(bad[i]), KITE_ERR_CONFIG, "config");
  }
  CHECK(kite_config_get() != NULL, "config_get is never NULL");

  /* A pin to a kernel that does not exist fails at call time, naming the op: no substitute. */
  expect("config_set pin", kite_config_set("softmax=nosuch.variant"), OK, NULL);
  call c;
  if (!setup(&c, (size_t)kite_fn_find("softmax"), ctx)) return;
  expect("softmax pinned to a missing kernel", op_call_run(ctx, &c.oc), UNS, "softmax");
  expect("config reset", kite_config_set(NULL), OK, NULL);
  expect("softmax after reset", op_call_run(ctx, &c.oc), OK, NULL);
  op_call_free(&c.oc);
}

static void test_registry(void) {
  kite_kernel_info k;
  kite_backend_info b;
  const char *path = NULL, *reason = NULL;
  expect("kernel_get past the end", kite_kernel_get(kite_kernel_count(), &k), INV,
         "kite_kernel_get");
  expect("kernel_get out NULL", kite_kernel_get(0, NULL), INV, "kite_kernel_get");
  expect("kernel_get SIZE_MAX", kite_kernel_get(SIZE_MAX, &k), INV, "kite_kernel_get");
  expect("kernel_get 0", kite_kernel_get(0, &k), OK, NULL);
  expect("backend_get past the end", kite_backend_get(kite_backend_count(), &b), INV,
         "kite_backend_get");
  expect("backend_get out NULL", kite_backend_get(0, NULL), INV, "kite_backend_get");
  expect("backend_get 0", kite_backend_get(0, &b), OK, NULL);
  expect("plugin_failure_get past the end",
         kite_plugin_failure_get(kite_plugin_failure_count(), &path, &reason), INV,
         "kite_plugin_failure_get");
  expect("plugin_failure_get NULL outs", kite_plugin_failure_get(0, NULL, NULL), INV,
         "kite_plugin_failure_get");
  expect("backend_load NULL", kite_backend_load(NULL), INV, "kite_backend_load");
  expect("backend_load \"\"", kite_backend_load(""), INV, "kite_backend_load");
  expect("backend_load missing", kite_backend_load("/nonexistent/libkite-x.so"), KITE_ERR_PLUGIN,
         "/nonexistent/libkite-x.so");
  expect("backend_load /dev/null", kite_backend_load("/dev/null"), KITE_ERR_PLUGIN, "/dev/null");
  expect("backend_load a directory", kite_backend_load("/"), KITE_ERR_PLUGIN, "plugin");

  CHECK(kite_op_from_name(NULL) == -1, "op_from_name(NULL) is -1");
  CHECK(kite_op_from_name("") == -1, "op_from_name(\"\") is -1");
  CHECK(kite_op_from_name("rms_norm ") == -1, "op_from_name(\"rms_norm \") is -1");
  CHECK(kite_op_from_name("nosuch") == -1, "op_from_name(\"nosuch\") is -1");
  CHECK(kite_op_from_name("rms_norm") == KITE_OP_RMS_NORM, "op_from_name(\"rms_norm\")");
  CHECK(kite_op_name((kite_op)-1) == NULL, "op_name(-1) is NULL");
  CHECK(kite_op_name(KITE_OP_COUNT) == NULL, "op_name(COUNT) is NULL");
  CHECK(kite_status_name((kite_status)99) != NULL, "status_name(99) is not NULL");
  CHECK(kite_device_name((DLDeviceType)999) != NULL, "device_name(999) is not NULL");
}

int main(int argc, char **argv) {
  kite_ctx *ctx = NULL;
  g_verbose = argc > 1 && !strcmp(argv[1], "-v");
  setvbuf(stdout, NULL, _IOLBF, 0); /* what ran before a crash stays visible */
  if (kite_ctx_create(NULL, &ctx) != KITE_OK || kite_comm_create_all(&ctx, 1, &g_comm) != OK) {
    printf("cannot create a CPU ctx and its comm: %s\n", kite_last_error());
    return 1;
  }
  test_sweep(ctx);
  test_ops(ctx);
  test_views(ctx);
  test_strides_that_address_nothing(ctx);
  test_memcpy_overlap(ctx);
  test_rope_cache();
  test_ctx_and_memory(ctx);
  test_config(ctx);
  test_registry();
  kite_comm_destroy(g_comm);
  kite_ctx_destroy(ctx);
  return check_summary();
}
