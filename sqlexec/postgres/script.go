package postgres

// This file reads psql scripts (pg_dump's plain output, or SQL scripts) without psql:
// statements are delimited with PostgreSQL's own scanner and parser, the data of
// COPY ... FROM stdin blocks is streamed to the server as it is read, and psql
// meta-commands are skipped when harmless and refused otherwise.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"avtgym/sqlexec"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	pgparser "github.com/pganalyze/pg_query_go/v6/parser"
)

// maxStatementBytes bounds one statement of a script (a line of COPY data is
// streamed and not bounded here; the database size cap bounds it).
const maxStatementBytes = 256 << 20

// skippedMetaCommands are the psql meta-commands a script may contain; they
// are skipped. \restrict and \unrestrict are written by pg_dump 15.14, 16.10,
// 17.6 and later around a dump; the others only print or set psql variables.
var skippedMetaCommands = map[string]bool{
	"restrict": true, "unrestrict": true, "set": true, "unset": true, "echo": true, "qecho": true,
	"warn": true, "pset": true, "timing": true, "encoding": true,
}

// scriptStmt is one statement of a script.
type scriptStmt struct {
	line   int // the line the statement starts on (1-based)
	text   string
	node   *pg_query.Node
	copyIn bool // a COPY ... FROM STDIN: its data follows, read it with copyData
}

// scriptReader reads the statements of one script.
type scriptReader struct {
	file  string // names the script in errors
	br    *bufio.Reader
	line  int // lines consumed
	queue []scriptStmt
	eof   bool
	// inCopy is set while a COPY's data has not been read; next skips it.
	inCopy *copyReader
}

func newScriptReader(file string, r io.Reader) *scriptReader {
	return &scriptReader{file: file, br: bufio.NewReaderSize(r, 64<<10)}
}

// scriptError is a failure tied to a place in a script.
func (r *scriptReader) errorf(line int, stmt string, kind sqlexec.ErrorKind, cause error, format string, args ...any) *LoadError {
	return &LoadError{File: r.file, Line: line, Stmt: stmt, Err: sqlexec.Errorf(kind, cause, format, args...)}
}

// readLine reads one line, with its newline, bounded by maxStatementBytes.
func (r *scriptReader) readLine() (string, error) {
	var buf []byte
	for {
		chunk, err := r.br.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > maxStatementBytes {
			return "", r.errorf(r.line+1, "", sqlexec.KindTooManyBytes, nil, "a line is longer than %d bytes", maxStatementBytes)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF && len(buf) > 0 {
			return string(buf), nil
		}
		return string(buf), err
	}
}

// next returns the next statement, or io.EOF after the last; ctx bounds the
// reading (a statement over many lines is scanned often). A COPY's data
// that the caller did not read is skipped.
func (r *scriptReader) next(ctx context.Context) (scriptStmt, error) {
	if r.inCopy != nil {
		if _, err := io.Copy(io.Discard, r.inCopy); err != nil {
			return scriptStmt{}, err
		}
	}
	for len(r.queue) == 0 {
		if r.eof {
			return scriptStmt{}, io.EOF
		}
		if err := r.fill(ctx); err != nil {
			return scriptStmt{}, err
		}
	}
	st := r.queue[0]
	r.queue = r.queue[1:]
	if st.copyIn {
		r.inCopy = &copyReader{r: r, start: st.line, atLineStart: true}
	}
	return st, nil
}

// fill reads lines up to the end of the next complete statements and parses
// them into the queue.
func (r *scriptReader) fill(ctx context.Context) error {
	var buf strings.Builder
	start := 0 // the buffer's first line
	for {
		if err := ctx.Err(); err != nil {
			return r.errorf(r.line+1, "", sqlexec.KindTimeout, err, "reading the script took too long: %v", err)
		}
		line, err := r.readLine()
		if err != nil && err != io.EOF {
			var le *LoadError
			if errors.As(err, &le) {
				return le
			}
			return r.errorf(r.line+1, "", sqlexec.KindUnavailable, err, "reading the script: %v", err)
		}
		if err == io.EOF && line == "" {
			r.eof = true
			break
		}
		r.line++
		if buf.Len() == 0 || skipTrivia(buf.String()) == "" {
			if t := strings.TrimLeft(line, " \t"); strings.HasPrefix(t, `\`) {
				if err := r.metaCommand(strings.TrimRight(t, "\r\n")); err != nil {
					return err
				}
				if err == io.EOF {
					r.eof = true
					break
				}
				buf.Reset()
				start = 0
				continue
			}
		}
		if start == 0 {
			start = r.line
		}
		buf.WriteString(line)
		if buf.Len() > maxStatementBytes {
			return r.errorf(start, firstWords(buf.String(), 4), sqlexec.KindTooManyBytes, nil, "a statement is longer than %d bytes", maxStatementBytes)
		}
		if err == io.EOF {
			r.eof = true
			break
		}
		if strings.Contains(line, ";") && complete(buf.String()) {
			text := buf.String()
			ok, perr := r.parse(text, start)
			if perr != nil {
				return perr
			}
			if ok {
				return nil
			}
			// An error at the end of the input: a statement whose body holds
			// semicolons (BEGIN ATOMIC ... END). Read on.
		}
	}
	if skipTrivia(buf.String()) == "" {
		return nil
	}
	// The end of the script ends its last statement, as in psql.
	if _, err := r.parse(buf.String(), start); err != nil {
		return err
	}
	if len(r.queue) > 0 && r.queue[len(r.queue)-1].copyIn {
		st := r.queue[len(r.queue)-1]
		return r.errorf(st.line, firstWords(st.text, 4), sqlexec.KindSyntax, nil, "the script ends before the data of COPY ... FROM stdin")
	}
	return nil
}

// complete reports whether text ends with a statement's semicolon (outside
// quotes and comments, trailing comments aside).
func complete(text string) bool {
	res, err := pg_query.Scan(text)
	if err != nil {
		return false // an unterminated quote or comment
	}
	for i := len(res.Tokens) - 1; i >= 0; i-- {
		switch res.Tokens[i].Token {
		case pg_query.Token_SQL_COMMENT, pg_query.Token_C_COMMENT:
			continue
		case pg_query.Token_ASCII_59:
			return true
		}
		return false
	}
	return false
}

// parse parses text, which starts on line start, and queues its statements.
// It returns false, without an error, when the text ends in the middle of a
// statement and more lines may complete it.
func (r *scriptReader) parse(text string, start int) (bool, error) {
	stmts, err := parseStatements(text)
	if err != nil {
		var pe *pgparser.Error
		if errors.As(err, &pe) {
			if !r.eof && strings.Contains(pe.Message, "at end of input") {
				return false, nil
			}
			line := start
			if pe.Cursorpos > 0 && pe.Cursorpos <= len(text) {
				line += strings.Count(text[:pe.Cursorpos-1], "\n")
			}
			return false, r.errorf(line, firstWords(text, 4), sqlexec.KindSyntax, err, "the statement does not parse: %s", pe.Message)
		}
		return false, r.errorf(start, firstWords(text, 4), sqlexec.KindSyntax, err, "the statement does not parse: %v", err)
	}
	for i, st := range stmts {
		lead := len(st.text) - len(skipTrivia(st.text))
		line := start + strings.Count(text[:st.off+lead], "\n")
		ss := scriptStmt{line: line, text: st.text, node: st.node}
		if c, ok := st.node.Node.(*pg_query.Node_CopyStmt); ok && c.CopyStmt.IsFrom && !c.CopyStmt.IsProgram && c.CopyStmt.Filename == "" {
			ss.copyIn = true
			if i != len(stmts)-1 {
				return false, r.errorf(line, firstWords(st.text, 4), sqlexec.KindSyntax, nil,
					"COPY ... FROM stdin must be the last statement on its line: its data starts on the next line")
			}
		}
		r.queue = append(r.queue, ss)
	}
	return true, nil
}

// metaCommand handles a psql meta-command line.
func (r *scriptReader) metaCommand(line string) error {
	cmd := strings.TrimPrefix(line, `\`)
	name, arg, _ := strings.Cut(cmd, " ")
	arg = strings.TrimSpace(arg)
	if skippedMetaCommands[name] {
		if name == "encoding" && arg != "" && !strings.EqualFold(strings.ReplaceAll(arg, "-", ""), "utf8") {
			return r.errorf(r.line, line, sqlexec.KindDenied, nil, "the script asks for the client encoding %s; only UTF8 scripts can be loaded", arg)
		}
		return nil
	}
	if name == "." {
		return r.errorf(r.line, line, sqlexec.KindSyntax, nil, `a \. line outside COPY data`)
	}
	return r.errorf(r.line, firstWords(line, 3), sqlexec.KindDenied, nil,
		`the psql meta-command \%s is not supported: a script may hold SQL, COPY ... FROM stdin data and the meta-commands \restrict, \unrestrict, \set, \unset, \echo, \qecho, \warn, \pset, \timing and \encoding UTF8 (which are skipped)`, name)
}

// copyReader streams the data lines of a COPY ... FROM stdin block up to its
// \. line.
type copyReader struct {
	r           *scriptReader
	start       int // the COPY statement's line
	atLineStart bool
	pending     []byte
	done        bool
	// mu guards err, which failure reads: pgconn reads a copyReader on a
	// goroutine of its own.
	mu  sync.Mutex
	err error
}

// failure returns the error that stopped the reading, if any.
func (c *copyReader) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *copyReader) fail(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
	return err
}

var (
	endMarker     = []byte("\\.\n")
	endMarkerCRLF = []byte("\\.\r\n")
)

func (c *copyReader) Read(p []byte) (int, error) {
	for len(c.pending) == 0 {
		if err := c.failure(); err != nil {
			return 0, err
		}
		if c.done {
			return 0, io.EOF
		}
		br := c.r.br
		if c.atLineStart {
			peek, perr := br.Peek(4)
			if bytes.HasPrefix(peek, endMarker) || bytes.HasPrefix(peek, endMarkerCRLF) || (perr == io.EOF && string(peek) == `\.`) {
				if _, err := c.r.readLine(); err != nil && err != io.EOF {
					return 0, c.fail(err)
				}
				c.r.line++
				c.done = true
				c.r.inCopy = nil
				return 0, io.EOF
			}
		}
		chunk, err := br.ReadSlice('\n')
		c.pending = chunk
		switch err {
		case nil:
			c.atLineStart = true
			c.r.line++
		case bufio.ErrBufferFull:
			c.atLineStart = false
		case io.EOF:
			if len(chunk) == 0 {
				return 0, c.fail(c.r.errorf(c.start, "", sqlexec.KindSyntax, nil, "the data of the COPY on line %d ends without a \\. line (a truncated dump?)", c.start))
			}
			c.atLineStart = false
		default:
			return 0, c.fail(c.r.errorf(c.r.line+1, "", sqlexec.KindUnavailable, err, "reading COPY data: %v", err))
		}
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// fileLine formats a place for messages.
func fileLine(file string, line int) string {
	if line <= 0 {
		return file
	}
	return fmt.Sprintf("%s:%d", file, line)
}
