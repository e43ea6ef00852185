package postgres

// This file is the round trip that Query (query.go) and a stateful job (job.go)
// both make: a list of requests, sent at once in pgconn's pipeline mode, whose
// results are read back in order, each checked to be what its request
// expects. What the requests are, and what a failure means, is each caller's.

import (
	"context"
	"fmt"

	"avtgym/sqlexec"

	"github.com/jackc/pgx/v5/pgconn"
)

// op is what a request sends.
type op uint8

const (
	// opQuery runs a statement as text (no parameters).
	opQuery op = iota
	// opPrepared runs a prepared statement.
	opPrepared
	// opPrepare prepares a statement.
	opPrepare
	// opDeallocate deallocates a prepared statement.
	opDeallocate
	// opSync is a sync point: a failure skips the requests up to it.
	opSync
)

// wire is a request as it is sent.
type wire struct {
	op   op
	text string // opQuery, opPrepare: the SQL
	name string // opPrepared, opPrepare, opDeallocate: the prepared statement
}

// wired is a request of a pipeline (a Query's request, a job's jobReq).
type wired interface{ wired() wire }

// send starts a pipeline on pc, bounded by ctx, and sends every request;
// the last one, a sync point, goes with the flush (Pipeline.Sync).
func send[R wired](ctx context.Context, pc *pgconn.PgConn, reqs []R) (*pgconn.Pipeline, error) {
	p := pc.StartPipeline(ctx)
	for i, r := range reqs {
		w := r.wired()
		switch w.op {
		case opQuery:
			p.SendQueryParams(w.text, nil, nil, nil, nil)
		case opPrepared:
			p.SendQueryPrepared(w.name, nil, nil, nil)
		case opPrepare:
			p.SendPrepare(w.name, w.text, nil)
		case opDeallocate:
			p.SendDeallocate(w.name)
		case opSync:
			if i < len(reqs)-1 {
				p.SendPipelineSync()
			}
		}
	}
	return p, p.Sync()
}

// nextResult reads the pipeline's next result, which must be what w
// expects: a result (returned, to be read and closed) for a statement, a
// statement description for a prepare, the end of a deallocation, the end of
// the pipeline for a sync point. A statement that failed reports it when
// its result is closed; a prepare or deallocation here.
func nextResult(p *pgconn.Pipeline, w wire) (*pgconn.ResultReader, error) {
	out, err := p.GetResults()
	if err != nil {
		return nil, err
	}
	switch w.op {
	case opSync:
		if _, ok := out.(*pgconn.PipelineSync); !ok {
			return nil, fmt.Errorf("postgres: expected the end of the pipeline, got %T", out)
		}
	case opPrepare:
		if _, ok := out.(*pgconn.StatementDescription); !ok {
			return nil, fmt.Errorf("postgres: expected a statement description, got %T", out)
		}
	case opDeallocate:
		if _, ok := out.(*pgconn.CloseComplete); !ok {
			return nil, fmt.Errorf("postgres: expected the end of a deallocation, got %T", out)
		}
	default:
		rr, ok := out.(*pgconn.ResultReader)
		if !ok {
			return nil, fmt.Errorf("postgres: expected a result, got %T", out)
		}
		return rr, nil
	}
	return nil, nil
}

// drain reads a result to its end, and reports the statement's error.
func drain(rr *pgconn.ResultReader) error {
	for rr.NextRow() {
	}
	_, err := rr.Close()
	return err
}

// setMessageCap bounds the protocol messages pc reads by lim.MaxBytes (with
// room for row descriptions and error messages), or lifts the bound.
func setMessageCap(pc *pgconn.PgConn, lim sqlexec.Limits) {
	if lim.MaxBytes > 0 {
		pc.Frontend().SetMaxBodyLen(int(min(max(lim.MaxBytes+1024, minMessageCap), 1<<30)))
	} else {
		pc.Frontend().SetMaxBodyLen(0)
	}
}
