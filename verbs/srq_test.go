package verbs

import (
	"context"
	"errors"
	"testing"
	"unsafe"
)

// Misuse is refused before anything reaches C.
func TestSRQMisuse(t *testing.T) {
	if _, err := (*PD)(nil).CreateSRQ(SRQConfig{MaxWR: 1}); !errors.Is(err, ErrClosed) {
		t.Errorf("SRQ on a nil PD: %v", err)
	}
	if _, err := (&PD{}).CreateSRQ(SRQConfig{MaxWR: 1}); !errors.Is(err, ErrClosed) {
		t.Errorf("SRQ on a closed PD: %v", err)
	}
	var x byte
	pd := &PD{p: unsafe.Pointer(&x)}
	for _, cfg := range []SRQConfig{{}, {MaxWR: -1}, {MaxWR: 4, MaxSGE: -1}} {
		if _, err := pd.CreateSRQ(cfg); !errors.Is(err, ErrInvalid) {
			t.Errorf("SRQ %+v: %v, want ErrInvalid", cfg, err)
		}
	}
	var s *SRQ
	if err := s.PostRecv(1, Local{}); !errors.Is(err, ErrClosed) {
		t.Errorf("post to a nil SRQ: %v", err)
	}
	if n, err := (&SRQ{}).PostRecvs([]RecvWR{{}}); n != 0 || !errors.Is(err, ErrClosed) {
		t.Errorf("batch to a closed SRQ: %d, %v", n, err)
	}
	if n, err := (&SRQ{p: unsafe.Pointer(&x)}).PostRecvs(nil); n != 0 || err != nil {
		t.Errorf("empty batch: %d, %v", n, err)
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("close a nil SRQ: %v", err)
	}
	// A QP on a closed SRQ is refused.
	if _, err := pd.CreateQP(QPConfig{SendCQ: &CQ{p: pd.p}, RecvCQ: &CQ{p: pd.p}, SRQ: &SRQ{}}); !errors.Is(err, ErrClosed) {
		t.Errorf("QP on a closed SRQ: %v", err)
	}
}

// CMID misuse is refused before anything reaches C.
func TestCMIDMisuse(t *testing.T) {
	var nilID *CMID
	if err := nilID.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("close a nil id: %v", err)
	}
	if _, err := nilID.Event(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("event of a nil id: %v", err)
	}
	if got := nilID.LocalAddr(); got.IsValid() {
		t.Errorf("local address of a nil id: %v", got)
	}
	ch := fakeChannel()
	id := fakeID(ch)
	if _, err := id.CreateQP(nil, QPConfig{}); !errors.Is(err, ErrClosed) {
		t.Errorf("QP on a nil PD: %v", err)
	}
	var x byte
	pd := &PD{p: unsafe.Pointer(&x)}
	if _, err := id.CreateQP(pd, QPConfig{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("QP without CQs: %v", err)
	}
	if err := id.SetAckTimeout(0); !errors.Is(err, ErrInvalid) {
		t.Errorf("ACK timeout exponent 0: %v", err)
	}
	if err := id.Reject(make([]byte, MaxRejectPrivateData+1)); !errors.Is(err, ErrInvalid) {
		t.Errorf("reject with %d bytes: %v", MaxRejectPrivateData+1, err)
	}
	if _, err := id.Connect(context.Background(), ConnParam{PrivateData: make([]byte, MaxConnectPrivateData+1)}); !errors.Is(err, ErrInvalid) {
		t.Errorf("connect with %d bytes: %v", MaxConnectPrivateData+1, err)
	}
	if _, err := id.Accept(context.Background(), ConnParam{PrivateData: make([]byte, MaxAcceptPrivateData+1)}); !errors.Is(err, ErrInvalid) {
		t.Errorf("accept with %d bytes: %v", MaxAcceptPrivateData+1, err)
	}
	if err := (*QP)(nil).SetMinRNRTimer(12); !errors.Is(err, ErrClosed) {
		t.Errorf("RNR timer of a nil QP: %v", err)
	}
	if err := (&QP{p: pd.p}).SetMinRNRTimer(32); !errors.Is(err, ErrInvalid) {
		t.Errorf("RNR timer code 32: %v", err)
	}
	if err := (*EventChannel)(nil).Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("close a nil channel: %v", err)
	}
	if _, err := (*EventChannel)(nil).CreateID(); !errors.Is(err, ErrClosed) {
		t.Errorf("id on a nil channel: %v", err)
	}
}
