package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/imperator-federation/imperator/internal/identity"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// TestTokenCallerOffersTheTokenCallerProtocol: with a token the dispatcher's
// connections offer identity.TokenCallerProtocol, as imperatorctl's do, so
// that the hub counts them against its token callers' budget and not the
// joining spokes' (which a flood of joins can fill); with a certificate
// they do not.
func TestTokenCallerOffersTheTokenCallerProtocol(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hub"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	caFile, keyFile, tokenFile := write("ca.pem", certPEM), write("key.pem", keyPEM), write("token", []byte("a-token\n"))
	serving, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}

	cases := map[string]struct {
		change func(*options)
		want   bool
	}{
		"a token":       {change: func(o *options) { o.tokenFile = tokenFile }, want: true},
		"a certificate": {change: func(o *options) { o.certFile, o.keyFile = caFile, keyFile }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			offered := make(chan []string, 1)
			lis, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{"h2"},
				Certificates: []tls.Certificate{serving},
				GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
					select {
					case offered <- slices.Clone(hello.SupportedProtos):
					default:
					}
					return nil, nil
				}})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = lis.Close() }()
			go func() {
				for {
					c, err := lis.Accept()
					if err != nil {
						return
					}
					_ = c.(*tls.Conn).Handshake()
					_ = c.Close()
				}
			}()
			o := &options{hubAddress: lis.Addr().String(), hubCAFile: caFile}
			tc.change(o)
			conn, err := dialHub(o)
			if err != nil {
				t.Fatalf("dialHub: %v", err)
			}
			defer func() { _ = conn.Close() }()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			go func() { _, _ = queryv1.NewQueryClient(conn).FindCapacity(ctx, &queryv1.FindCapacityRequest{}) }()
			select {
			case protos := <-offered:
				if got := slices.Contains(protos, identity.TokenCallerProtocol); got != tc.want {
					t.Errorf("the ClientHello offers %q: offers %s = %v, want %v", protos, identity.TokenCallerProtocol, got, tc.want)
				}
			case <-ctx.Done():
				t.Fatal("the dispatcher never reached the hub's address")
			}
		})
	}
}
