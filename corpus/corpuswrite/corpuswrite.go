// Package corpuswrite owns how importers write a corpus directory: assembled
// in a temporary directory beside --out through an os.Root, from input
// files read only inside --in, validated with corpus.LoadDir and renamed
// into place, leaving no trace and no input touched when anything fails.
//
// An importer calls Check before its work (to refuse a bad --out early),
// then New, WriteFile and CopyFromInput, Validate, and Commit; a deferred
// Discard removes the temporary directory unless Commit succeeded.
package corpuswrite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"avtgym/corpus"
)

// TempPattern is the os.MkdirTemp pattern of the temporary directory New
// creates beside out ("." + the base name of out + TempPattern).
const TempPattern = ".tmp-*"

// Check refuses an import from the input directory in to the output
// directory out before any work is done: in must be a directory; out must
// not be in, lie inside in or contain in (compared both as given and with
// symbolic links resolved), must not be a symbolic link or a file, and
// must be empty or absent unless force.
func Check(in, out string, force bool) error {
	_, _, err := check(in, out, force)
	return err
}

// check is Check, returning the real path of in and the absolute path of out.
func check(in, out string, force bool) (inReal, outAbs string, err error) {
	if in == "" {
		return "", "", errors.New("no input directory (--in)")
	}
	if out == "" {
		return "", "", errors.New("no output directory (--out)")
	}
	fi, err := os.Stat(in)
	if err != nil {
		return "", "", fmt.Errorf("input directory %s: %v", in, errors.Unwrap(err))
	}
	if !fi.IsDir() {
		return "", "", fmt.Errorf("input %s is not a directory", in)
	}
	inAbs, err := filepath.Abs(in)
	if err != nil {
		return "", "", err
	}
	if inReal, err = filepath.EvalSymlinks(inAbs); err != nil {
		return "", "", fmt.Errorf("input directory %s: %v", in, err)
	}
	if outAbs, err = filepath.Abs(out); err != nil {
		return "", "", err
	}
	outReal, err := realPath(outAbs)
	if err != nil {
		return "", "", fmt.Errorf("--out %s: %v", out, err)
	}
	for _, p := range [][2]string{{inAbs, outAbs}, {inReal, outReal}} {
		switch i, o := p[0], p[1]; {
		case i == o:
			return "", "", fmt.Errorf("--out %s is the input directory %s", out, in)
		case within(i, o):
			return "", "", fmt.Errorf("--out %s is inside the input directory %s", out, in)
		case within(o, i):
			return "", "", fmt.Errorf("--out %s contains the input directory %s", out, in)
		}
	}
	lfi, err := os.Lstat(outAbs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return inReal, outAbs, nil
	case err != nil:
		return "", "", fmt.Errorf("--out %s: %v", out, err)
	case lfi.Mode()&fs.ModeSymlink != 0:
		return "", "", fmt.Errorf("--out %s is a symbolic link; name the directory itself", out)
	case !lfi.IsDir():
		return "", "", fmt.Errorf("--out %s exists and is not a directory", out)
	}
	ents, err := os.ReadDir(outAbs)
	if err != nil {
		return "", "", fmt.Errorf("--out %s: %v", out, err)
	}
	if len(ents) > 0 && !force {
		return "", "", fmt.Errorf("--out %s is not empty (pass --force to replace it)", out)
	}
	return inReal, outAbs, nil
}

// realPath resolves the symbolic links of the longest existing prefix of
// the absolute path p and appends the rest.
func realPath(p string) (string, error) {
	rest := ""
	for {
		r, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(p)
		if parent == p {
			return "", err
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

// within reports whether the clean absolute path p lies strictly inside dir.
func within(dir, p string) bool {
	if !strings.HasSuffix(dir, string(filepath.Separator)) {
		dir += string(filepath.Separator)
	}
	return strings.HasPrefix(p, dir)
}

// localName checks a slash-separated path relative to a directory: no
// absolute path, no "." or ".." element, no empty element, no backslash.
func localName(name string) error {
	if !fs.ValidPath(name) || name == "." || strings.Contains(name, `\`) {
		return fmt.Errorf("%q is not a relative path with '/' separators and no '.' or '..' elements", name)
	}
	return nil
}

// ResolveInput returns the real path of the regular file rel (a
// slash-separated path relative to the input directory in) after checking
// that it lies inside in, symbolic links included: through an os.Root on
// in, and by its real path, since SQLite opens files by path. A path that
// leaves in is an error saying so.
func ResolveInput(in, rel string) (string, error) {
	if err := localName(rel); err != nil {
		return "", fmt.Errorf("input file %s", err)
	}
	inReal, err := filepath.EvalSymlinks(in)
	if err != nil {
		return "", err
	}
	if inReal, err = filepath.Abs(inReal); err != nil {
		return "", err
	}
	root, err := os.OpenRoot(inReal)
	if err != nil {
		return "", err
	}
	defer root.Close()
	return resolveIn(root, inReal, rel)
}

func resolveIn(root *os.Root, inReal, rel string) (string, error) {
	if err := localName(rel); err != nil {
		return "", fmt.Errorf("input file %s", err)
	}
	real, rerr := filepath.EvalSymlinks(filepath.Join(inReal, filepath.FromSlash(rel)))
	if rerr == nil && !within(inReal, real) {
		return "", fmt.Errorf("input file %s resolves outside the input directory (to %s, through a symbolic link)", rel, real)
	}
	fi, err := root.Stat(rel)
	switch {
	case err != nil && errors.Is(err, fs.ErrNotExist) && rerr != nil:
		return "", fmt.Errorf("input file %s does not exist", rel)
	case err != nil:
		return "", fmt.Errorf("input file %s cannot be opened inside the input directory: %v", rel, err)
	case rerr != nil:
		return "", fmt.Errorf("input file %s: %v", rel, rerr)
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("input file %s is not a regular file", rel)
	}
	return real, nil
}

// Writer assembles one corpus directory in a temporary directory beside
// out. Its methods are not safe for concurrent use.
type Writer struct {
	out       string // as given, for messages
	outAbs    string
	inReal    string
	inRoot    *os.Root
	tmp       string
	root      *os.Root
	force     bool
	created   []string // parent directories of out that New created, deepest last
	validated bool
	done      bool // committed or discarded
}

// New checks in and out as Check does and creates the temporary directory
// beside out (creating out's parent directories if needed).
func New(in, out string, force bool) (_ *Writer, err error) {
	inReal, outAbs, err := check(in, out, force)
	if err != nil {
		return nil, err
	}
	w := &Writer{out: out, outAbs: outAbs, inReal: inReal, force: force}
	defer func() {
		if err != nil {
			w.Discard()
		}
	}()
	parent := filepath.Dir(outAbs)
	for p := parent; ; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil || filepath.Dir(p) == p {
			break
		}
		w.created = append([]string{p}, w.created...)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("--out %s: %v", out, err)
	}
	if w.inRoot, err = os.OpenRoot(inReal); err != nil {
		return nil, fmt.Errorf("input directory %s: %v", in, err)
	}
	if w.tmp, err = os.MkdirTemp(parent, "."+filepath.Base(outAbs)+TempPattern); err != nil {
		return nil, fmt.Errorf("--out %s: %v", out, err)
	}
	if err := os.Chmod(w.tmp, 0o755); err != nil {
		return nil, err
	}
	if w.root, err = os.OpenRoot(w.tmp); err != nil {
		return nil, err
	}
	return w, nil
}

// Dir returns the temporary directory (for messages that must not name it,
// and for tests).
func (w *Writer) Dir() string { return w.tmp }

// create makes the parent directories of name inside the temporary
// directory and creates name, which must not exist yet.
func (w *Writer) create(name string) (*os.File, error) {
	if w.done {
		return nil, errors.New("corpuswrite: the writer is closed")
	}
	if err := localName(name); err != nil {
		return nil, fmt.Errorf("output file %v", err)
	}
	w.validated = false
	if dir := path.Dir(name); dir != "." {
		if err := w.root.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	return w.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
}

// WriteFile writes data to name, a slash-separated path relative to the
// corpus directory being written; name must not have been written before.
func (w *Writer) WriteFile(name string, data []byte) error {
	f, err := w.create(name)
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

// CopyFromInput copies the input file src (a slash-separated path relative
// to the input directory, which it must not leave, symbolic links
// included) to dst in the corpus directory being written. The source is
// opened read-only.
func (w *Writer) CopyFromInput(src, dst string) error {
	if w.done {
		return errors.New("corpuswrite: the writer is closed")
	}
	if _, err := resolveIn(w.inRoot, w.inReal, src); err != nil {
		return err
	}
	s, err := w.inRoot.OpenFile(src, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("input file %s: %v", src, err)
	}
	defer s.Close()
	if fi, err := s.Stat(); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("input file %s is not a regular file", src)
	}
	d, err := w.create(dst)
	if err != nil {
		return fmt.Errorf("copying %s to %s: %w", src, dst, err)
	}
	if _, err := io.Copy(d, s); err != nil {
		d.Close()
		return fmt.Errorf("copying %s to %s: %w", src, dst, err)
	}
	if err := d.Close(); err != nil {
		return fmt.Errorf("copying %s to %s: %w", src, dst, err)
	}
	return nil
}

// Validate loads the corpus written so far with corpus.LoadDir and returns
// it (the caller closes it); Commit needs a successful Validate after the
// last write. The error is LoadDir's (a *corpus.ValidationError when the
// corpus is invalid); its messages name the temporary directory (Dir).
func (w *Writer) Validate(ctx context.Context, opt corpus.Options) (*corpus.Corpus, error) {
	if w.done {
		return nil, errors.New("corpuswrite: the writer is closed")
	}
	c, err := corpus.LoadDir(ctx, w.tmp, opt)
	if err != nil {
		return nil, err
	}
	w.validated = true
	return c, nil
}

// Commit renames the validated corpus directory to out. An existing out is
// replaced when force was given (it must be empty otherwise); it is moved
// aside first and restored if the rename fails.
func (w *Writer) Commit() error {
	if w.done {
		return errors.New("corpuswrite: the writer is closed")
	}
	if !w.validated {
		return errors.New("corpuswrite: the corpus was not validated after its last write")
	}
	w.root.Close()
	w.inRoot.Close()
	w.root, w.inRoot = nil, nil
	fi, err := os.Lstat(w.outAbs)
	var old string
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("--out %s: %v", w.out, err)
	case fi.Mode()&fs.ModeSymlink != 0 || !fi.IsDir():
		return fmt.Errorf("--out %s is no longer a directory", w.out)
	default:
		ents, err := os.ReadDir(w.outAbs)
		if err != nil {
			return fmt.Errorf("--out %s: %v", w.out, err)
		}
		if len(ents) > 0 && !w.force {
			return fmt.Errorf("--out %s is not empty (pass --force to replace it)", w.out)
		}
		if old, err = os.MkdirTemp(filepath.Dir(w.outAbs), "."+filepath.Base(w.outAbs)+".old-*"); err != nil {
			return fmt.Errorf("--out %s: %v", w.out, err)
		}
		if err := os.Remove(old); err != nil {
			return err
		}
		if err := os.Rename(w.outAbs, old); err != nil {
			return fmt.Errorf("--out %s: moving it aside: %v", w.out, err)
		}
	}
	if err := os.Rename(w.tmp, w.outAbs); err != nil {
		if old != "" {
			os.Rename(old, w.outAbs)
		}
		return fmt.Errorf("--out %s: %v", w.out, err)
	}
	w.done = true
	if old != "" {
		if err := os.RemoveAll(old); err != nil {
			return fmt.Errorf("the corpus is in %s, but removing the old content (%s) failed: %v", w.out, old, err)
		}
	}
	return nil
}

// Discard removes the temporary directory and the parent directories of
// out that New created, unless Commit succeeded. It is safe to call more
// than once (defer it).
func (w *Writer) Discard() error {
	if w.root != nil {
		w.root.Close()
	}
	if w.inRoot != nil {
		w.inRoot.Close()
	}
	w.root, w.inRoot = nil, nil
	if w.done {
		return nil
	}
	w.done = true
	var err error
	if w.tmp != "" {
		err = os.RemoveAll(w.tmp)
	}
	for i := len(w.created) - 1; i >= 0; i-- {
		os.Remove(w.created[i]) // only if empty
	}
	return err
}
