#!/usr/bin/env bash
# Regenerates the committed Python gRPC stubs of proto/avtgym/v1 into
# client/python/src/avtgym/v1 with the pinned grpcio-tools. google/rpc comes
# from googleapis-common-protos at run time and is not generated here.
set -euo pipefail
GRPCIO_TOOLS_VERSION=1.85.1
root="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$root"
PY="${PYTHON:-python3}"
have="$("$PY" -c 'import importlib.metadata as m; print(m.version("grpcio-tools"))' 2>/dev/null || true)"
if [ "$have" != "$GRPCIO_TOOLS_VERSION" ]; then
  "$PY" -m pip install -q --disable-pip-version-check "grpcio-tools==$GRPCIO_TOOLS_VERSION"
fi
out=client/python/src
rm -f "$out"/avtgym/v1/*_pb2*.py "$out"/avtgym/v1/*_pb2*.pyi
"$PY" -m grpc_tools.protoc -I proto -I third_party/proto \
  --python_out="$out" --grpc_python_out="$out" --pyi_out="$out" \
  proto/avtgym/v1/*.proto
touch "$out/avtgym/v1/__init__.py"
