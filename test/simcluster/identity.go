package simcluster

import (
	"context"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/internal/testenv"
)

// ManagerServiceAccount is the manager's identity, as config/base installs it: the admission
// policies of config/admission name it, and its RBAC is config/rbac/role.yaml.
const ManagerServiceAccount = "gpupool-manager"

// ManagerUser is the user name the API server gives the manager's ServiceAccount.
const ManagerUser = "system:serviceaccount:" + Namespace + ":" + ManagerServiceAccount

// installTrustBoundary installs what a real install has around the manager: the admission
// policies of config/admission, the manager's ServiceAccount bound to the roles that
// controller-gen writes into config/rbac/role.yaml (and nothing more), and a kubeconfig with
// which the manager acts as that ServiceAccount. So the simulated cluster runs the manager with
// its real rights, and a missing permission or an admission refusal shows up here first.
func (c *Cluster) installTrustBoundary(ctx context.Context) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	objs, err := testenv.KustomizationObjects(filepath.Join(root, "config", "admission"))
	if err != nil {
		return err
	}
	// The approval policies too (config/default installs both): approving a plan, or
	// loosening a policy, needs the approve verb.
	approval, err := testenv.KustomizationObjects(filepath.Join(root, "config", "approval"))
	if err != nil {
		return err
	}
	objs = append(objs, approval...)
	// The agent's ServiceAccount, RBAC and admission policies (gpusim's agents act as it);
	// its namespace is made above and its DaemonSet is gpusim's in-process agents.
	agentObjs, err := testenv.KustomizationObjects(filepath.Join(root, "config", "agent"))
	if err != nil {
		return err
	}
	for _, o := range agentObjs {
		if k := o.GetKind(); k != "Namespace" && k != "DaemonSet" {
			objs = append(objs, o)
		}
	}
	roles, err := testenv.ReadObjects(filepath.Join(root, "config", "rbac", "role.yaml"))
	if err != nil {
		return err
	}
	// The Lease the replicas elect a leader with is in the manager's namespace, as
	// config/default puts it (StartManagerReplicas); the single manager does not use it.
	election, err := testenv.ReadObjects(filepath.Join(root, "config", "rbac", "leader_election_role.yaml"))
	if err != nil {
		return err
	}
	for _, o := range election {
		o.SetNamespace(Namespace)
	}
	for _, o := range append(append(objs, roles...), election...) {
		if err := c.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	subject := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: ManagerServiceAccount, Namespace: Namespace}
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: ManagerServiceAccount, Namespace: Namespace}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gpupool-manager-rolebinding"}, Subjects: []rbacv1.Subject{subject},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "manager-role"}},
		// The Role for gpupool's ConfigMaps is in the GPU Operator's namespace.
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gpupool-manager-rolebinding", Namespace: OperatorNamespace},
			Subjects: []rbacv1.Subject{subject}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "manager-role"}},
		// The Role for the agents' heartbeat Leases is in the agents' namespace.
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gpupool-manager-rolebinding", Namespace: AgentNamespace},
			Subjects: []rbacv1.Subject{subject}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "manager-role"}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gpupool-leader-election-rolebinding", Namespace: Namespace},
			Subjects: []rbacv1.Subject{subject}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "leader-election-role"}},
	} {
		if err := c.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		return fmt.Errorf("reading %s: %w", c.Kubeconfig, err)
	}
	for _, auth := range cfg.AuthInfos {
		// The admin certificate may impersonate; the manager then holds only its own rights.
		auth.Impersonate = ManagerUser
	}
	c.ManagerKubeconfig = filepath.Join(filepath.Dir(c.Kubeconfig), "manager.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, c.ManagerKubeconfig); err != nil {
		return fmt.Errorf("writing %s: %w", c.ManagerKubeconfig, err)
	}
	return nil
}
