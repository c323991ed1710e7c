package localcluster

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the minimum a loopback cluster needs: a CA, the API server's serving certificate, a
// service-account signing key and an admin client certificate in group system:masters.
type pki struct {
	dir string
}

func (p pki) path(name string) string { return filepath.Join(p.dir, name) }

// generate writes every key and certificate into p.dir.
func (p pki) generate() error {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", p.dir, err)
	}
	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("generating CA key: %w", err)
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "gpupool-local-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("signing CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return fmt.Errorf("parsing CA certificate: %w", err)
	}
	if err := writePEM(p.path("ca.crt"), "CERTIFICATE", caDER); err != nil {
		return err
	}
	if err := writeKey(p.path("ca.key"), caKey); err != nil {
		return err
	}

	leaves := []struct {
		name     string
		template *x509.Certificate
	}{
		{"apiserver", &x509.Certificate{
			Subject:     pkix.Name{CommonName: "kube-apiserver"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 96, 0, 1)},
			DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
				"kubernetes.default.svc.cluster.local"},
		}},
		{"admin", &x509.Certificate{
			Subject:     pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}},
	}
	for i, leaf := range leaves {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return fmt.Errorf("generating %s key: %w", leaf.name, err)
		}
		t := leaf.template
		t.SerialNumber = big.NewInt(int64(i + 2))
		t.NotBefore = now.Add(-time.Hour)
		t.NotAfter = now.Add(365 * 24 * time.Hour)
		t.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		der, err := x509.CreateCertificate(rand.Reader, t, ca, &key.PublicKey, caKey)
		if err != nil {
			return fmt.Errorf("signing %s certificate: %w", leaf.name, err)
		}
		if err := writePEM(p.path(leaf.name+".crt"), "CERTIFICATE", der); err != nil {
			return err
		}
		if err := writeKey(p.path(leaf.name+".key"), key); err != nil {
			return err
		}
	}

	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("generating service-account key: %w", err)
	}
	if err := writeKey(p.path("sa.key"), saKey); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return fmt.Errorf("encoding service-account public key: %w", err)
	}
	return writePEM(p.path("sa.pub"), "PUBLIC KEY", pub)
}

func writeKey(path string, key *rsa.PrivateKey) error {
	return writePEM(path, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key))
}

func writePEM(path, kind string, der []byte) error {
	data := pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
