package v1alpha1

// PodReference names a pod; pods are namespaced while every gpupool kind is cluster-scoped.
type PodReference struct {
	// Namespace of the pod.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// Name of the pod.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// MIGProfileName is a MIG GPU-instance profile such as 1g.18gb, 3g.71gb or 1g.10gb+me.
// +kubebuilder:validation:Pattern=`^[1-7]g\.[0-9]+gb(\+me)?$`
// +kubebuilder:validation:MaxLength=32
type MIGProfileName string

// ProfileCounts is a multiset of MIG profiles, e.g. {"3g.71gb": 1, "1g.18gb": 4}. mig-parted's
// config has no placement field, so a multiset per GPU is all a layout can ask for.
// +kubebuilder:validation:MaxProperties=8
// +kubebuilder:validation:XValidation:rule=`self.all(k, k.matches('^[1-7]g\\.[0-9]+gb(\\+me)?$'))`,message="keys must be MIG profile names such as 1g.18gb or 3g.71gb"
// +kubebuilder:validation:XValidation:rule="self.all(k, self[k] >= 0 && self[k] <= 7)",message="a GPU holds between 0 and 7 instances of a profile"
type ProfileCounts map[string]int32

// SharingMode is how one physical or MIG device is shared between pods.
// +kubebuilder:validation:Enum=None;TimeSlicing;MPS
type SharingMode string

const (
	// SharingNone gives each pod its device exclusively.
	SharingNone SharingMode = "None"
	// SharingTimeSlicing advertises each device as several replicas that take turns.
	SharingTimeSlicing SharingMode = "TimeSlicing"
	// SharingMPS advertises each full GPU as several replicas served by the CUDA MPS daemon.
	SharingMPS SharingMode = "MPS"
)

// SharingConfig is a node-wide sharing setting: the device plugin applies one to all GPUs of a node.
// +kubebuilder:validation:XValidation:rule="self.mode == 'None' ? !has(self.replicas) : has(self.replicas)",message="replicas is required for TimeSlicing and MPS and forbidden for None"
type SharingConfig struct {
	// Mode of sharing.
	Mode SharingMode `json:"mode"`
	// Replicas each device is advertised as.
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=256
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
}
