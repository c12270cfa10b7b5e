/*
 * libnccl-profiler-mlcc.so — an NCCL profiler plugin that writes mlcc's progress file
 * (docs/design.md §9, §13) from stock NCCL ≥ 2.23, no NCCL patch needed.
 *
 *   NCCL_PROFILER_PLUGIN=libnccl-profiler-mlcc.so MLCC_JOB_ID=job42 MLCC_JOB_ARCH=allreduce \
 *   MLCC_MODEL_BYTES=... python train.py
 *
 * What it counts: the bytes NCCL's network transport moves, when it moves them, from the proxy
 * events (every API version has them; NCCL starts them only in src/transport/net.cc's proxy
 * progress, so NVLink/SHM/P2P traffic never shows up):
 *   v4-v6 (2.27+)  one ProxyStep event per network transfer. NCCL sets the step's size just
 *                  before recording ProxyStepSendWait (isend posted) or ProxyStepRecvFlushWait
 *                  (irecv completed) on it (2.27.7 net.cc:1213/1405, 2.30.7 net.cc:1422/1632).
 *                  A sent step counts at its stop (the isend completed); a received one at
 *                  RecvFlushWait (the data arrived).
 *   v1-v3 (2.23-2.26)  steps carry no size; the ProxyOp event's state records carry the sub-op's
 *                  running byte count (transSize; never reset between ops, so the first record of
 *                  an op is its base). Sent bytes count at each ProxyOpSendDone, received ones at
 *                  each ProxyOpRecvReceived (2.23.4 net.cc:1138/1169, 1346/1347).
 * Only what NCCL shows no proxy event for is counted from the call instead:
 *   Broadcast, NCCL 2.29+ (v6) with NCCL_ALLGATHERV_ENABLE not 0: NCCL turns it into an
 *                  ncclTaskBcast whose activation mask stays 0 (2.30.7 enqueue.cc:2703-2722,
 *                  368-388), so neither Coll nor proxy events follow; its CollApi event counts
 *                  count × sizeof(datatype) as sent on the root and as received elsewhere.
 *   CeColl (v6) on a communicator spanning nodes (2.30's hierarchical CE: inter-node RMA plus
 *                  intra-node copies, ce_coll.cc:1369-1370, 719-734): count × sizeof sent and
 *                  received at the event's stop. 2.29 runs CE collectives only on one node
 *                  (2.29.7 ce_coll.cc:105), 2.30's plain CE path only when every rank is reached
 *                  over NVLink (2.30.7 ce_coll.cc:118); on a one-node communicator they count
 *                  nothing. (A multi-node NVLink domain would be counted although it is no NIC.)
 * Communicators whose ranks are all on one node (v4+: init's nNodes == 1) count nothing.
 *
 * Iterations (MLCC_NCCL_ITERATION):
 *   first-coll (default)  the marker is the first all-reduce of at least MLCC_NCCL_MARK_MIN_BYTES
 *                         (default 65536) bytes on a communicator that spans nodes (v4+: init's
 *                         nNodes > 1; v1-v3, which are not told: one on which NCCL has already
 *                         shown a network transfer, so a communicator's very first collective is
 *                         never the marker there); every later all-reduce on that communicator
 *                         with the same (count, datatype) starts an iteration, at most one per
 *                         kernel plan (Group event: NCCL starts all of a plan's Coll events before
 *                         any of its bytes move, so a group reducing two equal buckets marks
 *                         once). DDP and Horovod reduce gradient buckets in the same order every
 *                         step; barriers and metric reductions (a few bytes) never become the
 *                         marker, nor do intra-node communicators'.
 *   group                 API v5+ (NCCL 2.28+): each explicit outermost ncclGroupStart..End
 *                         starts one (GroupApi event with groupDepth ≥ 2; a standalone call's
 *                         implicit group has depth 1 and does not). NCCL ≤ 2.27 has no event that
 *                         tells an explicit group from a standalone call's kernel plan, so there
 *                         the plugin warns and uses first-coll.
 *   explicit              no marks of the plugin's own: the application calls
 *                         mlcc_nccl_iteration_begin() from mlcc_nccl_iteration.h, which finds this
 *                         library although NCCL dlopens it RTLD_LOCAL and calls the exported
 *                         mlcc_nccl_profiler_iteration_begin() below. (mlcc_iteration_begin() from
 *                         mlcc_progress.h cannot reach it: the progress state here is built hidden,
 *                         -fvisibility=hidden, and every module has its own copy.)
 *
 * The progress file is opened at the init of the first communicator spanning nodes (v4+: with its
 * rank and size) or at the first event that carries a rank (v1-v3) — MLCC_RANK overrides the
 * rank — and closed when the last communicator is finalized. A process whose communicators are
 * all on one node (v4+) writes no file: it has no network traffic for mlccd to schedule.
 *
 * TCP_CONGESTION cannot be set from a profiler plugin (NCCL does not show it the sockets); use
 * the NCCL patch or mlcc's sock_ops program for that.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "mlcc_nccl_profiler.h"
#include "mlcc_progress.h"

#define MLCC_EXPORT __attribute__((visibility("default")))

enum { MLCC_ITER_FIRST_COLL = 0, MLCC_ITER_GROUP = 1, MLCC_ITER_EXPLICIT = 2 };
enum { MLCC_EV_MARKER = 1, MLCC_EV_OP = 2, MLCC_EV_STEP = 3, MLCC_EV_CE = 4 };
#define MLCC_EV_MAGIC 0x6d6c6363u   /* "mlcc" */
#define MLCC_COMM_MAGIC 0x636f6d6du /* "comm" */

/* One per communicator: init's *context. */
struct mlcc_comm {
  uint32_t magic;
  int version;
  int rank;    /* -1 until known (v1-v3 learn it from events) */
  int nranks;  /* -1: unknown */
  int network; /* 0: every rank on this node (v4+ nNodes == 1): counts nothing */
  int seen_net; /* v1-v3: a ProxyOp event came (only the net transport starts them) */
  int plan_marked; /* first-coll: this kernel plan (since the last Group event) has marked */
};

/* Handles for events with something to do at stop or record. */
struct mlcc_event {
  uint32_t magic;
  uint32_t kind;
  struct mlcc_comm *comm;
  int is_send;      /* ProxyOp v1-v3 */
  int have_base;    /* ProxyOp v1-v3: transSize of the op's first record seen */
  uint64_t base;
  uint64_t counted; /* ProxyOp v1-v3: bytes of this op already counted */
  uint64_t last;    /* ProxyOp v1-v3: last transSize - base */
  uint64_t bytes;   /* ProxyStep: size set at SendWait; CeColl: count × sizeof */
  int step_dir;     /* ProxyStep: -1 not yet known, else MLCC_DIR_SEND (RECV counts at once) */
};

/* Handed out for Group / GroupApi events: NCCL 2.23-2.27 start task (and so proxy) events only
 * under a non-NULL Group handle (2.23.4 misc/profiler.cc:272, 2.27.7 plugin/profiler.cc:240). */
static struct mlcc_event mlcc_marker_event = {MLCC_EV_MAGIC, MLCC_EV_MARKER, NULL, 0, 0, 0, 0, 0, 0, 0};

static pthread_mutex_t mlcc_mu = PTHREAD_MUTEX_INITIALIZER;
static int mlcc_comms;      /* live contexts (communicators) */
static int mlcc_iter_mode;
static uint64_t mlcc_mark_min_bytes;
static int mlcc_bcast_from_api; /* v6: Broadcast shows only as a CollApi event */
static int mlcc_tried_open;     /* one attempt per process lifetime of the file */
static struct mlcc_comm *mlcc_mark_comm; /* first-coll: the communicator whose all-reduce marks */
static uint64_t mlcc_mark_sig;

static int mlcc_env_iteration_mode(int version) {
  const char *s = getenv("MLCC_NCCL_ITERATION");
  if (!s || !*s || !strcmp(s, "first-coll")) return MLCC_ITER_FIRST_COLL;
  if (!strcmp(s, "group")) {
    if (version >= 5) return MLCC_ITER_GROUP;
    fprintf(stderr, "mlcc: MLCC_NCCL_ITERATION=group needs NCCL 2.28+ (profiler API v5); "
                    "this NCCL speaks v%d, using first-coll\n", version);
    return MLCC_ITER_FIRST_COLL;
  }
  if (!strcmp(s, "explicit")) return MLCC_ITER_EXPLICIT;
  fprintf(stderr, "mlcc: unknown MLCC_NCCL_ITERATION=%s, using first-coll\n", s);
  return MLCC_ITER_FIRST_COLL;
}

/* Opens the progress file once. rank/nranks < 0: unknown. Caller holds mlcc_mu. */
static void mlcc_open_locked(int rank, int nranks) {
  if (mlcc_tried_open) return;
  const char *job = getenv("MLCC_JOB_ID");
  if (!job || !*job) return; /* not an mlcc job: stay a no-op (try again at the next event) */
  mlcc_tried_open = 1;
  const char *r = getenv("MLCC_RANK");
  if (r && *r) rank = atoi(r);
  const char *ws = getenv("MLCC_WORLD_SIZE");
  uint32_t world = ws && *ws ? (uint32_t)strtoul(ws, NULL, 10) : (nranks > 0 ? (uint32_t)nranks : 0u);
  const char *mb = getenv("MLCC_MODEL_BYTES");
  const char *arch_s = getenv("MLCC_JOB_ARCH");
  int arch = arch_s && *arch_s ? mlcc_parse_arch_(arch_s) : MLCC_ARCH_ALLREDUCE;
  mlcc_progress_open(getenv("MLCC_SHM_DIR"), job, arch, MLCC_ROLE_WORKER,
                     rank < 0 ? 0u : (uint32_t)rank, world,
                     mb && *mb ? (uint64_t)strtoull(mb, NULL, 10) : 0u);
}

/* v1-v3: the first event with a rank opens the file. */
static void mlcc_learn_rank(struct mlcc_comm *c, int rank) {
  if (c->rank < 0 && rank >= 0) c->rank = rank;
  if (mlcc_progress_state_.open || mlcc_tried_open || !c->network || c->rank < 0) return;
  pthread_mutex_lock(&mlcc_mu);
  mlcc_open_locked(c->rank, c->nranks);
  pthread_mutex_unlock(&mlcc_mu);
}

static void mlcc_count(struct mlcc_comm *c, int dir, uint64_t bytes) {
  if (c && c->network) mlcc_progress_add(dir, bytes);
}

static struct mlcc_comm *mlcc_comm_of(void *ctx) {
  struct mlcc_comm *c = (struct mlcc_comm *)ctx;
  return c && c->magic == MLCC_COMM_MAGIC ? c : NULL;
}

static ncclResult_t mlcc_init_common(void **context, int *mask, int version, int rank, int nranks,
                                     int nnodes) {
  struct mlcc_comm *c = (struct mlcc_comm *)calloc(1, sizeof *c);
  if (!c) return ncclSystemError;
  c->magic = MLCC_COMM_MAGIC;
  c->version = version;
  c->rank = rank;
  c->nranks = nranks;
  c->network = nnodes < 0 || nnodes > 1;
  pthread_mutex_lock(&mlcc_mu);
  if (mlcc_comms++ == 0) {
    mlcc_iter_mode = mlcc_env_iteration_mode(version);
    const char *m = getenv("MLCC_NCCL_MARK_MIN_BYTES");
    mlcc_mark_min_bytes = m && *m ? strtoull(m, NULL, 10) : 65536u;
    const char *agv = getenv("NCCL_ALLGATHERV_ENABLE"); /* NCCL's default is 1 */
    mlcc_bcast_from_api = version >= 6 && !(agv && *agv && atoi(agv) == 0);
  }
  if (rank >= 0 && c->network) mlcc_open_locked(rank, nranks);
  pthread_mutex_unlock(&mlcc_mu);
  int m = ncclProfileColl | ncclProfileProxyOp;
  if (version >= 4) m |= ncclProfileProxyStep; /* only v4+ steps carry sizes */
  if (version >= 5 && mlcc_iter_mode == MLCC_ITER_GROUP) m |= ncclProfileGroupApi;
  if (version >= 6) m |= ncclProfileCeColl | (mlcc_bcast_from_api ? ncclProfileCollApi : 0);
  *mask = m;
  *context = c;
  return ncclSuccess;
}

/* MLCC_NCCL_ITERATION=explicit: the application's mark (mlcc_nccl_iteration.h looks this symbol
 * up on an RTLD_NOLOAD handle of this library). 1: an iteration began; 0: no progress file open
 * (MLCC_JOB_ID unset, no communicator spanning nodes yet, v1-v3 before the first event with a
 * rank, or every communicator finalized); -2: another iteration mode is on, the call is ignored.
 * Serialized with the plugin's own marks, the file's opening and its removal. */
MLCC_EXPORT int mlcc_nccl_profiler_iteration_begin(void) {
  int r = 0;
  pthread_mutex_lock(&mlcc_mu);
  if (mlcc_comms > 0 && mlcc_progress_state_.open) {
    if (mlcc_iter_mode == MLCC_ITER_EXPLICIT) {
      mlcc_iteration_begin();
      r = 1;
    } else {
      r = -2;
    }
  }
  pthread_mutex_unlock(&mlcc_mu);
  return r;
}

static ncclResult_t mlcc_finalize(void *context) {
  struct mlcc_comm *c = mlcc_comm_of(context);
  pthread_mutex_lock(&mlcc_mu);
  if (c && c == mlcc_mark_comm) mlcc_mark_comm = NULL;
  if (mlcc_comms > 0 && --mlcc_comms == 0) {
    mlcc_progress_close();
    mlcc_tried_open = 0;
    mlcc_mark_comm = NULL;
  }
  pthread_mutex_unlock(&mlcc_mu);
  if (c) {
    c->magic = 0;
    free(c);
  }
  return ncclSuccess;
}

static size_t mlcc_type_size_code(int code) {
  switch (code) {
  case mlccNcclInt8: case mlccNcclUint8: case mlccNcclFloat8e4m3: case mlccNcclFloat8e5m2: return 1;
  case mlccNcclFloat16: case mlccNcclBfloat16: return 2;
  case mlccNcclInt32: case mlccNcclUint32: case mlccNcclFloat32: return 4;
  case mlccNcclInt64: case mlccNcclUint64: case mlccNcclFloat64: return 8;
  default: return 0;
  }
}

/* ncclDatatypeToString's names. NCCL ≤ 2.30 has no case for ncclUint8 and reports it as
 * "Unknown"; it is the only one-byte type without a name, so "Unknown" counts one byte. */
static size_t mlcc_type_size_name(const char *s) {
  if (!s) return 0;
  static const struct { const char *name; size_t size; } t[] = {
      {"ncclInt8", 1},    {"ncclUint8", 1},   {"ncclFloat8e4m3", 1}, {"ncclFloat8e5m2", 1},
      {"ncclFloat16", 2}, {"ncclBfloat16", 2}, {"ncclInt32", 4},     {"ncclUint32", 4},
      {"ncclFloat32", 4}, {"ncclInt64", 8},   {"ncclUint64", 8},    {"ncclFloat64", 8},
      {"Unknown", 1},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (!strcmp(s, t[i].name)) return t[i].size;
  return 0;
}

static int mlcc_is(const char *s, const char *want) { return s && !strcmp(s, want); }

static uint64_t mlcc_signature(uint64_t count, uint64_t type_size) {
  /* FNV-1a over the two numbers: a tag only has to be stable within the process. */
  uint64_t h = 1469598103934665603ull;
  uint64_t v[2] = {count, type_size};
  const unsigned char *p = (const unsigned char *)v;
  for (size_t i = 0; i < sizeof v; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/* A collective task (Coll event): counts nothing (its bytes come from the proxy events) but may
 * start an iteration. */
static void mlcc_coll(struct mlcc_comm *c, int rank, int is_allreduce, uint64_t count,
                      size_t type_size) {
  if (!c) return;
  mlcc_learn_rank(c, rank);
  if (!is_allreduce || mlcc_iter_mode != MLCC_ITER_FIRST_COLL || !c->network) return;
  if (c->version <= 3 && !__atomic_load_n(&c->seen_net, __ATOMIC_ACQUIRE)) return;
  uint64_t bytes = count * (uint64_t)type_size;
  uint64_t sig = mlcc_signature(count, type_size);
  pthread_mutex_lock(&mlcc_mu);
  if (!mlcc_mark_comm && bytes >= mlcc_mark_min_bytes) {
    mlcc_mark_comm = c;
    mlcc_mark_sig = sig;
  }
  if (mlcc_mark_comm == c && mlcc_mark_sig == sig && !c->plan_marked) {
    mlcc_iteration_begin();
    c->plan_marked = 1;
  }
  pthread_mutex_unlock(&mlcc_mu);
}

static void mlcc_group_api(struct mlcc_comm *c, int group_depth) {
  if (mlcc_iter_mode != MLCC_ITER_GROUP || !c || !c->network || group_depth < 2) return;
  pthread_mutex_lock(&mlcc_mu);
  mlcc_iteration_begin();
  pthread_mutex_unlock(&mlcc_mu);
}

/* A Group event: one kernel plan's task events follow. */
static void mlcc_plan_start(struct mlcc_comm *c, void **eHandle) {
  if (c) {
    pthread_mutex_lock(&mlcc_mu);
    c->plan_marked = 0;
    pthread_mutex_unlock(&mlcc_mu);
  }
  *eHandle = &mlcc_marker_event;
}

static struct mlcc_event *mlcc_event_new(uint32_t kind, struct mlcc_comm *c) {
  struct mlcc_event *ev = (struct mlcc_event *)calloc(1, sizeof *ev);
  if (!ev) return NULL;
  ev->magic = MLCC_EV_MAGIC;
  ev->kind = kind;
  ev->comm = c;
  ev->step_dir = -1;
  return ev;
}

/* A ProxyOp event: the parent of v4+ steps, the byte counter of v1-v3. */
static void mlcc_proxy_op(void **eHandle, struct mlcc_comm *c, int rank, int is_send) {
  if (!c || !c->network) return; /* NULL: NCCL then starts no step events for it */
  mlcc_learn_rank(c, rank);
  __atomic_store_n(&c->seen_net, 1, __ATOMIC_RELEASE);
  struct mlcc_event *ev = mlcc_event_new(MLCC_EV_OP, c);
  if (ev) ev->is_send = is_send;
  *eHandle = ev;
}

static void mlcc_proxy_step(void **eHandle, struct mlcc_comm *c, void *parent) {
  struct mlcc_event *op = (struct mlcc_event *)parent;
  if (!c || !op || op->magic != MLCC_EV_MAGIC || op->kind != MLCC_EV_OP) return;
  *eHandle = mlcc_event_new(MLCC_EV_STEP, c);
}

/* CollApi (v6): a Broadcast that no task or proxy event will follow. */
static void mlcc_coll_api(struct mlcc_comm *c, int rank, const char *func, uint64_t count,
                          const char *datatype, int root) {
  if (!c || !mlcc_bcast_from_api || !mlcc_is(func, "Broadcast")) return;
  mlcc_learn_rank(c, rank);
  uint64_t bytes = count * (uint64_t)mlcc_type_size_name(datatype);
  mlcc_count(c, c->rank == root ? MLCC_DIR_SEND : MLCC_DIR_RECV, bytes);
}

static void mlcc_ce_coll(void **eHandle, struct mlcc_comm *c, int rank, uint64_t count,
                         const char *datatype) {
  if (!c || !c->network) return;
  mlcc_learn_rank(c, rank);
  struct mlcc_event *ev = mlcc_event_new(MLCC_EV_CE, c);
  if (ev) ev->bytes = count * (uint64_t)mlcc_type_size_name(datatype);
  *eHandle = ev;
}

static ncclResult_t mlcc_stop(void *eHandle) {
  struct mlcc_event *ev = (struct mlcc_event *)eHandle;
  if (!ev || ev->magic != MLCC_EV_MAGIC || ev->kind == MLCC_EV_MARKER) return ncclSuccess;
  if (ev->kind == MLCC_EV_OP && ev->last > ev->counted) {
    /* v1-v3: whatever the op's last record showed beyond what its Done/Received ones counted */
    mlcc_count(ev->comm, ev->is_send ? MLCC_DIR_SEND : MLCC_DIR_RECV, ev->last - ev->counted);
  } else if (ev->kind == MLCC_EV_STEP && ev->step_dir == MLCC_DIR_SEND) {
    mlcc_count(ev->comm, MLCC_DIR_SEND, ev->bytes);
  } else if (ev->kind == MLCC_EV_CE) {
    mlcc_count(ev->comm, MLCC_DIR_SEND, ev->bytes);
    mlcc_count(ev->comm, MLCC_DIR_RECV, ev->bytes);
  }
  ev->magic = 0;
  free(ev);
  return ncclSuccess;
}

/* v1-v3: ProxyOp records carry the running transSize. */
static ncclResult_t mlcc_record_v1(void *eHandle, ncclProfilerEventState_t state, void *args) {
  struct mlcc_event *ev = (struct mlcc_event *)eHandle;
  if (!ev || ev->magic != MLCC_EV_MAGIC || ev->kind != MLCC_EV_OP || !args) return ncclSuccess;
  uint64_t t = ((ncclProfilerEventStateArgs_v1_t *)args)->proxyOp.transSize;
  if (!ev->have_base) {
    ev->have_base = 1;
    ev->base = t;
  }
  ev->last = t - ev->base;
  int counts = ev->is_send ? state == ncclProfilerProxyOpSendDone
                           : state == ncclProfilerProxyOpRecvReceived;
  if (counts && ev->last > ev->counted) {
    mlcc_count(ev->comm, ev->is_send ? MLCC_DIR_SEND : MLCC_DIR_RECV, ev->last - ev->counted);
    ev->counted = ev->last;
  }
  return ncclSuccess;
}

/* v4+: ProxyStep records carry the step's size. */
static ncclResult_t mlcc_record_v4(void *eHandle, ncclProfilerEventState_t state, void *args) {
  struct mlcc_event *ev = (struct mlcc_event *)eHandle;
  if (!ev || ev->magic != MLCC_EV_MAGIC || ev->kind != MLCC_EV_STEP || !args) return ncclSuccess;
  uint64_t size = ((ncclProfilerEventStateArgs_v4_t *)args)->proxyStep.transSize;
  if (state == ncclProfilerProxyStepSendWait) {
    ev->step_dir = MLCC_DIR_SEND;
    ev->bytes = size;
  } else if (state == ncclProfilerProxyStepRecvFlushWait && ev->step_dir < 0) {
    ev->step_dir = MLCC_DIR_RECV;
    mlcc_count(ev->comm, MLCC_DIR_RECV, size);
  }
  return ncclSuccess;
}

/* ---- v1: enum codes ---- */
static ncclResult_t mlcc_init_v1(void **context, int *mask) {
  return mlcc_init_common(context, mask, 1, -1, -1, -1);
}
static ncclResult_t mlcc_start_v1(void *ctx, void **eHandle, ncclProfilerEventDescr_v1_t *d) {
  struct mlcc_comm *c = mlcc_comm_of(ctx);
  *eHandle = NULL;
  if (d->type == ncclProfileColl) {
    mlcc_coll(c, d->rank, d->coll.func == mlccNcclFuncAllReduce, d->coll.count,
              mlcc_type_size_code(d->coll.datatype));
  } else if (d->type == ncclProfileProxyOp) {
    mlcc_proxy_op(eHandle, c, d->rank, d->proxyOp.isSend);
  } else if (d->type == ncclProfileGroup) {
    mlcc_plan_start(c, eHandle);
  }
  return ncclSuccess;
}

/* ---- v2, v3: names ---- */
static ncclResult_t mlcc_init_v2(void **context, int *mask) {
  return mlcc_init_common(context, mask, 2, -1, -1, -1);
}
static ncclResult_t mlcc_init_v3(void **context, int *mask) {
  return mlcc_init_common(context, mask, 3, -1, -1, -1);
}
static ncclResult_t mlcc_start_v2(void *ctx, void **eHandle, ncclProfilerEventDescr_v2_t *d) {
  struct mlcc_comm *c = mlcc_comm_of(ctx);
  *eHandle = NULL;
  if (d->type == ncclProfileColl) {
    mlcc_coll(c, d->rank, mlcc_is(d->coll.func, "AllReduce"), d->coll.count,
              mlcc_type_size_name(d->coll.datatype));
  } else if (d->type == ncclProfileProxyOp) {
    mlcc_proxy_op(eHandle, c, d->rank, d->proxyOp.isSend);
  } else if (d->type == ncclProfileGroup) {
    mlcc_plan_start(c, eHandle);
  }
  return ncclSuccess;
}

/* ---- v4 ---- */
static ncclResult_t mlcc_init_v4(void **context, int *mask, const char *commName,
                                 uint64_t commHash, int nNodes, int nranks, int rank,
                                 ncclDebugLogger_t logfn) {
  (void)commName, (void)commHash, (void)logfn;
  return mlcc_init_common(context, mask, 4, rank, nranks, nNodes);
}
static ncclResult_t mlcc_start_v4(void *ctx, void **eHandle, ncclProfilerEventDescr_v4_t *d) {
  struct mlcc_comm *c = mlcc_comm_of(ctx);
  *eHandle = NULL;
  if (d->type == ncclProfileColl) {
    mlcc_coll(c, d->rank, mlcc_is(d->coll.func, "AllReduce"), d->coll.count,
              mlcc_type_size_name(d->coll.datatype));
  } else if (d->type == ncclProfileProxyOp) {
    mlcc_proxy_op(eHandle, c, d->rank, d->proxyOp.isSend);
  } else if (d->type == ncclProfileProxyStep) {
    mlcc_proxy_step(eHandle, c, d->parentObj);
  } else if (d->type == ncclProfileGroup) {
    mlcc_plan_start(c, eHandle);
  }
  return ncclSuccess;
}

/* ---- v5, v6 ---- */
static ncclResult_t mlcc_init_v5(void **context, uint64_t commId, int *mask, const char *commName,
                                 int nNodes, int nranks, int rank, ncclDebugLogger_t logfn) {
  (void)commId, (void)commName, (void)logfn;
  return mlcc_init_common(context, mask, 5, rank, nranks, nNodes);
}
static ncclResult_t mlcc_init_v6(void **context, uint64_t commId, int *mask, const char *commName,
                                 int nNodes, int nranks, int rank, ncclDebugLogger_t logfn) {
  (void)commId, (void)commName, (void)logfn;
  return mlcc_init_common(context, mask, 6, rank, nranks, nNodes);
}
static ncclResult_t mlcc_start_v6(void *ctx, void **eHandle, ncclProfilerEventDescr_v6_t *d) {
  struct mlcc_comm *c = mlcc_comm_of(ctx);
  *eHandle = NULL;
  if (d->type == ncclProfileColl) {
    mlcc_coll(c, d->rank, mlcc_is(d->coll.base.func, "AllReduce"), d->coll.base.count,
              mlcc_type_size_name(d->coll.base.datatype));
  } else if (d->type == ncclProfileProxyOp) {
    mlcc_proxy_op(eHandle, c, d->rank, d->proxyOp.isSend);
  } else if (d->type == ncclProfileProxyStep) {
    mlcc_proxy_step(eHandle, c, d->parentObj);
  } else if (d->type == ncclProfileGroupApi) {
    mlcc_group_api(c, d->groupApi.groupDepth);
    *eHandle = &mlcc_marker_event;
  } else if (d->type == ncclProfileGroup) {
    mlcc_plan_start(c, eHandle);
  } else if (c && c->version >= 6 && d->type == ncclProfileCollApi) {
    mlcc_coll_api(c, d->rank, d->collApi.func, d->collApi.count, d->collApi.datatype,
                  d->collApi.root);
  } else if (c && c->version >= 6 && d->type == ncclProfileCeColl) {
    mlcc_ce_coll(eHandle, c, d->rank, d->ceColl.count, d->ceColl.datatype);
  }
  return ncclSuccess;
}
/* v5's descriptor is v6's without the Ce* members, which a v5 context never reads. */
static ncclResult_t mlcc_start_v5(void *ctx, void **eHandle, ncclProfilerEventDescr_v5_t *d) {
  return mlcc_start_v6(ctx, eHandle, (ncclProfilerEventDescr_v6_t *)(void *)d);
}

MLCC_EXPORT ncclProfiler_v1_t ncclProfiler_v1 = {"mlcc", mlcc_init_v1, mlcc_start_v1, mlcc_stop,
                                                 mlcc_record_v1, mlcc_finalize};
MLCC_EXPORT ncclProfiler_v2_t ncclProfiler_v2 = {"mlcc", mlcc_init_v2, mlcc_start_v2, mlcc_stop,
                                                 mlcc_record_v1, mlcc_finalize};
MLCC_EXPORT ncclProfiler_v3_t ncclProfiler_v3 = {"mlcc", mlcc_init_v3, mlcc_start_v2, mlcc_stop,
                                                 mlcc_record_v1, mlcc_finalize};
MLCC_EXPORT ncclProfiler_v4_t ncclProfiler_v4 = {"mlcc", mlcc_init_v4, mlcc_start_v4, mlcc_stop,
                                                 mlcc_record_v4, mlcc_finalize};
MLCC_EXPORT ncclProfiler_v5_t ncclProfiler_v5 = {"mlcc", mlcc_init_v5, mlcc_start_v5, mlcc_stop,
                                                 mlcc_record_v4, mlcc_finalize};
MLCC_EXPORT ncclProfiler_v6_t ncclProfiler_v6 = {"mlcc", mlcc_init_v6, mlcc_start_v6, mlcc_stop,
                                                 mlcc_record_v4, mlcc_finalize};
