/*
 * Graphs on CUDA (kite.h "Graphs", backend.h graph_*): a recording is a stream of its own in
 * capture mode; the core hands it to the kernels as the ctx's stream, so every launch of the
 * recorded calls is captured into a CUDA graph, which graph_end instantiates once.
 *
 * The recording stream is non-blocking and new: capture on the legacy default stream is not
 * allowed, and a stream of its own keeps the capture apart from whatever else the caller's
 * stream carries. Thread-local capture mode: a call on this thread that could not be replayed
 * (a synchronizing copy, cudaMalloc) breaks the capture with an error instead of being left out
 * of the graph silently.
 */
#include <cuda_runtime_api.h>

#include "cuda_backend.h"

kite_status cuda_graph_begin(const kite_backend *b, int device_id, void *stream, void **recording) {
  (void)b;
  (void)stream; /* replays are ordered on the stream they are launched on, not this one */
  *recording = NULL;
  kite_status s = cuda_use_device("kite_graph_begin", device_id);
  if (s != KITE_OK) return s;
  cudaStream_t rec = NULL;
  cudaError_t e = cudaStreamCreateWithFlags(&rec, cudaStreamNonBlocking);
  if (e != cudaSuccess) return cuda_device_error("kite_graph_begin", "cudaStreamCreate", e);
  e = cudaStreamBeginCapture(rec, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    (void)cudaStreamDestroy(rec);
    return cuda_device_error("kite_graph_begin", "cudaStreamBeginCapture", e);
  }
  *recording = rec;
  return KITE_OK;
}

kite_status cuda_graph_end(const kite_backend *b, int device_id, void *recording, void **graph) {
  (void)b;
  *graph = NULL;
  kite_status s = cuda_use_device("kite_graph_end", device_id);
  if (s != KITE_OK) return s;
  cudaStream_t rec = (cudaStream_t)recording;
  cudaGraph_t g = NULL;
  cudaError_t e = cudaStreamEndCapture(rec, &g);
  (void)cudaStreamDestroy(rec);
  if (e != cudaSuccess || !g) {
    if (g) (void)cudaGraphDestroy(g);
    return cuda_device_error("kite_graph_end",
                             "the recording broke (a recorded call failed or synchronized)",
                             e != cudaSuccess ? e : cudaErrorStreamCaptureInvalidated);
  }
  cudaGraphExec_t exec = NULL;
  e = cudaGraphInstantiate(&exec, g, 0);
  (void)cudaGraphDestroy(g);
  if (e != cudaSuccess) return cuda_device_error("kite_graph_end", "cudaGraphInstantiate", e);
  *graph = exec;
  return KITE_OK;
}

kite_status cuda_graph_launch(const kite_backend *b, int device_id, void *stream, void *graph) {
  (void)b;
  kite_status s = cuda_use_device("kite_graph_launch", device_id);
  if (s != KITE_OK) return s;
  cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)graph, (cudaStream_t)stream);
  return e == cudaSuccess ? KITE_OK : cuda_device_error("kite_graph_launch", "cudaGraphLaunch", e);
}

void cuda_graph_destroy(const kite_backend *b, int device_id, void *graph) {
  (void)b;
  if (!graph || cuda_use_device("kite_graph_destroy", device_id) != KITE_OK) return;
  if (cudaGraphExecDestroy((cudaGraphExec_t)graph) != cudaSuccess) (void)cudaGetLastError();
}
