package nvidia

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ClusterPolicyGVK is the GPU Operator's ClusterPolicy kind, read as unstructured so gpupool
// does not depend on the operator's Go module.
var ClusterPolicyGVK = schema.GroupVersionKind{Group: "nvidia.com", Version: "v1", Kind: "ClusterPolicy"}

// ActiveClusterPolicy is the ClusterPolicy the GPU Operator acts on when several exist: the
// oldest by creationTimestamp, the name breaking a tie; the operator marks every other one
// "ignored" (NVIDIA/gpu-operator controllers/active_config.go getSingletonClusterPolicy, used
// by controllers/clusterpolicy_controller.go). gpupool judges the same one, so that a stray
// second ClusterPolicy can neither hide a misconfiguration nor invent one. nil when none.
func ActiveClusterPolicy(items []unstructured.Unstructured) *unstructured.Unstructured {
	var active *unstructured.Unstructured
	for i := range items {
		c := &items[i]
		if active == nil {
			active = c
			continue
		}
		ct, at := c.GetCreationTimestamp(), active.GetCreationTimestamp()
		if ct.Before(&at) || (ct.Equal(&at) && c.GetName() < active.GetName()) {
			active = c
		}
	}
	return active
}

// DefaultClusterPolicyName is the name the GPU Operator's Helm chart gives its ClusterPolicy.
const DefaultClusterPolicyName = "cluster-policy"

// Problem is one ClusterPolicy setting that keeps gpupool from working, with the fix.
type Problem struct {
	// Field is the JSON path of the setting, e.g. spec.mig.strategy.
	Field string
	// Want is the value gpupool needs.
	Want string
	// Got is the value found, "" when unset.
	Got string
	// Fix says what to change and gives the kubectl command that does it.
	Fix string
}

// String returns the fix, which names the field and both values.
func (p Problem) String() string { return p.Fix }

// ProblemsMessage joins the fixes into one message for the GPUOperatorConfigured condition.
func ProblemsMessage(problems []Problem) string {
	fixes := make([]string, len(problems))
	for i, p := range problems {
		fixes[i] = p.Fix
	}
	return strings.Join(fixes, "; ")
}

// DefaultOperatorNamespace is the namespace the GPU Operator's Helm chart is installed into in
// NVIDIA's instructions; gpupool uses it when there is no ClusterPolicy to ask.
const DefaultOperatorNamespace = "gpu-operator"

// OperatorNamespace is the namespace the GPU Operator runs its operands in, as it reports it
// in ClusterPolicy status.namespace; "" when it has not reported one. The operator mounts the
// ConfigMaps named in spec.migManager.config.name and spec.devicePlugin.config.name into its
// mig-manager and device-plugin DaemonSets as volumes, and a pod can mount only ConfigMaps of
// its own namespace, so gpupool must write them there (NVIDIA/gpu-operator
// controllers/object_controls.go, TransformMigManager and TransformDevicePlugin).
func OperatorNamespace(obj *unstructured.Unstructured) string {
	if obj == nil {
		return ""
	}
	ns, _, _ := unstructured.NestedString(obj.Object, "status", "namespace")
	return ns
}

// MIGManagerWithReboot says whether the ClusterPolicy makes mig-manager reboot a node whose
// MIG mode change fails. The operator copies spec.migManager.env into mig-manager's container
// and sets WITH_REBOOT nowhere else (gpu-operator controllers/object_controls.go
// TransformMIGManager; assets/state-mig-manager/0600_daemonset.yaml and the Helm values set
// none), and mig-manager reads WITH_REBOOT as its --with-reboot flag (mig-parted
// cmd/nvidia-mig-manager/main.go, parsed as a Go boolean). spec.migManager.args replace the
// container's shell script, which may pass -r or --with-reboot itself. Anything that might
// turn the flag on (a value that is not a boolean, a script that mentions a reboot) counts as
// on: a wrong "off" would let gpupool reboot a node under running pods.
func MIGManagerWithReboot(obj *unstructured.Unstructured) bool {
	if obj == nil {
		return false
	}
	env, _, _ := unstructured.NestedSlice(obj.Object, "spec", "migManager", "env")
	for _, e := range env {
		m, ok := e.(map[string]any)
		if !ok || m["name"] != "WITH_REBOOT" {
			continue
		}
		v, _ := m["value"].(string)
		if on, err := strconv.ParseBool(v); err != nil || on {
			return true
		}
	}
	args, _, _ := unstructured.NestedSlice(obj.Object, "spec", "migManager", "args")
	for _, a := range args {
		text, _ := a.(string)
		if strings.Contains(strings.ToLower(text), "reboot") || slices.Contains(strings.Fields(text), "-r") {
			return true
		}
	}
	return false
}

// CheckClusterPolicy lists the settings of the GPU Operator's ClusterPolicy that gpupool needs
// and finds missing: the operator's namespace being the one gpupool writes its ConfigMaps into
// (configNamespace), the mixed MIG strategy (one resource per profile, which demand is counted
// in), mig-manager enabled and reading migConfigMap (where gpupool writes its entries), and the
// device plugin reading devicePluginConfigMap (where it writes sharing settings; not checked
// when that name is empty). A nil policy is one problem: the GPU Operator is not installed.
func CheckClusterPolicy(obj *unstructured.Unstructured, configNamespace, migConfigMap, devicePluginConfigMap string) []Problem {
	if obj == nil {
		return []Problem{{
			Want: "a ClusterPolicy",
			Fix:  "no ClusterPolicy (nvidia.com/v1) found: install the NVIDIA GPU Operator, whose Helm chart creates " + DefaultClusterPolicyName,
		}}
	}
	name := obj.GetName()
	if name == "" {
		name = DefaultClusterPolicyName
	}
	var problems []Problem
	switch ns := OperatorNamespace(obj); {
	case ns == "":
		problems = append(problems, Problem{Field: "status.namespace", Want: configNamespace, Fix: fmt.Sprintf(
			"ClusterPolicy %s reports no status.namespace yet, so where the GPU Operator mounts its ConfigMaps from is unknown "+
				"(gpupool writes them into %s): check that the GPU Operator is running and has reconciled it", name, configNamespace)})
	case ns != configNamespace:
		problems = append(problems, Problem{Field: "status.namespace", Want: configNamespace, Got: ns, Fix: fmt.Sprintf(
			"the GPU Operator runs in namespace %s (ClusterPolicy %s status.namespace) and mounts its ConfigMaps only from there, "+
				"but gpupool writes them into %s: restart the manager with --gpu-operator-namespace=%s (Helm value gpuOperator.namespace), "+
				"and grant it the ConfigMap Role in that namespace", ns, name, configNamespace, ns)})
	}
	check := func(want string, path ...string) {
		got, found, err := unstructured.NestedFieldNoCopy(obj.Object, path...)
		gotText, isString := got.(string)
		if found && err == nil && isString && gotText == want {
			return
		}
		now := "unset"
		switch {
		case err != nil || (found && !isString):
			gotText = fmt.Sprintf("%v", got)
			now = "not a string: " + gotText
		case found:
			now = gotText
		}
		field := strings.Join(path, ".")
		problems = append(problems, Problem{
			Field: field, Want: want, Got: gotText,
			Fix: fmt.Sprintf("set %s to %s (now %s): %s", field, want, now, patchCommand(name, want, path)),
		})
	}
	check("mixed", "spec", "mig", "strategy")
	if enabled, found, err := unstructured.NestedFieldNoCopy(obj.Object, "spec", "migManager", "enabled"); found && err == nil && enabled != true {
		problems = append(problems, Problem{
			Field: "spec.migManager.enabled", Want: "true", Got: fmt.Sprintf("%v", enabled),
			Fix: fmt.Sprintf("set spec.migManager.enabled to true (now %v): %s", enabled, patchCommand(name, true, []string{"spec", "migManager", "enabled"})),
		})
	}
	check(migConfigMap, "spec", "migManager", "config", "name")
	if devicePluginConfigMap != "" {
		check(devicePluginConfigMap, "spec", "devicePlugin", "config", "name")
		// A node without the nvidia.com/device-plugin.config label gets the default key; with it
		// unset, NVIDIA's config-manager falls back to a key named "default" or to the only key,
		// and gpupool's ConfigMap has neither once it holds a sharing key, so the plugin would not
		// start (k8s-device-plugin cmd/config-manager/main.go, updateConfigName). A default the
		// user kept from an earlier ConfigMap (NVIDIA's time-slicing guide uses "any") is missing
		// from gpupool's for the same reason.
		check(DevicePluginNone, "spec", "devicePlugin", "config", "default")
	}
	return problems
}

// patchCommand is the kubectl merge patch that sets the field at path to value.
func patchCommand(policy string, value any, path []string) string {
	patch := value
	for i := len(path) - 1; i >= 0; i-- {
		patch = map[string]any{path[i]: patch}
	}
	body, err := json.Marshal(patch)
	if err != nil {
		// Nested maps of strings and booleans always encode.
		panic(fmt.Sprintf("encoding ClusterPolicy patch: %v", err))
	}
	return fmt.Sprintf("kubectl patch clusterpolicies.nvidia.com %s --type merge -p '%s'", policy, body)
}
