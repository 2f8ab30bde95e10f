// The stand-in NIC: with the build tag standin, the verbs calls of this
// package go to standin.c instead of libibverbs (see standin_cgo.go).
// Included after <infiniband/verbs.h>; without RMA_STANDIN it is empty.
#ifdef RMA_STANDIN
#ifndef RMA_STANDIN_H
#define RMA_STANDIN_H

#include <infiniband/verbs.h>

struct ibv_device **sti_get_device_list(int *n);
void sti_free_device_list(struct ibv_device **list);
const char *sti_get_device_name(struct ibv_device *dev);
struct ibv_context *sti_open_device(struct ibv_device *dev);
int sti_close_device(struct ibv_context *ctx);
int sti_query_device(struct ibv_context *ctx, struct ibv_device_attr *a);
int sti_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *a);
int sti_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid);
int sti_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *e, uint32_t flags);
struct ibv_pd *sti_alloc_pd(struct ibv_context *ctx);
int sti_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *sti_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access);
int sti_dereg_mr(struct ibv_mr *mr);
struct ibv_mw *sti_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int sti_dealloc_mw(struct ibv_mw *mw);
struct ibv_comp_channel *sti_create_comp_channel(struct ibv_context *ctx);
int sti_destroy_comp_channel(struct ibv_comp_channel *ch);
struct ibv_cq *sti_create_cq(struct ibv_context *ctx, int cqe, void *cq_context, struct ibv_comp_channel *ch, int vector);
int sti_destroy_cq(struct ibv_cq *cq);
int sti_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int sti_req_notify_cq(struct ibv_cq *cq, int solicited);
int sti_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context);
void sti_ack_cq_events(struct ibv_cq *cq, unsigned int n);
struct ibv_qp *sti_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a);
int sti_destroy_qp(struct ibv_qp *qp);
int sti_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask);
int sti_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *ia);
int sti_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int sti_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
struct ibv_srq *sti_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *a);
int sti_destroy_srq(struct ibv_srq *srq);
int sti_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

#undef ibv_query_port
#undef ibv_reg_mr
#define ibv_get_device_list sti_get_device_list
#define ibv_free_device_list sti_free_device_list
#define ibv_get_device_name sti_get_device_name
#define ibv_open_device sti_open_device
#define ibv_close_device sti_close_device
#define ibv_query_device sti_query_device
#define ibv_query_port sti_query_port
#define ibv_query_gid sti_query_gid
#define ibv_query_gid_ex sti_query_gid_ex
#define ibv_alloc_pd sti_alloc_pd
#define ibv_dealloc_pd sti_dealloc_pd
#define ibv_reg_mr sti_reg_mr
#define ibv_dereg_mr sti_dereg_mr
#define ibv_alloc_mw sti_alloc_mw
#define ibv_dealloc_mw sti_dealloc_mw
#define ibv_create_comp_channel sti_create_comp_channel
#define ibv_destroy_comp_channel sti_destroy_comp_channel
#define ibv_create_cq sti_create_cq
#define ibv_destroy_cq sti_destroy_cq
#define ibv_poll_cq sti_poll_cq
#define ibv_req_notify_cq sti_req_notify_cq
#define ibv_get_cq_event sti_get_cq_event
#define ibv_ack_cq_events sti_ack_cq_events
#define ibv_create_qp sti_create_qp
#define ibv_destroy_qp sti_destroy_qp
#define ibv_modify_qp sti_modify_qp
#define ibv_query_qp sti_query_qp
#define ibv_post_send sti_post_send
#define ibv_post_recv sti_post_recv
#define ibv_create_srq sti_create_srq
#define ibv_destroy_srq sti_destroy_srq
#define ibv_post_srq_recv sti_post_srq_recv

#endif
#endif
