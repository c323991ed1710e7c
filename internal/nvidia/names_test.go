package nvidia

import (
	"strings"
	"testing"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
)

// TestNamesHaveOneSpelling holds the copies that still live below this package (api/v1alpha1's
// label constants, internal/mig's resource prefix, which this package imports and so cannot
// import back) to the names here, until their readers use these.
func TestNamesHaveOneSpelling(t *testing.T) {
	for _, tc := range []struct{ copy, home string }{
		{v1alpha1.LabelMIGConfig, LabelMIGConfig},
		{v1alpha1.LabelMIGConfigState, LabelMIGConfigState},
		{v1alpha1.LabelDevicePluginConfig, LabelDevicePluginConfig},
		{v1alpha1.LabelGPUProduct, LabelGPUProduct},
		{v1alpha1.LabelGPUPresent, LabelGPUPresent},
		{mig.ResourcePrefix, MIGResourcePrefix},
		{mig.ResourceName("1g.18gb"), MIGResourcePrefix + "1g.18gb"},
	} {
		if tc.copy != tc.home {
			t.Errorf("%q differs from internal/nvidia's %q", tc.copy, tc.home)
		}
	}
	for _, class := range []string{DRADriver, DeviceClassGPU, DeviceClassMIG} {
		if !strings.HasSuffix(class, DeviceClassDomain) {
			t.Errorf("device class %q does not end in %q", class, DeviceClassDomain)
		}
	}
}
