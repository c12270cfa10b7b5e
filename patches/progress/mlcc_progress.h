/*
 * mlcc_progress.h — how a training process tells mlccd what it is doing (docs/design.md §9).
 *
 * Header-only, C99 and C++. A communication library (NCCL, PS-Lite, a synthetic trainer) calls
 *
 *     mlcc_progress_open_env(MLCC_ROLE_WORKER, rank);    // no-op unless MLCC_JOB_ID is set
 *     mlcc_progress_add(MLCC_DIR_SEND, bytes);           // every time it enqueues data to send
 *     mlcc_progress_add(MLCC_DIR_RECV, bytes);           // every time data arrives
 *     mlcc_iteration_begin();                            // or mlcc_progress_add_tagged(...)
 *     mlcc_progress_set_cc(fd);                          // put a data socket on mlcc's CC
 *     mlcc_progress_close();
 *
 * and mlccd (which never writes the counters) maps the same file read-only. One file per
 * process: $MLCC_SHM_DIR/mlcc.<job>.<role>.<rank>.<pid> (default dir /dev/shm), mode 0640,
 * MLCC_PROGRESS_FILE_SIZE bytes, little-endian, layout below. The Rust reader in
 * scheduler/src/progress.rs mirrors it and a test compiles this header to prove both agree.
 *
 * Counters are 64-bit atomics. Values that must be read together (the iteration fields) are
 * written under a sequence lock: `seq` is odd while a write is in progress. Readers retry a
 * bounded number of times and never block the writer; writers in one process serialize on the
 * seqlock itself (a compare-and-swap from even to odd).
 *
 * All functions are safe to call when the file could not be created: they do nothing. They never
 * abort the training process.
 *
 * State is one weak global shared by every translation unit that includes this header.
 */
#ifndef MLCC_PROGRESS_H
#define MLCC_PROGRESS_H

#include <stdint.h>
#include <stddef.h>

#ifndef MLCC_PROGRESS_NO_IMPL
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define MLCC_PROGRESS_MAGIC "MLCCPRG1"
#define MLCC_PROGRESS_ABI_VERSION 1u
#define MLCC_PROGRESS_HEADER_SIZE 256u
#define MLCC_PROGRESS_FILE_SIZE 512u
#define MLCC_JOB_ID_MAX 64u /* including the NUL */
#define MLCC_CC_NAME_MAX 16u /* including the NUL, like TCP_CA_NAME_MAX */

enum mlcc_arch { MLCC_ARCH_UNKNOWN = 0, MLCC_ARCH_ALLREDUCE = 1, MLCC_ARCH_PS = 2 };
enum mlcc_role { MLCC_ROLE_WORKER = 0, MLCC_ROLE_SERVER = 1, MLCC_ROLE_SCHEDULER = 2 };
enum mlcc_dir { MLCC_DIR_SEND = 0, MLCC_DIR_RECV = 1 };

/* Written once by the process at open (cc_name may be written by mlccd later). */
struct mlcc_progress_header {
    char magic[8];                /*   0: "MLCCPRG1", no NUL */
    uint32_t abi_version;         /*   8 */
    uint32_t header_size;         /*  12: offset of the counters */
    char job_id[MLCC_JOB_ID_MAX]; /*  16: UTF-8, NUL-terminated */
    uint32_t arch;                /*  80: enum mlcc_arch */
    uint32_t role;                /*  84: enum mlcc_role */
    uint32_t rank;                /*  88 */
    uint32_t world_size;          /*  92: 0 = unknown */
    uint64_t model_bytes;         /*  96: 0 = unknown */
    uint32_t pid;                 /* 104 */
    uint32_t file_size;           /* 108 */
    uint64_t start_time_ns;       /* 112: CLOCK_REALTIME at open */
    char cc_name[MLCC_CC_NAME_MAX]; /* 120: CC for data sockets; "" = leave the default */
    uint64_t total_iterations;    /* 136: iterations the job runs (MLCC_TOTAL_ITERATIONS); 0 = unknown */
    uint8_t reserved[MLCC_PROGRESS_HEADER_SIZE - 144]; /* 144: zero */
};

/* Updated while the job runs. Every field is read and written with 64-bit atomics. */
struct mlcc_progress_counters {
    uint64_t seq;                  /* 256: seqlock over the iteration fields below */
    uint64_t bytes_sent;           /* 264: enqueued for sending, cumulative */
    uint64_t bytes_received;       /* 272: cumulative */
    uint64_t iteration;            /* 280: number of the current iteration (0 before the first) */
    uint64_t iteration_start_ns;   /* 288: CLOCK_REALTIME when it began */
    uint64_t iteration_start_sent; /* 296: bytes_sent when it began */
    uint64_t last_iteration_bytes; /* 304: bytes sent during the last complete iteration */
    uint64_t last_update_ns;       /* 312: CLOCK_REALTIME of the last write of any counter */
};

#if defined(__cplusplus)
#define MLCC_STATIC_ASSERT_(c, m) static_assert(c, m)
#else
#define MLCC_STATIC_ASSERT_(c, m) _Static_assert(c, m)
#endif
MLCC_STATIC_ASSERT_(sizeof(struct mlcc_progress_header) == MLCC_PROGRESS_HEADER_SIZE,
                    "header layout is part of the ABI");
MLCC_STATIC_ASSERT_(MLCC_PROGRESS_HEADER_SIZE + sizeof(struct mlcc_progress_counters) <=
                        MLCC_PROGRESS_FILE_SIZE,
                    "counters must fit the file");

#ifndef MLCC_PROGRESS_NO_IMPL

struct mlcc_progress_state {
    volatile struct mlcc_progress_header *header;
    volatile struct mlcc_progress_counters *counters;
    void *map;
    int open;
    int have_tag;
    uint64_t first_tag;
    char path[512];
};

/* One instance per process, shared by every translation unit (weak symbol). */
__attribute__((weak)) struct mlcc_progress_state mlcc_progress_state_;

static inline uint64_t mlcc_now_ns_(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t mlcc_load_(volatile uint64_t *p) {
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline void mlcc_store_(volatile uint64_t *p, uint64_t v) {
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* Enters the seqlock's write side: seq from even to odd. */
static inline void mlcc_write_begin_(volatile struct mlcc_progress_counters *c) {
    for (;;) {
        uint64_t s = __atomic_load_n(&c->seq, __ATOMIC_RELAXED);
        if ((s & 1u) == 0 &&
            __atomic_compare_exchange_n(&c->seq, &s, s + 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            break;
    }
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

static inline void mlcc_write_end_(volatile struct mlcc_progress_counters *c) {
    __atomic_fetch_add(&c->seq, 1, __ATOMIC_RELEASE);
}

static inline int mlcc_parse_arch_(const char *s) {
    if (!s) return MLCC_ARCH_UNKNOWN;
    if (!strcmp(s, "allreduce") || !strcmp(s, "ring")) return MLCC_ARCH_ALLREDUCE;
    if (!strcmp(s, "ps")) return MLCC_ARCH_PS;
    return MLCC_ARCH_UNKNOWN;
}

static inline const char *mlcc_role_name_(int role) {
    switch (role) {
    case MLCC_ROLE_WORKER: return "worker";
    case MLCC_ROLE_SERVER: return "server";
    case MLCC_ROLE_SCHEDULER: return "scheduler";
    default: return "unknown";
    }
}

/* A job id goes into a file name and onto the wire: keep it to [A-Za-z0-9._-], ≤ 63 bytes. */
static inline int mlcc_valid_job_id_(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n >= MLCC_JOB_ID_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '.' || ch == '_' || ch == '-';
        if (!ok) return 0;
    }
    return 1;
}

/*
 * Opens the progress file described by explicit arguments. Returns 0 on success, -1 on failure
 * (with a message on stderr); the job keeps running either way.
 */
static inline int mlcc_progress_open(const char *dir, const char *job_id, int arch, int role,
                                     uint32_t rank, uint32_t world_size, uint64_t model_bytes) {
    struct mlcc_progress_state *st = &mlcc_progress_state_;
    if (st->open) return 0;
    if (!job_id || !mlcc_valid_job_id_(job_id)) {
        fprintf(stderr, "mlcc: invalid MLCC_JOB_ID (1-63 chars of [A-Za-z0-9._-]); progress off\n");
        return -1;
    }
    if (!dir || !*dir) dir = "/dev/shm";
    int n = snprintf(st->path, sizeof st->path, "%s/mlcc.%s.%s.%u.%d", dir, job_id,
                     mlcc_role_name_(role), rank, (int)getpid());
    if (n < 0 || (size_t)n >= sizeof st->path) return -1;
    int fd = open(st->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (fd < 0) {
        fprintf(stderr, "mlcc: cannot create %s: %s; progress off\n", st->path, strerror(errno));
        return -1;
    }
    /* The umask may have narrowed the mode; mlccd's group must be able to read. */
    (void)fchmod(fd, 0640);
    if (ftruncate(fd, MLCC_PROGRESS_FILE_SIZE) != 0) {
        fprintf(stderr, "mlcc: cannot size %s: %s; progress off\n", st->path, strerror(errno));
        close(fd);
        unlink(st->path);
        return -1;
    }
    void *map = mmap(NULL, MLCC_PROGRESS_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        fprintf(stderr, "mlcc: cannot map %s: %s; progress off\n", st->path, strerror(errno));
        unlink(st->path);
        return -1;
    }
    struct mlcc_progress_header *h = (struct mlcc_progress_header *)map;
    memset(map, 0, MLCC_PROGRESS_FILE_SIZE);
    h->abi_version = MLCC_PROGRESS_ABI_VERSION;
    h->header_size = MLCC_PROGRESS_HEADER_SIZE;
    strncpy(h->job_id, job_id, MLCC_JOB_ID_MAX - 1);
    h->arch = (uint32_t)arch;
    h->role = (uint32_t)role;
    h->rank = rank;
    h->world_size = world_size;
    h->model_bytes = model_bytes;
    h->pid = (uint32_t)getpid();
    h->file_size = MLCC_PROGRESS_FILE_SIZE;
    h->start_time_ns = mlcc_now_ns_();
    const char *cc = getenv("MLCC_CC");
    if (cc) strncpy(h->cc_name, cc, MLCC_CC_NAME_MAX - 1);
    /* How long the job runs lets mlccd rank it by the bytes it has left (shortest first). */
    const char *iters = getenv("MLCC_TOTAL_ITERATIONS");
    if (iters) h->total_iterations = (uint64_t)strtoull(iters, NULL, 10);
    st->header = h;
    st->counters =
        (volatile struct mlcc_progress_counters *)((char *)map + MLCC_PROGRESS_HEADER_SIZE);
    st->map = map;
    /* The magic goes last: a reader that sees it sees a complete header. */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    memcpy((void *)h->magic, MLCC_PROGRESS_MAGIC, 8);
    st->open = 1;
    return 0;
}

/*
 * Opens the progress file from the environment: MLCC_JOB_ID (required, else a no-op returning
 * 1), MLCC_JOB_ARCH ("allreduce" or "ps"), MLCC_MODEL_BYTES, MLCC_WORLD_SIZE, MLCC_SHM_DIR
 * (and, read by mlcc_progress_open itself, MLCC_CC and MLCC_TOTAL_ITERATIONS).
 */
static inline int mlcc_progress_open_env(int role, uint32_t rank) {
    const char *job = getenv("MLCC_JOB_ID");
    if (!job || !*job) return 1;
    const char *mb = getenv("MLCC_MODEL_BYTES");
    const char *ws = getenv("MLCC_WORLD_SIZE");
    return mlcc_progress_open(getenv("MLCC_SHM_DIR"), job, mlcc_parse_arch_(getenv("MLCC_JOB_ARCH")),
                              role, rank, ws ? (uint32_t)strtoul(ws, NULL, 10) : 0u,
                              mb ? (uint64_t)strtoull(mb, NULL, 10) : 0u);
}

/* Marks the start of a new iteration: closes the previous one's byte count. */
static inline void mlcc_iteration_begin(void) {
    struct mlcc_progress_state *st = &mlcc_progress_state_;
    if (!st->open) return;
    volatile struct mlcc_progress_counters *c = st->counters;
    uint64_t now = mlcc_now_ns_();
    mlcc_write_begin_(c);
    uint64_t sent = mlcc_load_(&c->bytes_sent);
    uint64_t it = mlcc_load_(&c->iteration);
    if (it > 0) mlcc_store_(&c->last_iteration_bytes, sent - mlcc_load_(&c->iteration_start_sent));
    mlcc_store_(&c->iteration, it + 1);
    mlcc_store_(&c->iteration_start_ns, now);
    mlcc_store_(&c->iteration_start_sent, sent);
    mlcc_store_(&c->last_update_ns, now);
    mlcc_write_end_(c);
}

/* Counts bytes enqueued for sending (MLCC_DIR_SEND) or received (MLCC_DIR_RECV). */
static inline void mlcc_progress_add(int dir, uint64_t bytes) {
    struct mlcc_progress_state *st = &mlcc_progress_state_;
    if (!st->open || bytes == 0) return;
    volatile struct mlcc_progress_counters *c = st->counters;
    if (dir == MLCC_DIR_SEND) {
        __atomic_fetch_add(&c->bytes_sent, bytes, __ATOMIC_RELEASE);
    } else {
        __atomic_fetch_add(&c->bytes_received, bytes, __ATOMIC_RELEASE);
    }
    mlcc_store_(&c->last_update_ns, mlcc_now_ns_());
}

/*
 * Like mlcc_progress_add, for libraries that cannot say where an iteration starts: the first
 * tag ever seen (e.g. PS-Lite's first key) marks the start of every iteration it reappears in.
 */
static inline void mlcc_progress_add_tagged(int dir, uint64_t tag, uint64_t bytes) {
    struct mlcc_progress_state *st = &mlcc_progress_state_;
    if (!st->open) return;
    if (dir == MLCC_DIR_SEND) {
        if (!st->have_tag) {
            st->first_tag = tag;
            st->have_tag = 1;
        }
        if (tag == st->first_tag) mlcc_iteration_begin();
    }
    mlcc_progress_add(dir, bytes);
}

/*
 * Puts a data socket on the congestion control named in the header's cc_name (set from MLCC_CC
 * at open, or by mlccd). Returns 0 on success or when no CC is configured, -1 on failure (the
 * socket keeps the system default; the job runs on).
 */
static inline int mlcc_progress_set_cc(int fd) {
    struct mlcc_progress_state *st = &mlcc_progress_state_;
    if (!st->open) return 0;
    char name[MLCC_CC_NAME_MAX];
    memcpy(name, (const void *)st->header->cc_name, MLCC_CC_NAME_MAX);
    name[MLCC_CC_NAME_MAX - 1] = 0;
    if (!name[0]) return 0;
    if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, (socklen_t)strlen(name)) != 0) {
        fprintf(stderr, "mlcc: TCP_CONGESTION=%s on fd %d failed: %s\n", name, fd, strerror(errno));
        return -1;
    }
    return 0;
}

/* Unmaps and removes the file: mlccd forgets the process. */
static inline void mlcc_progress_close(void) {
    struct mlcc_progress_state *st = &mlcc_progress_state_;
    if (!st->open) return;
    st->open = 0;
    munmap(st->map, MLCC_PROGRESS_FILE_SIZE);
    unlink(st->path);
    st->header = NULL;
    st->counters = NULL;
    st->map = NULL;
    st->have_tag = 0;
}

#endif /* MLCC_PROGRESS_NO_IMPL */

#ifdef __cplusplus
}
#endif

#endif /* MLCC_PROGRESS_H */
