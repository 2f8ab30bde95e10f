//go:build linux && cgo

package verbs

/*
#cgo LDFLAGS: -libverbs
#include <infiniband/verbs.h>
#include "standin.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

// gowc mirrors verbs.WC.
struct gowc {
	uint64_t wr_id;
	int64_t status;
	int64_t opcode;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm;
	uint32_t qp_num;
	uint32_t wc_flags;
	uint32_t pad;
};

static int go_poll_cq(struct ibv_cq *cq, struct gowc *out, int n) {
	struct ibv_wc wc[32];
	if (n > 32) n = 32;
	int got = ibv_poll_cq(cq, n, wc);
	for (int i = 0; i < got; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].vendor_err = wc[i].vendor_err;
		out[i].byte_len = wc[i].byte_len;
		out[i].imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) ? be32toh(wc[i].imm_data) : 0;
		out[i].qp_num = wc[i].qp_num;
		out[i].wc_flags = wc[i].wc_flags;
	}
	return got;
}

static int go_query_port(struct ibv_context *c, int port, struct ibv_port_attr *a) {
	return ibv_query_port(c, port, a);
}

static int go_req_notify(struct ibv_cq *cq, int solicited) { return ibv_req_notify_cq(cq, solicited); }

// go_get_cq_event returns 0 and acknowledges one event, or -errno.
static int go_get_cq_event(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq;
	void *ctx;
	if (ibv_get_cq_event(ch, &cq, &ctx)) return -errno;
	ibv_ack_cq_events(cq, 1);
	return 0;
}

static int go_set_nonblock(int fd) {
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0) return -errno;
	if (fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return -errno;
	return 0;
}

static struct ibv_context *go_open(const char *name, int *err) {
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list) { *err = errno ? errno : ENODEV; return NULL; }
	struct ibv_context *ctx = NULL;
	*err = ENODEV;
	for (int i = 0; i < n; i++) {
		if (name[0] && strcmp(ibv_get_device_name(list[i]), name) != 0) continue;
		ctx = ibv_open_device(list[i]);
		*err = ctx ? 0 : (errno ? errno : EIO);
		break;
	}
	ibv_free_device_list(list);
	return ctx;
}

static int go_query_gid(struct ibv_context *c, int port, int idx, struct ibv_gid_entry *e) {
	int r = ibv_query_gid_ex(c, port, idx, e, 0);
	if (r == 0) return 0;
	// Older kernels or providers: fall back to the plain GID.
	union ibv_gid gid;
	if (ibv_query_gid(c, port, idx, &gid)) return r;
	memset(e, 0, sizeof *e);
	e->gid = gid;
	e->gid_index = idx;
	e->port_num = port;
	e->gid_type = IBV_GID_TYPE_IB;
	return 0;
}

static struct ibv_qp *go_create_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq, struct ibv_srq *srq,
		int swr, int rwr, int ssge, int rsge, int inl, int *max_inline, int *err) {
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
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	if (!qp) { *err = errno ? errno : EINVAL; return NULL; }
	*max_inline = a.cap.max_inline_data;
	*err = 0;
	return qp;
}

static int go_qp_init(struct ibv_qp *qp, int port, int access) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = port;
	a.qp_access_flags = access;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int go_qp_rtr(struct ibv_qp *qp, int port, int mtu, uint32_t dqpn, uint32_t rpsn,
		int rd_atomic, int min_rnr, int use_grh, const uint8_t *dgid, int sgid_index, int dlid) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu;
	a.dest_qp_num = dqpn;
	a.rq_psn = rpsn;
	a.max_dest_rd_atomic = rd_atomic;
	a.min_rnr_timer = min_rnr;
	a.ah_attr.port_num = port;
	a.ah_attr.dlid = dlid;
	a.ah_attr.sl = 0;
	a.ah_attr.src_path_bits = 0;
	if (use_grh) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
		a.ah_attr.grh.sgid_index = sgid_index;
		a.ah_attr.grh.hop_limit = 64;
		a.ah_attr.grh.traffic_class = 0;
		a.ah_attr.grh.flow_label = 0;
	}
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int go_qp_rts(struct ibv_qp *qp, uint32_t psn, int timeout, int retry, int rnr, int rd_atomic) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = psn;
	a.timeout = timeout;
	a.retry_cnt = retry;
	a.rnr_retry = rnr;
	a.max_rd_atomic = rd_atomic;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
		IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int go_qp_state(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia)) return -errno;
	return a.qp_state;
}

static int go_qp_to_error(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_ERR;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

// go_post_send builds one send work request from scalars and posts it.
static int go_post_send(struct ibv_qp *qp, uint64_t wr_id, int opcode, int flags,
		uint64_t laddr, uint32_t len, uint32_t lkey,
		uint64_t raddr, uint32_t rkey, uint64_t add_or_cmp, uint64_t swap, uint32_t imm) {
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof wr);
	sge.addr = laddr;
	sge.length = len;
	sge.lkey = lkey;
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = len || opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? 1 : 0;
	wr.opcode = opcode;
	wr.send_flags = flags;
	switch (opcode) {
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = add_or_cmp;
		wr.wr.atomic.swap = swap;
		break;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		wr.imm_data = htobe32(imm);
		// fall through
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_READ:
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
		break;
	case IBV_WR_SEND_WITH_IMM:
		wr.imm_data = htobe32(imm);
		break;
	}
	return ibv_post_send(qp, &wr, &bad);
}

// go_post_send_poll posts one send work request, then polls cq once: one
// call from Go instead of two for a synchronous operation. It returns the
// number of completions polled, or -1000-errno if the post failed.
static int go_post_send_poll(struct ibv_qp *qp, uint64_t wr_id, int opcode, int flags,
		uint64_t laddr, uint32_t len, uint32_t lkey,
		uint64_t raddr, uint32_t rkey, uint64_t add_or_cmp, uint64_t swap,
		struct ibv_cq *cq, struct gowc *out, int n) {
	int r = go_post_send(qp, wr_id, opcode, flags, laddr, len, lkey, raddr, rkey, add_or_cmp, swap, 0);
	if (r != 0) return -1000 - r;
	return go_poll_cq(cq, out, n);
}

// gowr mirrors verbs.SendWR.
struct gowr {
	uint64_t wr_id;
	uint64_t laddr;
	uint32_t len;
	uint32_t lkey;
	uint64_t raddr;
	uint64_t a;
	uint64_t b;
	uint32_t rkey;
	int32_t opcode;
	int64_t flags;
};

// go_post_list posts n work requests (at most 32) in one call to the
// provider (one doorbell), then, if cq is not NULL, polls it once into
// out. It returns how many it posted in the high 32 bits, and in the low
// 32 the completions polled, or -1000-errno if the post failed (the ones
// before the failing one are posted).
static int64_t go_post_list(struct ibv_qp *qp, const struct gowr *in, int n, struct ibv_cq *cq, struct gowc *out, int m) {
	struct ibv_sge sge[32];
	struct ibv_send_wr wr[32], *bad = NULL;
	if (n > 32) n = 32;
	int64_t posted = 0;
	if (n > 0) {
		memset(wr, 0, n * sizeof wr[0]);
		for (int i = 0; i < n; i++) {
			const struct gowr *g = &in[i];
			sge[i].addr = g->laddr;
			sge[i].length = g->len;
			sge[i].lkey = g->lkey;
			wr[i].wr_id = g->wr_id;
			wr[i].sg_list = &sge[i];
			wr[i].num_sge = g->len || g->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || g->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? 1 : 0;
			wr[i].opcode = g->opcode;
			wr[i].send_flags = (unsigned int)g->flags;
			wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
			if (g->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || g->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
				wr[i].wr.atomic.remote_addr = g->raddr;
				wr[i].wr.atomic.rkey = g->rkey;
				wr[i].wr.atomic.compare_add = g->a;
				wr[i].wr.atomic.swap = g->b;
			} else if (g->opcode == IBV_WR_RDMA_WRITE || g->opcode == IBV_WR_RDMA_READ) {
				wr[i].wr.rdma.remote_addr = g->raddr;
				wr[i].wr.rdma.rkey = g->rkey;
			}
		}
		int r = ibv_post_send(qp, wr, &bad);
		if (r != 0) {
			posted = bad ? bad - wr : 0;
			return posted << 32 | (uint32_t)(-1000 - r);
		}
		posted = n;
	}
	return posted << 32 | (uint32_t)(cq ? go_poll_cq(cq, out, m) : 0);
}

// go_post_inline posts a WRITE or SEND whose payload is copied by the provider
// during the call (IBV_SEND_INLINE); data is not kept.
static int go_post_inline(struct ibv_qp *qp, uint64_t wr_id, int opcode, int flags,
		const void *data, uint32_t len, uint64_t raddr, uint32_t rkey, uint32_t imm) {
	return go_post_send(qp, wr_id, opcode, flags | IBV_SEND_INLINE, (uint64_t)(uintptr_t)data, len, 0,
		raddr, rkey, 0, 0, imm);
}

// go_post_bind_mw posts the binding of a type 2 memory window to
// [addr, addr+len) of mr with the given access and new rkey.
static int go_post_bind_mw(struct ibv_qp *qp, uint64_t wr_id, int flags, struct ibv_mw *mw, uint32_t rkey,
		struct ibv_mr *mr, uint64_t addr, uint64_t len, int access) {
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = wr_id;
	wr.opcode = IBV_WR_BIND_MW;
	wr.send_flags = flags;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info.mr = mr;
	wr.bind_mw.bind_info.addr = addr;
	wr.bind_mw.bind_info.length = len;
	wr.bind_mw.bind_info.mw_access_flags = access;
	return ibv_post_send(qp, &wr, &bad);
}

static int go_post_recv(struct ibv_qp *qp, uint64_t wr_id, uint64_t laddr, uint32_t len, uint32_t lkey) {
	struct ibv_sge sge = { .addr = laddr, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr, *bad;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return ibv_post_recv(qp, &wr, &bad);
}
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"unsafe"
)

// Opcodes of ibv_wr_opcode used by post.
const (
	opWrite        = C.IBV_WR_RDMA_WRITE
	opWriteImm     = C.IBV_WR_RDMA_WRITE_WITH_IMM
	opSend         = C.IBV_WR_SEND
	opSendImm      = C.IBV_WR_SEND_WITH_IMM
	opRead         = C.IBV_WR_RDMA_READ
	opCmpSwap      = C.IBV_WR_ATOMIC_CMP_AND_SWP
	opFetchAdd     = C.IBV_WR_ATOMIC_FETCH_AND_ADD
	haveVerbs      = true
	wcSize         = C.sizeof_struct_gowc
	maxPollPerCall = 32
)

func errnoErr(op string, e C.int) error {
	if e < 0 {
		e = -e
	}
	errno := syscall.Errno(e)
	if errno == syscall.ENOMEM {
		return fmt.Errorf("verbs: %s: %w (%w)", op, ErrQueueFull, errno)
	}
	if errno == syscall.EINVAL {
		// A work request the provider refuses: a misaligned atomic on
		// Soft-RoCE, for one, is refused when posted.
		return fmt.Errorf("verbs: %s: %w (%w)", op, ErrInvalid, errno)
	}
	if errno == syscall.EOPNOTSUPP || errno == syscall.ENOSYS {
		return fmt.Errorf("verbs: %s: %w (%w)", op, ErrNotSupported, errno)
	}
	return fmt.Errorf("verbs: %s: %w", op, errno)
}

func openDevice(name string) (unsafe.Pointer, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var e C.int
	ctx := C.go_open(cname, &e)
	if ctx == nil {
		if syscall.Errno(e) == syscall.ENODEV {
			if name == "" {
				return nil, ErrNoDevice
			}
			return nil, fmt.Errorf("%w named %q", ErrNoDevice, name)
		}
		return nil, errnoErr("open device "+name, e)
	}
	return unsafe.Pointer(ctx), nil
}

func deviceName(p unsafe.Pointer) string {
	return C.GoString(C.ibv_get_device_name((*C.struct_ibv_context)(p).device))
}

func closeDevice(p unsafe.Pointer) error {
	if r := C.ibv_close_device((*C.struct_ibv_context)(p)); r != 0 {
		return errnoErr("close device", r)
	}
	return nil
}

func queryDevice(p unsafe.Pointer) (DeviceAttr, error) {
	var a C.struct_ibv_device_attr
	if r := C.ibv_query_device((*C.struct_ibv_context)(p), &a); r != 0 {
		return DeviceAttr{}, errnoErr("query device", r)
	}
	return DeviceAttr{
		FirmwareVersion: C.GoString(&a.fw_ver[0]),
		NodeGUID:        binary.BigEndian.Uint64((*[8]byte)(unsafe.Pointer(&a.node_guid))[:]), // __be64
		VendorID:        uint32(a.vendor_id),
		VendorPartID:    uint32(a.vendor_part_id),
		MaxMRSize:       uint64(a.max_mr_size),
		MaxQP:           int(a.max_qp),
		MaxQPWR:         int(a.max_qp_wr),
		MaxSGE:          int(a.max_sge),
		MaxCQ:           int(a.max_cq),
		MaxCQE:          int(a.max_cqe),
		MaxMR:           int(a.max_mr),
		MaxPD:           int(a.max_pd),
		MaxQPRdAtom:     int(a.max_qp_rd_atom),
		MaxQPInitRdAtom: int(a.max_qp_init_rd_atom),
		AtomicCap:       AtomicCap(a.atomic_cap),
		PhysPortCount:   int(a.phys_port_cnt),
		MaxMW:           int(a.max_mw),
		MemWindowType2:  a.device_cap_flags&(C.IBV_DEVICE_MEM_WINDOW_TYPE_2A|C.IBV_DEVICE_MEM_WINDOW_TYPE_2B) != 0,
	}, nil
}

func queryPort(p unsafe.Pointer, port int) (PortAttr, error) {
	var a C.struct_ibv_port_attr
	if r := C.go_query_port((*C.struct_ibv_context)(p), C.int(port), &a); r != 0 {
		return PortAttr{}, errnoErr(fmt.Sprintf("query port %d", port), r)
	}
	return PortAttr{
		State:       PortState(a.state),
		MaxMTU:      MTU(a.max_mtu),
		ActiveMTU:   MTU(a.active_mtu),
		LID:         uint16(a.lid),
		LinkLayer:   LinkLayer(a.link_layer),
		GIDTableLen: int(a.gid_tbl_len),
		MaxMsgSize:  uint32(a.max_msg_sz),
	}, nil
}

func queryGID(p unsafe.Pointer, port, index int) (GIDEntry, uint32, error) {
	var e C.struct_ibv_gid_entry
	if r := C.go_query_gid((*C.struct_ibv_context)(p), C.int(port), C.int(index), &e); r != 0 {
		return GIDEntry{}, 0, errnoErr(fmt.Sprintf("query GID %d of port %d", index, port), r)
	}
	var g GID
	copy(g[:], C.GoBytes(unsafe.Pointer(&e.gid), 16))
	return GIDEntry{Index: index, GID: g, Type: GIDType(e.gid_type)}, uint32(e.ndev_ifindex), nil
}

func allocPD(ctx unsafe.Pointer) (unsafe.Pointer, error) {
	pd, err := C.ibv_alloc_pd((*C.struct_ibv_context)(ctx))
	if pd == nil {
		return nil, fmt.Errorf("verbs: alloc PD: %w", err)
	}
	return unsafe.Pointer(pd), nil
}

func deallocPD(p unsafe.Pointer) error {
	if r := C.ibv_dealloc_pd((*C.struct_ibv_pd)(p)); r != 0 {
		return errnoErr("dealloc PD", r)
	}
	return nil
}

func regMR(pd unsafe.Pointer, addr unsafe.Pointer, n int, access Access) (unsafe.Pointer, uint32, uint32, error) {
	mr, err := C.ibv_reg_mr((*C.struct_ibv_pd)(pd), addr, C.size_t(n), C.int(access))
	if mr == nil {
		return nil, 0, 0, fmt.Errorf("verbs: register MR of %d bytes: %w", n, err)
	}
	return unsafe.Pointer(mr), uint32(mr.lkey), uint32(mr.rkey), nil
}

func deregMR(p unsafe.Pointer) error {
	if r := C.ibv_dereg_mr((*C.struct_ibv_mr)(p)); r != 0 {
		return errnoErr("deregister MR", r)
	}
	return nil
}

func allocMW(pd unsafe.Pointer) (unsafe.Pointer, uint32, error) {
	mw, err := C.ibv_alloc_mw((*C.struct_ibv_pd)(pd), C.IBV_MW_TYPE_2)
	if mw == nil {
		if errno, ok := err.(syscall.Errno); ok {
			return nil, 0, errnoErr("alloc memory window", C.int(errno))
		}
		return nil, 0, fmt.Errorf("verbs: alloc memory window: %w", err)
	}
	return unsafe.Pointer(mw), uint32(mw.rkey), nil
}

func deallocMW(p unsafe.Pointer) error {
	if r := C.ibv_dealloc_mw((*C.struct_ibv_mw)(p)); r != 0 {
		return errnoErr("dealloc memory window", r)
	}
	return nil
}

func postBindMW(qp unsafe.Pointer, wrID uint64, flags SendFlags, mw unsafe.Pointer, rkey uint32, mr unsafe.Pointer, addr, n uint64, access Access) error {
	if r := C.go_post_bind_mw((*C.struct_ibv_qp)(qp), C.uint64_t(wrID), C.int(flags), (*C.struct_ibv_mw)(mw), C.uint32_t(rkey),
		(*C.struct_ibv_mr)(mr), C.uint64_t(addr), C.uint64_t(n), C.int(access)); r != 0 {
		return errnoErr("post bind memory window", r)
	}
	return nil
}

func createCompChannel(ctx unsafe.Pointer) (unsafe.Pointer, int, error) {
	ch, err := C.ibv_create_comp_channel((*C.struct_ibv_context)(ctx))
	if ch == nil {
		return nil, -1, fmt.Errorf("verbs: create completion channel: %w", err)
	}
	if r := C.go_set_nonblock(ch.fd); r != 0 {
		C.ibv_destroy_comp_channel(ch)
		return nil, -1, errnoErr("completion channel O_NONBLOCK", r)
	}
	return unsafe.Pointer(ch), int(ch.fd), nil
}

func destroyCompChannel(p unsafe.Pointer) error {
	if r := C.ibv_destroy_comp_channel((*C.struct_ibv_comp_channel)(p)); r != 0 {
		return errnoErr("destroy completion channel", r)
	}
	return nil
}

// getCQEvent takes and acknowledges one event; it reports false on EAGAIN.
func getCQEvent(p unsafe.Pointer) (bool, error) {
	r := C.go_get_cq_event((*C.struct_ibv_comp_channel)(p))
	if r == 0 {
		return true, nil
	}
	if syscall.Errno(-r) == syscall.EAGAIN {
		return false, nil
	}
	return false, errnoErr("get CQ event", r)
}

func createCQ(ctx unsafe.Pointer, n int, ch unsafe.Pointer) (unsafe.Pointer, error) {
	cq, err := C.ibv_create_cq((*C.struct_ibv_context)(ctx), C.int(n), nil, (*C.struct_ibv_comp_channel)(ch), 0)
	if cq == nil {
		return nil, fmt.Errorf("verbs: create CQ of %d entries: %w", n, err)
	}
	return unsafe.Pointer(cq), nil
}

func destroyCQ(p unsafe.Pointer) error {
	if r := C.ibv_destroy_cq((*C.struct_ibv_cq)(p)); r != 0 {
		return errnoErr("destroy CQ", r)
	}
	return nil
}

func pollCQ(p unsafe.Pointer, wcs []WC) (int, error) {
	n := len(wcs)
	if n > maxPollPerCall {
		n = maxPollPerCall
	}
	r := C.go_poll_cq((*C.struct_ibv_cq)(p), (*C.struct_gowc)(unsafe.Pointer(&wcs[0])), C.int(n))
	if r < 0 {
		return 0, fmt.Errorf("verbs: poll CQ: %w", syscall.EIO)
	}
	return int(r), nil
}

func reqNotify(p unsafe.Pointer, solicited bool) error {
	s := C.int(0)
	if solicited {
		s = 1
	}
	if r := C.go_req_notify((*C.struct_ibv_cq)(p), s); r != 0 {
		return errnoErr("request CQ notification", r)
	}
	return nil
}

func createQP(pd unsafe.Pointer, c *QPConfig) (unsafe.Pointer, uint32, int, error) {
	var maxInline, e C.int
	var srq *C.struct_ibv_srq
	if c.SRQ != nil {
		srq = (*C.struct_ibv_srq)(c.SRQ.p)
	}
	qp := C.go_create_qp((*C.struct_ibv_pd)(pd), (*C.struct_ibv_cq)(c.SendCQ.p), (*C.struct_ibv_cq)(c.RecvCQ.p), srq,
		C.int(c.MaxSendWR), C.int(c.MaxRecvWR), C.int(c.MaxSendSGE), C.int(c.MaxRecvSGE), C.int(c.MaxInlineData),
		&maxInline, &e)
	if qp == nil {
		return nil, 0, 0, errnoErr("create QP", e)
	}
	return unsafe.Pointer(qp), uint32(qp.qp_num), int(maxInline), nil
}

func destroyQP(p unsafe.Pointer) error {
	if r := C.ibv_destroy_qp((*C.struct_ibv_qp)(p)); r != 0 {
		return errnoErr("destroy QP", r)
	}
	return nil
}

func qpInit(p unsafe.Pointer, port int, access Access) error {
	if r := C.go_qp_init((*C.struct_ibv_qp)(p), C.int(port), C.int(access)); r != 0 {
		return errnoErr("modify QP to INIT", r)
	}
	return nil
}

func qpRTR(p unsafe.Pointer, path *Path, remote Endpoint) error {
	grh := C.int(0)
	if path.LinkLayer == LinkLayerEthernet || !remote.GID.IsZero() && remote.LID == 0 {
		grh = 1
	}
	gid := remote.GID
	r := C.go_qp_rtr((*C.struct_ibv_qp)(p), C.int(path.Port), C.int(path.MTU), C.uint32_t(remote.QPN), C.uint32_t(remote.PSN),
		C.int(path.MaxRdAtomic), C.int(path.MinRNRTimer), grh, (*C.uint8_t)(unsafe.Pointer(&gid[0])), C.int(path.GIDIndex), C.int(remote.LID))
	if r != 0 {
		return errnoErr("modify QP to RTR", r)
	}
	return nil
}

func qpRTS(p unsafe.Pointer, path *Path, psn uint32) error {
	r := C.go_qp_rts((*C.struct_ibv_qp)(p), C.uint32_t(psn), C.int(path.Timeout), C.int(path.RetryCount), C.int(path.RNRRetry), C.int(path.MaxRdAtomic))
	if r != 0 {
		return errnoErr("modify QP to RTS", r)
	}
	return nil
}

func qpState(p unsafe.Pointer) (QPState, error) {
	r := C.go_qp_state((*C.struct_ibv_qp)(p))
	if r < 0 {
		return 0, errnoErr("query QP", r)
	}
	return QPState(r), nil
}

func qpToError(p unsafe.Pointer) error {
	if r := C.go_qp_to_error((*C.struct_ibv_qp)(p)); r != 0 {
		return errnoErr("modify QP to ERR", r)
	}
	return nil
}

func postSendPoll(p unsafe.Pointer, wrID uint64, opcode int, flags SendFlags, l Local, raddr uint64, rkey uint32, a, b uint64, cq unsafe.Pointer, wcs []WC) (int, error) {
	n := min(len(wcs), maxPollPerCall)
	r := C.go_post_send_poll((*C.struct_ibv_qp)(p), C.uint64_t(wrID), C.int(opcode), C.int(flags),
		C.uint64_t(l.Addr), C.uint32_t(l.Len), C.uint32_t(l.LKey), C.uint64_t(raddr), C.uint32_t(rkey),
		C.uint64_t(a), C.uint64_t(b), (*C.struct_ibv_cq)(cq), (*C.struct_gowc)(unsafe.Pointer(&wcs[0])), C.int(n))
	if r <= -1000 {
		return 0, errnoErr("post send", -(r + 1000))
	}
	if r < 0 {
		return 0, fmt.Errorf("verbs: poll CQ: %w", syscall.EIO)
	}
	return int(r), nil
}

func postSend(p unsafe.Pointer, wrID uint64, opcode int, flags SendFlags, l Local, raddr uint64, rkey uint32, a, b uint64, imm uint32) error {
	r := C.go_post_send((*C.struct_ibv_qp)(p), C.uint64_t(wrID), C.int(opcode), C.int(flags),
		C.uint64_t(l.Addr), C.uint32_t(l.Len), C.uint32_t(l.LKey), C.uint64_t(raddr), C.uint32_t(rkey),
		C.uint64_t(a), C.uint64_t(b), C.uint32_t(imm))
	if r != 0 {
		return errnoErr("post send", r)
	}
	return nil
}

// postSendInline posts a WRITE or SEND whose payload is copied from Go memory
// while the call runs (IBV_SEND_INLINE); C keeps no pointer to it.
func postSendInline(p unsafe.Pointer, wrID uint64, opcode int, flags SendFlags, data []byte, raddr uint64, rkey uint32, imm uint32) error {
	var addr unsafe.Pointer
	if len(data) > 0 {
		addr = unsafe.Pointer(&data[0])
	}
	r := C.go_post_inline((*C.struct_ibv_qp)(p), C.uint64_t(wrID), C.int(opcode), C.int(flags),
		addr, C.uint32_t(len(data)), C.uint64_t(raddr), C.uint32_t(rkey), C.uint32_t(imm))
	if r != 0 {
		return errnoErr("post inline send", r)
	}
	return nil
}

func postList(p unsafe.Pointer, wrs []SendWR, cq unsafe.Pointer, wcs []WC) (posted, polled int, err error) {
	var in *C.struct_gowr
	if len(wrs) > 0 {
		in = (*C.struct_gowr)(unsafe.Pointer(&wrs[0]))
	}
	var out *C.struct_gowc
	m := min(len(wcs), maxPollPerCall)
	if m > 0 {
		out = (*C.struct_gowc)(unsafe.Pointer(&wcs[0]))
	}
	v := int64(C.go_post_list((*C.struct_ibv_qp)(p), in, C.int(min(len(wrs), MaxPostList)), (*C.struct_ibv_cq)(cq), out, C.int(m)))
	np, r := int(v>>32), int32(v)
	if r <= -1000 {
		return np, 0, errnoErr("post send list", C.int(-(r + 1000)))
	}
	if r < 0 {
		return np, 0, fmt.Errorf("verbs: poll CQ: %w", syscall.EIO)
	}
	return np, int(r), nil
}

func postRecv(p unsafe.Pointer, wrID uint64, l Local) error {
	if r := C.go_post_recv((*C.struct_ibv_qp)(p), C.uint64_t(wrID), C.uint64_t(l.Addr), C.uint32_t(l.Len), C.uint32_t(l.LKey)); r != 0 {
		return errnoErr("post receive", r)
	}
	return nil
}

var _ = [1]struct{}{}[wcSize-int(unsafe.Sizeof(WC{}))]                   // WC matches struct gowc
var _ = [1]struct{}{}[C.sizeof_struct_gowr-int(unsafe.Sizeof(SendWR{}))] // SendWR matches struct gowr
