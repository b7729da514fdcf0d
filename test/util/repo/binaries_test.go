package repo

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBinariesRefusesUnknownNames(t *testing.T) {
	cases := map[string]struct {
		names   []string
		wantErr string
	}{
		"no name":      {wantErr: "no binary named"},
		"unknown name": {names: []string{"hub", "kubelet"}, wantErr: `unknown binary "kubelet"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Binaries(context.Background(), t.TempDir(), tc.names...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Binaries(%v) = %v, want an error containing %q", tc.names, err, tc.wantErr)
			}
		})
	}
}

func TestBinariesOfVersionRefusesAnEmptyVersion(t *testing.T) {
	_, err := BinariesOfVersion(context.Background(), t.TempDir(), "", "hub")
	if err == nil || !strings.Contains(err.Error(), "empty version") {
		t.Fatalf("BinariesOfVersion with no version = %v, want an error naming the empty version", err)
	}
}

// A directory in IMPERATOR_BIN_DIR that holds every binary asked for is
// taken as it is; one that lacks one is not (the binaries are built).
func TestBinariesTakesACompleteBinDir(t *testing.T) {
	prebuilt := t.TempDir()
	for _, name := range []string{"hub", "spoke"} {
		if err := os.WriteFile(filepath.Join(prebuilt, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(BinDirEnv, prebuilt)
	dir, err := Binaries(context.Background(), t.TempDir(), "hub", "spoke")
	if err != nil || dir != prebuilt {
		t.Fatalf("Binaries(hub, spoke) = %q, %v; want %q", dir, err, prebuilt)
	}
	if holdsAll(prebuilt, []string{"hub", "imperatorctl"}) {
		t.Fatal("holdsAll says a directory without imperatorctl holds it")
	}
	if err := os.WriteFile(filepath.Join(prebuilt, "imperatorctl"), []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	if holdsAll(prebuilt, []string{"hub", "imperatorctl"}) {
		t.Fatal("holdsAll takes a file nobody may execute for imperatorctl")
	}
}
