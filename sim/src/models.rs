//! The paper's models (§VII; DESIGN.md §15) and the compute time of one training iteration.
//!
//! The paper gives model sizes and job shapes but not compute times; it says an iteration's
//! compute is "calculated in advance for training one iteration with a full batch and divided
//! by the number of assigned workers". We derive it the same way from published per-GPU
//! training throughput on a V100 (the GPU generation of the paper's era):
//!
//! | model    | bytes  | arch | global batch     | V100 throughput (FP32)                  | source |
//! |----------|--------|------|------------------|-----------------------------------------|--------|
//! | VGG19    | 549 MB | ring | 256 images       | ≈ 195 img/s                             | [1] VGG16 rate scaled by FLOPs 15.5/19.6 G |
//! | VGG16    | 528 MB | PS   | 256 images       | ≈ 236 img/s                             | [1] |
//! | ResNet50 | 98 MB  | PS   | 256 images       | ≈ 368 img/s                             | [1] |
//! | GPT-2    | 1.2 GB | ring | 24 seq × 1024 tok| ≈ 16 seq/s (≈ 6·N·tokens FLOPs, N ≈ 300 M, at ≈ 30 TFLOP/s sustained mixed precision) | [2] |
//!
//! [1] Lambda Labs, "Deep Learning GPU Benchmarks", TensorFlow FP32 training throughput of
//!     V100 (ResNet-50 ≈ 368 img/s, VGG16 ≈ 236 img/s).
//! [2] Kaplan et al. 2020 (training FLOPs ≈ 6·N·tokens); NVIDIA V100 datasheet (125 TFLOP/s
//!     tensor peak; ≈ 25 % sustained is typical for transformer training of that era).
//!
//! Per-iteration compute = global batch / (workers × per-GPU throughput). A PS job's servers
//! do not compute. Cross-check against ASC-WFBP's all-reduce model t = a + b·m (a = 1.4 ms,
//! b = 1.7 ns/B, peer paper 001): a 549 MB all-reduce costs ≈ 0.93 s there, the same order as
//! VGG19's compute (0.44 s) — so these jobs are communication-heavy, as the paper's are.

use mlcc_core::job::Arch;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Model {
    pub name: &'static str,
    pub bytes: u64,
    pub arch: Arch,
    /// Samples per iteration over all workers.
    pub global_batch: f64,
    /// Samples per second one V100 trains.
    pub samples_per_sec: f64,
    /// The paper's job shape: PS jobs have 2 servers + 2 workers, ring jobs 3 workers.
    pub workers: u32,
    pub servers: u32,
}

pub const MODELS: [Model; 4] = [
    Model {
        name: "vgg19",
        bytes: 549_000_000,
        arch: Arch::Allreduce,
        global_batch: 256.0,
        samples_per_sec: 195.0,
        workers: 3,
        servers: 0,
    },
    Model {
        name: "vgg16",
        bytes: 528_000_000,
        arch: Arch::Ps,
        global_batch: 256.0,
        samples_per_sec: 236.0,
        workers: 2,
        servers: 2,
    },
    Model {
        name: "resnet50",
        bytes: 98_000_000,
        arch: Arch::Ps,
        global_batch: 256.0,
        samples_per_sec: 368.0,
        workers: 2,
        servers: 2,
    },
    Model {
        name: "gpt2",
        bytes: 1_200_000_000,
        arch: Arch::Allreduce,
        global_batch: 24.0,
        samples_per_sec: 16.0,
        workers: 3,
        servers: 0,
    },
];

pub fn by_name(name: &str) -> Option<&'static Model> {
    MODELS.iter().find(|m| m.name.eq_ignore_ascii_case(name))
}

impl Model {
    /// Seconds of compute per iteration with `workers` workers sharing the global batch.
    pub fn compute_secs(&self, workers: u32) -> f64 {
        self.global_batch / (f64::from(workers.max(1)) * self.samples_per_sec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compute_times_are_plausible() {
        let v = by_name("VGG19").unwrap();
        assert!((v.compute_secs(3) - 0.4376).abs() < 1e-3);
        assert!((by_name("resnet50").unwrap().compute_secs(2) - 0.3478).abs() < 1e-3);
        assert!((by_name("gpt2").unwrap().compute_secs(3) - 0.5).abs() < 1e-9);
        assert!(by_name("bert").is_none());
    }
}
