//go:build linux && cgo

package verbs

/*
#cgo LDFLAGS: -lrdmacm -libverbs
#include <rdma/rdma_cma.h>
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// gocmev is one event as Go reads it: copied out, then acknowledged.
struct gocmev {
	struct rdma_cm_id *id;
	uint64_t handle;
	int32_t type;
	int32_t status;
	uint32_t qp_num;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t srq;
	uint8_t private_len;
	uint8_t private_data[256];
};

static int go_cm_errno(void) { return errno ? errno : EIO; }

static struct rdma_event_channel *go_cm_create_channel(int *err) {
	errno = 0;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch) { *err = errno ? errno : ENODEV; return NULL; }
	int fl = fcntl(ch->fd, F_GETFL);
	if (fl < 0 || fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		*err = go_cm_errno();
		rdma_destroy_event_channel(ch);
		return NULL;
	}
	*err = 0;
	return ch;
}

static int go_cm_channel_fd(struct rdma_event_channel *ch) { return ch->fd; }

// go_cm_get_event reads, copies and acknowledges one event: 0, or -errno
// (-EAGAIN when there is none). A connection request's new id gets a null
// context until Go numbers it.
static int go_cm_get_event(struct rdma_event_channel *ch, struct gocmev *out) {
	struct rdma_cm_event *ev;
	errno = 0;
	if (rdma_get_cm_event(ch, &ev)) return -go_cm_errno();
	memset(out, 0, sizeof *out);
	out->id = ev->id;
	out->type = ev->event;
	out->status = ev->status;
	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		out->handle = (uint64_t)(uintptr_t)ev->listen_id->context;
		ev->id->context = NULL;
	} else {
		out->handle = (uint64_t)(uintptr_t)ev->id->context;
	}
	struct rdma_conn_param *c = &ev->param.conn;
	out->qp_num = c->qp_num;
	out->responder_resources = c->responder_resources;
	out->initiator_depth = c->initiator_depth;
	out->srq = c->srq;
	if (c->private_data && c->private_data_len) {
		out->private_len = c->private_data_len;
		memcpy(out->private_data, c->private_data, c->private_data_len);
	}
	rdma_ack_cm_event(ev);
	return 0;
}

static struct rdma_cm_id *go_cm_create_id(struct rdma_event_channel *ch, uint64_t handle, int *err) {
	struct rdma_cm_id *id = NULL;
	errno = 0;
	if (rdma_create_id(ch, &id, (void *)(uintptr_t)handle, RDMA_PS_TCP)) { *err = go_cm_errno(); return NULL; }
	*err = 0;
	return id;
}

static void go_cm_set_handle(struct rdma_cm_id *id, uint64_t handle) { id->context = (void *)(uintptr_t)handle; }

static int go_cm_destroy_id(struct rdma_cm_id *id) {
	errno = 0;
	return rdma_destroy_id(id) ? -go_cm_errno() : 0;
}

static void go_cm_sa(struct sockaddr_storage *ss, int fam, const uint8_t *ip, uint16_t port, uint32_t scope) {
	memset(ss, 0, sizeof *ss);
	if (fam == 4) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		memcpy(&s->sin_addr, ip, 4);
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(port);
		memcpy(&s->sin6_addr, ip, 16);
		s->sin6_scope_id = scope;
	}
}

static int go_cm_get_sa(const struct sockaddr *sa, uint8_t *ip, uint16_t *port, uint32_t *scope) {
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
		memcpy(ip, &s->sin_addr, 4);
		*port = ntohs(s->sin_port);
		return 4;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
		memcpy(ip, &s->sin6_addr, 16);
		*port = ntohs(s->sin6_port);
		*scope = s->sin6_scope_id;
		return 6;
	}
	return 0;
}

static int go_cm_bind(struct rdma_cm_id *id, int fam, const uint8_t *ip, uint16_t port, uint32_t scope) {
	struct sockaddr_storage ss;
	go_cm_sa(&ss, fam, ip, port, scope);
	errno = 0;
	return rdma_bind_addr(id, (struct sockaddr *)&ss) ? -go_cm_errno() : 0;
}

static int go_cm_listen(struct rdma_cm_id *id, int backlog) {
	errno = 0;
	return rdma_listen(id, backlog) ? -go_cm_errno() : 0;
}

static int go_cm_resolve_addr(struct rdma_cm_id *id, int sfam, const uint8_t *sip, uint32_t sscope,
		int dfam, const uint8_t *dip, uint16_t dport, uint32_t dscope, int timeout_ms) {
	struct sockaddr_storage src, dst;
	go_cm_sa(&dst, dfam, dip, dport, dscope);
	if (sfam) go_cm_sa(&src, sfam, sip, 0, sscope);
	errno = 0;
	return rdma_resolve_addr(id, sfam ? (struct sockaddr *)&src : NULL, (struct sockaddr *)&dst, timeout_ms) ?
		-go_cm_errno() : 0;
}

static int go_cm_resolve_route(struct rdma_cm_id *id, int timeout_ms) {
	errno = 0;
	return rdma_resolve_route(id, timeout_ms) ? -go_cm_errno() : 0;
}

static void go_cm_addrs(struct rdma_cm_id *id, int *lfam, uint8_t *lip, uint16_t *lport, uint32_t *lscope,
		int *rfam, uint8_t *rip, uint16_t *rport, uint32_t *rscope) {
	*lfam = go_cm_get_sa(rdma_get_local_addr(id), lip, lport, lscope);
	*rfam = go_cm_get_sa(rdma_get_peer_addr(id), rip, rport, rscope);
}

// go_cm_route returns the id's device name, or NULL for an id bound to none.
static const char *go_cm_route(struct rdma_cm_id *id, int *port, uint8_t *sgid, uint8_t *dgid, int *mtu) {
	if (!id->verbs) return NULL;
	*port = id->port_num;
	memcpy(sgid, id->route.addr.addr.ibaddr.sgid.raw, 16);
	memcpy(dgid, id->route.addr.addr.ibaddr.dgid.raw, 16);
	*mtu = (id->route.num_paths > 0 && id->route.path_rec) ? id->route.path_rec[0].mtu : 0;
	return ibv_get_device_name(id->verbs->device);
}

static int go_cm_has_qp(struct rdma_cm_id *id) { return id->qp != NULL; }

static int go_cm_same_context(struct rdma_cm_id *id, struct ibv_pd *pd) {
	return id->verbs != NULL && pd->context == id->verbs;
}

static int go_cm_set_ack_timeout(struct rdma_cm_id *id, int exp) {
	uint8_t t = exp;
	errno = 0;
	return rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof t) ? -go_cm_errno() : 0;
}

static int go_cm_set_reuseaddr(struct rdma_cm_id *id, int on) {
	errno = 0;
	return rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &on, sizeof on) ? -go_cm_errno() : 0;
}

static struct ibv_qp *go_cm_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *scq,
		struct ibv_cq *rcq, struct ibv_srq *srq, int swr, int rwr, int ssge, int rsge, int inl,
		int *max_inline, int *err) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.srq = srq;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = 0;
	a.cap.max_send_wr = swr;
	a.cap.max_recv_wr = srq ? 0 : rwr;
	a.cap.max_send_sge = ssge;
	a.cap.max_recv_sge = srq ? 0 : rsge;
	a.cap.max_inline_data = inl;
	errno = 0;
	if (rdma_create_qp(id, pd, &a)) { *err = go_cm_errno(); return NULL; }
	*max_inline = a.cap.max_inline_data;
	*err = 0;
	return id->qp;
}

static void go_cm_destroy_qp(struct rdma_cm_id *id) { rdma_destroy_qp(id); }

// go_qp_set_min_rnr changes the RNR NAK timer of a QP in RTR or RTS (no
// state change: the RTS-to-RTS transition).
static int go_qp_set_min_rnr(struct ibv_qp *qp, int code) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.min_rnr_timer = code;
	return ibv_modify_qp(qp, &a, IBV_QP_MIN_RNR_TIMER);
}

// go_cm_connect connects (accept = 0) or accepts (accept = 1); private data
// is copied during the call.
static int go_cm_connect(struct rdma_cm_id *id, int accept, const void *data, int len,
		int resp_res, int init_depth, int retry, int rnr_retry) {
	struct rdma_conn_param p;
	memset(&p, 0, sizeof p);
	p.private_data = len ? data : NULL;
	p.private_data_len = len;
	p.responder_resources = resp_res;
	p.initiator_depth = init_depth;
	p.flow_control = 1;
	p.retry_count = retry;
	p.rnr_retry_count = rnr_retry;
	errno = 0;
	int r = accept ? rdma_accept(id, &p) : rdma_connect(id, &p);
	return r ? -go_cm_errno() : 0;
}

static int go_cm_reject(struct rdma_cm_id *id, const void *data, int len) {
	errno = 0;
	return rdma_reject(id, len ? data : NULL, len) ? -go_cm_errno() : 0;
}

static int go_cm_disconnect(struct rdma_cm_id *id) {
	errno = 0;
	return rdma_disconnect(id) ? -go_cm_errno() : 0;
}

// go_cm_open returns librdmacm's context of the named device (the first
// for ""), and the device list that holds a reference to it.
static struct ibv_context *go_cm_open(const char *name, struct ibv_context ***listp, int *err) {
	int n = 0;
	errno = 0;
	struct ibv_context **list = rdma_get_devices(&n);
	if (!list) { *err = errno ? errno : ENODEV; return NULL; }
	for (int i = 0; i < n && list[i]; i++) {
		if (name[0] && strcmp(ibv_get_device_name(list[i]->device), name) != 0) continue;
		*listp = list;
		*err = 0;
		return list[i];
	}
	rdma_free_devices(list);
	*err = ENODEV;
	return NULL;
}

static void go_cm_free_devices(struct ibv_context **list) { rdma_free_devices(list); }
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"
)

const haveCM = true

func cmErr(op string, r C.int) error {
	if r < 0 {
		r = -r
	}
	errno := syscall.Errno(r)
	switch errno {
	case syscall.EINVAL:
		return fmt.Errorf("verbs: rdma_cm %s: %w (%w)", op, ErrInvalid, errno)
	case syscall.ENODEV:
		return fmt.Errorf("verbs: rdma_cm %s: %w (%w)", op, ErrNoDevice, errno)
	case syscall.EOPNOTSUPP, syscall.ENOSYS:
		return fmt.Errorf("verbs: rdma_cm %s: %w (%w)", op, ErrNotSupported, errno)
	}
	return fmt.Errorf("verbs: rdma_cm %s: %w", op, errno)
}

func cmCreateChannel() (unsafe.Pointer, int, error) {
	var e C.int
	ch := C.go_cm_create_channel(&e)
	if ch == nil {
		err := cmErr("create event channel", e)
		if errno := syscall.Errno(e); errno == syscall.ENOENT || errno == syscall.ENODEV || errno == syscall.ENXIO {
			err = fmt.Errorf("verbs: rdma_cm: no /dev/infiniband/rdma_cm (is the rdma_ucm module loaded?): %w (%w)", ErrNoDevice, errno)
		}
		return nil, -1, err
	}
	return unsafe.Pointer(ch), int(C.go_cm_channel_fd(ch)), nil
}

func cmDestroyChannel(p unsafe.Pointer) {
	C.rdma_destroy_event_channel((*C.struct_rdma_event_channel)(p))
}

// cmGetEvent reads one event; it reports false when there is none.
func cmGetEvent(ch unsafe.Pointer, raw *rawCMEvent) (bool, error) {
	var e C.struct_gocmev
	r := C.go_cm_get_event((*C.struct_rdma_event_channel)(ch), &e)
	if r != 0 {
		if syscall.Errno(-r) == syscall.EAGAIN {
			return false, nil
		}
		return false, cmErr("get event", r)
	}
	*raw = rawCMEvent{
		id:     unsafe.Pointer(e.id),
		handle: uint64(e.handle),
		typ:    CMEventType(e._type),
		status: int(e.status),
		qpNum:  uint32(e.qp_num),
		rr:     int(e.responder_resources),
		depth:  int(e.initiator_depth),
		srq:    e.srq != 0,
	}
	if n := int(e.private_len); n > 0 {
		raw.private = C.GoBytes(unsafe.Pointer(&e.private_data[0]), C.int(n))
	}
	return true, nil
}

func cmCreateID(ch unsafe.Pointer, handle uint64) (unsafe.Pointer, error) {
	var e C.int
	id := C.go_cm_create_id((*C.struct_rdma_event_channel)(ch), C.uint64_t(handle), &e)
	if id == nil {
		return nil, cmErr("create id", e)
	}
	return unsafe.Pointer(id), nil
}

func cmSetHandle(id unsafe.Pointer, handle uint64) {
	C.go_cm_set_handle((*C.struct_rdma_cm_id)(id), C.uint64_t(handle))
}

func cmDestroyID(id unsafe.Pointer) error {
	if r := C.go_cm_destroy_id((*C.struct_rdma_cm_id)(id)); r != 0 {
		return cmErr("destroy id", r)
	}
	return nil
}

func cmBind(id unsafe.Pointer, s sockAddr) error {
	r := C.go_cm_bind((*C.struct_rdma_cm_id)(id), C.int(s.family), (*C.uint8_t)(unsafe.Pointer(&s.ip[0])), C.uint16_t(s.port), C.uint32_t(s.scope))
	if r != 0 {
		return cmErr("bind "+s.addrPort().String(), r)
	}
	return nil
}

func cmListen(id unsafe.Pointer, backlog int) error {
	if r := C.go_cm_listen((*C.struct_rdma_cm_id)(id), C.int(backlog)); r != 0 {
		return cmErr("listen", r)
	}
	return nil
}

func cmResolveAddr(id unsafe.Pointer, src *sockAddr, dst sockAddr, timeoutMS int) error {
	var s sockAddr
	if src != nil {
		s = *src
	}
	r := C.go_cm_resolve_addr((*C.struct_rdma_cm_id)(id), C.int(s.family), (*C.uint8_t)(unsafe.Pointer(&s.ip[0])), C.uint32_t(s.scope),
		C.int(dst.family), (*C.uint8_t)(unsafe.Pointer(&dst.ip[0])), C.uint16_t(dst.port), C.uint32_t(dst.scope), C.int(timeoutMS))
	if r != 0 {
		return cmErr("resolve address "+dst.addrPort().String(), r)
	}
	return nil
}

func cmResolveRoute(id unsafe.Pointer, timeoutMS int) error {
	if r := C.go_cm_resolve_route((*C.struct_rdma_cm_id)(id), C.int(timeoutMS)); r != 0 {
		return cmErr("resolve route", r)
	}
	return nil
}

func cmAddrs(id unsafe.Pointer) (local, peer sockAddr) {
	var lf, rf C.int
	var lp, rp C.uint16_t
	var ls, rs C.uint32_t
	C.go_cm_addrs((*C.struct_rdma_cm_id)(id), &lf, (*C.uint8_t)(unsafe.Pointer(&local.ip[0])), &lp, &ls,
		&rf, (*C.uint8_t)(unsafe.Pointer(&peer.ip[0])), &rp, &rs)
	local.family, local.port, local.scope = int(lf), uint16(lp), uint32(ls)
	peer.family, peer.port, peer.scope = int(rf), uint16(rp), uint32(rs)
	return local, peer
}

func cmRoute(id unsafe.Pointer) (CMRoute, bool) {
	var r CMRoute
	var port, mtu C.int
	name := C.go_cm_route((*C.struct_rdma_cm_id)(id), &port, (*C.uint8_t)(unsafe.Pointer(&r.SrcGID[0])),
		(*C.uint8_t)(unsafe.Pointer(&r.DstGID[0])), &mtu)
	if name == nil {
		return CMRoute{}, false
	}
	r.Device, r.Port, r.MTU = C.GoString(name), int(port), MTU(mtu)
	return r, true
}

func cmHasQP(id unsafe.Pointer) bool { return C.go_cm_has_qp((*C.struct_rdma_cm_id)(id)) != 0 }

func cmSameContext(id, pd unsafe.Pointer) bool {
	return C.go_cm_same_context((*C.struct_rdma_cm_id)(id), (*C.struct_ibv_pd)(pd)) != 0
}

func cmSetAckTimeout(id unsafe.Pointer, exp int) error {
	if r := C.go_cm_set_ack_timeout((*C.struct_rdma_cm_id)(id), C.int(exp)); r != 0 {
		return cmErr("set ACK timeout", r)
	}
	return nil
}

func cmSetReuseAddr(id unsafe.Pointer, on bool) error {
	v := C.int(0)
	if on {
		v = 1
	}
	if r := C.go_cm_set_reuseaddr((*C.struct_rdma_cm_id)(id), v); r != 0 {
		return cmErr("set REUSEADDR", r)
	}
	return nil
}

func cmCreateQP(id, pd unsafe.Pointer, c *QPConfig) (unsafe.Pointer, uint32, int, error) {
	var maxInline, e C.int
	var srq *C.struct_ibv_srq
	if c.SRQ != nil {
		srq = (*C.struct_ibv_srq)(c.SRQ.p)
	}
	qp := C.go_cm_create_qp((*C.struct_rdma_cm_id)(id), (*C.struct_ibv_pd)(pd),
		(*C.struct_ibv_cq)(c.SendCQ.p), (*C.struct_ibv_cq)(c.RecvCQ.p), srq,
		C.int(c.MaxSendWR), C.int(c.MaxRecvWR), C.int(c.MaxSendSGE), C.int(c.MaxRecvSGE), C.int(c.MaxInlineData),
		&maxInline, &e)
	if qp == nil {
		return nil, 0, 0, cmErr("create QP", e)
	}
	return unsafe.Pointer(qp), uint32(qp.qp_num), int(maxInline), nil
}

func cmDestroyQP(id unsafe.Pointer) { C.go_cm_destroy_qp((*C.struct_rdma_cm_id)(id)) }

func qpSetMinRNRTimer(qp unsafe.Pointer, code int) error {
	if r := C.go_qp_set_min_rnr((*C.struct_ibv_qp)(qp), C.int(code)); r != 0 {
		return errnoErr("modify QP's RNR timer", r)
	}
	return nil
}

func cmConnect(id unsafe.Pointer, p *ConnParam, accept bool) error {
	var data unsafe.Pointer
	if len(p.PrivateData) > 0 {
		data = unsafe.Pointer(&p.PrivateData[0])
	}
	a, op := C.int(0), "connect"
	if accept {
		a, op = 1, "accept"
	}
	r := C.go_cm_connect((*C.struct_rdma_cm_id)(id), a, data, C.int(len(p.PrivateData)),
		C.int(p.ResponderResources), C.int(p.InitiatorDepth), C.int(p.RetryCount), C.int(p.RNRRetryCount))
	if r != 0 {
		return cmErr(op, r)
	}
	return nil
}

func cmReject(id unsafe.Pointer, data []byte) error {
	var d unsafe.Pointer
	if len(data) > 0 {
		d = unsafe.Pointer(&data[0])
	}
	if r := C.go_cm_reject((*C.struct_rdma_cm_id)(id), d, C.int(len(data))); r != 0 {
		return cmErr("reject", r)
	}
	return nil
}

func cmDisconnect(id unsafe.Pointer) error {
	if r := C.go_cm_disconnect((*C.struct_rdma_cm_id)(id)); r != 0 {
		return cmErr("disconnect", r)
	}
	return nil
}

func cmOpenDevice(name string) (ctx, list unsafe.Pointer, err error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var l **C.struct_ibv_context
	var e C.int
	c := C.go_cm_open(cname, &l, &e)
	if c == nil {
		if syscall.Errno(e) == syscall.ENODEV {
			if name == "" {
				return nil, nil, ErrNoDevice
			}
			return nil, nil, fmt.Errorf("%w named %q", ErrNoDevice, name)
		}
		return nil, nil, cmErr("get devices", e)
	}
	return unsafe.Pointer(c), unsafe.Pointer(l), nil
}

func cmFreeDevices(list unsafe.Pointer) {
	C.go_cm_free_devices((**C.struct_ibv_context)(list))
}
