// Proves the header compiles as C++ (PS-Lite and NCCL are C++) and shares the writer state
// with the C translation unit: both see one weak global.
#include "mlcc_progress.h"

extern "C" int mlcc_shim_cxx_is_open(void) { return mlcc_progress_state_.open; }
