//go:build linux && cgo

package verbs

/*
#include <infiniband/verbs.h>
#include "standin.h"
#include <errno.h>
#include <string.h>

// gorecv mirrors verbs.RecvWR.
struct gorecv {
	uint64_t wr_id;
	uint64_t addr;
	uint32_t len;
	uint32_t lkey;
};

static struct ibv_srq *go_create_srq(struct ibv_pd *pd, int max_wr, int max_sge, int *got_wr, int *got_sge, int *err) {
	struct ibv_srq_init_attr a;
	memset(&a, 0, sizeof a);
	a.attr.max_wr = max_wr;
	a.attr.max_sge = max_sge;
	errno = 0;
	struct ibv_srq *s = ibv_create_srq(pd, &a);
	if (!s) { *err = errno ? errno : EINVAL; return NULL; }
	*got_wr = a.attr.max_wr;
	*got_sge = a.attr.max_sge;
	*err = 0;
	return s;
}

static int go_post_srq_recv(struct ibv_srq *srq, uint64_t wr_id, uint64_t addr, uint32_t len, uint32_t lkey) {
	struct ibv_sge sge = { .addr = addr, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr, *bad;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return ibv_post_srq_recv(srq, &wr, &bad);
}

// go_post_srq_recvs posts n receives (n <= 32) as one chain. It returns
// 64 * errno + the number posted before the failing one, or n: one return
// value, so that Go passes no pointer that would escape.
static int go_post_srq_recvs(struct ibv_srq *srq, const struct gorecv *r, int n) {
	struct ibv_recv_wr wr[32], *bad = NULL;
	struct ibv_sge sge[32];
	if (n > 32) n = 32;
	for (int i = 0; i < n; i++) {
		sge[i].addr = r[i].addr;
		sge[i].length = r[i].len;
		sge[i].lkey = r[i].lkey;
		wr[i].wr_id = r[i].wr_id;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = 1;
	}
	int rc = ibv_post_srq_recv(srq, wr, &bad);
	if (rc == 0) return n;
	return rc * 64 + (bad ? (int)(bad - wr) : 0);
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

func createSRQ(pd unsafe.Pointer, maxWR, maxSGE int) (unsafe.Pointer, int, int, error) {
	var wr, sge, e C.int
	s := C.go_create_srq((*C.struct_ibv_pd)(pd), C.int(maxWR), C.int(maxSGE), &wr, &sge, &e)
	if s == nil {
		return nil, 0, 0, errnoErr(fmt.Sprintf("create SRQ of %d receives", maxWR), e)
	}
	return unsafe.Pointer(s), int(wr), int(sge), nil
}

func destroySRQ(p unsafe.Pointer) error {
	if r := C.ibv_destroy_srq((*C.struct_ibv_srq)(p)); r != 0 {
		return errnoErr("destroy SRQ", r)
	}
	return nil
}

func postSRQRecv(p unsafe.Pointer, wrID uint64, l Local) error {
	if r := C.go_post_srq_recv((*C.struct_ibv_srq)(p), C.uint64_t(wrID), C.uint64_t(l.Addr), C.uint32_t(l.Len), C.uint32_t(l.LKey)); r != 0 {
		return errnoErr("post SRQ receive", r)
	}
	return nil
}

func postSRQRecvs(p unsafe.Pointer, wrs []RecvWR) (int, error) {
	done := 0
	for done < len(wrs) {
		n := min(len(wrs)-done, maxRecvBatch)
		r := C.go_post_srq_recvs((*C.struct_ibv_srq)(p), (*C.struct_gorecv)(unsafe.Pointer(&wrs[done])), C.int(n))
		done += int(r % 64)
		if r >= 64 {
			return done, errnoErr("post SRQ receives", r/64)
		}
	}
	return done, nil
}

var _ = [1]struct{}{}[C.sizeof_struct_gorecv-int(unsafe.Sizeof(RecvWR{}))] // RecvWR matches struct gorecv
