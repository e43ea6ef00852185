package postgres

// This file bounds the memory one policy query makes its backend allocate.
//
// PostgreSQL has no per-query or per-backend memory limit: work_mem bounds
// a sort or a hash, not the values a query builds, so one SELECT with three
// string_agg(repeat(…, 1e6)) over 300 rows took its backend to 1.78 GB
// (issue 25), and no check of the text can tell such growth apart in
// general. What can be enforced is a watch: while a policy statement runs,
// its backend's private memory (resident anonymous pages, /proc/PID/statm's
// resident minus shared) is read every few milliseconds, and a backend that
// grows past Config.MaxBackendMemory over what it held at the first read
// gets a cancel request: the statement fails with SQLSTATE 57014, and the
// caller reports KindTooMuchMemory, the policy's failure. The first read
// comes one interval (2 ms) after the statement began, so that the many
// statements shorter than that cost a map entry and nothing else
// (BenchmarkMemWatchOverhead); a backend fills at most some tens of MiB in
// that time, which the bound leaves room for.
//
// The watch needs the backends on this machine (a server on loopback or a
// Unix socket whose backend processes this process can read in /proc, each
// checked by its process title, "postgres: ROLE DATABASE …"); for a remote
// server Warnings says that the bound is off, and the operator's
// recommendation (docs/limits.md) applies: run PostgreSQL with a per-backend
// address-space limit (the postmaster's RLIMIT_AS, inherited by every
// backend: `ulimit -v`, systemd's LimitAS=), under which an allocation past
// it fails with "out of memory" (53200, the policy's KindTooMuchMemory),
// and keep work_mem low.

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults of the watch.
const (
	// DefaultMaxBackendMemory is Config.MaxBackendMemory's default: a
	// statement may grow its backend by this much. Far above what the
	// corpora's queries use (work_mem is 32 MiB), and low enough that the
	// growth between two reads stays within issue 25's bound of 256 MiB.
	DefaultMaxBackendMemory int64 = 128 << 20
	// memWatchInterval is how often a watched backend is read.
	memWatchInterval = 2 * time.Millisecond
)

// memWatch reads the memory of the backends running policy statements and
// cancels those that grow past the limit. A nil *memWatch watches nothing.
type memWatch struct {
	limit    int64
	page     int64
	interval time.Duration
	procDir  string
	// signal sends SIGINT to a backend (syscall.Kill; tests replace it).
	signal func(pid int) error

	mu     sync.Mutex
	active map[*watched]struct{}
	wake   chan struct{}
	quit   chan struct{} // closed by stop
	once   sync.Once
	// fired counts the statements canceled for their memory.
	fired atomic.Int64
}

// watched is one statement under watch.
type watched struct {
	pid    int
	base   int64
	cancel func()
	// over is set once the backend passed the limit (and cancel was sent).
	over atomic.Bool
	// peak is the most the backend grew while watched, in bytes.
	peak atomic.Int64
}

func newMemWatch(limit int64) *memWatch {
	w := &memWatch{limit: limit, page: int64(os.Getpagesize()), interval: memWatchInterval, procDir: "/proc",
		signal: func(pid int) error { return syscall.Kill(pid, syscall.SIGINT) },
		active: map[*watched]struct{}{}, wake: make(chan struct{}, 1), quit: make(chan struct{})}
	return w
}

// start starts the reading loop; stop ends it.
func (w *memWatch) start() { go w.loop() }

func (w *memWatch) stop() {
	if w != nil {
		w.once.Do(func() { close(w.quit) })
	}
}

// anon returns the private resident memory of process pid, in bytes.
func (w *memWatch) anon(pid int) (int64, bool) {
	b, err := os.ReadFile(w.procDir + "/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0, false
	}
	f := bytes.Fields(b)
	if len(f) < 3 {
		return 0, false
	}
	res, err1 := strconv.ParseInt(string(f[1]), 10, 64)
	shared, err2 := strconv.ParseInt(string(f[2]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return (res - shared) * w.page, true
}

// isBackend reports whether pid is, on this machine, a PostgreSQL backend
// of role on database db (its process title).
func (w *memWatch) isBackend(pid int, role, db string) bool {
	if w == nil || pid <= 0 {
		return false
	}
	b, err := os.ReadFile(w.procDir + "/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	title := string(bytes.TrimRight(bytes.ReplaceAll(b, []byte{0}, []byte{' '}), " "))
	return bytes.HasPrefix([]byte(title), []byte("postgres: ")) &&
		bytes.Contains([]byte(title), []byte(" "+role+" ")) && bytes.Contains([]byte(title), []byte(" "+db+" "))
}

// watch starts watching backend pid (nil when w is nil); cancel is called
// once if it passes the limit. The caller ends the watch with done.
func (w *memWatch) watch(pid int, cancel func()) *watched {
	if w == nil {
		return nil
	}
	x := &watched{pid: pid, base: -1, cancel: cancel}
	w.mu.Lock()
	w.active[x] = struct{}{}
	first := len(w.active) == 1
	w.mu.Unlock()
	if first {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	return x
}

// done ends a watch; it reports whether the backend passed the limit.
func (w *memWatch) done(x *watched) bool {
	if w == nil || x == nil {
		return false
	}
	w.mu.Lock()
	delete(w.active, x)
	w.mu.Unlock()
	return x.over.Load()
}

// loop reads the watched backends every interval while there are any: a
// backend's first read is its base, the later ones are checked against it.
func (w *memWatch) loop() {
	t := time.NewTimer(w.interval)
	defer t.Stop()
	var batch []*watched
	for {
		w.mu.Lock()
		n := len(w.active)
		w.mu.Unlock()
		if n == 0 {
			select {
			case <-w.wake:
			case <-w.quit:
				return
			}
		}
		t.Reset(w.interval)
		select {
		case <-t.C:
		case <-w.quit:
			return
		}
		w.mu.Lock()
		batch = batch[:0]
		for x := range w.active {
			batch = append(batch, x)
		}
		w.mu.Unlock()
		for _, x := range batch {
			w.check(x)
		}
	}
}

// check reads one backend: its base on the first read, else its growth,
// canceling its statement past the limit. Only the loop calls it (and
// tests).
func (w *memWatch) check(x *watched) {
	now, ok := w.anon(x.pid)
	if !ok {
		return
	}
	if x.base < 0 {
		x.base = now
		return
	}
	grown := now - x.base
	if grown > x.peak.Load() {
		x.peak.Store(grown)
	}
	if grown > w.limit && x.over.CompareAndSwap(false, true) {
		w.fired.Add(1)
		// SIGINT is what pg_cancel_backend sends a backend: it cancels the
		// running statement (SQLSTATE 57014). Sent straight from here it
		// lands at once, where the cancel request needs a new connection
		// to the postmaster first; under CPU load that detour let a
		// fast-growing statement overshoot the limit by 150 MiB. It needs
		// the backend's user or root; otherwise (EPERM) the cancel
		// request alone does it, as before.
		_ = w.signal(x.pid)
		go x.cancel()
	}
}

// memoryMessage is the failure of a statement canceled for its memory.
func (w *memWatch) memoryMessage(label string) string {
	return fmt.Sprintf("%s made its database backend use more than %s of memory and was canceled", label, formatMiB(w.limit))
}

func formatMiB(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }
