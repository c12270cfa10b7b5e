/*
 * mlcc_nccl_profiler.h — the part of NCCL's profiler plugin interface that mlcc's plugin uses,
 * written from NCCL's documented plugin ABI (plugins/profiler/README.md and the versioned
 * descriptors in NCCL's plugins/profiler/example/nccl/profiler_v*.h). Only the fields the plugin
 * and its test harness touch are declared; every struct keeps NCCL's layout up to its last
 * declared member (checked by the static asserts at the end, against NCCL v2.23.4-1 … v2.30.7-1).
 *
 * NCCL looks for the newest symbol it knows, ncclProfiler_v6 first, down to ncclProfiler_v1:
 *
 *   version  symbol            first NCCL  init(...) arguments                      descriptor
 *   v1       ncclProfiler_v1   2.23        (ctx, mask)                              type u8; coll.func/datatype are enum codes (u8)
 *   v2       ncclProfiler_v2   2.24        (ctx, mask)                              type u8; func/datatype are strings; coll.trafficBytes
 *   v3       ncclProfiler_v3   2.26        (ctx, mask)                              type u8; no trafficBytes; kernelCh, netPlugin events
 *   v4       ncclProfiler_v4   2.27        (ctx, mask, commName, commHash, nNodes,  type u8; coll/p2p lose name and commHash
 *                                           nranks, rank, logfn)
 *   v5       ncclProfiler_v5   2.28        (ctx, commId, mask, commName, nNodes,    type u64; GroupApi/CollApi/P2pApi/KernelLaunch events
 *                                           nranks, rank, logfn)
 *   v6       ncclProfiler_v6   2.29        same as v5                               adds copy-engine (Ce*) events
 *
 * Every version: startEvent(ctx, &handle, descr) may leave handle NULL for events the plugin does
 * not track (NCCL then records nothing on it and starts no child events under it, but 2.23-2.25
 * still call stopEvent(NULL) for Coll/P2p: 2.23.4 src/misc/profiler.cc:334/339); stopEvent(handle);
 * recordEventState(handle, state, args); finalize(ctx). init is called once per communicator and
 * may set *ctx, which NCCL passes to every startEvent of that communicator, proxy thread included.
 */
#ifndef MLCC_NCCL_PROFILER_H
#define MLCC_NCCL_PROFILER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6
} ncclResult_t;

typedef void (*ncclDebugLogger_t)(int level, unsigned long flags, const char *file, int line,
                                  const char *fmt, ...);

/* Event types (bit flags; the activation mask is their OR). */
enum {
  ncclProfileGroup = 1 << 0,    /* one per kernel plan (ncclGroupEnd may launch several) */
  ncclProfileColl = 1 << 1,     /* a collective task */
  ncclProfileP2p = 1 << 2,      /* a send or receive task */
  ncclProfileProxyOp = 1 << 3,
  ncclProfileProxyStep = 1 << 4,
  ncclProfileProxyCtrl = 1 << 5,
  ncclProfileKernelCh = 1 << 6, /* v3+ */
  ncclProfileNetPlugin = 1 << 7,
  ncclProfileGroupApi = 1 << 8, /* v5+: the outermost ncclGroupStart..ncclGroupEnd (or an implicit one) */
  ncclProfileCollApi = 1 << 9,
  ncclProfileP2pApi = 1 << 10,
  ncclProfileKernelLaunch = 1 << 11,
  ncclProfileCeColl = 1 << 12,  /* v6: a copy-engine collective, instead of a Coll event */
  ncclProfileCeSync = 1 << 13,
  ncclProfileCeBatch = 1 << 14,
};

/* The states NCCL records on events the plugin handles (a subset). */
typedef enum {
  /* v1-v3 ProxyOp states; eStateArgs->proxyOp.transSize is the sub-op's running byte count */
  ncclProfilerProxyOpSendPosted = 0,
  ncclProfilerProxyOpSendRemFifoWait = 1,
  ncclProfilerProxyOpSendTransmitted = 2,
  ncclProfilerProxyOpSendDone = 3,
  ncclProfilerProxyOpRecvPosted = 4,
  ncclProfilerProxyOpRecvReceived = 5,
  ncclProfilerProxyOpRecvTransmitted = 6,
  ncclProfilerProxyOpRecvDone = 7,
  /* ProxyStep states; from v4 eStateArgs->proxyStep.transSize is the step's size */
  ncclProfilerProxyStepSendGPUWait = 8,
  ncclProfilerProxyStepSendWait = 9,
  ncclProfilerProxyStepRecvWait = 10,
  ncclProfilerProxyStepRecvFlushWait = 11,
  ncclProfilerProxyStepRecvGPUWait = 12,
  ncclProfilerProxyCtrlAppendEnd = 18,
  ncclProfilerProxyOpInProgress_v4 = 19,
  ncclProfilerProxyStepSendPeerWait_v4 = 20,
  ncclProfilerKernelChStop = 22,
  ncclProfilerGroupStartApiStop = 23, /* v5+: on the GroupApi event at ncclGroupStart's return */
  ncclProfilerGroupEndApiStart = 24,  /* v5+: on the GroupApi event when ncclGroupEnd begins */
  ncclProfilerCeCollStart = 25,       /* v6 */
  ncclProfilerCeCollComplete = 26,
} ncclProfilerEventState_t;

/* The proxy members every version's descriptor union has (v1-v6, same layout). */
typedef struct {
  pid_t pid;
  uint8_t channelId;
  int peer;
  int nSteps;
  int chunkSize;
  int isSend; /* v1-v3: set by the net transport's send/recv progress; v4+: 1 for the net send
                 progress, 0 for every other proxy progress (net receive, but also others) */
} mlccNcclProxyOpDescr_t;
typedef struct {
  int step;
} mlccNcclProxyStepDescr_t;

/* State arguments (the pointer NCCL passes to recordEventState). */
typedef union {
  struct {
    size_t transSize;
    int steps;
  } proxyOp;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
} ncclProfilerEventStateArgs_v1_t; /* v1-v3 */
typedef union {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void *data;
  } netPlugin;
  struct {
    uint64_t pTimer;
  } kernelCh;
} ncclProfilerEventStateArgs_v4_t; /* v4-v6 */

/* NCCL's ncclDataType_t codes (v1 passes these; v2+ pass ncclDatatypeToString's names). */
enum {
  mlccNcclInt8 = 0, mlccNcclUint8 = 1, mlccNcclInt32 = 2, mlccNcclUint32 = 3, mlccNcclInt64 = 4,
  mlccNcclUint64 = 5, mlccNcclFloat16 = 6, mlccNcclFloat32 = 7, mlccNcclFloat64 = 8,
  mlccNcclBfloat16 = 9, mlccNcclFloat8e4m3 = 10, mlccNcclFloat8e5m2 = 11
};
/* NCCL's ncclFunc_t codes (v1 passes these; v2+ pass ncclFuncToString's names). */
enum {
  mlccNcclFuncBroadcast = 0, mlccNcclFuncReduce = 1, mlccNcclFuncAllGather = 2,
  mlccNcclFuncReduceScatter = 3, mlccNcclFuncAllReduce = 4, mlccNcclFuncSendRecv = 5,
  mlccNcclFuncSend = 6, mlccNcclFuncRecv = 7
};

/* ---- v1 (NCCL 2.23) ---- */
typedef struct {
  uint8_t type;
  void *parentObj;
  int rank;
  union {
    struct {
      const char *name;
      uint64_t commHash;
      uint64_t seqNumber;
      uint8_t func;
      const void *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      uint8_t datatype;
      uint32_t op;
      size_t trafficBytes;
    } coll;
    struct {
      const char *name;
      uint64_t commHash;
      uint8_t func;
      void *buff;
      uint8_t datatype;
      size_t count;
      int peer;
    } p2p;
    mlccNcclProxyOpDescr_t proxyOp;
    mlccNcclProxyStepDescr_t proxyStep;
  };
} ncclProfilerEventDescr_v1_t;

/* ---- v2 (2.24) and v3 (2.26): strings for func and datatype ---- */
typedef struct {
  uint8_t type;
  void *parentObj;
  int rank;
  union {
    struct {
      const char *name;
      uint64_t commHash;
      uint64_t seqNumber;
      const char *func;
      const void *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      const char *datatype;
    } coll; /* v2 continues with trafficBytes, v3 with nMaxChannels: neither is used */
    struct {
      const char *name;
      uint64_t commHash;
      const char *func;
      void *buff;
      const char *datatype;
      size_t count;
      int peer;
    } p2p;
    mlccNcclProxyOpDescr_t proxyOp;
    mlccNcclProxyStepDescr_t proxyStep;
  };
} ncclProfilerEventDescr_v2_t;
typedef ncclProfilerEventDescr_v2_t ncclProfilerEventDescr_v3_t;

/* ---- v4 (2.27): type still u8, coll and p2p lose name and commHash ---- */
typedef struct {
  uint64_t seqNumber;
  const char *func;
  const void *sendBuff;
  void *recvBuff;
  size_t count;
  int root;
  const char *datatype;
  uint8_t nChannels;
  uint8_t nWarps;
  const char *algo;
  const char *proto;
} mlccNcclCollDescr_v4_t;
typedef struct {
  const char *func;
  void *buff;
  const char *datatype;
  size_t count;
  int peer;
  uint8_t nChannels;
} mlccNcclP2pDescr_v4_t;

typedef struct {
  uint8_t type;
  void *parentObj;
  int rank;
  union {
    mlccNcclCollDescr_v4_t coll;
    mlccNcclP2pDescr_v4_t p2p;
    mlccNcclProxyOpDescr_t proxyOp;
    mlccNcclProxyStepDescr_t proxyStep;
  };
} ncclProfilerEventDescr_v4_t;

/* ---- v5 (2.28) and v6 (2.29): type is u64; API-level events; coll/p2p add parentGroup ---- */
#define MLCC_NCCL_DESCR_V5_MEMBERS_                                                              \
  struct {                                                                                       \
    bool graphCaptured;                                                                          \
    int groupDepth; /* ncclGroupDepth at the first call: 1 standalone, >= 2 in ncclGroupStart */ \
  } groupApi;                                                                                    \
  struct {                                                                                       \
    const char *func;                                                                            \
    size_t count;                                                                                \
    const char *datatype;                                                                        \
    int root;                                                                                    \
    void *stream;                                                                                \
    bool graphCaptured;                                                                          \
  } collApi;                                                                                     \
  struct {                                                                                       \
    mlccNcclCollDescr_v4_t base; /* same fields as v4 ... */                                     \
    void *parentGroup;           /* ... then the Group event handle */                           \
  } coll;                                                                                        \
  struct {                                                                                       \
    mlccNcclP2pDescr_v4_t base;                                                                  \
    void *parentGroup;                                                                           \
  } p2p;                                                                                         \
  mlccNcclProxyOpDescr_t proxyOp;                                                                \
  mlccNcclProxyStepDescr_t proxyStep;

typedef struct {
  uint64_t type;
  void *parentObj;
  int rank;
  union {
    MLCC_NCCL_DESCR_V5_MEMBERS_
  };
} ncclProfilerEventDescr_v5_t;

typedef struct {
  uint64_t type;
  void *parentObj;
  int rank;
  union {
    MLCC_NCCL_DESCR_V5_MEMBERS_
    struct {
      uint64_t seqNumber;
      const char *func;
      const void *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      const char *datatype;
    } ceColl; /* v6 continues with syncStrategy, batch fields and stream: not used */
  };
} ncclProfilerEventDescr_v6_t;

/* recordEventState's last argument: ncclProfilerEventStateArgs_v1_t (v1-v3) or _v4_t (v4-v6). */
typedef void ncclProfilerEventStateArgs_t;

#define MLCC_NCCL_PROFILER_COMMON_(descr_t)                                                       \
  ncclResult_t (*startEvent)(void *context, void **eHandle, descr_t *eDescr);                    \
  ncclResult_t (*stopEvent)(void *eHandle);                                                       \
  ncclResult_t (*recordEventState)(void *eHandle, ncclProfilerEventState_t eState,               \
                                   ncclProfilerEventStateArgs_t *eStateArgs);                    \
  ncclResult_t (*finalize)(void *context);

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **context, int *eActivationMask);
  MLCC_NCCL_PROFILER_COMMON_(ncclProfilerEventDescr_v1_t)
} ncclProfiler_v1_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **context, int *eActivationMask);
  MLCC_NCCL_PROFILER_COMMON_(ncclProfilerEventDescr_v2_t)
} ncclProfiler_v2_t;
typedef ncclProfiler_v2_t ncclProfiler_v3_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **context, int *eActivationMask, const char *commName,
                       uint64_t commHash, int nNodes, int nranks, int rank,
                       ncclDebugLogger_t logfn);
  MLCC_NCCL_PROFILER_COMMON_(ncclProfilerEventDescr_v4_t)
} ncclProfiler_v4_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **context, uint64_t commId, int *eActivationMask,
                       const char *commName, int nNodes, int nranks, int rank,
                       ncclDebugLogger_t logfn);
  MLCC_NCCL_PROFILER_COMMON_(ncclProfilerEventDescr_v5_t)
} ncclProfiler_v5_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **context, uint64_t commId, int *eActivationMask,
                       const char *commName, int nNodes, int nranks, int rank,
                       ncclDebugLogger_t logfn);
  MLCC_NCCL_PROFILER_COMMON_(ncclProfilerEventDescr_v6_t)
} ncclProfiler_v6_t;

/* Layout checks (x86-64 / aarch64 LP64): every member declared above, at the offset NCCL's own
 * headers give it, and the size of every function table. The values were printed with offsetof
 * from NCCL's example-plugin headers of v2.23.4-1 (v1), v2.25.1-1 (v1-v2), v2.26.6-1 (v1-v3),
 * v2.27.7-1 (v1-v4), v2.28.9-1 (v1-v5), v2.29.7-1 and v2.30.7-1 (v1-v6) — every tag agreed —
 * including NCCL's v3 descriptor against the v2 one declared here (same prefix). A change to
 * this header that moves a member fails to compile; the harness test builds it. */
#if defined(__LP64__)
#define MLCC_NCCL_OFF_(t, f, v) _Static_assert(offsetof(t, f) == (v), #t "." #f)
#define MLCC_NCCL_SIZE_(t, v) _Static_assert(sizeof(t) == (v), "sizeof " #t)
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, type, 0);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, parentObj, 8);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, rank, 16);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, proxyOp.pid, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, proxyOp.channelId, 28);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, proxyOp.peer, 32);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, proxyOp.nSteps, 36);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, proxyOp.chunkSize, 40);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, proxyOp.isSend, 44);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, proxyStep.step, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, type, 0);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, parentObj, 8);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, rank, 16);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, proxyOp.pid, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, proxyOp.channelId, 28);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, proxyOp.peer, 32);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, proxyOp.nSteps, 36);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, proxyOp.chunkSize, 40);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, proxyOp.isSend, 44);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, proxyStep.step, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, type, 0);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, parentObj, 8);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, rank, 16);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, proxyOp.pid, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, proxyOp.channelId, 28);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, proxyOp.peer, 32);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, proxyOp.nSteps, 36);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, proxyOp.chunkSize, 40);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, proxyOp.isSend, 44);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, proxyStep.step, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, type, 0);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, parentObj, 8);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, rank, 16);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, proxyOp.pid, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, proxyOp.channelId, 28);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, proxyOp.peer, 32);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, proxyOp.nSteps, 36);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, proxyOp.chunkSize, 40);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, proxyOp.isSend, 44);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, proxyStep.step, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, type, 0);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, parentObj, 8);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, rank, 16);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, proxyOp.pid, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, proxyOp.channelId, 28);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, proxyOp.peer, 32);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, proxyOp.nSteps, 36);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, proxyOp.chunkSize, 40);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, proxyOp.isSend, 44);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, proxyStep.step, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, coll.name, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, coll.name, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, coll.commHash, 32);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, coll.seqNumber, 40);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, coll.func, 48);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, coll.sendBuff, 56);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, coll.recvBuff, 64);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, coll.count, 72);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, coll.root, 80);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, coll.datatype, 84);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, coll.op, 88);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, coll.trafficBytes, 96);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, p2p.name, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, p2p.name, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, p2p.commHash, 32);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, p2p.commHash, 32);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, p2p.func, 40);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, p2p.func, 40);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, p2p.buff, 48);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, p2p.buff, 48);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, p2p.datatype, 56);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, p2p.datatype, 56);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, p2p.count, 64);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, p2p.count, 64);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v1_t, p2p.peer, 72);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, p2p.peer, 72);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, coll.name, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, coll.commHash, 32);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, coll.seqNumber, 40);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, coll.func, 48);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, coll.sendBuff, 56);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, coll.recvBuff, 64);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, coll.count, 72);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, coll.root, 80);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v2_t, coll.datatype, 88);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, coll.seqNumber, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, coll.base.seqNumber, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, coll.base.seqNumber, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, coll.func, 32);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, coll.base.func, 32);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, coll.base.func, 32);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, coll.sendBuff, 40);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, coll.base.sendBuff, 40);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, coll.base.sendBuff, 40);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, coll.recvBuff, 48);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, coll.base.recvBuff, 48);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, coll.base.recvBuff, 48);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, coll.count, 56);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, coll.base.count, 56);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, coll.base.count, 56);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, coll.root, 64);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, coll.base.root, 64);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, coll.base.root, 64);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, coll.datatype, 72);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, coll.base.datatype, 72);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, coll.base.datatype, 72);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, coll.nChannels, 80);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, coll.base.nChannels, 80);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, coll.base.nChannels, 80);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, coll.nWarps, 81);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, coll.base.nWarps, 81);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, coll.base.nWarps, 81);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, coll.algo, 88);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, coll.base.algo, 88);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, coll.base.algo, 88);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, coll.proto, 96);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, coll.base.proto, 96);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, coll.base.proto, 96);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, p2p.func, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, p2p.base.func, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, p2p.base.func, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, p2p.buff, 32);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, p2p.base.buff, 32);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, p2p.base.buff, 32);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, p2p.datatype, 40);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, p2p.base.datatype, 40);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, p2p.base.datatype, 40);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, p2p.count, 48);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, p2p.base.count, 48);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, p2p.base.count, 48);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, p2p.peer, 56);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, p2p.base.peer, 56);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, p2p.base.peer, 56);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v4_t, p2p.nChannels, 60);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, p2p.base.nChannels, 60);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, p2p.base.nChannels, 60);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, coll.parentGroup, 104);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, p2p.parentGroup, 64);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, groupApi.graphCaptured, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, groupApi.groupDepth, 28);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, collApi.func, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, collApi.count, 32);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, collApi.datatype, 40);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, collApi.root, 48);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, collApi.stream, 56);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v5_t, collApi.graphCaptured, 64);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, coll.parentGroup, 104);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, p2p.parentGroup, 64);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, groupApi.graphCaptured, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, groupApi.groupDepth, 28);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, collApi.func, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, collApi.count, 32);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, collApi.datatype, 40);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, collApi.root, 48);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, collApi.stream, 56);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, collApi.graphCaptured, 64);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, ceColl.seqNumber, 24);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, ceColl.func, 32);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, ceColl.sendBuff, 40);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, ceColl.recvBuff, 48);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, ceColl.count, 56);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, ceColl.root, 64);
MLCC_NCCL_OFF_(ncclProfilerEventDescr_v6_t, ceColl.datatype, 72);
MLCC_NCCL_OFF_(ncclProfilerEventStateArgs_v1_t, proxyOp.transSize, 0);
MLCC_NCCL_OFF_(ncclProfilerEventStateArgs_v1_t, proxyOp.steps, 8);
MLCC_NCCL_OFF_(ncclProfilerEventStateArgs_v1_t, proxyCtrl.appendedProxyOps, 0);
MLCC_NCCL_OFF_(ncclProfilerEventStateArgs_v4_t, proxyStep.transSize, 0);
MLCC_NCCL_OFF_(ncclProfilerEventStateArgs_v4_t, proxyCtrl.appendedProxyOps, 0);
MLCC_NCCL_OFF_(ncclProfilerEventStateArgs_v4_t, kernelCh.pTimer, 0);
MLCC_NCCL_OFF_(ncclProfiler_v1_t, name, 0);
MLCC_NCCL_OFF_(ncclProfiler_v1_t, init, 8);
MLCC_NCCL_OFF_(ncclProfiler_v1_t, startEvent, 16);
MLCC_NCCL_OFF_(ncclProfiler_v1_t, stopEvent, 24);
MLCC_NCCL_OFF_(ncclProfiler_v1_t, recordEventState, 32);
MLCC_NCCL_OFF_(ncclProfiler_v1_t, finalize, 40);
MLCC_NCCL_OFF_(ncclProfiler_v2_t, name, 0);
MLCC_NCCL_OFF_(ncclProfiler_v2_t, init, 8);
MLCC_NCCL_OFF_(ncclProfiler_v2_t, startEvent, 16);
MLCC_NCCL_OFF_(ncclProfiler_v2_t, stopEvent, 24);
MLCC_NCCL_OFF_(ncclProfiler_v2_t, recordEventState, 32);
MLCC_NCCL_OFF_(ncclProfiler_v2_t, finalize, 40);
MLCC_NCCL_OFF_(ncclProfiler_v3_t, name, 0);
MLCC_NCCL_OFF_(ncclProfiler_v3_t, init, 8);
MLCC_NCCL_OFF_(ncclProfiler_v3_t, startEvent, 16);
MLCC_NCCL_OFF_(ncclProfiler_v3_t, stopEvent, 24);
MLCC_NCCL_OFF_(ncclProfiler_v3_t, recordEventState, 32);
MLCC_NCCL_OFF_(ncclProfiler_v3_t, finalize, 40);
MLCC_NCCL_OFF_(ncclProfiler_v4_t, name, 0);
MLCC_NCCL_OFF_(ncclProfiler_v4_t, init, 8);
MLCC_NCCL_OFF_(ncclProfiler_v4_t, startEvent, 16);
MLCC_NCCL_OFF_(ncclProfiler_v4_t, stopEvent, 24);
MLCC_NCCL_OFF_(ncclProfiler_v4_t, recordEventState, 32);
MLCC_NCCL_OFF_(ncclProfiler_v4_t, finalize, 40);
MLCC_NCCL_OFF_(ncclProfiler_v5_t, name, 0);
MLCC_NCCL_OFF_(ncclProfiler_v5_t, init, 8);
MLCC_NCCL_OFF_(ncclProfiler_v5_t, startEvent, 16);
MLCC_NCCL_OFF_(ncclProfiler_v5_t, stopEvent, 24);
MLCC_NCCL_OFF_(ncclProfiler_v5_t, recordEventState, 32);
MLCC_NCCL_OFF_(ncclProfiler_v5_t, finalize, 40);
MLCC_NCCL_OFF_(ncclProfiler_v6_t, name, 0);
MLCC_NCCL_OFF_(ncclProfiler_v6_t, init, 8);
MLCC_NCCL_OFF_(ncclProfiler_v6_t, startEvent, 16);
MLCC_NCCL_OFF_(ncclProfiler_v6_t, stopEvent, 24);
MLCC_NCCL_OFF_(ncclProfiler_v6_t, recordEventState, 32);
MLCC_NCCL_OFF_(ncclProfiler_v6_t, finalize, 40);
MLCC_NCCL_SIZE_(ncclProfiler_v1_t, 48);
MLCC_NCCL_SIZE_(ncclProfiler_v2_t, 48);
MLCC_NCCL_SIZE_(ncclProfiler_v3_t, 48);
MLCC_NCCL_SIZE_(ncclProfiler_v4_t, 48);
MLCC_NCCL_SIZE_(ncclProfiler_v5_t, 48);
MLCC_NCCL_SIZE_(ncclProfiler_v6_t, 48);
MLCC_NCCL_SIZE_(ncclProfilerEventStateArgs_v1_t, 16);
MLCC_NCCL_SIZE_(ncclProfilerEventStateArgs_v4_t, 8);
#undef MLCC_NCCL_OFF_
#undef MLCC_NCCL_SIZE_
#endif

#endif /* MLCC_NCCL_PROFILER_H */
