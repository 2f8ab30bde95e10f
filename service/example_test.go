package service_test

import (
	"context"
	"fmt"
	"time"

	"github.com/onesided/rma"
	"github.com/onesided/rma/datatype"
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
	old, err := rma.FetchAndOp(ctx, w, int64(1), 0, op.Sum)
	fmt.Println(old, err)
}

// A client updates a record under the window's exclusive lock, and adds
// to float64 totals through the server's engine. (It needs an RDMA device
// and a server, so it only compiles here.)
func ExampleWindow_Lock() {
	ctx := context.Background()
	cl, err := service.Dial(ctx, "10.0.0.1:7471", service.ClientConfig{Secret: []byte("a secret of 32 random bytes, or more")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()
	w, err := cl.Open(ctx, "records")
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := w.Lock(ctx, rma.LockExclusive); err != nil {
		fmt.Println(err)
		return
	}
	rec := make([]byte, 64)
	err = w.Get(ctx, rec, 0)
	if err == nil {
		rec[0]++
		err = w.Put(ctx, rec, 0)
	}
	if uerr := w.Unlock(ctx); err == nil {
		err = uerr
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	totals := datatype.AsBytes([]float64{1.5, 2.5})
	fmt.Println(w.Accumulate(ctx, totals, datatype.Float64, 64, op.Sum))
}

// A client starts a read of a large block, does other work while it is in
// flight, then waits for it. (It needs an RDMA device and a server, so it
// only compiles here.)
func ExampleWindow_RGet() {
	ctx := context.Background()
	cl, err := service.Dial(ctx, "10.0.0.1:7471", service.ClientConfig{Secret: []byte("a secret of 32 random bytes, or more")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()
	w, err := cl.Open(ctx, "records")
	if err != nil {
		fmt.Println(err)
		return
	}
	block := make([]byte, 1<<16)
	req, err := w.RGet(ctx, block, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	// ... work that does not touch block ...
	if err := req.Wait(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(block[0])
}

// A server lets clients named "dashboard" only read its windows, and
// later rotates its secret, still taking the old one for a minute while
// clients move to the new one. (It needs an RDMA device, so it only
// compiles here.)
func ExampleServerConfig_authorize() {
	ctx := context.Background()
	cfg := service.ServerConfig{
		Secret: []byte("a secret of 32 random bytes, or more"),
		Authorize: func(c service.ClientInfo, window string) service.Access {
			if c.Name == "dashboard" {
				return service.AccessRead
			}
			return service.AccessAll
		},
	}
	srv, err := service.Listen(ctx, "10.0.0.1:7471", cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	// ... srv.Expose(...), clients come and go ...
	if err := srv.SetSecret([]byte("the next secret, as random and as long"), time.Minute); err != nil {
		fmt.Println(err)
	}
}
