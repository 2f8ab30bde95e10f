//go:build linux && cgo && standin

package service

import (
	"context"
	"crypto/rand"
	"time"

	"github.com/onesided/rma/internal/procs"
	"github.com/onesided/rma/verbs"
)

// ListenStandIn and DialStandIn exist only in the build with the tag
// standin, whose device is package verbs's stand-in NIC: a Server and its
// Clients in one process, connected without the connection manager, for
// timing the software of every call without a device.

// ListenStandIn is a Server on the stand-in NIC that takes its connections
// from DialStandIn. It runs only the loop that answers the control
// messages: no connection requests come, and none is probed or timed out.
func ListenStandIn(cfg ServerConfig) (s *Server, err error) {
	procs.Ensure()
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	s = newServer(cfg)
	made := s
	defer func() {
		if err != nil {
			made.release()
			s = nil
		}
	}()
	if s.dev, err = verbs.Open(""); err != nil {
		return nil, err
	}
	if err = s.setUp(); err != nil {
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.controlLoop()
	return s, nil
}

// standInPath connects the stand-in's queue pairs.
var standInPath = verbs.Path{Port: 1, MTU: verbs.MTU4096, MaxRdAtomic: 16, Timeout: 14, RetryCount: 7, RNRRetry: 7, MinRNRTimer: 12,
	Access: verbs.AccessRemoteRead | verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic}

// DialStandIn connects a Client to s, a server of ListenStandIn, and
// authenticates as Dial does.
func DialStandIn(ctx context.Context, s *Server, cfg ClientConfig) (c *Client, err error) {
	procs.Ensure()
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	c = &Client{cfg: cfg, lockSlots: make(chan struct{}, maxLockWaits)}
	c.initLanes()
	made := c
	defer func() {
		if err != nil {
			made.release()
			c = nil
		}
	}()
	if c.dev, err = verbs.Open(""); err != nil {
		return nil, err
	}
	if err = c.setUp(); err != nil {
		return nil, err
	}
	if c.vqp, err = c.pd.CreateQP(verbs.QPConfig{SendCQ: c.vcq, RecvCQ: c.vcq, MaxSendWR: sendDepth, MaxRecvWR: clientRecv,
		MaxSendSGE: 1, MaxRecvSGE: 1}); err != nil {
		return nil, err
	}
	if err = c.useQP(); err != nil {
		return nil, err
	}
	sc := &sconn{deadline: time.Now().Add(s.cfg.AuthTimeout)}
	if sc.qp, err = s.pd.CreateQP(verbs.QPConfig{SendCQ: s.scq, RecvCQ: s.rcq, SRQ: s.srq, MaxSendWR: maxConnSends + 4,
		MaxSendSGE: 1, MaxInlineData: maxReply}); err != nil {
		return nil, err
	}
	sc.qpn, sc.out = sc.qp.Num(), sc.qp
	ce := verbs.Endpoint{QPN: c.vqp.Num(), LID: 1, MTU: verbs.MTU4096}
	se := verbs.Endpoint{QPN: sc.qpn, LID: 1, MTU: verbs.MTU4096}
	if err = c.vqp.Connect(&standInPath, ce, se); err == nil {
		err = sc.qp.Connect(&standInPath, se, ce)
	}
	if err == nil {
		_, err = rand.Read(sc.cNonce[:])
	}
	if err == nil {
		_, err = rand.Read(sc.sNonce[:])
	}
	if err != nil {
		sc.qp.Close()
		return nil, err
	}
	s.mu.Lock()
	s.serial = (s.serial + 1) &^ probeTag
	sc.serial = s.serial
	s.conns[sc.qpn] = sc
	s.mu.Unlock()
	if err = c.authenticate(ctx, &sc.cNonce, &sc.sNonce); err != nil {
		return nil, err
	}
	return c, nil
}
