package podrecord

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"unique"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupool/gpupool/internal/intern"
)

// Interner hands out one shared copy of equal strings, label maps, toleration lists and
// resource lists. A fleet's pods come from few workloads: as decoded, each pod holds its own
// copy of its namespace, its node's name, its template's labels and tolerations and its
// requests, most of which repeat across thousands of pods. What an Interner hands out is
// read-only to every holder.
//
// The tables are bounded (intern.Table): past maxShared distinct values of one kind a table
// starts afresh, and the values already handed out stay with their records. Strings go through
// the unique package, whose table forgets what nobody holds. A nil Interner shares nothing.
// It is safe for concurrent use.
type Interner struct {
	once        sync.Once
	labels      *intern.Table[map[string]string]
	tolerations *intern.Table[[]corev1.Toleration]
	resources   *intern.Table[corev1.ResourceList]
}

const maxShared = 4096

// tables makes the tables on first use, so that the zero Interner is ready.
func (in *Interner) tables() *Interner {
	in.once.Do(func() {
		in.labels = intern.NewTable[map[string]string](maxShared)
		in.tolerations = intern.NewTable[[]corev1.Toleration](maxShared)
		in.resources = intern.NewTable[corev1.ResourceList](maxShared)
	})
	return in
}

// String is s, as a copy shared with every equal string interned.
func (in *Interner) String(s string) string {
	if in == nil || s == "" {
		return s
	}
	return unique.Make(s).Value()
}

// Labels is m, or an equal map handed out before.
func (in *Interner) Labels(m map[string]string) map[string]string {
	if in == nil || len(m) == 0 {
		return m
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		writeField(&b, k)
		writeField(&b, m[k])
	}
	return in.tables().labels.Share(b.String(), m)
}

// Tolerations is ts, or an equal list handed out before.
func (in *Interner) Tolerations(ts []corev1.Toleration) []corev1.Toleration {
	if in == nil || len(ts) == 0 {
		return ts
	}
	var b strings.Builder
	for _, t := range ts {
		writeField(&b, t.Key)
		writeField(&b, string(t.Operator))
		writeField(&b, t.Value)
		writeField(&b, string(t.Effect))
		if t.TolerationSeconds != nil {
			writeField(&b, strconv.FormatInt(*t.TolerationSeconds, 10))
		} else {
			writeField(&b, "-")
		}
	}
	return in.tables().tolerations.Share(b.String(), ts)
}

// Resources is l, or an equal list handed out before. Quantities compare by their canonical
// text, so 1000m and 1 are one list.
func (in *Interner) Resources(l corev1.ResourceList) corev1.ResourceList {
	if in == nil || len(l) == 0 {
		return l
	}
	names := make([]string, 0, len(l))
	for name := range l {
		names = append(names, string(name))
	}
	slices.Sort(names)
	var b strings.Builder
	for _, name := range names {
		q := l[corev1.ResourceName(name)]
		writeField(&b, name)
		writeField(&b, q.String())
	}
	return in.tables().resources.Share(b.String(), l)
}

// writeField appends s with its length, so no two different lists make the same key.
func writeField(b *strings.Builder, s string) {
	b.WriteString(strconv.Itoa(len(s)))
	b.WriteByte(':')
	b.WriteString(s)
}
