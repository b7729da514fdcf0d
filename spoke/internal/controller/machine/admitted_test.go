package machine

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// A guest goes first only by the injector's stamp: one written past the
// injector, far from the pod's creation, does not move it up the line.
func TestAdmittedAtTrustsOnlyAnInjectorsStamp(t *testing.T) {
	created := time.Date(2026, 11, 27, 15, 0, 7, 0, time.UTC)
	pod := func(creation time.Time, stamp string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(creation)}}
		if stamp != "" {
			p.Annotations = map[string]string{imperatorv1alpha1.AdmittedAtAnnotation: stamp}
		}
		return p
	}
	cases := map[string]struct {
		pod  *corev1.Pod
		want time.Time
	}{
		"the injector's stamp, within the second before creation": {
			pod: pod(created, "2026-11-27T15:00:06.731000001Z"), want: time.Date(2026, 11, 27, 15, 0, 6, 731000001, time.UTC)},
		"the injector's stamp, in the creation's second (it is truncated)": {
			pod: pod(created, "2026-11-27T15:00:07.9Z"), want: time.Date(2026, 11, 27, 15, 0, 7, 900000000, time.UTC)},
		"a stamp of 1970, written past the injector: creation orders it": {
			pod: pod(created, "1970-01-01T00:00:00Z"), want: created},
		"a stamp after the creation: creation orders it": {
			pod: pod(created, "2026-11-27T15:00:09Z"), want: created},
		"an unreadable stamp: creation orders it": {pod: pod(created, "yesterday"), want: created},
		"no stamp (a guest older than the stamp)": {pod: pod(created, ""), want: created},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := admittedAt(tc.pod); !got.Equal(tc.want) {
				t.Errorf("admittedAt = %s, want %s", got, tc.want)
			}
		})
	}
}
