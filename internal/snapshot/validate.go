package snapshot

import (
	"fmt"
	"regexp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
)

// The patterns and bounds below are the CRD's (api/v1alpha1 markers): a saved snapshot never
// met the API server, so the reader applies them itself.
var (
	migProfilePattern    = regexp.MustCompile(`^[1-7]g\.[0-9]+gb(\+(me|me\.all|gfx)(,(me|me\.all|gfx)){0,2}|-me)?$`)
	shapeResourcePattern = regexp.MustCompile(`^nvidia\.com/(gpu|gpu\.shared|mig-[1-7]g\.[0-9]+gb(\.me|\.me\.all|\.gfx|-me)?)$`)
	percentPattern       = regexp.MustCompile(`^(100|[1-9]?[0-9])%$`)
)

// validateName checks metadata.name as the API server does for these kinds.
func validateName(name string) *fieldError {
	if name == "" {
		return &fieldError{field: "metadata.name", msg: "required"}
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return &fieldError{field: "metadata.name", msg: fmt.Sprintf("invalid name %q: %s", name, errs[0])}
	}
	return nil
}

// validateNamespaced checks name and namespace; a missing namespace is "default", as when the
// object is applied without -n.
func validateNamespaced(m *metav1.ObjectMeta) *fieldError {
	if m.Namespace == "" {
		m.Namespace = metav1.NamespaceDefault
	}
	if errs := validation.IsDNS1123Label(m.Namespace); len(errs) > 0 {
		return &fieldError{field: "metadata.namespace", msg: fmt.Sprintf("invalid namespace %q: %s", m.Namespace, errs[0])}
	}
	return validateName(m.Name)
}

// validatePolicy applies the CRD's rules for GPUPoolPolicy.
func validatePolicy(p *v1alpha1.GPUPoolPolicy) *fieldError {
	if ferr := validateName(p.Name); ferr != nil {
		return ferr
	}
	spec := &p.Spec
	if ferr := validateSelector(spec.NodeSelector); ferr != nil {
		return ferr
	}
	if ferr := validateCatalog(spec.Catalog); ferr != nil {
		return ferr
	}
	if ferr := validateShapes(spec.Shapes); ferr != nil {
		return ferr
	}
	d := &spec.Disruption
	switch d.Approval {
	case "", v1alpha1.ApprovalManual, v1alpha1.ApprovalAutoIdle, v1alpha1.ApprovalAuto:
	default:
		return &fieldError{field: "spec.disruption.approval", msg: fmt.Sprintf(
			"unsupported value %q: want %s, %s or %s", d.Approval, v1alpha1.ApprovalManual, v1alpha1.ApprovalAutoIdle, v1alpha1.ApprovalAuto)}
	}
	for _, budget := range []struct {
		field string
		value *intstr.IntOrString
	}{{"spec.disruption.maxDisruptedNodes", d.MaxDisruptedNodes}, {"spec.disruption.maxReconfiguringNodes", d.MaxReconfiguringNodes}} {
		v := budget.value
		if v == nil {
			continue
		}
		bad := false
		switch v.Type {
		case intstr.Int:
			bad = v.IntVal < 0
		case intstr.String:
			bad = !percentPattern.MatchString(v.StrVal)
		}
		if bad {
			return &fieldError{field: budget.field, msg: fmt.Sprintf(
				"invalid value %s: want a count of 0 or more, or a percentage from 0%% to 100%%", intOrStringText(v))}
		}
	}
	for _, dur := range spec.Durations() {
		if dur.Value != nil && (dur.Value.Duration < dur.Min || dur.Value.Duration > dur.Max) {
			return &fieldError{field: dur.Field, msg: fmt.Sprintf("duration %s out of range: want between %s and %s",
				dur.Value.Duration, dur.Min, dur.Max)}
		}
	}
	return nil
}

func intOrStringText(v *intstr.IntOrString) string {
	if v.Type == intstr.Int {
		return fmt.Sprint(v.IntVal)
	}
	return fmt.Sprintf("%q", v.StrVal)
}

// validateSelector refuses the empty selector as the CRD does, in the CRD's words (to
// Kubernetes an empty selector is every node of the cluster; gpupool's pool would hold none,
// PoolSelector.Selector), and any selector the API server's rules refuse.
func validateSelector(sel v1alpha1.PoolSelector) *fieldError {
	const path = "spec.nodeSelector"
	if sel.IsEmpty() {
		return &fieldError{field: path, msg: "must select something: an empty selector would put every node of the cluster in the pool"}
	}
	errs := metav1validation.ValidateLabelSelector(sel.LabelSelector(), metav1validation.LabelSelectorValidationOptions{}, field.NewPath("spec", "nodeSelector"))
	if len(errs) > 0 {
		return fromFieldError(errs[0])
	}
	if _, err := sel.Selector(); err != nil {
		return &fieldError{field: path, msg: err.Error()}
	}
	return nil
}

func fromFieldError(e *field.Error) *fieldError {
	return &fieldError{field: e.Field, msg: e.ErrorBody()}
}

func validateCatalog(entries []v1alpha1.CatalogEntry) *fieldError {
	if len(entries) > 32 {
		return &fieldError{field: "spec.catalog", msg: fmt.Sprintf("%d entries, more than the 32 allowed", len(entries))}
	}
	seen := map[string]int{}
	for i, e := range entries {
		at := fmt.Sprintf("spec.catalog[%d]", i)
		switch {
		case e.Product == "":
			return &fieldError{field: at + ".product", msg: "required"}
		case len(e.Product) > 128:
			return &fieldError{field: at + ".product", msg: "longer than 128 characters"}
		}
		if j, dup := seen[e.Product]; dup {
			return &fieldError{field: at + ".product", msg: fmt.Sprintf("duplicate value %q: spec.catalog[%d] has it already", e.Product, j)}
		}
		seen[e.Product] = i
		if len(e.MIGProfiles) > 16 {
			return &fieldError{field: at + ".migProfiles", msg: fmt.Sprintf("%d profiles, more than the 16 allowed", len(e.MIGProfiles))}
		}
		profiles := map[v1alpha1.MIGProfileName]bool{}
		for j, pr := range e.MIGProfiles {
			f := fmt.Sprintf("%s.migProfiles[%d]", at, j)
			if !migProfilePattern.MatchString(string(pr)) {
				return &fieldError{field: f, msg: fmt.Sprintf("invalid MIG profile %q: want a name such as 1g.18gb, 3g.71gb, 1g.10gb+me, 1g.24gb+gfx or 1g.24gb-me", pr)}
			}
			if profiles[pr] {
				return &fieldError{field: f, msg: fmt.Sprintf("duplicate value %q", pr)}
			}
			profiles[pr] = true
		}
		if len(e.MIGProfiles) == 0 && !e.AllowWholeGPU && e.Sharing == nil {
			return &fieldError{field: at, msg: "allow at least one of migProfiles, allowWholeGPU or sharing"}
		}
		if s := e.Sharing; s != nil {
			if s.TimeSlicing != nil {
				if ferr := validateReplicas(at+".sharing.timeSlicing.replicas", s.TimeSlicing.Replicas, 256); ferr != nil {
					return ferr
				}
			}
			if s.MPS != nil {
				if ferr := validateReplicas(at+".sharing.mps.replicas", s.MPS.Replicas, 48); ferr != nil {
					return ferr
				}
			}
		}
	}
	return nil
}

func validateReplicas(path string, replicas []int32, most int32) *fieldError {
	if len(replicas) == 0 || len(replicas) > 16 {
		return &fieldError{field: path, msg: fmt.Sprintf("want 1 to 16 replica counts, got %d", len(replicas))}
	}
	seen := map[int32]bool{}
	for i, r := range replicas {
		if r < 2 || r > most {
			return &fieldError{field: fmt.Sprintf("%s[%d]", path, i), msg: fmt.Sprintf("%d is outside 2..%d", r, most)}
		}
		if seen[r] {
			return &fieldError{field: fmt.Sprintf("%s[%d]", path, i), msg: fmt.Sprintf("duplicate value %d", r)}
		}
		seen[r] = true
	}
	return nil
}

func validateShapes(shapes []v1alpha1.StandbyShape) *fieldError {
	if len(shapes) > 64 {
		return &fieldError{field: "spec.shapes", msg: fmt.Sprintf("%d shapes, more than the 64 allowed", len(shapes))}
	}
	seen := map[string]int{}
	for i, s := range shapes {
		at := fmt.Sprintf("spec.shapes[%d]", i)
		if !shapeResourcePattern.MatchString(s.Resource) {
			return &fieldError{field: at + ".resource", msg: fmt.Sprintf(
				"invalid resource %q: want nvidia.com/gpu, nvidia.com/gpu.shared or nvidia.com/mig-<profile> such as nvidia.com/mig-1g.18gb", s.Resource)}
		}
		if j, dup := seen[s.Resource]; dup {
			return &fieldError{field: at + ".resource", msg: fmt.Sprintf("duplicate value %q: spec.shapes[%d] has it already", s.Resource, j)}
		}
		seen[s.Resource] = i
		if s.MinFree < 0 || s.MinFree > 10000 {
			return &fieldError{field: at + ".minFree", msg: fmt.Sprintf("%d is outside 0..10000", s.MinFree)}
		}
		if s.Priority < 0 || s.Priority > 1000 {
			return &fieldError{field: at + ".priority", msg: fmt.Sprintf("%d is outside 0..1000", s.Priority)}
		}
	}
	return nil
}

// checkGPUIndex refuses a GPU index outside 0..63 (the API's bounds) or already in seen, and
// adds it to seen.
func checkGPUIndex(at string, index int32, seen map[int32]bool) *fieldError {
	if index < 0 || index > 63 {
		return &fieldError{field: at + ".index", msg: fmt.Sprintf("%d is outside 0..63", index)}
	}
	if seen[index] {
		return &fieldError{field: at + ".index", msg: fmt.Sprintf("duplicate GPU index %d", index)}
	}
	seen[index] = true
	return nil
}

// validateGPUNode applies the CRD's rules for the agent's report; the planner trusts indexes
// and placements, so a hand-edited report must not smuggle in impossible ones.
func validateGPUNode(g *v1alpha1.GPUNode) *fieldError {
	if ferr := validateName(g.Name); ferr != nil {
		return ferr
	}
	layouts := map[int32]bool{}
	for i, l := range g.Spec.ExpectedLayout {
		if ferr := checkGPUIndex(fmt.Sprintf("spec.expectedLayout[%d]", i), l.Index, layouts); ferr != nil {
			return ferr
		}
	}
	indexes := map[int32]bool{}
	for i, gpu := range g.Status.GPUs {
		at := fmt.Sprintf("status.gpus[%d]", i)
		if ferr := checkGPUIndex(at, gpu.Index, indexes); ferr != nil {
			return ferr
		}
		if m := gpu.MIGMode; m != nil {
			if !validMIGMode(m.Current, false) {
				return &fieldError{field: at + ".migMode.current", msg: fmt.Sprintf("unsupported value %q: want Enabled, Disabled or Unsupported", m.Current)}
			}
			if !validMIGMode(m.Pending, true) {
				return &fieldError{field: at + ".migMode.pending", msg: fmt.Sprintf("unsupported value %q: want Enabled, Disabled or Unsupported", m.Pending)}
			}
		}
		if ferr := validateSharingMode(at+".sharing", gpu.Sharing, true); ferr != nil {
			return ferr
		}
		for j, in := range gpu.Instances {
			ia := fmt.Sprintf("%s.instances[%d]", at, j)
			if in.Profile == "" {
				return &fieldError{field: ia + ".profile", msg: "required"}
			}
			if in.Placement.Start < 0 || in.Placement.Start > 7 {
				return &fieldError{field: ia + ".placement.start", msg: fmt.Sprintf("%d is outside 0..7", in.Placement.Start)}
			}
			if in.Placement.Size < 1 || in.Placement.Size > 8 {
				return &fieldError{field: ia + ".placement.size", msg: fmt.Sprintf("%d is outside 1..8", in.Placement.Size)}
			}
			if in.Pod != nil {
				if ferr := validatePodRef(ia+".pod", in.Pod); ferr != nil {
					return ferr
				}
			}
		}
		for j := range gpu.Pods {
			if ferr := validatePodRef(fmt.Sprintf("%s.pods[%d]", at, j), &gpu.Pods[j]); ferr != nil {
				return ferr
			}
		}
	}
	for i, c := range g.Status.Conditions {
		at := fmt.Sprintf("status.conditions[%d]", i)
		if c.Type == "" {
			return &fieldError{field: at + ".type", msg: "required"}
		}
		switch c.Status {
		case metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown:
		default:
			return &fieldError{field: at + ".status", msg: fmt.Sprintf("unsupported value %q: want True, False or Unknown", c.Status)}
		}
	}
	return nil
}

func validMIGMode(mode string, optional bool) bool {
	switch mode {
	case "Enabled", "Disabled", "Unsupported":
		return true
	case "":
		return optional
	}
	return false
}

func validateSharingMode(path string, mode v1alpha1.SharingMode, optional bool) *fieldError {
	switch mode {
	case v1alpha1.SharingNone, v1alpha1.SharingTimeSlicing, v1alpha1.SharingMPS:
		return nil
	case "":
		if optional {
			return nil
		}
	}
	return &fieldError{field: path, msg: fmt.Sprintf("unsupported value %q: want None, TimeSlicing or MPS", mode)}
}

func validatePodRef(path string, ref *v1alpha1.PodReference) *fieldError {
	if ref.Namespace == "" {
		return &fieldError{field: path + ".namespace", msg: "required"}
	}
	if ref.Name == "" {
		return &fieldError{field: path + ".name", msg: "required"}
	}
	return nil
}

// placementWarnings checks each GPU's instances against the built-in geometry of its product.
// They are warnings, not errors: the agent reads NVML, which is the authority on placements,
// and the built-in tables for some products are inferred (docs/architecture.md, "MIG geometry").
func placementWarnings(g *v1alpha1.GPUNode, where string) []string {
	var out []string
	for i, gpu := range g.Status.GPUs {
		if len(gpu.Instances) == 0 || gpu.Product == "" {
			continue
		}
		p, ok := mig.LookupProduct(gpu.Product)
		if !ok {
			continue
		}
		instances := make([]mig.Instance, 0, len(gpu.Instances))
		for _, in := range gpu.Instances {
			instances = append(instances, mig.Instance{Profile: in.Profile,
				Placement: mig.Placement{Start: int(in.Placement.Start), Size: int(in.Placement.Size)}})
		}
		if err := p.Validate(instances); err != nil {
			e := &Error{Where: where, Object: "GPUNode " + g.Name, Field: fmt.Sprintf("status.gpus[%d].instances", i), Message: err.Error()}
			out = append(out, e.Error())
		}
	}
	return out
}
