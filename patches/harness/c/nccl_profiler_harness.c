/*
 * Drives an NCCL profiler plugin the way NCCL does, without NCCL or a GPU.
 *
 *   nccl_profiler_harness PLUGIN.so VERSION      (VERSION 1..6: resolves ncclProfiler_v<VERSION>)
 *
 * then reads commands on stdin, one per line, and answers each with "ok ..." (or "err ..." and
 * exit status 1):
 *
 *   init RANK NRANKS             init() a communicator (v1–v3 get no rank: NCCL does not pass it)
 *   group_begin / group_end      an explicit ncclGroupStart / ncclGroupEnd
 *   coll FUNC COUNT DATATYPE     one collective, e.g. "coll AllReduce 1048576 ncclFloat32"
 *   p2p Send|Recv COUNT DATATYPE one point-to-point task
 *   finalize                     finalize() the communicator
 *
 * What NCCL does, and so this harness: events are started only for types in the activation mask
 * init returned; a handle left NULL is never stopped; a collective outside an explicit group runs
 * in an implicit one (v1–v4: a Group event per kernel plan; v5+: a GroupApi event with
 * GroupStartApiStop / GroupEndApiStart state records, then the CollApi event, then the Coll task
 * event whose parentObj is the CollApi handle and coll.parentGroup the Group handle).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlcc_nccl_profiler.h"

static int version;
static void *profiler; /* ncclProfiler_vN_t* */
static void *ctx;
static int mask;
static int rank_ = -1;
static void *group_handle; /* v1–v4 Group, v5+ GroupApi */
static void *plan_group;   /* v5+: the per-plan Group event inside a GroupApi */
static int explicit_group;

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

static int code_of_func(const char *s) {
  static const char *names[] = {"Broadcast", "Reduce",   "AllGather", "ReduceScatter",
                                "AllReduce", "SendRecv", "Send",      "Recv"};
  for (int i = 0; i < 8; i++)
    if (!strcmp(s, names[i])) return i;
  fail("unknown func");
  return -1;
}

static void *start(void *descr) {
  void *h = NULL;
  ncclResult_t r = ACCESS(ncclProfiler_v1_t)->startEvent(ctx, &h, descr);
  if (r != ncclSuccess) fail("startEvent");
  return h;
}

static void stop(void *h) {
  if (h && ACCESS(ncclProfiler_v1_t)->stopEvent(h) != ncclSuccess) fail("stopEvent");
}

static void record(void *h, ncclProfilerEventState_t s) {
  if (h && ACCESS(ncclProfiler_v1_t)->recordEventState(h, s, NULL) != ncclSuccess)
    fail("recordEventState");
}

static void group_begin(void) {
  if (version >= 5) {
    if (mask & ncclProfileGroupApi) {
      ncclProfilerEventDescr_v5_t d;
      memset(&d, 0, sizeof d);
      d.type = ncclProfileGroupApi;
      d.rank = rank_;
      d.groupApi.groupDepth = 1;
      group_handle = start(&d);
      record(group_handle, ncclProfilerGroupStartApiStop);
    }
  } else if (mask & ncclProfileGroup) {
    ncclProfilerEventDescr_v1_t d; /* the common prefix is all a Group event carries */
    memset(&d, 0, sizeof d);
    d.type = ncclProfileGroup;
    d.rank = rank_;
    group_handle = start(&d);
  }
}

static void group_end(void) {
  if (version >= 5) record(group_handle, ncclProfilerGroupEndApiStart);
  stop(plan_group);
  plan_group = NULL;
  stop(group_handle);
  group_handle = NULL;
}

static void coll(const char *func, size_t count, const char *type) {
  int implicit = !explicit_group;
  if (implicit) group_begin();
  void *h = NULL;
  if (version == 1) {
    ncclProfilerEventDescr_v1_t d;
    memset(&d, 0, sizeof d);
    d.type = ncclProfileColl;
    d.parentObj = group_handle;
    d.rank = rank_;
    d.coll.name = "harness";
    d.coll.func = (uint8_t)code_of_func(func);
    d.coll.count = count;
    d.coll.datatype = (uint8_t)code_of_type(type);
    d.coll.trafficBytes = 0;
    if (mask & ncclProfileColl) h = start(&d);
  } else if (version <= 3) {
    ncclProfilerEventDescr_v2_t d;
    memset(&d, 0, sizeof d);
    d.type = ncclProfileColl;
    d.parentObj = group_handle;
    d.rank = rank_;
    d.coll.name = "harness";
    d.coll.func = func;
    d.coll.count = count;
    d.coll.datatype = type;
    if (mask & ncclProfileColl) h = start(&d);
  } else if (version == 4) {
    ncclProfilerEventDescr_v4_t d;
    memset(&d, 0, sizeof d);
    d.type = ncclProfileColl;
    d.parentObj = group_handle;
    d.rank = rank_;
    d.coll.func = func;
    d.coll.count = count;
    d.coll.datatype = type;
    d.coll.algo = "RING";
    d.coll.proto = "SIMPLE";
    if (mask & ncclProfileColl) h = start(&d);
  } else {
    void *api = NULL;
    if (mask & ncclProfileCollApi) {
      ncclProfilerEventDescr_v5_t a;
      memset(&a, 0, sizeof a);
      a.type = ncclProfileCollApi;
      a.parentObj = group_handle;
      a.rank = rank_;
      a.collApi.func = func;
      a.collApi.count = count;
      a.collApi.datatype = type;
      api = start(&a);
      stop(api);
    }
    if (!plan_group && (mask & ncclProfileGroup)) {
      ncclProfilerEventDescr_v5_t g;
      memset(&g, 0, sizeof g);
      g.type = ncclProfileGroup;
      g.rank = rank_;
      plan_group = start(&g);
    }
    ncclProfilerEventDescr_v5_t d;
    memset(&d, 0, sizeof d);
    d.type = ncclProfileColl;
    d.parentObj = api;
    d.rank = rank_;
    d.coll.base.func = func;
    d.coll.base.count = count;
    d.coll.base.datatype = type;
    d.coll.base.algo = "RING";
    d.coll.base.proto = "SIMPLE";
    d.coll.parentGroup = plan_group;
    if (mask & ncclProfileColl) h = start(&d);
  }
  stop(h);
  if (implicit) group_end();
}

static void p2p(const char *func, size_t count, const char *type) {
  int implicit = !explicit_group;
  if (implicit) group_begin();
  void *h = NULL;
  if (mask & ncclProfileP2p) {
    if (version == 1) {
      ncclProfilerEventDescr_v1_t d;
      memset(&d, 0, sizeof d);
      d.type = ncclProfileP2p;
      d.rank = rank_;
      d.p2p.func = (uint8_t)code_of_func(func);
      d.p2p.count = count;
      d.p2p.datatype = (uint8_t)code_of_type(type);
      h = start(&d);
    } else if (version <= 3) {
      ncclProfilerEventDescr_v2_t d;
      memset(&d, 0, sizeof d);
      d.type = ncclProfileP2p;
      d.rank = rank_;
      d.p2p.func = func;
      d.p2p.count = count;
      d.p2p.datatype = type;
      h = start(&d);
    } else if (version == 4) {
      ncclProfilerEventDescr_v4_t d;
      memset(&d, 0, sizeof d);
      d.type = ncclProfileP2p;
      d.rank = rank_;
      d.p2p.func = func;
      d.p2p.count = count;
      d.p2p.datatype = type;
      h = start(&d);
    } else {
      ncclProfilerEventDescr_v5_t d;
      memset(&d, 0, sizeof d);
      d.type = ncclProfileP2p;
      d.rank = rank_;
      d.p2p.base.func = func;
      d.p2p.base.count = count;
      d.p2p.base.datatype = type;
      h = start(&d);
    }
  }
  stop(h);
  if (implicit) group_end();
}

static void init(int rank, int nranks) {
  ncclResult_t r;
  rank_ = rank;
  mask = 0;
  switch (version) {
  case 1: r = ACCESS(ncclProfiler_v1_t)->init(&ctx, &mask); break;
  case 2: r = ACCESS(ncclProfiler_v2_t)->init(&ctx, &mask); break;
  case 3: r = ACCESS(ncclProfiler_v3_t)->init(&ctx, &mask); break;
  case 4:
    r = ACCESS(ncclProfiler_v4_t)->init(&ctx, &mask, "harness", 0x1234, 1, nranks, rank, NULL);
    break;
  default:
    r = ACCESS(ncclProfiler_v5_t)->init(&ctx, 0x1234, &mask, "harness", 1, nranks, rank, NULL);
    break;
  }
  if (r != ncclSuccess) fail("init");
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s PLUGIN.so VERSION\n", argv[0]);
    return 2;
  }
  version = atoi(argv[2]);
  if (version < 1 || version > 6) fail("version must be 1..6");
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    printf("err dlopen: %s\n", dlerror());
    return 1;
  }
  char sym[32];
  snprintf(sym, sizeof sym, "ncclProfiler_v%d", version);
  profiler = dlsym(lib, sym);
  if (!profiler) fail("symbol not found");
  printf("ok loaded %s name=%s\n", sym, ACCESS(ncclProfiler_v1_t)->name);
  fflush(stdout);

  char line[256];
  while (fgets(line, sizeof line, stdin)) {
    char cmd[32] = "", a[64] = "", c[64] = "";
    unsigned long long n = 0;
    if (sscanf(line, "%31s", cmd) != 1) continue;
    if (!strcmp(cmd, "init")) {
      int r = 0, nr = 0;
      if (sscanf(line, "%*s %d %d", &r, &nr) != 2) fail("init RANK NRANKS");
      init(r, nr);
      printf("ok mask=0x%x\n", mask);
    } else if (!strcmp(cmd, "group_begin")) {
      group_begin();
      explicit_group = 1;
      printf("ok\n");
    } else if (!strcmp(cmd, "group_end")) {
      explicit_group = 0;
      group_end();
      printf("ok\n");
    } else if (!strcmp(cmd, "coll")) {
      if (sscanf(line, "%*s %63s %llu %63s", a, &n, c) != 3) fail("coll FUNC COUNT TYPE");
      coll(a, (size_t)n, c);
      printf("ok\n");
    } else if (!strcmp(cmd, "p2p")) {
      if (sscanf(line, "%*s %63s %llu %63s", a, &n, c) != 3) fail("p2p FUNC COUNT TYPE");
      p2p(a, (size_t)n, c);
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
