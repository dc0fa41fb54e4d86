package inject

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// FitLimitRanges fits the resources r of an added container (who: "installer",
// "watcher", for the notes) into the pod's
// namespace's LimitRanges: the API server's LimitRanger defaults the pod's
// containers before the webhook adds the installer, then refuses the pod
// if the installer is outside a Container range, and the pod's ReplicaSet
// stops creating pods. A request or limit under a range's min is raised to
// it (a resource the range bounds and r leaves out is set to its min, for
// both), one over its max is lowered to it, and a request never ends above
// its limit. The notes say what changed, for the log.
func FitLimitRanges(who string, r corev1.ResourceRequirements, ranges []corev1.LimitRange) (corev1.ResourceRequirements, []string) {
	out := *r.DeepCopy()
	if out.Requests == nil {
		out.Requests = corev1.ResourceList{}
	}
	if out.Limits == nil {
		out.Limits = corev1.ResourceList{}
	}
	sides := []struct {
		l    corev1.ResourceList
		kind string
	}{{out.Requests, "request"}, {out.Limits, "limit"}}
	var notes []string
	set := func(l corev1.ResourceList, kind string, name corev1.ResourceName, q resource.Quantity, why string) {
		old, had := l[name]
		l[name] = q.DeepCopy()
		if had {
			notes = append(notes, fmt.Sprintf("%s %s %s %s -> %s (%s)", who, name, kind, old.String(), q.String(), why))
		} else {
			notes = append(notes, fmt.Sprintf("%s %s %s %s (%s)", who, name, kind, q.String(), why))
		}
	}
	for _, lr := range ranges {
		for _, item := range lr.Spec.Limits {
			if item.Type != corev1.LimitTypeContainer {
				continue
			}
			why := "LimitRange " + lr.Name
			for name, min := range item.Min {
				for _, x := range sides {
					if q, ok := x.l[name]; !ok || q.Cmp(min) < 0 {
						set(x.l, x.kind, name, min, why+" min")
					}
				}
			}
			for name, max := range item.Max {
				for _, x := range sides {
					if q, ok := x.l[name]; ok && q.Cmp(max) > 0 {
						set(x.l, x.kind, name, max, why+" max")
					}
				}
				if _, ok := out.Limits[name]; !ok {
					// A max needs a limit to check against: the request's
					// (under the max by now), else the max.
					l := max
					if q, ok := out.Requests[name]; ok {
						l = q
					}
					set(out.Limits, "limit", name, l, why+" max")
				}
			}
		}
	}
	for name, q := range out.Requests {
		if l, ok := out.Limits[name]; ok && q.Cmp(l) > 0 {
			set(out.Requests, "request", name, l, "at most its limit")
		}
	}
	return out, notes
}
