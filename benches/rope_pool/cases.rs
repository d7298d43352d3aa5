//! What is measured: the model shapes, the RoPE variants and their configs, and the random
//! inputs and pools of a call.

use burn::tensor::{DType, Device, Distribution, Int, Tensor, TensorData};
use burn_rope_pool::RopePoolInputs;
use burn_rope_pool::pool::PoolTensor;
use burn_rope_pool::testing::Rng;
use burn_rope_pool::{MRope, RopePoolConfig, RopeScaling, RopeStyle};

/// A model's attention heads (head_dim [`HEAD_DIM`]).
#[derive(Clone, Copy)]
pub struct Model {
    pub name: &'static str,
    /// Query heads.
    pub hq: usize,
    /// Key/value heads.
    pub hkv: usize,
}

impl Model {
    const fn new(name: &'static str, hq: usize, hkv: usize) -> Self {
        Self { name, hq, hkv }
    }
}

/// The models of the tables, head_dim 128.
pub const MODELS: [Model; 3] = [
    Model::new("llama3-8b", 32, 8),
    Model::new("llama3-70b-tp8", 8, 1),
    Model::new("qwen2.5-7b", 28, 4),
];
pub const HEAD_DIM: usize = 128;

/// The variants of the `--variants` rows: plain NeoX first, then each variant on its own, as a
/// model's `config.json` would set it (head_dim 128, θ = 500000).
pub const VARIANTS: [&str; 11] = [
    "neox", "gptj", "partial", "llama3", "yarn", "longrope", "mrope", "views", "no-k-rot",
    "qk-norm", "fp8-pool",
];

pub fn variant_config(variant: &str, model: Model) -> RopePoolConfig {
    let config = RopePoolConfig::new(HEAD_DIM, model.hq, model.hkv).with_rope_base(500_000.0);
    match variant {
        "gptj" => config.with_style(RopeStyle::Gptj),
        "partial" => config.with_rotary_dim(Some(HEAD_DIM / 4)),
        "llama3" => config.with_scaling(RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        }),
        "yarn" => config.with_scaling(RopeScaling::yarn(4.0, Some(32768.0), Some(131072.0))),
        "longrope" => config.with_scaling(RopeScaling::LongRope {
            short_factor: (0..HEAD_DIM / 2).map(|i| 1.0 + i as f64 / 64.0).collect(),
            long_factor: (0..HEAD_DIM / 2).map(|i| 1.0 + i as f64).collect(),
            original_max_position_embeddings: Some(4096.0),
            max_position_embeddings: Some(131072.0),
            attention_factor: None,
            factor: None,
        }),
        "mrope" => config.with_mrope(Some(MRope {
            section: [16, 24, 24],
            interleaved: false,
        })),
        // Keys to the pool rows only (what the attention layer and the decoder use).
        "no-k-rot" => config.with_k_rot(false),
        // "views": plain NeoX on q, k, v sliced from one fused QKV projection (see `inputs`);
        // "qk-norm": plain NeoX with Qwen3's per-head q/k norm (Qwen3-8B has these heads);
        // "fp8-pool": plain NeoX writing fp8 e4m3 pools.
        _ => config,
    }
}

/// The sizes of a call: element type, tokens, heads and pool rows.
#[derive(Clone, Copy)]
pub struct Shape {
    pub dtype: DType,
    pub tokens: usize,
    pub model: Model,
    /// Rows of each of the k and v pools.
    pub pool: usize,
}

/// How a call's inputs are drawn and laid out.
#[derive(Clone, Copy)]
pub struct Layout {
    /// Seed of the slots and positions.
    pub seed: u64,
    /// Token `i` writes pool row `i` instead of a random row (`--sequential-slots`).
    pub sequential_slots: bool,
    /// q, k and v are head slices of one fused QKV projection output.
    pub views: bool,
}

impl Layout {
    /// Random slots, separate q, k and v tensors.
    pub fn random(seed: u64) -> Self {
        Self {
            seed,
            sequential_slots: false,
            views: false,
        }
    }
}

pub struct Inputs {
    pub q: Tensor<3>,
    pub k: Tensor<3>,
    pub v: Tensor<3>,
    pub positions: Tensor<1, Int>,
    /// M-RoPE rows `[3, T]` (the 1-D positions repeated with offsets).
    pub mrope_positions: Tensor<2, Int>,
    pub slots: Tensor<1, Int>,
}

impl Inputs {
    /// A call's inputs: these tensors (1-D positions) and the pools `k_pool`, `v_pool`.
    pub fn call(&self, k_pool: PoolTensor, v_pool: PoolTensor) -> RopePoolInputs {
        RopePoolInputs::new(
            self.q.clone(),
            self.k.clone(),
            self.v.clone(),
            self.positions.clone(),
            self.slots.clone(),
            k_pool,
            v_pool,
        )
    }
}

/// Norm weights `[HEAD_DIM]` for the `qk-norm` variant, in `dtype`: values around 1.
pub fn norm_weights(device: &Device, dtype: DType, seed: u64) -> [Tensor<1>; 2] {
    let mut rng = Rng::new(seed);
    [0, 1].map(|_| {
        let values: Vec<f32> = rng
            .values(HEAD_DIM)
            .iter()
            .map(|x| (1.0 + 0.5 * x) as f32)
            .collect();
        Tensor::from_data(TensorData::new(values, [HEAD_DIM]), (device, dtype))
    })
}

/// The per-head norm of `x` (`[T, H, D]`) with Burn's tensor ops, as a model without the fused
/// norm runs it (transformers' `Qwen3RMSNorm`): f32 mean of squares, rsqrt, cast, weight.
pub fn burn_head_norm(x: Tensor<3>, weight: &Tensor<1>, eps: f64) -> Tensor<3> {
    let dtype = x.dtype();
    let x = x.cast(DType::F32);
    let scale = (x.clone().powi_scalar(2).mean_dim(2) + eps).sqrt().recip();
    (x * scale).cast(dtype) * weight.clone().reshape([1, 1, HEAD_DIM])
}

pub fn inputs(device: &Device, shape: Shape, layout: Layout) -> Inputs {
    let Shape {
        dtype,
        tokens,
        model: Model { hq, hkv, .. },
        pool,
    } = shape;
    let dist = Distribution::Normal(0.0, 1.0);
    let mut rng = Rng::from_state(layout.seed | 1);
    let mut next = move || rng.next_u64();
    // Distinct valid slots (a partial Fisher–Yates over the pool, or rows 0, 1, 2, ... in
    // order), positions below 131072. The shuffle's draws are made in both orders, so the
    // positions, drawn after them, are the same either way and an A/B differs only in the slots.
    let mut rows: Vec<i32> = (0..pool as i32).collect();
    for i in 0..tokens {
        let j = i + (next() as usize) % (pool - i);
        if !layout.sequential_slots {
            rows.swap(i, j);
        }
    }
    let slots = rows[..tokens].to_vec();
    let positions: Vec<i32> = (0..tokens).map(|_| (next() % 131_072) as i32).collect();
    let rows: Vec<i32> = (0..3)
        .flat_map(|r| positions.iter().map(move |p| p / (r + 1)))
        .collect();
    // With `views`, q, k and v are head slices of one `[T, Hq + 2·Hkv, D]` projection output.
    let (q, k, v) = if layout.views {
        let qkv = Tensor::<3>::random([tokens, hq + 2 * hkv, HEAD_DIM], dist, (device, dtype));
        (
            qkv.clone().slice([0..tokens, 0..hq]),
            qkv.clone().slice([0..tokens, hq..hq + hkv]),
            qkv.slice([0..tokens, hq + hkv..hq + 2 * hkv]),
        )
    } else {
        (
            Tensor::random([tokens, hq, HEAD_DIM], dist, (device, dtype)),
            Tensor::random([tokens, hkv, HEAD_DIM], dist, (device, dtype)),
            Tensor::random([tokens, hkv, HEAD_DIM], dist, (device, dtype)),
        )
    };
    Inputs {
        mrope_positions: Tensor::from_data(TensorData::new(rows, [3, tokens]), device),
        q,
        k,
        v,
        positions: Tensor::from_data(TensorData::new(positions, [tokens]), device),
        slots: Tensor::from_data(TensorData::new(slots, [tokens]), device),
    }
}

/// Random normal k and v pools of `shape.pool` rows, held in options so a call can take them.
pub fn random_pools(device: &Device, shape: Shape) -> (Option<PoolTensor>, Option<PoolTensor>) {
    let pool = || {
        let dist = Distribution::Normal(0.0, 1.0);
        let dims = [shape.pool, shape.model.hkv, HEAD_DIM];
        Some(Tensor::<3>::random(dims, dist, (device, shape.dtype)).into())
    };
    (pool(), pool())
}

/// Zeroed fp8 pools of the shape's rows (the `fp8-pool` variant), scale 1/32 (rotated keys and
/// values of unit variance stay well inside ±448 · scale).
pub fn fp8_pools(device: &Device, shape: Shape) -> (Option<PoolTensor>, Option<PoolTensor>) {
    let dims = [shape.pool, shape.model.hkv, HEAD_DIM];
    let pool = || Some(PoolTensor::fp8_zeros(dims, 1.0 / 32.0, device));
    (pool(), pool())
}
