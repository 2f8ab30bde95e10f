package group_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/onesided/rma/group"
	"github.com/onesided/rma/verbs"
)

// Joining with explicit options instead of the environment: rank 0 listens
// on Addr, the others dial it, and all must hold the same secret.
func ExampleJoin() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, err := group.Join(ctx, group.Options{
		Rank:   0, // this process's rank, from 0
		Size:   4,
		Addr:   "10.0.0.1:7700",
		Secret: []byte("at least 16 random bytes, shared"),
		Device: "mlx5_0", // "" for RMA_DEVICE, else the first device
	})
	switch {
	case errors.Is(err, verbs.ErrNotSupported):
		log.Fatal("built without cgo, or no RDMA in this kernel: ", err)
	case errors.Is(err, group.ErrAuth):
		log.Fatal("a joiner's secret was missing or wrong: ", err)
	case err != nil:
		log.Fatal(err)
	}
	defer g.Close()
	fmt.Println(g.Rank(), g.Size(), g.Device(), g.PortAttr().ActiveMTU)
}

// Split makes subgroups (MPI_Comm_split): here the even and the odd ranks,
// each ranked in reverse order. Windows created on a subgroup involve only
// its ranks.
func ExampleGroup_Split() {
	ctx := context.Background()
	g, err := group.JoinEnv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	sub, err := g.Split(ctx, g.Rank()%2, -g.Rank())
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close() // before g's
	fmt.Println(g.Rank(), "is", sub.Rank(), "of", sub.Size(), "in subgroup", g.Rank()%2)
	if err := sub.Barrier(ctx); err != nil { // the subgroup's ranks only
		log.Fatal(err)
	}
}
