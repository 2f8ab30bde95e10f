package verbs_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/onesided/rma/verbs"
)

// The RDMA devices of this host and what the first one can do. Without cgo
// (or outside Linux) Open fails with ErrNotSupported; on a host without
// RDMA, Devices returns an empty list.
func ExampleOpen() {
	devs, err := verbs.Devices() // reads sysfs: works without cgo
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range devs {
		fmt.Println(d.Name, d.Netdevs)
	}
	c, err := verbs.Open("") // the first device
	if errors.Is(err, verbs.ErrNotSupported) || errors.Is(err, verbs.ErrNoDevice) {
		fmt.Println("no RDMA here:", err)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	attr, err := c.QueryDevice()
	if err != nil {
		log.Fatal(err)
	}
	port, err := c.QueryPort(1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.Name(), attr.AtomicCap, port.State, port.LinkLayer, port.ActiveMTU)
}

// The GID a port uses by default: the RoCE v2 GID with an IPv4-mapped
// address, as rxe and RoCE NICs list it at index 1 (index 0 is the
// link-local RoCE v1 one).
func ExampleDefaultGIDIndex() {
	var linkLocal, v4 verbs.GID
	copy(linkLocal[:], []byte{0xfe, 0x80, 15: 1})
	copy(v4[10:], []byte{0xff, 0xff, 10, 99, 0, 1})
	table := []verbs.GIDEntry{
		{Index: 0, GID: linkLocal, Type: verbs.GIDTypeRoCEv1},
		{Index: 1, GID: v4, Type: verbs.GIDTypeRoCEv2},
	}
	i, err := verbs.DefaultGIDIndex(table)
	fmt.Println(i, err, table[i].GID, table[i].GID.IPv4(), table[i].Type)
	// Output: 1 <nil> 10.99.0.1 10.99.0.1 RoCE v2
}

// An endpoint travels between the ends of a connection as EndpointSize
// bytes.
func ExampleDecodeEndpoint() {
	var gid verbs.GID
	copy(gid[10:], []byte{0xff, 0xff, 10, 99, 0, 1})
	e := verbs.Endpoint{QPN: 0x11, PSN: 0xabcdef, GID: gid, MTU: verbs.MTU1024}
	b := e.AppendBinary(nil)
	back, err := verbs.DecodeEndpoint(b)
	fmt.Println(len(b) == verbs.EndpointSize, back == e, err, back.MTU)
	_, err = verbs.DecodeEndpoint(b[:10])
	fmt.Println(errors.Is(err, verbs.ErrInvalid))
	// Output:
	// true true <nil> 1024
	// true
}

// A failed work completion is a *CompletionError that errors.Is matches
// against the class of its status.
func ExampleWC_Err() {
	wc := verbs.WC{WRID: 7, Status: verbs.WCRetryExcErr}
	err := wc.Err()
	var ce *verbs.CompletionError
	fmt.Println(errors.Is(err, verbs.ErrPeerLost), errors.As(err, &ce) && ce.WRID == 7)
	fmt.Println(err)
	ok := verbs.WC{Status: verbs.WCSuccess}
	fmt.Println(ok.Err())
	// Output:
	// true true
	// verbs: work completion failed: transport retry counter exceeded (status 12, vendor error 0x0)
	// <nil>
}
