package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcessMemory reads the resident memory of process pid (VmRSS) and its
// peak (VmHWM), in bytes, from /proc/<pid>/status: what a benchmark reports
// as a process's RSS.
func ProcessMemory(pid int) (rss, peak int64, err error) {
	path := "/proc/" + strconv.Itoa(pid) + "/status"
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	fields := map[string]*int64{"VmRSS:": &rss, "VmHWM:": &peak}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		for prefix, into := range fields {
			v, ok := strings.CutPrefix(sc.Text(), prefix)
			if !ok {
				continue
			}
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("%s: %s: %w", path, prefix, err)
			}
			*into = kb << 10
			delete(fields, prefix)
		}
	}
	if len(fields) > 0 {
		return 0, 0, fmt.Errorf("%s: no VmRSS or VmHWM", path)
	}
	return rss, peak, nil
}
