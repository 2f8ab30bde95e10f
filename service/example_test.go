package service_test

import (
	"context"
	"fmt"

	"github.com/onesided/rma/op"
	"github.com/onesided/rma/service"
	"github.com/onesided/rma/verbs"
)

// A server exposes a counter; a client adds to it with a NIC
// fetch-and-add. (It needs an RDMA device, so it only compiles here.)
func Example() {
	ctx := context.Background()
	secret := []byte("a secret of 32 random bytes, or more")

	mem, err := verbs.Alloc(4096)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer verbs.Free(mem)
	srv, err := service.Listen(ctx, "10.0.0.1:7471", service.ServerConfig{Secret: secret})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	if err := srv.Expose("counter", mem); err != nil {
		fmt.Println(err)
		return
	}

	cl, err := service.Dial(ctx, "10.0.0.1:7471", service.ClientConfig{Secret: secret})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()
	w, err := cl.Open(ctx, "counter")
	if err != nil {
		fmt.Println(err)
		return
	}
	old, err := w.FetchAndOp(ctx, 1, 0, op.Sum)
	fmt.Println(old, err)
}
