// Package routetest is a toy kind of route, for tests that a kind is one
// folder: the server takes it as it takes its own kinds, with no edit.
//
// Its routes are ConfigMaps labelled draingate.dev/toy-route=true in the
// pod's namespace, one route per ConfigMap whose data has a key named
// after the pod: "in" while it routes to the pod, anything else once it
// took the pod out. A route so named is the pod's until the pod is gone,
// as every kind's is.
package routetest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"draingate.dev/draingate/internal/cli"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/route"
)

// Kind is the routes' kind.
const Kind = "toy"

// Label marks the ConfigMaps that are toy routes.
const Label = "draingate.dev/toy-route"

// Config is the toy kind as the server configures it, with one flag, its
// tail (--tail-toy).
type Config struct{ tail time.Duration }

// NewKind returns the kind with a one-second tail.
func NewKind() *Config { return &Config{tail: time.Second} }

// Name implements route.Kind.
func (c *Config) Name() string { return Kind }

// Flags implements route.Kind.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.DurationVar(&c.tail, "tail-toy", time.Second, "how long after a toy route took the pod out it may still send")
}

// Validate implements route.Kind.
func (c *Config) Validate() error { return cli.NotNegative("--tail-toy", c.tail) }

// Tails implements route.Kind.
func (c *Config) Tails() []route.Tail {
	return []route.Tail{{Name: Kind, Flag: "tail-toy", Value: c.tail}}
}

// Open implements route.Kind.
func (c *Config) Open(context.Context, route.Env) (route.Source, error) {
	return &Source{tail: c.tail}, nil
}

// Source observes toy routes.
type Source struct {
	tail   time.Duration
	cache  cache.Cache
	synced atomic.Bool
}

// Kind implements route.Source.
func (s *Source) Kind() string { return Kind }

// Transform implements route.Transformer: a toy route keeps its identity,
// labels and data.
func (s *Source) Transform(obj any) (any, bool) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return obj, false
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: cm.Name, Namespace: cm.Namespace, UID: cm.UID, ResourceVersion: cm.ResourceVersion, Labels: cm.Labels},
		Data:       cm.Data,
	}, true
}

// Start implements route.Source.
func (s *Source) Start(ctx context.Context, h route.Host) error {
	s.cache = h.Cache
	inf, err := h.Cache.GetInformer(ctx, &corev1.ConfigMap{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("ConfigMap informer: %w", err)
	}
	if _, err := inf.AddEventHandler(route.NamespaceHandler(h.Changed)); err != nil {
		return err
	}
	go func() {
		if toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			s.synced.Store(true)
			h.Changed("", "")
		}
	}()
	return nil
}

// Ready implements route.Source.
func (s *Source) Ready() error {
	if !s.synced.Load() {
		return errors.New("the toy routes' cache has not synced yet")
	}
	return nil
}

// Observe implements route.Source.
func (s *Source) Observe(ctx context.Context, pod *corev1.Pod, known []gate.Known, _ bool) ([]gate.Observation, error) {
	var list corev1.ConfigMapList
	if err := s.cache.List(ctx, &list, client.InNamespace(pod.Namespace), client.MatchingLabels{Label: "true"}); err != nil {
		return nil, err
	}
	word := map[string]string{}
	for _, k := range known {
		word[k.Name] = ""
	}
	for _, cm := range list.Items {
		if v, ok := cm.Data[pod.Name]; ok {
			word[cm.Namespace+"/"+cm.Name] = v
		}
	}
	var out []gate.Observation
	for _, name := range slices.Sorted(maps.Keys(word)) {
		o := gate.Observation{Kind: Kind, Name: name, Synced: true, Tail: s.tail, TailName: "toy", State: word[name]}
		if o.State == "in" {
			o.What = "the toy route lists the pod as in"
		} else {
			o.Out, o.What = true, "the toy route took the pod out"
		}
		out = append(out, o)
	}
	return out, nil
}

// AdmissionWait implements route.Source.
func (s *Source) AdmissionWait(context.Context, *corev1.Pod) (time.Duration, string, error) {
	return 0, "", nil
}
