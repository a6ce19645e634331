//go:build rdma

// ck.h: the C side of package rdma (UCX callbacks and thin wrappers that
// keep UCX structures out of Go). Included by the cgo files of the package.

#ifndef COLLKIT_CK_H
#define COLLKIT_CK_H

#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

// ck_op is the C-side state of one tagged send or receive. UCX callbacks,
// which run inside ucp_worker_progress, write it; Go reads it under the
// transport's lock.
typedef struct {
	int done;
	ucs_status_t status;
	size_t length;
	ucp_tag_t sender_tag;
	void *req; // UCX request, NULL when completed at once
	ucp_tag_recv_info_t info;
	ucp_dt_iov_t iov[2];
} ck_op;

// ck_peer is the argument of a peer's error handler.
typedef struct {
	ucs_status_t status; // first error UCX reported on the endpoint
	int *events;         // bumped on every error, shared by all peers
} ck_peer;

static void ck_send_cb(void *request, ucs_status_t status, void *user_data) {
	ck_op *op = user_data;
	op->status = status;
	op->done = 1;
}

static void ck_recv_cb(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info, void *user_data) {
	ck_op *op = user_data;
	op->status = status;
	if (info != NULL && (status == UCS_OK || status == UCS_ERR_MESSAGE_TRUNCATED)) {
		op->length = info->length;
		op->sender_tag = info->sender_tag;
	}
	op->done = 1;
}

static void ck_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status) {
	ck_peer *p = arg;
	if (p->status == UCS_OK) p->status = status;
	(*p->events)++;
}

static void ck_prepare(ck_op *op, ucp_request_param_t *p, void *hdr, size_t hlen, void *payload, size_t plen,
		void **buf, size_t *count) {
	op->done = 0;
	op->status = UCS_INPROGRESS;
	op->req = NULL;
	op->length = 0;
	op->sender_tag = 0;
	p->op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
	p->user_data = op;
	if (payload == NULL || plen == 0) {
		*buf = hdr;
		*count = hlen;
		return;
	}
	op->iov[0].buffer = hdr;
	op->iov[0].length = hlen;
	op->iov[1].buffer = payload;
	op->iov[1].length = plen;
	p->op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
	p->datatype = ucp_dt_make_iov();
	*buf = op->iov;
	*count = 2;
}

// ck_send posts hdr (hlen bytes) followed by payload (plen bytes, may be
// NULL) to ep. It returns UCS_INPROGRESS while the request is outstanding.
static ucs_status_t ck_send(ucp_ep_h ep, ucp_tag_t tag, ck_op *op, void *hdr, size_t hlen, void *payload, size_t plen) {
	ucp_request_param_t p;
	void *buf;
	size_t count;
	ck_prepare(op, &p, hdr, hlen, payload, plen, &buf, &count);
	p.cb.send = ck_send_cb;
	ucs_status_ptr_t r = ucp_tag_send_nbx(ep, buf, count, tag, &p);
	if (r == NULL) {
		op->status = UCS_OK;
		op->done = 1;
	} else if (UCS_PTR_IS_ERR(r)) {
		op->status = UCS_PTR_STATUS(r);
		op->done = 1;
	} else {
		op->req = r;
	}
	return op->status;
}

// ck_recv posts a receive of a message matching tag under mask into hdr
// followed by payload.
static ucs_status_t ck_recv(ucp_worker_h w, ucp_tag_t tag, ucp_tag_t mask, ck_op *op, void *hdr, size_t hlen,
		void *payload, size_t plen) {
	ucp_request_param_t p;
	void *buf;
	size_t count;
	ck_prepare(op, &p, hdr, hlen, payload, plen, &buf, &count);
	// Always complete through the callback: UCX 1.13 leaves recv_info
	// unset on some immediate completions, and the length is needed.
	p.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
	p.cb.recv = ck_recv_cb;
	ucs_status_ptr_t r = ucp_tag_recv_nbx(w, buf, count, tag, mask, &p);
	if (r == NULL) {
		op->status = UCS_OK;
		op->length = op->info.length;
		op->sender_tag = op->info.sender_tag;
		op->done = 1;
	} else if (UCS_PTR_IS_ERR(r)) {
		op->status = UCS_PTR_STATUS(r);
		op->done = 1;
	} else {
		op->req = r;
	}
	return op->status;
}

// ck_release frees a completed request.
static void ck_release(ck_op *op) {
	if (op->req != NULL) {
		ucp_request_free(op->req);
		op->req = NULL;
	}
}

static void ck_cancel(ucp_worker_h w, ck_op *op) {
	if (op->req != NULL && !op->done) ucp_request_cancel(w, op->req);
}

static ucs_status_t ck_init(const char *tls, const char *netdevs, const char *keepalive, ucp_context_h *ctx) {
	ucp_config_t *config;
	ucs_status_t st = ucp_config_read(NULL, NULL, &config);
	if (st != UCS_OK) return st;
	if (tls != NULL && (st = ucp_config_modify(config, "TLS", tls)) != UCS_OK) goto out;
	if (netdevs != NULL && (st = ucp_config_modify(config, "NET_DEVICES", netdevs)) != UCS_OK) goto out;
	if (keepalive != NULL && (st = ucp_config_modify(config, "KEEPALIVE_INTERVAL", keepalive)) != UCS_OK) goto out;
	ucp_params_t params;
	memset(&params, 0, sizeof(params));
	params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
	params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
	params.mt_workers_shared = 0;
	st = ucp_init(&params, config, ctx);
out:
	ucp_config_release(config);
	return st;
}

static ucs_status_t ck_worker(ucp_context_h ctx, ucp_worker_h *w) {
	ucp_worker_params_t params;
	memset(&params, 0, sizeof(params));
	params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
	params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
	return ucp_worker_create(ctx, &params, w);
}

// ck_ep creates an endpoint to addr; with peer_mode, UCX reports a failed
// peer to ck_err_cb (not every transport can: UCX 1.13's shared memory
// transports cannot, and ucp_ep_create then fails with UCS_ERR_UNREACHABLE).
static ucs_status_t ck_ep(ucp_worker_h w, const void *addr, ck_peer *peer, int peer_mode, ucp_ep_h *ep) {
	ucp_ep_params_t params;
	memset(&params, 0, sizeof(params));
	params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
		UCP_EP_PARAM_FIELD_ERR_HANDLER;
	params.address = addr;
	params.err_mode = peer_mode ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
	params.err_handler.cb = ck_err_cb;
	params.err_handler.arg = peer;
	return ucp_ep_create(w, &params, ep);
}

// ck_ep_close starts closing ep; force drops what is in flight. It returns
// the request to wait for, or NULL when done.
static void *ck_ep_close(ucp_ep_h ep, int force) {
	ucp_request_param_t p;
	memset(&p, 0, sizeof(p));
	if (force) {
		p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
		p.flags = UCP_EP_CLOSE_FLAG_FORCE;
	}
	ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
	return UCS_PTR_IS_PTR(r) ? r : NULL;
}

// ck_done reports whether request r is complete, and frees it if so.
static int ck_done(void *r) {
	if (ucp_request_check_status(r) == UCS_INPROGRESS) return 0;
	ucp_request_free(r);
	return 1;
}

static ucs_status_t ck_map(ucp_context_h ctx, size_t length, ucp_mem_h *memh, void **addr) {
	ucp_mem_map_params_t params;
	memset(&params, 0, sizeof(params));
	params.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
	params.length = length;
	params.flags = UCP_MEM_MAP_ALLOCATE;
	ucs_status_t st = ucp_mem_map(ctx, &params, memh);
	if (st != UCS_OK) return st;
	ucp_mem_attr_t attr;
	attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
	st = ucp_mem_query(*memh, &attr);
	if (st != UCS_OK) {
		ucp_mem_unmap(ctx, *memh);
		return st;
	}
	*addr = attr.address;
	return UCS_OK;
}

static unsigned ck_progress_all(ucp_worker_h w) {
	unsigned n = 0, k;
	while ((k = ucp_worker_progress(w)) != 0) n += k;
	return n;
}

#endif
