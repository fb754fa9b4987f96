/* Front-ends of the sampling family: argmax, sample, apply_penalties, logprobs, softcap over
 * logits[B, V]. */
#include "kite/sampling.h"
#include "ops/matrix.h"

/* logits[B, V] float with V in [1, INT32_MAX] (a token id must fit in int32). */
static kite_status check_logits(const kite_ctx *ctx, const char *op, const DLTensor *logits,
                                bool out, kite_mat *m) {
  kite_status s;
  if ((s = kite_mat_check(ctx, op, "logits", logits, out, m)) != KITE_OK) return s;
  if ((s = kite_tensor_require_float(op, "logits", &m->t)) != KITE_OK) return s;
  if (m->rows > 0 && (m->cols < 1 || m->cols > INT32_MAX))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: logits: V = %lld is outside [1, 2^31 - 1]", op,
                          (long long)m->cols);
  return KITE_OK;
}

/* tokens[B] int32, written by argmax and sample. */
static kite_status check_tokens(const kite_ctx *ctx, const char *op, const DLTensor *tokens,
                                const kite_mat *lm, kite_tensor *t) {
  kite_status s;
  if ((s = kite_vec_check(ctx, op, "tokens", tokens, false, KITE_DTYPE_I32, lm->rows, "B", t)) !=
      KITE_OK)
    return s;
  if ((s = kite_tensor_require_no_overlap(op, "tokens", t)) != KITE_OK) return s;
  return kite_tensor_require_disjoint(op, "tokens", t, &lm->t, "logits");
}

kite_status kite_argmax(kite_ctx *ctx, const DLTensor *logits, DLTensor *tokens) {
  const char *op = "argmax";
  kite_mat lm;
  kite_tensor tt;
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = check_logits(ctx, op, logits, false, &lm)) != KITE_OK) return s;
  if ((s = check_tokens(ctx, op, tokens, &lm, &tt)) != KITE_OK) return s;
  kite_sample_args a = {.op = KITE_OP_ARGMAX,
                        .dtype = lm.t.dtype,
                        .rows = lm.rows,
                        .vocab = lm.cols,
                        .logits = lm.t.data,
                        .logits_stride = lm.stride,
                        .tokens = tt.data};
  if (a.rows == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_ARGMAX, a.dtype, &a);
}

kite_sampling_params kite_sampling_params_default(void) {
  return (kite_sampling_params){0};
}

kite_status kite_sample(kite_ctx *ctx, const DLTensor *logits, const kite_sampling_params *params,
                        DLTensor *tokens) {
  const char *op = "sample";
  kite_mat lm;
  kite_tensor tt, temp, tk, tp, mp, seeds, steps;
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = check_logits(ctx, op, logits, false, &lm)) != KITE_OK) return s;
  if ((s = check_tokens(ctx, op, tokens, &lm, &tt)) != KITE_OK) return s;
  const kite_sampling_params p = params ? *params : kite_sampling_params_default();
  const int64_t b = lm.rows;
  if ((s = kite_vec_check(ctx, op, "temperature", p.temperature, true, KITE_DTYPE_F32, b, "B",
                          &temp)) != KITE_OK ||
      (s = kite_vec_check(ctx, op, "top_k", p.top_k, true, KITE_DTYPE_I32, b, "B", &tk)) !=
          KITE_OK ||
      (s = kite_vec_check(ctx, op, "top_p", p.top_p, true, KITE_DTYPE_F32, b, "B", &tp)) !=
          KITE_OK ||
      (s = kite_vec_check(ctx, op, "min_p", p.min_p, true, KITE_DTYPE_F32, b, "B", &mp)) !=
          KITE_OK ||
      (s = kite_vec_check(ctx, op, "seeds", p.seeds, true, KITE_DTYPE_I64, b, "B", &seeds)) !=
          KITE_OK ||
      (s = kite_vec_check(ctx, op, "steps", p.steps, true, KITE_DTYPE_I64, b, "B", &steps)) !=
          KITE_OK)
    return s;
  const kite_tensor *in[] = {p.temperature ? &temp : NULL, p.top_k ? &tk : NULL,
                             p.top_p ? &tp : NULL,         p.min_p ? &mp : NULL,
                             p.seeds ? &seeds : NULL,      p.steps ? &steps : NULL};
  const char *const names[] = {"temperature", "top_k", "top_p", "min_p", "seeds", "steps"};
  if ((s = kite_require_apart(op, "tokens", &tt, in, names, 6)) != KITE_OK) return s;

  kite_sample_args a = {.op = KITE_OP_SAMPLE,
                        .dtype = lm.t.dtype,
                        .rows = b,
                        .vocab = lm.cols,
                        .logits = lm.t.data,
                        .logits_stride = lm.stride,
                        .temperature = temp.data,
                        .top_k = tk.data,
                        .top_p = tp.data,
                        .min_p = mp.data,
                        .seeds = seeds.data,
                        .steps = steps.data,
                        .seed = p.seed,
                        .step = p.step,
                        .tokens = tt.data};
  if (b == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_SAMPLE, a.dtype, &a);
}

/* ids[B, L] int32 (L may be 0), optional. */
static kite_status check_ids(const kite_ctx *ctx, const char *arg, const DLTensor *d, int64_t b,
                             kite_mat *m) {
  const char *op = "apply_penalties";
  kite_status s;
  if (!d) {
    *m = (kite_mat){0};
    return KITE_OK;
  }
  if ((s = kite_mat_check(ctx, op, arg, d, false, m)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, arg, &m->t, KITE_DTYPE_I32)) != KITE_OK) return s;
  if (m->rows != b)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: %lld rows, expected B=%lld", op, arg,
                          (long long)m->rows, (long long)b);
  return KITE_OK;
}

kite_status kite_apply_penalties(kite_ctx *ctx, DLTensor *logits, const DLTensor *prompt_ids,
                                 const DLTensor *output_ids, const DLTensor *repetition,
                                 const DLTensor *presence, const DLTensor *frequency) {
  const char *op = "apply_penalties";
  kite_mat lm, pm, om;
  kite_tensor rep, pres, freq;
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = check_logits(ctx, op, logits, true, &lm)) != KITE_OK) return s;
  const int64_t b = lm.rows;
  if ((s = check_ids(ctx, "prompt_ids", prompt_ids, b, &pm)) != KITE_OK) return s;
  if ((s = check_ids(ctx, "output_ids", output_ids, b, &om)) != KITE_OK) return s;
  if ((s = kite_vec_check(ctx, op, "repetition", repetition, true, KITE_DTYPE_F32, b, "B", &rep)) !=
          KITE_OK ||
      (s = kite_vec_check(ctx, op, "presence", presence, true, KITE_DTYPE_F32, b, "B", &pres)) !=
          KITE_OK ||
      (s = kite_vec_check(ctx, op, "frequency", frequency, true, KITE_DTYPE_F32, b, "B", &freq)) !=
          KITE_OK)
    return s;
  const kite_tensor *in[] = {prompt_ids ? &pm.t : NULL, output_ids ? &om.t : NULL,
                             repetition ? &rep : NULL, presence ? &pres : NULL,
                             frequency ? &freq : NULL};
  const char *const names[] = {"prompt_ids", "output_ids", "repetition", "presence", "frequency"};
  if ((s = kite_require_apart(op, "logits", &lm.t, in, names, 5)) != KITE_OK) return s;

  kite_penalty_args a = {.op = KITE_OP_APPLY_PENALTIES,
                         .dtype = lm.t.dtype,
                         .rows = b,
                         .vocab = lm.cols,
                         .logits = lm.t.data,
                         .logits_stride = lm.stride,
                         .prompt_ids = pm.cols > 0 ? pm.t.data : NULL,
                         .prompt_len = pm.cols,
                         .prompt_stride = pm.stride,
                         .output_ids = om.cols > 0 ? om.t.data : NULL,
                         .output_len = om.cols,
                         .output_stride = om.stride,
                         .repetition = rep.data,
                         .presence = pres.data,
                         .frequency = freq.data};
  /* vLLM's rules, checked where the values can be read: a repetition of 0 would turn a seen
   * positive logit into +inf, a negative one flip its sign */
  for (int64_t r = 0; kite_indices_on_host(ctx) && r < b; r++) {
    const float rv = a.repetition ? a.repetition[r] : 1.0f;
    const float pv = a.presence ? a.presence[r] : 0.0f, fv = a.frequency ? a.frequency[r] : 0.0f;
    if (!kite_penalty_repetition_ok(rv))
      return kite_set_error(KITE_ERR_INVALID_ARG,
                            "apply_penalties: repetition[%lld] = %g: must be > 0 and finite",
                            (long long)r, (double)rv);
    if (!kite_penalty_additive_ok(pv) || !kite_penalty_additive_ok(fv))
      return kite_set_error(KITE_ERR_INVALID_ARG, "apply_penalties: %s[%lld] = %g: must be finite",
                            kite_penalty_additive_ok(pv) ? "frequency" : "presence", (long long)r,
                            (double)(kite_penalty_additive_ok(pv) ? fv : pv));
  }
  if (b == 0 || (!a.prompt_ids && !a.output_ids)) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_APPLY_PENALTIES, a.dtype, &a);
}

/* NULL, or a matrix of no columns (a binding that always passes a tensor gives [B, 0]). */
static bool no_columns(const DLTensor *t) {
  return !t || (t->ndim == 2 && t->shape[1] == 0);
}

kite_status kite_logprobs(kite_ctx *ctx, const DLTensor *logits, const DLTensor *tokens, int64_t n,
                          DLTensor *token_logprobs, DLTensor *top_ids, DLTensor *top_logprobs) {
  const char *op = "logprobs";
  kite_mat lm, im, vm;
  kite_tensor tt, lt;
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = check_logits(ctx, op, logits, false, &lm)) != KITE_OK) return s;
  const int64_t b = lm.rows, v = lm.cols;
  if (n < 0 || n > KITE_LOGPROBS_MAX_N || (b > 0 && n > v))
    return kite_set_error(KITE_ERR_INVALID_ARG, "logprobs: n: %lld is outside [0, min(20, V=%lld)]",
                          (long long)n, (long long)v);
  if (!tokens != !token_logprobs)
    return kite_set_error(KITE_ERR_INVALID_ARG, "logprobs: %s: NULL while %s is given",
                          tokens ? "token_logprobs" : "tokens",
                          tokens ? "tokens" : "token_logprobs");
  if (n > 0 && (!top_ids || !top_logprobs))
    return kite_set_error(KITE_ERR_INVALID_ARG, "logprobs: %s: NULL with n = %lld",
                          top_ids ? "top_logprobs" : "top_ids", (long long)n);
  if (n == 0 && (!no_columns(top_ids) || !no_columns(top_logprobs)))
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "logprobs: n = 0: top_ids and top_logprobs must be NULL or [B, 0]");
  if (n == 0) top_ids = top_logprobs = NULL;
  if (!tokens && n == 0) return KITE_OK;
  if ((s = kite_vec_check(ctx, op, "tokens", tokens, true, KITE_DTYPE_I32, b, "B", &tt)) !=
          KITE_OK ||
      (s = kite_vec_check(ctx, op, "token_logprobs", token_logprobs, true, KITE_DTYPE_F32, b, "B",
                          &lt)) != KITE_OK)
    return s;
  if (token_logprobs && (s = kite_tensor_require_no_overlap(op, "token_logprobs", &lt)) != KITE_OK)
    return s;
  if (n > 0) {
    if ((s = kite_mat_check(ctx, op, "top_ids", top_ids, true, &im)) != KITE_OK) return s;
    if ((s = kite_tensor_require_dtype(op, "top_ids", &im.t, KITE_DTYPE_I32)) != KITE_OK) return s;
    if ((s = kite_mat_require_shape(op, "top_ids", &im, b, n, "B", "n")) != KITE_OK) return s;
    if ((s = kite_mat_check(ctx, op, "top_logprobs", top_logprobs, true, &vm)) != KITE_OK) return s;
    if ((s = kite_tensor_require_dtype(op, "top_logprobs", &vm.t, KITE_DTYPE_F32)) != KITE_OK)
      return s;
    if ((s = kite_mat_require_shape(op, "top_logprobs", &vm, b, n, "B", "n")) != KITE_OK) return s;
  } else {
    im = vm = (kite_mat){0};
  }
  /* every output apart from every input and from the other outputs */
  const kite_tensor *all[] = {&lm.t, tokens ? &tt : NULL, token_logprobs ? &lt : NULL,
                              n > 0 ? &im.t : NULL, n > 0 ? &vm.t : NULL};
  const char *const names[] = {"logits", "tokens", "token_logprobs", "top_ids", "top_logprobs"};
  for (int o = 2; o < 5; o++)
    if (all[o] && (s = kite_require_apart(op, names[o], all[o], all, names, o)) != KITE_OK)
      return s;

  kite_logprobs_args a = {.op = KITE_OP_LOGPROBS,
                          .dtype = lm.t.dtype,
                          .rows = b,
                          .vocab = v,
                          .n = n,
                          .logits = lm.t.data,
                          .logits_stride = lm.stride,
                          .tokens = tokens ? tt.data : NULL,
                          .token_logprobs = token_logprobs ? lt.data : NULL,
                          .top_ids = n > 0 ? im.t.data : NULL,
                          .top_ids_stride = im.stride,
                          .top_logprobs = n > 0 ? vm.t.data : NULL,
                          .top_logprobs_stride = vm.stride};
  if (b == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_LOGPROBS, a.dtype, &a);
}

kite_status kite_softcap(kite_ctx *ctx, DLTensor *logits, float cap) {
  const char *op = "softcap";
  kite_mat lm;
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = check_logits(ctx, op, logits, true, &lm)) != KITE_OK) return s;
  /* !(cap > 0) catches NaN; cap - cap != 0 catches +inf (the cap would then be the identity) */
  if (!(cap > 0.0f) || cap - cap != 0.0f)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: cap = %g: must be > 0 and finite", op,
                          (double)cap);
  kite_softcap_args a = {.op = KITE_OP_SOFTCAP,
                         .dtype = lm.t.dtype,
                         .rows = lm.rows,
                         .vocab = lm.cols,
                         .logits = lm.t.data,
                         .logits_stride = lm.stride,
                         .cap = cap};
  if (a.rows == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_SOFTCAP, a.dtype, &a);
}
