package pytests

// This file manages one worker process: start and handshake, one job at a
// time over the JSON-lines protocol, stop and kill.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"avtgym/sqlexec"
)

// maxLine bounds a protocol line from a worker (a response is small: the
// worker clips its reason to a few kilobytes).
const maxLine = 1 << 20

// termGrace is how long a worker has between SIGTERM (on which it cancels
// its statement and exits) and SIGKILL.
const termGrace = 300 * time.Millisecond

// worker is one Python process.
type worker struct {
	pid  int
	cmd  *exec.Cmd
	in   *os.File      // the worker's stdin
	out  *bufio.Reader // the protocol
	outF *os.File
	done chan struct{} // closed when the process has exited
	log  *zap.Logger

	jobs     int   // jobs answered (by the goroutine holding the worker)
	memLimit int64 // its RLIMIT_DATA (0: none)

	mu      sync.Mutex
	waitErr error
	tail    []string // the last lines of its stderr
}

// hello is the worker's first line.
type hello struct {
	Hello   int    `json:"hello"`
	Python  string `json:"python"`
	Psycopg string `json:"psycopg"`
	Libpq   int    `json:"libpq"`
	Missing string `json:"missing"`
	Detail  string `json:"detail"`
	// MemoryLimit is the worker's RLIMIT_DATA in bytes (0: none),
	// MemoryBase what it used when it set it; MemoryUnlimited says why it
	// has none although one was asked for.
	MemoryLimit     int64  `json:"memory_limit"`
	MemoryBase      int64  `json:"memory_base"`
	MemoryUnlimited string `json:"memory_unlimited"`
}

// start starts a worker and waits for its hello.
func (p *Pool) start(ctx context.Context) (*worker, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	growth := p.cfg.MaxWorkerMemory
	if growth < 0 {
		growth = 0
	}
	cmd := exec.Command(p.cfg.Python, "-c", workerScript, fmt.Sprintf("--max-memory=%d", growth))
	cmd.Env = append(os.Environ(), p.cfg.Env...)
	cmd.Dir = "/"
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	// The child holds its ends now; ours must go, so that its exit reads as EOF.
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("%w (starting %s: %v)", ErrNoPython, p.cfg.Python, err)
		}
		return nil, fmt.Errorf("pytests: starting %s: %w", p.cfg.Python, err)
	}
	w := &worker{
		pid:  cmd.Process.Pid,
		cmd:  cmd,
		in:   inW,
		out:  bufio.NewReaderSize(outR, 64<<10),
		outF: outR,
		done: make(chan struct{}),
		log:  p.log.With(zap.Int("pid", cmd.Process.Pid)),
	}
	stderrDone := make(chan struct{})
	go w.readStderr(errR, stderrDone)
	go func() {
		err := cmd.Wait()
		<-stderrDone // the tail is complete before done closes
		w.mu.Lock()
		w.waitErr = err
		w.mu.Unlock()
		close(w.done)
	}()

	h, err := w.handshake(ctx, p.cfg.StartTimeout)
	if err != nil {
		w.kill()
		return nil, err
	}
	if h.Missing != "" {
		w.kill()
		return nil, fmt.Errorf("%w (%s is missing or unusable for %s: %s)", ErrNoPython, h.Missing, p.cfg.Python, h.Detail)
	}
	w.log.Info("python test worker started", zap.String("python", h.Python), zap.String("psycopg", h.Psycopg), zap.Int("libpq", h.Libpq),
		zap.Int64("memory_limit", h.MemoryLimit), zap.Int64("memory_base", h.MemoryBase))
	if h.MemoryUnlimited != "" {
		w.log.Warn("python test worker runs without a memory limit", zap.String("why", h.MemoryUnlimited))
	}
	w.memLimit = h.MemoryLimit
	return w, nil
}

// handshake reads the hello line.
func (w *worker) handshake(ctx context.Context, timeout time.Duration) (hello, error) {
	var h hello
	lines := make(chan error, 1)
	var line []byte
	go func() {
		var err error
		line, err = readLine(w.out)
		lines <- err
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var err error
	select {
	case err = <-lines:
	case <-timer.C:
		w.kill()
		<-lines
		return h, fmt.Errorf("pytests: the Python test worker did not start within %v%s", timeout, w.stderrTail())
	case <-ctx.Done():
		w.kill()
		<-lines
		return h, ctx.Err()
	}
	if err != nil {
		w.kill()
		return h, fmt.Errorf("pytests: the Python test worker (%s) did not start: %v%s", w.cmd.Path, w.exitString(), w.stderrTail())
	}
	if jerr := json.Unmarshal(line, &h); jerr != nil || h.Hello != 1 {
		w.kill()
		return h, fmt.Errorf("pytests: the Python test worker started with %q, not the protocol's hello (is %s Python 3?)", clip(string(line), 200), w.cmd.Path)
	}
	return h, nil
}

// do sends a request (a request or a lintRequest, whose ID is id) and reads
// its response. Past killAt, or when ctx is canceled, the worker is killed;
// on any failure the worker is dead when do returns, and the error says why.
func (w *worker) do(ctx context.Context, id int64, req any, killAt time.Time) (response, error) {
	body, err := json.Marshal(req)
	if err != nil {
		w.kill()
		return response{}, fmt.Errorf("pytests: encoding the job: %w", err)
	}
	body = append(body, '\n')
	type answer struct {
		resp response
		err  error
	}
	answers := make(chan answer, 1)
	go func() {
		if _, err := w.in.Write(body); err != nil {
			answers <- answer{err: fmt.Errorf("sending the job: %v", err)}
			return
		}
		line, err := readLine(w.out)
		if err != nil {
			answers <- answer{err: err}
			return
		}
		var r response
		if err := json.Unmarshal(line, &r); err != nil || !knownOutcome(r.Outcome) || r.ID != id {
			answers <- answer{err: fmt.Errorf("it answered %q, which is not the protocol's answer to job %d", clip(string(line), 200), id)}
			return
		}
		answers <- answer{resp: r}
	}()

	timer := time.NewTimer(time.Until(killAt))
	defer timer.Stop()
	cancel := ctx.Done()
	for {
		select {
		case a := <-answers:
			if a.err != nil {
				w.kill()
				return response{}, w.failed("%v", a.err)
			}
			return a.resp, nil
		case <-timer.C:
			w.kill()
			<-answers
			return response{}, w.failed("it was still busy past the job's deadline and grace period (a test running on in Python), and was killed")
		case <-cancel:
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// The worker stops its SQL at the same deadline; its answer
				// (a timeout) is still worth waiting for, until killAt.
				cancel = nil
				continue
			}
			w.kill()
			<-answers
			return response{}, sqlexec.Errorf(sqlexec.KindUnavailable, ctx.Err(), "the job was canceled: %v", ctx.Err())
		}
	}
}

func knownOutcome(o string) bool {
	switch o {
	case "passed", "failed", "broken", "lost", "error", "linted":
		return true
	}
	return false
}

// failed builds the error of a job whose worker failed (and was killed).
func (w *worker) failed(format string, args ...any) error {
	select {
	case <-w.done:
	case <-time.After(5 * time.Second):
	}
	msg := fmt.Sprintf(format, args...)
	w.log.Warn("python test worker failed", zap.String("why", msg), zap.String("exit", w.exitString()))
	return sqlexec.Errorf(sqlexec.KindUnavailable, ErrWorker, "%v: %s (%s)%s", ErrWorker, msg, w.exitString(), w.stderrTail())
}

// alive reports whether the process is still running.
func (w *worker) alive() bool {
	select {
	case <-w.done:
		return false
	default:
		return true
	}
}

// stop asks the worker to exit (end of input) and kills it if it has not
// within ctx (or 5 seconds).
func (w *worker) stop(ctx context.Context) {
	w.in.Close()
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-w.done:
	case <-t.C:
		w.kill()
	case <-ctx.Done():
		w.kill()
	}
	w.outF.Close()
}

// kill stops the worker's process group (SIGTERM, then SIGKILL) and closes
// the pipes, which unblocks any read or write in progress; it returns when
// the process has exited. Safe to call more than once.
func (w *worker) kill() {
	if w.alive() {
		signalGroup(w.cmd.Process, false)
		t := time.NewTimer(termGrace)
		select {
		case <-w.done:
		case <-t.C:
			signalGroup(w.cmd.Process, true)
		}
		t.Stop()
	}
	w.in.Close()
	w.outF.Close()
	select {
	case <-w.done:
	case <-time.After(5 * time.Second):
		// A process that survives SIGKILL (stuck in the kernel): leave it.
	}
}

// exitString describes how the process ended ("running" if it has not).
func (w *worker) exitString() string {
	if w.alive() {
		return "running"
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waitErr == nil {
		return "exit status 0"
	}
	return w.waitErr.Error()
}

// readStderr logs the worker's stderr and keeps its last lines.
func (w *worker) readStderr(r *os.File, done chan<- struct{}) {
	defer close(done)
	defer r.Close()
	br := bufio.NewReaderSize(r, 4096)
	for {
		line, err := br.ReadString('\n')
		if line = strings.TrimRight(line, "\r\n"); line != "" {
			line = clip(line, 1000)
			w.log.Info("python test worker", zap.String("stderr", line))
			w.mu.Lock()
			w.tail = append(w.tail, line)
			if len(w.tail) > 12 {
				w.tail = w.tail[len(w.tail)-12:]
			}
			w.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// stderrTail is "; stderr: ..." with the last lines the worker wrote, or "".
func (w *worker) stderrTail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.tail) == 0 {
		return ""
	}
	return "; stderr: " + strings.Join(w.tail, " | ")
}

// readLine reads one line of at most maxLine bytes, without its newline.
func readLine(r *bufio.Reader) ([]byte, error) {
	var buf bytes.Buffer
	for {
		chunk, err := r.ReadSlice('\n')
		if buf.Len()+len(chunk) > maxLine {
			return nil, fmt.Errorf("it wrote a line longer than %d bytes", maxLine)
		}
		buf.Write(chunk)
		switch {
		case err == nil:
			return bytes.TrimRight(buf.Bytes(), "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return nil, errors.New("it exited")
		default:
			return nil, fmt.Errorf("reading from it: %v", err)
		}
	}
}

// clip shortens s to at most n bytes (on a rune boundary), marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
