package sqlite

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// cowFile holds the pristine image in a sealed memory file (memfd) that each
// private copy maps copy-on-write (MAP_PRIVATE): making a copy costs a
// mapping, not a duplicate of the database, and a copy takes memory only for
// the pages it writes. The seals make the file immutable: no mapping or
// write can change the image, only its private copies.
type cowFile struct {
	fd     int
	length int // bytes of each mapping: the copy's room, whole pages
}

// newCOWFile writes img into a sealed memory file of room bytes (rounded up to
// whole pages; the bytes past img are a hole, zero and free until written).
func newCOWFile(img []byte, room int64) (*cowFile, error) {
	page := int64(os.Getpagesize())
	length := (max(room, int64(len(img)), 1) + page - 1) / page * page
	if int64(int(length)) != length {
		return nil, fmt.Errorf("sqlite: a copy of %d bytes cannot be mapped", length)
	}
	fd, err := unix.MemfdCreate("avtgym-sqlite-image", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*cowFile, error) {
		unix.Close(fd)
		return nil, err
	}
	for off := 0; off < len(img); {
		n, err := unix.Pwrite(fd, img[off:], int64(off))
		if err != nil {
			return fail(err)
		}
		off += n
	}
	if err := unix.Ftruncate(fd, length); err != nil {
		return fail(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS,
		unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL); err != nil {
		return fail(err)
	}
	f := &cowFile{fd: fd, length: int(length)}
	runtime.AddCleanup(f, func(fd int) { unix.Close(fd) }, fd)
	return f, nil
}

// mapCopy maps a private, writable copy of the image.
func (f *cowFile) mapCopy() ([]byte, error) {
	b, err := unix.Mmap(f.fd, 0, f.length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	runtime.KeepAlive(f) // the file may not be closed before it is mapped
	return b, err
}

// unmapCopy drops a copy mapCopy made.
func unmapCopy(b []byte) error { return unix.Munmap(b) }
