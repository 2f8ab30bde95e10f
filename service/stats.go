package service

import (
	"net/netip"
	"sync/atomic"
)

// ServerStats are a server's counters since Listen, as Server.Stats
// returns them. NIC operations (RDMA READ and WRITE, atomics) do not
// involve the server's CPU and are not seen by it: the clients count them
// (ClientStats).
type ServerStats struct {
	Conns          int    // connections now, authenticated or not
	Pending        int    // connections now that have not authenticated (handshakes included)
	Requests       uint64 // connection requests, authenticated later or not
	Connects       uint64 // connections that authenticated
	Disconnects    uint64 // authenticated connections gone (closed, died or dropped)
	AuthFailures   uint64 // connections whose proof was refused
	AuthTimeouts   uint64 // connections that had not proved the secret by AuthTimeout
	Evicted        uint64 // connections not authenticated yet that a request beyond MaxPending dropped
	Refused        uint64 // connection requests refused: MaxConns reached
	LockRecoveries uint64 // locks given up because their holder went away
	Held           uint64 // sessions held for a client whose connection failed on the transport
	Resumed        uint64 // sessions resumed on a new connection
	// Windows has the counters of each exposed window, by name.
	Windows map[string]WindowStats
	// Connections has the counters of each connection now held.
	Connections []ConnStats
}

// WindowStats are the counters of one exposed window.
type WindowStats struct {
	Opens          uint64 // Open calls that found it
	Denied         uint64 // Open calls that ServerConfig.Authorize refused
	EngineOps      uint64 // accumulates applied by the server's engine
	EngineBytes    uint64 // bytes of window those updated
	EngineRejects  uint64 // accumulates refused (bad op, datatype or range)
	LockGrants     uint64 // locks granted (shared and exclusive)
	LockWaits      uint64 // lock requests that had to wait
	LockRecoveries uint64 // locks given up because their holder went away
}

// ConnStats are the counters of one connection at the server.
type ConnStats struct {
	Peer          netip.AddrPort // the client's address
	Name          string         // the client's ClientConfig.Name
	Authenticated bool           // it proved it holds the secret
	Requests      uint64         // messages after authentication (opens, engine ops, locks)
	EngineOps     uint64         // accumulates the engine applied for it
	EngineRejects uint64         // accumulates the engine refused it
	LockWaits     uint64         // its lock requests that had to wait
	LocksHeld     int            // locks it holds now
}

// Stats returns the server's counters. It is safe at any time; its cost
// grows with the connections (it copies each one's counters).
func (s *Server) Stats() ServerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Conns = len(s.conns)
	st.Pending = len(s.unauth)
	st.Windows = make(map[string]WindowStats, len(s.windows))
	for name, w := range s.windows {
		st.Windows[name] = w.stats
	}
	st.Connections = make([]ConnStats, 0, len(s.conns))
	for _, c := range s.conns {
		cs := c.stats
		cs.Authenticated = c.authed
		cs.Name = c.info.Name
		for _, lt := range c.locks {
			if lt&lockWaiting == 0 {
				cs.LocksHeld++
			}
		}
		st.Connections = append(st.Connections, cs)
	}
	return st
}

// ClientStats are a client's counters since Dial, by route: what went to
// the server's NIC alone (atomics, READ, WRITE) and what its engine
// applied.
type ClientStats struct {
	NICAtomics    uint64 // fetch-and-adds and compare-and-swaps posted (a CAS loop may post several; Dial's byte-order probe is one)
	Reads         uint64 // RDMA READs posted (Get, NO_OP, CAS loops' first reads, Dial's byte-order probe)
	Writes        uint64 // RDMA WRITEs posted (Put)
	BytesRead     uint64 // bytes those READs moved
	BytesWritten  uint64 // bytes those WRITEs moved
	EngineOps     uint64 // accumulate messages the server's engine applied
	EngineRejects uint64 // accumulate messages it refused
	Locks         uint64 // locks taken (Lock, LockAll)
	Resumes       uint64 // sessions resumed on a new connection (package documentation, Sessions)
}

// counters are a client's ClientStats, updated as it goes.
type counters struct {
	nicAtomics, reads, writes, bytesRead, bytesWritten atomic.Uint64
	engineOps, engineRejects, locks, resumes           atomic.Uint64
}

// Stats returns the client's counters. It does not wait for calls in
// progress.
func (c *Client) Stats() ClientStats {
	k := &c.stats
	return ClientStats{NICAtomics: k.nicAtomics.Load(), Reads: k.reads.Load(), Writes: k.writes.Load(),
		BytesRead: k.bytesRead.Load(), BytesWritten: k.bytesWritten.Load(),
		EngineOps: k.engineOps.Load(), EngineRejects: k.engineRejects.Load(), Locks: k.locks.Load(),
		Resumes: k.resumes.Load()}
}
