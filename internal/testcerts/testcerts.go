// Package testcerts writes throwaway X.509 certificates for tests of TLS
// and mutual TLS: a CA, and server and client certificates it signs
// (ECDSA P-256, valid for a day), as PEM files in a test's directory.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority whose certificate is in File.
type CA struct {
	// File is the CA certificate's PEM file.
	File string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
}

// Pair is a certificate and its key, as PEM files.
type Pair struct {
	Cert, Key string
}

// NewCA creates a CA named name in a new temporary directory.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca := &CA{File: filepath.Join(dir, name+"-ca.pem"), cert: cert, key: key, dir: dir}
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Server issues a server certificate for localhost, 127.0.0.1 and ::1.
func (ca *CA) Server(t testing.TB, name string) Pair {
	t.Helper()
	return ca.issue(t, name, func(c *x509.Certificate) {
		c.DNSNames = []string{"localhost"}
		c.IPAddresses = []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback}
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	})
}

// Client issues a client certificate whose common name is name.
func (ca *CA) Client(t testing.TB, name string) Pair {
	t.Helper()
	return ca.issue(t, name, func(c *x509.Certificate) {
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	})
}

func (ca *CA) issue(t testing.TB, name string, edit func(*x509.Certificate)) Pair {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	edit(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := Pair{Cert: filepath.Join(ca.dir, name+".pem"), Key: filepath.Join(ca.dir, name+"-key.pem")}
	writePEM(t, p.Cert, "CERTIFICATE", der)
	writePEM(t, p.Key, "PRIVATE KEY", kder)
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
