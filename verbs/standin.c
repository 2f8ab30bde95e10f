//go:build linux && cgo && standin

// The stand-in NIC: an RDMA device in this process's memory, for timing
// the software above the verbs without a device (build tag standin; see
// standin_cgo.go). One device, "standin0", one port (InfiniBand link
// layer, LID 1). RC queue pairs of this process connect to each other by
// number. A work request is carried out while it is posted: a WRITE,
// READ or atomic moves the bytes at once, a SEND lands in a receive the
// peer posted (or waits, as an RNR retry would, until one is posted), and
// its completion is queued then. With RMA_STANDIN_DELAY_NS set, a
// completion becomes visible to polls that many nanoseconds after the post,
// and the completion channel's event comes then.
//
// It checks what a NIC checks: remote keys, ranges and access flags, the
// alignment of atomics (refused at the post, as Soft-RoCE does), a SEND
// longer than the receive buffer. A failed work request moves its queue
// pair to the error state; work requests posted then, and receives
// outstanding, complete with IBV_WC_WR_FLUSH_ERR. Type 2 memory windows
// are bound by a work request, as on a NIC. One mutex guards all of it.

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "standin.h"

struct sti_cqe {
	struct ibv_wc wc;
	uint64_t at; // visible from (CLOCK_MONOTONIC ns); 0: at once
};

struct sti_cq {
	struct ibv_cq cq;
	struct sti_cqe *ring;
	unsigned cap, head, tail; // tail - head entries
	int armed, overflow;
	struct sti_cq *next; // all CQs, for the timer
};

struct sti_ch {
	struct ibv_comp_channel ch;
	struct ibv_cq *last; // the CQ of the event pending
};

struct sti_rwr {
	uint64_t wr_id, addr;
	uint32_t len;
};

struct sti_rq {
	struct sti_rwr *ring;
	unsigned cap, head, tail;
};

struct sti_msg { // a SEND that found no receive posted
	uint32_t len, imm, src;
	int with_imm;
	struct sti_msg *next;
	unsigned char data[];
};

struct sti_srq {
	struct ibv_srq srq;
	struct sti_rq rq;
};

struct sti_qp {
	struct ibv_qp qp;
	uint32_t dest;
	int sig_all;
	struct sti_rq rq;
	struct sti_msg *pend, **pend_tail;
	int npend;
	struct sti_qp *next; // all QPs
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t timer_cond = PTHREAD_COND_INITIALIZER;
static int timer_started;
static uint64_t delay_ns;
static int delay_read;

// A key (an MR's, or a memory window's once bound) is its index in keys
// shifted left by 8, and a key byte for memory windows.
struct sti_key {
	uint32_t rkey; // 0: unused, or a window not bound
	uint32_t qpn;  // a window's: the QP it was bound on, the only one it serves
	int access;
	uint64_t addr, len;
};
static struct sti_key *keys;
static unsigned nkeys, capkeys;
static struct sti_qp *qps;
static uint32_t next_qpn = 0x100;
static struct sti_cq *cqs;

static struct ibv_device sti_dev = {
	.node_type = IBV_NODE_CA,
	.transport_type = IBV_TRANSPORT_IB,
	.name = "standin0",
	.dev_name = "uverbs-standin0",
};

static uint64_t now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void read_delay(void) {
	if (delay_read) return;
	delay_read = 1;
	const char *s = getenv("RMA_STANDIN_DELAY_NS");
	if (s) delay_ns = strtoull(s, NULL, 10);
}

struct ibv_device **sti_get_device_list(int *n) {
	struct ibv_device **l = calloc(2, sizeof *l);
	if (!l) { errno = ENOMEM; return NULL; }
	l[0] = &sti_dev;
	if (n) *n = 1;
	return l;
}

void sti_free_device_list(struct ibv_device **list) { free(list); }

const char *sti_get_device_name(struct ibv_device *dev) { return dev->name; }

struct ibv_context *sti_open_device(struct ibv_device *dev) {
	struct ibv_context *c = calloc(1, sizeof *c);
	if (!c) { errno = ENOMEM; return NULL; }
	c->device = dev;
	c->cmd_fd = -1;
	c->async_fd = -1;
	c->num_comp_vectors = 1;
	pthread_mutex_lock(&mu);
	read_delay();
	pthread_mutex_unlock(&mu);
	return c;
}

int sti_close_device(struct ibv_context *ctx) { free(ctx); return 0; }

int sti_query_device(struct ibv_context *ctx, struct ibv_device_attr *a) {
	(void)ctx;
	memset(a, 0, sizeof *a);
	strcpy(a->fw_ver, "standin");
	a->max_mr_size = ~0ull;
	a->page_size_cap = 4096;
	a->max_qp = 1 << 16;
	a->max_qp_wr = 1 << 14;
	a->max_sge = 32;
	a->max_cq = 1 << 16;
	a->max_cqe = 1 << 20;
	a->max_mr = 1 << 20;
	a->max_pd = 1 << 16;
	a->max_qp_rd_atom = 128;
	a->max_qp_init_rd_atom = 128;
	a->max_srq = 1 << 10;
	a->max_srq_wr = 1 << 14;
	a->max_srq_sge = 32;
	a->atomic_cap = IBV_ATOMIC_HCA;
	a->phys_port_cnt = 1;
	a->max_mw = 1 << 16;
	a->device_cap_flags = IBV_DEVICE_MEM_WINDOW_TYPE_2B;
	return 0;
}

int sti_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *a) {
	(void)ctx;
	if (port != 1) return EINVAL;
	memset(a, 0, sizeof *a);
	a->state = IBV_PORT_ACTIVE;
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = IBV_MTU_4096;
	a->gid_tbl_len = 1;
	a->max_msg_sz = 1u << 31;
	a->lid = 1;
	a->link_layer = IBV_LINK_LAYER_INFINIBAND;
	return 0;
}

int sti_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid) {
	(void)ctx;
	if (port != 1 || index != 0) return EINVAL;
	memset(gid, 0, sizeof *gid);
	gid->raw[0] = 0xfe;
	gid->raw[1] = 0x80;
	gid->raw[15] = 1;
	return 0;
}

int sti_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *e, uint32_t flags) {
	(void)flags;
	memset(e, 0, sizeof *e);
	int r = sti_query_gid(ctx, port, index, &e->gid);
	if (r) return r;
	e->gid_index = index;
	e->port_num = port;
	e->gid_type = IBV_GID_TYPE_IB;
	return 0;
}

struct ibv_pd *sti_alloc_pd(struct ibv_context *ctx) {
	struct ibv_pd *pd = calloc(1, sizeof *pd);
	if (!pd) { errno = ENOMEM; return NULL; }
	pd->context = ctx;
	return pd;
}

int sti_dealloc_pd(struct ibv_pd *pd) { free(pd); return 0; }

// new_key takes the next entry of keys; mu is held.
static int new_key(void) {
	if (nkeys == capkeys) {
		unsigned c = capkeys ? 2 * capkeys : 64;
		struct sti_key *k = realloc(keys, c * sizeof *k);
		if (!k) return -1;
		keys = k;
		capkeys = c;
	}
	memset(&keys[nkeys], 0, sizeof keys[nkeys]);
	return (int)nkeys++;
}

struct ibv_mr *sti_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
	struct ibv_mr *mr = calloc(1, sizeof *mr);
	if (!mr) { errno = ENOMEM; return NULL; }
	mr->context = pd->context;
	mr->pd = pd;
	mr->addr = addr;
	mr->length = len;
	pthread_mutex_lock(&mu);
	int i = new_key(); // keys are never reused
	if (i < 0) {
		pthread_mutex_unlock(&mu);
		free(mr);
		errno = ENOMEM;
		return NULL;
	}
	mr->lkey = mr->rkey = keys[i].rkey = (uint32_t)(i + 1) << 8;
	keys[i].access = access;
	keys[i].addr = (uint64_t)(uintptr_t)addr;
	keys[i].len = len;
	pthread_mutex_unlock(&mu);
	return mr;
}

int sti_dereg_mr(struct ibv_mr *mr) {
	pthread_mutex_lock(&mu);
	keys[(mr->rkey >> 8) - 1].rkey = 0;
	pthread_mutex_unlock(&mu);
	free(mr);
	return 0;
}

struct ibv_mw *sti_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type) {
	if (type != IBV_MW_TYPE_2) { errno = EOPNOTSUPP; return NULL; }
	struct ibv_mw *mw = calloc(1, sizeof *mw);
	if (!mw) { errno = ENOMEM; return NULL; }
	mw->context = pd->context;
	mw->pd = pd;
	mw->type = type;
	pthread_mutex_lock(&mu);
	int i = new_key();
	pthread_mutex_unlock(&mu);
	if (i < 0) {
		free(mw);
		errno = ENOMEM;
		return NULL;
	}
	mw->rkey = (uint32_t)(i + 1) << 8;
	return mw;
}

int sti_dealloc_mw(struct ibv_mw *mw) {
	pthread_mutex_lock(&mu);
	keys[(mw->rkey >> 8) - 1].rkey = 0;
	pthread_mutex_unlock(&mu);
	free(mw);
	return 0;
}

struct ibv_comp_channel *sti_create_comp_channel(struct ibv_context *ctx) {
	struct sti_ch *c = calloc(1, sizeof *c);
	if (!c) { errno = ENOMEM; return NULL; }
	c->ch.context = ctx;
	c->ch.fd = eventfd(0, EFD_NONBLOCK | EFD_SEMAPHORE | EFD_CLOEXEC);
	if (c->ch.fd < 0) {
		int e = errno;
		free(c);
		errno = e;
		return NULL;
	}
	return &c->ch;
}

int sti_destroy_comp_channel(struct ibv_comp_channel *ch) {
	close(ch->fd);
	free(ch);
	return 0;
}

static void *timer_loop(void *arg);

struct ibv_cq *sti_create_cq(struct ibv_context *ctx, int cqe, void *cq_context, struct ibv_comp_channel *ch, int vector) {
	(void)vector;
	if (cqe < 1) { errno = EINVAL; return NULL; }
	struct sti_cq *c = calloc(1, sizeof *c);
	if (!c) { errno = ENOMEM; return NULL; }
	c->cap = (unsigned)cqe;
	c->ring = calloc(c->cap, sizeof *c->ring);
	if (!c->ring) {
		free(c);
		errno = ENOMEM;
		return NULL;
	}
	c->cq.context = ctx;
	c->cq.channel = ch;
	c->cq.cq_context = cq_context;
	c->cq.cqe = cqe;
	pthread_mutex_lock(&mu);
	c->next = cqs;
	cqs = c;
	if (delay_ns && !timer_started) {
		pthread_t t;
		if (pthread_create(&t, NULL, timer_loop, NULL) == 0) {
			pthread_detach(t);
			timer_started = 1;
		}
	}
	pthread_mutex_unlock(&mu);
	return &c->cq;
}

int sti_destroy_cq(struct ibv_cq *cq) {
	struct sti_cq *c = (struct sti_cq *)cq;
	pthread_mutex_lock(&mu);
	for (struct sti_cq **p = &cqs; *p; p = &(*p)->next) {
		if (*p == c) {
			*p = c->next;
			break;
		}
	}
	pthread_mutex_unlock(&mu);
	free(c->ring);
	free(c);
	return 0;
}

// notify delivers the event of an armed CQ whose first entry is visible; mu is held.
static void notify(struct sti_cq *c, uint64_t now) {
	if (!c->armed || c->head == c->tail || !c->cq.channel) return;
	if (c->ring[c->head % c->cap].at > now) {
		pthread_cond_signal(&timer_cond);
		return;
	}
	c->armed = 0;
	((struct sti_ch *)c->cq.channel)->last = &c->cq;
	uint64_t one = 1;
	ssize_t r = write(c->cq.channel->fd, &one, sizeof one);
	(void)r;
}

static void *timer_loop(void *arg) {
	(void)arg;
	prctl(PR_SET_TIMERSLACK, 1); // wake at the completion's time, not 50 us later
	pthread_mutex_lock(&mu);
	for (;;) {
		uint64_t now = now_ns(), next = 0;
		for (struct sti_cq *c = cqs; c; c = c->next) {
			if (!c->armed || c->head == c->tail) continue;
			uint64_t at = c->ring[c->head % c->cap].at;
			if (at <= now)
				notify(c, now);
			else if (!next || at < next)
				next = at;
		}
		if (!next) {
			pthread_cond_wait(&timer_cond, &mu);
			continue;
		}
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		uint64_t wait = next - now, ns = (uint64_t)ts.tv_nsec + wait % 1000000000u;
		ts.tv_sec += wait / 1000000000u + ns / 1000000000u;
		ts.tv_nsec = ns % 1000000000u;
		pthread_cond_timedwait(&timer_cond, &mu, &ts); // the condition's clock: see timer_init
	}
	return NULL;
}

__attribute__((constructor)) static void timer_init(void) {
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&timer_cond, &a);
	pthread_condattr_destroy(&a);
}

// push queues a completion; mu is held.
static void push(struct ibv_cq *cq, const struct ibv_wc *wc) {
	struct sti_cq *c = (struct sti_cq *)cq;
	if (c->tail - c->head == c->cap) {
		__atomic_store_n(&c->overflow, 1, __ATOMIC_RELAXED);
		return;
	}
	struct sti_cqe *e = &c->ring[c->tail % c->cap];
	e->wc = *wc;
	e->at = delay_ns ? now_ns() + delay_ns : 0;
	__atomic_store_n(&c->tail, c->tail + 1, __ATOMIC_RELEASE);
	notify(c, delay_ns ? e->at - delay_ns : 0);
}

int sti_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
	struct sti_cq *c = (struct sti_cq *)cq;
	// An empty CQ is seen without the lock, as a NIC's CQ is read from
	// memory: a poller that spins takes no lock from the posters.
	// So is one whose first entry is not visible yet: a spinning poller
	// must not keep the posters waiting for the lock.
	unsigned h = __atomic_load_n(&c->head, __ATOMIC_RELAXED);
	if (!__atomic_load_n(&c->overflow, __ATOMIC_RELAXED) &&
			(__atomic_load_n(&c->tail, __ATOMIC_ACQUIRE) == h || (delay_ns && c->ring[h % c->cap].at > now_ns())))
		return 0;
	pthread_mutex_lock(&mu);
	if (c->overflow) {
		pthread_mutex_unlock(&mu);
		return -1;
	}
	uint64_t now = delay_ns ? now_ns() : 0;
	int got = 0;
	while (got < n && c->head != c->tail) {
		struct sti_cqe *e = &c->ring[c->head % c->cap];
		if (e->at > now) break;
		wc[got++] = e->wc;
		__atomic_store_n(&c->head, c->head + 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&mu);
	return got;
}

int sti_req_notify_cq(struct ibv_cq *cq, int solicited) {
	(void)solicited;
	struct sti_cq *c = (struct sti_cq *)cq;
	pthread_mutex_lock(&mu);
	c->armed = 1;
	// An entry queued before the arming raises no event (the callers
	// poll once more after arming), unless it is not visible yet: the
	// timer delivers its event when it is.
	if (delay_ns) pthread_cond_signal(&timer_cond);
	pthread_mutex_unlock(&mu);
	return 0;
}

int sti_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context) {
	uint64_t v;
	if (read(ch->fd, &v, sizeof v) != sizeof v) return -1; // errno says why (EAGAIN)
	pthread_mutex_lock(&mu);
	*cq = ((struct sti_ch *)ch)->last;
	pthread_mutex_unlock(&mu);
	if (cq_context) *cq_context = *cq ? (*cq)->cq_context : NULL;
	return 0;
}

void sti_ack_cq_events(struct ibv_cq *cq, unsigned int n) {
	(void)cq;
	(void)n;
}

static int rq_init(struct sti_rq *q, unsigned n) {
	q->cap = n ? n : 1;
	q->ring = calloc(q->cap, sizeof *q->ring);
	return q->ring ? 0 : ENOMEM;
}

struct ibv_qp *sti_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a) {
	if (a->qp_type != IBV_QPT_RC) { errno = EOPNOTSUPP; return NULL; }
	struct sti_qp *q = calloc(1, sizeof *q);
	if (!q) { errno = ENOMEM; return NULL; }
	if (!a->srq && rq_init(&q->rq, a->cap.max_recv_wr)) {
		free(q);
		errno = ENOMEM;
		return NULL;
	}
	if (a->cap.max_inline_data > 512) a->cap.max_inline_data = 512;
	q->qp.context = pd->context;
	q->qp.qp_context = a->qp_context;
	q->qp.pd = pd;
	q->qp.send_cq = a->send_cq;
	q->qp.recv_cq = a->recv_cq;
	q->qp.srq = a->srq;
	q->qp.qp_type = IBV_QPT_RC;
	q->qp.state = IBV_QPS_RESET;
	q->sig_all = a->sq_sig_all;
	q->pend_tail = &q->pend;
	pthread_mutex_lock(&mu);
	q->qp.qp_num = next_qpn++;
	q->next = qps;
	qps = q;
	pthread_mutex_unlock(&mu);
	return &q->qp;
}

static void drop_pending(struct sti_qp *q) {
	while (q->pend) {
		struct sti_msg *m = q->pend;
		q->pend = m->next;
		free(m);
	}
	q->pend_tail = &q->pend;
	q->npend = 0;
}

int sti_destroy_qp(struct ibv_qp *qp) {
	struct sti_qp *q = (struct sti_qp *)qp;
	pthread_mutex_lock(&mu);
	for (struct sti_qp **p = &qps; *p; p = &(*p)->next) {
		if (*p == q) {
			*p = q->next;
			break;
		}
	}
	drop_pending(q);
	pthread_mutex_unlock(&mu);
	free(q->rq.ring);
	free(q);
	return 0;
}

static struct sti_qp *find_qp(uint32_t qpn) {
	for (struct sti_qp *q = qps; q; q = q->next)
		if (q->qp.qp_num == qpn) return q;
	return NULL;
}

// to_error moves q to the error state, flushing its receives; mu is held.
static void to_error(struct sti_qp *q) {
	if (q->qp.state == IBV_QPS_ERR) return;
	q->qp.state = IBV_QPS_ERR;
	drop_pending(q);
	while (q->rq.head != q->rq.tail) {
		struct sti_rwr *r = &q->rq.ring[q->rq.head++ % q->rq.cap];
		struct ibv_wc wc = { .wr_id = r->wr_id, .status = IBV_WC_WR_FLUSH_ERR, .opcode = IBV_WC_RECV, .qp_num = q->qp.qp_num };
		push(q->qp.recv_cq, &wc);
	}
}

int sti_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
	struct sti_qp *q = (struct sti_qp *)qp;
	pthread_mutex_lock(&mu);
	if (mask & IBV_QP_DEST_QPN) q->dest = a->dest_qp_num;
	if (mask & IBV_QP_STATE) {
		if (a->qp_state == IBV_QPS_ERR)
			to_error(q);
		else
			q->qp.state = a->qp_state;
	}
	pthread_mutex_unlock(&mu);
	return 0;
}

int sti_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *ia) {
	(void)mask;
	(void)ia;
	pthread_mutex_lock(&mu);
	a->qp_state = qp->state;
	pthread_mutex_unlock(&mu);
	return 0;
}

// remote checks that [addr, addr+len) lies in what rkey reaches through
// QP d, which gives access; mu is held.
static int remote(struct sti_qp *d, uint32_t rkey, uint64_t addr, uint64_t len, int access) {
	unsigned i = rkey >> 8;
	if (i == 0 || i > nkeys) return 0;
	struct sti_key *k = &keys[i - 1];
	if (k->rkey != rkey || !(k->access & access) || (k->qpn && k->qpn != d->qp.qp_num)) return 0;
	return addr >= k->addr && len <= k->len && addr - k->addr <= k->len - len;
}

// bind binds the memory window of wr to its MR's range; mu is held.
static enum ibv_wc_status bind(struct sti_qp *q, const struct ibv_send_wr *wr) {
	struct ibv_mw *mw = wr->bind_mw.mw;
	const struct ibv_mw_bind_info *b = &wr->bind_mw.bind_info;
	unsigned m = b->mr->rkey >> 8, w = mw->rkey >> 8;
	if (m == 0 || m > nkeys || w == 0 || w > nkeys || keys[m - 1].rkey != b->mr->rkey ||
			!(keys[m - 1].access & IBV_ACCESS_MW_BIND) || (wr->bind_mw.rkey >> 8) != w ||
			b->addr < keys[m - 1].addr || b->length > keys[m - 1].len ||
			b->addr - keys[m - 1].addr > keys[m - 1].len - b->length)
		return IBV_WC_MW_BIND_ERR;
	keys[w - 1] = (struct sti_key){ .rkey = wr->bind_mw.rkey, .qpn = q->qp.qp_num, .access = (int)b->mw_access_flags, .addr = b->addr, .len = b->length };
	return IBV_WC_SUCCESS;
}

static uint64_t sge_len(const struct ibv_send_wr *wr) {
	uint64_t n = 0;
	for (int i = 0; i < wr->num_sge; i++) n += wr->sg_list[i].length;
	return n;
}

static void gather(unsigned char *dst, const struct ibv_send_wr *wr) {
	for (int i = 0; i < wr->num_sge; i++) {
		memcpy(dst, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
		dst += wr->sg_list[i].length;
	}
}

static void scatter(const struct ibv_send_wr *wr, const unsigned char *src) {
	for (int i = 0; i < wr->num_sge; i++) {
		memcpy((void *)(uintptr_t)wr->sg_list[i].addr, src, wr->sg_list[i].length);
		src += wr->sg_list[i].length;
	}
}

// take_recv takes the next receive posted for d; mu is held.
static int take_recv(struct sti_qp *d, struct sti_rwr *out) {
	struct sti_rq *rq = d->qp.srq ? &((struct sti_srq *)d->qp.srq)->rq : &d->rq;
	if (rq->head == rq->tail) return 0;
	*out = rq->ring[rq->head++ % rq->cap];
	return 1;
}

// deliver lands a message of len bytes in the receive r of d; it returns
// the sender's status. mu is held.
static enum ibv_wc_status deliver(struct sti_qp *d, const struct sti_rwr *r, const void *data, uint32_t len,
		int with_imm, uint32_t imm, uint32_t src, int is_write) {
	struct ibv_wc wc = { .wr_id = r->wr_id, .opcode = is_write ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV,
		.byte_len = len, .qp_num = d->qp.qp_num, .src_qp = src };
	if (with_imm) {
		wc.wc_flags = IBV_WC_WITH_IMM;
		wc.imm_data = imm;
	}
	if (!is_write) {
		if (len > r->len) {
			wc.status = IBV_WC_LOC_LEN_ERR;
			push(d->qp.recv_cq, &wc);
			to_error(d);
			return IBV_WC_REM_INV_REQ_ERR;
		}
		memcpy((void *)(uintptr_t)r->addr, data, len);
	}
	push(d->qp.recv_cq, &wc);
	return IBV_WC_SUCCESS;
}

// hold keeps a message for which d had no receive posted; mu is held.
static enum ibv_wc_status hold(struct sti_qp *d, const struct ibv_send_wr *wr, uint32_t len, uint32_t src, int is_write) {
	if (d->npend >= 1024) return IBV_WC_RNR_RETRY_EXC_ERR;
	struct sti_msg *m = malloc(sizeof *m + (is_write ? 0 : len));
	if (!m) return IBV_WC_RNR_RETRY_EXC_ERR;
	m->len = is_write ? (len | 0x80000000u) : len;
	m->with_imm = wr->opcode == IBV_WR_SEND_WITH_IMM || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
	m->imm = wr->imm_data;
	m->src = src;
	m->next = NULL;
	if (!is_write) gather(m->data, wr);
	*d->pend_tail = m;
	d->pend_tail = &m->next;
	d->npend++;
	return IBV_WC_SUCCESS;
}

// drain delivers held messages to the receives now posted; mu is held.
static void drain(struct sti_qp *d) {
	struct sti_rwr r;
	while (d->pend && d->qp.state != IBV_QPS_ERR && take_recv(d, &r)) {
		struct sti_msg *m = d->pend;
		d->pend = m->next;
		if (!d->pend) d->pend_tail = &d->pend;
		d->npend--;
		int is_write = (m->len & 0x80000000u) != 0;
		deliver(d, &r, m->data, m->len & 0x7fffffffu, m->with_imm, m->imm, m->src, is_write);
		free(m);
	}
}

// execute carries out one work request of q; mu is held.
static enum ibv_wc_status execute(struct sti_qp *q, const struct ibv_send_wr *wr, enum ibv_wc_opcode *op, uint32_t *len) {
	struct sti_qp *d = find_qp(q->dest);
	uint64_t n = sge_len(wr);
	*len = 0;
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		*op = IBV_WC_RDMA_WRITE;
		break;
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
		*op = IBV_WC_SEND;
		break;
	case IBV_WR_RDMA_READ:
		*op = IBV_WC_RDMA_READ;
		*len = (uint32_t)n;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		*op = IBV_WC_COMP_SWAP;
		*len = 8;
		break;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		*op = IBV_WC_FETCH_ADD;
		*len = 8;
		break;
	case IBV_WR_BIND_MW:
		*op = IBV_WC_BIND_MW;
		return bind(q, wr);
	default:
		return IBV_WC_LOC_QP_OP_ERR;
	}
	if (!d || d->qp.state == IBV_QPS_ERR || d->qp.state < IBV_QPS_RTR || d->dest != q->qp.qp_num)
		return IBV_WC_RETRY_EXC_ERR;
	struct sti_rwr r;
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		if (!remote(d, wr->wr.rdma.rkey, wr->wr.rdma.remote_addr, n, IBV_ACCESS_REMOTE_WRITE))
			return IBV_WC_REM_ACCESS_ERR;
		gather((unsigned char *)(uintptr_t)wr->wr.rdma.remote_addr, wr);
		if (wr->opcode == IBV_WR_RDMA_WRITE) return IBV_WC_SUCCESS;
		if (d->pend || !take_recv(d, &r)) return hold(d, wr, (uint32_t)n, q->qp.qp_num, 1);
		return deliver(d, &r, NULL, (uint32_t)n, 1, wr->imm_data, q->qp.qp_num, 1);
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
		if (d->pend || !take_recv(d, &r)) return hold(d, wr, (uint32_t)n, q->qp.qp_num, 0);
		if (wr->num_sge == 1 || n == 0)
			return deliver(d, &r, n ? (void *)(uintptr_t)wr->sg_list[0].addr : NULL, (uint32_t)n,
				wr->opcode == IBV_WR_SEND_WITH_IMM, wr->imm_data, q->qp.qp_num, 0);
		{
			unsigned char *buf = malloc(n);
			if (!buf) return IBV_WC_LOC_PROT_ERR;
			gather(buf, wr);
			enum ibv_wc_status s = deliver(d, &r, buf, (uint32_t)n, wr->opcode == IBV_WR_SEND_WITH_IMM,
				wr->imm_data, q->qp.qp_num, 0);
			free(buf);
			return s;
		}
	case IBV_WR_RDMA_READ:
		if (!remote(d, wr->wr.rdma.rkey, wr->wr.rdma.remote_addr, n, IBV_ACCESS_REMOTE_READ))
			return IBV_WC_REM_ACCESS_ERR;
		scatter(wr, (const unsigned char *)(uintptr_t)wr->wr.rdma.remote_addr);
		return IBV_WC_SUCCESS;
	default: {
		uint64_t addr = wr->wr.atomic.remote_addr;
		if (wr->num_sge != 1 || n != 8 || !remote(d, wr->wr.atomic.rkey, addr, 8, IBV_ACCESS_REMOTE_ATOMIC))
			return IBV_WC_REM_ACCESS_ERR;
		uint64_t *w = (uint64_t *)(uintptr_t)addr, old;
		if (wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			old = __atomic_fetch_add(w, wr->wr.atomic.compare_add, __ATOMIC_SEQ_CST);
		} else {
			old = wr->wr.atomic.compare_add;
			__atomic_compare_exchange_n(w, &old, wr->wr.atomic.swap, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
		}
		memcpy((void *)(uintptr_t)wr->sg_list[0].addr, &old, 8);
		return IBV_WC_SUCCESS;
	}
	}
}

int sti_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
	struct sti_qp *q = (struct sti_qp *)qp;
	pthread_mutex_lock(&mu);
	for (; wr; wr = wr->next) {
		if (q->qp.state != IBV_QPS_RTS && q->qp.state != IBV_QPS_ERR) {
			*bad = wr;
			pthread_mutex_unlock(&mu);
			return EINVAL;
		}
		if ((wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) &&
				wr->wr.atomic.remote_addr % 8) {
			*bad = wr;
			pthread_mutex_unlock(&mu);
			return EINVAL;
		}
		enum ibv_wc_opcode op = IBV_WC_SEND;
		uint32_t len = 0;
		enum ibv_wc_status s = IBV_WC_WR_FLUSH_ERR;
		if (q->qp.state == IBV_QPS_RTS) s = execute(q, wr, &op, &len);
		if (s != IBV_WC_SUCCESS) to_error(q);
		if (s != IBV_WC_SUCCESS || q->sig_all || (wr->send_flags & IBV_SEND_SIGNALED)) {
			struct ibv_wc wc = { .wr_id = wr->wr_id, .status = s, .opcode = op, .byte_len = len, .qp_num = q->qp.qp_num };
			push(q->qp.send_cq, &wc);
		}
	}
	pthread_mutex_unlock(&mu);
	return 0;
}

static int post_rq(struct sti_rq *rq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
	for (; wr; wr = wr->next) {
		if (rq->tail - rq->head == rq->cap || wr->num_sge != 1) {
			*bad = wr;
			return ENOMEM;
		}
		struct sti_rwr *r = &rq->ring[rq->tail++ % rq->cap];
		r->wr_id = wr->wr_id;
		r->addr = wr->sg_list[0].addr;
		r->len = wr->sg_list[0].length;
	}
	return 0;
}

int sti_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
	struct sti_qp *q = (struct sti_qp *)qp;
	pthread_mutex_lock(&mu);
	int r = post_rq(&q->rq, wr, bad);
	if (q->qp.state == IBV_QPS_ERR) {
		// A receive posted in the error state is flushed at once.
		while (q->rq.head != q->rq.tail) {
			struct sti_rwr *w = &q->rq.ring[q->rq.head++ % q->rq.cap];
			struct ibv_wc wc = { .wr_id = w->wr_id, .status = IBV_WC_WR_FLUSH_ERR, .opcode = IBV_WC_RECV, .qp_num = q->qp.qp_num };
			push(q->qp.recv_cq, &wc);
		}
	}
	drain(q);
	pthread_mutex_unlock(&mu);
	return r;
}

struct ibv_srq *sti_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *a) {
	struct sti_srq *s = calloc(1, sizeof *s);
	if (!s) { errno = ENOMEM; return NULL; }
	if (rq_init(&s->rq, a->attr.max_wr)) {
		free(s);
		errno = ENOMEM;
		return NULL;
	}
	s->srq.context = pd->context;
	s->srq.srq_context = a->srq_context;
	s->srq.pd = pd;
	return &s->srq;
}

int sti_destroy_srq(struct ibv_srq *srq) {
	struct sti_srq *s = (struct sti_srq *)srq;
	free(s->rq.ring);
	free(s);
	return 0;
}

int sti_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
	struct sti_srq *s = (struct sti_srq *)srq;
	pthread_mutex_lock(&mu);
	int r = post_rq(&s->rq, wr, bad);
	for (struct sti_qp *q = qps; q; q = q->next)
		if (q->qp.srq == srq && q->pend) drain(q);
	pthread_mutex_unlock(&mu);
	return r;
}
