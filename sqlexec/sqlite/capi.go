package sqlite

// This file is the engine's small C layer over the SQLite library that
// mattn/go-sqlite3 compiles into the binary. mattn opens connections and
// runs the authorizer; everything a query does after that goes through the
// functions below, because mattn's row reader fetches every column of a row
// (expanding zeroblobs, copying gigabytes into Go) before the caller can
// look at a single size. Here a row's column types and sizes are read
// first, and its values fetched only when they fit the result's byte cap.
//
// Three more defences live here, each one enforced before the work it bounds:
//
//   - Memory. SQLite's allocator is wrapped (sqlite3_config, before SQLite
//     initialises) so that every allocation made while a connection runs a
//     query is charged to that connection; an allocation that would take the
//     connection past its query's memory cap fails with SQLITE_NOMEM and the
//     query ends with KindTooMuchMemory. Queries never fail because of what
//     other connections use.
//   - Time. A progress handler, called every progressOps virtual-machine
//     instructions, stops a query whose own thread has used more CPU time
//     than its limit (CLOCK_THREAD_CPUTIME_ID: a query is never timed out by
//     the load of other queries), whose wall-clock backstop has passed, or
//     whose caller canceled it.
//   - Size. SQLITE_LIMIT_LENGTH is set from the byte cap before each query,
//     so SQLite refuses to build an oversized string or blob (randomblob,
//     zeroblob, printf, group_concat...) before allocating it.

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;

typedef struct sqlite3_mem_methods {
	void *(*xMalloc)(int);
	void (*xFree)(void*);
	void *(*xRealloc)(void*, int);
	int (*xSize)(void*);
	int (*xRoundup)(int);
	int (*xInit)(void*);
	void (*xShutdown)(void*);
	void *pAppData;
} sqlite3_mem_methods;

extern int sqlite3_config(int, ...);
extern int sqlite3_prepare_v2(sqlite3*, const char*, int, sqlite3_stmt**, const char**);
extern int sqlite3_step(sqlite3_stmt*);
extern int sqlite3_finalize(sqlite3_stmt*);
extern int sqlite3_stmt_readonly(sqlite3_stmt*);
extern int sqlite3_column_count(sqlite3_stmt*);
extern const char *sqlite3_column_name(sqlite3_stmt*, int);
extern int sqlite3_column_type(sqlite3_stmt*, int);
extern int sqlite3_column_bytes(sqlite3_stmt*, int);
extern const void *sqlite3_column_blob(sqlite3_stmt*, int);
extern const unsigned char *sqlite3_column_text(sqlite3_stmt*, int);
extern long long sqlite3_column_int64(sqlite3_stmt*, int);
extern double sqlite3_column_double(sqlite3_stmt*, int);
extern int sqlite3_limit(sqlite3*, int, int);
extern void sqlite3_progress_handler(sqlite3*, int, int(*)(void*), void*);
extern void sqlite3_interrupt(sqlite3*);
extern const char *sqlite3_errmsg(sqlite3*);
extern int sqlite3_errcode(sqlite3*);
extern int sqlite3_extended_errcode(sqlite3*);
extern int sqlite3_deserialize(sqlite3*, const char*, unsigned char*, long long, long long, unsigned int);
extern unsigned char *sqlite3_serialize(sqlite3*, const char*, long long*, unsigned int);
extern void *sqlite3_malloc64(unsigned long long);
extern void sqlite3_free(void*);
extern int sqlite3_file_control(sqlite3*, const char*, int, void*);
extern int sqlite3_db_config(sqlite3*, int, ...);
extern long long sqlite3_memory_used(void);
extern long long sqlite3_memory_highwater(int);

#define AVT_CONFIG_MALLOC 4
#define AVT_CONFIG_GETMALLOC 5
#define AVT_ROW 100
#define AVT_NOMEM 7
#define AVT_INTEGER 1
#define AVT_FLOAT 2
#define AVT_TEXT 3
#define AVT_BLOB 4

// Why a query was stopped by avt_progress.
#define AVT_STOP_CANCEL 1
#define AVT_STOP_CPU 2
#define AVT_STOP_WALL 3

// avt_conn is a connection's accounting: the memory SQLite holds for it and
// the limits of the query it runs.
typedef struct avt_conn {
	sqlite3 *db;
	int64_t mem_used;      // bytes allocated on this connection's behalf (atomic)
	int64_t mem_limit;     // while a query runs: mem_used may not pass it (0: none)
	int mem_exceeded;      // an allocation was refused because of mem_limit
	int64_t cpu_start;     // thread CPU clock when the query started (ns)
	int64_t cpu_limit;     // ns of thread CPU time the query may use (0: none)
	int64_t wall_deadline; // CLOCK_MONOTONIC ns after which the query stops (0: none)
	int cancel;            // set (atomically) by another thread to stop the query
	int stopped;           // AVT_STOP_* of the last stop
} avt_conn;

// avt_cur is the connection whose query this thread runs inside one of the
// functions below; allocations are charged to it.
static __thread avt_conn *avt_cur;

static sqlite3_mem_methods avt_orig;

// Every allocation carries a 16-byte header: its owner and its size. The
// rest keeps SQLite's 8-byte alignment.
#define AVT_HDR 16

static void *avt_malloc(int n) {
	avt_conn *c = avt_cur;
	if (c && c->mem_limit > 0 && __atomic_load_n(&c->mem_used, __ATOMIC_RELAXED) + n > c->mem_limit) {
		c->mem_exceeded = 1;
		return 0;
	}
	char *p = avt_orig.xMalloc(n + AVT_HDR);
	if (!p) return 0;
	*(avt_conn**)p = c;
	*(int64_t*)(p + 8) = n;
	if (c) __atomic_add_fetch(&c->mem_used, n, __ATOMIC_RELAXED);
	return p + AVT_HDR;
}

static void avt_free(void *q) {
	if (!q) return;
	char *p = (char*)q - AVT_HDR;
	avt_conn *c = *(avt_conn**)p;
	if (c) __atomic_sub_fetch(&c->mem_used, *(int64_t*)(p + 8), __ATOMIC_RELAXED);
	avt_orig.xFree(p);
}

static void *avt_realloc(void *q, int n) {
	if (!q) return avt_malloc(n);
	char *p = (char*)q - AVT_HDR;
	avt_conn *c = *(avt_conn**)p;
	int64_t old = *(int64_t*)(p + 8);
	avt_conn *cur = avt_cur;
	if (cur && cur == c && cur->mem_limit > 0 && n > old &&
	    __atomic_load_n(&cur->mem_used, __ATOMIC_RELAXED) + (n - old) > cur->mem_limit) {
		cur->mem_exceeded = 1;
		return 0;
	}
	char *np = avt_orig.xRealloc(p, n + AVT_HDR);
	if (!np) return 0;
	*(int64_t*)(np + 8) = n;
	if (c) __atomic_add_fetch(&c->mem_used, (int64_t)n - old, __ATOMIC_RELAXED);
	return np + AVT_HDR;
}

static int avt_size(void *q) { return q ? (int)*(int64_t*)((char*)q - AVT_HDR + 8) : 0; }
static int avt_roundup(int n) { return (n + 7) & ~7; }
static int avt_init(void *x) { return avt_orig.xInit(avt_orig.pAppData); }
static void avt_shutdown(void *x) { avt_orig.xShutdown(avt_orig.pAppData); }

static sqlite3_mem_methods avt_methods = {
	avt_malloc, avt_free, avt_realloc, avt_size, avt_roundup, avt_init, avt_shutdown, 0,
};

// avt_install wraps SQLite's allocator; it must run before SQLite
// initialises (the package's init does it, before any connection opens).
static int avt_install(void) {
	int rc = sqlite3_config(AVT_CONFIG_GETMALLOC, &avt_orig);
	if (rc) return rc;
	return sqlite3_config(AVT_CONFIG_MALLOC, &avt_methods);
}

static int64_t avt_clock(clockid_t id) {
	struct timespec ts;
	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int avt_progress(void *arg) {
	avt_conn *c = arg;
	if (__atomic_load_n(&c->cancel, __ATOMIC_RELAXED)) { c->stopped = AVT_STOP_CANCEL; return 1; }
	if (c->cpu_limit > 0 && avt_clock(CLOCK_THREAD_CPUTIME_ID) - c->cpu_start > c->cpu_limit) { c->stopped = AVT_STOP_CPU; return 1; }
	if (c->wall_deadline > 0 && avt_clock(CLOCK_MONOTONIC) > c->wall_deadline) { c->stopped = AVT_STOP_WALL; return 1; }
	return 0;
}

static avt_conn *avt_conn_new(sqlite3 *db, int progress_ops) {
	avt_conn *c = calloc(1, sizeof(avt_conn));
	if (!c) return 0;
	c->db = db;
	sqlite3_progress_handler(db, progress_ops, avt_progress, c);
	return c;
}

// avt_begin prepares c for a query with the given limits; the CPU clock
// starts on the calling thread, which runs the whole query.
static void avt_begin(avt_conn *c, int64_t mem_cap, int64_t cpu_limit, int64_t wall_limit) {
	c->mem_exceeded = 0;
	c->stopped = 0;
	__atomic_store_n(&c->cancel, 0, __ATOMIC_RELAXED);
	c->mem_limit = mem_cap > 0 ? __atomic_load_n(&c->mem_used, __ATOMIC_RELAXED) + mem_cap : 0;
	c->cpu_limit = cpu_limit;
	c->cpu_start = cpu_limit > 0 ? avt_clock(CLOCK_THREAD_CPUTIME_ID) : 0;
	c->wall_deadline = wall_limit > 0 ? avt_clock(CLOCK_MONOTONIC) + wall_limit : 0;
}

static void avt_end(avt_conn *c) {
	c->mem_limit = 0;
	c->cpu_limit = 0;
	c->wall_deadline = 0;
}

static int64_t avt_mem_used(avt_conn *c) { return __atomic_load_n(&c->mem_used, __ATOMIC_RELAXED); }

static void avt_cancel(avt_conn *c) {
	__atomic_store_n(&c->cancel, 1, __ATOMIC_RELAXED);
	sqlite3_interrupt(c->db);
}

static int avt_prepare(avt_conn *c, const char *sql, int n, sqlite3_stmt **stmt, int *tail) {
	const char *t = 0;
	avt_cur = c;
	int rc = sqlite3_prepare_v2(c->db, sql, n, stmt, &t);
	avt_cur = 0;
	*tail = t ? (int)(t - sql) : n;
	return rc;
}

static int avt_finalize(avt_conn *c, sqlite3_stmt *s) {
	avt_cur = c;
	int rc = sqlite3_finalize(s);
	avt_cur = 0;
	return rc;
}

#define AVT_DESERIALIZE_FREEONCLOSE 1
#define AVT_DESERIALIZE_RESIZEABLE 2
#define AVT_FCNTL_SIZE_LIMIT 36
#define AVT_DBCONFIG_ENABLE_LOAD_EXTENSION 1005
#define AVT_DBCONFIG_DEFENSIVE 1010
#define AVT_DBCONFIG_TRUSTED_SCHEMA 1017

// avt_serialize returns a copy of db's main database (sqlite3_malloc'd,
// freed with sqlite3_free) and its size in *n; NULL when it fails. The
// copy is charged to no connection.
static unsigned char *avt_serialize(sqlite3 *db, int64_t *n) {
	long long sz = 0;
	unsigned char *p = sqlite3_serialize(db, "main", &sz, 0);
	*n = sz;
	return p;
}

// avt_deserialize makes c's main database an in-memory copy of the n-byte
// image img. The copy's buffer is allocated here while no connection is
// current, so it is charged to none (its size is bounded apart, see
// stateful.go); SQLite owns it, frees it when the connection closes and may
// grow it with sqlite3_realloc64 up to max bytes (SQLITE_FCNTL_SIZE_LIMIT),
// past which writes fail with SQLITE_FULL.
static int avt_deserialize(avt_conn *c, const void *img, int64_t n, int64_t max) {
	unsigned char *buf = sqlite3_malloc64(n > 0 ? (unsigned long long)n : 1);
	if (!buf) return AVT_NOMEM;
	if (n > 0) memcpy(buf, img, n);
	avt_cur = c;
	int rc = sqlite3_deserialize(c->db, "main", buf, n, n, AVT_DESERIALIZE_FREEONCLOSE | AVT_DESERIALIZE_RESIZEABLE);
	if (rc == 0) {
		long long lim = max;
		rc = sqlite3_file_control(c->db, "main", AVT_FCNTL_SIZE_LIMIT, &lim);
	}
	avt_cur = 0;
	return rc;
}

// avt_deserialize_fixed makes c's main database an in-memory database on
// buf: n bytes of content in a buffer of room bytes, which SQLite neither
// frees nor grows (a write past room fails with SQLITE_FULL), and which is
// charged to no connection: the caller maps it (see image_linux.go) and
// unmaps it after the connection closes.
static int avt_deserialize_fixed(avt_conn *c, void *buf, int64_t n, int64_t room) {
	avt_cur = c;
	int rc = sqlite3_deserialize(c->db, "main", buf, n, room, 0);
	avt_cur = 0;
	return rc;
}

// avt_harden applies SQLite's own advice for untrusted SQL
// (https://sqlite.org/security.html) to a writable connection: defensive
// mode (no writes to shadow tables or sqlite_dbpage, writable_schema
// without effect, no journal_mode=OFF), an untrusted schema (functions
// with side effects never run from views or triggers) and no extension
// loading.
static int avt_harden(sqlite3 *db) {
	int rc = sqlite3_db_config(db, AVT_DBCONFIG_DEFENSIVE, 1, (int*)0);
	if (rc == 0) rc = sqlite3_db_config(db, AVT_DBCONFIG_TRUSTED_SCHEMA, 0, (int*)0);
	if (rc == 0) rc = sqlite3_db_config(db, AVT_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, (int*)0);
	return rc;
}

// avt_col is one column of the current row.
typedef struct avt_col {
	int typ;
	int n;         // bytes of a text or blob
	int64_t i64;
	double f64;
	const void *p; // text or blob bytes, valid until the next step
} avt_col;

// avt_step steps s once. With fetch, a row's column types and sizes go to
// cols and its cost (see costOf in sqlite.go) to *cost; only when the cost
// fits in budget are the text and blob bytes fetched (which expands
// zeroblobs). Without fetch the row is dropped unread.
static int avt_step(avt_conn *c, sqlite3_stmt *s, int fetch, avt_col *cols, int ncol, int64_t budget, int64_t *cost) {
	avt_cur = c;
	int rc = sqlite3_step(s);
	if (rc == AVT_ROW && fetch) {
		int64_t total = 0;
		for (int i = 0; i < ncol; i++) {
			avt_col *col = &cols[i];
			col->typ = sqlite3_column_type(s, i);
			col->n = 0;
			col->p = 0;
			total += 16;
			switch (col->typ) {
			case AVT_INTEGER: col->i64 = sqlite3_column_int64(s, i); total += 8; break;
			case AVT_FLOAT: col->f64 = sqlite3_column_double(s, i); total += 8; break;
			case AVT_TEXT: case AVT_BLOB: col->n = sqlite3_column_bytes(s, i); total += col->n; break;
			}
		}
		*cost = total;
		if (total <= budget) {
			for (int i = 0; i < ncol && rc == AVT_ROW; i++) {
				avt_col *col = &cols[i];
				if (col->typ == AVT_TEXT) col->p = sqlite3_column_text(s, i);
				else if (col->typ == AVT_BLOB) col->p = sqlite3_column_blob(s, i);
				else continue;
				if (!col->p && col->n > 0) rc = AVT_NOMEM;
			}
		}
	}
	avt_cur = 0;
	return rc;
}
*/
import "C"

import (
	"errors"
	"reflect"
	"time"
	"unsafe"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// progressOps is how many virtual-machine instructions run between two
// checks of a query's clocks and cancel flag.
const progressOps = 4096

// SQLite limit ids (sqlite3_limit).
const (
	limitLength    = 0
	limitColumn    = 2
	limitExprDepth = 3
	limitAttached  = 7
	limitTrigger   = 10
)

// Parser limits, pinned (SQLite's defaults) so that they hold whatever the
// build: SQLITE_LIMIT_EXPR_DEPTH bounds the expression tree the parser
// builds (deeper is a parse error, "Expression tree is too large"), the
// same bound sqlexec/pgparse puts before libpg_query; SQLITE_LIMIT_TRIGGER_DEPTH
// bounds triggers firing triggers.
const (
	maxExprDepth    = 1000
	maxTriggerDepth = 1000
)

// accountingErr is non-nil when SQLite's allocator could not be wrapped
// (SQLite was initialised before this package's init); Open then refuses
// to serve, because no query's memory could be bounded.
var accountingErr error

func init() {
	if rc := C.avt_install(); rc != 0 {
		accountingErr = errors.New("sqlite: memory accounting is unavailable: SQLite was initialised before the engine could wrap its allocator")
	}
}

// rawDB returns the sqlite3* handle of a mattn connection. mattn keeps it in
// an unexported field; reading it is tied to the pinned driver version, and
// TestRawHandle fails loudly if the field ever moves.
func rawDB(c *sqlite3.SQLiteConn) (*C.sqlite3, error) {
	f := reflect.ValueOf(c).Elem().FieldByName("db")
	if !f.IsValid() || f.Kind() != reflect.Pointer {
		return nil, errors.New("sqlite: the driver's connection has no db handle field (driver version changed?)")
	}
	p := f.UnsafePointer()
	if p == nil {
		return nil, errors.New("sqlite: the driver's connection is closed")
	}
	return (*C.sqlite3)(p), nil
}

// cstmt is a prepared statement and ccol a column of its current row; other files use
// these names so that only this file speaks cgo.
type (
	cstmt = *C.sqlite3_stmt
	ccol  = C.avt_col
)

// Why the progress handler stopped a query (AVT_STOP_*).
const (
	stopCancel = 1
	stopCPU    = 2
	stopWall   = 3
)

// cconn is the C-level state of one connection.
type cconn struct {
	db *C.sqlite3
	a  *C.avt_conn
}

func newCConn(c *sqlite3.SQLiteConn) (*cconn, error) {
	db, err := rawDB(c)
	if err != nil {
		return nil, err
	}
	a := C.avt_conn_new(db, progressOps)
	if a == nil {
		return nil, errors.New("sqlite: out of memory")
	}
	return &cconn{db: db, a: a}, nil
}

// free releases the accounting once the connection is closed. A connection
// that somehow still owns memory keeps its record (frees of that memory
// would read it); that is a few dozen bytes, never a crash.
func (c *cconn) free() {
	if c.a != nil && C.avt_mem_used(c.a) == 0 {
		C.free(unsafe.Pointer(c.a))
	}
	c.a = nil
}

func (c *cconn) memUsed() int64 { return int64(C.avt_mem_used(c.a)) }

func (c *cconn) setLimit(id, v int) { C.sqlite3_limit(c.db, C.int(id), C.int(v)) }

func (c *cconn) begin(memCap int64, cpu, wall time.Duration) {
	C.avt_begin(c.a, C.int64_t(memCap), C.int64_t(cpu), C.int64_t(wall))
}

func (c *cconn) end() { C.avt_end(c.a) }

func (c *cconn) cancel() { C.avt_cancel(c.a) }

// stopReason reports why the progress handler stopped the last query.
func (c *cconn) stopReason() int { return int(c.a.stopped) }

func (c *cconn) memExceeded() bool { return c.a.mem_exceeded != 0 }

func (c *cconn) errmsg() string { return C.GoString(C.sqlite3_errmsg(c.db)) }

func (c *cconn) errcode() int { return int(C.sqlite3_errcode(c.db)) }

// prepare compiles the first statement of sql; tail is the byte offset
// where the rest begins. A nil statement with rc 0 means sql held only
// whitespace or comments.
func (c *cconn) prepare(sql string) (stmt cstmt, tail int, rc int) {
	if sql == "" {
		return nil, 0, 0
	}
	cs := C.CString(sql)
	defer C.free(unsafe.Pointer(cs))
	var t C.int
	r := C.avt_prepare(c.a, cs, C.int(len(sql)), &stmt, &t)
	return stmt, int(t), int(r)
}

func (c *cconn) finalize(s cstmt) { C.avt_finalize(c.a, s) }

// step steps s once; see avt_step.
func (c *cconn) step(s cstmt, fetch bool, cols []ccol, budget int64) (rc int, cost int64) {
	var f C.int
	var p *C.avt_col
	if fetch {
		f = 1
		if len(cols) > 0 {
			p = &cols[0]
		}
	}
	var n C.int64_t
	rc = int(C.avt_step(c.a, s, f, p, C.int(len(cols)), C.int64_t(budget), &n))
	return rc & 0xff, int64(n)
}

func stmtReadonly(s cstmt) bool { return C.sqlite3_stmt_readonly(s) != 0 }

func columnNames(s cstmt) []string {
	n := int(C.sqlite3_column_count(s))
	names := make([]string, n)
	for i := range names {
		names[i] = C.GoString(C.sqlite3_column_name(s, C.int(i)))
	}
	return names
}

// SQLite result codes used here.
const (
	rcOK        = 0
	rcError     = 1
	rcAuth      = 23
	rcInterrupt = 9
	rcNoMem     = 7
	rcTooBig    = 18
	rcReadonly  = 8
	rcFull      = 13
	rcRow       = 100
	rcDone      = 101
)

// serialize returns an image of the connection's main database (what
// sqlite3_serialize writes: every page, read through the connection's
// pager). The image lives in Go memory; nothing of it is charged to a query.
func (c *cconn) serialize() ([]byte, error) {
	var n C.int64_t
	p := C.avt_serialize(c.db, &n)
	if p == nil {
		return nil, errors.New("sqlite: serializing the database failed: " + c.errmsg())
	}
	defer C.sqlite3_free(unsafe.Pointer(p))
	out := make([]byte, int(n))
	copy(out, unsafe.Slice((*byte)(unsafe.Pointer(p)), int(n)))
	return out, nil
}

// deserialize makes the connection's main database a private in-memory copy
// of img that may grow to maxBytes; see avt_deserialize.
func (c *cconn) deserialize(img []byte, maxBytes int64) int {
	var p unsafe.Pointer
	if len(img) > 0 {
		p = unsafe.Pointer(&img[0])
	}
	return int(C.avt_deserialize(c.a, p, C.int64_t(len(img)), C.int64_t(maxBytes)))
}

// deserializeFixed makes the connection's main database an in-memory
// database on buf, which holds n bytes of content and may fill up to room
// bytes; see avt_deserialize_fixed. buf must stay mapped until the
// connection is closed.
func (c *cconn) deserializeFixed(buf []byte, n, room int64) int {
	return int(C.avt_deserialize_fixed(c.a, unsafe.Pointer(&buf[0]), C.int64_t(n), C.int64_t(room)))
}

// harden applies defensive mode, an untrusted schema and no extension
// loading to the connection; see avt_harden.
func (c *cconn) harden() int { return int(C.avt_harden(c.db)) }

// sqliteMemory returns the bytes SQLite holds in the whole process now and
// at most since the last reset (sqlite3_memory_used, _highwater).
func sqliteMemory(reset bool) (used, peak int64) {
	r := C.int(0)
	if reset {
		r = 1
	}
	return int64(C.sqlite3_memory_used()), int64(C.sqlite3_memory_highwater(r))
}

// cell reads column i of the row avt_step fetched.
func cell(col *ccol) any {
	switch col.typ {
	case 1:
		return int64(col.i64)
	case 2:
		return float64(col.f64)
	case 3:
		if col.n == 0 {
			return ""
		}
		return C.GoStringN((*C.char)(col.p), col.n)
	case 4:
		if col.n == 0 {
			return []byte{}
		}
		return C.GoBytes(col.p, col.n)
	}
	return nil
}
