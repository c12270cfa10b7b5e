/* Non-inline entry points over the header-only progress writer, for the Rust trainer. */
#include "mlcc_progress.h"

int mlcc_tb_open_env(int role, uint32_t rank) { return mlcc_progress_open_env(role, rank); }
void mlcc_tb_iteration_begin(void) { mlcc_iteration_begin(); }
void mlcc_tb_add(int dir, uint64_t bytes) { mlcc_progress_add(dir, bytes); }
int mlcc_tb_set_cc(int fd) { return mlcc_progress_set_cc(fd); }
void mlcc_tb_close(void) { mlcc_progress_close(); }
