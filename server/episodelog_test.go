package server

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// shortFile writes at most n bytes of a write, silently (a short write
// with no error), then everything.
type shortFile struct {
	*os.File
	n int
}

func (f *shortFile) Write(b []byte) (int, error) {
	if f.n >= 0 && len(b) > f.n {
		w, err := f.File.Write(b[:f.n])
		f.n = -1
		return w, err
	}
	return f.File.Write(b)
}

// TestEpisodeLogShortWrite: a write that comes up short without an error
// is a failure like any other: the part written is cut, the line dropped,
// and the next line starts where the last whole one ended.
func TestEpisodeLogShortWrite(t *testing.T) {
	dir := t.TempDir()
	var f *shortFile
	l, err := OpenEpisodeLog(dir, EpisodeLogOptions{Replica: "r", Create: func(name string) (EpisodeLogFile, error) {
		of, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o640)
		if err != nil {
			return nil, err
		}
		f = &shortFile{File: of, n: 1 << 20}
		return f, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	first, second, third := []byte(`{"key":"1"}`+"\n"), []byte(`{"key":"2"}`+"\n"), []byte(`{"key":"3"}`+"\n")
	if ok, err := l.write([16]byte{1}, first); !ok || err != nil {
		t.Fatalf("first line: %v %v", ok, err)
	}
	f.n = 5
	if ok, err := l.write([16]byte{2}, second); ok || !errors.Is(err, io.ErrShortWrite) {
		t.Fatalf("a short write: wrote %v, error %v; want a failure wrapping io.ErrShortWrite", ok, err)
	}
	if ok, err := l.write([16]byte{3}, third); !ok || err != nil {
		t.Fatalf("third line: %v %v", ok, err)
	}
	if ok, err := l.write([16]byte{2}, second); !ok || err != nil {
		t.Fatalf("the dropped line again: %v %v (a dropped key is not remembered as written)", ok, err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("%d files", len(files))
	}
	b, _ := os.ReadFile(files[0])
	if want := bytes.Join([][]byte{first, third, second}, nil); !bytes.Equal(b, want) {
		t.Fatalf("the file holds %q, want %q", b, want)
	}
	if st := l.Stats(); st != (EpisodeLogStats{Written: 3, Dropped: 1}) {
		t.Fatalf("stats %+v", st)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if ok, err := l.write([16]byte{4}, first); ok || err == nil {
		t.Fatal("a write after Close succeeded")
	}
	if st := l.Stats(); st.Dropped != 2 {
		t.Fatalf("stats %+v: a line refused by the closed log is dropped", st)
	}
}

// TestEpisodeLogReopensAfterAFailedOpen: when the next file will not
// open (at rotation), the line is dropped, and the next line tries a new
// file instead of writing to none.
func TestEpisodeLogReopensAfterAFailedOpen(t *testing.T) {
	dir := t.TempDir()
	fail := false
	l, err := OpenEpisodeLog(dir, EpisodeLogOptions{Replica: "r", MaxBytes: 16, Create: func(name string) (EpisodeLogFile, error) {
		if fail {
			return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrPermission}
		}
		return createFile(name)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	line := []byte(`{"key":"0123"}` + "\n") // 15 bytes: one per file
	if ok, err := l.write([16]byte{1}, line); !ok || err != nil {
		t.Fatal(err)
	}
	fail = true
	if ok, err := l.write([16]byte{2}, line); ok || !errors.Is(err, os.ErrPermission) {
		t.Fatalf("a line whose file would not open: %v %v", ok, err)
	}
	fail = false
	if ok, err := l.write([16]byte{3}, line); !ok || err != nil {
		t.Fatalf("the next line: %v %v", ok, err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if len(files) != 2 {
		t.Fatalf("%d files, want 2", len(files))
	}
	if st := l.Stats(); st.Written != 2 || st.Dropped != 1 {
		t.Fatalf("stats %+v", st)
	}
}
