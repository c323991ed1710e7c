package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/internal/rollout"
)

// CordonLedgerConfigMap is the ConfigMap, in gpupool's config namespace, where the manager
// records each cordon it holds (rollout.CordonRecord), one entry per node. Only the manager
// writes it (config/admission/cordon_ledger_policy.yaml), so it, not a node annotation anyone
// who may patch nodes can write, is what gpupool's uncordons rest on.
const CordonLedgerConfigMap = "gpupool-cordons"

// cordonLedger reads and writes the ledger. Reads go to the API server, not the cache: a
// cordon's record is written just before the cordon, and judging a node by a cache that has
// not seen the record yet would take gpupool's own cordon for someone else's.
type cordonLedger struct {
	client    client.Client
	reader    client.Reader
	namespace string
}

func (l cordonLedger) key() types.NamespacedName {
	return types.NamespacedName{Namespace: l.namespace, Name: CordonLedgerConfigMap}
}

// read returns the ledger's ConfigMap (nil when it does not exist yet) and its records.
func (l cordonLedger) read(ctx context.Context) (*corev1.ConfigMap, map[string]rollout.CordonRecord, error) {
	cm := &corev1.ConfigMap{}
	if err := l.reader.Get(ctx, l.key(), cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, map[string]rollout.CordonRecord{}, nil
		}
		return nil, nil, fmt.Errorf("reading gpupool's cordon ledger %s: %w", l.key(), err)
	}
	return cm, rollout.ParseLedger(cm.Data), nil
}

// get is node's record, nil when the ledger has none.
func (l cordonLedger) get(ctx context.Context, node string) (*rollout.CordonRecord, error) {
	_, recs, err := l.read(ctx)
	if err != nil {
		return nil, err
	}
	if rec, ok := recs[node]; ok {
		return &rec, nil
	}
	return nil, nil
}

// put records rec for node. The update carries the resourceVersion read, so two writers never
// lose each other's entries; a conflict is returned and the caller's reconcile retries.
func (l cordonLedger) put(ctx context.Context, node string, rec rollout.CordonRecord) error {
	value, err := rollout.EncodeRecord(rec)
	if err != nil {
		return err
	}
	cm, _, err := l.read(ctx)
	if err != nil {
		return err
	}
	if cm == nil {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: l.namespace, Name: CordonLedgerConfigMap,
			Labels: map[string]string{"app.kubernetes.io/name": "gpupool"}}, Data: map[string]string{node: value}}
		if err := l.client.Create(ctx, cm); err != nil {
			return fmt.Errorf("creating gpupool's cordon ledger %s: %w", l.key(), err)
		}
		return nil
	}
	if cm.Data[node] == value {
		return nil
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[node] = value
	if err := l.client.Update(ctx, cm); err != nil {
		return fmt.Errorf("recording plan %s's cordon of node %s in %s: %w", rec.Plan, node, l.key(), err)
	}
	return nil
}

// drop removes node's record when it names plan ("" drops whatever it names).
func (l cordonLedger) drop(ctx context.Context, node, plan string) error {
	cm, recs, err := l.read(ctx)
	if err != nil || cm == nil {
		return err
	}
	rec, ok := recs[node]
	_, raw := cm.Data[node]
	if !raw || (ok && plan != "" && rec.Plan != plan) {
		return nil
	}
	delete(cm.Data, node)
	if err := l.client.Update(ctx, cm); err != nil {
		return fmt.Errorf("removing node %s from gpupool's cordon ledger %s: %w", node, l.key(), err)
	}
	return nil
}
