# avtgym's tasks. `make help` lists them. Tools are pinned and installed
# into ./bin on first use.

GO         ?= go
PYTHON     ?= python3
BIN        := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)

PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
BUF_VERSION                := v1.75.0
# staticcheck 2026.2.2, which supports Go 1.26.
STATICCHECK_VERSION        := v0.8.2
# The version grpc v1.85.0 itself requires, so that go.mod needs no other.
VTPROTO_VERSION            := v0.6.1-0.20240319094008-0393e58bdf10

PROTO_FILES := $(shell find proto -name '*.proto')

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# Flags for `avtgym serve`, e.g. make run ARGS="--corpus DIR --log-level debug".
ARGS ?=

.PHONY: run
run: ## serve the demo corpus on 127.0.0.1:50051 (metrics :9464); ARGS="--corpus DIR ..." passes serve flags
	$(GO) run ./cmd/avtgym serve $(ARGS)

.PHONY: build
build: ## build the avtgym binary into ./bin
	$(GO) build -o $(BIN)/avtgym ./cmd/avtgym

.PHONY: test
test: ## run every test: the Go tests (race detector on; a private PostgreSQL cluster when installed), then the Python client's
	bash scripts/with-postgres.sh $(GO) test -race -count=1 ./...
	@$(MAKE) --no-print-directory test-python

.PHONY: postgres
postgres: ## start a private PostgreSQL cluster on 127.0.0.1, port PGPORT (default 55432), in bin/postgres and print its admin URL (for --postgres)
	@bash scripts/postgres.sh start bin/postgres

.PHONY: postgres-stop
postgres-stop: ## stop the cluster make postgres started
	@bash scripts/postgres.sh stop bin/postgres

.PHONY: test-python
test-python: ## run the Python client's tests on this checkout's client (installs client/python[test] if avtgym, jsonschema or the pinned openenv-core is missing)
	@$(PYTHON) -c 'import avtgym, grpc, google.rpc.status_pb2, pytest, numpy, jsonschema, openenv.core, importlib.metadata as m; assert m.version("openenv-core") == "0.3.0"' 2>/dev/null || \
		$(PYTHON) -m pip install -q --disable-pip-version-check -e 'client/python[test]'
	PYTHONPATH=$(CURDIR)/client/python/src $(PYTHON) -m pytest client/python/tests -q --ignore=client/python/tests/trainers

.PHONY: test-trainers
test-trainers: ## opt-in: install the pinned TRL, verl and PyTorch (several GB) and test the trainer adapters
	bash client/python/scripts/test_trainers.sh

.PHONY: test-real-model
test-real-model: ## opt-in: serve SmolLM2-135M with llama.cpp on CPU and run every model path against it (~15 min)
	bash scripts/test_real_model.sh

.PHONY: test-short
test-short: ## run the tests without the race detector
	bash scripts/with-postgres.sh $(GO) test -count=1 ./...

FUZZTIME ?= 20s
# Each new coverage-expanding input is minimised for up to this long (go's
# default, 60s, can take a whole run).
FUZZMINTIME ?= 5s

.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME each (default 20s); make test runs their seeds
	$(GO) test -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./env/
	$(GO) test -run '^$$' -fuzz '^FuzzSealRoundTrip$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./env/
	$(GO) test -run '^$$' -fuzz '^FuzzEnvToken$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./env/
	$(GO) test -run '^$$' -fuzz '^FuzzRecordLine$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./corpus/
	$(GO) test -run '^$$' -fuzz '^FuzzSplitStatements$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./sqlexec/
	$(GO) test -run '^$$' -fuzz '^FuzzNormalizeSQL$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./sqlexec/
	$(GO) test -run '^$$' -fuzz '^FuzzRewrite$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./sqlexec/
	$(GO) test -run '^$$' -fuzz '^FuzzSegments$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./sqlexec/
	$(GO) test -run '^$$' -fuzz '^FuzzResolve$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./sqlexec/
	$(GO) test -run '^$$' -fuzz '^FuzzCompare$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./sqlexec/
	$(GO) test -run '^$$' -fuzz '^FuzzRoundHalfUp$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./sqlexec/
	$(GO) test -run '^$$' -fuzz '^FuzzQuery$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./sqlexec/sqlite/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./sqlexec/pgparse/
	$(GO) test -run '^$$' -fuzz '^FuzzCheckQuery$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./sqlexec/postgres/
	$(GO) test -run '^$$' -fuzz '^FuzzCheckStateful$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./sqlexec/postgres/
	$(GO) test -run '^$$' -fuzz '^FuzzExtract$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./sqlcommit/
	$(GO) test -run '^$$' -fuzz '^FuzzParseAction$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./oracle/
	$(GO) test -run '^$$' -fuzz '^FuzzCleanReply$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./oracle/
	$(GO) test -run '^$$' -fuzz '^FuzzParseDecision$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./policy/
	$(GO) test -run '^$$' -fuzz '^FuzzParseJSON$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./llm/

.PHONY: lint
lint: $(BIN)/buf $(BIN)/staticcheck ## gofmt, go vet, staticcheck (default checks), buf lint and buf format
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(BIN)/staticcheck ./...
	$(BIN)/buf lint
	$(BIN)/buf format --diff --exit-code proto

# The committed image of the v1 API that `make breaking` checks against. It
# holds proto/avtgym/v1 (and its imports) only: the internal state proto
# (proto/avtgym/internal) is private and may change freely. (An `ignore` in
# buf.yaml's breaking section would not do: it makes buf compare one image per
# module, which fails against a single image.) No source info, so that
# comment edits do not change it.
BASELINE := proto/baseline/avtgym-v1.binpb

.PHONY: breaking
breaking: $(BIN)/buf ## fail if the v1 API (proto/avtgym/v1) has a breaking change against the committed BASELINE
	$(BIN)/buf breaking --against $(BASELINE)

.PHONY: proto-baseline
proto-baseline: $(BIN)/buf ## regenerate BASELINE: only when a breaking change is intended (e.g. before v1 is frozen)
	@mkdir -p $(dir $(BASELINE))
	$(BIN)/buf build --path proto/avtgym/v1 --exclude-source-info -o $(BASELINE)

.PHONY: proto
proto: $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/protoc-gen-go-vtproto ## regenerate the Go code of proto/ (needs protoc)
	protoc -I proto -I third_party/proto \
		--plugin=protoc-gen-go=$(BIN)/protoc-gen-go --go_out=. --go_opt=module=avtgym \
		--plugin=protoc-gen-go-grpc=$(BIN)/protoc-gen-go-grpc --go-grpc_out=. --go-grpc_opt=module=avtgym \
		--plugin=protoc-gen-go-vtproto=$(BIN)/protoc-gen-go-vtproto --go-vtproto_out=. \
		--go-vtproto_opt=module=avtgym,features=marshal+unmarshal+unmarshal_unsafe+size \
		$(PROTO_FILES)

.PHONY: proto-python
proto-python: ## regenerate the Python stubs in client/python/src/avtgym/v1 (pinned grpcio-tools)
	PYTHON=$(PYTHON) bash client/python/scripts/gen_proto.sh

PY_STUBS := client/python/src/avtgym/v1

.PHONY: checkgenerate
checkgenerate: proto proto-python ## fail if the committed generated code (Go and Python) is not current
	@git diff --exit-code -- '*.pb.go' $(PY_STUBS) || { echo "generated code is stale: run make proto proto-python and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- '*.pb.go' $(PY_STUBS))" || { echo "untracked generated files:"; git status --porcelain -- '*.pb.go' $(PY_STUBS); exit 1; }

.PHONY: report-screenshot
report-screenshot: ## evaluate the demo corpus, render report.html and screenshot it with headless Chromium
	bash scripts/report_screenshot.sh

.PHONY: bench
bench: ## run the Go benchmarks and `avtgym bench` (figures go to bench/RESULTS.md by hand)
	bash scripts/with-postgres.sh $(GO) test -run '^$$' -bench . -benchmem ./server/ ./oracle/ ./sqlexec/... ./app/
	$(GO) run ./cmd/avtgym bench

GHZ_VERSION := v0.93.0

.PHONY: bench-compare
bench-compare: build $(BIN)/ghz ## Python client vs the floor, unary vs batch server CPU, verification vs the raw query, avtgym vs its OpenEnv peer (appends to bench/RESULTS.md)
	$(PYTHON) bench/compare.py --binary $(BIN)/avtgym --ghz $(BIN)/ghz --append bench/RESULTS.md

.PHONY: bench-viewer
bench-viewer: ## the viewer at 100k episodes: load and index a generated run, render a filtered list page
	$(GO) test -count=1 -run '^$$' -bench 'Load100k|ListPage100k' -benchtime 3x ./viewer/

.PHONY: bench-hostile
bench-hostile: ## measure a real server under attack: peak memory with 16 hostile clients, quick-step latency beside slow queries
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 1x ./hostile/

.PHONY: bench-scale
bench-scale: ## measure capacity: episodes/s per core per protocol and oracle, memory, 1-3 replicas behind nginx vs direct (docs/scaling.md; needs nginx)
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkScale$$' -benchtime 1x -timeout 20m ./deploy/

.PHONY: tools
tools: $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/protoc-gen-go-vtproto $(BIN)/buf $(BIN)/staticcheck ## install the pinned tools into ./bin

$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(BIN)/protoc-gen-go-grpc:
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

$(BIN)/protoc-gen-go-vtproto:
	GOBIN=$(BIN) $(GO) install github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@$(VTPROTO_VERSION)

$(BIN)/ghz:
	GOBIN=$(BIN) $(GO) install github.com/bojand/ghz/cmd/ghz@$(GHZ_VERSION)

$(BIN)/buf:
	GOBIN=$(BIN) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)

$(BIN)/staticcheck:
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

.PHONY: clean
clean: ## remove ./bin
	rm -rf $(BIN)
