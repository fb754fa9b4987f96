/*
 * paged_decode: one work-group (PAGED_GROUP items) per (sequence, query head). Keys are taken
 * PAGED_GROUP at a time, one per item (its score in f32), then the chunk is merged into the
 * running max / sum (online softmax) and each item accumulates its own dims of the output.
 * Index values are never trusted: a negative seq_len counts as 0, one past the table is clamped,
 * the keys of a block id outside [0, blocks) are absent.
 */
#define PAGED_GROUP 64
#define PAGED_MAX_DIMS 4 /* head_dim <= 256 = PAGED_GROUP * PAGED_MAX_DIMS */

kernel void paged_decode(int dt, long hq, long hkv, long hd, global const uchar *q, ulong qo,
                         long qst, long qsh, global const uchar *kc, ulong kco,
                         global const uchar *vc, ulong vco, long blocks, long bs,
                         global const uchar *bt, ulong bto, long max_blocks, long bts,
                         global const uchar *sl, ulong slo, float scale, float softcap,
                         int window_left, int interleaved, global uchar *o, ulong oo, long ost,
                         long osh, global uchar *lse, ulong lo) {
  local float qv[PAGED_GROUP * PAGED_MAX_DIMS];
  local float p[PAGED_GROUP];
  local float scratch[PAGED_GROUP];
  local long krow[PAGED_GROUP];
  const long b = get_group_id(1), h = get_group_id(0), lid = get_local_id(0);
  const long kvh = interleaved ? h % hkv : h / (hq / hkv);
  global const int *table = (global const int *)AT(bt, bto) + b * bts;
  long len = ((global const int *)AT(sl, slo))[b];
  if (len < 0) len = 0;
  if (len > max_blocks * bs) len = max_blocks * bs;
  for (long d = lid; d < hd; d += PAGED_GROUP) qv[d] = ld(AT(q, qo), b * qst + h * qsh + d, dt);
  barrier(CLK_LOCAL_MEM_FENCE);
  const long qpos = len - 1, first = window_left >= 0 ? qpos - window_left : 0;
  float m = -INFINITY, l = 0.0f, acc[PAGED_MAX_DIMS] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (long c0 = first > 0 ? first : 0; c0 < len; c0 += PAGED_GROUP) {
    const long t = c0 + lid;
    float s = -INFINITY;
    long row = -1; /* the key's row in the caches, -1 when absent */
    if (t < len) {
      const long blk = table[t / bs];
      if (blk >= 0 && blk < blocks) row = ((blk * hkv + kvh) * bs + t % bs) * hd;
    }
    if (row >= 0) {
      float dot = 0.0f;
      for (long d = 0; d < hd; d++) dot += qv[d] * ld(AT(kc, kco), row + d, dt);
      s = dot * scale;
      if (softcap > 0.0f) s = softcap * tanh(s / softcap);
    }
    const float cm = group_max(s, scratch), mn = fmax(m, cm);
    const float alpha = mn == -INFINITY ? 1.0f : exp(m - mn);
    const float pj = s == -INFINITY ? 0.0f : exp(s - mn);
    l = l * alpha + group_sum(pj, scratch);
    m = mn;
    p[lid] = pj;
    krow[lid] = row;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int j = 0; j < PAGED_MAX_DIMS; j++) {
      const long d = lid + j * PAGED_GROUP;
      if (d >= hd) break;
      float a = acc[j] * alpha;
      for (long u = 0; u < PAGED_GROUP; u++) {
        const long ru = krow[u];
        if (ru >= 0) a += p[u] * ld(AT(vc, vco), ru + d, dt);
      }
      acc[j] = a;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int j = 0; j < PAGED_MAX_DIMS; j++) {
    const long d = lid + j * PAGED_GROUP;
    if (d < hd) st(AT(o, oo), b * ost + h * osh + d, dt, acc[j] * inv);
  }
  if (lse && lid == 0)
    ((global float *)AT(lse, lo))[b * hq + h] = l > 0.0f ? m + log(l) : -INFINITY;
}
