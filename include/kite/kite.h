/*
 * kite — operators for LLM inference and training behind one kernel registry.
 *
 * Public C API. Every function returns a kite_status; on failure kite_last_error() gives a
 * thread-local message naming the op and the offending argument. The library never aborts or
 * prints on bad input.
 *
 * Tensors are DLPack DLTensor (dlpack/dlpack.h). Shapes below are logical row-major shapes.
 * `strides == NULL` means compact row-major; strides are in elements. Unless an op says
 * otherwise the last dimension must be unit-stride and the leading dimensions must collapse into
 * one "row" dimension with a single stride (a row-strided view, e.g. a slice of a fused qkv
 * projection). Every tensor of a call must live on the ctx's device.
 * Strides that address nothing are ignored (replaced by the compact ones): the stride of a dim of
 * size 1, whatever its value, and every stride of an empty tensor (NumPy's 0, huge or negative
 * values included). An empty tensor may have NULL data.
 *
 * dtypes: f32, f16, bf16 for activations/weights; int32 for ids and positions.
 * Arithmetic is float32 or better inside; outputs are rounded once to the output dtype (round to
 * nearest even): a result computed in float64 goes straight to f16 / bf16, never through f32
 * first. Ops whose every backend must agree bit for bit say how they round: relu, embedding and
 * store_kv copy values; quant's codes come from one f32 division; dequant rounds the exact
 * product q * scale once.
 *
 * Index values (block tables, seq_lens, cu_q_lens, slots, group sizes) are checked where the
 * library can read them before any kernel runs: on a CPU ctx a bad one is INVALID_ARG naming the
 * op, the argument, the sequence (or element) and the value, and nothing is written. In device
 * memory kernels never read or write out of bounds whatever the values hold, with the results
 * each op states for such values; kite_ctx_params.checks (or KITE_CHECK=indices) asks device
 * kernels to report the first bad value as an error at the next synchronization.
 */
#ifndef KITE_KITE_H
#define KITE_KITE_H

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define KITE_API __declspec(dllexport)
#else
#define KITE_API __attribute__((visibility("default")))
#endif

#define KITE_VERSION_MAJOR 0
#define KITE_VERSION_MINOR 1
#define KITE_VERSION_PATCH 0

/* The version of the loaded library, "MAJOR.MINOR.PATCH" (may differ from the header's macros
 * when a program runs against another build). */
KITE_API const char *kite_version(void);

/* ---------------------------------------------------------------------------------------------
 * Status and errors
 * ------------------------------------------------------------------------------------------- */
typedef enum kite_status {
  KITE_OK = 0,
  KITE_ERR_INVALID_ARG = 1, /* NULL, wrong rank, mismatched shape/dtype/device, bad value */
  KITE_ERR_UNSUPPORTED = 2, /* no kernel can run these arguments, or a pin cannot run */
  KITE_ERR_OUT_OF_MEMORY = 3,
  KITE_ERR_DEVICE = 4,   /* a device runtime reported an error (launch failure, ...) */
  KITE_ERR_PLUGIN = 5,   /* a plugin failed to load: missing file/symbol, ABI mismatch */
  KITE_ERR_CONFIG = 6,   /* a kernel-selection string could not be parsed */
  KITE_ERR_INTERNAL = 7, /* a bug in kite or a backend */
} kite_status;

/* Short constant name of a status ("KITE_ERR_INVALID_ARG"); never NULL. */
KITE_API const char *kite_status_name(kite_status s);

/* Message of the last failed call on this thread ("" when none). Valid until the next kite call
 * on this thread. */
KITE_API const char *kite_last_error(void);

/* ---------------------------------------------------------------------------------------------
 * Context: device, stream, threads, seed, scratch workspace. Thread-safe library; one ctx is used
 * by one thread at a time.
 * ------------------------------------------------------------------------------------------- */
typedef struct kite_ctx kite_ctx;

/* Opt-in checks of a ctx (kite_ctx_params.checks, bits). */
typedef enum kite_check_flags {
  /* Device kernels record the first index value outside its range (a block id outside the cache
   * inside a sequence, a seq_len past the block table, a negative length, a query chunk longer
   * than its sequence, a slot past the cache, negative group sizes or sizes not summing to M,
   * a cross-entropy target outside [0, V) that is not ignore_index) in a device word; the next
   * kite_ctx_synchronize() (or kite_memcpy) on that device returns INVALID_ARG naming the op and
   * the value, and clears the word. The kernels still never go
   * out of bounds. The word is allocated at the first checked call, so make one before
   * capturing a CUDA graph. On a CPU ctx such values are always errors, so the flag changes
   * nothing there. */
  KITE_CHECK_INDICES = 1u << 0,
} kite_check_flags;

typedef struct kite_ctx_params {
  DLDevice device; /* where the tensors live; {kDLCPU, 0} by default */
  void *stream;    /* backend stream (a cudaStream_t for CUDA); NULL = default stream */
  int num_threads; /* CPU threads a kernel may use; 0 = all online cores */
  uint64_t seed;   /* default seed for ops that draw random numbers */
  uint32_t checks; /* kite_check_flags; KITE_CHECK=indices in the environment adds them */
} kite_ctx_params;

/* Defaults: CPU device 0, NULL stream, all cores, seed 0, no checks (but KITE_CHECK's). */
KITE_API kite_ctx_params kite_ctx_params_default(void);

/* Creates a ctx. params NULL = defaults. Errors: INVALID_ARG (NULL out, negative threads),
 * UNSUPPORTED (no backend drives that device type, or device_id out of range). */
KITE_API kite_status kite_ctx_create(const kite_ctx_params *params, kite_ctx **out);
/* Frees the ctx and its workspace. NULL is a no-op. Destroying a ctx twice, or using it after
 * destroying it, is the caller's error (undefined behaviour; a build with AddressSanitizer reports
 * it as a heap-use-after-free in kite_ctx_destroy). */
KITE_API void kite_ctx_destroy(kite_ctx *ctx);
/* Waits until all work queued on the ctx's stream has finished. With KITE_CHECK_INDICES, this is
 * where a bad index value a device kernel met since the last synchronization of that device is
 * reported (INVALID_ARG naming the op, the argument and the value); kite_memcpy, which
 * synchronizes too, reports it the same way. */
KITE_API kite_status kite_ctx_synchronize(kite_ctx *ctx);

/* Device memory on the ctx's device, through the backend that drives that device type.
 * kite_malloc returns in *out what a DLTensor's data holds for memory of that device, as DLPack
 * says: a device pointer, or on a device whose memory is named by a handle the handle itself (a
 * cl_mem for kDLOpenCL); a view bytes into it is data = that value with byte_offset = bytes,
 * never a pointer computed from it. kite_free takes what kite_malloc returned (NULL is a
 * no-op). Errors: INVALID_ARG (NULL ctx or out, bytes past INT64_MAX), OUT_OF_MEMORY, DEVICE. */
KITE_API kite_status kite_malloc(kite_ctx *ctx, size_t bytes, void **out);
KITE_API kite_status kite_free(kite_ctx *ctx, void *ptr);
typedef enum kite_copy_kind {
  KITE_COPY_HOST_TO_DEVICE = 0,
  KITE_COPY_DEVICE_TO_HOST = 1,
  KITE_COPY_DEVICE_TO_DEVICE = 2,
} kite_copy_kind;
/* Copies bytes from src at byte src_offset to dst at byte dst_offset; synchronous with respect
 * to the host (the stream is synchronized). A device side is what a DLTensor's data holds (a
 * kite_malloc result, a device pointer, or a handle such as a cl_mem on a handle device) and its
 * offset is that tensor's byte_offset; a host side is a host pointer plus its offset.
 * Errors: INVALID_ARG for NULL pointers, a bad kind, a range past the end of the address space
 * or of the device buffer (as the backend knows it), a device side that is no memory of the
 * ctx's device (where the backend can tell), and overlapping ranges in one address space (any
 * copy on a CPU ctx, DEVICE_TO_DEVICE on a device, compared as the op front-ends compare
 * tensors): such a copy has no single meaning, so it is refused rather than done as memmove. */
KITE_API kite_status kite_memcpy_offset(kite_ctx *ctx, void *dst, size_t dst_offset,
                                        const void *src, size_t src_offset, size_t bytes,
                                        kite_copy_kind kind);
/* kite_memcpy_offset with both offsets 0. */
KITE_API kite_status kite_memcpy(kite_ctx *ctx, void *dst, const void *src, size_t bytes,
                                 kite_copy_kind kind);

/* ---------------------------------------------------------------------------------------------
 * Graphs: record the device work of a sequence of kite calls on a ctx once, replay it many times
 * (a CUDA graph on CUDA). A decode step of a small model is hundreds of short kernels whose launch
 * costs more than their work; a replay launches them all at once.
 *
 *   kite_graph_begin(ctx);            // recording: calls validate and queue, nothing runs
 *   ... kite op calls on ctx ...
 *   kite_graph_end(ctx, &g);          // the recorded work, or the first error met
 *   kite_graph_launch(ctx, g);        // runs it on ctx's stream, as often as wanted
 *   kite_graph_destroy(g);
 *
 * What is recorded is the work with its arguments as they were: the same device addresses, the
 * same shapes and scalars. A replay reads whatever those addresses hold when it runs, so inputs
 * change between replays by writing into the same buffers (kite_memcpy before the launch), never
 * by passing other tensors. Rules while recording:
 * - kite_memcpy, kite_memcpy_offset and kite_ctx_synchronize on the ctx are INVALID_ARG (they wait
 *   on the host, and nothing has run);
 * - the ctx's workspace cannot grow (a call that needs more than the workspace has is
 *   INVALID_ARG): make the same calls once before recording, which sizes it;
 * - an op call that fails returns its error as always and records nothing (a caller that needs
 *   every call in the graph ends and destroys the recording); a device failure while recording
 *   breaks the recording, and kite_graph_end then returns DEVICE and no graph;
 * - ops whose kernels read index values on the host cannot be recorded (host backends); a device
 *   backend that has no graphs makes kite_graph_begin UNSUPPORTED.
 * A graph runs on the ctx it was recorded on only (its calls use that ctx's scratch memory, which
 * the graph keeps alive while it lives, even after the ctx has grown a larger one). Destroy a
 * ctx's graphs before the ctx.
 * ------------------------------------------------------------------------------------------- */
typedef struct kite_graph kite_graph;

/* Starts recording on ctx. Errors: INVALID_ARG (NULL ctx, ctx already recording), UNSUPPORTED
 * (the backend serving ctx's device type records no graphs: every CPU ctx), DEVICE. */
KITE_API kite_status kite_graph_begin(kite_ctx *ctx);
/* Ends the recording begun on ctx and returns the graph in *out (NULL on error). The ctx is back
 * to running calls either way. Errors: INVALID_ARG (NULL argument, ctx not recording), DEVICE
 * (the recording was broken: a call failed or did something a recording cannot hold). */
KITE_API kite_status kite_graph_end(kite_ctx *ctx, kite_graph **out);
/* Queues the recorded work on ctx's stream (asynchronous, like the calls it holds).
 * Errors: INVALID_ARG (NULL argument, ctx recording, g recorded on another ctx), DEVICE. */
KITE_API kite_status kite_graph_launch(kite_ctx *ctx, const kite_graph *g);
/* Frees a graph (NULL is a no-op); it must not be running (synchronize first). */
KITE_API void kite_graph_destroy(kite_graph *g);

/* ---------------------------------------------------------------------------------------------
 * Operators. Every op has an id, a name ("rms_norm") and a public function below; the list is
 * the op table, kite/ops.def, which also gives each function's arguments (kite_fn_get).
 * ------------------------------------------------------------------------------------------- */
typedef enum kite_op {
#define KITE_OP(ID, ...) KITE_OP_##ID,
#define KITE_FN(...)
#include "kite/ops.def"
#undef KITE_OP
#undef KITE_FN
  KITE_OP_COUNT /* new ops are appended to ops.def */
} kite_op;

/* "rms_norm" for KITE_OP_RMS_NORM; NULL for an id out of range. */
KITE_API const char *kite_op_name(kite_op op);
/* The op with that name, or -1. */
KITE_API int kite_op_from_name(const char *name);

/* --- Activations, elementwise over any shape -------------------------------------------------
 * x[..., N] -> y[..., N], same shape and dtype (f32/f16/bf16). y may be x (in place).
 *   silu(x) = x * sigmoid(x); gelu = x * Phi(x) (erf); gelu_tanh = tanh approximation;
 *   gelu_quick = x * sigmoid(1.702 x); relu = max(x, 0).
 * Non-finite inputs: silu, gelu, gelu_tanh and gelu_quick give their limits, act(+inf) = +inf
 * and act(-inf) = -0 (not -inf * 0 = NaN); relu(-inf) = 0; NaN gives NaN. Every backend agrees. */
KITE_API kite_status kite_silu(kite_ctx *ctx, const DLTensor *x, DLTensor *y);
KITE_API kite_status kite_gelu(kite_ctx *ctx, const DLTensor *x, DLTensor *y);
KITE_API kite_status kite_gelu_tanh(kite_ctx *ctx, const DLTensor *x, DLTensor *y);
KITE_API kite_status kite_gelu_quick(kite_ctx *ctx, const DLTensor *x, DLTensor *y);
KITE_API kite_status kite_relu(kite_ctx *ctx, const DLTensor *x, DLTensor *y);

/* --- Gated activations ----------------------------------------------------------------------
 * x[..., 2I] -> y[..., I] = act(x[..., :I]) * x[..., I:], same dtype.
 * limit > 0 first clamps the gate to <= limit and the up half to [-limit, limit]; limit <= 0
 * means no clamp. Errors: NaN limit, last dims not 2I vs I, leading dims differ. */
KITE_API kite_status kite_silu_and_mul(kite_ctx *ctx, const DLTensor *x, float limit, DLTensor *y);
KITE_API kite_status kite_gelu_and_mul(kite_ctx *ctx, const DLTensor *x, float limit, DLTensor *y);
KITE_API kite_status kite_gelu_tanh_and_mul(kite_ctx *ctx, const DLTensor *x, float limit,
                                            DLTensor *y);

/* --- Norms over the last dim ----------------------------------------------------------------
 * x[..., H] -> y[..., H], same dtype; w[H] and b[H] (same dtype as x) are optional (NULL).
 *   rms_norm:   y = x / sqrt(mean(x^2) + eps) * (offset + w)   (offset 1 = Gemma)
 *               w NULL means unweighted: y = x / sqrt(mean(x^2) + eps), offset unused
 *   layer_norm: y = (x - mean) / sqrt(var + eps) * w + b        (w NULL -> 1, b NULL -> 0)
 * eps must be >= 0 and finite. y may be x. */
KITE_API kite_status kite_rms_norm(kite_ctx *ctx, const DLTensor *x, const DLTensor *w, float eps,
                                   float offset, DLTensor *y);
KITE_API kite_status kite_layer_norm(kite_ctx *ctx, const DLTensor *x, const DLTensor *w,
                                     const DLTensor *b, float eps, DLTensor *y);

/* Where the norm sits relative to the residual add. */
typedef enum kite_norm_pos {
  KITE_NORM_PRE = 0,  /* s = x + residual; residual <- s; y = norm(s) */
  KITE_NORM_POST = 1, /* y = norm(x + residual); residual <- y */
} kite_norm_pos;

/* Fused residual add + norm. residual[..., H] has x's shape and dtype and is updated in place;
 * it overlaps neither x nor y. PRE rounds the sum to the dtype first and computes y from that
 * rounded residual, exactly as a separate add followed by the norm would; POST computes y from
 * the unrounded f32 sum and stores y's values (rounded once) as the residual. */
KITE_API kite_status kite_add_rms_norm(kite_ctx *ctx, const DLTensor *x, DLTensor *residual,
                                       const DLTensor *w, float eps, float offset,
                                       kite_norm_pos pos, DLTensor *y);
KITE_API kite_status kite_add_layer_norm(kite_ctx *ctx, const DLTensor *x, DLTensor *residual,
                                         const DLTensor *w, const DLTensor *b, float eps,
                                         kite_norm_pos pos, DLTensor *y);

/* --- Rotary position embedding, in place ----------------------------------------------------
 * q[T, Hq, D] and k[T, Hkv, D] (k may be NULL), same dtype; the last dim unit-stride, the token
 * and head strides free (slices of a fused qkv). positions[T] int32.
 * cos_sin[max_pos, rot_dim] f32, compact: each row holds rot_dim/2 cosines then rot_dim/2 sines.
 * The first rot_dim (even, <= D) dims of each head rotate; the rest pass through.
 *   neox: pairs (i, i + rot_dim/2);  gptj: pairs (2i, 2i + 1).
 * Errors: a position outside [0, max_pos) where the backend can check it (host-visible data). */
typedef enum kite_rope_style { KITE_ROPE_NEOX = 0, KITE_ROPE_GPTJ = 1 } kite_rope_style;
KITE_API kite_status kite_rope(kite_ctx *ctx, DLTensor *q, DLTensor *k, const DLTensor *positions,
                               const DLTensor *cos_sin, int64_t rot_dim, kite_rope_style style);

/* Frequency scaling for the cos/sin cache. */
typedef enum kite_rope_scaling_type {
  KITE_ROPE_SCALING_NONE = 0,
  KITE_ROPE_SCALING_LINEAR = 1, /* positions divided by factor */
  KITE_ROPE_SCALING_LLAMA3 = 2, /* Llama 3.1 wavelength-dependent scaling */
  KITE_ROPE_SCALING_YARN = 3,   /* YaRN (DeepSeek-V2/V3, Qwen, gpt-oss): ramp + attention factor */
} kite_rope_scaling_type;
/* The fields after original_max_pos are read only for yarn (older callers that never ask for
 * yarn may pass the shorter struct). Zero means "absent" for each yarn field, as a missing key of
 * a Hugging Face rope_parameters dict does. */
typedef struct kite_rope_scaling {
  kite_rope_scaling_type type;
  double factor;            /* linear, llama3 and yarn */
  double low_freq_factor;   /* llama3 (1.0 in Llama 3.1) */
  double high_freq_factor;  /* llama3 (4.0 in Llama 3.1) */
  int64_t original_max_pos; /* llama3 (8192 in Llama 3.1); yarn (4096 in DeepSeek-V3) */
  double beta_fast;         /* yarn: 0 -> 32 */
  double beta_slow;         /* yarn: 0 -> 1 */
  double mscale;            /* yarn: 0 -> absent (DeepSeek-V3: 1.0) */
  double mscale_all_dim;    /* yarn: 0 -> absent (DeepSeek-V3: 1.0) */
  double attention_factor;  /* yarn: 0 -> derived from factor, mscale, mscale_all_dim */
  int32_t no_truncate;      /* yarn: 1 keeps the correction range unrounded (gpt-oss's
                               truncate: false); 0 rounds it (floor, ceil) */
} kite_rope_scaling;

/* The scaled inverse frequencies inv_freq[rot_dim / 2] (double) and the attention factor
 * (*attention_factor, may be NULL; 1 unless yarn) of kite_rope_cache_build:
 *   none: inv_freq[i] = theta^(-2i/rot_dim) (= base_i);  linear: base_i / factor;
 *   llama3: Llama 3.1's rule (wavelength 2 pi / base_i below original_max_pos / high_freq_factor
 *     kept, above original_max_pos / low_freq_factor divided by factor, a linear blend in
 *     original_max_pos / wavelength between);
 *   yarn (transformers' _compute_yarn_parameters): with
 *     corr(r) = rot_dim ln(original_max_pos / (2 pi r)) / (2 ln theta),
 *     low = max(floor(corr(beta_fast)), 0), high = min(ceil(corr(beta_slow)), rot_dim - 1)
 *     (no_truncate: no floor / ceil), high += 0.001 when low == high,
 *     ramp_i = clamp((i - low) / (high - low), 0, 1),
 *     inv_freq[i] = base_i / factor * ramp_i + base_i * (1 - ramp_i);
 *     attention factor: attention_factor when nonzero, else with
 *     m(s, k) = s <= 1 ? 1 : 0.1 k ln(s) + 1: m(factor, mscale) / m(factor, mscale_all_dim) when
 *     both are nonzero, else m(factor, 1).
 * The cache's cosines and sines are multiplied by the attention factor (as transformers does).
 * DeepSeek-V2/V3 also multiply the softmax scale by m(factor, mscale_all_dim)^2 (see
 * kite_mla_decode): kite_rope_yarn_mscale gives m.
 * Errors: NULL inv_freq, rot_dim odd or < 2, theta <= 0 or not finite, bad scaling values
 * (factor <= 0 or not finite; llama3: low_freq_factor <= 0, high <= low, original_max_pos < 1;
 * yarn: original_max_pos < 1, beta_fast <= beta_slow after the defaults, negative or non-finite
 * mscale, mscale_all_dim or attention_factor). */
KITE_API kite_status kite_rope_inv_freq(double *inv_freq, int64_t rot_dim, double theta,
                                        const kite_rope_scaling *scaling, double *attention_factor);

/* YaRN's magnitude scale m(factor, mscale) = factor <= 1 ? 1 : 0.1 mscale ln(factor) + 1 (the
 * yarn_get_mscale of DeepSeek-V2/V3). */
KITE_API double kite_rope_yarn_mscale(double factor, double mscale);

/* Fills a host buffer cos_sin[max_pos * rot_dim] (f32) for kite_rope: row p holds
 * a cos(p * inv_freq[i]) for i < rot_dim/2, then the sines a sin(p * inv_freq[i]), with inv_freq
 * and the attention factor a of kite_rope_inv_freq (scaling NULL = none; a = 1 unless yarn).
 * Copy it to the device with kite_memcpy.
 * Errors: NULL buffer, max_pos < 1, rot_dim odd or < 2, theta <= 0, bad scaling values. */
KITE_API kite_status kite_rope_cache_build(float *cos_sin, int64_t max_pos, int64_t rot_dim,
                                           double theta, const kite_rope_scaling *scaling);

/* --- Softmax over the last dim --------------------------------------------------------------
 * x[..., N] -> y[..., N] = softmax(scale * x), same dtype. scale must be finite (1 = plain). */
KITE_API kite_status kite_softmax(kite_ctx *ctx, const DLTensor *x, float scale, DLTensor *y);

/* --- Embedding lookup -----------------------------------------------------------------------
 * ids[T] int32, table[V, H] (row-strided allowed) -> y[T, H], same dtype as table. An id outside
 * [0, V) gives a zero row. y must not overlap table or ids (INVALID_ARG). */
KITE_API kite_status kite_embedding(kite_ctx *ctx, const DLTensor *ids, const DLTensor *table,
                                    DLTensor *y);

/* DLPack type codes newer than some installed dlpack.h (DLPack 1.x values). */
#define KITE_DL_BOOL 6u           /* kDLBool: 8-bit, 0 = false */
#define KITE_DL_FLOAT8_E4M3FN 10u /* kDLFloat8_e4m3fn: 8-bit OCP e4m3, max 448, no inf */

/* --- Paged KV cache and attention -------------------------------------------------------------
 * Cache layout, per layer: key_cache, value_cache [num_blocks, Hkv, block_size, D], compact, the
 * dtype of k/v (f32/f16/bf16); any block_size >= 1, D <= 256. A token's slot is
 * block * block_size + offset. block_table[B, max_blocks] int32 maps a sequence's logical block j
 * to a physical block (row-strided allowed).
 *
 * GQA (kite_gqa_layout): grouped (default): q head h reads kv head h / (Hq / Hkv);
 * interleaved: h % Hkv. Hq must be a multiple of Hkv.
 * Scores: s = scale * q.k (scale 0 -> 1/sqrt(D)); with softcap > 0, s = softcap * tanh(s /
 * softcap); then masks; softmax in f32 (one pass, online rescaling); o = sum p * v.
 * window_left >= 0: a query at position p sees keys in [p - window_left, p] (-1: off): W + 1
 * keys, FlashAttention's window (window_left, 0). The right edge is the query itself whether
 * causal is on or off. A Hugging Face `sliding_window = W` (W keys, the query's included) is
 * window_left = W - 1.
 * A query that sees no key gives o = 0 and lse = -inf.
 * lse (optional output, f32): the natural log-sum-exp of the final scores, for split/merge.
 *
 * Sinks (gpt-oss's learned per-head logit; every attention op takes them): sinks NULL (none) or
 * f32 [Hq], compact, on q's device. sinks[h] joins the softmax denominator of every query of head
 * h as one more score that has no value and is never scaled, softcapped or masked:
 *   m = max(sinks[h], max_j u_j),  p_j = exp(u_j - m) / (exp(sinks[h] - m) + sum_j exp(u_j - m)),
 *   o = sum_j p_j v_j (the weights sum to less than 1), lse = log(exp(sinks[h]) + sum_j exp(u_j)).
 * The returned lse includes the sink, so the backward recomputes p_j = exp(u_j - lse) from it.
 * A query that sees no key gives o = 0 and lse = sinks[h]; a sink of -inf is no sink. The values
 * are not checked (device memory). Errors (INVALID_ARG): sinks not f32, not rank 1, not of
 * length Hq, not compact, on another device, or overlapping an output. transformers' gpt-oss
 * keeps its sinks in the model's dtype: pass sinks.float(). */
typedef enum kite_gqa_layout { KITE_GQA_GROUPED = 0, KITE_GQA_INTERLEAVED = 1 } kite_gqa_layout;

typedef struct kite_attn_opts {
  float scale;         /* 0 -> 1/sqrt(D) */
  float softcap;       /* 0 -> off */
  int32_t window_left; /* -1 -> off */
  kite_gqa_layout gqa;
  int32_t causal; /* paged_prefill and sdpa: 1 = causal (prefill's default) */
} kite_attn_opts;

/* scale 0, softcap 0, window_left -1, grouped, causal 1. */
KITE_API kite_attn_opts kite_attn_opts_default(void);

/* Writes k[T, Hkv, D] and v into the caches at slots[T] int32. A negative slot skips the token
 * (padding). A slot >= num_blocks * block_size is an error on a CPU ctx (nothing is written);
 * on a device the token is skipped (reported under KITE_CHECK_INDICES). k/v may be row-strided
 * (token stride). */
KITE_API kite_status kite_store_kv(kite_ctx *ctx, const DLTensor *k, const DLTensor *v,
                                   DLTensor *key_cache, DLTensor *value_cache,
                                   const DLTensor *slots);

/* Decode: one query per sequence. q[B, Hq, D] -> o[B, Hq, D] (same dtype as the cache);
 * block_table[B, max_blocks] int32, seq_lens[B] int32 (0 gives zeros; <= max_blocks * bs).
 * The query sits at position seq_len - 1 (for the window). opts.causal is ignored.
 * lse: NULL or f32 [B, Hq].
 * Index values: on a CPU ctx a seq_len outside [0, max_blocks * block_size] or a block id
 * outside [0, num_blocks) among the first ceil(seq_len / block_size) entries of its row is
 * INVALID_ARG naming the sequence and the value. On a device: a negative seq_len counts as 0, one
 * past the table is clamped to max_blocks * block_size, the keys of an out-of-range block id are
 * absent (a query that sees none gives zeros); KITE_CHECK_INDICES reports them. */
KITE_API kite_status kite_paged_decode(kite_ctx *ctx, const DLTensor *q, const DLTensor *key_cache,
                                       const DLTensor *value_cache, const DLTensor *block_table,
                                       const DLTensor *seq_lens, const DLTensor *sinks,
                                       const kite_attn_opts *opts, DLTensor *o, DLTensor *lse);

/* Prefill over a paged cache that already holds every key (store_kv first). q[T, Hq, D] holds
 * B sequences' queries back to back: cu_q_lens[B + 1] int32 (cu_q_lens[0] = 0, nondecreasing,
 * cu_q_lens[B] = T). Sequence b's queries are the LAST q_len_b = cu_q_lens[b+1] - cu_q_lens[b]
 * positions of its seq_lens[b] keys (prefix caching / chunked prefill), so query i of b sits at
 * position seq_len_b - q_len_b + i; causal: it sees keys at positions <= its own.
 * -> o[T, Hq, D]; lse: NULL or f32 [T, Hq].
 * Index values as for paged_decode, and q_len_b <= seq_len_b: on a CPU ctx a longer query chunk,
 * or cu_q_lens not starting at 0, decreasing or not ending at T, is INVALID_ARG; on a device the
 * queries at negative positions see no key (zeros, lse -inf). */
KITE_API kite_status kite_paged_prefill(kite_ctx *ctx, const DLTensor *q, const DLTensor *key_cache,
                                        const DLTensor *value_cache, const DLTensor *block_table,
                                        const DLTensor *cu_q_lens, const DLTensor *seq_lens,
                                        const DLTensor *sinks, const kite_attn_opts *opts,
                                        DLTensor *o, DLTensor *lse);

/* Dense attention. q[B, Hq, Sq, D], k/v[B, Hkv, Sk, D] (any strides with unit-stride D) ->
 * o[B, Hq, Sq, D]. mask: NULL, or [Sq, Sk] or [B|1, Hq|1, Sq, Sk] (stride 0 broadcasts):
 * bool (KITE_DL_BOOL or uint8: nonzero = attend) or float (f32 or q's dtype, added to the
 * scores, PyTorch's rule). causal aligns the last query with the last key: query i sees keys
 * j <= i + Sk - Sq. Query i sits at position i + Sk - Sq whether causal is on or off (that is
 * where the window is measured from). A mask together with causal: both apply (a key must pass
 * both; PyTorch refuses the pair, kite defines it). lse: NULL or f32 [B, Hq, Sq]. */
KITE_API kite_status kite_sdpa(kite_ctx *ctx, const DLTensor *q, const DLTensor *k,
                               const DLTensor *v, const DLTensor *mask, const DLTensor *sinks,
                               const kite_attn_opts *opts, DLTensor *o, DLTensor *lse);

/* Rows per scale block of kite_sdpa_fp8's inputs: one f32 scale for each 128 consecutive rows
 * (sequence positions) of one (batch, head). */
#define KITE_FP8_ATTN_BLOCK 128

/* Dense attention over FP8 inputs with per-block scales (Hopper's FP8 attention).
 * q[B, Hq, Sq, D], k/v[B, Hkv, Sk, D]: e4m3 (KITE_DL_FLOAT8_E4M3FN), any strides with unit-stride
 * D; Hq a multiple of Hkv (opts.gqa gives the layout, as for kite_sdpa), 1 <= D <= 256.
 * q_scale[B, Hq, ceil(Sq / 128)], k_scale and v_scale[B, Hkv, ceil(Sk / 128)]: f32, compact, one
 * per block of KITE_FP8_ATTN_BLOCK rows. The op attends over the dequantized values
 *   q_f[b, h, i, d] = q[b, h, i, d] * q_scale[b, h, i / 128]     (likewise k_f, v_f over keys)
 * and its result is exactly kite_sdpa's on q_f, k_f, v_f with opts.scale (0 -> 1/sqrt(D)) and
 * opts.causal (the same alignment: query i sees keys j <= i + Sk - Sq), no mask, no sinks.
 * o[B, Hq, Sq, D]: bf16, f16 or f32 (its dtype picks; any strides with unit-stride D);
 * lse: NULL or f32 [B, Hq, Sq].
 * Accuracy: kernels may round P (the softmax weights) and the dequantized V to bf16 before P V,
 * as the bf16 kite_sdpa kernels round P, so o matches the exact value within bf16 tolerance
 * whatever o's dtype; the products of e4m3 values in Q K^T are exact in f32.
 * Errors: those of kite_sdpa (shapes, strides, devices, overlaps); q, k or v not e4m3 and o not
 * a float dtype (the argument named); a scale not f32, not compact or not of its shape (named);
 * opts.softcap != 0 or opts.window_left != -1 is KITE_ERR_UNSUPPORTED naming the option. */
KITE_API kite_status kite_sdpa_fp8(kite_ctx *ctx, const DLTensor *q, const DLTensor *k,
                                   const DLTensor *v, const DLTensor *q_scale,
                                   const DLTensor *k_scale, const DLTensor *v_scale,
                                   const kite_attn_opts *opts, DLTensor *o, DLTensor *lse);

/* kite_sdpa_fp8's inputs from float ones: x[B, H, S, D] (f32, f16 or bf16; any strides with
 * unit-stride D) -> q[B, H, S, D] e4m3 (KITE_DL_FLOAT8_E4M3FN; any strides with unit-stride D)
 * and scales[B, H, ceil(S / 128)] f32 compact. Per block of KITE_FP8_ATTN_BLOCK rows of one
 * (b, h) (every element of those rows): amax = max |x| over its finite elements,
 * scale = amax / 448 (an f32 division), and each code is x / scale (an f32 division) rounded to
 * the nearest e4m3 value, ties to even, saturating at +-448 (+-inf included); NaN stays NaN. A
 * block whose scale is 0 (no finite nonzero element, or amax / 448 underflows) gets scale 1 and
 * codes 0. Every backend gives the same bits.
 * Errors: x not float (UNSUPPORTED) or not of rank 4 with unit-stride D; q not e4m3 or not x's
 * shape; scales not f32 compact of that shape; devices; q or scales overlapping x or each other
 * (the argument named). */
KITE_API kite_status kite_quant_fp8_blocks(kite_ctx *ctx, const DLTensor *x, DLTensor *q,
                                           DLTensor *scales);

/* Dense attention over packed sequences (FlashAttention's varlen form, packed-sequence
 * training). q[Tq, Hq, D], k/v[Tk, Hkv, D] (token and head strides free, D unit-stride) hold B
 * sequences back to back: sequence b's queries are rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of
 * q, its keys rows [cu_seqlens_k[b], cu_seqlens_k[b + 1]) of k and v (cu_seqlens_* [B + 1] int32,
 * starting at 0, nondecreasing, ending at Tq / Tk). Within a sequence everything is kite_sdpa's
 * rule with Sq, Sk its lengths (causal aligns its last query with its last key; the window is
 * measured from query i's position i + Sk - Sq); no mask. max_seqlen_q / max_seqlen_k (>= 1 when
 * the tensors are not empty) bound every sequence's length: device kernels size their grids by
 * them. -> o[Tq, Hq, D], lse NULL or f32 [Tq, Hq].
 * Index values: on a CPU ctx cu_seqlens not starting at 0, decreasing, not ending at Tq / Tk, or a
 * length above its max_seqlen is INVALID_ARG. On a device they are read by the kernels, which
 * never read or write outside the tensors whatever they hold (the rows of a sequence longer than
 * its bound are unspecified). */
KITE_API kite_status kite_sdpa_varlen(kite_ctx *ctx, const DLTensor *q, const DLTensor *k,
                                      const DLTensor *v, const DLTensor *cu_seqlens_q,
                                      const DLTensor *cu_seqlens_k, int64_t max_seqlen_q,
                                      int64_t max_seqlen_k, const DLTensor *sinks,
                                      const kite_attn_opts *opts, DLTensor *o, DLTensor *lse);

/* Backward of kite_sdpa. q, k, v, mask, sinks, opts: the forward's arguments; o and lse (f32
 * [B, Hq, Sq], required, the sink included) its outputs; dout[B, Hq, Sq, D] the gradient of o (q's
 * dtype). Writes (overwrites) dq[B, Hq, Sq, D] and dk, dv[B, Hkv, Sk, D], q's dtype, any strides
 * with unit-stride D.
 * With s the scaled score of the forward, t = softcap > 0 ? softcap * tanh(s / softcap) : s,
 * u = t + float mask (masked-out keys have p = 0), p = exp(u - lse), delta_i = sum_d dout.o:
 *   dv_j = sum_i p_ij dout_i          dp_ij = dout_i . v_j          du_ij = p_ij (dp_ij - delta_i)
 *   ds_ij = du_ij (softcap > 0 ? 1 - tanh(s_ij / softcap)^2 : 1)
 *   dq_i = scale sum_j ds_ij k_j      dk_j = scale sum_i ds_ij q_i
 * dk and dv of a kv head sum over the query heads that read it (GQA) in a fixed order: the same
 * bits run after run. dq is the same bits run after run too (CUDA's tensor-core kernels add the
 * key blocks' dq terms in f32 in a fixed order). A query that saw no key (lse = -inf) contributes
 * nothing.
 * The mask gets no gradient.
 * Sinks: the formulas above hold as they are (p comes from the lse that includes the sink, and the
 * sink has no value, so delta_i = dout_i . o_i is still sum_j p_ij dp_ij). The sink is one more
 * softmax input of row i with probability p_sink,i = exp(sinks[h] - lse_i) and dp_sink,i = 0, so
 * the softmax rule du = p (dp - delta) gives du_sink,i = -p_sink,i delta_i, and summed over the
 * rows that share it:
 *   dsinks[h] = -sum_i exp(sinks[h] - lse_i) delta_i     over every query i of head h, all batches
 * dsinks: NULL (not computed) or f32 [Hq] compact, overwritten, summed in f32 or better in a fixed
 * order (the same bits run after run); a query with lse = -inf adds nothing.
 * Errors: those of kite_sdpa, dout / o not q's shape, dk / dv not k's shape, dsinks not f32 [Hq]
 * compact, dsinks given with sinks NULL (an error naming sinks), an output overlapping an input or
 * another output. */
KITE_API kite_status kite_sdpa_backward(kite_ctx *ctx, const DLTensor *q, const DLTensor *k,
                                        const DLTensor *v, const DLTensor *mask,
                                        const DLTensor *sinks, const kite_attn_opts *opts,
                                        const DLTensor *o, const DLTensor *lse,
                                        const DLTensor *dout, DLTensor *dq, DLTensor *dk,
                                        DLTensor *dv, DLTensor *dsinks);

/* Backward of kite_sdpa_varlen, by kite_sdpa_backward's formulas within each sequence. o[Tq, Hq,
 * D] and lse (f32 [Tq, Hq], required) from the forward, dout[Tq, Hq, D]; writes dq[Tq, Hq, D], dk,
 * dv[Tk, Hkv, D], and dsinks[Hq] (NULL or f32, summed over every packed query of head h) as
 * kite_sdpa_backward does. Index values as for kite_sdpa_varlen; on a device the key rows that no
 * sequence covers get zeros. */
KITE_API kite_status kite_sdpa_varlen_backward(kite_ctx *ctx, const DLTensor *q, const DLTensor *k,
                                               const DLTensor *v, const DLTensor *cu_seqlens_q,
                                               const DLTensor *cu_seqlens_k, int64_t max_seqlen_q,
                                               int64_t max_seqlen_k, const DLTensor *sinks,
                                               const kite_attn_opts *opts, const DLTensor *o,
                                               const DLTensor *lse, const DLTensor *dout,
                                               DLTensor *dq, DLTensor *dk, DLTensor *dv,
                                               DLTensor *dsinks);

/* --- MLA: multi-head latent attention (DeepSeek-V2/V3) ----------------------------------------
 * The cache keeps, per token, the compressed latent c_kv[R] (R = kv_lora_rank, the output of
 * kv_a_layernorm) and the shared rope key k_pe[P] (P = qk_rope_head_dim, already rotated): one
 * key/value "head" that every query head reads. Per layer two caches, compact, one dtype (f32,
 * f16 or bf16): ckv_cache[num_blocks, block_size, R] and kpe_cache[num_blocks, block_size, P]
 * (paged_decode's layout with Hkv = 1, the head dim dropped). Slots, block tables and seq_lens
 * follow the paged ops: slot = block * block_size + offset; block_table[B, max_blocks] int32
 * (row-strided allowed) maps sequence b's logical block j to a physical block. 1 <= R <= 1024,
 * 1 <= P <= 256.
 *
 * Decode runs in the absorbed form (DeepSeek-V2, section 2.1.3): with q_nope[H, Dn] of a head,
 * W_UK[H, Dn, R] and W_UV[H, Dv, R] the two halves of kv_b_proj, the caller passes
 * q_lat = q_nope W_UK (R wide) and multiplies the output by W_UV^T; then
 *   score_j = scale (q_lat . c_kv_j + q_pe . k_pe_j),   o = sum_j softmax(score)_j c_kv_j,
 * which equals attention over the decompressed keys [W_UK c_kv_j, k_pe_j] and values W_UV c_kv_j.
 * scale: 1/sqrt(qk_nope_head_dim + qk_rope_head_dim) (1/sqrt(192) in DeepSeek-V3), times
 * kite_rope_yarn_mscale(factor, mscale_all_dim)^2 when the model uses yarn; the op has no
 * default since R + P is not the head dim the scale belongs to.
 * Prefill expands: k = [W_UK c_kv, k_pe] (Dqk = 192), v = W_UV c_kv (Dv = 128), then kite_sdpa /
 * kite_sdpa_varlen, whose head dims must agree: pad v with Dqk - Dv zero columns and keep the
 * first Dv columns of o (zero columns of v add nothing to the others, so this is exact). */

/* Writes c_kv[T, R] and k_pe[T, P] (row-strided allowed, e.g. the two slices of
 * kv_a_proj_with_mqa's output after the norm and rope) into the caches at slots[T] int32, by
 * copy. A negative slot skips the token (padding). A slot >= num_blocks * block_size is an error
 * on a CPU ctx (nothing is written); on a device the token is skipped (KITE_CHECK_INDICES
 * reports it). Errors: dtypes that differ, caches not [num_blocks, block_size, R | P] compact,
 * the two caches' blocks differing, slots not int32 [T], caches overlapping inputs or each
 * other. */
KITE_API kite_status kite_mla_store_kv(kite_ctx *ctx, const DLTensor *c_kv, const DLTensor *k_pe,
                                       DLTensor *ckv_cache, DLTensor *kpe_cache,
                                       const DLTensor *slots);

/* Absorbed MLA decode, one query token per sequence: q_nope[B, H, R] (already multiplied by
 * W_UK) and q_pe[B, H, P] (rotated), any batch and head strides, unit-stride last dim; the two
 * caches; block_table[B, max_blocks], seq_lens[B] int32 (0 gives zeros; the keys are positions
 * 0 .. seq_len - 1) -> o[B, H, R] (the cache's dtype; multiply by W_UV outside), lse NULL or f32
 * [B, H] (natural log of sum_j exp(score_j)). Softmax in f32 or better, o rounded once.
 * scale: finite and > 0 (see above). Index values as kite_paged_decode: on a CPU ctx a seq_len
 * outside [0, max_blocks * block_size] or a block id outside [0, num_blocks) among a sequence's
 * first ceil(seq_len / block_size) entries is INVALID_ARG; on a device a negative seq_len counts
 * as 0, one past the table is clamped, the keys of an out-of-range block id are absent.
 * Errors: dtypes that differ, shapes that do not fit, scale <= 0 or not finite, o or lse
 * overlapping an input or each other. */
KITE_API kite_status kite_mla_decode(kite_ctx *ctx, const DLTensor *q_nope, const DLTensor *q_pe,
                                     const DLTensor *ckv_cache, const DLTensor *kpe_cache,
                                     const DLTensor *block_table, const DLTensor *seq_lens,
                                     float scale, DLTensor *o, DLTensor *lse);

/* --- GEMM, MoE, quantization ---------------------------------------------------------------- */
/* y[M, N] = x[M, K] w[N, K]^T + bias[N]. x, w, y f32/f16/bf16, all the same dtype; bias NULL or
 * the same dtype. x, w and y may be row-strided. Accumulation in f32 or better. */
KITE_API kite_status kite_linear(kite_ctx *ctx, const DLTensor *x, const DLTensor *w,
                                 const DLTensor *bias, DLTensor *y);

/* Rows of x[M, K] come in G consecutive groups of group_sizes[G] int32 rows (sum = M; a group
 * may be empty); group g's rows are multiplied by w[g] ([G, N, K]): y[M, N].
 * On a CPU ctx a negative size or sizes not summing to M are INVALID_ARG. On a device a negative
 * size counts as 0, rows past M are ignored and rows of y past the sum are zeros
 * (KITE_CHECK_INDICES reports such sizes). */
KITE_API kite_status kite_group_gemm(kite_ctx *ctx, const DLTensor *x, const DLTensor *w,
                                     const DLTensor *group_sizes, DLTensor *y);

/* logits[T, E] (float) -> softmax over E in f32, then the k largest (ties: lower expert id
 * first): weights[T, k] f32, ids[T, k] int32, in descending weight order. renormalize != 0
 * divides the k weights by their sum. 1 <= k <= E. */
KITE_API kite_status kite_topk_gating(kite_ctx *ctx, const DLTensor *logits, int64_t k,
                                      int renormalize, DLTensor *weights, DLTensor *ids);

/* Activation of the gated MoE MLP: silu, or gelu with erf (x * Phi(x), kite_gelu's; not the tanh
 * approximation); swiglu_oai (gpt-oss's, kite_fused_moe_ex only: see there). */
typedef enum kite_moe_act {
  KITE_MOE_SILU = 0,
  KITE_MOE_GELU = 1,
  KITE_MOE_SWIGLU_OAI = 2
} kite_moe_act;

/* y[T, H] = sum over j < k of weights[t, j] * w2[e] (act(gate) * up), with e = ids[t, j],
 * [gate; up] = w13[e] x[t] (w13[E, 2I, H]: rows [0, I) gate, [I, 2I) up; w2[E, H, I]).
 * x, w13, w2, y the same float dtype; weights[T, k] f32; ids[T, k] int32 (an id outside
 * [0, E) contributes nothing). The intermediate [*, I] is rounded to the dtype once. */
KITE_API kite_status kite_fused_moe(kite_ctx *ctx, const DLTensor *x, const DLTensor *w13,
                                    const DLTensor *w2, const DLTensor *weights,
                                    const DLTensor *ids, kite_moe_act act, DLTensor *y);

/* --- MoE routing of today's models, gpt-oss experts, the load-balancing loss -----------------
 * kite_moe_route is one router for the families of routers in use; kite_topk_gating stays as the
 * Mixtral form's short name (KITE_ROUTE_SOFTMAX, renormalize, no bias, no groups). */
typedef enum kite_route_score {
  /* Mixtral, Qwen2/3-MoE: s = softmax(logits) over all E experts */
  KITE_ROUTE_SOFTMAX = 0,
  /* DeepSeek-V3: s = sigmoid(logits) per expert */
  KITE_ROUTE_SIGMOID = 1,
  /* gpt-oss: top-k on z = logits + bias (the router's linear bias), then the weights are the
   * softmax of the k chosen z alone */
  KITE_ROUTE_SOFTMAX_TOPK = 2,
} kite_route_score;

typedef struct kite_route_opts {
  int64_t k;              /* experts per token, 1 <= k <= E */
  kite_route_score score; /* how a logit becomes a score */
  int32_t n_group;        /* >= 1; E % n_group == 0; 1: no groups */
  int32_t topk_group;     /* groups kept, 1 <= topk_group <= n_group; k <= topk_group * E/n_group */
  int32_t renormalize;    /* != 0: divide the k weights by their sum (norm_topk_prob) */
  float scaling;          /* routed_scaling_factor: multiplies the final weights (1: off) */
} kite_route_opts;

/* k 1, softmax, n_group 1, topk_group 1, renormalize 0, scaling 1. */
KITE_API kite_route_opts kite_route_opts_default(void);

/* Router: logits[T, E] (f32/f16/bf16, row-strided allowed), bias NULL or f32 [E] (compact) ->
 * weights[T, k] f32 and ids[T, k] int32 (row-strided allowed), per token:
 *   1. scores s_e: softmax over E, or sigmoid, in f32 or better; SOFTMAX_TOPK: s_e = z_e =
 *      logit_e + bias_e.
 *   2. choice keys c_e = s_e + bias_e in f32 (s_e rounded to f32 first; SOFTMAX_TOPK: c_e =
 *      z_e), NaN counting as -inf. The bias (DeepSeek-V3's e_score_correction_bias) steers the
 *      choice only: the weights come from s. With bias NULL and n_group 1 the keys are the
 *      logits themselves, which order the experts as s does (so every backend chooses alike
 *      however its exp rounds).
 *   3. groups (n_group = G > 1): experts [g E/G, (g+1) E/G) form group g; a group's key is the
 *      f32 sum of its two largest c (its one c when E/G is 1); the topk_group groups with the
 *      largest keys are kept (ties: lower group id), the experts of the others are out.
 *   4. ids: the k experts with the largest c among those left, in descending c order (ties:
 *      lower expert id first; NaN counts as -inf).
 *   5. weights: w_j = s_{ids_j}; SOFTMAX_TOPK: w = softmax over the k chosen z. renormalize:
 *      w_j /= (sum of the k w) + 1e-20 (DeepSeek-V3's guard; a sum of 0 gives 0 weights).
 *      Then w_j *= scaling.
 * opts is required (k has no default: start from kite_route_opts_default()). The models:
 *   Mixtral / Qwen3-MoE: SOFTMAX, renormalize = norm_topk_prob, bias NULL.
 *   DeepSeek-V3: SIGMOID, bias = e_score_correction_bias, n_group 8, topk_group 4, renormalize,
 *                scaling = routed_scaling_factor (2.5).
 *   gpt-oss: SOFTMAX_TOPK, bias = the router's bias (or NULL when the logits include it).
 * Errors (INVALID_ARG, nothing written): opts NULL, shapes and dtypes, k, n_group or topk_group out
 * of range, E not a multiple of n_group, fewer than k experts in topk_group groups. */
KITE_API kite_status kite_moe_route(kite_ctx *ctx, const DLTensor *logits, const DLTensor *bias,
                                    const kite_route_opts *opts, DLTensor *weights, DLTensor *ids);

/* KITE_MOE_SWIGLU_OAI, gpt-oss's clamped SwiGLU (with kite_moe_opts' alpha and limit):
 *   a = (up + 1) * gate * sigmoid(alpha * gate)   (gate and up clamped first when limit > 0);
 * silu and gelu are the plain gated forms a = act(gate) * up. */

/* Layout of the 2I rows of each w13[e] (and of b13[e]). */
typedef enum kite_moe_layout {
  KITE_MOE_SPLIT = 0,      /* rows [0, I) gate, [I, 2I) up (kite_fused_moe's) */
  KITE_MOE_INTERLEAVED = 1 /* row 2i gate i, row 2i+1 up i: gpt-oss's gate_up_proj [E, H, 2I]
                            * (its columns: read with kite_moe_opts.transposed) */
} kite_moe_layout;

typedef struct kite_moe_opts {
  kite_moe_act act;       /* KITE_MOE_SILU, KITE_MOE_GELU or KITE_MOE_SWIGLU_OAI */
  kite_moe_layout layout; /* of w13 and b13 */
  float alpha;            /* SWIGLU_OAI's sigmoid slope (gpt-oss: 1.702); unused otherwise */
  float limit;            /* > 0: gate clamped to <= limit, up to [-limit, limit] before the
                           * activation, for every act (gpt-oss: 7.0); 0: no clamp */
  int32_t transposed;     /* 0: w13 [E, 2I, H], w2 [E, H, I] (rows = outputs); 1: both stored
                           * transposed, w13 [E, H, 2I] (its 2I columns in layout's order) and
                           * w2 [E, I, H] (columns = outputs), read in place: gpt-oss's
                           * gate_up_proj and down_proj as they are */
} kite_moe_opts;

/* act silu, split layout, alpha 1.702, limit 0, not transposed. */
KITE_API kite_moe_opts kite_moe_opts_default(void);

/* kite_fused_moe with expert biases, the clamp, gpt-oss's activation and the interleaved layout:
 *   [gate; up] = w13[e] x[t] + b13[e]  (the 2I rows in opts.layout's order),
 *   a = the activation of opts (clamped first when limit > 0), rounded to the dtype once,
 *   y[t] = sum over j < k of weights[t, j] * (w2[e] a + b2[e]),  e = ids[t, j].
 * b13 NULL or [E, 2I], b2 NULL or [E, H], compact, of x's dtype; the rest as kite_fused_moe
 * (ids outside [0, E) contribute nothing, bias included). opts NULL = defaults, which with
 * b13 = b2 = NULL is kite_fused_moe(act silu).
 * Shared experts (DeepSeek, Qwen2-MoE) are not routed: a caller computes them as a plain gated
 * MLP, kite_linear(x, w_gate_up) -> kite_silu_and_mul -> kite_linear(., w_down), scales it (Qwen2-
 * MoE's sigmoid shared_expert_gate: a [T, 1] column) and adds it to y; or passes the shared
 * expert as one more expert of w13/w2 with weight 1 (or its gate) in an extra column of
 * weights/ids.
 * With opts.transposed, w13[e] and w2[e] above stand for the transposes of the stored
 * [H, 2I] and [I, H] matrices (gpt-oss: gate_up_proj, gate_up_proj_bias as b13, down_proj,
 * down_proj_bias as b2, layout interleaved, act swiglu_oai, alpha 1.702, limit 7).
 * Experts kept in GGUF blocks as stored (gpt-oss's MXFP4) run through kite_group_gemm_gguf on
 * the tokens sorted by expert: gate_up (with b13), the activation above on its interleaved
 * gate / up columns, then down (with b2); fused_moe_ex itself takes float weights only.
 * Errors: as kite_fused_moe, plus bias shapes and dtypes, act, layout, alpha not finite,
 * limit < 0 or not finite, transposed not 0 or 1; w13 and w2 shaped for the other orientation
 * (w13 not [E, H, 2I] or w2 not [E, I, H] when transposed) are INVALID_ARG. */
KITE_API kite_status kite_fused_moe_ex(kite_ctx *ctx, const DLTensor *x, const DLTensor *w13,
                                       const DLTensor *b13, const DLTensor *w2, const DLTensor *b2,
                                       const DLTensor *weights, const DLTensor *ids,
                                       const kite_moe_opts *opts, DLTensor *y);

/* The auxiliary load-balancing loss of Switch Transformer / Mixtral, as transformers'
 * load_balancing_loss_func computes it: logits[T, E] (f32/f16/bf16, row-strided allowed: the
 * router logits; for several layers, their rows stacked), ids[T, k] int32 (row-strided allowed;
 * the experts each token was sent to: the top-k of softmax(logits), kite_topk_gating's ids, or
 * any router's), mask NULL or f32 [T] (token weights, 1 for real tokens and 0 for padding; NULL:
 * all 1):
 *   p_t = softmax(logits_t) (f32 or better),  M = sum_t m_t,
 *   c_e = sum_t m_t * #{j : ids[t, j] = e}    (ids outside [0, E) count nowhere),
 *   P_e = sum_t m_t p_t,e,
 *   loss = E * sum_e (c_e / M) (P_e / M)      -> loss f32 [1]; 0 when M = 0 (or T = 0).
 * Each token's k choices all count (the loss of k-hot routing is about k at balance). */
KITE_API kite_status kite_moe_aux_loss(kite_ctx *ctx, const DLTensor *logits, const DLTensor *ids,
                                       const DLTensor *mask, DLTensor *loss);

/* Its backward w.r.t. the logits (ids and mask are constants): dloss f32 [1] ->
 *   dlogits_t,e = dloss * (E / M^2) * m_t * p_t,e * (c_e - sum_j c_j p_t,j)
 * of logits' dtype and shape (row-strided allowed; 0 everywhere when M = 0). dlogits never
 * overlaps the inputs. Errors: as the forward's, plus dloss and dlogits shapes. */
KITE_API kite_status kite_moe_aux_loss_backward(kite_ctx *ctx, const DLTensor *logits,
                                                const DLTensor *ids, const DLTensor *mask,
                                                const DLTensor *dloss, DLTensor *dlogits);

/* Dynamic per-token symmetric quantization: x[M, K] float -> q[M, K] int8 or fp8-e4m3
 * (KITE_DL_FLOAT8_E4M3FN), scales[M] f32 with scale = amax(|x row|) / qmax (qmax 127 for int8,
 * 448 for e4m3); q = clamp(round_nearest_even(x / scale), -qmax, qmax) (for e4m3: x / scale
 * rounded to the nearest e4m3 value, ties to even, saturating at +-448; NaN stays NaN). A zero
 * row gets scale 0 and q 0. The quotient x / scale is an f32 division on every backend, so codes
 * agree bit for bit. amax is taken over the finite elements: NaN and +-inf do not set the scale,
 * +-inf then saturates to +-qmax (e4m3: +-448) and NaN becomes 0 in int8 (NaN in e4m3); a row
 * with no finite nonzero element gets scale 0 and q 0. */
KITE_API kite_status kite_quant(kite_ctx *ctx, const DLTensor *x, DLTensor *q, DLTensor *scales);

/* y[M, K] (float) = q[M, K] * scales[M]: the exact product (at most 8 + 24 significant bits),
 * rounded once to y's dtype, so every backend agrees bit for bit. */
KITE_API kite_status kite_dequant(kite_ctx *ctx, const DLTensor *q, const DLTensor *scales,
                                  DLTensor *y);

/* y[M, N] = (xq[M, K] . wq[N, K]^T) * x_scales[M] * w_scales[N] + bias[N]: xq, wq int8 (int32
 * accumulation, exact) or both fp8-e4m3 (f32 accumulation); scales f32; bias NULL or y's dtype;
 * y f32/bf16/f16. */
KITE_API kite_status kite_linear_quant(kite_ctx *ctx, const DLTensor *xq, const DLTensor *x_scales,
                                       const DLTensor *wq, const DLTensor *w_scales,
                                       const DLTensor *bias, DLTensor *y);

/* ---------------------------------------------------------------------------------------------
 * Training: backward ops and losses.
 *
 * A backward op takes the forward op's inputs (not its outputs, unless it says so) and the
 * gradient dy of the forward output, and returns the gradients of the inputs: every backward
 * recomputes what it needs (norm statistics, activations) from those inputs, so nothing has to be
 * saved beyond them. Gradients have the dtype of the tensor they belong to; arithmetic is f32 or
 * better inside and each gradient is rounded once.
 *
 * Reductions over rows (dw and db of the norms, dtable of embedding, dw and db of
 * fused_linear_cross_entropy) are deterministic: the same bits run after run on one backend,
 * whatever the thread count or grid (fixed-order partial sums over fixed blocks of rows, then a
 * fixed-order reduction of the blocks). Gradient outputs are overwritten, never accumulated into.
 * ------------------------------------------------------------------------------------------- */

/* Activation backward: dx = dy * act'(x) for act one of KITE_OP_SILU, KITE_OP_GELU,
 * KITE_OP_GELU_TANH, KITE_OP_GELU_QUICK, KITE_OP_RELU (relu' is 1 for x > 0, else 0).
 * Past |x| = 128 and at +-inf the smooth ones take their limits on every backend: act'(x) = 0
 * for x < -128 and 1 for x > 128 (and act = -0 and x there, as in the forward); NaN gives NaN.
 * x, dy, dx [..., N], same shape and dtype; dx may be dy (in place), never x.
 * Errors: act not one of those, mismatched shapes or dtypes. */
KITE_API kite_status kite_activation_backward(kite_ctx *ctx, kite_op act, const DLTensor *x,
                                              const DLTensor *dy, DLTensor *dx);

/* Gated activation backward, act one of KITE_OP_SILU_AND_MUL, KITE_OP_GELU_AND_MUL,
 * KITE_OP_GELU_TANH_AND_MUL: x[..., 2I] (the forward input), dy[..., I] -> dx[..., 2I]:
 *   d gate = dy * up * act'(gate),   d up = dy * act(gate).
 * With limit > 0 (the forward's clamp) the clamped values are used, and the gradient is 0 where
 * the clamp was active: gate > limit, or |up| > limit. Same dtype for all; dx may be x itself (in
 * place: the same data, shape and strides; a training step then holds one [.., 2I] buffer, not
 * two), never any other overlap with x, nor with dy. Errors: as the forward's, plus dx not x's
 * shape. */
KITE_API kite_status kite_gated_backward(kite_ctx *ctx, kite_op act, const DLTensor *x,
                                         const DLTensor *dy, float limit, DLTensor *dx);

/* rms_norm backward. x[..., H] (the norm's input), w[H] or NULL, dy[..., H], eps and offset as
 * in the forward -> dx[..., H] and, when dw is not NULL, dw[H] = sum over rows of dy * x * rstd,
 * the gradient of w in (offset + w), which does not depend on w's value (so it is also given
 * with w NULL: the gradient a weight would get). dx may be dy (in place), never x.
 * Errors: mismatched shapes or dtypes, outputs overlapping inputs. */
KITE_API kite_status kite_rms_norm_backward(kite_ctx *ctx, const DLTensor *x, const DLTensor *w,
                                            const DLTensor *dy, float eps, float offset,
                                            DLTensor *dx, DLTensor *dw);

/* layer_norm backward. x[..., H], w[H] or NULL (b is not needed), dy -> dx, and optionally
 * dw[H] = sum dy * xhat and db[H] = sum dy (neither depends on w or b, so both may be asked for
 * with w NULL). dx may be dy, never x. */
KITE_API kite_status kite_layer_norm_backward(kite_ctx *ctx, const DLTensor *x, const DLTensor *w,
                                              const DLTensor *dy, float eps, DLTensor *dx,
                                              DLTensor *dw, DLTensor *db);

/* Backward of add_rms_norm / add_layer_norm under the pre rule (KITE_NORM_PRE), the only rule of
 * the two that training uses: the forward left s = x + residual in residual and y = norm(s).
 * Given s (the residual after the forward), dy and dres (the gradient reaching the residual
 * output from later layers; NULL means zero), the gradient of the sum is
 *   ds = norm_backward(s, dy) + dres,
 * and it is the gradient of both x and the residual input: one tensor dx[..., H]. dx may be dy
 * or dres (in place), never s. dw, db as in the plain backward. */
KITE_API kite_status kite_add_rms_norm_backward(kite_ctx *ctx, const DLTensor *s, const DLTensor *w,
                                                const DLTensor *dy, const DLTensor *dres, float eps,
                                                float offset, DLTensor *dx, DLTensor *dw);
KITE_API kite_status kite_add_layer_norm_backward(kite_ctx *ctx, const DLTensor *s,
                                                  const DLTensor *w, const DLTensor *dy,
                                                  const DLTensor *dres, float eps, DLTensor *dx,
                                                  DLTensor *dw, DLTensor *db);

/* rope backward, in place: dq[T, Hq, D] and dk[T, Hkv, D] (dk may be NULL) hold the gradients of
 * the rotated q and k and become those of the unrotated ones: each pair is rotated by -theta
 * (the transpose of the forward rotation); the dims past rot_dim pass through. Arguments and
 * errors as kite_rope's. */
KITE_API kite_status kite_rope_backward(kite_ctx *ctx, DLTensor *dq, DLTensor *dk,
                                        const DLTensor *positions, const DLTensor *cos_sin,
                                        int64_t rot_dim, kite_rope_style style);

/* softmax backward from the forward OUTPUT y = softmax(scale * x) and dy, all [..., N], same
 * dtype: dx = scale * y * (dy - sum_j(dy_j * y_j)). dx may be dy, never y. */
KITE_API kite_status kite_softmax_backward(kite_ctx *ctx, const DLTensor *y, const DLTensor *dy,
                                           float scale, DLTensor *dx);

/* embedding backward: dtable[V, H] = scatter-add of dy[T, H] rows at ids[T] int32 (row-strided
 * dy and dtable allowed; dtable of dy's dtype). Rows of dtable no id names are zero; ids outside
 * [0, V) are ignored, as the forward gave them a zero row. Each row is summed in token order
 * (f32 or better), so the result is deterministic. */
KITE_API kite_status kite_embedding_backward(kite_ctx *ctx, const DLTensor *ids, const DLTensor *dy,
                                             DLTensor *dtable);

/* --- Cross-entropy -----------------------------------------------------------------------------
 * Per row i of logits[N, V] (f32/f16/bf16, row-strided allowed) with target t = targets[i]
 * (int32):
 *   z_j  = softcap > 0 ? softcap * tanh(x_j / softcap) : x_j       (Gemma 2's logit cap)
 *   lse  = log sum_j exp(z_j)
 *   loss = lse - (1 - ls) z_t - (ls / V) sum_j z_j + z_loss * lse^2
 * with ls = label_smoothing (0: plain negative log-likelihood; the smoothed target puts ls / V on
 * every class, as PyTorch and Liger do). A row whose target equals ignore_index has loss 0 and a
 * zero gradient. The gradient of the row's loss: dloss/dz_j = p_j (1 + 2 z_loss lse)
 * - (1 - ls) [j = t] - ls / V, with p = softmax(z), times dz/dx = 1 - (z / softcap)^2.
 * reduction: none (a loss per row), sum, or mean over the rows that are not ignored (0 when all
 * are, and a zero gradient: never NaN; PyTorch's mean gives NaN there, 0 / 0). A target
 * outside [0, V) that is not ignore_index is an error where the backend can read targets (host
 * memory), checked before anything is written; a device kernel that cannot report it gives that row
 * a NaN loss and a zero gradient and never reads outside the row (KITE_CHECK_INDICES reports it at
 * the next synchronization). */
typedef enum kite_reduction {
  KITE_REDUCTION_NONE = 0,
  KITE_REDUCTION_SUM = 1,
  KITE_REDUCTION_MEAN = 2,
} kite_reduction;

typedef struct kite_ce_opts {
  int32_t ignore_index;  /* -100 by default (PyTorch's) */
  float label_smoothing; /* in [0, 1] */
  float z_loss;          /* >= 0: coefficient on lse^2 (0 off) */
  float softcap;         /* >= 0: 0 off */
  kite_reduction reduction;
} kite_ce_opts;

/* ignore_index -100, label_smoothing 0, z_loss 0, softcap 0, mean. */
KITE_API kite_ce_opts kite_ce_opts_default(void);

/* Forward: logits[N, V], targets[N] -> loss f32: [N] for reduction none, [1] for sum and mean;
 * lse: NULL or f32 [N], the log-sum-exp of each row's z (kept for the backward; also written for
 * ignored rows). opts NULL = defaults. V >= 1.
 * Errors: shapes, dtypes, V = 0, option values out of range, targets out of range (host). */
KITE_API kite_status kite_cross_entropy(kite_ctx *ctx, const DLTensor *logits,
                                        const DLTensor *targets, const kite_ce_opts *opts,
                                        DLTensor *loss, DLTensor *lse);

/* Backward: logits[N, V], targets[N], lse[N] f32 (from the forward), dloss f32 (the gradient of
 * the forward's loss: [N] for none, [1] for sum and mean) -> dlogits[N, V] of logits' dtype.
 * dlogits may be logits itself (the gradient written over the logits, saving N x V memory);
 * otherwise they must not overlap. */
KITE_API kite_status kite_cross_entropy_backward(kite_ctx *ctx, const DLTensor *logits,
                                                 const DLTensor *targets, const DLTensor *lse,
                                                 const DLTensor *dloss, const kite_ce_opts *opts,
                                                 DLTensor *dlogits);

/* Forward and backward in one pass over the logits (the training step's usual pair, without
 * reading the logits a second time): logits[N, V], targets[N] -> loss and lse exactly as
 * kite_cross_entropy gives them, and dlogits[N, V] of logits' dtype: the gradient of the reduced
 * loss (of sum(loss) for reduction none), i.e. kite_cross_entropy_backward's with dloss = 1 and
 * this lse. For a scalar upstream gradient g, scale dlogits by g (as for
 * fused_linear_cross_entropy). dlogits may be logits itself (the gradient written over the
 * logits); otherwise they must not overlap. lse: NULL or f32 [N]. opts NULL = defaults.
 * Errors: as kite_cross_entropy's, plus dlogits' shape, dtype and overlaps. */
KITE_API kite_status kite_cross_entropy_with_grad(kite_ctx *ctx, const DLTensor *logits,
                                                  const DLTensor *targets, const kite_ce_opts *opts,
                                                  DLTensor *loss, DLTensor *lse, DLTensor *dlogits);

/* Options of fused_linear_cross_entropy. */
typedef struct kite_flce_opts {
  kite_ce_opts ce;
  /* Bytes of scratch the op may use for its pieces of logits (0: 256 MiB). The [N, V] logits
   * are never materialized: they are computed a piece at a time, each piece as large as the
   * budget allows (at least one column or row, whatever the budget). */
  size_t chunk_bytes;
} kite_flce_opts;

/* kite_ce_opts_default() and chunk_bytes 0. */
KITE_API kite_flce_opts kite_flce_opts_default(void);

/* Linear layer and cross-entropy in one op, forward and backward together (the logits
 * logits = h w^T + bias never exist whole):
 * h[N, H], w[V, H], bias[V] or NULL (all one float dtype; h and w row-strided allowed),
 * targets[N] int32 -> loss f32 ([N] for none, [1] for sum / mean, as kite_cross_entropy), and
 * the gradients of the reduced loss (of sum(loss) for reduction none): dh[N, H], dw[V, H],
 * db[V] (each NULL when not wanted; db is the column sum of dlogits, also without bias), in h's
 * dtype. For a scalar upstream
 * gradient g, scale them by g. The products run through kite's linear kernels (the backend's
 * best GEMM) with the logits rounded to the dtype, as a separate linear then cross_entropy would.
 * Errors: as kite_cross_entropy's, plus h and w widths differing, gradient shapes. */
KITE_API kite_status kite_fused_linear_cross_entropy(kite_ctx *ctx, const DLTensor *h,
                                                     const DLTensor *w, const DLTensor *bias,
                                                     const DLTensor *targets,
                                                     const kite_flce_opts *opts, DLTensor *loss,
                                                     DLTensor *dh, DLTensor *dw, DLTensor *db);

/* --- Sampling and logits processing -----------------------------------------------------------
 * logits[B, V] f32/f16/bf16 (row-strided allowed); tokens[B] int32. Every per-row parameter
 * tensor is compact [B] on the ctx's device. Parameters and logits that live in host memory (the
 * ref and cpu backends) are checked by the kernel: a NaN logit or a bad parameter value is an
 * INVALID_ARG error naming the row (every token is still written, as a device would write it).
 * A device kernel cannot report them; it follows the rules below, and never writes a token
 * outside [0, V).
 *
 * Special logits, on every backend: NaN counts as -inf. A row whose largest logit is -inf gives
 * token 0. A row holding +inf gives the lowest index holding +inf (the limit of its softmax). */

/* tokens[b] = the lowest index of the largest logit of row b. */
KITE_API kite_status kite_argmax(kite_ctx *ctx, const DLTensor *logits, DLTensor *tokens);

/* Per-row sampling parameters of kite_sample; any tensor may be NULL (its default applies).
 *   temperature f32 [B] (NULL: 1): t < 1e-5 (KITE_SAMPLE_GREEDY_BELOW, vLLM's epsilon; 0
 *       included) is greedy (kite_argmax's token); a larger t samples from softmax(logits / t).
 *       Host-visible: negative or non-finite is an error; a device treats it as 0.
 *   top_k int32 [B] (NULL: off): keeps the logits >= the k-th largest (ties with it are kept);
 *       k <= 0 or k >= V is off.
 *   top_p f32 [B] (NULL: off): over the tokens top_k kept, with q their softmax(logits / t)
 *       renormalized, keeps token i when the mass of the tokens with a strictly larger logit is
 *       < top_p (so equal logits are kept or dropped together, and the largest is always kept).
 *       top_p >= 1 is off; top_p <= 0 keeps only the largest. Host-visible: NaN is an error; a
 *       device treats it as off.
 *   min_p f32 [B] (NULL: off): keeps token i when exp((l_i - max l) / t) >= min_p, i.e. its
 *       probability is at least min_p times the largest. min_p <= 0 is off. Host-visible: NaN is
 *       an error; a device treats it as off.
 *   The filters run in the order temperature, top-k, top-p, min-p: Hugging Face's
 *   (TopK, TopP then MinP logits warpers) and vLLM v0's order. min-p compares with the largest
 *   probability, which neither earlier filter removes, so its kept set does not depend on where
 *   it runs; top-p's does: its mass is taken over top-k's survivors, not min-p's. vLLM v1 applies
 *   min-p first (top-p's mass over min-p's survivors), so with both top-p and min-p set a row
 *   may keep tokens there that kite drops or the reverse: e.g. logits [3, 2.6, 2.2, 1, ...],
 *   top_p 0.8, min_p 0.12 keep {0, 1, 2, 3} here and {0, 1, 2} in vLLM v1. With either one
 *   alone the two orders agree.
 *   seeds int64 [B] (NULL: every row uses `seed`), steps int64 [B] (NULL: every row uses
 *   `step`): see kite_sample. A request that carries its own seed (vLLM's per-request seed) passes
 *   seeds and its own count of generated tokens in steps, and gets the same draws wherever it
 *   sits in the batch. */
typedef struct kite_sampling_params {
  const DLTensor *temperature;
  const DLTensor *top_k;
  const DLTensor *top_p;
  const DLTensor *min_p;
  const DLTensor *seeds;
  const DLTensor *steps;
  uint64_t seed;
  uint64_t step;
} kite_sampling_params;

/* Every tensor NULL (temperature 1, no filter), seed 0, step 0. */
KITE_API kite_sampling_params kite_sampling_params_default(void);

/* Draws tokens[b] from row b's filtered distribution (kite_sampling_params says which tokens are
 * kept), by the exponential race (Gumbel-max trick):
 *   token = argmax over kept i of ((l_i - max l) / t + g_i),  g_i = -log(-log(u_i)),
 * the lowest such i on an exact tie. u_i = (((x >> 9) + 0.5) / 2^23 is built from the 32-bit word
 * x = word (i % 4) of Philox-4x32-10 (include/kite/philox.h) with
 *   key     = (low, high 32 bits of the row's seed),
 *   counter = (i / 4, row id, low, high 32 bits of the row's step),
 * row id = b, or 0xffffffff for every row when seeds is given. Each token gets its own draw, so
 * the token depends on the scores of the kept tokens only through comparisons of two of them:
 * backends whose logits, temperatures and logarithms differ by a few rounding errors return the
 * same token unless two scores fall within those rounding errors of each other (about 1e-6 per
 * row for a vocabulary of 128k), and no sum or sort order can make them drift apart. The only
 * other near-tie is a filter's boundary (the top-p mass landing within rounding of top_p, or a
 * probability within rounding of min_p times the largest).
 * Rows with t = 0 (greedy) and sampled rows mix freely in one batch. */
KITE_API kite_status kite_sample(kite_ctx *ctx, const DLTensor *logits,
                                 const kite_sampling_params *params, DLTensor *tokens);

/* vLLM's penalties, in place on logits[B, V]: prompt_ids[B, Lp] and output_ids[B, Lo] int32
 * (either may be NULL; row-strided allowed; ids outside [0, V) are padding and ignored).
 * repetition, presence, frequency: f32 [B] or NULL (off). For each token id v of row b:
 *   seen in the prompt or the output, repetition r: l = l > 0 ? l / r : l * r;
 *   then with c = its count in the output: l -= frequency * c + presence * (c > 0).
 * repetition must be > 0 and finite, presence and frequency finite (vLLM's rules): on a host
 * ctx another value is INVALID_ARG naming the row, before anything is written; a device kernel
 * takes such a penalty as off (repetition 1, presence or frequency 0).
 * Each logit is read and rounded to its dtype once, whatever the repeats of its id. */
KITE_API kite_status kite_apply_penalties(kite_ctx *ctx, DLTensor *logits,
                                          const DLTensor *prompt_ids, const DLTensor *output_ids,
                                          const DLTensor *repetition, const DLTensor *presence,
                                          const DLTensor *frequency);

/* The logit softcap, in place on logits[B, V] (float, row-strided allowed):
 *   l = cap * tanh(l / cap)
 * computed in f32 or wider and rounded to the dtype once (Gemma 2's final_logit_softcapping,
 * which its engines apply to the logits before penalties and sampling: argmax is unchanged by it,
 * the sampled distribution is not). cap > 0 and finite, else INVALID_ARG; +-inf logits give
 * +-cap, NaN stays NaN. */
KITE_API kite_status kite_softcap(kite_ctx *ctx, DLTensor *logits, float cap);

/* Log-softmax values of logits[B, V] for clients: token_logprobs[B] f32 = log softmax of row b
 * at tokens[b] (int32 [B]; both NULL or both given; a token outside [0, V) gives NaN), and the
 * n largest (0 <= n <= 20, n <= V): top_ids[B, n] int32 in descending logit order (the lower id
 * first on ties) with top_logprobs[B, n] f32 (when n = 0 both NULL, or both [B, 0]: nothing). NaN
 * logits count as -inf. */
KITE_API kite_status kite_logprobs(kite_ctx *ctx, const DLTensor *logits, const DLTensor *tokens,
                                   int64_t n, DLTensor *token_logprobs, DLTensor *top_ids,
                                   DLTensor *top_logprobs);
#define KITE_LOGPROBS_MAX_N 20

/* --- 4-bit weights -------------------------------------------------------------------------- */
/* 4-bit weights in blocks of 32 consecutive values of a row (GGUF's Q4_0 and Q4_1 blocks, so such
 * files load without re-quantizing). Byte layout of one block, little endian:
 *   KITE_WQ4_SYM (18 bytes): f16 d, then 16 bytes qs;            value = (q - 8) * d
 *   KITE_WQ4_MIN (20 bytes): f16 d, f16 m, then 16 bytes qs;     value = q * d + m
 * where value j < 16 of the block has q = qs[j] & 15 and value j + 16 has q = qs[j] >> 4. */
typedef enum kite_wq4_format { KITE_WQ4_SYM = 0, KITE_WQ4_MIN = 1 } kite_wq4_format;
/* Bytes of one 32-value block of the format (18 or 20; 0 for an unknown format). */
KITE_API int64_t kite_wq4_block_bytes(kite_wq4_format format);

/* y[M, N] = x[M, K] w^T + bias[N] with w held in 4 bits: w is uint8 [N, K / 32 * block bytes],
 * row n the K / 32 blocks of output n in order (row-strided allowed). K must be a multiple of
 * 32. x, y and bias (NULL or [N]) f32/f16/bf16, all the same dtype; x and y may be row-strided.
 * The weights are decoded exactly (d and m to f32), the dot products accumulate in f32 or better
 * and y is rounded once. Errors: K not a multiple of 32, w's width not K / 32 blocks, unknown
 * format. */
KITE_API kite_status kite_linear_wq4(kite_ctx *ctx, const DLTensor *x, const DLTensor *w,
                                     kite_wq4_format format, const DLTensor *bias, DLTensor *y);

/* --- GGUF block weights ----------------------------------------------------------------------
 * Weights in the block types of GGUF files, used as stored. A row of K values is K / V blocks
 * of B bytes (V values each, in order); a block's fields follow one another without padding,
 * little endian; f16 is IEEE half, int8 two's complement. In every formula below d, m (dmin)
 * are the block's f16 fields as exact numbers, and the value of each weight is the formula in
 * exact arithmetic rounded once to f32 (what GGUF's reference dequantization gives, bit for bit).
 * Q4_0 and Q4_1 are the blocks of kite_linear_wq4 (SYM, MIN). Below, juxtaposition multiplies
 * (2 j is 2 * j), / is integer division and the bit operators are C's.
 *
 *   Q4_0    (2)  V 32,  B 18: f16 d, u8 qs[16]. Value j < 16: q = qs[j] & 15, value j + 16:
 *                q = qs[j] >> 4; w = (q - 8) d.
 *   Q4_1    (3)  V 32,  B 20: f16 d, f16 m, u8 qs[16]; q as Q4_0; w = q d + m.
 *   Q5_0    (6)  V 32,  B 22: f16 d, u8 qh[4], u8 qs[16]. h = qh as a u32 (little endian);
 *                value j < 16: q = (qs[j] & 15) | ((h >> j) & 1) << 4, value j + 16:
 *                q = (qs[j] >> 4) | ((h >> (j + 16)) & 1) << 4; w = (q - 16) d.
 *   Q5_1    (7)  V 32,  B 24: f16 d, f16 m, u8 qh[4], u8 qs[16]; q as Q5_0; w = q d + m.
 *   Q8_0    (8)  V 32,  B 34: f16 d, i8 qs[32]; w = qs[j] d.
 *   Q2_K   (10)  V 256, B 84: u8 scales[16], u8 qs[64], f16 d, f16 dmin. Value i = 128 h + 32 j + l
 *                (h < 2, j < 4, l < 32): q = (qs[32 h + l] >> 2 j) & 3, sub-block s = 8 h + 2 j +
 *                l / 16 (16 values each); w = d (scales[s] & 15) q - dmin (scales[s] >> 4).
 *   Q3_K   (11)  V 256, B 110: u8 hmask[32], u8 qs[64], u8 scales[12], f16 d. Value i = 128 h +
 *                32 j + l as Q2_K: q = ((qs[32 h + l] >> 2 j) & 3) - (bit 4 h + j of hmask[l] ?
 *                0 : 4), s = 8 h + 2 j + l / 16; 16 signed 6-bit scales: lo = s < 8 ?
 *                scales[s] & 15 : scales[s - 8] >> 4, hi = (scales[8 + s % 4] >> 2 (s / 4)) & 3,
 *                sc = (lo | hi << 4) - 32; w = d sc q.
 *   Q4_K   (12)  V 256, B 144: f16 d, f16 dmin, u8 scales[12], u8 qs[128]. Eight sub-blocks of
 *                32, each with a 6-bit scale sc and a 6-bit min mn, packed: for s < 4,
 *                sc = scales[s] & 63, mn = scales[s + 4] & 63; for 4 <= s < 8,
 *                sc = (scales[s + 4] & 15) | (scales[s - 4] >> 6) << 4,
 *                mn = (scales[s + 4] >> 4) | (scales[s] >> 6) << 4.
 *                Value i = 64 c + l (c < 4, l < 64): l < 32: q = qs[32 c + l] & 15, s = 2 c;
 *                l >= 32: q = qs[32 c + l - 32] >> 4, s = 2 c + 1; w = d sc q - dmin mn.
 *   Q5_K   (13)  V 256, B 176: f16 d, f16 dmin, u8 scales[12] (as Q4_K), u8 qh[32], u8 qs[128].
 *                Value 64 c + l as Q4_K with a fifth bit: q |= ((qh[l % 32] >> s) & 1) << 4
 *                (s = 2 c or 2 c + 1, the sub-block); w = d sc q - dmin mn.
 *   Q6_K   (14)  V 256, B 210: u8 ql[128], u8 qh[64], i8 scales[16], f16 d. Value i = 128 h +
 *                32 j + l (h < 2, j < 4, l < 32): lo = ql[64 h + 32 (j % 2) + l], low nibble for
 *                j < 2, high nibble for j >= 2; q = (lo | ((qh[32 h + l] >> 2 j) & 3) << 4) - 32;
 *                w = d scales[8 h + 2 j + l / 16] q.
 *   Q8_K   (15)  V 256, B 292: f32 d, i8 qs[256], i16 bsums[16] (not read); w = qs[i] d.
 *   IQ4_NL (20)  V 32,  B 18: f16 d, u8 qs[16]; q as Q4_0; w = d T[q] with T = {-127, -104, -83,
 *                -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}.
 *   MXFP4  (39)  V 32,  B 17: u8 e, u8 qs[16]; q as Q4_0 (value j < 16 the low nibble of qs[j],
 *                value j + 16 its high nibble); w = F[q] 2^(e - 128) with F = {0, 1, 2, 3, 4, 6,
 *                8, 12, 0, -1, -2, -3, -4, -6, -8, -12}: OCP microscaling's e2m1 code q (sign
 *                bit 3, F[q] / 2 its value) under the e8m0 scale 2^(e - 127). e = 255 is read
 *                as 2^127 (GGUF's reading; OCP's NaN is not honoured), and a product past f32's
 *                range rounds to +-inf; a zero code is +0. gpt-oss checkpoints hold the same
 *                values as `*_blocks` [.., K / 32, 16] and `*_scales` [.., K / 32] with the
 *                nibbles interleaved (low nibble of byte j value 2 j, high nibble 2 j + 1):
 *                repacking a block to this layout is nibble reordering only.
 */
typedef enum kite_gguf_type {
  KITE_GGUF_Q4_0 = 2,
  KITE_GGUF_Q4_1 = 3,
  KITE_GGUF_Q5_0 = 6,
  KITE_GGUF_Q5_1 = 7,
  KITE_GGUF_Q8_0 = 8,
  KITE_GGUF_Q2_K = 10,
  KITE_GGUF_Q3_K = 11,
  KITE_GGUF_Q4_K = 12,
  KITE_GGUF_Q5_K = 13,
  KITE_GGUF_Q6_K = 14,
  KITE_GGUF_Q8_K = 15,
  KITE_GGUF_IQ4_NL = 20,
  KITE_GGUF_MXFP4 = 39,
} kite_gguf_type;
/* Values (V) and bytes (B) of one block of `type` (either pointer may be NULL); KITE_OK, or
 * INVALID_ARG naming the type when kite does not run it (both set to 0 then). */
KITE_API kite_status kite_gguf_block_info(kite_gguf_type type, int64_t *block_values,
                                          int64_t *block_bytes);
/* "q4_k" for KITE_GGUF_Q4_K (GGUF's own lower-case names); NULL for a type kite does not run. */
KITE_API const char *kite_gguf_type_name(kite_gguf_type type);

/* y[M, N] = x[M, K] w^T + bias[N] with w in GGUF blocks of `type` as stored: w is uint8
 * [N, K / V * B] (V, B from kite_gguf_block_info), row n the blocks of output n in order
 * (row-strided allowed). K must be a multiple of V. x, y and bias (NULL or [N]) f32/f16/bf16, all
 * the same dtype; x and y may be row-strided. Weights are decoded as above, the dot products
 * accumulate in f32 or better and y is rounded once. Errors: a type kite does not run, K not a
 * multiple of V, w's width not K / V blocks. For Q4_0 / Q4_1 the result is kite_linear_wq4's. */
KITE_API kite_status kite_linear_gguf(kite_ctx *ctx, const DLTensor *x, const DLTensor *w,
                                      kite_gguf_type type, const DLTensor *bias, DLTensor *y);
/* kite_linear_gguf with x quantized to 8 bits first, as llama.cpp's CPU path does (its Q8_0 / Q8_K
 * activation blocks), so that the dot products run on integers: opt-in, for speed, where the
 * error of 8-bit activations is acceptable (kite run's q4 weights mode uses it on the CPU). Each
 * block of V values of a row of x (V of `type`: 32 or 256) is quantized as kite_quant quantizes
 * a row to int8: s = amax(|x block|) / 127 over its finite values, q = clamp(round_nearest_even(
 * x / s), -127, 127) with x / s an f32 division (NaN -> 0, a block with no finite nonzero value
 * s = 0, q = 0). Then y[m, n] = sum over blocks b of s[m, b] * sum_{i in b} w[n, i] q[m, i]
 * + bias[n], with w's values as kite_linear_gguf's; the sums run in f32 or better (integer where
 * the kernel can) and y is rounded once. Shapes, dtypes and errors as kite_linear_gguf's. */
KITE_API kite_status kite_linear_gguf_q8(kite_ctx *ctx, const DLTensor *x, const DLTensor *w,
                                         kite_gguf_type type, const DLTensor *bias, DLTensor *y);
/* y[N, K] = the weights of w (uint8 [N, K / V * B] of `type`, row-strided allowed) as above: each
 * weight's f32 value, rounded to y's dtype (f32/f16/bf16; y may be row-strided). Errors as
 * kite_linear_gguf's, and y's width not a multiple of V. */
KITE_API kite_status kite_dequant_gguf(kite_ctx *ctx, const DLTensor *w, kite_gguf_type type,
                                       DLTensor *y);
/* kite_group_gemm with GGUF block weights (MoE experts used as stored): rows of x[M, K] come in
 * G consecutive groups of group_sizes[G] int32 rows (a group may be empty); group g's rows are
 * multiplied by w[g] and get bias[g]: y[M, N] = x w[g]^T + bias[g]. w is uint8 [G, N, K / V * B]
 * of `type` (each w[g] a kite_linear_gguf weight; group and row strides free, each row's bytes
 * contiguous); bias NULL or [G, N] (compact); x, y and bias f32/f16/bf16, all x's dtype, x and y
 * row-strided allowed. Weights are decoded as above, sums in f32 or better, y rounded once.
 * Group sizes follow kite_group_gemm's rule: on a CPU ctx a negative size or sizes not summing
 * to M are INVALID_ARG; on a device a negative size counts as 0, rows past M are ignored and
 * rows of y past the sum are zeros. gpt-oss's experts in MXFP4, tokens sorted by expert:
 * gate_up_proj as w[E, 2I, H] (its interleaved gate / up rows, kite_moe_layout) with its bias,
 * then down_proj as w[E, H, I]. Errors: kite_linear_gguf's and kite_group_gemm's, bias's shape
 * and dtype. */
KITE_API kite_status kite_group_gemm_gguf(kite_ctx *ctx, const DLTensor *x, const DLTensor *w,
                                          kite_gguf_type type, const DLTensor *group_sizes,
                                          const DLTensor *bias, DLTensor *y);

/* ---------------------------------------------------------------------------------------------
 * Communication between ranks (tensor parallelism): a communicator and collectives over it.
 *
 * A kite_comm is one rank of a group of nranks ranks, bound to the device of the ctx it was
 * created with; collectives run on the stream of the ctx each call is given, which must be on
 * that device. The backend that drives the ctx's device type provides the communicator (the
 * first registered one that has communicators for that type) and the kernels that run the
 * collectives on it: on CUDA NCCL, loaded at run time; on the CPU the ref backend, whose ranks
 * are threads of one process (a rendezvous in memory: each rank's call waits until every rank
 * of the group has made its call, then the sum is computed in float64 and rounded once).
 *
 * CUDA peer memory: a group of 2 to 8 ranks whose GPUs can map each other's memory (one host,
 * peer access; across processes through CUDA IPC) also gets one buffer per rank (about 24 MB of
 * device memory), registered when the comm is made: kite_comm_create all-gathers the buffers'
 * handles through the new NCCL communicator, so every rank must call it (as NCCL requires
 * anyway). all_reduce up to 8 MB and all_reduce_add_rms_norm up to the one-shot's limit (8 MB on
 * 2 ranks, 256 KB on more) then run as one kernel over the peers' buffers (cuda.oneshot,
 * cuda.twoshot), NCCL above; `kite list` shows each kernel's limits. Those kernels synchronize
 * the ranks through flags in the buffers with a call counter kept on the device, so they may be
 * captured in a CUDA graph and replayed. Their extra rules: a comm's collectives run in order on
 * the device (one stream, or streams ordered by events); and a rank destroys its comm only when
 * every rank's last collective has completed (a peer may still be reading this rank's buffer),
 * e.g. synchronize, then a barrier of the processes, then destroy.
 *
 * Rules every rank of a group follows (as with NCCL):
 * - Every rank makes the same collectives in the same order, with the same op, dtype and element
 *   counts; each rank from its own host thread (a rank's call may wait for the others on the
 *   host, so one thread cannot drive two ranks of one group).
 * - Arguments are validated before any communication, on the calling rank only: a call that
 *   fails validation returns its error at once and takes no part in the collective (nothing
 *   tells the other ranks). Their calls of that collective then wait for that rank's next
 *   collective, which completes theirs, as in NCCL (ranks out of step: the caller's error, to be
 *   avoided by failing every rank, e.g. by destroying the group). With no such next call, on a
 *   backend whose ranks wait on the host (ref) they wait at most KITE_COMM_TIMEOUT seconds
 *   (environment, read when the group is created; default 300), then fail with KITE_ERR_DEVICE
 *   and the group is broken: every later collective of every rank fails at once (destroy and
 *   recreate it). On NCCL the device work waits, as it does in NCCL itself. Destroying a rank's
 *   comm breaks its group the same way at once, so that no rank waits for a rank that is gone.
 * - Disagreements that only the collective can see (ranks calling different ops, dtypes or
 *   counts) are reported where the backend can detect them: ref fails the collective on every
 *   rank with KITE_ERR_INVALID_ARG naming both ranks' calls, and the group stays usable. NCCL
 *   does not detect them: such calls are the caller's error there.
 * - The buffers of different ranks do not overlap.
 * Device errors, NCCL's included, become KITE_ERR_DEVICE with the library's own message
 * (ncclGetErrorString and ncclGetLastError) in kite_last_error().
 * ------------------------------------------------------------------------------------------- */
typedef struct kite_comm kite_comm;

/* The group's identifier, created once by one rank and handed to every rank by the caller (over
 * whatever channel the processes share), as NCCL's ncclUniqueId; 128 opaque bytes. */
#define KITE_COMM_ID_BYTES 128
typedef struct kite_comm_id {
  unsigned char bytes[KITE_COMM_ID_BYTES];
} kite_comm_id;

/* A new group identifier from the backend that provides communicators for ctx's device type.
 * Errors: INVALID_ARG (NULL ctx or id), UNSUPPORTED (no backend provides communicators for that
 * device type, or its communication library could not be loaded: the message says why),
 * DEVICE (the library failed). */
KITE_API kite_status kite_comm_get_unique_id(kite_ctx *ctx, kite_comm_id *id);

/* Creates rank `rank` of the group `id` of nranks ranks on ctx's device. A backend may wait here
 * until every rank has joined (NCCL does; ref does not).
 * Errors: INVALID_ARG (NULL ctx, id or out; nranks < 1; rank outside [0, nranks); with ref, an id
 * already joined with another nranks, or a rank of the id that exists already), UNSUPPORTED (as
 * kite_comm_get_unique_id), DEVICE (the library failed, with its message). *out is NULL on error.
 */
KITE_API kite_status kite_comm_create(kite_ctx *ctx, const kite_comm_id *id, int nranks, int rank,
                                      kite_comm **out);

/* One process, several ranks: creates the nranks comms of one new group, rank i on ctxs[i]'s
 * device, into comms[i] (NCCL's ncclCommInitAll). The ctxs share one device type; on a GPU each
 * names its own device. Each rank's collectives are then called from a thread of its own.
 * Errors: as kite_comm_create, plus ctxs of different device types; nothing is created then. */
KITE_API kite_status kite_comm_create_all(kite_ctx *const *ctxs, int nranks, kite_comm **comms);

/* Frees a comm (NULL is a no-op); its group is broken for the other ranks (see above). Call it
 * when no collective of this rank is in flight (after kite_ctx_synchronize on a device). */
KITE_API void kite_comm_destroy(kite_comm *comm);

/* The size of comm's group and comm's rank in it. Errors: INVALID_ARG (a NULL argument). */
KITE_API kite_status kite_comm_info(const kite_comm *comm, int *nranks, int *rank);

/* Collectives: x and y f32, f16 or bf16 (the same dtype), compact (row-major, strides NULL or
 * compact), on ctx's device, which must be comm's. Sums are over the ranks of comm's group, in
 * no fixed order: ref rounds the exact sum once to the dtype; NCCL rounds each partial sum it
 * passes between ranks to the dtype (up to nranks - 1 roundings; with 2 ranks one, as ref), so
 * device results of f16 / bf16 may differ from ref by a few units in the last place. CUDA's
 * peer-memory kernels add the ranks' values in rank order 0, 1, ..., nranks - 1 in float32 and
 * round once to the dtype: the same bits on every rank and in every run (deterministic), within
 * the same bound of the exact sum. An empty tensor still makes a collective: every rank calls,
 * as for any other size.
 *
 * all_reduce: x[...] -> y[...] of x's shape, y = sum over ranks of x. y may be x (in place);
 *   any other overlap is INVALID_ARG. */
KITE_API kite_status kite_all_reduce(kite_ctx *ctx, kite_comm *comm, const DLTensor *x,
                                     DLTensor *y);
/* all_gather: x[d0, ...] -> y[nranks * d0, ...]: rank r's x lands at rows [r d0, (r + 1) d0) of
 *   every rank's y. In place when x is exactly that slice of y (x's data = y's data + rank * size
 *   of x); any other overlap is INVALID_ARG. */
KITE_API kite_status kite_all_gather(kite_ctx *ctx, kite_comm *comm, const DLTensor *x,
                                     DLTensor *y);
/* reduce_scatter: x[nranks * d0, ...] -> y[d0, ...]: rank r's y = the sum over ranks of rows
 *   [r d0, (r + 1) d0) of x. In place when y is exactly that slice of x; any other overlap is
 *   INVALID_ARG. */
KITE_API kite_status kite_reduce_scatter(kite_ctx *ctx, kite_comm *comm, const DLTensor *x,
                                         DLTensor *y);
/* all_reduce followed by add_rms_norm, the step after a row-parallel linear:
 *   a = all_reduce(x), rounded to the dtype (what kite_all_reduce would return);
 *   then kite_add_rms_norm(a, residual, w, eps, offset, pos, y) on each rank, with its rules:
 *   PRE: residual <- round(a + residual), y = rms_norm(that residual) * (offset + w);
 *   POST: y = rms_norm(a + residual) * (offset + w), residual <- y.
 * x[..., H] compact and left unchanged; residual[..., H] (row-strided allowed) updated in place;
 * w[H] or NULL; y[..., H] (row-strided allowed), may be x; all one float dtype; eps, offset, pos
 * as kite_add_rms_norm. Errors: as kite_all_reduce and kite_add_rms_norm. */
KITE_API kite_status kite_all_reduce_add_rms_norm(kite_ctx *ctx, kite_comm *comm, const DLTensor *x,
                                                  DLTensor *residual, const DLTensor *w, float eps,
                                                  float offset, kite_norm_pos pos, DLTensor *y);

/* ---------------------------------------------------------------------------------------------
 * The op table, boxed: every public op function with its arguments, and a call by index. For
 * bindings generated at run time (a language's FFI, the Python extension), fuzzers and tests:
 * one table (kite/ops.def) instead of a switch over the ops in each of them.
 * ------------------------------------------------------------------------------------------- */
typedef enum kite_arg_kind {
  KITE_ARG_IN = 0, /* const DLTensor *, required */
  KITE_ARG_IN_OPT, /* const DLTensor * or NULL */
  KITE_ARG_OUT,    /* DLTensor * the op writes (and may read first, when it works in place) */
  KITE_ARG_OUT_OPT,
  KITE_ARG_FLOAT,  /* float, passed as kite_value.f (rounded to float) */
  KITE_ARG_INT,    /* a C int, int32 or enum, passed as kite_value.i: outside int32 is an error */
  KITE_ARG_INT64,  /* kite_value.i */
  KITE_ARG_UINT64, /* kite_value.u */
  KITE_ARG_COMM,   /* kite_value.comm */
} kite_arg_kind;

typedef struct kite_arg_info {
  kite_arg_kind kind;
  const char *name; /* the argument's name in kite.h ("eps") */
  /* tensors: "<dtype>:<dims>" of a small valid call; scalars: a value valid in that call.
   * The notation is described at the top of kite/ops.def. */
  const char *spec;
} kite_arg_info;

typedef struct kite_fn_info {
  const char *name;   /* "add_rms_norm": the function is kite_<name> */
  kite_op op;         /* the op it dispatches */
  const char *family; /* "norm" */
  size_t nargs;       /* the arguments after the ctx, in table order */
  const kite_arg_info *args;
} kite_fn_info;

/* One boxed argument; which member is read is the argument's kind. */
typedef union kite_value {
  DLTensor *t; /* tensors (NULL: absent) */
  double f;
  int64_t i;
  uint64_t u;
  kite_comm *comm;
} kite_value;

/* Number of public op functions (at least KITE_OP_COUNT). */
KITE_API size_t kite_fn_count(void);
/* Function i < kite_fn_count() (static storage), NULL past the end. Function op (for an op id)
 * is the op's own function kite_<op name>. */
KITE_API const kite_fn_info *kite_fn_get(size_t i);
/* The index of the function of that name, or -1. */
KITE_API int kite_fn_find(const char *name);
/* Calls function fn with args[nargs] in the table's order; exactly what calling kite_<name>
 * directly does, with the same errors. Errors besides the op's own: INVALID_ARG for fn out of
 * range, nargs not the function's, an INT argument outside int32 (naming the op and argument). */
KITE_API kite_status kite_fn_call(kite_ctx *ctx, size_t fn, const kite_value *args, size_t nargs);

/* ---------------------------------------------------------------------------------------------
 * Kernel selection.
 *
 * For each call, candidates are the kernels of the op for the ctx's device type whose required
 * features are present, that the config does not disable and whose supports() accepts the
 * arguments; the highest priority wins. The choice is cached per (op, device type, dtype).
 *
 * Config grammar (kite_config_set or the KITE_KERNELS environment variable, read at init), a
 * comma-separated list applied left to right:
 *   op=backend.variant   pin op to that kernel (an error if it cannot run — never a substitute)
 *   op=backend           pin op to the best eligible kernel of that backend
 *   -backend.variant     disable a kernel (for every op); "-backend" disables a backend
 *   -op:backend.variant  disable a kernel for one op only ("-op:backend" likewise)
 *   +backend[.variant]   re-enable what an earlier item disabled
 *   reset                forget every earlier item
 * e.g. "rms_norm=cpu.avx512,-cuda.naive,softmax=ref".
 * ------------------------------------------------------------------------------------------- */

/* Replaces the config (NULL or "" = defaults). Errors: CONFIG with a message naming the bad
 * item (unknown op, empty name, bad syntax); the config in force then stays as it was. Unknown
 * backend/variant names are accepted: a plugin may provide them later; a pin to a kernel that
 * does not exist fails at call time. A successful call also clears a KITE_KERNELS error (below). */
KITE_API kite_status kite_config_set(const char *config);
/* The config in force, as last set ("" when none); when KITE_KERNELS did not parse, its text.
 * The pointer stays valid until the next set. */
KITE_API const char *kite_config_get(void);
/* The calling thread's own config, applied after the global one to this thread's calls only
 * (pins and disables in it win over the global ones; a "reset" item sets the global rules aside
 * for this thread). NULL or "" removes it. For a scope of one thread (a test, a request) while
 * other threads keep the global choice. Errors: CONFIG as kite_config_set; the thread's config
 * then stays as it was. */
KITE_API kite_status kite_config_set_thread(const char *config);
/* The calling thread's config ("" when none); valid until its next kite_config_set_thread. */
KITE_API const char *kite_config_get_thread(void);
/* A KITE_KERNELS that does not parse is never ignored: no rule of it applies and every op call
 * fails with KITE_ERR_CONFIG, its message naming the variable and the bad item, until a
 * kite_config_set succeeds. This returns that message ("" when the config is fine); the string
 * stays valid for the life of the process. */
KITE_API const char *kite_config_error(void);

/* ---------------------------------------------------------------------------------------------
 * Registry introspection
 * ------------------------------------------------------------------------------------------- */
typedef struct kite_kernel_info {
  kite_op op;
  const char *op_name;
  const char *backend; /* "ref" */
  const char *variant; /* "generic" */
  DLDeviceType device_type;
  int priority;            /* higher wins */
  const char *features;    /* required features, e.g. "avx2,fma" ("" when none) */
  const char *description; /* one line */
  int runs_here;           /* 1 when the device is present, features are present, not disabled */
  char why_not[192];       /* when runs_here == 0: the reason ("" otherwise); a copy per call */
  const char *plugin;      /* the plugin file the kernel came from, "" when built into libkite */
} kite_kernel_info;

/* Number of registered kernels (loads built-in backends and auto-loaded plugins first). */
KITE_API size_t kite_kernel_count(void);
/* Info on kernel i < kite_kernel_count(), a snapshot taken under the registry lock (safe while
 * other threads call ops, set the config or load plugins). The strings other than why_not belong
 * to the backend or the registry and live as long as the process. A plugin kernel may outrank a
 * built-in one by priority (a vendor's override): `plugin` says where each kernel came from. */
KITE_API kite_status kite_kernel_get(size_t i, kite_kernel_info *out);

/* Run-time failures of kernel i (as kite_kernel_get numbers them): how many calls it failed
 * with a status other than INVALID_ARG (a device error, a plugin's internal error) after its
 * supports() accepted them, and the last message into last[n] (may be NULL). A failed call
 * returns its error: kite never reruns it on another kernel (the kernel may have written part of
 * an in-place output), so a kernel that keeps failing is taken out of the choice by the config,
 * e.g. KITE_KERNELS=-vendor.fast or kite_config_set_thread("-vendor.fast"); `kite list` shows
 * these counts. */
KITE_API long kite_kernel_failures(size_t i, char *last, size_t n);

typedef struct kite_backend_info {
  const char *name;
  DLDeviceType device_type;
  int device_count; /* devices of that type this backend can reach now */
  size_t num_kernels;
  const char *path; /* the plugin file, or "" for a backend built into the library */
} kite_backend_info;
KITE_API size_t kite_backend_count(void);
KITE_API kite_status kite_backend_get(size_t i, kite_backend_info *out);

/* The kernel that the last op call on this thread was dispatched to, as "backend.variant"
 * ("cpu.avx2"); "" before the first dispatch. The same choice KITE_LOG=dispatch prints, without
 * printing. Valid until the next call to this function on this thread. */
KITE_API const char *kite_last_dispatch(void);

/* Device-type name ("cpu", "cuda", ...) for display; never NULL. */
KITE_API const char *kite_device_name(DLDeviceType t);

/* ---------------------------------------------------------------------------------------------
 * Plugins: a backend in its own shared library exporting kite_plugin_init (see backend.h).
 * At init kite loads every libkite-<name>.so found beside libkite.so and in each directory of
 * KITE_BACKEND_PATH (colon-separated). A plugin that fails is reported (kite_plugin_failure_*),
 * never fatal to the others.
 * ------------------------------------------------------------------------------------------- */
/* Loads one plugin by path. Errors: PLUGIN (cannot open, no kite_plugin_init, ABI mismatch,
 * init failed, a backend of the same name is already registered, called from a plugin's init)
 * with the reason. A plugin whose init fails leaves nothing registered. */
KITE_API kite_status kite_backend_load(const char *path);

/* Plugins that failed to load automatically, with their reasons. */
KITE_API size_t kite_plugin_failure_count(void);
KITE_API kite_status kite_plugin_failure_get(size_t i, const char **path, const char **reason);

#ifdef __cplusplus
}
#endif

#endif /* KITE_KITE_H */
