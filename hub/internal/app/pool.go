package app

import "crypto/x509"

// poolOf returns a pool holding the DER certificate.
func poolOf(der []byte) *x509.CertPool {
	pool := x509.NewCertPool()
	if cert, err := x509.ParseCertificate(der); err == nil {
		pool.AddCert(cert)
	}
	return pool
}
