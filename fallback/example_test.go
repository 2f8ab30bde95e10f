package fallback_test

import (
	"errors"
	"fmt"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/op"
)

// The whole protocol in one process: the origin encodes requests, the
// target engine handles them against its window, the origin decodes the
// replies.
func Example() {
	// Target: window 3 is 4 float64.
	window := []float64{10, 20, 30, 40}
	target := fallback.NewTarget()
	target.AddWindow(3, datatype.AsBytes(window))
	const bufSize = 64 << 10 // the transport's buffer size
	sendBuf := make([]byte, 0, bufSize)
	replyBuf := make([]byte, 0, bufSize)

	// Origin: Accumulate(SUM) of two float64 at element 1.
	req := fallback.Request{Kind: fallback.KindAccumulate, Op: op.Sum, Window: 3, Tag: 1,
		Disp: 8, Type: datatype.Float64.Type(), Count: 2, Data: datatype.AsBytes([]float64{1, 2})}
	msg, err := fallback.AppendRequest(sendBuf[:0], &req)
	if err != nil {
		fmt.Println(err)
		return
	}
	reply := target.Handle(msg, replyBuf) // on the target's engine goroutine
	var rep fallback.Reply
	if err := fallback.DecodeReply(reply, &rep); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(rep.Tag, rep.Err(), window)

	// GetAccumulate(MAX) with a strided target datatype (elements 0 and 2),
	// split to fit the buffers; the old values come back per piece.
	every2nd, _ := datatype.Vector(2, 1, 2, datatype.Float64.Type())
	origin := []float64{15, 15}
	result := make([]float64, 2)
	get := fallback.Request{Kind: fallback.KindGetAccumulate, Op: op.Max, Window: 3, Tag: 2}
	if err := fallback.Check(get.Kind, get.Op, every2nd, 1, 0, int64(len(window)*8)); err != nil {
		fmt.Println(err)
		return
	}
	err = fallback.Split(0, every2nd, 1, bufSize, func(p fallback.Piece) error {
		msg, err := fallback.AppendPiece(sendBuf[:0], &get, p, datatype.AsBytes(origin), datatype.Float64.Type(), 2)
		if err != nil {
			return err
		}
		var rep fallback.Reply
		if err := fallback.DecodeReply(target.Handle(msg, replyBuf), &rep); err != nil {
			return err
		}
		if err := rep.Err(); err != nil {
			return err
		}
		return fallback.UnpackRange(datatype.AsBytes(result), datatype.Float64.Type(), 2, p.Elem, rep.Data)
	})
	fmt.Println(err, result, window)

	// A request the target refuses: outside the window.
	req.Disp, req.Tag = 24, 3
	msg, _ = fallback.AppendRequest(sendBuf[:0], &req)
	fallback.DecodeReply(target.Handle(msg, replyBuf), &rep)
	err = rep.Err()
	fmt.Println(rep.Tag, rep.Status, errors.Is(err, fallback.ErrOutOfWindow), errors.Is(err, fallback.ErrRemoteRejected))
	fmt.Println(target.Applied(), target.Rejected(), window) // two requests applied, one refused
	// Output:
	// 1 <nil> [10 21 32 40]
	// <nil> [10 32] [15 21 32 40]
	// 3 OutOfWindow true true
	// 2 1 [15 21 32 40]
}
