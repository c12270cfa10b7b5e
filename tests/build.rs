//! Compiles the real progress header (`patches/progress/mlcc_progress.h`) into the trainer, so
//! the synthetic jobs report progress exactly as patched NCCL / PS-Lite do.

fn main() {
    println!("cargo:rerun-if-changed=../patches/progress/mlcc_progress.h");
    println!("cargo:rerun-if-changed=src/progress_shim.c");
    cc::Build::new()
        .file("src/progress_shim.c")
        .include("../patches/progress")
        .flag("-std=gnu11")
        .flag("-Wall")
        .flag("-Wextra")
        .warnings_into_errors(true)
        .compile("mlcc_testbed_progress");
}
