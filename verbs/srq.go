package verbs

import (
	"fmt"
	"strconv"
	"unsafe"
)

// SRQ is a shared receive queue (C: struct ibv_srq): one pool of receive
// buffers for many QPs, so that a server's receive memory does not grow
// with its clients. A QP created with QPConfig.SRQ takes its receives from
// it; their completions arrive on that QP's receive CQ, and WC.QPNum says
// which QP received. Posting from several goroutines at once is safe (the
// provider locks).
type SRQ struct {
	p      unsafe.Pointer
	maxWR  int
	maxSGE int
	tr     tracked
}

// SRQConfig sizes a shared receive queue.
type SRQConfig struct {
	// MaxWR is how many receives the SRQ holds at most, MaxSGE how many
	// scatter/gather elements each may have (0 means 1).
	MaxWR  int
	MaxSGE int
}

// RecvWR is one receive work request of a batch (SRQ.PostRecvs): an id
// chosen by the caller and the registered memory to receive into. Its
// layout matches the C helper's struct, so a batch crosses to C in one call.
type RecvWR struct {
	// WRID is returned in the receive's completion (WC.WRID).
	WRID uint64
	// Local is the buffer; a message longer than Local.Len fails to land.
	Local Local
}

// maxRecvBatch is how many receives one ibv_post_srq_recv call takes.
const maxRecvBatch = 32

// CreateSRQ creates a shared receive queue on pd. The device may grant
// more than asked (MaxWR, MaxSGE report what it did).
func (pd *PD) CreateSRQ(cfg SRQConfig) (*SRQ, error) {
	if pd == nil || pd.p == nil {
		return nil, ErrClosed
	}
	if cfg.MaxSGE == 0 {
		cfg.MaxSGE = 1
	}
	if cfg.MaxWR < 1 || cfg.MaxSGE < 1 {
		return nil, fmt.Errorf("%w: SRQ of %d receives of %d elements", ErrInvalid, cfg.MaxWR, cfg.MaxSGE)
	}
	p, wr, sge, err := createSRQ(pd.p, cfg.MaxWR, cfg.MaxSGE)
	if err != nil {
		return nil, err
	}
	s := &SRQ{p: p, maxWR: wr, maxSGE: sge}
	s.tr.track("SRQ of " + strconv.Itoa(wr) + " receives")
	return s, nil
}

// MaxWR is how many receives the SRQ holds at most.
func (s *SRQ) MaxWR() int { return s.maxWR }

// MaxSGE is how many scatter/gather elements a receive may have.
func (s *SRQ) MaxSGE() int { return s.maxSGE }

// PostRecv posts one receive buffer. It does not allocate.
func (s *SRQ) PostRecv(wrID uint64, l Local) error {
	if s == nil || s.p == nil {
		return ErrClosed
	}
	return postSRQRecv(s.p, wrID, l)
}

// PostRecvs posts a batch of receives, in order, in one call to C per 32
// of them; it returns how many were posted (all of them, or those before
// the one that failed, with the error). It does not allocate.
func (s *SRQ) PostRecvs(wrs []RecvWR) (int, error) {
	if s == nil || s.p == nil {
		return 0, ErrClosed
	}
	if len(wrs) == 0 {
		return 0, nil
	}
	return postSRQRecvs(s.p, wrs)
}

// Close destroys the SRQ. The QPs attached to it must be closed first.
// Receives still posted are discarded, without completions.
func (s *SRQ) Close() error {
	if s == nil || s.p == nil {
		return ErrClosed
	}
	err := destroySRQ(s.p)
	s.p = nil
	s.tr.untrack()
	return err
}
