package main

import (
	"context"
	"fmt"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// watched is a list already read, to be watched from its resourceVersion on so that no change
// between the read and the watch is missed, with the options it was read with.
type watched struct {
	list client.ObjectList
	opts []client.ListOption
}

// follow watches targets and calls onEvent for each change, as `kubectl get --watch` does,
// until the context ends, a watch ends (--request-timeout, or the API server closed it: the
// command then exits 0, as kubectl's does) or onEvent fails.
func follow(ctx context.Context, kc client.WithWatch, targets []watched, onEvent func(watch.Event) error) error {
	ctx, cancel := context.WithCancel(ctx)
	events := make(chan watch.Event)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for _, t := range targets {
		opts := append(slices.Clone(t.opts), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: t.list.GetResourceVersion()}})
		w, err := kc.Watch(ctx, t.list, opts...)
		if err != nil {
			return failure(fmt.Errorf("watching: %w", err))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Stop()
			// One watch ending ends them all: the picture would be half live.
			defer cancel()
			for {
				select {
				case ev, ok := <-w.ResultChan():
					if !ok {
						return
					}
					select {
					case events <- ev:
					case <-ctx.Done():
						return
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-events:
			switch ev.Type {
			case watch.Bookmark:
				continue
			case watch.Error:
				return failure(fmt.Errorf("watching: %w", apierrors.FromObject(ev.Object)))
			}
			if err := onEvent(ev); err != nil {
				return err
			}
		}
	}
}
