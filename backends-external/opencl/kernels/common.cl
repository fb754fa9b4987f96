/*
 * Shared by every kernel of the OpenCL backend: element loads and stores for the three float
 * dtypes (math in f32, one rounding on store), and work-group reductions.
 *
 * A tensor reaches a kernel as a buffer and a byte offset (global uchar *base, ulong off): the
 * host resolves kite's device addresses to (cl_mem, offset) pairs, and offsets need not meet
 * CL_DEVICE_MEM_BASE_ADDR_ALIGN as sub-buffers would. dt is kite_dtype: 0 f32, 1 f16, 2 bf16.
 * f16 goes through vload_half / vstore_half_rte, core OpenCL C that needs no cl_khr_fp16.
 */
#define DT_F32 0
#define DT_F16 1
#define DT_BF16 2

#define AT(base, off) ((base) + (off))

inline float bf16_to_f32(ushort h) {
  return as_float((uint)h << 16);
}

/* round to nearest even; NaN stays a quiet NaN (kite/dtype.h's rule) */
inline ushort f32_to_bf16(float f) {
  uint u = as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (ushort)(u >> 16);
}

inline float ld(global const uchar *p, long i, int dt) {
  if (dt == DT_F32) return ((global const float *)p)[i];
  if (dt == DT_F16) return vload_half((size_t)i, (global const half *)p);
  return bf16_to_f32(((global const ushort *)p)[i]);
}

inline void st(global uchar *p, long i, int dt, float v) {
  if (dt == DT_F32)
    ((global float *)p)[i] = v;
  else if (dt == DT_F16)
    vstore_half_rte(v, (size_t)i, (global half *)p);
  else
    ((global ushort *)p)[i] = f32_to_bf16(v);
}

/* Copies element i of src to element j of dst bit for bit (embedding, store_kv move values). */
inline void copy_elem(global uchar *dst, long j, global const uchar *src, long i, int dt) {
  if (dt == DT_F32)
    ((global uint *)dst)[j] = ((global const uint *)src)[i];
  else
    ((global ushort *)dst)[j] = ((global const ushort *)src)[i];
}

/* Work-group sum and max of v over a 1-D group whose size is a power of two; every item gets the
 * result. scratch holds get_local_size(0) floats. */
inline float group_sum(float v, local float *scratch) {
  const uint lid = get_local_id(0), n = get_local_size(0);
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = n / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] += scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float r = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

inline float group_max(float v, local float *scratch) {
  const uint lid = get_local_id(0), n = get_local_size(0);
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = n / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] = fmax(scratch[lid], scratch[lid + s]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float r = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}
