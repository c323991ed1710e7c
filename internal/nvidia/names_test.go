package nvidia

import (
	"strings"
	"testing"

	"github.com/gpupool/gpupool/internal/mig"
)

// TestNamesHaveOneSpelling holds the copy that still lives below this package (internal/mig's
// resource prefix: this package imports mig, so mig cannot import it back) to the names here.
func TestNamesHaveOneSpelling(t *testing.T) {
	for _, tc := range []struct{ copy, home string }{
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
