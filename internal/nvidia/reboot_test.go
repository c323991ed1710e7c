package nvidia

import "testing"

func TestMIGManagerWithReboot(t *testing.T) {
	env := func(kv ...string) map[string]any {
		var list []any
		for i := 0; i < len(kv); i += 2 {
			list = append(list, map[string]any{"name": kv[i], "value": kv[i+1]})
		}
		spec := goodSpec()
		spec["migManager"].(map[string]any)["env"] = list
		return spec
	}
	args := func(a ...any) map[string]any {
		spec := goodSpec()
		spec["migManager"].(map[string]any)["args"] = a
		return spec
	}
	cases := []struct {
		name string
		spec map[string]any
		want bool
	}{
		{"the operator's default: no env", goodSpec(), false},
		{"WITH_REBOOT=true", env("WITH_REBOOT", "true"), true},
		{"WITH_REBOOT=1", env("WITH_REBOOT", "1"), true},
		{"WITH_REBOOT=false", env("WITH_REBOOT", "false"), false},
		{"another variable only", env("WITH_SHUTDOWN_HOST_GPU_CLIENTS", "true"), false},
		{"a value mig-manager would not parse counts as on", env("WITH_REBOOT", "yes"), true},
		{"args passing -r", args("/bin/entrypoint.sh -r"), true},
		{"args exporting it", args("export WITH_REBOOT=true; exec /bin/entrypoint.sh"), true},
		{"args without it", args("/bin/entrypoint.sh"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := MIGManagerWithReboot(clusterPolicy("cluster-policy", tc.spec)); got != tc.want {
				t.Errorf("MIGManagerWithReboot = %t, want %t", got, tc.want)
			}
		})
	}
	if MIGManagerWithReboot(nil) {
		t.Error("no ClusterPolicy: nothing says mig-manager reboots")
	}
}
