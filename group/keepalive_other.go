//go:build !linux

package group

import (
	"net"
	"time"
)

// keepAlive asks for keep-alive probes after d of silence (the other
// settings of keepalive_linux.go are not portable).
func keepAlive(c *net.TCPConn, d time.Duration) {
	c.SetKeepAlive(true)
	c.SetKeepAlivePeriod(d)
}

// roundTrip has no measurement to report off Linux.
func roundTrip(net.Conn) (least, dev time.Duration, ok bool) { return 0, 0, false }
