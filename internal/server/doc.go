// Package server is `draingate serve`: it watches the cluster (Pods,
// EndpointSlices and, when the CRD is installed, the AWS Load Balancer
// Controller's TargetGroupBindings) and, for the pods whose preStop agent
// asks, the health of their AWS target groups; it turns what it sees into
// gate.RouteObservations, lets gate.Decide judge them, and answers the wait
// API (internal/waitapi) with the verdict.
//
// What it remembers per terminating pod, and nothing else:
//
//   - when it first saw the pod terminating (the verdict's Waited);
//   - every route the pod ever had while the server watched it: the
//     Services whose EndpointSlices listed it (one route per Service, named
//     "namespace/service"), and the `ip` target groups whose
//     TargetGroupBinding's Service listed it (named by ARN). A route stays a
//     route after its owner drops the pod: that is how it closes;
//   - per route, when the owner was first seen to have taken the pod out
//     (gate.RouteObservation.OutSince).
//
// None of it is persisted. A restarted server sees terminating pods afresh:
// terminating endpoints stay listed in their slices until the pod is gone,
// so it finds the same routes, and every tail starts again from its first
// observation. A restart can lengthen a wait, never shorten one.
//
// AWS calls: a target group is polled only while a pod that has a route
// through it is waiting (its agent asked in the last Options.Linger), one
// poll serving every such pod, under the poller's one rate budget (see
// internal/aws/elbv2). The type of each group's load balancer is read once
// with DescribeTargetGroups, from the same budget; until it is known, the
// group takes the NLB tail, the longer one.
//
// Services are not cached: an EndpointSlice names its Service in the
// kubernetes.io/service-name label, which is all the gate needs, and a
// TargetGroupBinding's serviceRef is matched against that label.
package server
