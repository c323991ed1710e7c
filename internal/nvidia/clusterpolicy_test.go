package nvidia

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func clusterPolicy(name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec, "status": map[string]any{"namespace": "gpu-operator"}}}
	u.SetGroupVersionKind(ClusterPolicyGVK)
	u.SetName(name)
	return u
}

func goodSpec() map[string]any {
	return map[string]any{
		"mig":          map[string]any{"strategy": "mixed"},
		"migManager":   map[string]any{"enabled": true, "config": map[string]any{"name": "gpupool-mig-parted", "default": "all-disabled"}},
		"devicePlugin": map[string]any{"config": map[string]any{"name": "gpupool-device-plugin", "default": "gpupool-none"}},
	}
}

func TestCheckClusterPolicy(t *testing.T) {
	const (
		migCM = "gpupool-mig-parted"
		dpCM  = "gpupool-device-plugin"
	)
	cases := []struct {
		name   string
		policy *unstructured.Unstructured
		dpCM   string
		want   []string
	}{
		{name: "all set", policy: clusterPolicy("cluster-policy", goodSpec()), dpCM: dpCM},
		{
			name: "single strategy",
			policy: func() *unstructured.Unstructured {
				s := goodSpec()
				s["mig"] = map[string]any{"strategy": "single"}
				return clusterPolicy("cluster-policy", s)
			}(),
			dpCM: dpCM,
			want: []string{`set spec.mig.strategy to mixed (now single): kubectl patch clusterpolicies.nvidia.com cluster-policy --type merge -p '{"spec":{"mig":{"strategy":"mixed"}}}'`},
		},
		{
			name:   "fresh install: nothing configured",
			policy: clusterPolicy("gpu-cluster-policy", map[string]any{}),
			dpCM:   dpCM,
			want: []string{
				`set spec.mig.strategy to mixed (now unset): kubectl patch clusterpolicies.nvidia.com gpu-cluster-policy --type merge -p '{"spec":{"mig":{"strategy":"mixed"}}}'`,
				`set spec.migManager.config.name to gpupool-mig-parted (now unset): kubectl patch clusterpolicies.nvidia.com gpu-cluster-policy --type merge -p '{"spec":{"migManager":{"config":{"name":"gpupool-mig-parted"}}}}'`,
				`set spec.devicePlugin.config.name to gpupool-device-plugin (now unset): kubectl patch clusterpolicies.nvidia.com gpu-cluster-policy --type merge -p '{"spec":{"devicePlugin":{"config":{"name":"gpupool-device-plugin"}}}}'`,
				`set spec.devicePlugin.config.default to gpupool-none (now unset): kubectl patch clusterpolicies.nvidia.com gpu-cluster-policy --type merge -p '{"spec":{"devicePlugin":{"config":{"default":"gpupool-none"}}}}'`,
			},
		},
		{
			name: "a default key kept from the user's earlier ConfigMap",
			policy: func() *unstructured.Unstructured {
				s := goodSpec()
				s["devicePlugin"] = map[string]any{"config": map[string]any{"name": "gpupool-device-plugin", "default": "any"}}
				return clusterPolicy("cluster-policy", s)
			}(),
			dpCM: dpCM,
			want: []string{`set spec.devicePlugin.config.default to gpupool-none (now any): kubectl patch clusterpolicies.nvidia.com cluster-policy --type merge -p '{"spec":{"devicePlugin":{"config":{"default":"gpupool-none"}}}}'`},
		},
		{
			name: "another ConfigMap and mig-manager off",
			policy: func() *unstructured.Unstructured {
				s := goodSpec()
				s["migManager"] = map[string]any{"enabled": false, "config": map[string]any{"name": "default-mig-parted-config"}}
				return clusterPolicy("cluster-policy", s)
			}(),
			dpCM: dpCM,
			want: []string{
				`set spec.migManager.enabled to true (now false): kubectl patch clusterpolicies.nvidia.com cluster-policy --type merge -p '{"spec":{"migManager":{"enabled":true}}}'`,
				`set spec.migManager.config.name to gpupool-mig-parted (now default-mig-parted-config): kubectl patch clusterpolicies.nvidia.com cluster-policy --type merge -p '{"spec":{"migManager":{"config":{"name":"gpupool-mig-parted"}}}}'`,
			},
		},
		{
			name: "device plugin not checked without a sharing ConfigMap",
			policy: func() *unstructured.Unstructured {
				s := goodSpec()
				delete(s, "devicePlugin")
				return clusterPolicy("cluster-policy", s)
			}(),
		},
		{
			name: "wrong type",
			policy: func() *unstructured.Unstructured {
				s := goodSpec()
				s["mig"] = map[string]any{"strategy": int64(3)}
				return clusterPolicy("", s)
			}(),
			dpCM: dpCM,
			want: []string{`set spec.mig.strategy to mixed (now not a string: 3): kubectl patch clusterpolicies.nvidia.com cluster-policy --type merge -p '{"spec":{"mig":{"strategy":"mixed"}}}'`},
		},
		{
			name: "operator in another namespace",
			policy: func() *unstructured.Unstructured {
				u := clusterPolicy("cluster-policy", goodSpec())
				u.Object["status"] = map[string]any{"namespace": "nvidia-gpu-operator"}
				return u
			}(),
			dpCM: dpCM,
			want: []string{"the GPU Operator runs in namespace nvidia-gpu-operator (ClusterPolicy cluster-policy status.namespace) and mounts " +
				"its ConfigMaps only from there, but gpupool writes them into gpu-operator: restart the manager with " +
				"--gpu-operator-namespace=nvidia-gpu-operator (Helm value gpuOperator.namespace), and grant it the ConfigMap Role in that namespace"},
		},
		{
			name: "operator has not reconciled yet",
			policy: func() *unstructured.Unstructured {
				u := clusterPolicy("cluster-policy", goodSpec())
				delete(u.Object, "status")
				return u
			}(),
			dpCM: dpCM,
			want: []string{"ClusterPolicy cluster-policy reports no status.namespace yet, so where the GPU Operator mounts its ConfigMaps " +
				"from is unknown (gpupool writes them into gpu-operator): check that the GPU Operator is running and has reconciled it"},
		},
		{
			name: "no ClusterPolicy",
			dpCM: dpCM,
			want: []string{"no ClusterPolicy (nvidia.com/v1) found: install the NVIDIA GPU Operator, whose Helm chart creates cluster-policy"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			problems := CheckClusterPolicy(tc.policy, "gpu-operator", migCM, tc.dpCM)
			var got []string
			for _, p := range problems {
				got = append(got, p.String())
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("problems:\n%q\nwant:\n%q", got, tc.want)
			}
		})
	}
}

func TestProblemFields(t *testing.T) {
	s := goodSpec()
	s["mig"] = map[string]any{"strategy": "single"}
	problems := CheckClusterPolicy(clusterPolicy("cluster-policy", s), "gpu-operator", "gpupool-mig-parted", "")
	if len(problems) != 1 {
		t.Fatalf("problems %v", problems)
	}
	p := problems[0]
	if p.Field != "spec.mig.strategy" || p.Want != "mixed" || p.Got != "single" {
		t.Errorf("problem %+v", p)
	}
	two := []Problem{{Fix: "a"}, {Fix: "b"}}
	if got := ProblemsMessage(two); got != "a; b" {
		t.Errorf("ProblemsMessage = %q", got)
	}
}

// TestActiveClusterPolicyIsTheOperators guards that gpupool judges the ClusterPolicy the GPU
// Operator acts on: the oldest, the name breaking a tie, whatever order a list returns.
func TestActiveClusterPolicyIsTheOperators(t *testing.T) {
	at := func(name string, created time.Time) unstructured.Unstructured {
		u := clusterPolicy(name, nil)
		u.SetCreationTimestamp(metav1.NewTime(created))
		return *u
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		items []unstructured.Unstructured
		want  string
	}{
		{"none", nil, ""},
		{"one", []unstructured.Unstructured{at("cluster-policy", t0)}, "cluster-policy"},
		{"the oldest, listed last", []unstructured.Unstructured{at("a-newer", t0.Add(time.Hour)), at("z-older", t0)}, "z-older"},
		{"a tie goes to the first name", []unstructured.Unstructured{at("b", t0), at("a", t0)}, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ActiveClusterPolicy(tc.items)
			name := ""
			if got != nil {
				name = got.GetName()
			}
			if name != tc.want {
				t.Errorf("ActiveClusterPolicy = %q, want %q", name, tc.want)
			}
		})
	}
}
