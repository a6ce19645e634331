package collkit

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/nccl"
)

// Elastic communicators over NCCL (Options.Transport "nccl"). The members
// of a generation make its NCCL communicator from the previous
// generation's when every one of them can, with NCCL's own calls, which
// reuse the previous communicator's bootstrap instead of a new unique id:
//
//   - after Shrink, ncclCommShrink (NCCL 2.27 and newer) when the members
//     are some of the previous ones: each survivor excludes the ranks that
//     are gone, with NCCL_SHRINK_ABORT when any survivor's communicator had
//     a failed or unfinished call (nccl.Config.KeepForShrink keeps it
//     rather than abort it, until then). NCCL refuses to shrink a
//     communicator with an asynchronous error, whatever the flag
//     (ncclCommEnsureReady), so this path serves the failures NCCL does not
//     report: a revoke, a rank left out as too slow, a collective that hung
//     until Options.Timeout (a death over NVLink). A death NCCL reports
//     (ncclRemoteError, over a network) leaves the error, and the
//     communicator is made anew;
//   - after Grow, ncclCommGrow (NCCL 2.29 and newer) when the members are
//     all the previous ones, in their order, then the joiners, and no
//     previous communicator failed: the previous rank 0, the new rank 0
//     too, is NCCL's coordinator; it makes the grow id
//     (ncclCommGetUniqueId), and the joiners join with it at the ranks Grow
//     gives them. ncclCommGrow keeps every old rank's number and cannot
//     leave one out, so a Grow whose agreement left a slow member out makes
//     the communicator anew.
//
// Otherwise (an NCCL without those calls, a previous communicator that was
// aborted or has an asynchronous error, the same members again, which
// ncclCommShrink cannot express)
// each member closes its previous NCCL communicator if it failed (an
// abort, as before Shrink existed) and makes the new one through the
// store with ncclCommInitRank, as every other transport does. The choice
// is one for all: every previous member publishes what its communicator
// can do, the new rank 0 decides and publishes the plan, and the others
// read it (keys collkit/nccl/... among the generation's keys c/). A plan
// that fails, because a member died meanwhile, fails the connection as any
// other: the next round makes the communicator anew.
//
// Neither path has run on a GPU yet: both are tested against the fake
// library of transport/nccl's tests (comm_elastic_nccl_test.go).
//
// The hybrid (IntraNode "nccl") makes its node communicators anew in every
// generation: which ranks share a node changes with the new layout, so an
// old node communicator is not in general a superset of a new one.

// ncclAbility is what a previous member's NCCL communicator can do.
type ncclAbility struct {
	Shrink bool `json:"shrink,omitempty"`
	Abort  bool `json:"abort,omitempty"` // a call failed or was left unfinished
	Grow   bool `json:"grow,omitempty"`
}

// ncclPlan is how the members make a generation's NCCL communicator.
type ncclPlan struct {
	How   string `json:"how"`             // "shrink", "grow" or "new"
	Abort bool   `json:"abort,omitempty"` // shrink with NCCL_SHRINK_ABORT
	ID    []byte `json:"id,omitempty"`    // grow: the coordinator's ncclCommGetUniqueId
}

const (
	ncclAbilityKey = "collkit/nccl/can/"
	ncclPlanKey    = "collkit/nccl/plan"
)

// fromNCCL returns this member's NCCL transport of generation el.gen made
// from the previous generation's (from's), or nil when it is to be made
// anew; then it closes from's NCCL communicator first if it failed. Only
// the first try of a generation (first) plans; later tries make it anew.
func (el elastic) fromNCCL(ctx context.Context, store bootstrap.Store, env bootstrap.Env, opts Options, self int, from *Comm, first bool) (transport.Transport, error) {
	var prev *nccl.Transport
	var old []int // the previous generation's members
	if from != nil && from.el != nil {
		prev, _ = from.base.(*nccl.Transport)
		old = from.el.ids
	}
	plan := ncclPlan{How: "new"}
	if first {
		var err error
		if plan, err = el.planNCCL(ctx, store, self, prev, old); err != nil {
			return nil, err
		}
	}
	switch plan.How {
	case "shrink":
		if prev == nil {
			return nil, fmt.Errorf("the plan is to shrink the NCCL communicator, but this process has none")
		}
		var exclude []int
		for r, id := range old {
			if !slices.Contains(el.ids, id) {
				exclude = append(exclude, r)
			}
		}
		t, err := prev.Shrink(ctx, store, exclude, plan.Abort)
		if err != nil {
			return nil, fmt.Errorf("ncclCommShrink over %s: %w", procNames(el.ids), err)
		}
		return t, nil
	case "grow":
		var id nccl.GrowID
		if len(plan.ID) != len(id) {
			return nil, fmt.Errorf("the plan to grow the NCCL communicator has an id of %d bytes, want %d", len(plan.ID), len(id))
		}
		copy(id[:], plan.ID)
		if prev != nil {
			var coordinator *nccl.GrowID
			if env.Rank == 0 {
				coordinator = &id
			}
			t, err := prev.Grow(ctx, store, env.Size, coordinator)
			if err != nil {
				return nil, fmt.Errorf("ncclCommGrow to %s: %w", procNames(el.ids), err)
			}
			return t, nil
		}
		cfg, err := ncclConfig(env, opts)
		if err != nil {
			return nil, err
		}
		t, err := nccl.New(cfg)
		if err == nil {
			if err = t.ConnectGrow(ctx, store, id); err != nil {
				t.Close()
			}
		}
		if err != nil {
			return nil, fmt.Errorf("joining with ncclCommGrow as rank %d of %d: %w", env.Rank, env.Size, err)
		}
		return t, nil
	}
	if prev != nil && prev.Failed() {
		prev.Close() // abort it before making the next one: its kernels may still run
	}
	return nil, nil
}

// planNCCL publishes what prev (this process's previous NCCL communicator,
// or nil) can do and returns the plan the new rank 0 decides for all.
func (el elastic) planNCCL(ctx context.Context, store bootstrap.Store, self int, prev *nccl.Transport, old []int) (ncclPlan, error) {
	if prev != nil {
		shrink, abort := prev.CanShrink()
		note, _ := json.Marshal(ncclAbility{Shrink: shrink, Abort: abort, Grow: prev.CanGrow()})
		if err := store.Set(ctx, ncclAbilityKey+strconv.Itoa(self), note); err != nil {
			return ncclPlan{}, fmt.Errorf("publishing what its NCCL communicator can do: %w", err)
		}
	}
	if self == el.ids[0] {
		plan, err := el.decideNCCL(ctx, store, prev, old)
		if err != nil {
			return ncclPlan{}, err
		}
		b, _ := json.Marshal(plan)
		if err := store.Set(ctx, ncclPlanKey, b); err != nil {
			return ncclPlan{}, fmt.Errorf("publishing how to make the NCCL communicator: %w", err)
		}
		el.log().Info("elastic: nccl plan", "generation", el.gen, "plan", plan.How, "abort", plan.Abort)
		return plan, nil
	}
	b, err := store.Get(ctx, ncclPlanKey)
	if err != nil {
		return ncclPlan{}, fmt.Errorf("waiting for %s to say how to make the NCCL communicator: %w", procName(el.ids[0]), err)
	}
	var plan ncclPlan
	if err := json.Unmarshal(b, &plan); err != nil {
		return ncclPlan{}, fmt.Errorf("the store holds an NCCL plan that is not one: %q", b)
	}
	return plan, nil
}

// decideNCCL is the new rank 0's plan, from what every member that was in
// the previous generation published. prev is its own previous NCCL
// communicator (nil for a joiner: then none of the members has one).
func (el elastic) decideNCCL(ctx context.Context, store bootstrap.Store, prev *nccl.Transport, old []int) (ncclPlan, error) {
	if prev == nil {
		return ncclPlan{How: "new"}, nil
	}
	var stayed []int
	for _, id := range el.ids {
		if slices.Contains(old, id) {
			stayed = append(stayed, id)
		}
	}
	shrink, abort, grow := true, false, true
	for _, id := range stayed {
		b, err := store.Get(ctx, ncclAbilityKey+strconv.Itoa(id))
		if err != nil {
			return ncclPlan{}, fmt.Errorf("waiting for %s to say what its NCCL communicator can do: %w", procName(id), err)
		}
		var a ncclAbility
		if err := json.Unmarshal(b, &a); err != nil {
			return ncclPlan{}, fmt.Errorf("the store holds what %s's NCCL communicator can do in a form that is not one: %q", procName(id), b)
		}
		shrink, abort, grow = shrink && a.Shrink, abort || a.Abort, grow && a.Grow
	}
	joined := len(el.ids) - len(stayed)
	switch {
	case joined == 0 && len(stayed) < len(old) && shrink:
		return ncclPlan{How: "shrink", Abort: abort}, nil
	case joined > 0 && slices.Equal(el.ids[:len(stayed)], old) && grow:
		id, err := prev.GrowID()
		if err != nil {
			el.log().Info("elastic: no NCCL grow id; making the communicator anew", "err", err)
			break
		}
		return ncclPlan{How: "grow", ID: id[:]}, nil
	}
	return ncclPlan{How: "new"}, nil
}
