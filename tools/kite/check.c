/*
 * kite check: the conformance harness. Every registered kernel that runs here, on its device,
 * against `ref` over generated cases, through the public op functions. The unit of pass/fail is
 * one (kernel, case).
 *
 * For each case: inputs are generated once from the seed; the case runs pinned to ref on a CPU
 * ctx (the reference result), then pinned to each kernel under test on its device. After each
 * run every byte the op may not write (guards, gaps between strided rows, inputs) must be
 * unchanged, no output element may be NaN (outputs start poisoned with NaN), and per output
 * tensor NMSE = sum((a - b)^2) / sum(b^2) against ref must be under the op/dtype bound.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "families.h"
#include "kite/dtype.h"
#include "util.h"

/* When sum(ref^2) == 0 the output must be zero too, up to this sum of squares. */
#define ZERO_SUM_BOUND 1e-20

/* ---- judging one run --------------------------------------------------------------------- */

enum { PASS, FAIL, SKIP };

typedef struct outcome {
  int verdict;
  double nmse, maxabs;
  char reason[300];
} outcome;

/* Host images of one case: what was uploaded, what came back, which bytes may change. */
typedef struct images {
  unsigned char *before[KT_MAX_BUFS], *after[KT_MAX_BUFS], *roles[KT_MAX_BUFS];
  double *ref[KT_MAX_VIEWS]; /* ref's values of each output view */
} images;

static void images_free(images *im) {
  for (int b = 0; b < KT_MAX_BUFS; b++) free(im->before[b]), free(im->after[b]), free(im->roles[b]);
  for (int v = 0; v < KT_MAX_VIEWS; v++) free(im->ref[v]);
  memset(im, 0, sizeof *im);
}

static int images_init(images *im, const kt_run *r, uint64_t seed) {
  memset(im, 0, sizeof *im);
  for (int b = 0; b < r->nbufs; b++) {
    size_t n = kt_buf_bytes(r, b);
    im->before[b] = malloc(n), im->after[b] = malloc(n), im->roles[b] = malloc(n);
    if (!im->before[b] || !im->after[b] || !im->roles[b]) return 1;
    kt_byte_roles(r, b, im->roles[b]);
  }
  for (int v = 0; v < r->nviews; v++) {
    if (r->view[v].role == KT_IN) continue;
    im->ref[v] = malloc((size_t)kt_view_numel(&r->view[v]) * sizeof(double) + 1);
    if (!im->ref[v]) return 1;
  }
  kt_fill(r, seed, im->before);
  return 0;
}

/* Marks o failed; the first reason found is the one reported. */
__attribute__((format(printf, 2, 3))) static void fail(outcome *o, const char *fmt, ...) {
  if (o->verdict == FAIL) return;
  o->verdict = FAIL;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(o->reason, sizeof o->reason, fmt, ap);
  va_end(ap);
}

/* The first byte that changed although the op may not write it. */
static void check_untouched(const kt_run *r, const images *im, outcome *o) {
  for (int b = 0; b < r->nbufs; b++) {
    size_t n = kt_buf_bytes(r, b), body = n - 2 * KT_GUARD;
    const unsigned char *pre = im->before[b], *post = im->after[b], *role = im->roles[b];
    for (size_t i = 0; i < n; i++) {
      if (role[i] == 2 || pre[i] == post[i]) continue;
      const char *name = r->buf[b].name;
      if (i < KT_GUARD)
        fail(o, "canary overwritten %zu bytes before %s", KT_GUARD - i, name);
      else if (i >= KT_GUARD + body)
        fail(o, "canary overwritten at byte %zu past the end of %s", i - KT_GUARD - body, name);
      else if (role[i] == 0)
        fail(o, "canary overwritten at byte %zu of %s (a gap between rows)", i - KT_GUARD, name);
      else
        fail(o, "input %s modified at byte %zu", name, i - KT_GUARD);
      return;
    }
  }
}

/* Element n (logical order) of output view v, from the downloaded image. */
static double out_value(const images *im, const kt_view *v, int64_t n) {
  return kt_load(v->dtype, im->after[v->buf] + KT_GUARD, kt_view_at(v, n));
}

/* Judges the downloaded run: canaries and inputs, NaN, then NMSE and max-abs error per output
 * tensor against ref (the worst tensor is reported). With is_ref the values become the
 * reference (im->ref) instead. Where ref is infinite (lse of a row that sees no key) the output
 * must equal it; where ref is NaN (quantizing a NaN) the output must be NaN too; such elements
 * stay out of the sums. */
static void judge(const kt_run *r, images *im, int is_ref, double bound, outcome *o) {
  o->verdict = PASS;
  o->nmse = o->maxabs = 0;
  check_untouched(r, im, o);
  for (int vi = 0; vi < r->nviews; vi++) {
    const kt_view *v = &r->view[vi];
    if (v->role == KT_IN) continue;
    int64_t n = kt_view_numel(v), nan_at = -1, special_at = -1;
    double sd = 0, sb = 0, sa = 0, maxabs = 0;
    for (int64_t i = 0; i < n; i++) {
      double a = out_value(im, v, i);
      if (is_ref) {
        if (isnan(a) && !v->nan_ok && nan_at < 0) nan_at = i;
        im->ref[vi][i] = a;
        continue;
      }
      double b = im->ref[vi][i];
      if (isnan(b) || isinf(b)) {
        int same = isnan(b) ? isnan(a) : a == b;
        if (!same && special_at < 0) special_at = i;
        continue;
      }
      if (isnan(a) && nan_at < 0) nan_at = i;
      double d = a - b;
      sd += d * d, sb += b * b, sa += a * a;
      if (!(fabs(d) <= maxabs)) maxabs = fabs(d); /* NaN sticks */
    }
    if (nan_at >= 0)
      fail(o, "NaN at index %lld of %s%s", (long long)nan_at, v->name,
           is_ref ? " (in the reference itself)" : "");
    if (is_ref) continue;
    if (special_at >= 0)
      fail(o, "%s[%lld] is %g where ref has %g", v->name, (long long)special_at,
           out_value(im, v, special_at), im->ref[vi][special_at]);
    /* a reference of all zeros needs an output of all zeros */
    double nmse = sb > 0 ? sd / sb : sa;
    if (!(maxabs <= o->maxabs)) o->maxabs = maxabs;
    if (!(nmse <= o->nmse)) o->nmse = nmse;
    if (sb > 0 && !(nmse <= bound))
      fail(o, "NMSE %.2e above bound %.0e in %s", nmse, bound, v->name);
    if (sb == 0 && !(sa <= ZERO_SUM_BOUND))
      fail(o, "%s should be all zeros (sum of squares %.2e)", v->name, sa);
  }
}

/* ---- one kernel on one case -------------------------------------------------------------- */

/* Uploads the case's inputs to ctx, pins op to k, calls, downloads. Returns the call's status
 * (a memory error is reported as such); msg gets kite_last_error() of a failed call. */
static kite_status run_pinned(kt_run *r, images *im, kite_ctx *ctx, const kt_kernel *k, char *msg,
                              size_t n) {
  msg[0] = '\0';
  kite_status s = kt_alloc(r, ctx);
  if (s == KITE_OK) s = kt_upload(r, im->before);
  if (s != KITE_OK) {
    snprintf(msg, n, "device memory: %s: %s", kite_status_name(s), kite_last_error());
    kt_release(r);
    return KITE_ERR_INTERNAL;
  }
  s = kt_pin(r->c.op, k);
  if (s != KITE_OK) {
    snprintf(msg, n, "cannot pin %s: %s", k->name, kite_last_error());
    kt_release(r);
    return KITE_ERR_INTERNAL;
  }
  s = kt_call(r);
  if (s != KITE_OK) snprintf(msg, n, "%s", kite_last_error());
  kite_status d = kt_download(r, im->after);
  if (s == KITE_OK && d != KITE_OK) {
    snprintf(msg, n, "device memory: %s: %s", kite_status_name(d), kite_last_error());
    s = KITE_ERR_INTERNAL;
  }
  kt_release(r);
  return s;
}

/* ---- the harness ------------------------------------------------------------------------- */

typedef struct kstat {
  int pass, fail, skip, tested;
  int oracle;                       /* ref's own runs of a case: the reference, not a comparison */
  double worst_ratio, worst_maxabs; /* worst NMSE / bound and max-abs over its cases */
} kstat;

typedef struct harness {
  const kt_opts *o;
  kt_registry reg;
  kt_devices dev;
  kstat *st; /* per registry entry */
  int passed, failed, skipped;
  int oracle; /* cases ref ran as the reference while ref was among the kernels asked for */
} harness;

static void report(harness *h, const kt_kernel *k, const kt_case *c, const outcome *o) {
  kstat *st = &h->st[k->index];
  st->tested = 1;
  if (o->verdict == PASS) st->pass++, h->passed++;
  if (o->verdict == FAIL) st->fail++, h->failed++;
  if (o->verdict == SKIP) st->skip++, h->skipped++;
  if (o->verdict != SKIP) {
    double bound = kt_case_bound(c); /* 0: exact (quant codes) */
    double ratio = bound > 0 ? o->nmse / bound : o->nmse > 0 ? INFINITY : 0;
    if (!(ratio <= st->worst_ratio)) st->worst_ratio = ratio;
    if (!(o->maxabs <= st->worst_maxabs)) st->worst_maxabs = o->maxabs;
  }
  if (o->verdict == PASS && !h->o->verbose) return;
  if (o->verdict == SKIP && !h->o->verbose) return;
  char desc[200];
  const char *tag = o->verdict == PASS ? "ok  " : o->verdict == FAIL ? "FAIL" : "skip";
  printf("%s %-18s %-20s %-4s %-4s [%s]", tag, kite_op_name(c->op), k->name,
         kite_device_name(k->device), kite_dtype_name(c->dtype), kt_case_str(c, desc, sizeof desc));
  if (o->verdict != SKIP)
    printf(" nmse=%.2e maxabs=%.2e", isnan(o->nmse) ? NAN : o->nmse,
           isnan(o->maxabs) ? NAN : o->maxabs); /* "nan", never "-nan" */
  if (o->verdict != PASS) printf(": %s", o->reason);
  printf("\n");
  fflush(stdout);
}

static void check_case(harness *h, const kt_case *c, uint64_t seed, const kt_kernel *ref,
                       const kt_kernel **tested, int ntested) {
  kt_run r;
  images im;
  outcome o, ref_o;
  char msg[256];
  memset(&im, 0, sizeof im);
  if (kt_plan(&r, c) || images_init(&im, &r, seed)) {
    memset(&ref_o, 0, sizeof ref_o);
    ref_o.verdict = FAIL;
    snprintf(ref_o.reason, sizeof ref_o.reason, "the harness could not build this case (%s)",
             r.bad ? "bad plan" : "out of host memory");
    report(h, ref, c, &ref_o);
    images_free(&im);
    return;
  }
  double bound = kt_case_bound(c);

  /* the reference run; ref must never skip */
  memset(&ref_o, 0, sizeof ref_o);
  kite_status s = run_pinned(&r, &im, kt_devices_ctx(&h->dev, kDLCPU), ref, msg, sizeof msg);
  if (s != KITE_OK) {
    ref_o.verdict = FAIL;
    snprintf(ref_o.reason, sizeof ref_o.reason, "%s: %s", kite_status_name(s), msg);
  } else {
    judge(&r, &im, 1, bound, &ref_o);
  }
  int ref_tested = 0;
  for (int i = 0; i < ntested; i++) ref_tested |= tested[i] == ref;
  /* ref against itself proves nothing: its runs are counted apart, never as passes (ref is
   * checked by finite differences below and against PyTorch in the Python suite) */
  if (ref_o.verdict != PASS)
    report(h, ref, c, &ref_o);
  else if (ref_tested)
    h->st[ref->index].tested = 1, h->st[ref->index].oracle++, h->oracle++;

  for (int i = 0; i < ntested; i++) {
    const kt_kernel *k = tested[i];
    if (k == ref) continue;
    memset(&o, 0, sizeof o);
    kite_ctx *ctx = kt_devices_ctx(&h->dev, k->device);
    if (ref_o.verdict != PASS) {
      o.verdict = SKIP;
      snprintf(o.reason, sizeof o.reason, "no reference result (ref failed)");
    } else if (!ctx) {
      o.verdict = SKIP;
      snprintf(o.reason, sizeof o.reason, "no ctx on %s", kite_device_name(k->device));
    } else {
      s = run_pinned(&r, &im, ctx, k, msg, sizeof msg);
      if (s == KITE_ERR_UNSUPPORTED) {
        o.verdict = SKIP;
        snprintf(o.reason, sizeof o.reason, "%s", msg);
      } else if (s != KITE_OK) {
        o.verdict = FAIL;
        snprintf(o.reason, sizeof o.reason, "%s: %s", kite_status_name(s), msg);
      } else {
        judge(&r, &im, 0, bound, &o);
      }
    }
    report(h, k, c, &o);
  }
  images_free(&im);
}

static void print_summary(const harness *h) {
  printf("\n%-18s %-22s %-6s %7s %7s %8s %12s %10s\n", "op", "kernel", "device", "passed", "failed",
         "skipped", "nmse/bound", "max-abs");
  /* the worst over the kernel's cases: NMSE as a fraction of its bound, and max-abs error */
  for (int op = 0; op < KITE_OP_COUNT; op++)
    for (size_t i = 0; i < h->reg.n; i++) {
      const kstat *st = &h->st[i];
      const kt_kernel *k = &h->reg.k[i];
      if (!st->tested || (int)k->op != op) continue;
      if (!st->pass && !st->fail && !st->skip && st->oracle)
        printf("%-18s %-22s %-6s %7s %7s %8s   the reference of %d cases\n", k->op_name, k->name,
               kite_device_name(k->device), "-", "-", "-", st->oracle);
      else
        printf("%-18s %-22s %-6s %7d %7d %8d %12.1e %10.1e%s\n", k->op_name, k->name,
               kite_device_name(k->device), st->pass, st->fail, st->skip, st->worst_ratio,
               st->worst_maxabs, st->fail ? "  FAILED" : "");
    }
}

static int run_harness(const kt_opts *o, int brief) {
  harness h;
  memset(&h, 0, sizeof h);
  h.o = o;
  uint64_t seed = o->has_seed ? o->seed : (uint64_t)time(NULL);
  printf("kite check: seed %llu%s\n", (unsigned long long)seed, o->quick ? " (quick)" : "");
  fflush(stdout);

  /* kernel-info strings die with the next config change: keep the user's config and a copy */
  size_t cfg_len = strlen(kite_config_get());
  char *saved_cfg = malloc(cfg_len + 1);
  if (!saved_cfg || kt_registry_load(&h.reg) || kt_devices_open(&h.dev, o->threads)) {
    fprintf(stderr, "kite check: cannot start: %s\n", kite_last_error());
    free(saved_cfg);
    return 2;
  }
  memcpy(saved_cfg, kite_config_get(), cfg_len + 1);
  if (o->backend && !kt_backend_known(&h.reg, o->backend)) {
    fprintf(stderr, "kite check: no kernel of backend '%s' is registered (see kite list)\n",
            o->backend);
    kt_registry_free(&h.reg);
    kt_devices_close(&h.dev);
    free(saved_cfg);
    return 2;
  }
  h.st = calloc(h.reg.n + 1, sizeof *h.st);
  const kt_kernel **tested = calloc(h.reg.n + 1, sizeof *tested);
  double t0 = kt_now();
  int not_here = 0, unchecked = 0;

  for (int op = 0; op < KITE_OP_COUNT && h.st && tested; op++) {
    int ntested = 0;
    for (size_t i = 0; i < h.reg.n; i++) {
      const kt_kernel *k = &h.reg.k[i];
      if ((int)k->op != op || !kt_kernel_selected(k, o)) continue;
      if (k->runs_here)
        tested[ntested++] = k;
      else
        not_here++;
    }
    if (ntested == 0) continue;
    const kt_family_ops *fam = kt_family((kite_op)op);
    if (!fam) {
      /* an op of the op table without a case driver is half added: a failure, not a note */
      unchecked += ntested;
      h.failed++;
      printf("FAIL %s: no case driver in the harness: %d kernel%s not checked\n",
             kite_op_name((kite_op)op), ntested, ntested == 1 ? "" : "s");
      continue;
    }
    const kt_kernel *ref = kt_ref_kernel(&h.reg, (kite_op)op);
    if (!ref) {
      /* nothing to compare with: every kernel of the op fails once */
      outcome no_ref = {FAIL, 0, 0, "no ref kernel runs here to compare with"};
      kt_case c = kt_case_default((kite_op)op, KITE_DTYPE_F32, 0, 0);
      for (int i = 0; i < ntested; i++) report(&h, tested[i], &c, &no_ref);
      continue;
    }
    static const kite_dtype dtypes[] = {KITE_DTYPE_F32, KITE_DTYPE_F16, KITE_DTYPE_BF16};
    kt_case_list cases = {0};
    for (int d = 0; d < 3; d++)
      if (o->dtype < 0 || (int)dtypes[d] == o->dtype)
        fam->check_cases((kite_op)op, dtypes[d], o->quick, &cases);
    for (int i = 0; i < cases.n; i++)
      check_case(&h, &cases.c[i], kt_hash(seed, (uint64_t)op << 32 | (uint64_t)i), ref, tested,
                 ntested);
    kt_case_list_free(&cases);
  }
  /* the oracle itself: ref's backward ops against finite differences of its forward ops */
  const int fd_op = o->op < 0 || kt_fd_covers((kite_op)o->op);
  if (h.st && fd_op && (!o->backend || strncmp(o->backend, "ref", 3) == 0) &&
      (o->dtype < 0 || o->dtype == KITE_DTYPE_F32))
    kt_fd_check(kt_devices_ctx(&h.dev, kDLCPU), o->verbose, o->op, &h.passed, &h.failed);
  kite_config_set(saved_cfg);
  int ran = h.passed + h.failed + h.skipped + h.oracle;
  if (o->backend && ran == 0) {
    /* asked for by name and nothing of it ran: no device, missing CPU features or libraries */
    fprintf(stderr,
            "kite check: no kernel of '%s' runs here%s (kite list says why); nothing was checked\n",
            o->backend, not_here ? "" : " for the ops asked for");
    h.failed++;
  }

  if (!brief) {
    print_summary(&h);
    if (not_here)
      printf("%d selected kernel%s cannot run here (see kite list).\n", not_here,
             not_here == 1 ? "" : "s");
    if (unchecked)
      printf("%d kernel%s of ops without a case driver were not checked (failed).\n", unchecked,
             unchecked == 1 ? "" : "s");
    if (h.oracle) printf("ref ran %d cases as the reference (not counted as passes).\n", h.oracle);
    printf("kite check: %.1f s\n", kt_now() - t0);
  } else if (unchecked) {
    printf("(%d kernels of ops without a case driver were not checked: failed)\n", unchecked);
  }
  printf("%d passed, %d failed", h.passed, h.failed);
  if (h.skipped) printf(", %d skipped", h.skipped);
  printf("\n");
  int failed = h.failed || !h.st || !tested;
  free(tested);
  free(h.st);
  free(saved_cfg);
  kt_registry_free(&h.reg);
  kt_devices_close(&h.dev);
  return failed ? 1 : 0;
}

int kt_check_quick(void) {
  kt_opts o;
  memset(&o, 0, sizeof o);
  o.op = -1;
  o.dtype = -1;
  o.quick = 1;
  return run_harness(&o, 1);
}

static void usage(void) {
  printf("usage: kite check [--op NAME] [--backend NAME] [--dtype T] [--seed N] [--quick]\n"
         "                  [--verbose] [--threads N]\n"
         "\n"
         "Runs every registered kernel that runs here against the ref backend over generated\n"
         "cases (dtypes f32/f16/bf16; 0, 1 and many rows; odd and power-of-two widths; strided\n"
         "views; in place; every option of the op), through the public op functions, each kernel\n"
         "pinned with kite_config_set(\"<op>=<backend>.<variant>\") on its own device.\n"
         "A (kernel, case) fails when a canary byte or an input changed, an output is NaN, or\n"
         "NMSE = sum((a-b)^2)/sum(b^2) against ref is above the op/dtype bound. A kernel that\n"
         "rejects a case (KITE_ERR_UNSUPPORTED) is skipped for it.\n"
         "\n"
         "  --op NAME        only this op (kite list shows the names)\n"
         "  --backend NAME   only this backend (\"cpu\") or kernel (\"cpu.avx2\")\n"
         "  --dtype T        only f32, f16 or bf16 cases\n"
         "  --seed N         input seed (default: the time; printed first)\n"
         "  --quick          a reduced case set (seconds)\n"
         "  --verbose        one line per (kernel, case), not only failures\n"
         "  --threads N      CPU threads per ctx (default: all cores)\n"
         "\n"
         "Last line: \"N passed, M failed[, K skipped]\"; exit code 1 when M > 0.\n");
}

int kt_cmd_check(int argc, char **argv) {
  kt_opts o;
  int rc =
      kt_parse_opts(argc, argv, "--op --backend --dtype --seed --quick --verbose --threads", &o);
  if (rc) return rc;
  if (o.help) {
    usage();
    return 0;
  }
  return run_harness(&o, 0);
}
