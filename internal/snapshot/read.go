// Package snapshot reads a saved cluster state, the objects that
// `kubectl get nodes,pods,pdb,gpunodes,gpupoolpolicies -A -o yaml` prints, and plans it
// offline the way the controller would, for `gpupoolctl plan`.
//
// A saved snapshot may have been edited by hand and never met the API server, so the reader
// checks what the API server would have: field types, unknown fields in gpupool's kinds, and
// the policy fields the CRD validates. Every problem is reported as one line naming the object
// and the field, because the user's next step is to open the file at that place.
package snapshot

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/podrecord"
	"github.com/gpupool/gpupool/internal/pool"
)

// Snapshot is the cluster state a file describes, split by kind, in input order.
type Snapshot struct {
	// Nodes of the cluster.
	Nodes []corev1.Node
	// Pods, running and pending.
	Pods []corev1.Pod
	// PDBs are the PodDisruptionBudgets that guard the pods.
	PDBs []policyv1.PodDisruptionBudget
	// GPUNodes are the agent's reports of each node's GPUs.
	GPUNodes []v1alpha1.GPUNode
	// Policies are the GPUPoolPolicies to plan; Read fails when there is none.
	Policies []v1alpha1.GPUPoolPolicy
	// Claims are the ResourceClaims pods ask through (resource.k8s.io/v1); nil when the input
	// holds none.
	Claims []resourcev1.ResourceClaim
	// Slices are the ResourceSlices DRA drivers publish (resource.k8s.io/v1).
	Slices []resourcev1.ResourceSlice
	// TaintRules are the DeviceTaintRules (resource.k8s.io/v1), gpupool's reserve and keep-free
	// rules and anyone's: a partition one taints NoSchedule or NoExecute is not free for a
	// claim. Triage applies them to the DynamicMIG supply; the controller lists its own, so
	// Cluster does not carry them.
	TaintRules []resourcev1.DeviceTaintRule
	// Plans are the RepartitionPlans, whose executing steps and failures freeze nodes and count
	// against the budgets as the controller counts them. Read leaves it empty (a saved file's
	// plans are history, not work in flight); the CLI fills it from the live cluster.
	Plans []v1alpha1.RepartitionPlan
	// Heartbeats are, per node, when its agent was last known alive (pool.Heartbeats); nil
	// when unknown, which judges each report by its own observedTime. Read leaves it nil; the
	// CLI fills it from the live cluster's Leases and agent pods, as the controller reads them.
	Heartbeats map[string]time.Time
	// MIGManagerReboot is what the GPU Operator's ClusterPolicy says of mig-manager rebooting
	// nodes (pool.MIGManagerRebootOf): unknown unless the CLI read the live cluster's.
	MIGManagerReboot planner.MIGManagerReboot
	// Ignored counts, per kind, the objects of kinds the planner does not read.
	Ignored map[string]int
	// Newest is the latest timestamp any object carries, zero when none does; planning at
	// that time makes a saved snapshot give the same plan whenever it is replayed.
	Newest time.Time
	// Warnings are problems that do not stop planning, one line each.
	Warnings []string
}

// PodPointers points at the snapshot's pods, as pool.Cluster and inventory.Build take them.
func (s *Snapshot) PodPointers() []*corev1.Pod {
	out := make([]*corev1.Pod, len(s.Pods))
	for i := range s.Pods {
		out[i] = &s.Pods[i]
	}
	return out
}

// Cluster is the snapshot as the controller's pass reads a cluster: pool.Cluster, with each
// pod as the controller's informer records it.
func (s *Snapshot) Cluster() *pool.Cluster {
	return &pool.Cluster{Policies: s.Policies, Nodes: s.Nodes, GPUNodes: s.GPUNodes, Pods: podrecord.FromPods(s.PodPointers()),
		PDBs: s.PDBs, Plans: s.Plans, Claims: s.Claims, Slices: s.Slices, Heartbeats: s.Heartbeats, MIGManagerReboot: s.MIGManagerReboot}
}

// IgnoredCount is how many objects of other kinds the input held.
func (s *Snapshot) IgnoredCount() int {
	n := 0
	for _, c := range s.Ignored {
		n += c
	}
	return n
}

// Error is a problem with the input, located as precisely as the input allows.
type Error struct {
	// Where is the object's position: "item 3" is .items[3] of a List, "document 2" the third
	// document of a stream (both count from 0, as jq and kubectl do); empty for the whole input.
	Where string
	// Object is "Kind name" or "Kind namespace/name" when known.
	Object string
	// Field is the path of the offending field, e.g. spec.disruption.approval.
	Field string
	// Message says what is wrong.
	Message string
}

// Error renders the problem as one line: position (object): field: message.
func (e *Error) Error() string {
	var b strings.Builder
	if e.Where != "" {
		b.WriteString(e.Where)
		if e.Object != "" {
			fmt.Fprintf(&b, " (%s)", e.Object)
		}
		b.WriteString(": ")
	} else if e.Object != "" {
		b.WriteString(e.Object + ": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Message)
	return oneLine(b.String())
}

// oneLine keeps a message on one line whatever the input held: names and values come from
// the file, and a newline in them would break the one-line promise of the CLI.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\n\r") {
		return s
	}
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// Kinds the planner reads.
var (
	kindNode     = corev1.SchemeGroupVersion.WithKind("Node")
	kindPod      = corev1.SchemeGroupVersion.WithKind("Pod")
	kindPDB      = policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget")
	kindGPUNode  = v1alpha1.GroupVersion.WithKind("GPUNode")
	kindPolicy   = v1alpha1.GroupVersion.WithKind("GPUPoolPolicy")
	kindClaim    = resourcev1.SchemeGroupVersion.WithKind("ResourceClaim")
	kindSlice    = resourcev1.SchemeGroupVersion.WithKind("ResourceSlice")
	kindTaint    = resourcev1.SchemeGroupVersion.WithKind("DeviceTaintRule")
	plannedKinds = []schema.GroupVersionKind{kindNode, kindPod, kindPDB, kindGPUNode, kindPolicy, kindClaim, kindSlice, kindTaint}
)

// Read reads a snapshot from r: a List (kubectl get -o yaml or -o json), a stream of YAML
// documents or JSON objects, or a single object.
func Read(r io.Reader) (*Snapshot, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, &Error{Message: fmt.Sprintf("reading input: %v", err)}
	}
	return Parse(data)
}

// Parse is Read on bytes already in memory.
func Parse(data []byte) (*Snapshot, error) {
	docs, err := documents(data)
	if err != nil {
		return nil, err
	}
	rd := &reader{snap: &Snapshot{Ignored: map[string]int{}}, seen: map[string]string{}}
	for _, d := range docs {
		if err := rd.document(d, len(docs) > 1); err != nil {
			return nil, err
		}
	}
	if len(rd.snap.Policies) == 0 {
		return nil, &Error{Message: "no GPUPoolPolicy in the input: include gpupoolpolicies, e.g. " +
			"kubectl get nodes,pods,pdb,gpunodes,gpupoolpolicies -A -o yaml"}
	}
	return rd.snap, nil
}

// header is what every object and List carries.
type header struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Items      json.RawMessage   `json:"items"`
}

// reader accumulates the snapshot.
type reader struct {
	snap *Snapshot
	seen map[string]string // kind/namespace/name -> where it was first seen
}

// document reads one document: an object or a List of them.
func (r *reader) document(d doc, stream bool) error {
	where := d.where()
	if !stream {
		where = ""
	}
	trimmed := bytes.TrimSpace(d.data)
	if bytes.Equal(trimmed, []byte("null")) {
		return nil
	}
	h, err := readHeader(trimmed, where)
	if err != nil {
		return err
	}
	if isList(h) {
		var items []json.RawMessage
		if err := json.Unmarshal(h.Items, &items); err != nil {
			return &Error{Where: where, Object: h.Kind, Field: "items", Message: "want a list of objects, got " + got(h.Items)}
		}
		for i, item := range items {
			itemWhere := fmt.Sprintf("item %d", i)
			if stream {
				itemWhere = fmt.Sprintf("%s item %d", where, i)
			}
			ih, err := readHeader(item, itemWhere)
			if err != nil {
				return err
			}
			if isList(ih) {
				return &Error{Where: itemWhere, Object: ih.Kind, Message: "a List inside a List is not supported: flatten the items"}
			}
			if err := r.object(item, ih, itemWhere); err != nil {
				return err
			}
		}
		return nil
	}
	return r.object(trimmed, h, where)
}

func isList(h *header) bool {
	return h.Kind == "List" || (strings.HasSuffix(h.Kind, "List") && h.Items != nil)
}

// readHeader reads apiVersion, kind and metadata, so that every later error names the object.
func readHeader(data []byte, where string) (*header, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return nil, &Error{Where: where, Message: "want an object with apiVersion and kind, got " + got(data)}
	}
	h := &header{}
	// Unknown fields are the typed decoder's business; the header only needs to be readable.
	if _, ferr := decodeStrict(data, h); ferr != nil {
		return nil, &Error{Where: where, Field: ferr.field, Message: ferr.msg}
	}
	switch {
	case h.Kind == "":
		return nil, &Error{Where: where, Object: name(h), Field: "kind",
			Message: "required: every object needs apiVersion and kind, as kubectl get -o yaml prints them"}
	case h.APIVersion == "":
		return nil, &Error{Where: where, Object: describe(h), Field: "apiVersion",
			Message: "required: every object needs apiVersion and kind, as kubectl get -o yaml prints them"}
	}
	return h, nil
}

func name(h *header) string {
	if h.Metadata.Namespace != "" {
		return h.Metadata.Namespace + "/" + h.Metadata.Name
	}
	return h.Metadata.Name
}

func describe(h *header) string {
	if n := name(h); n != "" {
		return h.Kind + " " + n
	}
	return h.Kind
}

// object decodes one object of a kind the planner reads, or counts it as ignored.
func (r *reader) object(data []byte, h *header, where string) error {
	gv, err := schema.ParseGroupVersion(h.APIVersion)
	if err != nil {
		return &Error{Where: where, Object: describe(h), Field: "apiVersion", Message: err.Error()}
	}
	gvk := gv.WithKind(h.Kind)
	known := false
	for _, k := range plannedKinds {
		if k == gvk {
			known = true
			break
		}
		if k.Group == gvk.Group && k.Kind == gvk.Kind {
			return &Error{Where: where, Object: describe(h), Field: "apiVersion", Message: fmt.Sprintf(
				"unsupported version %q of %s: want %s", h.APIVersion, h.Kind, k.GroupVersion().String())}
		}
	}
	if !known {
		r.snap.Ignored[h.Kind]++
		return nil
	}
	switch gvk {
	case kindNode:
		return add(r, data, h, where, false, &r.snap.Nodes,
			func(o *corev1.Node) *fieldError { return validateName(o.Name) }, nodeTimes)
	case kindPod:
		return add(r, data, h, where, false, &r.snap.Pods,
			func(o *corev1.Pod) *fieldError { return validateNamespaced(&o.ObjectMeta) }, podTimes)
	case kindPDB:
		return add(r, data, h, where, false, &r.snap.PDBs,
			func(o *policyv1.PodDisruptionBudget) *fieldError { return validateNamespaced(&o.ObjectMeta) }, pdbTimes)
	case kindGPUNode:
		return add(r, data, h, where, true, &r.snap.GPUNodes, func(o *v1alpha1.GPUNode) *fieldError {
			if ferr := validateGPUNode(o); ferr != nil {
				return ferr
			}
			r.snap.Warnings = append(r.snap.Warnings, placementWarnings(o, where)...)
			return nil
		}, gpuNodeTimes)
	case kindPolicy:
		return add(r, data, h, where, true, &r.snap.Policies, validatePolicy,
			func(o *v1alpha1.GPUPoolPolicy) []metav1.Time { return []metav1.Time{o.CreationTimestamp} })
	case kindClaim:
		return add(r, data, h, where, false, &r.snap.Claims,
			func(o *resourcev1.ResourceClaim) *fieldError { return validateNamespaced(&o.ObjectMeta) },
			func(o *resourcev1.ResourceClaim) []metav1.Time { return []metav1.Time{o.CreationTimestamp} })
	case kindSlice:
		return add(r, data, h, where, false, &r.snap.Slices,
			func(o *resourcev1.ResourceSlice) *fieldError { return validateName(o.Name) },
			func(o *resourcev1.ResourceSlice) []metav1.Time { return []metav1.Time{o.CreationTimestamp} })
	case kindTaint:
		return add(r, data, h, where, false, &r.snap.TaintRules,
			func(o *resourcev1.DeviceTaintRule) *fieldError { return validateName(o.Name) }, taintRuleTimes)
	}
	return nil
}

// add decodes one object of a planned kind (strictly for gpupool's own kinds), validates it as
// the API server would, refuses a second copy of it, and records it with its timestamps.
func add[T any, P interface {
	*T
	metav1.Object
}](r *reader, data []byte, h *header, where string, own bool, to *[]T,
	validate func(P) *fieldError, times func(P) []metav1.Time) error {
	var o T
	obj := P(&o)
	if err := r.decode(data, obj, where, h, own); err != nil {
		return err
	}
	if ferr := validate(obj); ferr != nil {
		return &Error{Where: where, Object: describe(h), Field: ferr.field, Message: ferr.msg}
	}
	if err := r.claim(h, obj.GetNamespace(), obj.GetName(), where); err != nil {
		return err
	}
	*to = append(*to, o)
	r.times(times(obj)...)
	return nil
}

// claim records an object's identity and refuses a second object with the same one: the
// planner keys pods, nodes and policies by name, and a file with two differing copies of one
// object has no single meaning.
func (r *reader) claim(h *header, namespace, name, where string) error {
	key := h.Kind + "/" + namespace + "/" + name
	if first, dup := r.seen[key]; dup {
		return &Error{Where: where, Object: describe(h), Field: "metadata.name",
			Message: fmt.Sprintf("the same %s is also %s: keep one", h.Kind, first)}
	}
	r.seen[key] = where
	return nil
}

// decode reads an object strictly. Unknown fields are errors in gpupool's own kinds, whose
// schema this build defines; in Kubernetes kinds they are warnings, because a snapshot of a
// newer cluster legitimately carries fields these types do not know.
func (r *reader) decode(data []byte, into any, where string, h *header, own bool) error {
	unknown, ferr := decodeStrict(data, into)
	if ferr != nil {
		return &Error{Where: where, Object: describe(h), Field: ferr.field, Message: ferr.msg}
	}
	if len(unknown) == 0 {
		return nil
	}
	msg := "unknown field"
	if hint := suggest(reflect.TypeOf(into), unknown[0]); hint != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", hint)
	}
	if len(unknown) > 1 {
		msg += "; also unknown: " + strings.Join(unknown[1:], ", ")
	}
	e := &Error{Where: where, Object: describe(h), Field: unknown[0], Message: msg}
	if own {
		return e
	}
	r.snap.Warnings = append(r.snap.Warnings, e.Error()+": ignored (is the snapshot from a newer Kubernetes?)")
	return nil
}

// times records timestamps for the default planning time.
func (r *reader) times(ts ...metav1.Time) {
	for _, t := range ts {
		if t.After(r.snap.Newest) {
			r.snap.Newest = t.UTC()
		}
	}
}

func nodeTimes(n *corev1.Node) []metav1.Time {
	out := []metav1.Time{n.CreationTimestamp}
	for _, c := range n.Status.Conditions {
		out = append(out, c.LastHeartbeatTime, c.LastTransitionTime)
	}
	return out
}

func taintRuleTimes(t *resourcev1.DeviceTaintRule) []metav1.Time {
	out := []metav1.Time{t.CreationTimestamp}
	if t.Spec.Taint.TimeAdded != nil {
		out = append(out, *t.Spec.Taint.TimeAdded)
	}
	for _, c := range t.Status.Conditions {
		out = append(out, c.LastTransitionTime)
	}
	return out
}

func podTimes(p *corev1.Pod) []metav1.Time {
	out := []metav1.Time{p.CreationTimestamp}
	if p.Status.StartTime != nil {
		out = append(out, *p.Status.StartTime)
	}
	for _, c := range p.Status.Conditions {
		out = append(out, c.LastProbeTime, c.LastTransitionTime)
	}
	return out
}

func pdbTimes(p *policyv1.PodDisruptionBudget) []metav1.Time {
	out := []metav1.Time{p.CreationTimestamp}
	for _, c := range p.Status.Conditions {
		out = append(out, c.LastTransitionTime)
	}
	return out
}

func gpuNodeTimes(g *v1alpha1.GPUNode) []metav1.Time {
	out := []metav1.Time{g.CreationTimestamp}
	if g.Status.ObservedTime != nil {
		out = append(out, *g.Status.ObservedTime)
	}
	for _, c := range g.Status.Conditions {
		out = append(out, c.LastTransitionTime)
	}
	return out
}
