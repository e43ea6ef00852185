// Package deploy holds avtgym's Kubernetes manifests (base/, a kustomize
// base, and overlays/postgres) and the tests that stand in for a cluster
// and a container engine, neither of which CI can reach: the manifests are
// rendered with the kustomize library and decoded strictly into the
// Kubernetes API types; the binary the image ships runs as a non-root user
// with only its temporary directory writable; three real replicas sharing
// a token key serve a rollout behind nginx's grpc_pass and behind
// client-side round_robin through a rolling restart and a SIGKILL. The
// package has no code of its own; BenchmarkScale measures capacity
// (make bench-scale, docs/scaling.md).
package deploy
