//! Compiles the BPF programs and generates their libbpf-rs skeletons.
//!
//! The programs include `vmlinux.h`. It is generated from the running kernel's BTF when bpftool
//! and `/sys/kernel/btf/vmlinux` are available (so the header matches the kernel we test on), and
//! otherwise decompressed from the committed `src/bpf/vmlinux.h.gz`, so a build machine needs
//! neither bpftool nor BTF. CO-RE relocations make either header work on any BTF kernel.

use std::env;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use libbpf_cargo::SkeletonBuilder;

/// Each program and the skeleton generated for it.
const PROGRAMS: [(&str, &str); 3] = [
    ("src/bpf/mlcc.bpf.c", "mlcc.skel.rs"),
    ("src/bpf/loss.bpf.c", "loss.skel.rs"),
    ("src/bpf/mltcp.bpf.c", "mltcp.skel.rs"),
];

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let include = out.join("include");
    fs::create_dir_all(&include).expect("create OUT_DIR/include");
    write_vmlinux_h(&include.join("vmlinux.h"));

    let arch = match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "x86",
        Ok("aarch64") => "arm64",
        Ok(other) => panic!("mlcc-bpf: unsupported target architecture {other}"),
        Err(_) => "x86",
    };
    for (src, skel) in PROGRAMS {
        SkeletonBuilder::new()
            .source(src)
            .clang_args([
                format!("-I{}", include.display()),
                format!("-D__TARGET_ARCH_{arch}"),
                "-Wall".to_owned(),
                "-Werror".to_owned(),
            ])
            .build_and_generate(out.join(skel))
            .unwrap_or_else(|e| {
                panic!(
                    "mlcc-bpf: building {src} failed (is clang installed? run scripts/setup.sh): {e:#}"
                )
            });
    }

    println!("cargo:rerun-if-changed=src/bpf");
    println!("cargo:rerun-if-env-changed=MLCC_BPF_VMLINUX");
}

/// `MLCC_BPF_VMLINUX=committed` forces the committed header (what CI without bpftool uses), to
/// check that path builds too.
fn write_vmlinux_h(dest: &Path) {
    let force_committed = env::var("MLCC_BPF_VMLINUX").is_ok_and(|v| v == "committed");
    let generated = (!force_committed && Path::new("/sys/kernel/btf/vmlinux").exists())
        .then(|| {
            Command::new("bpftool")
                .args([
                    "btf",
                    "dump",
                    "file",
                    "/sys/kernel/btf/vmlinux",
                    "format",
                    "c",
                ])
                .output()
                .ok()
        })
        .flatten()
        .filter(|o| o.status.success() && !o.stdout.is_empty());
    if let Some(o) = generated {
        fs::write(dest, &o.stdout).expect("write vmlinux.h");
        return;
    }
    let gz = fs::File::open("src/bpf/vmlinux.h.gz").expect("open src/bpf/vmlinux.h.gz");
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut text)
        .expect("decompress src/bpf/vmlinux.h.gz");
    fs::write(dest, text).expect("write vmlinux.h");
}
