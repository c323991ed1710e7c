package agent

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpupool/gpupool/api/v1alpha1"
)

// Reasons of the NVMLReady condition. They are API: dashboards and alerts
// match on them.
const (
	// ReasonGPUsRead: every GPU was read without an NVML error (True).
	ReasonGPUsRead = "GPUsRead"
	// ReasonPartialRead: the node was read but NVML failed for some GPUs; their
	// status carries the error (True, because the other GPUs are reported).
	ReasonPartialRead = "PartialRead"
	// ReasonNVMLNotFound: libnvidia-ml.so.1 could not be loaded, i.e. no NVIDIA driver (False).
	ReasonNVMLNotFound = "NVMLNotFound"
	// ReasonDriverNotLoaded: the library loaded but the kernel driver is not running (False).
	ReasonDriverNotLoaded = "DriverNotLoaded"
	// ReasonDriverMismatch: libnvidia-ml and the kernel driver are different versions (False).
	ReasonDriverMismatch = "DriverLibraryMismatch"
	// ReasonNoPermission: the agent may not talk to the driver (False).
	ReasonNoPermission = "NoPermission"
	// ReasonInitFailed: NVML initialisation failed for another reason (False).
	ReasonInitFailed = "NVMLInitFailed"
	// ReasonDeviceCountFailed: NVML started but could not count the GPUs (False).
	ReasonDeviceCountFailed = "DeviceCountFailed"
	// ReasonNoGPU: NVML works but sees no GPU (False).
	ReasonNoGPU = "NoGPU"
)

// Error is a whole-node failure: NVML could not be used at all, so there is no
// GPU to report. Reason is one of the Reason* constants for the NVMLReady
// condition; Return is NVML's code, SUCCESS when NVML did not fail (no GPU).
type Error struct {
	Reason string
	Op     string // the NVML call that failed, e.g. "Init"
	Return nvml.Return
}

// Error explains the failure in the words an operator needs.
func (e *Error) Error() string {
	switch e.Reason {
	case ReasonNVMLNotFound:
		return "NVML not found: this machine has no NVIDIA driver (libnvidia-ml.so.1)"
	case ReasonNoGPU:
		return "NVML sees no GPU on this machine"
	case ReasonDriverNotLoaded:
		return fmt.Sprintf("NVML %s: the NVIDIA kernel driver is not loaded (%s)", e.Op, returnText(e.Return))
	case ReasonDriverMismatch:
		return fmt.Sprintf("NVML %s: libnvidia-ml.so.1 and the kernel driver are different versions; reboot or reload the driver (%s)", e.Op, returnText(e.Return))
	}
	return fmt.Sprintf("NVML %s failed: %s", e.Op, returnText(e.Return))
}

// Unwrap exposes NVML's return code so errors.Is(err, nvml.ERROR_...) works.
func (e *Error) Unwrap() error {
	if e.Return == nvml.SUCCESS {
		return nil
	}
	return e.Return
}

// initError classifies a failed nvml Init by the fix it needs.
func initError(ret nvml.Return) *Error {
	reason := ReasonInitFailed
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		reason = ReasonNVMLNotFound
	case nvml.ERROR_DRIVER_NOT_LOADED:
		reason = ReasonDriverNotLoaded
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		reason = ReasonDriverMismatch
	case nvml.ERROR_NO_PERMISSION:
		reason = ReasonNoPermission
	case nvml.ERROR_GPU_NOT_FOUND:
		reason = ReasonNoGPU
	}
	return &Error{Reason: reason, Op: "Init", Return: ret}
}

// NVMLReadyCondition turns Read's result into the GPUNode NVMLReady condition.
// LastTransitionTime is left zero so meta.SetStatusCondition stamps it only
// when the status actually changes.
func NVMLReadyCondition(gpus []v1alpha1.GPUStatus, err error) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionNVMLReady}
	if err != nil {
		c.Status = metav1.ConditionFalse
		c.Reason = ReasonInitFailed
		var e *Error
		if errors.As(err, &e) {
			c.Reason = e.Reason
		}
		c.Message = err.Error()
		return c
	}
	c.Status = metav1.ConditionTrue
	var failed []string // in GPU order: Read returns GPUs by index
	for _, g := range gpus {
		if g.Error != "" {
			failed = append(failed, strconv.Itoa(int(g.Index)))
		}
	}
	if len(failed) == 0 {
		c.Reason = ReasonGPUsRead
		c.Message = fmt.Sprintf("read %d GPU(s) through NVML", len(gpus))
		return c
	}
	c.Reason = ReasonPartialRead
	c.Message = fmt.Sprintf("NVML failed for GPU(s) %s of %d; see status.gpus[].error", strings.Join(failed, ", "), len(gpus))
	return c
}

// returnText renders an NVML return code with its symbolic value, which the
// driver's own error strings ("Unknown Error") leave out.
func returnText(ret nvml.Return) string {
	return fmt.Sprintf("%s (nvml return %d)", ret.Error(), int32(ret))
}
