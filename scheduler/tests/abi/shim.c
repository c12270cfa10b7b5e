/* Exposes the header's layout and its static inline writer to Rust tests (scheduler/build.rs). */
#include <stddef.h>
#include "mlcc_progress.h"

#define OFF(s, f) (uint64_t) offsetof(struct s, f)

/* Offsets in the order of scheduler::progress::abi::FIELD_NAMES. */
void mlcc_shim_layout(uint64_t *out) {
    uint64_t v[] = {
        sizeof(struct mlcc_progress_header), sizeof(struct mlcc_progress_counters),
        OFF(mlcc_progress_header, magic), OFF(mlcc_progress_header, abi_version),
        OFF(mlcc_progress_header, header_size), OFF(mlcc_progress_header, job_id),
        OFF(mlcc_progress_header, arch), OFF(mlcc_progress_header, role),
        OFF(mlcc_progress_header, rank), OFF(mlcc_progress_header, world_size),
        OFF(mlcc_progress_header, model_bytes), OFF(mlcc_progress_header, pid),
        OFF(mlcc_progress_header, file_size), OFF(mlcc_progress_header, start_time_ns),
        OFF(mlcc_progress_header, cc_name), OFF(mlcc_progress_header, total_iterations),
        OFF(mlcc_progress_counters, seq), OFF(mlcc_progress_counters, bytes_sent),
        OFF(mlcc_progress_counters, bytes_received), OFF(mlcc_progress_counters, iteration),
        OFF(mlcc_progress_counters, iteration_start_ns),
        OFF(mlcc_progress_counters, iteration_start_sent),
        OFF(mlcc_progress_counters, last_iteration_bytes),
        OFF(mlcc_progress_counters, last_update_ns),
        MLCC_PROGRESS_FILE_SIZE, MLCC_PROGRESS_HEADER_SIZE,
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) out[i] = v[i];
}

int mlcc_shim_open(const char *dir, const char *job, int arch, int role, uint32_t rank,
                   uint32_t world, uint64_t model) {
    return mlcc_progress_open(dir, job, arch, role, rank, world, model);
}
int mlcc_shim_open_env(int role, uint32_t rank) { return mlcc_progress_open_env(role, rank); }
void mlcc_shim_add(int dir, uint64_t bytes) { mlcc_progress_add(dir, bytes); }
void mlcc_shim_add_tagged(int dir, uint64_t tag, uint64_t bytes) {
    mlcc_progress_add_tagged(dir, tag, bytes);
}
void mlcc_shim_iteration_begin(void) { mlcc_iteration_begin(); }
int mlcc_shim_set_cc(int fd) { return mlcc_progress_set_cc(fd); }
void mlcc_shim_close(void) { mlcc_progress_close(); }
const char *mlcc_shim_path(void) { return mlcc_progress_state_.path; }
