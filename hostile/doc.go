// Package hostile holds the hostile-input suite: tests that build a real
// `avtgym serve` binary (without the race detector), run it as a separate
// process under a memory limit (GOMEMLIMIT and prlimit --as), and replay
// every attack that once crashed, stalled or escaped the server, plus more:
// SQL that allocates or runs without end, oversized and undecodable
// requests, batches sized to exhaust memory, LLM endpoints that flood
// replies, hang or answer with no readable completion, long questions, and
// corpora that reach outside themselves; on PostgreSQL, SQL that grows a
// backend, raises an environment's SQLSTATE or reaches past its private
// copy, against the production shape of the connection budget and replicas
// sharing a password key (postgres_test.go); at the front door, large
// requests without credentials, batches that would slip past admission
// control, and the access log's codes (frontdoor_attacks_test.go). After
// each attack the server must still be healthy and answer a normal step
// correctly, the episode must end as the protocol says, the shared database
// files must be byte-identical, and no file may appear outside the
// process's temporary directory. Nothing here asserts a duration: latency
// under attack is measured by the benchmarks in this package (make
// bench-hostile). The same harness runs the drain test: two replicas behind
// a client-side balancer, SIGTERM to one during a rollout, and no episode
// lost (drain_test.go).
package hostile
