package coll

import (
	"context"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

// The typed forms take Go slices; the datatype is datatype.Of[T] (so a
// []byte is datatype.Uint8, not MPI_BYTE).

// ReduceOf is Comm.Reduce on slices of T.
func ReduceOf[T datatype.Element](ctx context.Context, c *Comm, send, recv []T, o op.Op, root int) error {
	return c.Reduce(ctx, datatype.AsBytes(send), datatype.AsBytes(recv), datatype.Of[T](), o, root)
}

// AllreduceOf is Comm.Allreduce on slices of T.
func AllreduceOf[T datatype.Element](ctx context.Context, c *Comm, send, recv []T, o op.Op) error {
	return c.Allreduce(ctx, datatype.AsBytes(send), datatype.AsBytes(recv), datatype.Of[T](), o)
}

// ReduceScatterOf is Comm.ReduceScatter on slices of T.
func ReduceScatterOf[T datatype.Element](ctx context.Context, c *Comm, send, recv []T, counts []int, o op.Op) error {
	return c.ReduceScatter(ctx, datatype.AsBytes(send), datatype.AsBytes(recv), counts, datatype.Of[T](), o)
}

// ReduceScatterBlockOf is Comm.ReduceScatterBlock on slices of T.
func ReduceScatterBlockOf[T datatype.Element](ctx context.Context, c *Comm, send, recv []T, o op.Op) error {
	return c.ReduceScatterBlock(ctx, datatype.AsBytes(send), datatype.AsBytes(recv), datatype.Of[T](), o)
}

// ScanOf is Comm.Scan on slices of T.
func ScanOf[T datatype.Element](ctx context.Context, c *Comm, send, recv []T, o op.Op) error {
	return c.Scan(ctx, datatype.AsBytes(send), datatype.AsBytes(recv), datatype.Of[T](), o)
}

// ExscanOf is Comm.Exscan on slices of T.
func ExscanOf[T datatype.Element](ctx context.Context, c *Comm, send, recv []T, o op.Op) error {
	return c.Exscan(ctx, datatype.AsBytes(send), datatype.AsBytes(recv), datatype.Of[T](), o)
}
