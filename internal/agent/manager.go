package agent

import (
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/rightsize"
)

// ManagerOptions configure the agent's controller-runtime manager.
type ManagerOptions struct {
	// NodeName is this node, and the name of the GPUNode the agent publishes.
	NodeName string
	// Read reads the GPUs (NVMLReader in production).
	Read ReadFunc
	// Owners attributes devices to pods; nil publishes no pods.
	Owners OwnersFunc
	// Usage reads the memory in use per device, for status.usage; nil publishes no usage.
	Usage UsageFunc
	// UsageRule is the Publisher's: when a pod's usage summary is worth a write.
	UsageRule rightsize.PublishRule
	// RefreshPeriod between NVML reads and heartbeats; 0 means DefaultRefreshPeriod.
	RefreshPeriod time.Duration
	// Heartbeat and LeaseNamespace are the Publisher's: how the manager learns the agent is
	// alive, and where its Lease is when that is a Lease.
	Heartbeat      Heartbeat
	LeaseNamespace string
	// Clock for the publisher; nil means the real clock.
	Clock clock.WithTicker
	// HealthProbeBindAddress serves /healthz and /readyz; "0" disables them.
	HealthProbeBindAddress string
	// MetricsBindAddress serves controller-runtime's metrics over plain HTTP; "0" disables them.
	MetricsBindAddress string
}

// NewManager builds the agent's manager: a cache that holds only
// GPUNode/<NodeName> (a field selector on metadata.name, so the agent lists
// and watches one object however large the cluster), the Publisher reconciling
// it, and health checks. No leader election: every node runs its own agent,
// and the admission policy in config/agent lets each write only its own GPUNode.
func NewManager(cfg *rest.Config, o ManagerOptions) (ctrl.Manager, error) {
	if o.NodeName == "" {
		return nil, errors.New("gpupool agent: the node name is required (--node-name or $NODE_NAME)")
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering gpupool kinds: %w", err)
	}
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering Leases: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&v1alpha1.GPUNode{}: {Field: fields.OneTermEqualSelector("metadata.name", o.NodeName)},
		}},
		// The agent reads its one Lease straight from the API server once a period; a cache
		// would watch every Lease it may read, for nothing.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&coordinationv1.Lease{}}}},
		// Metrics are plain HTTP when enabled: authenticating scrapers through
		// the API server would need TokenReview and SubjectAccessReview rights,
		// which a DaemonSet on every GPU node should not hold.
		Metrics:                metricsserver.Options{BindAddress: o.MetricsBindAddress},
		HealthProbeBindAddress: o.HealthProbeBindAddress,
		// One controller per process in production; tests build several managers in one.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the agent's manager: %w", err)
	}
	p := &Publisher{
		Client:    mgr.GetClient(),
		NodeName:  o.NodeName,
		Read:      o.Read,
		Owners:    o.Owners,
		Usage:     o.Usage,
		UsageRule: o.UsageRule,
		Clock:     o.Clock,
		Period:    o.RefreshPeriod,

		Heartbeat:      o.Heartbeat,
		LeaseNamespace: o.LeaseNamespace,
	}
	if err := p.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("published", p.ReadyCheck); err != nil {
		return nil, fmt.Errorf("adding the readiness check: %w", err)
	}
	return mgr, nil
}
