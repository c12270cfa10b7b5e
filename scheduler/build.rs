//! Compiles `patches/progress/mlcc_progress.h` through a small shim so the tests can check that
//! the Rust reader and the C writer agree on every offset and drive the real writer.

fn main() {
    println!("cargo:rerun-if-changed=../patches/progress/mlcc_progress.h");
    println!("cargo:rerun-if-changed=tests/abi/shim.c");
    println!("cargo:rerun-if-changed=tests/abi/shim_cxx.cc");
    // gnu11/gnu++17: the header uses POSIX (clock_gettime, O_CLOEXEC), as compilers do by default.
    cc::Build::new()
        .file("tests/abi/shim.c")
        .include("../patches/progress")
        .flag("-std=gnu11")
        .flag("-Wall")
        .flag("-Wextra")
        .warnings_into_errors(true)
        .compile("mlcc_progress_shim");
    cc::Build::new()
        .cpp(true)
        .file("tests/abi/shim_cxx.cc")
        .include("../patches/progress")
        .flag("-std=gnu++17")
        .flag("-Wall")
        .flag("-Wextra")
        .warnings_into_errors(true)
        .compile("mlcc_progress_shim_cxx");
}
