#!/usr/bin/env bash
# Renders an evaluation report of the demo corpus and screenshots it with
# headless Chromium (Debian's package `chromium`), so that a person can look
# at it: `make report-screenshot`, then open the PNG it names. The window is
# 1280 px wide, the width the report's tables must fit (go test ./eval/ -run
# TestReportFitsBrowserWindow measures it), and tall enough for the whole
# demo report (REPORT_HEIGHT overrides it).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bin/report}
case $out in /*) ;; *) out=$PWD/$out ;; esac # chromium needs absolute paths
command -v chromium >/dev/null || { echo "needs chromium: apt-get install -y chromium" >&2; exit 1; }
go build -o bin/avtgym ./cmd/avtgym
rm -rf "$out" && mkdir -p "$out"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
bin/avtgym serve --listen "127.0.0.1:$port" --metrics-listen "" --test-oracles 2>"$out/serve.log" &
server=$!
trap 'kill $server 2>/dev/null' EXIT
for _ in $(seq 50); do grep -q '"addr"' "$out/serve.log" 2>/dev/null && grep -q serving "$out/serve.log" && break; sleep 0.1; done
bin/avtgym eval --server "127.0.0.1:$port" --asker scripted:none_adv \
  --oracles deterministic,test_leaky_responder,test_credit_all --seeds 0,1,2 --out "$out/run" --quiet > "$out/report.md"
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$(mktemp -d)" --window-size="1280,${REPORT_HEIGHT:-5600}" \
  --screenshot="$out/report.png" "file://$out/run/report.html" 2>"$out/chromium.log" || true
[ -s "$out/report.png" ] || { echo "chromium wrote no screenshot; see $out/chromium.log" >&2; exit 1; }
echo "wrote $out/report.png (from $out/run/report.html)"
