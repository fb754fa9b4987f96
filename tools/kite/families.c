/*
 * The family table: each family answers "is this op mine?" (has), and the case-level entry
 * points run a case through its family. The call itself goes through the op table: kt_call
 * boxes the case's views and the family's scalars in the order of the function's arguments
 * (kite/ops.def) and calls kite_fn_call, the same for every op.
 */
#include "families.h"

#include <string.h>

#include "kite/backend.h"

extern const kt_family_ops kt_family_act, kt_family_norm, kt_family_core, kt_family_loss,
    kt_family_attn, kt_family_attn_train, kt_family_gemm, kt_family_sampling, kt_family_comm,
    kt_family_moe, kt_family_gguf, kt_family_mla, kt_family_attn_fp8;

static const kt_family_ops *const g_families[] = {
    &kt_family_act,        &kt_family_norm, &kt_family_core,     &kt_family_loss, &kt_family_attn,
    &kt_family_attn_train, &kt_family_gemm, &kt_family_sampling, &kt_family_comm, &kt_family_moe,
    &kt_family_gguf,       &kt_family_mla,  &kt_family_attn_fp8};

const kt_family_ops *kt_family(kite_op op) {
  for (size_t i = 0; i < sizeof g_families / sizeof g_families[0]; i++)
    if (g_families[i]->has(op)) return g_families[i];
  return NULL;
}

const char *kt_case_str(const kt_case *c, char *buf, size_t n) {
  const kt_family_ops *f = kt_family(c->op);
  buf[0] = '\0';
  if (f && n > 0) f->describe(c, buf, n);
  return buf;
}

const char *kt_case_shape(const kt_case *c, char *buf, size_t n) {
  const kt_family_ops *f = kt_family(c->op);
  buf[0] = '\0';
  if (f && n > 0) f->shape(c, buf, n);
  return buf;
}

double kt_case_bytes(const kt_case *c) {
  const kt_family_ops *f = kt_family(c->op);
  return f ? f->bytes(c) : 0;
}

double kt_case_flops(const kt_case *c) {
  const kt_family_ops *f = kt_family(c->op);
  return f && f->flops ? f->flops(c) : 0;
}

double kt_case_bound(const kt_case *c) {
  const kt_family_ops *f = kt_family(c->op);
  return f ? f->bound(c->op, c->dtype) : 0;
}

int kt_fn_of(const kt_case *c) {
  const kt_family_ops *f = kt_family(c->op);
  return f && f->fn ? f->fn(c) : (int)c->op;
}

int kt_plan(kt_run *r, const kt_case *c) {
  memset(r, 0, sizeof *r);
  r->c = *c;
  r->fn = (size_t)kt_fn_of(c);
  for (int i = 0; i < KT_MAX_ARGS; i++) r->arg[i] = -1;
  const kt_family_ops *f = kt_family(c->op);
  const kite_fn_info *fi = kite_fn_get(r->fn);
  if (!f || !fi || fi->nargs > KT_MAX_ARGS)
    r->bad = 1;
  else
    f->plan(r, c);
  return r->bad;
}

/* ---- the call ---------------------------------------------------------------------------- */

kite_status kt_call(kt_run *r) {
  const kt_family_ops *f = kt_family(r->c.op);
  if (!f || r->bad)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "kite: the CLI has no driver for op %d",
                          (int)r->c.op);
  const kite_fn_info *fi = kite_fn_get(r->fn);
  kite_value v[KT_MAX_ARGS];
  memset(v, 0, sizeof v);
  for (size_t i = 0; i < fi->nargs; i++) {
    const kite_arg_info *a = &fi->args[i];
    switch (a->kind) {
    case KITE_ARG_IN:
    case KITE_ARG_IN_OPT:
    case KITE_ARG_OUT:
    case KITE_ARG_OUT_OPT:
      v[i].t = r->arg[i] >= 0 ? &r->view[r->arg[i]].t : NULL;
      break;
    case KITE_ARG_COMM:
      if (!f->comm)
        return kite_set_error(KITE_ERR_UNSUPPORTED, "kite: the %s driver has no comm for %s",
                              f->name, fi->name);
      v[i].comm = f->comm(r);
      if (!v[i].comm) return KITE_ERR_UNSUPPORTED; /* kite_last_error says why */
      break;
    default:
      if (!f->scalar || f->scalar(&r->c, a, &v[i]) != 0)
        return kite_set_error(KITE_ERR_UNSUPPORTED,
                              "kite: the %s driver has no value for %s's argument %s", f->name,
                              fi->name, a->name);
      break;
    }
  }
  return kite_fn_call(r->ctx, r->fn, v, fi->nargs);
}
