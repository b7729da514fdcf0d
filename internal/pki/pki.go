// Package pki issues the X.509 material the system runs on: a certificate
// authority, serving and client certificates signed by it, and certificates for
// certificate signing requests (the hub signs a joining spoke's CSR). Keys are
// ECDSA P-256; everything is exchanged as PEM.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"time"
)

// clockSkew backdates NotBefore so that a certificate is valid at once on a
// machine whose clock runs slightly behind.
const clockSkew = 5 * time.Minute

// CA is a certificate authority that signs serving and client certificates.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// CertPEM is Cert, PEM-encoded: what clients and servers put in their trust pool.
	CertPEM []byte
}

// NewCA creates a self-signed CA valid for validity.
func NewCA(commonName string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	tmpl, err := template(commonName, nil, validity)
	if err != nil {
		return nil, err
	}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-signing CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: encodeCert(der)}, nil
}

// LoadCA reads a CA from its PEM certificate and PEM private key.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := ParseCertificate(certPEM)
	if err != nil {
		return nil, fmt.Errorf("reading CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("reading CA certificate: not a CA certificate")
	}
	key, err := ParsePrivateKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("reading CA key: %w", err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: encodeCert(cert.Raw)}, nil
}

// TrustBundle is the PEM bundle clients verify this CA's certificates with:
// its own certificate. (The hub's CA during a rotation, hubca.Authority,
// hands out several.)
func (ca *CA) TrustBundle() []byte { return ca.CertPEM }

// CrossSign issues a certificate of other (a CA) signed by ca: the same
// subject and key as other, so that a chain from a leaf of other reaches
// ca's certificate through it. A server presents it after its leaf while
// clients that trust only ca move to other. Its life ends with the shorter
// of the two CAs'.
func (ca *CA) CrossSign(other *x509.Certificate) ([]byte, error) {
	if other == nil || !other.IsCA {
		return nil, errors.New("cross-signing: not a CA certificate")
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating serial number: %w", err)
	}
	notAfter := other.NotAfter
	if ca.Cert.NotAfter.Before(notAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               other.Subject,
		NotBefore:             other.NotBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              other.KeyUsage,
		SubjectKeyId:          other.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, other.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("cross-signing %q: %w", other.Subject.CommonName, err)
	}
	return encodeCert(der), nil
}

// KeyPEM returns the CA's private key, PEM-encoded.
func (ca *CA) KeyPEM() ([]byte, error) { return encodeKey(ca.Key) }

// IssueServer issues a serving certificate for hosts (DNS names or IPs).
func (ca *CA) IssueServer(commonName string, hosts []string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	return ca.issue(commonName, nil, hosts, validity, x509.ExtKeyUsageServerAuth)
}

// IssueClient issues a client certificate; Kubernetes reads commonName as the
// user and organizations as the groups.
func (ca *CA) IssueClient(commonName string, organizations []string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	return ca.issue(commonName, organizations, nil, validity, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) issue(commonName string, organizations, hosts []string, validity time.Duration, usage x509.ExtKeyUsage) ([]byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating key: %w", err)
	}
	tmpl, err := template(commonName, organizations, validity)
	if err != nil {
		return nil, nil, err
	}
	addHosts(tmpl, hosts)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	certPEM, err := ca.sign(tmpl, key.Public())
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// ParseCSR reads a PEM certificate signing request and verifies its
// signature.
func ParseCSR(csrPEM []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("reading certificate signing request: no PEM block of type CERTIFICATE REQUEST")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("reading certificate signing request: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("checking certificate signing request signature: %w", err)
	}
	return csr, nil
}

// SignClientCSR verifies the signature of a PEM certificate signing request
// and issues a client certificate for its public key. The subject and the
// URI SANs are the ones given here, never the ones in the request: the
// caller decides the identity.
func (ca *CA) SignClientCSR(csrPEM []byte, commonName string, organizations []string, uris []*url.URL, validity time.Duration) ([]byte, error) {
	csr, err := ParseCSR(csrPEM)
	if err != nil {
		return nil, err
	}
	tmpl, err := template(commonName, organizations, validity)
	if err != nil {
		return nil, err
	}
	tmpl.URIs = uris
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return ca.sign(tmpl, csr.PublicKey)
}

func (ca *CA) sign(tmpl *x509.Certificate, pub crypto.PublicKey) ([]byte, error) {
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("signing certificate for %q: %w", tmpl.Subject.CommonName, err)
	}
	return encodeCert(der), nil
}

// NewCSR creates a key and a certificate signing request for commonName.
func NewCSR(commonName string) (csrPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating key: %w", err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: commonName}}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("creating certificate signing request: %w", err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), keyPEM, nil
}

// ParseCertificate reads the first certificate of a PEM bundle.
func ParseCertificate(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM block of type CERTIFICATE")
	}
	return x509.ParseCertificate(block.Bytes)
}

// ParsePrivateKey reads a PEM PKCS#8, EC or PKCS#1 private key.
func ParsePrivateKey(keyPEM []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	var (
		key any
		err error
	)
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("key of type %T cannot sign", key)
	}
	return signer, nil
}

func template(commonName string, organizations []string, validity time.Duration) (*x509.Certificate, error) {
	if validity <= 0 {
		return nil, fmt.Errorf("certificate validity must be positive, got %s", validity)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating serial number: %w", err)
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName, Organization: organizations},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(validity),
	}, nil
}

func addHosts(tmpl *x509.Certificate, hosts []string) {
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
}

// EncodeCertificate is cert, PEM-encoded.
func EncodeCertificate(cert *x509.Certificate) []byte { return encodeCert(cert.Raw) }

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
