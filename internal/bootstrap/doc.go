// Package bootstrap forms a process group over TCP before any RDMA queue
// pair exists, and gives it the few collectives that window creation needs:
// AllGather (to exchange QP numbers, rkeys and addresses), Barrier and
// Broadcast.
//
// # The group
//
// A group has Size processes with ranks 0 to Size-1 (see Config and
// ConfigFromEnv, which reads RMA_* or the variables of mpirun, mpiexec and
// srun). Rank 0 listens on Config.Addr; every other rank dials it, retrying
// until its context ends, so start order does not matter. The result is a
// star: rank 0 holds one TCP connection per rank, the others one to rank 0.
// Join returns on every rank once all ranks have joined. Rank 0 handshakes
// with incoming connections concurrently, each bounded by
// Config.HandshakeTimeout (10 s by default); a refused or silent
// connection is counted (Refused), logged (Config.Logf) and closed, and
// rank 0 keeps waiting for the legitimate ranks.
//
// # Handshake
//
// Every message is a frame: magic 0xB5, version 1, type, uint32 length,
// payload, with payloads bounded by MaxMessage and, in the handshake, of
// fixed sizes checked before reading. With S the shared secret and
// MAC(label) = HMAC-SHA256(S, label || size || rank || Nj || N0):
//
//	joiner -> 0: HELLO     size, claimed rank, nonce Nj (32 random bytes)
//	0 -> joiner: CHALLENGE nonce N0 (32 fresh random bytes)
//	joiner -> 0: PROOF     MAC("rma-bootstrap-v1 joiner proof")
//	0 -> joiner: REFUSE    code (wrong secret, bad size, bad rank, rank taken), or
//	             ACCEPT    MAC("rma-bootstrap-v1 rank0 proof")
//	0 -> joiner: READY     once every rank has been accepted
//
// Rank 0 checks the proof (hmac.Equal) before looking at the claim, so an
// unauthenticated peer learns nothing but a nonce and a refusal. The
// joiner sends nothing but its claim and proof until it has checked rank
// 0's MAC. Both MACs bind the size, the rank and both nonces, with a label
// per direction; a replayed handshake fails because N0 is fresh. The
// handshake authenticates the peers; it does not encrypt or protect the
// stream afterwards, so an on-path attacker can read or alter it (run the
// bootstrap on a trusted network), and one who records a handshake can
// test guesses of a weak secret offline (use 16 or more random bytes).
//
// # Collectives
//
// A collective goes through rank 0: each rank sends its contribution with
// a header (operation, root, sequence number), rank 0 checks that every
// rank called the same collective as the same call (else ErrProtocol on
// all ranks), then sends the result to all. Collectives must be called in
// the same order on every rank, as in MPI.
//
// # Concurrency
//
// A Conn is not safe for concurrent collectives: call them from one
// goroutine at a time (a second concurrent call fails with ErrProtocol
// without disturbing the first). Rank, Size and Refused are safe at any
// time, and Close may be called from any goroutine, concurrently with a
// collective, which it interrupts.
//
// # Errors and failure
//
// Errors wrap the sentinels ErrAuth, ErrRankTaken, ErrConfig, ErrProtocol,
// ErrClosed and ErrTooLarge (test with errors.Is), and the context's error
// when a call is cut short by its context. Every call honours its context:
// its deadline becomes the socket deadline, and cancellation interrupts
// blocked I/O at once. Nothing blocks forever as long as the peers' TCP
// connections report failure; a dropped peer gives ErrClosed.
//
// A collective that fails for any reason other than a bad argument or an
// already-ended context (peer lost, mismatched calls, context ended
// mid-call) leaves the Conn broken: later calls return ErrClosed, and the
// group should be torn down. On failure, rank 0 sends the others an abort
// carrying the reason, and the others close their connection, so every
// rank learns of the failure promptly instead of waiting for its deadline.
package bootstrap
