package postgres

// This file is the process's budget of policy-role connections.
//
// Every connection this process opens as the policy role counts against
// Config.Connections: the persistent sessions of the private copies
// (StatefulOptions.Clones per Management database), the sessions the
// Python test workers open on the copies they are handed (at most one per
// worker, and at most one per copy), and the query pools of the working
// databases, which share what is left. The copies' and the workers'
// connections are reserved when a StatefulDB opens (it gets fewer copies
// than it asked for when the budget is short, never fewer than one); the
// query pools open connections on demand and, when the budget is spent,
// close an idle connection of another database's pool before they open
// one (BeforeConnect), or wait for one while the caller's context lasts
// (then KindBusy: the verifier is saturated, retry).
//
// Before anything is opened, ConnectConfig checks the budget against what
// the server allows: the role's CONNECTION LIMIT less the connections
// other processes (replicas) hold as the role now, and the server's
// max_connections less its reserved ones and every connection open now. A
// budget past either is an error naming the flag to change, so that a
// deployment fails at start rather than with "too many connections for
// role" under load (issue 25: 16 copies × 4 databases against a role limit
// of 50).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults of the budget.
const (
	// DefaultConnections is Config.Connections' default (lowered to what
	// the server has free).
	DefaultConnections = 32
	// queryFloor is the least the query pools keep of the budget when
	// copies and workers are reserved.
	queryFloor = 4
	// reclaimPause is the pause between two tries of a pool waiting for
	// the budget.
	reclaimPause = 5 * time.Millisecond
)

// ErrBudget is wrapped by the errors of a connection the budget refused.
var ErrBudget = errors.New("the PostgreSQL connection budget is spent")

// budget counts the policy-role connections of a Server.
type budget struct {
	total int
	// clock paces admit's tries (Config.Clock).
	clock Clock

	mu sync.Mutex
	// fixed are the reserved connections: the copies' sessions and the
	// Python workers'.
	fixed int
	// pyWorkers is the Python workers' count (Config.PythonConnections)
	// and pyReserved how many of them are reserved (at most the copies
	// made with a PyRunner).
	pyWorkers, pyReserved int
	pools                 map[*pgxpool.Pool]bool
	// waiting counts the connections waiting in admit: the pools count
	// them (they are being made) before they are let in.
	waiting int
}

// inUse is the connections the query pools hold (open or being opened).
// Called with mu held.
func (b *budget) inUse() int {
	n := 0
	for p := range b.pools {
		n += int(p.Stat().TotalConns())
	}
	return n
}

// reserve reserves up to want connections for private copies (and the
// Python workers that may use them), keeping queryFloor for the query
// pools; it returns how many copies it granted (0: none could be).
func (b *budget) reserve(want int, python bool) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	left := b.total - b.fixed - queryFloor
	n := 0
	py := 0
	for n < want {
		extraPy := 0
		if python && b.pyReserved+py < b.pyWorkers {
			extraPy = 1 // one more copy: room for one more worker's session
		}
		if n+py+1+extraPy > left {
			break
		}
		n++
		py += extraPy
	}
	b.fixed += n + py
	b.pyReserved += py
	return n
}

// release gives back n copies' reservations (and their workers').
func (b *budget) release(n int, python bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fixed -= n
	if python {
		py := min(n, b.pyReserved)
		b.pyReserved -= py
		b.fixed -= py
	}
}

// admit is a query pool's BeforeConnect: it lets a connection open while
// the pools and the reservations stay within the budget, closing another
// pool's idle connection to make room, else waiting while ctx lasts.
func (b *budget) admit(ctx context.Context) error {
	b.mu.Lock()
	b.waiting++
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.waiting--
		b.mu.Unlock()
	}()
	for {
		b.mu.Lock()
		// The pools' connections that were let in (open, or still being
		// made after admit), this one, and the reservations.
		ok := b.inUse()-b.waiting+1+b.fixed <= b.total
		var idle []*pgxpool.Pool
		if !ok {
			for p := range b.pools {
				if p.Stat().IdleConns() > 0 {
					idle = append(idle, p)
				}
			}
		}
		b.mu.Unlock()
		if ok {
			return nil
		}
		for _, p := range idle {
			if closeIdle(ctx, p) {
				break
			}
		}
		if err := b.clock.Sleep(ctx, reclaimPause); err != nil {
			return fmt.Errorf("%w: %d connections (Config.Connections, serve --postgres-connections) are in use or reserved, and none became free: %w",
				ErrBudget, b.total, err)
		}
	}
}

// closeIdle closes one idle connection of p; false when it had none.
func closeIdle(ctx context.Context, p *pgxpool.Pool) bool {
	conns := p.AcquireAllIdle(ctx)
	if len(conns) == 0 {
		return false
	}
	c := conns[0].Hijack()
	for _, o := range conns[1:] {
		o.Release()
	}
	cctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c.Close(cctx)
	return true
}

// addPool counts a query pool's connections against the budget.
func (b *budget) addPool(p *pgxpool.Pool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pools[p] = true
}

func (b *budget) removePool(p *pgxpool.Pool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.pools, p)
}

// ConnectionBudget says how the budget stands.
type ConnectionBudget struct {
	// Total is Config.Connections as checked at start; Reserved the
	// copies' and Python workers' connections; Pools what the query pools
	// hold now.
	Total, Reserved, Pools int
}

// Budget returns how the budget of policy-role connections stands.
func (s *Server) Budget() ConnectionBudget {
	s.budget.mu.Lock()
	defer s.budget.mu.Unlock()
	return ConnectionBudget{Total: s.budget.total, Reserved: s.budget.fixed, Pools: s.budget.inUse() - s.budget.waiting}
}

// checkBudget decides the budget at start: Config.Connections (0: the
// default, lowered to what is free) against the role's limit and the
// server's, as they stand now.
func (s *Server) checkBudget(ctx context.Context, conn *pgxpool.Conn) error {
	var roleLimit, maxConns, reserved, roleOpen, open int
	err := conn.QueryRow(ctx, `SELECT r.rolconnlimit, current_setting('max_connections')::int,
		current_setting('superuser_reserved_connections')::int,
		(SELECT count(*) FROM pg_stat_activity a WHERE a.usename = r.rolname)::int,
		(SELECT count(*) FROM pg_stat_activity a WHERE a.backend_type = 'client backend')::int
		FROM pg_roles r WHERE r.rolname = $1`, s.cfg.Role).Scan(&roleLimit, &maxConns, &reserved, &roleOpen, &open)
	if err != nil {
		return fmt.Errorf("postgres: reading the connection limits: %w", err)
	}
	roleFree := roleLimit - roleOpen
	if roleLimit < 0 {
		roleFree = maxConns
	}
	serverFree := maxConns - reserved - open
	free := min(roleFree, serverFree)
	want := s.cfg.Connections
	if want <= 0 {
		want = min(DefaultConnections, free)
	}
	minimum := queryFloor + 1
	if want < minimum {
		want = minimum // the error below says why it does not fit
	}
	switch {
	case want > roleFree:
		return fmt.Errorf("postgres: this process would open up to %d connections as the role %s (--postgres-connections), "+
			"but the role's CONNECTION LIMIT is %d and %d are open now (other replicas): lower --postgres-connections to at most %d "+
			"(at least %d), or raise the role's limit with --postgres-role-connections (every replica's budget must fit in it together)",
			want, s.cfg.Role, roleLimit, roleOpen, max(roleFree, 0), minimum)
	case want > serverFree:
		return fmt.Errorf("postgres: this process would open up to %d connections (--postgres-connections), but the server allows %d "+
			"(max_connections) less %d reserved for superusers and %d open now: lower --postgres-connections to at most %d "+
			"(at least %d), or raise max_connections on the server",
			want, maxConns, reserved, open, max(serverFree, 0), minimum)
	}
	s.budget.total = want
	return nil
}

// budgetPool makes a query pool of cfg count its connections against the
// budget; call register with the pool once it is made.
func (s *Server) budgetPool(cfg *pgxpool.Config) (register func(*pgxpool.Pool)) {
	cfg.BeforeConnect = func(ctx context.Context, _ *pgx.ConnConfig) error {
		return s.budget.admit(ctx)
	}
	return s.budget.addPool
}

// ShareClones returns how many private copies each of n Management
// databases should ask for so that they share what the budget has left
// fairly (python: each copy may also need a Python worker's session): at
// most DefaultClones, at least 1.
func (s *Server) ShareClones(n int, python bool) int {
	b := &s.budget
	b.mu.Lock()
	defer b.mu.Unlock()
	left := b.total - b.fixed - queryFloor
	per := 1
	if python {
		per = 2
	}
	return max(1, min(DefaultClones(), left/(max(n, 1)*per)))
}
