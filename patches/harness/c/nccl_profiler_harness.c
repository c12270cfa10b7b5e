/*
 * Replays, without NCCL or a GPU, the profiler events NCCL emits for a training step, so that an
 * NCCL profiler plugin can be tested against each NCCL version family's real call sequence.
 *
 *   nccl_profiler_harness PLUGIN.so VERSION      (VERSION 1..6: resolves ncclProfiler_v<VERSION>)
 *
 *   API  NCCL        sequence replayed from (tag, file:line)
 *   v1   2.23        v2.23.4-1  src/enqueue.cc:1432-1438, src/misc/profiler.cc, src/transport/net.cc
 *   v2   2.24-2.25   v2.25.1-1  src/enqueue.cc:1236-1242, src/misc/profiler.cc, src/transport/net.cc
 *   v3   2.26        v2.26.6-1  src/plugin/profiler.cc, src/transport/net.cc
 *   v4   2.27        v2.27.7-1  src/enqueue.cc:1283-1291, src/plugin/profiler.cc, src/proxy.cc:419,
 *                               src/transport/net.cc
 *   v5   2.28        v2.28.9-1  src/enqueue.cc:2464-2493 (API events), src/group.cc:666/754,
 *                               src/plugin/profiler.cc
 *   v6   2.29-2.30   v2.30.7-1  src/enqueue.cc:2699-2750, 1436-1444, src/plugin/profiler.cc,
 *                               src/ce_coll.cc:1367/1406, src/transport/net.cc
 *
 * Commands on stdin, one per line, each answered "ok ..." (or "err ..." and exit status 1):
 *
 *   init RANK NRANKS [NNODES]    a new communicator, made current (NNODES default 2; v1-v3 are
 *                                not told any of it); answers "ok comm=I mask=0x..."
 *   use I                        make communicator I current (calls below go to it)
 *   group_begin / group_end      an explicit ncclGroupStart / ncclGroupEnd
 *   coll FUNC COUNT TYPE ROOT SENT RECV
 *                                one collective call; SENT/RECV: the bytes its net-transport
 *                                proxy sub-ops move (the test's network model: 0 on one node);
 *                                FUNC AlltoAll, Gather, Scatter (v5+) become p2p tasks as in NCCL
 *   p2p Send|Recv COUNT TYPE PEER NET
 *                                ncclSend/ncclRecv; NET 1: the peer is on another node (the bytes
 *                                go through the net proxy), 0: intra-node (no proxy event)
 *   ce FUNC COUNT TYPE           a copy-engine collective (v6: zero-CTA policy, symmetric windows)
 *   defer on|off                 on: keep the proxy thread's events for later (the launch
 *                                returns before any byte moves, as in NCCL); off: emit at once
 *   progress                     emit the kept proxy events (the transfers happen)
 *   finalize                     finalize() the communicator
 *   replay                       a CUDA graph replay of the last plan: hostStreamPlanTask again
 *                                (its host node; 2.30.7 enqueue.cc:1703-1717, 1436-1444): Group,
 *                                Coll/P2p and proxy events, no API events (those came at capture,
 *                                from ncclEnqueueCheck, which a replay never calls)
 *   unload / load                dlclose / dlopen the plugin again, as NCCL does when its last
 *                                communicator is finalized and at the next init (2.30.7
 *                                plugin/profiler.cc:113-123, 46-96); the program starts loaded
 *   mark                         the application's explicit mark, as a training loop makes it:
 *                                mlcc_nccl_iteration_begin() from mlcc_nccl_iteration.h; answers
 *                                "ok R" with its return value
 *   mark_progress_h              the same through mlcc_iteration_begin() from mlcc_progress.h (this
 *                                program's own copy of the progress state; reaches no plugin)
 *
 * What the replay follows (all checked in the tags above):
 * - Activation mask: what init returned; v1-v2 read it once per group (2.23.4 misc/profiler.cc:247).
 * - Group event per kernel plan, with only `type` set (no rank), started when any of Group, Coll,
 *   P2p, ProxyOp, ProxyStep (v3+: KernelCh, NetPlugin; v5+: the API and Ce bits) are in the mask
 *   (2.23.4 misc/profiler.cc:249; 2.30.7 plugin/profiler.cc:456) — not only in group mode.
 * - v1-v4 start Coll/P2p events only under a non-NULL Group handle (2.23.4 misc/profiler.cc:272,
 *   2.27.7 plugin/profiler.cc:240/276); v5+ do not check it (2.30.7 plugin/profiler.cc:481).
 *   v1-v2's P2p events are gated by ProxyOp|ProxyStep|Coll, not P2p (2.23.4 misc/profiler.cc:271).
 * - Coll/P2p events stop right after they start, in hostStreamPlanTask, before any byte moves
 *   (2.23.4 enqueue.cc:1433-1438; 2.30.7 enqueue.cc:1437-1444). v1-v2 call stopEvent on every
 *   task handle, NULL included (2.23.4 misc/profiler.cc:334/339); v3+ skip NULL ones.
 * - AllGather and Broadcast tasks report count in bytes and datatype ncclInt8 (2.23.4
 *   enqueue.cc:2279-2281, 2.30.7 enqueue.cc:2733-2737).
 * - v5+: one GroupApi event per outermost group, started at the group's first call with
 *   groupDepth = ncclGroupDepth (1 for a standalone call, 2 inside ncclGroupStart; 2.30.7
 *   enqueue.cc:3137 and plugin/profiler.cc:287-293), GroupStartApiStop at once, CollApi events
 *   started and stopped in the call, GroupEndApiStart when the group ends, stop last.
 * - v6 Broadcast (NCCL_ALLGATHERV_ENABLE, read from the environment as NCCL does, default 1): an ncclTaskBcast converted back to a
 *   collective with activation mask 0 (2.30.7 enqueue.cc:2703-2722, 368-388): only its
 *   GroupApi/CollApi events; no Group, Coll or proxy events although its bytes do cross.
 * - Proxy events come from the proxy thread after the plan's events: v1-v3 only from the net
 *   transport (ProxyOp records with the sub-op's running transSize, never reset between ops:
 *   2.23.4 proxy.cc:362 leaves the memset commented out); v4+ ProxyOp from proxy.cc:419 for every
 *   proxy op, isSend only for the net send progress, ProxyStep events from net.cc with
 *   transSize = the step's size set before SendWait / RecvFlushWait and stale in the other states.
 *   Steps are replayed one after the other (NCCL pipelines up to NCCL_STEPS of them: the order of
 *   records within each step is kept).
 * - CeColl (v6): started and stopped around the launch (2.30.7 ce_coll.cc:1367/1406), parentObj
 *   the CollApi handle; no Group or proxy event is replayed for the CE plan (whether its task also
 *   shows as a Coll event was not checked; a CE collective is never an all-reduce
 *   (ce_coll.cc:99-104), so it would mark nothing).
 * A plan's collectives are replayed in call order (NCCL sorts them by traffic, enqueue.cc:392).
 */
#define _GNU_SOURCE /* mlcc_nccl_iteration.h: dl_iterate_phdr */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mlcc_nccl_profiler.h"
/* The application's side of explicit mode: this program is linked like a training binary (an
 * executable with -ldl) and loads the plugin exactly as NCCL does, RTLD_NOW | RTLD_LOCAL. */
#include "mlcc_nccl_iteration.h"
#include "mlcc_progress.h"

/* NCCL_BUFFSIZE 4 MiB / NCCL_STEPS 8: one SIMPLE-protocol network transfer. */
#define STEP_BYTES 524288u
#define MAX_TASKS 256

#define MAX_COMMS 8

static int version;
static void *profiler; /* ncclProfiler_vN_t* */
static void *ctx;      /* the current communicator's */
static int mask;
static int rank_ = -1;
static struct {
  void *ctx;
  int mask, rank;
} comms[MAX_COMMS];
static int ncomms;
static int explicit_group;
static void *group_api;     /* v5+ GroupApi handle of the current outermost group */
static int group_api_state; /* 0 none, 1 started, 2 GroupStartApiStop recorded */
static size_t sub_trans[2]; /* the proxy sub-ops' transSize, carried across ops as in NCCL */

enum { T_COLL, T_P2P, T_CE };
struct task {
  int kind;
  char func[32], type[32];
  size_t count;
  int root; /* coll: root; p2p: peer */
  unsigned long long sent, recv; /* bytes through the net proxy */
  int emask;                     /* the task's eActivationMask */
  void *api;                     /* its CollApi handle (v5+) */
  void *handle;                  /* its Coll/P2p event */
};
static struct task tasks[MAX_TASKS];
static int ntasks;
static struct task last_plan[MAX_TASKS]; /* the last plan launched, for `replay` */
static int nlast;
static int defer;
static struct {
  struct task t;
  int is_send;
  unsigned long long bytes;
} pending[MAX_TASKS * 2];
static int npending;

#define ACCESS(T) ((T *)profiler)

static void fail(const char *what) {
  printf("err %s\n", what);
  fflush(stdout);
  exit(1);
}

static int code_of_type(const char *s) {
  static const char *names[] = {"ncclInt8",    "ncclUint8",   "ncclInt32",   "ncclUint32",
                                "ncclInt64",   "ncclUint64",  "ncclFloat16", "ncclFloat32",
                                "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
  for (int i = 0; i < 12; i++)
    if (!strcmp(s, names[i])) return i;
  fail("unknown datatype");
  return -1;
}

static size_t size_of_type(const char *s) {
  static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return sizes[code_of_type(s)];
}

static int code_of_func(const char *s) {
  static const char *names[] = {"Broadcast", "Reduce",   "AllGather", "ReduceScatter",
                                "AllReduce", "SendRecv", "Send",      "Recv"};
  for (int i = 0; i < 8; i++)
    if (!strcmp(s, names[i])) return i;
  fail("unknown func");
  return -1;
}

/* ncclDatatypeToString has no case for ncclUint8 in any of these tags. */
static const char *name_of_type(const char *s) { return strcmp(s, "ncclUint8") ? s : "Unknown"; }

static void *start(void *descr) {
  void *h = NULL;
  if (ACCESS(ncclProfiler_v1_t)->startEvent(ctx, &h, descr) != ncclSuccess) fail("startEvent");
  return h;
}

static void stop_raw(void *h) {
  if (ACCESS(ncclProfiler_v1_t)->stopEvent(h) != ncclSuccess) fail("stopEvent");
}

static void stop(void *h) {
  if (h) stop_raw(h);
}

static void record(void *h, ncclProfilerEventState_t s, void *args) {
  if (h && ACCESS(ncclProfiler_v1_t)->recordEventState(h, s, args) != ncclSuccess)
    fail("recordEventState");
}

/* ---- v5+ API events ---- */
static void group_api_begin(int depth) {
  if (version < 5 || group_api_state) return;
  /* groupApiMask: every event type but ProxyCtrl (2.30.7 plugin/profiler.cc:281-284) */
  if (!(mask & ~ncclProfileProxyCtrl)) return;
  ncclProfilerEventDescr_v6_t d;
  memset(&d, 0, sizeof d);
  d.type = ncclProfileGroupApi;
  d.groupApi.groupDepth = depth;
  group_api = start(&d);
  group_api_state = 1;
  record(group_api, ncclProfilerGroupStartApiStop, NULL);
  group_api_state = 2;
}

static void *coll_api(const struct task *t) {
  if (version < 5 || !(mask & ncclProfileCollApi)) return NULL;
  ncclProfilerEventDescr_v6_t d;
  memset(&d, 0, sizeof d);
  d.type = ncclProfileCollApi;
  d.parentObj = group_api;
  d.rank = rank_;
  d.collApi.func = t->func;
  d.collApi.count = t->count;
  d.collApi.datatype = name_of_type(t->type);
  d.collApi.root = t->root;
  void *h = start(&d);
  stop(h); /* collTaskAppend stops it before returning (2.30.7 enqueue.cc:2750) */
  return h;
}

/* ---- proxy events (the proxy thread) ---- */
static void proxy_op(const struct task *t, int is_send, unsigned long long bytes) {
  int nsteps = (int)((bytes + STEP_BYTES - 1) / STEP_BYTES);
  if (!(t->emask & (ncclProfileProxyOp | ncclProfileProxyStep))) return;
  ncclProfilerEventDescr_v6_t d; /* the proxy members sit at the same offsets in every version */
  memset(&d, 0, sizeof d);
  d.type = ncclProfileProxyOp;
  d.parentObj = t->handle;
  d.rank = rank_;
  d.proxyOp.pid = getpid();
  d.proxyOp.channelId = 0;
  d.proxyOp.peer = (rank_ + (is_send ? 1 : -1) + 64) % 64;
  d.proxyOp.nSteps = nsteps;
  d.proxyOp.chunkSize = STEP_BYTES;
  d.proxyOp.isSend = is_send;
  if (version <= 4) {
    /* v1-v4 read the first byte of `type` (u8): a u64 1<<3 reads the same on little-endian */
    ncclProfilerEventDescr_v1_t *d1 = (ncclProfilerEventDescr_v1_t *)(void *)&d;
    d1->type = ncclProfileProxyOp;
  }
  void *op = start(&d);
  size_t *T = &sub_trans[is_send];
  if (version <= 3) {
    for (int s = 0; s < nsteps; s++) {
      size_t size = s + 1 < nsteps ? STEP_BYTES : (size_t)(bytes - (unsigned long long)s * STEP_BYTES);
      ncclProfilerEventStateArgs_v1_t a;
      memset(&a, 0, sizeof a);
#define REC(state)                                                                                 \
  do {                                                                                             \
    a.proxyOp.transSize = *T;                                                                      \
    a.proxyOp.steps = s + 1;                                                                       \
    record(op, state, &a);                                                                         \
  } while (0)
      if (is_send) { /* 2.23.4 net.cc:1085/1127/1136-1138/1169; 2.25.1 net.cc:1125-1204 */
        REC(ncclProfilerProxyOpSendPosted);
        REC(ncclProfilerProxyOpSendRemFifoWait);
        if (version == 1) {
          REC(ncclProfilerProxyOpSendTransmitted);
          *T += size;
        } else {
          *T += size;
          REC(ncclProfilerProxyOpSendTransmitted);
        }
        REC(ncclProfilerProxyOpSendDone);
      } else { /* 2.23.4 net.cc:1302/1346-1347/1404/1444 */
        REC(ncclProfilerProxyOpRecvPosted);
        *T += size;
        REC(ncclProfilerProxyOpRecvReceived);
        REC(ncclProfilerProxyOpRecvTransmitted);
        REC(ncclProfilerProxyOpRecvDone);
      }
#undef REC
    }
  } else {
    ncclProfilerEventStateArgs_v4_t none;
    memset(&none, 0, sizeof none);
    record(op, ncclProfilerProxyOpInProgress_v4, &none); /* 2.27.7 net.cc:1118/1296 */
    for (int s = 0; op && s < nsteps && (mask & ncclProfileProxyStep); s++) {
      size_t size = s + 1 < nsteps ? STEP_BYTES : (size_t)(bytes - (unsigned long long)s * STEP_BYTES);
      ncclProfilerEventDescr_v6_t sd;
      memset(&sd, 0, sizeof sd);
      sd.type = ncclProfileProxyStep;
      sd.parentObj = op;
      sd.rank = rank_;
      sd.proxyStep.step = s;
      if (version == 4) ((ncclProfilerEventDescr_v1_t *)(void *)&sd)->type = ncclProfileProxyStep;
      void *st = start(&sd);
      ncclProfilerEventStateArgs_v4_t a;
      memset(&a, 0, sizeof a);
#define REC(state)                                                                                 \
  do {                                                                                             \
    a.proxyStep.transSize = *T;                                                                    \
    record(st, state, &a);                                                                         \
  } while (0)
      if (is_send) { /* 2.30.7 net.cc:1353/1407/1422-1424/1444 */
        REC(ncclProfilerProxyStepSendGPUWait);
        REC(ncclProfilerProxyStepSendPeerWait_v4);
        *T = size;
        REC(ncclProfilerProxyStepSendWait);
      } else { /* 2.30.7 net.cc:1603/1632-1634/1707/1745 */
        REC(ncclProfilerProxyStepRecvWait);
        *T = size;
        REC(ncclProfilerProxyStepRecvFlushWait);
        REC(ncclProfilerProxyStepRecvGPUWait);
      }
#undef REC
      stop(st);
    }
  }
  stop(op);
}

/* ---- the plan: hostStreamPlanTask ---- */
static void *task_descr(struct task *t, ncclProfilerEventDescr_v1_t *d1,
                        ncclProfilerEventDescr_v2_t *d2, ncclProfilerEventDescr_v4_t *d4,
                        ncclProfilerEventDescr_v6_t *d6, void *group) {
  int coll = t->kind == T_COLL;
  const char *type = t->type;
  size_t count = t->count;
  if (coll && (!strcmp(t->func, "AllGather") || !strcmp(t->func, "Broadcast"))) {
    count *= size_of_type(type);
    type = "ncclInt8";
  }
  memset(d1, 0, sizeof *d1), memset(d2, 0, sizeof *d2), memset(d4, 0, sizeof *d4),
      memset(d6, 0, sizeof *d6);
  if (version == 1) {
    d1->type = coll ? ncclProfileColl : ncclProfileP2p;
    d1->parentObj = group;
    d1->rank = rank_;
    if (coll) {
      d1->coll.name = "harness";
      d1->coll.commHash = 0x1234;
      d1->coll.func = (uint8_t)code_of_func(t->func);
      d1->coll.count = count;
      d1->coll.root = t->root;
      d1->coll.datatype = (uint8_t)code_of_type(type);
      d1->coll.trafficBytes = count * size_of_type(type);
    } else {
      d1->p2p.name = "harness";
      d1->p2p.commHash = 0x1234;
      d1->p2p.func = (uint8_t)code_of_func(t->func);
      d1->p2p.count = count;
      d1->p2p.datatype = (uint8_t)code_of_type(type);
      d1->p2p.peer = t->root;
    }
    return d1;
  }
  if (version <= 3) {
    d2->type = coll ? ncclProfileColl : ncclProfileP2p;
    d2->parentObj = group;
    d2->rank = rank_;
    if (coll) {
      d2->coll.name = "harness";
      d2->coll.commHash = 0x1234;
      d2->coll.func = t->func;
      d2->coll.count = count;
      d2->coll.root = t->root;
      d2->coll.datatype = name_of_type(type);
    } else {
      d2->p2p.name = "harness";
      d2->p2p.commHash = 0x1234;
      d2->p2p.func = t->func;
      d2->p2p.count = count;
      d2->p2p.datatype = name_of_type(type);
      d2->p2p.peer = t->root;
    }
    return d2;
  }
  mlccNcclCollDescr_v4_t *c = version == 4 ? &d4->coll : &d6->coll.base;
  mlccNcclP2pDescr_v4_t *p = version == 4 ? &d4->p2p : &d6->p2p.base;
  if (coll) {
    c->func = t->func;
    c->count = count;
    c->root = t->root;
    c->datatype = name_of_type(type);
    c->nChannels = 1;
    c->algo = "RING";
    c->proto = "SIMPLE";
  } else {
    p->func = t->func;
    p->count = count;
    p->datatype = name_of_type(type);
    p->peer = t->root;
    p->nChannels = 1;
  }
  if (version == 4) {
    d4->type = coll ? ncclProfileColl : ncclProfileP2p;
    d4->parentObj = group;
    d4->rank = rank_;
    return d4;
  }
  d6->type = coll ? ncclProfileColl : ncclProfileP2p;
  d6->parentObj = t->api; /* v5+: the CollApi handle; the Group is parentGroup */
  d6->rank = rank_;
  if (coll) d6->coll.parentGroup = group;
  else d6->p2p.parentGroup = group;
  return d6;
}

static void run_plan(void) {
  int any = 0;
  for (int i = 0; i < ntasks; i++)
    if (tasks[i].kind != T_CE && tasks[i].emask) any = 1;
  if (any) {
    void *group = NULL;
    int gmask = ncclProfileGroup | ncclProfileColl | ncclProfileP2p | ncclProfileProxyOp |
                ncclProfileProxyStep;
    if (version >= 3) gmask |= ncclProfileKernelCh | ncclProfileNetPlugin;
    if (mask & gmask) {
      ncclProfilerEventDescr_v6_t g; /* only `type` is set (2.30.7 plugin/profiler.cc:458-460) */
      memset(&g, 0, sizeof g);
      g.type = ncclProfileGroup;
      group = start(&g);
    }
    for (int pass = 0; pass < 2; pass++) { /* collectives first, then p2p (as NCCL's queues) */
      for (int i = 0; i < ntasks; i++) {
        struct task *t = &tasks[i];
        if ((pass == 0) != (t->kind == T_COLL) || t->kind == T_CE || !t->emask) continue;
        int enable;
        if (version <= 2) enable = mask & (ncclProfileProxyOp | ncclProfileProxyStep | ncclProfileColl);
        else if (t->kind == T_COLL)
          enable = mask & (ncclProfileColl | ncclProfileProxyOp | ncclProfileProxyStep |
                           ncclProfileKernelCh | ncclProfileNetPlugin);
        else
          enable = mask & (ncclProfileP2p | ncclProfileProxyOp | ncclProfileProxyStep |
                           ncclProfileKernelCh | ncclProfileNetPlugin);
        t->handle = NULL;
        if (enable && (version >= 5 || group)) {
          ncclProfilerEventDescr_v1_t d1;
          ncclProfilerEventDescr_v2_t d2;
          ncclProfilerEventDescr_v4_t d4;
          ncclProfilerEventDescr_v6_t d6;
          t->handle = start(task_descr(t, &d1, &d2, &d4, &d6, group));
        }
      }
    }
    /* stop: v1-v2 every task's handle, NULL included, as long as the group started */
    for (int pass = 0; pass < 2; pass++)
      for (int i = 0; i < ntasks; i++) {
        struct task *t = &tasks[i];
        if ((pass == 0) != (t->kind == T_COLL) || t->kind == T_CE || !t->emask) continue;
        if (version <= 2) {
          if (group && (mask & (ncclProfileProxyOp | ncclProfileProxyStep | ncclProfileColl)))
            stop_raw(t->handle);
        } else {
          stop(t->handle);
        }
      }
    stop(group);
    for (int i = 0; i < ntasks; i++) {
      struct task *t = &tasks[i];
      if (t->kind == T_CE || !t->emask) continue;
      for (int dir = 1; dir >= 0; dir--) {
        unsigned long long b = dir ? t->sent : t->recv;
        if (!b) continue;
        if (!defer) {
          proxy_op(t, dir, b);
        } else {
          if (npending == MAX_TASKS * 2) fail("too many deferred proxy ops");
          pending[npending].t = *t;
          pending[npending].is_send = dir;
          pending[npending].bytes = b;
          npending++;
        }
      }
    }
  }
  for (int i = 0; i < ntasks; i++) {
    struct task *t = &tasks[i];
    if (t->kind != T_CE || !(mask & (ncclProfileCeColl | ncclProfileCeSync | ncclProfileCeBatch)))
      continue;
    ncclProfilerEventDescr_v6_t d;
    memset(&d, 0, sizeof d);
    d.type = ncclProfileCeColl;
    d.parentObj = t->api;
    d.rank = rank_;
    d.ceColl.func = t->func;
    d.ceColl.count = t->count * size_of_type(t->type); /* ceCollTaskAppend: bytes, ncclInt8 */
    d.ceColl.datatype = "ncclInt8";
    d.ceColl.root = t->root;
    stop(start(&d));
  }
  memcpy(last_plan, tasks, sizeof tasks[0] * (size_t)ntasks);
  nlast = ntasks;
  ntasks = 0;
}

static void group_end(void) {
  if (version >= 5 && group_api_state == 2) {
    record(group_api, ncclProfilerGroupEndApiStart, NULL);
    group_api_state = 3;
  }
  run_plan();
  if (version >= 5) {
    stop(group_api);
    group_api = NULL;
    group_api_state = 0;
  }
}

/* One API call that appends n tasks (AlltoAll/Gather/Scatter: several p2p tasks). */
static void call_tasks(struct task *ts, int n) {
  if (ntasks + n > MAX_TASKS) fail("too many tasks in one group");
  group_api_begin(explicit_group ? 2 : 1);
  for (int i = 0; i < n; i++) {
    struct task t = ts[i];
    t.emask = mask;
    if (t.kind != T_P2P) t.api = coll_api(&t);
    /* 2.29+: a Broadcast becomes an ncclTaskBcast and comes back with mask 0, unless
     * NCCL_ALLGATHERV_ENABLE=0 (2.30.7 enqueue.cc:2703) */
    const char *agv = getenv("NCCL_ALLGATHERV_ENABLE");
    if (version >= 6 && t.kind == T_COLL && !strcmp(t.func, "Broadcast") &&
        !(agv && *agv && atoi(agv) == 0))
      t.emask = 0;
    tasks[ntasks++] = t;
  }
  if (!explicit_group) group_end();
}

static void call(struct task t) { call_tasks(&t, 1); }

static int is_p2p_coll(const char *f) {
  return !strcmp(f, "AlltoAll") || !strcmp(f, "Gather") || !strcmp(f, "Scatter");
}

static void init(int rank, int nranks, int nnodes) {
  ncclResult_t r;
  if (ncomms == MAX_COMMS) fail("too many communicators");
  ctx = NULL;
  rank_ = rank;
  mask = 0;
  switch (version) {
  case 1: r = ACCESS(ncclProfiler_v1_t)->init(&ctx, &mask); break;
  case 2: r = ACCESS(ncclProfiler_v2_t)->init(&ctx, &mask); break;
  case 3: r = ACCESS(ncclProfiler_v3_t)->init(&ctx, &mask); break;
  case 4:
    r = ACCESS(ncclProfiler_v4_t)->init(&ctx, &mask, "harness", 0x1234, nnodes, nranks, rank, NULL);
    break;
  default:
    r = ACCESS(ncclProfiler_v5_t)->init(&ctx, 0x1234, &mask, "harness", nnodes, nranks, rank, NULL);
    break;
  }
  if (r != ncclSuccess) fail("init");
  comms[ncomms].ctx = ctx;
  comms[ncomms].mask = mask;
  comms[ncomms].rank = rank;
  ncomms++;
}

static void *lib;

/* As NCCL opens it: dlopen(name, RTLD_NOW | RTLD_LOCAL) (2.23.4 misc/profiler.cc:32, 2.30.7
 * os/linux.cc:52), then the newest ncclProfiler_v<N> it knows. */
static void load(const char *name) {
  lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    printf("err dlopen: %s\n", dlerror());
    exit(1);
  }
  char sym[32];
  snprintf(sym, sizeof sym, "ncclProfiler_v%d", version);
  profiler = dlsym(lib, sym);
  if (!profiler) fail("symbol not found");
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s PLUGIN.so VERSION\n", argv[0]);
    return 2;
  }
  version = atoi(argv[2]);
  if (version < 1 || version > 6) fail("version must be 1..6");
  load(argv[1]);
  printf("ok loaded ncclProfiler_v%d name=%s\n", version, ACCESS(ncclProfiler_v1_t)->name);
  fflush(stdout);

  char line[256];
  while (fgets(line, sizeof line, stdin)) {
    char cmd[32] = "";
    struct task t;
    memset(&t, 0, sizeof t);
    unsigned long long n = 0;
    if (sscanf(line, "%31s", cmd) != 1) continue;
    if (!strcmp(cmd, "init")) {
      int r = 0, nr = 0, nn = 2;
      if (sscanf(line, "%*s %d %d %d", &r, &nr, &nn) < 2) fail("init RANK NRANKS [NNODES]");
      if (explicit_group) fail("init inside a group");
      init(r, nr, nn);
      printf("ok comm=%d mask=0x%x\n", ncomms - 1, mask);
    } else if (!strcmp(cmd, "use")) {
      int i = -1;
      if (sscanf(line, "%*s %d", &i) != 1 || i < 0 || i >= ncomms) fail("use I");
      if (explicit_group) fail("use inside a group (one communicator per group here)");
      ctx = comms[i].ctx;
      mask = comms[i].mask;
      rank_ = comms[i].rank;
      printf("ok\n");
    } else if (!strcmp(cmd, "group_begin")) {
      explicit_group = 1;
      printf("ok\n");
    } else if (!strcmp(cmd, "group_end")) {
      explicit_group = 0;
      group_end();
      printf("ok\n");
    } else if (!strcmp(cmd, "coll")) {
      if (sscanf(line, "%*s %31s %llu %31s %d %llu %llu", t.func, &n, t.type, &t.root, &t.sent,
                 &t.recv) != 6)
        fail("coll FUNC COUNT TYPE ROOT SENT RECV");
      t.kind = T_COLL;
      t.count = (size_t)n;
      code_of_type(t.type);
      if (is_p2p_coll(t.func)) {
        /* 2.28+ (v5+): ncclAlltoAll/Gather/Scatter append one p2p task per peer and direction,
         * with ncclEnqueueCheck's per-peer count (2.30.7 enqueue.cc:3070-3109, 2.28.9
         * enqueue.cc:2585); replayed as one Send and one Recv task carrying the bytes that go to
         * and come from the remote peers (the own rank's chunk is a local copy). */
        if (version < 5) fail("AlltoAll/Gather/Scatter came with NCCL 2.28 (v5)");
        struct task pt[2] = {t, t};
        for (int i = 0; i < 2; i++) pt[i].kind = T_P2P;
        strcpy(pt[0].func, "Send"), strcpy(pt[1].func, "Recv");
        pt[0].recv = 0, pt[1].sent = 0;
        call_tasks(pt, 2);
      } else {
        code_of_func(t.func);
        call(t);
      }
      printf("ok\n");
    } else if (!strcmp(cmd, "p2p")) {
      int net = 0;
      if (sscanf(line, "%*s %31s %llu %31s %d %d", t.func, &n, t.type, &t.root, &net) != 5)
        fail("p2p Send|Recv COUNT TYPE PEER NET");
      t.kind = T_P2P;
      t.count = (size_t)n;
      unsigned long long bytes = net ? n * size_of_type(t.type) : 0;
      if (!strcmp(t.func, "Send")) t.sent = bytes;
      else if (!strcmp(t.func, "Recv")) t.recv = bytes;
      else fail("p2p Send|Recv");
      call(t);
      printf("ok\n");
    } else if (!strcmp(cmd, "ce")) {
      if (version < 6) fail("copy-engine collectives need v6");
      if (sscanf(line, "%*s %31s %llu %31s", t.func, &n, t.type) != 3) fail("ce FUNC COUNT TYPE");
      t.kind = T_CE;
      t.count = (size_t)n;
      size_of_type(t.type);
      call(t);
      printf("ok\n");
    } else if (!strcmp(cmd, "defer")) {
      char on[8] = "";
      if (sscanf(line, "%*s %7s", on) != 1) fail("defer on|off");
      defer = !strcmp(on, "on");
      printf("ok\n");
    } else if (!strcmp(cmd, "progress")) {
      for (int i = 0; i < npending; i++)
        proxy_op(&pending[i].t, pending[i].is_send, pending[i].bytes);
      npending = 0;
      printf("ok\n");
    } else if (!strcmp(cmd, "replay")) {
      if (explicit_group) fail("replay inside a group");
      memcpy(tasks, last_plan, sizeof tasks[0] * (size_t)nlast);
      ntasks = nlast;
      run_plan();
      printf("ok\n");
    } else if (!strcmp(cmd, "unload")) {
      if (!lib) fail("not loaded");
      dlclose(lib);
      lib = NULL, profiler = NULL, ctx = NULL, ncomms = 0;
      printf("ok\n");
    } else if (!strcmp(cmd, "load")) {
      if (lib) fail("loaded");
      load(argv[1]);
      printf("ok\n");
    } else if (!strcmp(cmd, "mark")) {
      printf("ok %d\n", mlcc_nccl_iteration_begin());
    } else if (!strcmp(cmd, "mark_progress_h")) {
      mlcc_iteration_begin();
      printf("ok\n");
    } else if (!strcmp(cmd, "finalize")) {
      if (ACCESS(ncclProfiler_v1_t)->finalize(ctx) != ncclSuccess) fail("finalize");
      printf("ok\n");
    } else {
      fail("unknown command");
    }
    fflush(stdout);
  }
  return 0;
}
