// Command barecache is the scale benchmark's baseline: a manager-shaped process that caches
// every kind gpupool's manager watches, with controller-runtime's defaults (whole objects,
// every namespace), and does nothing else. It logs "synced" once its caches are full.
package main

import (
	"flag"
	"fmt"
	"os"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "barecache: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	flag.Parse() // controller-runtime's --kubeconfig
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0"})
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	for _, obj := range []client.Object{&corev1.Node{}, &corev1.Pod{}, &v1alpha1.GPUNode{}, &policyv1.PodDisruptionBudget{},
		&coordinationv1.Lease{}, &v1alpha1.GPUPoolPolicy{}, &v1alpha1.RepartitionPlan{}} {
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			return fmt.Errorf("informer for %T: %w", obj, err)
		}
	}
	errs := make(chan error, 1)
	go func() { errs <- mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return fmt.Errorf("caches did not sync: %w", <-errs)
	}
	fmt.Println("synced")
	return <-errs
}
