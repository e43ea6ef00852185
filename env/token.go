package env

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// Episode tokens are the sealed episode state (ARCHITECTURE.md, fixed
// decision 1). Layout (version 2):
//
//	version (1 byte) | key id (4 bytes) | head length (4 bytes) | nonce (12 bytes) |
//	head: AES-GCM ciphertext and tag (head length bytes) | history (the rest)
//
// The first nine bytes are authenticated as the head's associated data.
// The head's plaintext is a 4-byte length, the serialised state, and zero
// padding; the padding makes the whole token's length after the header
// and nonce a multiple of 64 bytes (at least 128), so that small
// differences in the state do not show in the token's length. The state
// itself keeps secret quantities in fixed-width fields (credits are 64-bit
// masks), so the length never depends on how many credits the episode
// earned; the buckets are a second line of defence and keep tokens small.
//
// The history is the dialogue's answered questions, one sealed chunk per
// question (history.go), each sealed once, when its question is answered,
// and copied unread into every later token: a step opens and seals only
// the head, whose size does not grow with the dialogue's texts, so that a
// step's cost does not grow with its turn index (issue 31). The head
// holds the history's length and its last chunk's tag, and each chunk's
// associated data holds the tag of the one before: the head pins the
// whole chain.
const (
	tokenVersion = 2
	keyIDSize    = 4
	headerSize   = 1 + keyIDSize + 4
	minBucket    = 128
	bucketStep   = 64
	nonceSize    = 12 // AES-GCM's standard nonce
	tagSize      = 16 // AES-GCM's tag
)

// tokenSize is the length of the token that seals n bytes of state and h
// bytes of history: header, nonce, and the bucket holding the 4-byte
// length prefix, the state, the tag and the history, rounded up to a
// multiple of bucketStep (at least minBucket).
func tokenSize(n, h int) int {
	return headerSize + nonceSize + max(minBucket, (4+n+tagSize+h+bucketStep-1)/bucketStep*bucketStep)
}

// KeySize is the size of a token key: AES-256.
const KeySize = 32

// Sealer seals and opens episode tokens under one key. It is safe for
// concurrent use.
type Sealer struct {
	aead  cipher.AEAD
	keyID [keyIDSize]byte
	// history seals the history's chunks under a key derived from the
	// token key, so that no chunk can ever be read as a head or the
	// reverse (history.go).
	history cipher.AEAD
}

// NewSealer returns a sealer for a 32-byte key.
func NewSealer(key []byte) (*Sealer, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("token key is %d bytes, want %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	if aead.NonceSize() != nonceSize || aead.Overhead() != tagSize {
		return nil, fmt.Errorf("AES-GCM has a %d-byte nonce and a %d-byte tag, want %d and %d", aead.NonceSize(), aead.Overhead(), nonceSize, tagSize)
	}
	s := &Sealer{aead: aead}
	sum := sha256.Sum256(append([]byte("avtgym episode token key id\x00"), key...))
	copy(s.keyID[:], sum[:])
	hkey := sha256.Sum256(append([]byte("avtgym episode history key\x00"), key...))
	hblock, err := aes.NewCipher(hkey[:])
	if err != nil {
		return nil, err
	}
	if s.history, err = cipher.NewGCM(hblock); err != nil {
		return nil, err
	}
	return s, nil
}

// RandomKey returns a fresh random key. Tokens sealed under it die with the
// process, so servers behind a load balancer must share a key file instead.
func RandomKey() []byte {
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return k
}

// ReadKeyFile reads a token key from a file holding 64 hexadecimal digits,
// the standard base64 of 32 bytes, or the 32 raw bytes.
func ReadKeyFile(name string) ([]byte, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	text := strings.TrimSpace(string(b))
	if len(b) == KeySize {
		if _, err := hex.DecodeString(text); err == nil {
			// 32 hex digits are a 16-byte key written as text, not 32 raw bytes.
			return nil, fmt.Errorf("%s: holds 32 hex digits (a 16-byte key); want 64 hex digits", name)
		}
		return b, nil
	}
	if k, err := hex.DecodeString(text); err == nil && len(k) == KeySize {
		return k, nil
	}
	if k, err := base64.StdEncoding.DecodeString(text); err == nil && len(k) == KeySize {
		return k, nil
	}
	return nil, fmt.Errorf("%s: want 64 hex digits, base64 of 32 bytes, or 32 raw bytes", name)
}

// Seal encrypts plain into a token without history.
func (s *Sealer) Seal(plain []byte) []byte {
	tok, buf, _ := s.prepare(len(plain), 0)
	copy(buf, plain)
	return s.seal(tok)
}

// SealFunc seals the n bytes that fill writes into the buffer it is
// given, sparing a copy of the plaintext: the token is built in place. It
// has no history.
func (s *Sealer) SealFunc(n int, fill func(buf []byte)) []byte {
	tok, buf, _ := s.prepare(n, 0)
	fill(buf[:n])
	return s.seal(tok)
}

// prepare allocates a whole token for a state of n bytes and h bytes of
// history, writes the header, nonce and length prefix, and returns the
// token, the slice the state goes into and the slice the history goes
// into. The padding is already zero; the caller fills both slices, then
// seals the token (seal).
func (s *Sealer) prepare(n, h int) (tok, buf, hist []byte) {
	tok = make([]byte, tokenSize(n, h))
	tok[0] = tokenVersion
	copy(tok[1:1+keyIDSize], s.keyID[:])
	binary.BigEndian.PutUint32(tok[1+keyIDSize:headerSize], uint32(len(tok)-headerSize-nonceSize-h))
	if _, err := rand.Read(tok[headerSize : headerSize+nonceSize]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	body := tok[headerSize+nonceSize:]
	binary.BigEndian.PutUint32(body, uint32(n))
	return tok, body[4 : 4+n], tok[len(tok)-h:]
}

// TokenSize is the length of the token that seals n bytes of state and h
// bytes of history.
func (s *Sealer) TokenSize(n, h int) int { return tokenSize(n, h) }

// seal encrypts a prepared token's head in place.
func (s *Sealer) seal(tok []byte) []byte {
	start := headerSize + nonceSize
	end := start + int(binary.BigEndian.Uint32(tok[1+keyIDSize:headerSize]))
	plain := tok[start : end-tagSize]
	s.aead.Seal(plain[:0], tok[headerSize:start], plain, tok[:headerSize])
	return tok
}

// Open authenticates and decrypts a token's head: its state.
func (s *Sealer) Open(token []byte) ([]byte, error) {
	return s.OpenAppend(nil, token)
}

// OpenAppend is Open decrypting into dst's storage (from dst[:0]), so that
// callers on a hot path can reuse a buffer.
func (s *Sealer) OpenAppend(dst, token []byte) ([]byte, error) {
	plain, _, err := s.openToken(dst, token)
	return plain, err
}

// openToken authenticates and decrypts a token's head into dst's storage
// and returns its state and the token's history, unread: the history's
// chunks are authenticated when they are read (history.go).
func (s *Sealer) openToken(dst, token []byte) (plain, hist []byte, err error) {
	if len(token) < headerSize+nonceSize+tagSize+4 {
		return nil, nil, errorf(InvalidArgument, ReasonTokenMalformed, "token", "episode token is %d bytes, too short to be a token", len(token))
	}
	if token[0] != tokenVersion {
		return nil, nil, errorf(InvalidArgument, ReasonTokenMalformed, "token", "episode token has format version %d, want %d", token[0], tokenVersion)
	}
	if string(token[1:1+keyIDSize]) != string(s.keyID[:]) {
		return nil, nil, errorf(InvalidArgument, ReasonTokenForeign, "token", "episode token was sealed under another server key (replicas must share --token-key-file)")
	}
	start := headerSize + nonceSize
	headLen := int(binary.BigEndian.Uint32(token[1+keyIDSize : headerSize]))
	if headLen < tagSize+4 {
		return nil, nil, errorf(InvalidArgument, ReasonTokenMalformed, "token", "episode token's head length %d is out of range", headLen)
	}
	if headLen > len(token)-start {
		return nil, nil, errorf(InvalidArgument, ReasonTokenTampered, "token", "episode token failed authentication: it was altered or truncated")
	}
	buf, err := s.aead.Open(dst[:0], token[headerSize:start], token[start:start+headLen], token[:headerSize])
	if err != nil {
		return nil, nil, errorf(InvalidArgument, ReasonTokenTampered, "token", "episode token failed authentication: it was altered or truncated")
	}
	n := binary.BigEndian.Uint32(buf)
	if int(n) > len(buf)-4 {
		return nil, nil, errorf(InvalidArgument, ReasonTokenMalformed, "token", "episode token's length prefix is out of range")
	}
	return buf[4 : 4+n], token[start+headLen:], nil
}
