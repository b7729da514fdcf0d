// Package docs holds the user documentation; its test checks that every
// relative link of README.md and docs/*.md reaches a file of the
// repository, and a heading of it when the link names one.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// link matches a Markdown link's target: [text](target).
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// fence matches the line that opens or closes a code block.
var fence = regexp.MustCompile("^\\s*```")

func TestRelativeLinks(t *testing.T) {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "README.md"))
	for _, file := range files {
		for n, target := range links(t, file) {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			resolved := file
			if path != "" {
				resolved = filepath.Join(filepath.Dir(file), path)
			}
			if _, err := os.Stat(resolved); err != nil {
				t.Errorf("%s, link %d: %s does not exist", file, n+1, target)
				continue
			}
			if anchor != "" && strings.HasSuffix(resolved, ".md") && !headings(t, resolved)[anchor] {
				t.Errorf("%s, link %d: %s has no heading #%s", file, n+1, resolved, anchor)
			}
		}
	}
}

// links returns the targets of file's links outside code blocks.
func links(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	inCode := false
	for line := range strings.Lines(string(data)) {
		if fence.MatchString(line) {
			inCode = !inCode
			continue
		}
		if inCode {
			continue
		}
		for _, m := range link.FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// headings returns the anchors GitHub gives file's headings: lower case,
// punctuation but '-' and '_' dropped, spaces as '-'.
func headings(t *testing.T, file string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	inCode := false
	for line := range strings.Lines(string(data)) {
		if fence.MatchString(line) {
			inCode = !inCode
			continue
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var b strings.Builder
		for _, r := range text {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}
