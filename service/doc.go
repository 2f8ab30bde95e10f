// Package service is the service mode of the library: a server process
// exposes memory under names, and clients that come and go (dial, crash,
// restart) read, write and update it with one-sided RDMA, without the
// server's code taking part in the data path. It is the front door for
// programs that are not one MPI-style group fixed at start-up (for that,
// see group and win).
//
//	srv, err := service.Listen(ctx, "10.0.0.1:7471", service.ServerConfig{Secret: secret})
//	cl, err := service.Dial(ctx, "server.example:7471", service.ClientConfig{Secret: secret})
//
// # Connections
//
// Connections are reliable-connected QPs made with the RDMA connection
// manager (rdma_cm) by IP address and port, on InfiniBand and RoCE alike.
// The server keeps its receive memory independent of its clients: one
// shared receive queue of small buffers, one receive CQ and one send CQ
// for all connections (the send CQ is sized for ServerConfig.MaxConns when
// the server starts). Three server goroutines take connection requests,
// watch connections, and answer control messages; they sleep on their
// channels when idle.
//
// # Authentication and keys
//
// Nothing (no window name, address or key) is revealed before the client
// proves it holds the shared secret: the connection request and the
// accept carry a nonce of each side; the client SENDs an HMAC-SHA256
// under the secret of both nonces and of what its message says (its name,
// ClientConfig.Name, and the 8 bytes it offers the server's probes),
// which the server checks in constant time, and the server answers with
// one of its own, which the client checks, so each side knows the other
// holds the secret. A refused proof ends the connection, and Dial returns
// an error matching ErrAuth.
//
// Window memory is out of reach of every QP until its client has proved
// the secret: the windows' memory regions carry no remote rights at all.
// A client that opens a window gets a key of its own, a type 2 memory
// window bound to its QP (the device must have them, see
// verbs.DeviceAttr.MemWindowType2) with the rights ServerConfig.Authorize
// gives it (Access: read, write, atomic). The key works on that
// connection only, and dies with it: when the client closes, dies or is
// dropped, and when the secret it proved is retired (Server.SetSecret).
// The engine checks the same rights for the accumulates it applies.
//
// What the secret does not protect: RDMA traffic is neither encrypted nor
// authenticated by the NIC. Someone who can read the wire sees the data,
// the addresses and the keys; someone who can also inject packets with
// the right QP numbers and sequence numbers can use a live client's
// connection, as with any RDMA service. Use it on networks you trust.
//
// Unauthenticated connections cost the server bounded resources: at most
// ServerConfig.MaxPending at once, counting handshakes under way (beyond,
// the oldest is dropped), each for at most ServerConfig.AuthTimeout; each
// handshake runs apart, so a stalled one holds up nobody else. A client
// beyond ServerConfig.MaxConns is rejected with ErrServerFull.
// ServerStats counts requests, refusals, failed proofs, authentication
// timeouts and evictions.
//
// # Operations
//
// A Window is an rma.Window, as a group window's view of one rank is
// (win.Window.Target), so code written against rma.Window, and rma's typed
// helpers (rma.FetchAndOp, rma.PutSlice, ...), run on both. It does Put
// and Get (RDMA WRITE and READ through a registered staging buffer of the
// client) and the accumulate family: Accumulate, GetAccumulate,
// FetchAndOp and CompareAndSwap, with every predefined op
// and the user-defined ops made with op.Register (registered in the
// server too). They are routed by package atomics' default policy exactly
// as a group window's calls are: on 64-bit integers SUM is a NIC
// fetch-and-add, NO_OP a READ, REPLACE, MIN, MAX, PROD, the logical and
// bitwise ops and user-defined ops compare-and-swap loops (a user-defined
// op then runs in the client, see op.Register); every other datatype, and
// every op when either side's device has no atomics, goes to the server's
// engine, which applies it in its control goroutine with the target code
// of a group rank's engine (package fallback: its wire format, checks and
// refusals). So the calls on one element with one datatype are atomic with
// each other, from any client (never against the server process's own CPU
// updates of the same words). PutTo, GetTo, AccumulateTo and
// GetAccumulateTo take derived datatypes on origin and result (rma.Buffer)
// and target (rma.Layout), as a group window's do. An engine
// message carries up to 472 bytes of origin (192 bytes of old values for
// the fetching forms); longer calls and layouts are split as package
// fallback splits a group window's, each element still updated atomically, and a client that
// dies leaves each message applied whole or not at all. Every call returns
// when it is complete at the server; Flush waits for calls abandoned when
// their context ended.
//
// # Locks
//
// Lock and Unlock (shared or exclusive) and LockAll/UnlockAll are
// MPI_Win_lock's mutual exclusion between clients, kept by the server:
// requests are granted in their order of arrival, consecutive shared ones
// together. Calls do not need a lock (a client may always access a window,
// as under MPI_Win_lock_all with MPI_MODE_NOCHECK). A Lock whose context
// ends is withdrawn. When a client's connection goes, the server frees
// its locks and withdraws its requests: a process that dies is
// disconnected by its kernel at once (in the tests, the next client got
// the lock about 20 ms after the holder's SIGKILL); a host that dies is
// found by the server's probes of the clients that hold or wait for a
// lock (ServerConfig.ProbeInterval, an RDMA READ of 8 bytes the client
// registered for them, which its NIC answers without its CPU) after the
// transport's retries and ServerConfig.ResumeWithin (see Sessions). The lock
// words are the server's own memory, never in a window, so no client can
// corrupt them.
//
// Errors are errors.Is-able: ErrDenied (an open Authorize refused, or a
// call the window's Access does not cover), rma.ErrOutOfWindow, rma.ErrAlignment,
// rma.ErrInvalid, rma.ErrEpoch (lock misuse), op.ErrOpDatatype and
// op.ErrOpUse (an op the call or the datatype does not allow),
// ErrUnknownWindow, the engine's refusals as package fallback reports them
// (fallback.ErrRemoteRejected and the reason's sentinel, such as
// fallback.ErrUnknownOp for a user-defined op the server has not
// registered), ErrAuth, ErrServerFull,
// ErrProtocol, ErrClosed (also for a call of another goroutine that Close
// interrupted), verbs.ErrPeerLost for a server that died, restarted,
// closed or dropped the client, and verbs.ErrOutcomeUnknown for a NIC
// atomic whose connection failed before its completion (see Sessions).
//
// # Sessions
//
// A connection that fails on the transport (a lossy or cut wire exhausts
// the retries of either side) is not the end of its client: the client
// connects again and resumes its session, and its calls wait meanwhile,
// then carry on. The server holds the session for
// ServerConfig.ResumeWithin (default 3 s): the locks the client holds or
// waits for stay its own, and no other client can take them. The failed
// connection's QP is destroyed at the server, and with it the keys bound
// to it, so nothing the client sent on it lands after the session moved.
// What was in flight is carried on as MPI's rules allow: a Put or Get is
// done again (its data is the same), a call the server's engine handles
// is sent again and applied at most once (the server answers one it
// already applied with the reply it recorded), and a NIC atomic, whose
// effect the client cannot learn, is not sent again: its call fails with
// an error matching verbs.ErrOutcomeUnknown, the target may or may not
// have applied it. A session not resumed in time (the server is gone, or
// the wire stayed cut) fails the client with verbs.ErrPeerLost, and its
// locks are given up at the server. A client that closes, or whose process
// dies, gives its locks up at once: its kernel disconnects, which ends the
// session. The protocol is described in the source (proto.go, resume.go).
//
// # Statistics
//
// Server.Stats and Client.Stats return counters an operator wants: for the
// server, connects, disconnects, refused and failed authentications,
// lock recoveries, and per window and per connection the engine's
// operations, bytes and rejects, lock grants and waits; for a client, its
// operations by route (NIC atomics, READ, WRITE, engine). The server
// cannot count the NIC's operations: only clients see those. Publish them
// with expvar (expvar.Func(func() any { return srv.Stats() })), as
// examples/sequencer does.
//
// # Requests
//
// RPut, RGet, RAccumulate and RGetAccumulate start an operation and return
// its request (MPI_Rput, MPI_Rget, MPI_Raccumulate, MPI_Rget_accumulate);
// Wait or Test complete it, and a Wait whose context ends abandons it, as
// rma.Request says for both modes. While a request's operation is in
// flight the client's next call (Unlock and Flush included, as MPI
// requires of them) completes it first, so a request overlaps the
// caller's own work, not the client's other calls. Many goroutines
// sharing a client have its small calls in flight at once (see Dial).
//
// # One CPU
//
// Listen and Dial raise GOMAXPROCS from 1 to 2 unless the GOMAXPROCS
// environment variable set it, as group.Join does: with one P, the Go
// runtime takes the P from a goroutine whose C call (a post, a poll)
// outlasts 20 us and hands it to another thread, which on a one-CPU
// machine costs context switches on every call (package group, "One CPU").
//
// # Not yet
//
// A device without type 2 memory windows cannot serve (Listen fails with
// verbs.ErrNotSupported): there is no protection domain per client in
// their place. There is no unexposing a window while clients use it, and only the calls that
// are one work request or one small engine message run many at once on
// one Client (see Dial; the others run one at a time, a Lock waiting for
// the server excepted). Listen needs a specific IP address, not 0.0.0.0.
package service
