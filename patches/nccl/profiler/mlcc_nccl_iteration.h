/*
 * mlcc_nccl_iteration.h — the application's side of MLCC_NCCL_ITERATION=explicit: the training
 * loop says where an iteration starts, the NCCL profiler plugin (libnccl-profiler-mlcc.so) writes
 * it into the progress file it keeps.
 *
 *     #include "mlcc_nccl_iteration.h"      // first, or -D_GNU_SOURCE; -ldl on glibc < 2.34
 *     for (;;) {
 *       mlcc_nccl_iteration_begin();        // before the step's first collective
 *       forward(); backward(); ...
 *     }
 *
 * Why not mlcc_iteration_begin() from mlcc_progress.h: that acts on the calling module's own copy
 * of the progress state, and the plugin's copy is another one. NCCL loads the plugin with
 * dlopen(name, RTLD_NOW | RTLD_LOCAL) (NCCL v2.23.4-1 src/misc/profiler.cc:32; v2.26.6-1 and
 * v2.28.9-1 src/plugin/plugin_open.cc:39 / :37; v2.30.7-1 src/os/linux.cc:52 via
 * src/plugin/plugin_open.cc:41), so none of the plugin's symbols enter the global scope, and the
 * plugin keeps its state hidden (-fvisibility=hidden), so it never binds to an application's
 * copy either.
 *
 * What this does instead: it finds the loaded plugin and calls its exported
 * mlcc_nccl_profiler_iteration_begin(). RTLD_LOCAL hides a library from dlsym(RTLD_DEFAULT, ...)
 * but not from dlopen(its name, RTLD_NOLOAD), which returns the already loaded object. The name
 * NCCL used varies (NCCL_PROFILER_PLUGIN as given, "libnccl-profiler-<name>.so", or since 2.28 the
 * net plugin's library: v2.30.7-1 src/plugin/plugin_open.cc:85-121, src/plugin/profiler.cc:62-64;
 * v2.28.9-1 src/plugin/profiler.cc:61),
 * so every loaded object's name is taken from dl_iterate_phdr and tried. The handle found is kept
 * (a reference of ours): NCCL dlcloses the plugin when its last communicator is finalized
 * (v2.30.7-1 src/plugin/profiler.cc:113-123), which then leaves it mapped, and a later
 * communicator's dlopen gets the same object back.
 *
 * Returns 1 if an iteration began; 0 if the plugin has no progress file open (MLCC_JOB_ID unset,
 * no communicator spanning nodes yet; on NCCL 2.23-2.26 the file opens at the first collective);
 * -1 if the plugin is not loaded (yet: NCCL loads it at the first communicator's init; the lookup
 * is retried on every call until it succeeds); -2 if MLCC_NCCL_ITERATION is not "explicit" (the
 * plugin marks iterations itself and ignores the call).
 *
 * From Python (ctypes), the same call on the plugin NCCL loaded:
 *     lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)   # path: the name NCCL loaded
 *     lib.mlcc_nccl_profiler_iteration_begin()
 */
#ifndef MLCC_NCCL_ITERATION_H
#define MLCC_NCCL_ITERATION_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dl_iterate_phdr, RTLD_DEFAULT: too late if a system header came first */
#endif
#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__) && !defined(__USE_GNU)
#error "mlcc_nccl_iteration.h needs _GNU_SOURCE: include it first or compile with -D_GNU_SOURCE"
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define MLCC_NCCL_ITERATION_SYMBOL "mlcc_nccl_profiler_iteration_begin"

typedef int (*mlcc_nccl_iteration_fn_)(void);

struct mlcc_nccl_names_ {
    char **names;
    size_t n, cap;
};

/* Collects the loaded objects' names; dlopen is not called while dl_iterate_phdr holds its lock. */
static inline int mlcc_nccl_collect_name_(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    struct mlcc_nccl_names_ *l = (struct mlcc_nccl_names_ *)arg;
    if (!info->dlpi_name || !info->dlpi_name[0]) return 0; /* the main program */
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        char **p = (char **)realloc(l->names, cap * sizeof *p);
        if (!p) return 1;
        l->names = p;
        l->cap = cap;
    }
    char *s = strdup(info->dlpi_name);
    if (s) l->names[l->n++] = s;
    return 0;
}

static inline mlcc_nccl_iteration_fn_ mlcc_nccl_find_plugin_(void) {
    /* Loaded into the global scope after all (RTLD_GLOBAL, LD_PRELOAD, linked)? */
    void *f = dlsym(RTLD_DEFAULT, MLCC_NCCL_ITERATION_SYMBOL);
    if (f) return (mlcc_nccl_iteration_fn_)f;
    struct mlcc_nccl_names_ l = {NULL, 0, 0};
    dl_iterate_phdr(mlcc_nccl_collect_name_, &l);
    for (size_t i = 0; i < l.n && !f; i++) {
        void *h = dlopen(l.names[i], RTLD_LAZY | RTLD_NOLOAD);
        if (!h) continue;
        f = dlsym(h, MLCC_NCCL_ITERATION_SYMBOL);
        if (!f) dlclose(h); /* else keep the reference: the plugin stays mapped */
    }
    for (size_t i = 0; i < l.n; i++) free(l.names[i]);
    free(l.names);
    return (mlcc_nccl_iteration_fn_)f;
}

/* Starts an iteration in the NCCL plugin's progress file (see the return values above). */
static inline int mlcc_nccl_iteration_begin(void) {
    static mlcc_nccl_iteration_fn_ fn; /* per translation unit; any copy finds the same plugin */
    mlcc_nccl_iteration_fn_ f = __atomic_load_n(&fn, __ATOMIC_ACQUIRE);
    if (!f) {
        f = mlcc_nccl_find_plugin_();
        if (!f) return -1;
        __atomic_store_n(&fn, f, __ATOMIC_RELEASE);
    }
    return f();
}

#ifdef __cplusplus
}
#endif

#endif /* MLCC_NCCL_ITERATION_H */
