// Package grouphooks gives the packages of this module what a group
// (package group) keeps for them and exports to nobody else: its active-
// message engine, its window ids and its ranks in the RDMA connections
// (fabric.OfGroup gives the connections themselves). Package group sets
// the hooks when it is initialised; their g is a *group.Group.
package grouphooks

import "github.com/onesided/rma/fallback"

var (
	// Engine returns the group's active-message target (which applies
	// other ranks' accumulates, and their Puts and Gets of many small
	// blocks when they pack them) and client (which tracks this rank's).
	Engine func(g any) (*fallback.Target, *fallback.Client)
	// NextWindowID hands out window ids; windows are created collectively
	// in the same order on every rank, so every rank gives a window the
	// same id, and a subgroup's ids differ from every other group's.
	NextWindowID func(g any) uint32
	// FabricRanks returns, for every rank of g in rank order, the rank of
	// the same process in the group Join formed, whose RDMA connections
	// every subgroup shares (nil when the two rankings are the same).
	FabricRanks func(g any) []int
)

// FabricRank is FabricRanks for rank r.
func FabricRank(g any, r int) int {
	if w := FabricRanks(g); w != nil {
		return w[r]
	}
	return r
}
