# avtgym's image: `avtgym serve` as a non-root user on a read-only root file
# system, with /tmp (an emptyDir in deploy/base) the only writable place.
# Python 3 and psycopg 3 are present for the Python test workers of
# PostgreSQL corpora (BIRD-Interact's Management tasks).
#
#   docker build -t registry.example.internal/avtgym:VERSION .
#   docker run --rm --read-only --tmpfs /tmp -p 50051:50051 registry.example.internal/avtgym:VERSION \
#     serve --listen 0.0.0.0:50051 --insecure-listen-any
#
# Corpora: the demo corpus is embedded in the binary; corpora in the build
# context's corpora-image/ directory (absent: none) are baked into
# /srv/avtgym/corpora (serve --corpus /srv/avtgym/corpora/NAME), or mount
# them there (deploy/overlays/postgres). CI cannot build this file (no
# container engine or base image is reachable there); deploy's
# TestRunsAsNonRootReadOnly runs the same binary the same way instead.

ARG GO_VERSION=1.26.8
ARG DEBIAN=bookworm

FROM golang:${GO_VERSION}-${DEBIAN} AS build
WORKDIR /src
# cgo: SQLite (mattn/go-sqlite3) and the PostgreSQL parser (pg_query_go).
ENV CGO_ENABLED=1 GOFLAGS=-buildvcs=false
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags='-s -w' -o /out/avtgym ./cmd/avtgym && \
    mkdir -p /out/corpora && if [ -d corpora-image ]; then cp -a corpora-image/. /out/corpora/; fi

FROM debian:${DEBIAN}-slim
# psycopg 3.2 or later, as .ci/run installs it (Debian's python3-psycopg is older).
RUN apt-get update && \
    apt-get install -y --no-install-recommends ca-certificates python3 python3-venv && \
    rm -rf /var/lib/apt/lists/* && \
    python3 -m venv /opt/python && \
    /opt/python/bin/pip install --no-cache-dir 'psycopg[binary]>=3.2,<4' && \
    groupadd --gid 65532 avtgym && \
    useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin avtgym
COPY --from=build /out/avtgym /usr/local/bin/avtgym
COPY --from=build --chown=root:root /out/corpora /srv/avtgym/corpora
# Everything above is root's and read-only to the server; it writes only
# to TMPDIR (SQLite's temporary files, databases built from scripts, the
# test workers' files).
ENV TMPDIR=/tmp SQLITE_TMPDIR=/tmp HOME=/nonexistent PATH=/opt/python/bin:$PATH PYTHONDONTWRITEBYTECODE=1
WORKDIR /srv/avtgym
USER 65532:65532
EXPOSE 50051 8081 9464
ENTRYPOINT ["/usr/local/bin/avtgym"]
CMD ["serve", "--listen", "0.0.0.0:50051", "--health-listen", "0.0.0.0:8081", "--insecure-listen-any"]
