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
// # Authentication
//
// Nothing (no window name, address or key) is revealed before the client
// proves it holds the shared secret: the connection request and the
// accept carry a nonce of each side; the client SENDs
// HMAC-SHA256(secret, "rma-service-client" || server nonce || client nonce),
// which the server checks in constant time, and the server answers with
// HMAC-SHA256(secret, "rma-service-server" || client nonce || server nonce),
// which the client checks, so each side knows the other holds the
// secret. A refused proof ends the connection, and Dial returns an error
// matching ErrAuth. Unauthenticated connections cost the server bounded
// resources: at most ServerConfig.MaxPending at once (the oldest dropped
// beyond), each for at most ServerConfig.AuthTimeout; a client beyond
// ServerConfig.MaxConns is rejected with ErrServerFull. The secret
// protects the control protocol only: RDMA traffic itself is neither
// encrypted nor authenticated by the NIC, and a memory key seen on the
// wire grants access to its window, as with any RDMA service.
//
// # Operations
//
// A Window does Put and Get (RDMA WRITE and READ through a registered
// staging buffer of the client), FetchAndOp on int64 and CompareAndSwap,
// routed by package atomics' default policy exactly as a group window's
// int64 calls are: SUM as a NIC fetch-and-add, NO_OP as a READ, REPLACE,
// MIN, MAX, PROD and the logical and bitwise ops as compare-and-swap
// loops with package op's kernels. All are atomic with each other (NIC
// atomics only, never against the server process's own CPU updates of the
// same words: rxe and most NICs are ATOMIC_HCA). Every call returns when
// it is complete at the server; Flush waits for calls abandoned when
// their context ended. Errors are errors.Is-able: win.ErrOutOfWindow,
// win.ErrAlignment, win.ErrInvalid, ErrUnknownWindow, ErrAuth,
// ErrServerFull, ErrProtocol, ErrClosed, and verbs.ErrPeerLost for a
// server that died, restarted, closed or dropped the client.
//
// # Not yet
//
// This first slice has no engine path: accumulates that need the server's
// CPU (other datatypes, user-defined ops, devices without atomics) return
// verbs.ErrNotSupported. There are no locks (MPI_Win_lock), no
// request-based forms (RPut, RGet, ...), no non-contiguous datatypes, no
// statistics, no byte-order probe of the NIC's atomics (the group
// windows' atomics.Probe), no unexposing a window while clients use it,
// and one call at a time per Client (open several Clients for
// parallelism). Listen needs a specific IP address, not 0.0.0.0.
package service
