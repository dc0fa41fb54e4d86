// Package lease writes the Leases draingate's replicas share (a drain's
// record, what the drains taught): each replica writes the union of what
// the Lease holds and what it knows, so that writes in any order agree.
// Write is that one create-or-merge step, re-reading on a conflict.
package lease

import (
	"context"
	"errors"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcoordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// Tries bounds the conflicts one Write takes before it gives up: another
// replica writing the same Lease five times in a row is a storm the next
// write (the caller retries) may find over.
const Tries = 5

// Write writes the Lease name: build gets the Lease as it is (cur, nil
// when absent: it is then created) and returns the Lease to write, with
// what cur holds merged in, or nil when cur already holds everything (no
// write). On a conflict (another replica wrote or deleted it first) it
// reads the Lease again and builds anew. count, when set, is told each
// create or update and its error. It returns the Lease as it now stands.
func Write(ctx context.Context, leases typedcoordinationv1.LeaseInterface, name string, cur *coordinationv1.Lease,
	build func(cur *coordinationv1.Lease) (*coordinationv1.Lease, error), count func(op string, err error)) (*coordinationv1.Lease, error) {
	if count == nil {
		count = func(string, error) {}
	}
	for range Tries {
		le, err := build(cur)
		if err != nil || le == nil {
			return cur, err
		}
		var out *coordinationv1.Lease
		if cur == nil {
			out, err = leases.Create(ctx, le, metav1.CreateOptions{})
			count("create", err)
			if !apierrors.IsAlreadyExists(err) {
				return out, err
			}
		} else {
			out, err = leases.Update(ctx, le, metav1.UpdateOptions{})
			count("update", err)
			if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				return out, err
			}
		}
		// Another replica wrote (or deleted) first: merge with what is
		// there now.
		live, err := leases.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			cur = nil
		case err != nil:
			return nil, err
		default:
			cur = live
		}
	}
	return nil, errors.New("the Lease kept changing under five writes")
}
