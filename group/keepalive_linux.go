package group

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// keepAlive makes the kernel notice, within about three times d, that the
// host at the other end of c died or became unreachable, even when nothing
// is being sent: keep-alive probes start after d of silence, one every d/2,
// and after two unanswered ones the connection fails (Go's own setting
// sends 9 probes 15 s apart: over two minutes). Unacknowledged data times
// out the same way (TCP_USER_TIMEOUT). Times are rounded up to seconds,
// the unit of the kernel's keep-alive settings.
func keepAlive(c *net.TCPConn, d time.Duration) {
	idle := max(1, int((d+time.Second-1)/time.Second))
	intvl := max(1, idle/2)
	raw, err := c.SyscallConn()
	if err != nil {
		c.SetKeepAlive(true)
		c.SetKeepAlivePeriod(d)
		return
	}
	raw.Control(func(fd uintptr) {
		s := int(fd)
		unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
		unix.SetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, idle)
		unix.SetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, intvl)
		unix.SetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 2)
		unix.SetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, (idle+2*intvl)*1000)
	})
}

// roundTrip is the kernel's measurement of c's round trip (TCP_INFO): the
// least it has seen, free of the delays of the peer's delayed
// acknowledgements, and the smoothed mean deviation.
func roundTrip(c net.Conn) (least, dev time.Duration, ok bool) {
	tc, isTCP := c.(*net.TCPConn)
	if !isTCP {
		return 0, 0, false
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return 0, 0, false
	}
	raw.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err == nil && info.Min_rtt > 0 {
			least, dev, ok = time.Duration(info.Min_rtt)*time.Microsecond, time.Duration(info.Rttvar)*time.Microsecond, true
		}
	})
	return least, dev, ok
}
