package text

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		name, s string
		n       int
		want    string
	}{
		{name: "short enough", s: "abc", n: 3, want: "abc"},
		{name: "cut with the ellipsis", s: "abcdefgh", n: 6, want: "abc..."},
		{name: "a character is not split", s: "ab日本", n: 7, want: "ab..."},
		{name: "a character that fits is kept", s: "ab日本語", n: 8, want: "ab日..."},
		{name: "shorter than the ellipsis", s: "abcdef", n: 2, want: "ab"},
		{name: "zero", s: "abc", n: 0, want: ""},
		{name: "invalid UTF-8 kept out", s: "a\xffbcdefgh", n: 6, want: "ab..."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Truncate(tc.s, tc.n)
			if got != tc.want {
				t.Errorf("Truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
			}
			if len(got) > max(tc.n, 0) {
				t.Errorf("Truncate(%q, %d) has %d bytes", tc.s, tc.n, len(got))
			}
		})
	}
}

func FuzzTruncate(f *testing.F) {
	f.Add("ab日本語", 8)
	f.Add(strings.Repeat("é", 100), 33)
	f.Fuzz(func(t *testing.T, s string, n int) {
		n %= 4096
		got := Truncate(s, n)
		if len(got) > max(n, 0) {
			t.Fatalf("Truncate(%q, %d) = %q: %d bytes", s, n, got, len(got))
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("Truncate(%q, %d) = %q: invalid UTF-8", s, n, got)
		}
		if len(s) <= n && got != s {
			t.Fatalf("Truncate(%q, %d) = %q changed a string that fits", s, n, got)
		}
	})
}

func TestPrintable(t *testing.T) {
	if got := Printable("a\nb\x1b[31mc"); got != "a b [31mc" {
		t.Errorf("Printable = %q", got)
	}
	if got := Printable("plain"); got != "plain" {
		t.Errorf("Printable = %q", got)
	}
}
