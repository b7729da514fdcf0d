// Package text shapes strings written for people into bounded fields:
// condition and status messages, table cells.
package text

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// ellipsis marks a cut string.
const ellipsis = "..."

// Truncate returns s when it has at most n bytes; otherwise its first bytes,
// cut on a character boundary, followed by "...", n bytes at most in all.
// Invalid UTF-8 in the part kept is dropped, so a cut never leaves half a
// character behind. n below the ellipsis's length cuts without it.
func Truncate(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	mark := ellipsis
	if n < len(ellipsis) {
		mark = ""
	}
	keep := n - len(mark)
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return strings.ToValidUTF8(s[:keep], "") + mark
}

// Printable turns s's control characters (newlines, terminal escapes) into
// spaces: text shown in one table cell or one log field.
func Printable(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}
