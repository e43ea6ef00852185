package app

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPostgresPasswordKey: replicas sharing a token key file derive the
// same PostgreSQL password key (issue 25: a second replica with a
// password-less administrator URL locked the first out); a password key
// file overrides it; without either there is none (the administrator's
// password, else a random one with a warning).
func TestPostgresPasswordKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, hex string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(hex+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tok := write("token.key", strings.Repeat("ab", 32))
	pw := write("pw.key", strings.Repeat("cd", 32))
	tokenKey := bytes.Repeat([]byte{0xab}, 32)
	a, err := postgresPasswordKey(Config{TokenKeyFile: tok}, tokenKey)
	if err != nil || len(a) == 0 {
		t.Fatalf("from the token key: %x, %v", a, err)
	}
	b, _ := postgresPasswordKey(Config{TokenKeyFile: tok}, tokenKey)
	if !bytes.Equal(a, b) || bytes.Equal(a, tokenKey) {
		t.Errorf("two replicas derive %x and %x (the token key itself must not be used)", a, b)
	}
	other, _ := postgresPasswordKey(Config{TokenKeyFile: tok}, bytes.Repeat([]byte{1}, 32))
	if bytes.Equal(a, other) {
		t.Error("another token key derives the same password key")
	}
	c, err := postgresPasswordKey(Config{TokenKeyFile: tok, PostgresPasswordKeyFile: pw}, tokenKey)
	if err != nil || !bytes.Equal(c, bytes.Repeat([]byte{0xcd}, 32)) {
		t.Errorf("the password key file: %x, %v", c, err)
	}
	if k, err := postgresPasswordKey(Config{}, tokenKey); k != nil || err != nil {
		t.Errorf("no key file: %x, %v; want none", k, err)
	}
	if _, err := postgresPasswordKey(Config{PostgresPasswordKeyFile: filepath.Join(dir, "missing")}, nil); err == nil || !strings.Contains(err.Error(), "--postgres-password-key-file") {
		t.Errorf("a missing key file: %v", err)
	}
}
