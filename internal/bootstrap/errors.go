package bootstrap

import "errors"

// Sentinel errors. Errors returned by this package wrap one of them (and
// sometimes a context error as well) with a message saying what happened;
// test with errors.Is.
var (
	// ErrAuth: the shared secret did not match (rejected by rank 0, or
	// rank 0 failed to prove it knows the secret), or no secret was given.
	ErrAuth = errors.New("authentication failed")
	// ErrRankTaken: rank 0 already admitted another process with the claimed rank.
	ErrRankTaken = errors.New("rank already taken")
	// ErrConfig: an invalid Config or environment, or a claim (rank, size)
	// that does not fit the group rank 0 is forming.
	ErrConfig = errors.New("invalid configuration")
	// ErrProtocol: a malformed or unexpected message, or collectives called
	// in a different order on different ranks.
	ErrProtocol = errors.New("protocol error")
	// ErrClosed: the Conn was closed, a peer's connection was lost, or the
	// Conn is broken by an earlier failure.
	ErrClosed = errors.New("connection closed")
	// ErrTooLarge: a message would exceed MaxMessage.
	ErrTooLarge = errors.New("message too large")
)
