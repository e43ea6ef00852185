//go:build !linux

package sqlite

import "errors"

// cowFile is Linux's copy-on-write image (image_linux.go); elsewhere every
// copy duplicates the image.
type cowFile struct{}

func newCOWFile(img []byte, room int64) (*cowFile, error) {
	return nil, errors.New("sqlite: copy-on-write images need Linux")
}

func (f *cowFile) mapCopy() ([]byte, error) {
	return nil, errors.New("sqlite: copy-on-write images need Linux")
}

func unmapCopy(b []byte) error { return nil }
