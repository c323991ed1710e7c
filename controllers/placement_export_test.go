package controllers

import "k8s.io/apimachinery/pkg/types"

// DeviceTaintNameForTest is the name gpupool gives a step's DeviceTaintRule, for tests that
// play a crash that left one behind.
func DeviceTaintNameForTest(planUID types.UID, driver, node, device string) string {
	return deviceTaintName(planUID, driver, node, device)
}
