/*
 * libnccl-profiler-mlcc.so — an NCCL profiler plugin that writes mlcc's progress file
 * (DESIGN.md §9, §13) from stock NCCL ≥ 2.23, no NCCL patch needed.
 *
 *   NCCL_PROFILER_PLUGIN=libnccl-profiler-mlcc.so MLCC_JOB_ID=job42 MLCC_JOB_ARCH=allreduce \
 *   MLCC_MODEL_BYTES=... python train.py
 *
 * What it counts (the same as patches/nccl's ncclEnqueueCheck hook): every collective task adds
 * count × sizeof(datatype) to bytes_sent when it starts and to bytes_received when it stops; a
 * Send task adds to bytes_sent, a Recv task to bytes_received.
 *
 * Iterations (MLCC_NCCL_ITERATION):
 *   first-coll (default)  the first all-reduce ever seen is identified by (count, datatype), and
 *                         every later all-reduce with the same signature starts an iteration
 *                         (mlcc_progress_add_tagged): DDP and Horovod reduce gradient buckets in
 *                         the same order every step.
 *   group                 every kernel plan (v1–v4 Group event) or outermost
 *                         ncclGroupStart/ncclGroupEnd (v5+ GroupApi event) starts an iteration:
 *                         for frameworks that issue a whole step's collectives in one group.
 *   explicit              no marks (the application calls mlcc_iteration_begin() itself).
 *
 * The progress file is opened at the first communicator's init (v4+: with its rank and size)
 * or at the first collective (v1–v3: with the rank NCCL puts in the event) — MLCC_RANK
 * overrides the rank — and closed when the last communicator is finalized.
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
enum { MLCC_EV_COLL = 1, MLCC_EV_MARKER = 2 };
#define MLCC_EV_MAGIC 0x6d6c6363u /* "mlcc" */

struct mlcc_event {
  uint32_t magic;
  uint32_t kind;
  uint64_t bytes;
};

/* Handed out for Group / GroupApi events so NCCL has a non-NULL parent; never freed. */
static struct mlcc_event mlcc_marker_event = {MLCC_EV_MAGIC, MLCC_EV_MARKER, 0};

static pthread_mutex_t mlcc_mu = PTHREAD_MUTEX_INITIALIZER;
static int mlcc_comms;      /* live contexts (communicators) */
static int mlcc_iter_mode;
static int mlcc_tried_open; /* one attempt per process lifetime of the file */
static int mlcc_pending_mark; /* v1–v3 group mode: a Group event came before the file opened */

static int mlcc_ctx_token; /* init's *context points here: NCCL only needs it non-NULL */

static int mlcc_env_iteration_mode(void) {
  const char *s = getenv("MLCC_NCCL_ITERATION");
  if (!s || !*s || !strcmp(s, "first-coll")) return MLCC_ITER_FIRST_COLL;
  if (!strcmp(s, "group")) return MLCC_ITER_GROUP;
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
  if (mlcc_pending_mark) mlcc_iteration_begin();
  mlcc_pending_mark = 0;
}

static void mlcc_open_lazily(int rank) {
  if (mlcc_progress_state_.open || mlcc_tried_open) return;
  pthread_mutex_lock(&mlcc_mu);
  mlcc_open_locked(rank, -1);
  pthread_mutex_unlock(&mlcc_mu);
}

static ncclResult_t mlcc_init_common(void **context, int *mask, int version, int rank,
                                     int nranks) {
  pthread_mutex_lock(&mlcc_mu);
  if (mlcc_comms++ == 0) mlcc_iter_mode = mlcc_env_iteration_mode();
  if (rank >= 0) mlcc_open_locked(rank, nranks);
  pthread_mutex_unlock(&mlcc_mu);
  int m = ncclProfileColl | ncclProfileP2p;
  if (mlcc_iter_mode == MLCC_ITER_GROUP) m |= version >= 5 ? ncclProfileGroupApi : ncclProfileGroup;
  *mask = m;
  *context = &mlcc_ctx_token;
  return ncclSuccess;
}

static ncclResult_t mlcc_finalize(void *context) {
  (void)context;
  pthread_mutex_lock(&mlcc_mu);
  if (mlcc_comms > 0 && --mlcc_comms == 0) {
    mlcc_progress_close();
    mlcc_tried_open = 0;
    mlcc_pending_mark = 0;
  }
  pthread_mutex_unlock(&mlcc_mu);
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

static uint64_t mlcc_signature(uint64_t count, uint64_t type_size) {
  /* FNV-1a over the two numbers: a tag only has to be stable within the process. */
  uint64_t h = 1469598103934665603ull;
  uint64_t v[2] = {count, type_size};
  const unsigned char *p = (const unsigned char *)v;
  for (size_t i = 0; i < sizeof v; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/* A collective task started: count it and hand NCCL a handle for its stop. */
static void mlcc_coll_start(void **eHandle, int rank, int is_allreduce, uint64_t count,
                            size_t type_size) {
  mlcc_open_lazily(rank);
  uint64_t bytes = count * (uint64_t)type_size;
  if (is_allreduce && mlcc_iter_mode == MLCC_ITER_FIRST_COLL) {
    mlcc_progress_add_tagged(MLCC_DIR_SEND, mlcc_signature(count, type_size), bytes);
  } else {
    mlcc_progress_add(MLCC_DIR_SEND, bytes);
  }
  struct mlcc_event *ev = (struct mlcc_event *)malloc(sizeof *ev);
  if (ev) {
    ev->magic = MLCC_EV_MAGIC;
    ev->kind = MLCC_EV_COLL;
    ev->bytes = bytes;
  }
  *eHandle = ev;
}

static void mlcc_p2p(int rank, int is_send, int is_recv, uint64_t count, size_t type_size) {
  mlcc_open_lazily(rank);
  uint64_t bytes = count * (uint64_t)type_size;
  if (is_send) mlcc_progress_add(MLCC_DIR_SEND, bytes);
  if (is_recv) mlcc_progress_add(MLCC_DIR_RECV, bytes);
}

static void mlcc_marker(void **eHandle) {
  if (mlcc_iter_mode == MLCC_ITER_GROUP) {
    pthread_mutex_lock(&mlcc_mu);
    /* v1–v3 open at the first task (Group events carry no rank): keep the mark until then */
    if (mlcc_progress_state_.open) {
      mlcc_iteration_begin();
    } else {
      mlcc_pending_mark = 1;
    }
    pthread_mutex_unlock(&mlcc_mu);
  }
  *eHandle = &mlcc_marker_event;
}

static ncclResult_t mlcc_stop(void *eHandle) {
  struct mlcc_event *ev = (struct mlcc_event *)eHandle;
  if (!ev || ev->magic != MLCC_EV_MAGIC || ev->kind != MLCC_EV_COLL) return ncclSuccess;
  mlcc_progress_add(MLCC_DIR_RECV, ev->bytes);
  ev->magic = 0;
  free(ev);
  return ncclSuccess;
}

static ncclResult_t mlcc_record(void *eHandle, ncclProfilerEventState_t state, void *args) {
  (void)eHandle, (void)state, (void)args;
  return ncclSuccess;
}

/* ---- v1: enum codes ---- */
static ncclResult_t mlcc_init_v1(void **context, int *mask) {
  return mlcc_init_common(context, mask, 1, -1, -1);
}
static ncclResult_t mlcc_start_v1(void *ctx, void **eHandle, ncclProfilerEventDescr_v1_t *d) {
  (void)ctx;
  *eHandle = NULL;
  if (d->type == ncclProfileColl) {
    mlcc_coll_start(eHandle, d->rank, d->coll.func == mlccNcclFuncAllReduce, d->coll.count,
                    mlcc_type_size_code(d->coll.datatype));
  } else if (d->type == ncclProfileP2p) {
    mlcc_p2p(d->rank, d->p2p.func == mlccNcclFuncSend, d->p2p.func == mlccNcclFuncRecv,
             d->p2p.count, mlcc_type_size_code(d->p2p.datatype));
  } else if (d->type == ncclProfileGroup) {
    mlcc_marker(eHandle);
  }
  return ncclSuccess;
}

/* ---- v2, v3: names ---- */
static int mlcc_is(const char *s, const char *want) { return s && !strcmp(s, want); }

static ncclResult_t mlcc_init_v2(void **context, int *mask) {
  return mlcc_init_common(context, mask, 2, -1, -1);
}
static ncclResult_t mlcc_start_v2(void *ctx, void **eHandle, ncclProfilerEventDescr_v2_t *d) {
  (void)ctx;
  *eHandle = NULL;
  if (d->type == ncclProfileColl) {
    mlcc_coll_start(eHandle, d->rank, mlcc_is(d->coll.func, "AllReduce"), d->coll.count,
                    mlcc_type_size_name(d->coll.datatype));
  } else if (d->type == ncclProfileP2p) {
    mlcc_p2p(d->rank, mlcc_is(d->p2p.func, "Send"), mlcc_is(d->p2p.func, "Recv"), d->p2p.count,
             mlcc_type_size_name(d->p2p.datatype));
  } else if (d->type == ncclProfileGroup) {
    mlcc_marker(eHandle);
  }
  return ncclSuccess;
}

/* ---- v4 ---- */
static ncclResult_t mlcc_init_v4(void **context, int *mask, const char *commName,
                                 uint64_t commHash, int nNodes, int nranks, int rank,
                                 ncclDebugLogger_t logfn) {
  (void)commName, (void)commHash, (void)nNodes, (void)logfn;
  return mlcc_init_common(context, mask, 4, rank, nranks);
}
static ncclResult_t mlcc_start_v4(void *ctx, void **eHandle, ncclProfilerEventDescr_v4_t *d) {
  (void)ctx;
  *eHandle = NULL;
  if (d->type == ncclProfileColl) {
    mlcc_coll_start(eHandle, d->rank, mlcc_is(d->coll.func, "AllReduce"), d->coll.count,
                    mlcc_type_size_name(d->coll.datatype));
  } else if (d->type == ncclProfileP2p) {
    mlcc_p2p(d->rank, mlcc_is(d->p2p.func, "Send"), mlcc_is(d->p2p.func, "Recv"), d->p2p.count,
             mlcc_type_size_name(d->p2p.datatype));
  } else if (d->type == ncclProfileGroup) {
    mlcc_marker(eHandle);
  }
  return ncclSuccess;
}

/* ---- v5, v6 ---- */
static ncclResult_t mlcc_init_v5(void **context, uint64_t commId, int *mask, const char *commName,
                                 int nNodes, int nranks, int rank, ncclDebugLogger_t logfn) {
  (void)commId, (void)commName, (void)nNodes, (void)logfn;
  return mlcc_init_common(context, mask, 5, rank, nranks);
}
static ncclResult_t mlcc_start_v5(void *ctx, void **eHandle, ncclProfilerEventDescr_v5_t *d) {
  (void)ctx;
  *eHandle = NULL;
  if (d->type == ncclProfileColl) {
    mlcc_coll_start(eHandle, d->rank, mlcc_is(d->coll.base.func, "AllReduce"),
                    d->coll.base.count, mlcc_type_size_name(d->coll.base.datatype));
  } else if (d->type == ncclProfileP2p) {
    mlcc_p2p(d->rank, mlcc_is(d->p2p.base.func, "Send"), mlcc_is(d->p2p.base.func, "Recv"),
             d->p2p.base.count, mlcc_type_size_name(d->p2p.base.datatype));
  } else if (d->type == ncclProfileGroupApi) {
    mlcc_marker(eHandle);
  }
  return ncclSuccess;
}

MLCC_EXPORT ncclProfiler_v1_t ncclProfiler_v1 = {"mlcc", mlcc_init_v1, mlcc_start_v1, mlcc_stop,
                                                 mlcc_record, mlcc_finalize};
MLCC_EXPORT ncclProfiler_v2_t ncclProfiler_v2 = {"mlcc", mlcc_init_v2, mlcc_start_v2, mlcc_stop,
                                                 mlcc_record, mlcc_finalize};
MLCC_EXPORT ncclProfiler_v3_t ncclProfiler_v3 = {"mlcc", mlcc_init_v2, mlcc_start_v2, mlcc_stop,
                                                 mlcc_record, mlcc_finalize};
MLCC_EXPORT ncclProfiler_v4_t ncclProfiler_v4 = {"mlcc", mlcc_init_v4, mlcc_start_v4, mlcc_stop,
                                                 mlcc_record, mlcc_finalize};
MLCC_EXPORT ncclProfiler_v5_t ncclProfiler_v5 = {"mlcc", mlcc_init_v5, mlcc_start_v5, mlcc_stop,
                                                 mlcc_record, mlcc_finalize};
MLCC_EXPORT ncclProfiler_v6_t ncclProfiler_v6 = {"mlcc", mlcc_init_v5, mlcc_start_v5, mlcc_stop,
                                                 mlcc_record, mlcc_finalize};
