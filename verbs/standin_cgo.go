//go:build linux && cgo && standin

package verbs

/*
#cgo CFLAGS: -DRMA_STANDIN
#include <infiniband/verbs.h>
#include "standin.h"

// go_sti_loop posts n signalled fetch-and-adds of 1 and polls for each
// one's completion, all in C.
static int go_sti_loop(struct ibv_qp *qp, struct ibv_cq *cq, int n, uint64_t laddr, uint32_t lkey, uint64_t raddr, uint32_t rkey) {
	struct ibv_sge sge = { .addr = laddr, .length = 8, .lkey = lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
		.send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.wr.atomic.remote_addr = raddr;
	wr.wr.atomic.rkey = rkey;
	wr.wr.atomic.compare_add = 1;
	struct ibv_wc wc;
	for (int i = 0; i < n; i++) {
		wr.wr_id = i;
		if (ibv_post_send(qp, &wr, &bad)) return -1;
		int got;
		while ((got = ibv_poll_cq(cq, 1, &wc)) == 0) {
		}
		if (got < 0 || wc.status != IBV_WC_SUCCESS) return -1;
	}
	return 0;
}
*/
import "C"

import "errors"

// StandInLoop posts n fetch-and-adds of 1 to raddr on qp, each signalled,
// and polls cq until each one's completion comes, in one call to C: the
// floor under which no Go caller of a NIC atomic can go. It exists only
// in the build with the standin tag.
func StandInLoop(qp *QP, cq *CQ, l Local, raddr uint64, rkey uint32, n int) error {
	if C.go_sti_loop((*C.struct_ibv_qp)(qp.p), (*C.struct_ibv_cq)(cq.p), C.int(n), C.uint64_t(l.Addr), C.uint32_t(l.LKey),
		C.uint64_t(raddr), C.uint32_t(rkey)) != 0 {
		return errors.New("verbs: stand-in loop: a work request failed")
	}
	return nil
}
