/*
 * The boxed op table: kite_fn_get / kite_fn_find / kite_fn_call, generated from kite/ops.def.
 * Functions 0 .. KITE_OP_COUNT - 1 are the ops' own functions in op order (the KITE_OP rows),
 * then the further functions (KITE_FN rows), so that function i of an op id i is that op's.
 */
#include <stdint.h>
#include <string.h>

#include "core/internal.h"

/* ---- argument lists ------------------------------------------------------------------------ */
#define KITE_T(kind, name, spec)                                                                   \
  { KITE_ARG_##kind, #name, spec }
#define KITE_S(kind, name, value)                                                                  \
  { KITE_ARG_##kind, #name, value }
#define KITE_OP(ID, name, family, call, ...)                                                       \
  static const kite_arg_info g_args_##name[] = {__VA_ARGS__};
#define KITE_FN(name, ID, family, call, ...)                                                       \
  static const kite_arg_info g_args_##name[] = {__VA_ARGS__};
#include "kite/ops.def"
#undef KITE_OP
#undef KITE_FN

/* ---- calls: one function per row, unboxing a[] as the row's call says ----------------------- */
#define T(n) (a[n].t)
#define F(n) ((float)a[n].f)
#define I(n) (a[n].i)
#define U(n) (a[n].u)
#define C(n) (a[n].comm)
#define OPTS(n)                                                                                    \
  (&(kite_attn_opts){.scale = F(n),                                                                \
                     .softcap = F((n) + 1),                                                        \
                     .window_left = (int32_t)I((n) + 2),                                           \
                     .gqa = (kite_gqa_layout)I((n) + 3),                                           \
                     .causal = (int32_t)I((n) + 4)})
#define CE_OPTS(n)                                                                                 \
  ((kite_ce_opts){.ignore_index = (int32_t)I(n),                                                   \
                  .label_smoothing = F((n) + 1),                                                   \
                  .z_loss = F((n) + 2),                                                            \
                  .softcap = F((n) + 3),                                                           \
                  .reduction = (kite_reduction)I((n) + 4)})
#define CE(n) (&CE_OPTS(n))
#define FLCE(n) (&(kite_flce_opts){.ce = CE_OPTS(n), .chunk_bytes = (size_t)U((n) + 5)})
#define SAMPLING(n)                                                                                \
  (&(kite_sampling_params){.temperature = T(n),                                                    \
                           .top_k = T((n) + 1),                                                    \
                           .top_p = T((n) + 2),                                                    \
                           .min_p = T((n) + 3),                                                    \
                           .seeds = T((n) + 4),                                                    \
                           .steps = T((n) + 5),                                                    \
                           .seed = U((n) + 6),                                                     \
                           .step = U((n) + 7)})

#define KITE_OP(ID, name, family, call, ...)                                                       \
  static kite_status g_call_##name(kite_ctx *c, const kite_value *a) {                             \
    return call;                                                                                   \
  }
#define KITE_FN(name, ID, family, call, ...) KITE_OP(ID, name, family, call, __VA_ARGS__)
#include "kite/ops.def"
#undef KITE_OP
#undef KITE_FN

/* ---- the table ----------------------------------------------------------------------------- */
typedef struct fn_row {
  kite_fn_info info;
  kite_status (*call)(kite_ctx *, const kite_value *);
} fn_row;

#define ROW(name, ID, family)                                                                      \
  {{#name, KITE_OP_##ID, #family, sizeof g_args_##name / sizeof g_args_##name[0], g_args_##name},  \
   g_call_##name},
static const fn_row g_fns[] = {
#define KITE_OP(ID, name, family, ...) ROW(name, ID, family)
#define KITE_FN(...)
#include "kite/ops.def"
#undef KITE_OP
#undef KITE_FN
#define KITE_OP(...)
#define KITE_FN(name, ID, family, ...) ROW(name, ID, family)
#include "kite/ops.def"
#undef KITE_OP
#undef KITE_FN
};
#define NUM_FNS (sizeof g_fns / sizeof g_fns[0])

/* One KITE_OP row per op id, in id order: the enum and this table come from the same rows. */
_Static_assert(NUM_FNS >= KITE_OP_COUNT, "every op has its function");

size_t kite_fn_count(void) {
  return NUM_FNS;
}

const kite_fn_info *kite_fn_get(size_t i) {
  return i < NUM_FNS ? &g_fns[i].info : NULL;
}

int kite_fn_find(const char *name) {
  if (!name) return -1;
  for (size_t i = 0; i < NUM_FNS; i++)
    if (strcmp(g_fns[i].info.name, name) == 0) return (int)i;
  return -1;
}

kite_status kite_fn_call(kite_ctx *ctx, size_t fn, const kite_value *args, size_t nargs) {
  kite_clear_error();
  if (fn >= NUM_FNS)
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_fn_call: no function %zu (there are %zu)", fn,
                          (size_t)NUM_FNS);
  const fn_row *r = &g_fns[fn];
  if (nargs != r->info.nargs || (nargs && !args))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %zu arguments given, %zu expected",
                          r->info.name, args ? nargs : 0, r->info.nargs);
  for (size_t i = 0; i < nargs; i++)
    if (r->info.args[i].kind == KITE_ARG_INT && (args[i].i < INT32_MIN || args[i].i > INT32_MAX))
      return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s = %lld is outside the range of int32",
                            r->info.name, r->info.args[i].name, (long long)args[i].i);
  return r->call(ctx, args);
}
