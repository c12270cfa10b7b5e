//! The model zoo: the paper's DNN models (§VII; docs/design.md §15), their bytes and the compute time
//! of one training iteration.
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
//!
//! **Buckets** (the per-layer model, [`crate::layers`]): each model's layers in four groups,
//! front (input side) first, with each group's share of the gradient bytes (parameter counts)
//! and of the compute (multiply-accumulates per sample), from the models' published layer
//! shapes (torchvision's VGG and ResNet definitions; GPT-2 medium, 24 blocks of width 1024):
//!
//! | model    | bucket 0 (front)            | bucket 1        | bucket 2        | bucket 3 (back)            |
//! |----------|-----------------------------|-----------------|-----------------|----------------------------|
//! | VGG19    | conv1–3: 1.6 % B, 57.1 % C  | conv4: 5.7 / 33.0 | conv5: 6.6 / 9.4 | fc6–8: 86.1 / 0.5        |
//! | VGG16    | conv1–3: 1.3 / 60.3         | conv4: 4.3 / 29.9 | conv5: 5.1 / 9.0 | fc6–8: 89.3 / 0.8        |
//! | ResNet50 | conv1, stages 1–2: 5.7 / 44.6 | stage 3: 27.8 / 35.9 | stage 4: 58.5 / 19.5 | fc: 8.0 / 0.0 |
//! | GPT-2    | embeddings: 14.8 / 0.0      | blocks 1–8: 28.4 / 28.5 | blocks 9–16: 28.4 / 28.5 | blocks 17–24 + head: 28.4 / 43.0 |
//!
//! (B: bytes, C: compute. GPT-2's token embedding is tied to its output head, so its gradient
//! is complete only when the backward pass reaches the input: it is the front bucket, and the
//! head's compute is counted with the back blocks.) Four buckets is our choice: frameworks fuse
//! gradients into buckets of tens of MB (PyTorch DDP: 25 MB), i.e. 4–48 buckets for these
//! models; four keeps every bucket a whole group of layers and the bookkeeping small, and the
//! VGG models' fully-connected bucket — 86–89 % of the bytes, computed first in the backward
//! pass — is where the overlap comes from.

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
    /// The per-layer model's buckets, front layers (input side) first: each bucket's share of
    /// the gradient bytes and of the compute (see [`Model::buckets`]).
    pub buckets: [Bucket; BUCKETS],
}

/// Buckets an iteration's gradient leaves in under the per-layer model.
pub const BUCKETS: usize = 4;

/// A group of consecutive layers whose gradients leave as one message (tensor fusion).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bucket {
    pub layers: &'static str,
    /// Share of the model's gradient bytes.
    pub bytes: f64,
    /// Share of the forward (and of the backward) compute.
    pub compute: f64,
}

const fn b(layers: &'static str, bytes: f64, compute: f64) -> Bucket {
    Bucket {
        layers,
        bytes,
        compute,
    }
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
        buckets: [
            b("conv1-conv3", 0.016, 0.571),
            b("conv4", 0.057, 0.330),
            b("conv5", 0.066, 0.094),
            b("fc6-fc8", 0.861, 0.005),
        ],
    },
    Model {
        name: "vgg16",
        bytes: 528_000_000,
        arch: Arch::Ps,
        global_batch: 256.0,
        samples_per_sec: 236.0,
        workers: 2,
        servers: 2,
        buckets: [
            b("conv1-conv3", 0.013, 0.603),
            b("conv4", 0.043, 0.299),
            b("conv5", 0.051, 0.090),
            b("fc6-fc8", 0.893, 0.008),
        ],
    },
    Model {
        name: "resnet50",
        bytes: 98_000_000,
        arch: Arch::Ps,
        global_batch: 256.0,
        samples_per_sec: 368.0,
        workers: 2,
        servers: 2,
        buckets: [
            b("conv1, stages 1-2", 0.057, 0.446),
            b("stage 3", 0.278, 0.359),
            b("stage 4", 0.585, 0.195),
            b("fc", 0.080, 0.0),
        ],
    },
    Model {
        name: "gpt2",
        bytes: 1_200_000_000,
        arch: Arch::Allreduce,
        global_batch: 24.0,
        samples_per_sec: 16.0,
        workers: 3,
        servers: 0,
        buckets: [
            b("embeddings (tied with the output head)", 0.148, 0.0),
            b("blocks 1-8", 0.284, 0.285),
            b("blocks 9-16", 0.284, 0.285),
            b("blocks 17-24, output head", 0.284, 0.430),
        ],
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

    /// The buckets' shares of bytes and compute, each normalised to sum to 1.
    pub fn bucket_shares(&self) -> ([f64; BUCKETS], [f64; BUCKETS]) {
        let (mut bytes, mut compute) = ([0.0; BUCKETS], [0.0; BUCKETS]);
        for (k, b) in self.buckets.iter().enumerate() {
            bytes[k] = b.bytes.max(0.0);
            compute[k] = b.compute.max(0.0);
        }
        for v in [&mut bytes, &mut compute] {
            let sum: f64 = v.iter().sum();
            for x in v.iter_mut() {
                *x = if sum > 0.0 {
                    *x / sum
                } else {
                    1.0 / BUCKETS as f64
                };
            }
        }
        (bytes, compute)
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

    #[test]
    fn bucket_shares_sum_to_one_and_vgg_is_back_heavy() {
        for m in &MODELS {
            let (b, c) = m.bucket_shares();
            assert!((b.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{}", m.name);
            assert!((c.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{}", m.name);
            assert!(
                (m.buckets.iter().map(|x| x.bytes).sum::<f64>() - 1.0).abs() < 1e-3,
                "{}",
                m.name
            );
        }
        let (b, c) = by_name("vgg16").unwrap().bucket_shares();
        assert!(b[3] > 0.85 && c[3] < 0.01);
    }
}
