package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/agent"
	"github.com/gpupool/gpupool/internal/rightsize"
)

// Labels and annotations of a created node that the GPU Operator, GPU Feature Discovery and
// kwok would set.
const (
	// LabelGPUProduct is GPU Feature Discovery's product label.
	LabelGPUProduct = "nvidia.com/gpu.product"
	// LabelGPUPresent marks a node with an NVIDIA GPU.
	LabelGPUPresent    = "nvidia.com/gpu.present"
	labelGPUCount      = "nvidia.com/gpu.count"
	labelGPUMemory     = "nvidia.com/gpu.memory"
	labelMIGCapable    = "nvidia.com/mig.capable"
	labelMIGStrategy   = "nvidia.com/mig.strategy"
	annotationKwokNode = "kwok.x-k8s.io/node"
	annotationNodeTTL  = "node.alpha.kubernetes.io/ttl"
)

// Defaults of Options.
const (
	DefaultAgentRefreshPeriod = 5 * time.Second
	DefaultRetryPeriod        = 2 * time.Second
)

// Non-GPU capacity of a created node: a typical 8-GPU server.
var nodeBaseCapacity = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("128"),
	corev1.ResourceMemory: resource.MustParse("2Ti"),
	corev1.ResourcePods:   resource.MustParse("110"),
}

// Options configure a Sim.
type Options struct {
	// Nodes are the simulated nodes; names must be unique.
	Nodes []NodeSpec
	// ClusterPolicy names the GPU Operator's ClusterPolicy (nvidia.com/v1) the simulated
	// operands are rendered from; "" means the only one there is. Its status.namespace is
	// where mig-manager reads the ConfigMap named by spec.migManager.config.name (key
	// config.yaml) and the device plugin the one named by spec.devicePlugin.config.name, and
	// spec.mig.strategy is the device plugin's MIG strategy. Nothing on a node changes but
	// the device assignment until it exists.
	ClusterPolicy string
	// CreateNodes creates the Node objects that do not exist yet, labelled as GPU Feature
	// Discovery and the GPU Operator label GPU nodes and annotated for kwok. Existing nodes
	// are left as they are; mig-manager then applies their current mig.config at start.
	CreateNodes bool
	// SeedConfig adds the nodes' initial presets to the mig-parted ConfigMap the
	// ClusterPolicy names (creating it if needed), like the default config the GPU Operator
	// ships, so those names are valid entries. Entries already there are never changed. Run
	// waits up to a minute for the ClusterPolicy.
	SeedConfig bool
	// SeedDevicePluginConfig also creates the device plugin's ConfigMap with one exclusive
	// config under the ClusterPolicy's spec.devicePlugin.config.default when it does not exist
	// (an existing one is left alone), as a user who created it by hand would. NVIDIA's
	// operator creates no ConfigMap of a name its ClusterPolicy is given, so without this the
	// device plugin starts only once someone (gpupool's manager) creates it.
	SeedDevicePluginConfig bool
	// DisableAgents skips running gpupool's node agent for each node, for setups that run
	// agents themselves.
	DisableAgents bool
	// AgentRefreshPeriod is the agents' NVML read period; 0 means DefaultAgentRefreshPeriod.
	AgentRefreshPeriod time.Duration
	// AgentUsageRule is the agents' rightsize.PublishRule, when a pod's usage summary is
	// rewritten; the zero value is the defaults. A demo or test that recommends within minutes
	// shortens its MinWindow and MinSamples to the recommender's.
	AgentUsageRule rightsize.PublishRule
	// AgentLeaseNamespace, when set, makes the agents renew heartbeat Leases there, as the
	// agent DaemonSet does in its own namespace; empty keeps the observedTime heartbeat.
	AgentLeaseNamespace string
	// AgentUser, when set, is the user each node's agent acts as (a ServiceAccount's user name,
	// system:serviceaccount:<namespace>:<name>), with the node's name in the user extra
	// authentication.kubernetes.io/node-name, as a pod-bound token of the agent DaemonSet's
	// pod carries it: the agent admission policies and RBAC of config/agent then judge the
	// simulated agents as they judge real ones. Empty acts with gpusim's own credentials.
	AgentUser string
	// RetryPeriod is how soon pods that could not get devices are tried again; 0 means
	// DefaultRetryPeriod.
	RetryPeriod time.Duration
	// Clock measures apply delays; nil means the real clock.
	Clock clock.Clock
	// Logger for the simulator's manager; the zero value means controller-runtime's global one.
	Logger logr.Logger
}

// Sim is the simulated GPU Operator for a set of nodes, with one node agent per node.
type Sim struct {
	opts  Options
	nodes map[string]*Node
	order []*Node
	mgr   ctrl.Manager
	log   logr.Logger
}

// New builds the simulated nodes (mock NVML in their initial layouts) and the controllers;
// nothing talks to the API server until Run.
func New(cfg *rest.Config, o Options) (*Sim, error) {
	if len(o.Nodes) == 0 {
		return nil, errors.New("gpusim: no nodes to simulate")
	}
	o.AgentRefreshPeriod = cmp.Or(o.AgentRefreshPeriod, DefaultAgentRefreshPeriod)
	o.RetryPeriod = cmp.Or(o.RetryPeriod, DefaultRetryPeriod)
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	s := &Sim{opts: o, nodes: map[string]*Node{}}
	for _, spec := range o.Nodes {
		if _, dup := s.nodes[spec.Name]; dup {
			return nil, fmt.Errorf("gpusim: node %s listed twice", spec.Name)
		}
		n, err := NewNode(spec)
		if err != nil {
			return nil, err
		}
		n.now = o.Clock.Now
		s.nodes[spec.Name] = n
		s.order = append(s.order, n)
	}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("gpusim: building the scheme: %w", err)
	}
	mgrOpts := ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// The simulated operands read the ClusterPolicy from the cache; it is read as
		// unstructured, so that the GPU Operator's Go module is not needed.
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		// Tests run several simulators in one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	if o.Logger.GetSink() != nil {
		mgrOpts.Logger = o.Logger
	}
	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	if err != nil {
		return nil, fmt.Errorf("gpusim: creating the manager: %w", err)
	}
	s.mgr, s.log = mgr, mgr.GetLogger().WithName("gpusim")
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, podNodeNameField, func(o client.Object) []string {
		if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("gpusim: indexing pods by node: %w", err)
	}
	r := &reconciler{
		client:               mgr.GetClient(),
		apiReader:            mgr.GetAPIReader(),
		recorder:             mgr.GetEventRecorder("gpusim-mig-manager"),
		devicePluginRecorder: mgr.GetEventRecorder("gpusim-device-plugin"),
		nodes:                s.nodes,
		clusterPolicy:        o.ClusterPolicy,
		clock:                o.Clock,
		retryPeriod:          o.RetryPeriod,
		agents:               !o.DisableAgents,
	}
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("gpusim").
		Watches(&corev1.Node{}, r.nodeEvents()).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.nodeForPod)).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.nodesForConfigMap)).
		Watches(clusterPolicyObject(), handler.EnqueueRequestsFromMapFunc(r.nodesForClusterPolicy)).
		Watches(&resourcev1.ResourceClaim{}, handler.EnqueueRequestsFromMapFunc(r.nodesForClaim)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(r); err != nil {
		return nil, fmt.Errorf("gpusim: building the controller: %w", err)
	}
	if !o.DisableAgents {
		agentRecorder := mgr.GetEventRecorder("gpusim-agent")
		for _, n := range s.order {
			opts := agent.ManagerOptions{
				NodeName:               n.name,
				Read:                   agent.NVMLReader(n.NVML()),
				Owners:                 func(context.Context) (map[string][]v1alpha1.PodReference, error) { return n.Owners(), nil },
				Usage:                  n.ReadUsage,
				UsageRule:              o.AgentUsageRule,
				RefreshPeriod:          o.AgentRefreshPeriod,
				LeaseNamespace:         o.AgentLeaseNamespace,
				HealthProbeBindAddress: "0",
				MetricsBindAddress:     "0",
			}
			agentCfg := cfg
			if o.AgentUser != "" {
				agentCfg = rest.CopyConfig(cfg)
				agentCfg.Impersonate = rest.ImpersonationConfig{UserName: o.AgentUser,
					Extra: map[string][]string{"authentication.kubernetes.io/node-name": {n.name}}}
			}
			build := func() (ctrl.Manager, error) {
				am, err := agent.NewManager(agentCfg, opts)
				if err != nil {
					return nil, fmt.Errorf("gpusim: agent for node %s: %w", n.name, err)
				}
				return am, nil
			}
			first, err := build()
			if err != nil {
				return nil, err
			}
			runner := &agentRunner{node: n, build: build, first: first, client: mgr.GetClient(),
				recorder: agentRecorder, log: s.log.WithName("agent")}
			if err := mgr.Add(runner); err != nil {
				return nil, fmt.Errorf("gpusim: adding the agent for node %s: %w", n.name, err)
			}
		}
	}
	return s, nil
}

// Node returns the simulated node with the given name.
func (s *Sim) Node(name string) (*Node, bool) {
	n, ok := s.nodes[name]
	return n, ok
}

// Nodes returns the simulated nodes in the order they were given.
func (s *Sim) Nodes() []*Node { return slices.Clone(s.order) }

// Run creates the nodes and seeds the ConfigMap when asked, then runs the simulated operator
// and the agents until ctx ends.
func (s *Sim) Run(ctx context.Context) error {
	c := s.mgr.GetClient()
	reader := s.mgr.GetAPIReader()
	if s.opts.CreateNodes {
		for _, n := range s.order {
			if err := createNode(ctx, c, reader, n, s.log); err != nil {
				return err
			}
		}
	}
	if s.opts.SeedConfig || s.opts.SeedDevicePluginConfig {
		op, err := waitClusterPolicy(ctx, reader, s.opts.ClusterPolicy, time.Minute)
		if err != nil {
			return err
		}
		if s.opts.SeedConfig {
			if err := seedConfig(ctx, c, reader, op, s.order, s.log); err != nil {
				return err
			}
		}
		if s.opts.SeedDevicePluginConfig {
			if err := seedDevicePluginConfig(ctx, c, reader, op, s.log); err != nil {
				return err
			}
		}
	}
	s.log.Info("simulating GPU nodes", "nodes", len(s.order), "clusterPolicy", cmp.Or(s.opts.ClusterPolicy, "(the only one)"),
		"agents", !s.opts.DisableAgents)
	if err := s.mgr.Start(ctx); err != nil {
		return fmt.Errorf("gpusim: %w", err)
	}
	return nil
}

// clusterPolicyObject is an empty ClusterPolicy, to watch the kind.
func clusterPolicyObject() *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(ClusterPolicyGVK)
	return obj
}

// NodeObject is the Node a simulated node is created as: GPU Feature Discovery's labels, the
// GPU Operator's deploy labels, mig-manager's state for the initial layout, kwok's
// annotation; createNode adds the status.
func NodeObject(n *Node) *corev1.Node {
	cfg := n.model.NVML()
	labels := map[string]string{
		corev1.LabelHostname:              n.name,
		corev1.LabelOSStable:              "linux",
		corev1.LabelArchStable:            "amd64",
		"type":                            "kwok",
		LabelGPUProduct:                   n.model.ProductLabel,
		LabelGPUPresent:                   "true",
		labelGPUCount:                     strconv.Itoa(n.gpus),
		labelGPUMemory:                    strconv.FormatUint(cfg.MemoryMB, 10),
		labelMIGCapable:                   "true",
		labelMIGStrategy:                  migStrategyMixed,
		LabelMIGConfig:                    n.initialConfig,
		LabelMIGConfigState:               stateSuccess,
		labelDeployPrefix + "mig-manager": "true",
	}
	for _, k := range pausableOperands[:4] { // device plugin, GFD, DCGM exporter, DCGM; no NVSM
		labels[k] = "true"
	}
	if n.dra {
		// The DRA driver instead of the device plugin; its kubelet plugin's DaemonSet selects
		// the GPU Operator's label for third-party GPU clients, so mig-manager restarts it.
		labels[labelDevicePluginDeploy] = "false"
		labels[labelDeployClient] = "true"
	}
	if n.dynamicMIG {
		// The GPU Operator deploys no mig-manager beside the driver's DynamicMIG mode: the
		// driver carves. Nothing writes mig-manager's labels there.
		labels[labelDeployPrefix+"mig-manager"] = "false"
		delete(labels, LabelMIGConfig)
		delete(labels, LabelMIGConfigState)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        n.name,
		Labels:      labels,
		Annotations: map[string]string{annotationKwokNode: "fake", annotationNodeTTL: "0"},
	}}
}

func createNode(ctx context.Context, c client.Client, reader client.Reader, n *Node, log logr.Logger) error {
	err := reader.Get(ctx, types.NamespacedName{Name: n.name}, &corev1.Node{})
	if err == nil {
		log.Info("node exists; leaving its labels as they are", "node", n.name)
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("gpusim: looking up node %s: %w", n.name, err)
	}
	obj := NodeObject(n)
	gpus, err := n.GPUs()
	if err != nil {
		return err
	}
	// The API server keeps a Node's status on create. Setting it there, rather than by a
	// status patch afterwards, matters under kwok: its node-initialize stage fills in its own
	// cpu, memory and pods (1k, 1Ti, 1M) on a node that has none yet, and would win the race.
	capacity := nodeBaseCapacity.DeepCopy()
	// A new node has no device-plugin.config label: the plugin starts exclusive, and its
	// first reconcile corrects what the ClusterPolicy's settings change.
	if !n.dra { // where NVIDIA's DRA driver runs, no device plugin advertises anything
		devices, err := advertise(gpus, exclusiveRun)
		if err != nil {
			return fmt.Errorf("gpusim: node %s: %w", n.name, err)
		}
		maps.Copy(capacity, capacityOf(devices))
	}
	obj.Status.Capacity = capacity
	obj.Status.Allocatable = capacity.DeepCopy()
	if err := c.Create(ctx, obj, client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("gpusim: creating node %s: %w", n.name, err)
	}
	log.Info("created node", "node", n.name, "model", n.model.Name, "gpus", n.gpus, "config", n.initialConfig)
	return nil
}
