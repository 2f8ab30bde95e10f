package bootstrap

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
)

// MAC labels: one per direction, so that neither side's MAC can be
// reflected as the other's.
const (
	labelJoiner = "rma-bootstrap-v1 joiner proof"
	labelRank0  = "rma-bootstrap-v1 rank0 proof"
)

// mac is HMAC-SHA256(secret, label || size u32 || rank u32 || joiner nonce || rank 0 nonce).
func mac(secret []byte, label string, size, rank uint32, nj, n0 []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	var b [8]byte
	binary.BigEndian.PutUint32(b[:], size)
	binary.BigEndian.PutUint32(b[4:], rank)
	m.Write(b[:])
	m.Write(nj)
	m.Write(n0)
	return m.Sum(nil)
}

func nonce() ([nonceLen]byte, error) {
	var n [nonceLen]byte
	_, err := rand.Read(n[:])
	return n, err
}

// joinHandshake runs the joiner's side over rw: claim, challenge, proof,
// then rank 0's verdict, whose MAC is checked before returning nil. The
// caller sets deadlines; cfg is not validated here.
func joinHandshake(rw io.ReadWriter, cfg Config) error {
	nj, err := nonce()
	if err != nil {
		return err
	}
	size, rank := uint32(cfg.Size), uint32(cfg.Rank)
	if err := writeFrame(rw, msgHello, hello{size: size, rank: rank, nonce: nj}.encode()); err != nil {
		return err
	}
	n0, err := readFixed(rw, msgChallenge, challengeLen)
	if err != nil {
		return err
	}
	if err := writeFrame(rw, msgProof, mac(cfg.Secret, labelJoiner, size, rank, nj[:], n0)); err != nil {
		return err
	}
	typ, p, err := readFrame(rw, acceptLen)
	if err != nil {
		return err
	}
	switch {
	case typ == msgRefuse && len(p) == refuseLen:
		what, sentinel := codeErr(p[0])
		return fmt.Errorf("%w: refused by rank 0 (claimed rank %d of %d): %s", sentinel, rank, size, what)
	case typ == msgAccept && len(p) == acceptLen:
		if !hmac.Equal(p, mac(cfg.Secret, labelRank0, size, rank, nj[:], n0)) {
			return fmt.Errorf("%w: the peer at the rank 0 address did not prove knowledge of the shared secret", ErrAuth)
		}
		return nil
	}
	return fmt.Errorf("%w: unexpected message type %d of %d bytes in the handshake", ErrProtocol, typ, len(p))
}

// refusal is an error for which rank 0 has sent a refusal (and counted it).
type refusal struct{ error }

func (r refusal) Unwrap() error { return r.error }

// handshake runs rank 0's side over rw and returns the admitted rank,
// whose slot it has taken. It checks the proof before anything else, so
// an unauthenticated peer learns nothing but a fresh nonce and a refusal.
func (l *Listener) handshake(rw io.ReadWriter) (int, error) {
	p, err := readFixed(rw, msgHello, helloLen)
	if err != nil {
		return 0, err
	}
	h, err := decodeHello(p)
	if err != nil {
		return 0, err
	}
	n0, err := nonce()
	if err != nil {
		return 0, err
	}
	if err := writeFrame(rw, msgChallenge, n0[:]); err != nil {
		return 0, err
	}
	proof, err := readFixed(rw, msgProof, proofLen)
	if err != nil {
		return 0, err
	}
	refuse := func(code byte, format string, args ...any) (int, error) {
		l.refused.Add(1)                        // before the peer can see the refusal
		writeFrame(rw, msgRefuse, []byte{code}) // best effort: the peer is refused either way
		_, sentinel := codeErr(code)
		return 0, refusal{fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))}
	}
	if !hmac.Equal(proof, mac(l.cfg.Secret, labelJoiner, h.size, h.rank, h.nonce[:], n0[:])) {
		return refuse(codeAuth, "wrong shared secret (claimed rank %d of %d)", h.rank, h.size)
	}
	if h.size != uint32(l.cfg.Size) {
		return refuse(codeBadSize, "claimed size %d, the group has size %d", h.size, l.cfg.Size)
	}
	if h.rank == 0 || h.rank >= h.size {
		return refuse(codeBadRank, "claimed rank %d, joiners have ranks 1 to %d", h.rank, l.cfg.Size-1)
	}
	rank := int(h.rank)
	if !l.claim(rank) {
		return refuse(codeRankTaken, "rank %d already taken", rank)
	}
	if err := writeFrame(rw, msgAccept, mac(l.cfg.Secret, labelRank0, h.size, h.rank, h.nonce[:], n0[:])); err != nil {
		l.release(rank)
		return 0, err
	}
	return rank, nil
}
