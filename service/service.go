package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/onesided/rma/internal/errs"
	"github.com/onesided/rma/verbs"
)

// Errors of this package. Match them with errors.Is. Calls on a window
// also return rma.ErrOutOfWindow, rma.ErrAlignment and rma.ErrInvalid for
// bad arguments, and errors matching verbs.ErrPeerLost when the server is
// gone (dead, restarted, closed or unreachable).
var (
	// ErrAuth: the two sides do not hold the same secret. A client gets it
	// when the server refused its proof or proved nothing itself.
	ErrAuth = errors.New("service: authentication failed")
	// ErrServerFull: the server has ServerConfig.MaxConns connections.
	ErrServerFull = errors.New("service: server has as many connections as it takes")
	// ErrUnknownWindow: the server exposes no window of that name, or no
	// longer has the window (fallback.ErrUnknownWindow matches it too).
	ErrUnknownWindow = errs.ErrUnknownWindow
	// ErrProtocol: the peer does not speak this protocol (or this version
	// of it), or sent a malformed message.
	ErrProtocol = errors.New("service: protocol error")
	// ErrClosed: the server or client was closed (it is verbs.ErrClosed).
	ErrClosed = verbs.ErrClosed
	// ErrExists: Expose was given a name already exposed.
	ErrExists = errors.New("service: a window of that name is already exposed")
	// ErrDenied: the server does not let this client open the window
	// (ServerConfig.Authorize), or the call needs an Access the window was
	// not opened with (Window.Access).
	ErrDenied = errors.New("service: access denied")
)

// Access is what a client may do to a window: the rights of the memory
// key the server hands it for that window (and the checks of its engine).
type Access uint8

const (
	// AccessRead: Get, and the fetching calls with op.NoOp.
	AccessRead Access = 1 << iota
	// AccessWrite: Put.
	AccessWrite
	// AccessAtomic: the accumulate family. Its calls return old values,
	// so the key also reads.
	AccessAtomic
	// AccessAll is every right.
	AccessAll = AccessRead | AccessWrite | AccessAtomic
)

// String names the rights, as "read|write|atomic".
func (a Access) String() string {
	if a == 0 {
		return "none"
	}
	var b []byte
	for _, f := range []struct {
		a Access
		s string
	}{{AccessRead, "read"}, {AccessWrite, "write"}, {AccessAtomic, "atomic"}} {
		if a&f.a != 0 {
			if len(b) > 0 {
				b = append(b, '|')
			}
			b = append(b, f.s...)
		}
	}
	if a&^AccessAll != 0 {
		b = fmt.Appendf(b, "|%#x", uint8(a&^AccessAll))
	}
	return string(b)
}

// ClientInfo describes an authenticated client to ServerConfig.Authorize.
type ClientInfo struct {
	// Addr is the client's address.
	Addr netip.AddrPort
	// Name is ClientConfig.Name. The client's proof covers it, so it
	// cannot be changed on the wire, but any holder of the secret may
	// claim any name: clients that do not trust each other need servers
	// (or secrets) of their own.
	Name string
}

// ServerConfig configures Listen. Only Secret is required.
type ServerConfig struct {
	// Secret is shared with the clients, which must prove they hold it
	// before they learn anything. Use 32 random bytes or more. See
	// Server.SetSecret to change it while the server runs.
	Secret []byte
	// Authorize, if set, decides what a client may do to a window when it
	// opens it (it runs in the server's control loop: keep it quick). No
	// Access (0) refuses the open with ErrDenied. Without it every
	// authenticated client gets AccessAll on every window.
	Authorize func(c ClientInfo, window string) Access
	// MaxConns bounds the connections, authenticated or not (default
	// 1024); a client beyond it gets ErrServerFull.
	MaxConns int
	// MaxPending bounds the connections that have not authenticated yet,
	// from their request to their proof (default 32): a request beyond it
	// drops the oldest of them. Each handshake runs on its own, so a slow
	// or silent client holds up nobody else.
	MaxPending int
	// AuthTimeout is how long a connection may take from its request to
	// its proof (default 2 s); a slower one is dropped.
	AuthTimeout time.Duration
	// RecvBuffers is the number of receive buffers (of 512 bytes) in the
	// shared receive queue that all connections use (default 256).
	RecvBuffers int
	// ProbeInterval is how often the server checks that the clients
	// holding or waiting for a lock are alive (default 500 ms): a client
	// whose host died gives its locks up within about ProbeInterval plus
	// the transport's retries (7 ACK timeouts of 67 ms by default) plus
	// ResumeWithin. A
	// client process that dies gives them up at once (its kernel
	// disconnects).
	ProbeInterval time.Duration
	// ResumeWithin is how long the server holds the session of a client
	// whose connection failed on the transport (a lossy or cut wire), for
	// the client to resume it on a new connection (default 3 s): its
	// locks stay held meanwhile, and its requests are handled at most
	// once. A client that does not resume in time gives its locks up
	// then. A client that closes, or whose process dies, gives them up
	// at once.
	ResumeWithin time.Duration
}

func (c *ServerConfig) defaults() error {
	if len(c.Secret) == 0 {
		return fmt.Errorf("%w: ServerConfig.Secret is required", verbs.ErrInvalid)
	}
	if c.MaxConns < 0 || c.MaxPending < 0 || c.AuthTimeout < 0 || c.RecvBuffers < 0 || c.ProbeInterval < 0 || c.ResumeWithin < 0 {
		return fmt.Errorf("%w: negative server limit", verbs.ErrInvalid)
	}
	if c.MaxConns == 0 {
		c.MaxConns = 1024
	}
	if c.MaxPending == 0 {
		c.MaxPending = 32
	}
	if c.AuthTimeout == 0 {
		c.AuthTimeout = 2 * time.Second
	}
	if c.RecvBuffers == 0 {
		c.RecvBuffers = 256
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = 500 * time.Millisecond
	}
	if c.ResumeWithin == 0 {
		c.ResumeWithin = 3 * time.Second
	}
	c.Secret = append([]byte(nil), c.Secret...)
	return nil
}

// ClientConfig configures Dial. Only Secret is required.
type ClientConfig struct {
	// Secret is the server's secret.
	Secret []byte
	// Name tells the server who the client is, for its
	// ServerConfig.Authorize (at most MaxClientNameLen bytes).
	Name string
	// StagingSize is the client's registered buffer through which Put and
	// Get move data, in bytes (default 64 KiB): longer transfers go in
	// pieces of this size.
	StagingSize int
	// AckTimeout is the exponent of the QP's ACK timeout, 4.096 us *
	// 2^AckTimeout (default 14: 67 ms); with the connection manager's 6
	// retries it bounds how long a call to a dead server takes to fail
	// with verbs.ErrPeerLost.
	AckTimeout int
	// ResumeWithin is how long the client tries to resume its session
	// on a new connection when its connection fails on the transport
	// (default 3 s, the server's default hold), its calls waiting meanwhile; see the package
	// documentation. Beyond it, the client fails with verbs.ErrPeerLost.
	ResumeWithin time.Duration
}

func (c *ClientConfig) defaults() error {
	if len(c.Secret) == 0 {
		return fmt.Errorf("%w: ClientConfig.Secret is required", verbs.ErrInvalid)
	}
	if len(c.Name) > MaxClientNameLen {
		return fmt.Errorf("%w: client name of %d bytes (at most %d)", verbs.ErrInvalid, len(c.Name), MaxClientNameLen)
	}
	if c.StagingSize < 0 || c.AckTimeout < 0 || c.AckTimeout > 31 || c.ResumeWithin < 0 {
		return fmt.Errorf("%w: staging size %d, ACK timeout %d", verbs.ErrInvalid, c.StagingSize, c.AckTimeout)
	}
	if c.StagingSize == 0 {
		c.StagingSize = 64 << 10
	}
	c.StagingSize = (c.StagingSize + 4095) &^ 4095
	if c.AckTimeout == 0 {
		c.AckTimeout = 14
	}
	if c.ResumeWithin == 0 {
		c.ResumeWithin = 3 * time.Second
	}
	c.Secret = append([]byte(nil), c.Secret...)
	return nil
}

// resolve turns host:port into an IP address and port, looking the host
// up in the DNS if it is a name.
func resolve(ctx context.Context, addr string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		return ap, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%w: address %q: %v", verbs.ErrInvalid, addr, err)
	}
	pn, err := net.DefaultResolver.LookupPort(ctx, "tcp", port)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%w: port %q: %v", verbs.ErrInvalid, port, err)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return netip.AddrPortFrom(ip, uint16(pn)), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return netip.AddrPort{}, fmt.Errorf("%w: resolve %q: %v", verbs.ErrNoRoute, host, err)
	}
	ip := ips[0]
	for _, a := range ips { // prefer IPv4: RoCE v2 devices route it everywhere
		if a.Unmap().Is4() {
			ip = a
			break
		}
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(pn)), nil
}
