package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"time"
)

// LoadTLS builds the TLS configuration of a server from PEM files: its
// certificate chain and key (serve --tls-cert, --tls-key) and, for mutual
// TLS, the CA that signs client certificates (--client-ca; then every
// client must present a certificate that CA signed, or the handshake
// fails). The certificate and key are read again when either file changes
// (checked at each handshake), so that a rotated certificate (cert-manager,
// a mounted Secret) is served without a restart; the client CA is read
// once.
func LoadTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("TLS needs both a certificate (--tls-cert) and its key (--tls-key)")
	}
	r := &certReloader{certFile: certFile, keyFile: keyFile}
	if _, err := r.load(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return r.get()
		},
	}
	if clientCAFile != "" {
		pem, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client CA %s: no PEM certificate in it", clientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// certReloader serves a certificate, read again when its files change.
type certReloader struct {
	certFile, keyFile string

	mu    sync.Mutex
	cert  *tls.Certificate
	stamp [2]time.Time
}

func (r *certReloader) stamps() ([2]time.Time, error) {
	var out [2]time.Time
	for i, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return out, err
		}
		out[i] = fi.ModTime()
	}
	return out, nil
}

// load reads the pair (the caller holds mu, or nothing else runs yet).
func (r *certReloader) load() (*tls.Certificate, error) {
	st, err := r.stamps()
	if err != nil {
		return nil, fmt.Errorf("TLS certificate: %w", err)
	}
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate: %w", err)
	}
	r.cert, r.stamp = &c, st
	return r.cert, nil
}

// get returns the current certificate, reloading it when a file changed.
// A reload that fails (a half-written file) keeps the previous one, and
// is tried again at the next handshake.
func (r *certReloader) get() (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st, err := r.stamps(); err == nil && st != r.stamp {
		_, _ = r.load()
	}
	return r.cert, nil
}
