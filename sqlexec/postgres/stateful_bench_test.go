package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"avtgym/sqlexec"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The stateful benchmarks verify harbor_M_1 (a guarded UPDATE, decided by
// three check queries) on the harbor sample.
//
//	go test ./sqlexec/postgres -run '^$' -bench 'Stateful' -benchtime 200x
func benchTask(b *testing.B) (mgmtTask, sqlexec.Job) {
	for _, m := range mgmtTasks(b) {
		if m.id == "harbor_M_1" {
			return m, m.checksJob(strings.Join(m.sol, ";\n"))
		}
	}
	b.Fatal("no harbor_M_1")
	return mgmtTask{}, sqlexec.Job{}
}

// birdReset is BIRD-Interact's way, on database target: drop it, create it
// again from the template (dropdb; createdb --template), connect (as the
// administrator, as BIRD-Interact's harness connects as its superuser) and
// run the same SQL (the predicted statements, then the check queries), each
// statement committed on its own. It returns the check queries' rows.
func birdReset(ctx context.Context, s *Server, tpl, target string, j sqlexec.Job) ([][][]any, error) {
	if _, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{target}.Sanitize()+" WITH (FORCE)"); err != nil {
		return nil, err
	}
	if _, err := s.admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", pgx.Identifier{target}.Sanitize(), pgx.Identifier{tpl}.Sanitize())); err != nil {
		return nil, err
	}
	cfg := s.adminCfg.ConnConfig.Copy()
	cfg.Database = target
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, j.Predicted, pgx.QueryExecModeSimpleProtocol); err != nil {
		return nil, err
	}
	var out [][][]any
	for _, q := range j.Checks {
		rows, err := conn.Query(ctx, q, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			return nil, err
		}
		rs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
		if err != nil {
			return nil, err
		}
		out = append(out, rs)
	}
	return out, nil
}

// BenchmarkStatefulVsReset: avtgym's isolated verification and
// BIRD-Interact's reset followed by the same SQL, alternately, one at a
// time, on the same database: the time per verification of each and their
// ratio (goal: ≥ 20).
func BenchmarkStatefulVsReset(b *testing.B) {
	s, d := openStateful(b, StatefulOptions{Clones: 2})
	_, j := benchTask(b)
	ctx := context.Background()
	target := "avtgym_bench_bird_0"
	defer s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+target+" WITH (FORCE)")
	mustVerify(b, d, j, true) // the reference is cached, as when serving
	var avt, bird time.Duration
	for b.Loop() {
		t0 := time.Now()
		v, err := d.Verify(ctx, j)
		if err != nil || !v.Success {
			b.Fatal(v, err)
		}
		t1 := time.Now()
		if _, err := birdReset(ctx, s, d.tpl, target, j); err != nil {
			b.Fatal(err)
		}
		bird += time.Since(t1)
		avt += t1.Sub(t0)
	}
	b.ReportMetric(float64(avt.Nanoseconds())/float64(b.N), "avtgym-ns/verification")
	b.ReportMetric(float64(bird.Nanoseconds())/float64(b.N), "bird-ns/verification")
	b.ReportMetric(float64(bird)/float64(avt), "speedup")
}

// BenchmarkStatefulVsResetParallel16: the same at concurrency 16 on the
// same database: each iteration runs 16 avtgym verifications at once (16
// private copies), then 16 BIRD-Interact resets at once (16 target
// databases, one per worker: the most BIRD-Interact's harness could do),
// and reports each one's verifications per second and their ratio (goal:
// ≥ 10).
func BenchmarkStatefulVsResetParallel16(b *testing.B) {
	const n = 16
	s, d := openStateful(b, StatefulOptions{Clones: n})
	_, j := benchTask(b)
	ctx := context.Background()
	targets := make([]string, n)
	for i := range targets {
		targets[i] = fmt.Sprintf("avtgym_bench_bird_%d", i)
	}
	defer func() {
		for _, t := range targets {
			s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+t+" WITH (FORCE)")
		}
	}()
	mustVerify(b, d, j, true)
	batch := func(f func(i int) error) time.Duration {
		t0 := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := f(i); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	var avt, bird time.Duration
	for b.Loop() {
		avt += batch(func(int) error {
			// Each worker runs several verifications, so that the batch
			// measures throughput rather than the start of 16 goroutines.
			for range 8 {
				v, err := d.Verify(ctx, j)
				if err != nil || !v.Success {
					return fmt.Errorf("%v %v", v, err)
				}
			}
			return nil
		})
		bird += batch(func(i int) error {
			_, err := birdReset(ctx, s, d.tpl, targets[i], j)
			return err
		})
	}
	avtRate := float64(8*n*b.N) / avt.Seconds()
	birdRate := float64(n*b.N) / bird.Seconds()
	b.ReportMetric(avtRate, "avtgym-verifications/s")
	b.ReportMetric(birdRate, "bird-verifications/s")
	b.ReportMetric(avtRate/birdRate, "throughput-ratio")
}

// BenchmarkStatefulDesigns measures the candidate designs of isolation on
// one copy, the same job (harbor_M_1's statements and checks):
//
//   - pool: StatefulDB.Verify, a pooled copy, the job in a transaction
//     rolled back, sequences reset (the design chosen);
//   - savepoint: one long transaction per copy, each job inside a SAVEPOINT
//     rolled back to, sequences reset;
//   - reclone: a fresh copy per job (DROP DATABASE, CREATE DATABASE ...
//     TEMPLATE, connect), the job, the copy kept for the next job's drop.
func BenchmarkStatefulDesigns(b *testing.B) {
	s, d := openStateful(b, StatefulOptions{Clones: 1})
	_, j := benchTask(b)
	ctx := context.Background()
	mustVerify(b, d, j, true)
	b.Run("pool", func(b *testing.B) {
		for b.Loop() {
			if v, err := d.Verify(ctx, j); err != nil || !v.Success {
				b.Fatal(v, err)
			}
		}
	})
	b.Run("savepoint", func(b *testing.B) {
		give := holdAll(b, d)
		defer give()
		c := d.clones[0]
		pc := c.pc
		if _, err := pc.Exec(ctx, "BEGIN READ WRITE").ReadAll(); err != nil {
			b.Fatal(err)
		}
		defer func() { pc.Exec(ctx, "ROLLBACK").ReadAll() }()
		stmts := append([]string{"SAVEPOINT job"}, j.Predicted)
		stmts = append(stmts, j.Checks...)
		stmts = append(stmts, "ROLLBACK TO SAVEPOINT job", c.quick)
		for b.Loop() {
			p := pc.StartPipeline(ctx)
			for _, q := range stmts {
				p.SendQueryParams(q, nil, nil, nil, nil)
			}
			if err := p.Sync(); err != nil {
				b.Fatal(err)
			}
			for range stmts {
				res, err := p.GetResults()
				if err != nil {
					b.Fatal(err)
				}
				if rr, ok := res.(*pgconn.ResultReader); ok {
					rr.Read()
				}
			}
			if _, err := p.GetResults(); err != nil {
				b.Fatal(err)
			}
			if err := p.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reclone", func(b *testing.B) {
		target := "avtgym_bench_reclone"
		defer s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+target+" WITH (FORCE)")
		for b.Loop() {
			if err := s.dropClone(ctx, target); err != nil {
				b.Fatal(err)
			}
			if err := s.createClone(ctx, target, d.tpl, d.work, d.inst); err != nil {
				b.Fatal(err)
			}
			pc, err := pgconn.ConnectConfig(ctx, s.cloneConnConfig(target))
			if err != nil {
				b.Fatal(err)
			}
			q := "BEGIN;" + j.Predicted + ";" + strings.Join(j.Checks, ";") + ";ROLLBACK"
			if _, err := pc.Exec(ctx, q).ReadAll(); err != nil {
				b.Fatal(err)
			}
			pc.Close(ctx)
		}
	})
}

// BenchmarkStatefulPython: a verification through a PyRunner (the Go
// rendering of harbor_M_1's Python test, connecting to the copy for each
// job as the Python worker does), one at a time.
func BenchmarkStatefulPython(b *testing.B) {
	tasks := mgmtTasks(b)
	_, d := openStateful(b, StatefulOptions{Clones: 2, Python: newGoRunner(tasks)})
	m, _ := benchTask(b)
	j := m.pyJob(strings.Join(m.sol, ";"))
	for b.Loop() {
		if v, err := d.Verify(context.Background(), j); err != nil || !v.Success {
			b.Fatal(v, err)
		}
	}
}
