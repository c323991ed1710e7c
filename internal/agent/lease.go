package agent

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/api/v1alpha1"
)

// leaseDurationPeriods is how many refresh periods the Lease says it lasts. The manager judges
// freshness by its own report-age limit, not by this; it tells a human reading the Lease.
const leaseDurationPeriods = 4

// renewLease renews the Lease that tells the manager this node's agent is alive, creating it
// when missing. This is the agent's heartbeat, as the kubelet's is a Lease in kube-node-lease
// (KEP-589): a small object renewed every period instead of the whole GPUNode status, so that
// a live node whose GPUs did not change costs the API server, etcd and every watcher of
// GPUNodes nothing. The Lease last written is kept, so that a renewal is one update, as the
// kubelet's is; only when someone else changed or deleted it is it read again.
func (p *Publisher) renewLease(ctx context.Context, now time.Time) error {
	key := types.NamespacedName{Namespace: p.LeaseNamespace, Name: p.NodeName}
	renew := metav1.NewMicroTime(now)
	if p.lease != nil {
		lease := p.lease.DeepCopy()
		lease.Spec.RenewTime = &renew
		err := p.Client.Update(ctx, lease, client.FieldOwner(FieldManager))
		switch {
		case err == nil:
			p.lease = lease
			return nil
		case !apierrors.IsConflict(err) && !apierrors.IsNotFound(err):
			return fmt.Errorf("renewing the agent's Lease %s: %w", key, err)
		}
		p.lease = nil // changed or deleted by someone else: read it again below
	}
	lease := &coordinationv1.Lease{}
	err := p.Client.Get(ctx, key, lease)
	switch {
	case apierrors.IsNotFound(err):
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
				Labels: map[string]string{v1alpha1.LabelAgentLease: "true"}},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(v1alpha1.AgentLeaseHolder(p.NodeName)),
				LeaseDurationSeconds: ptr.To(int32(leaseDurationPeriods * p.Period / time.Second)),
				AcquireTime:          &renew,
				RenewTime:            &renew,
			},
		}
		if err := p.Client.Create(ctx, lease, client.FieldOwner(FieldManager)); err != nil {
			return fmt.Errorf("creating the agent's Lease %s: %w", key, err)
		}
		p.lease = lease
		return nil
	case err != nil:
		return fmt.Errorf("reading the agent's Lease %s: %w", key, err)
	}
	if h := ptr.Deref(lease.Spec.HolderIdentity, ""); h != v1alpha1.AgentLeaseHolder(p.NodeName) {
		return fmt.Errorf("the Lease %s is held by %q, not by this node's agent (%q): delete it so that the agent can create its own",
			key, h, v1alpha1.AgentLeaseHolder(p.NodeName))
	}
	lease.Spec.RenewTime = &renew
	if lease.Labels[v1alpha1.LabelAgentLease] != "true" {
		if lease.Labels == nil {
			lease.Labels = map[string]string{}
		}
		lease.Labels[v1alpha1.LabelAgentLease] = "true"
	}
	if err := p.Client.Update(ctx, lease, client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("renewing the agent's Lease %s: %w", key, err)
	}
	p.lease = lease
	return nil
}
