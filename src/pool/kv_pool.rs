//! The KV pool: the k/v pool tensors of every layer the op writes, and the allocator of their
//! rows (one row per token, shared by all layers).

use crate::op::{
    PoolTensor, QkNorm, RefusedCall, RopePoolConfig, RopePoolInputs, RopePoolOutputs,
    check_fp8_settings, try_rope_pool_fused,
};
use crate::pool::slots::SlotAllocator;
use crate::pool::{
    KvPoolError, PoolAttentionConfig, PoolAttentionInputs, SeqId, StepPlan, check_pool_memory,
    pool_attention, pool_bytes,
};
use burn::tensor::{DType, Device, Tensor};
use std::sync::atomic::{AtomicU64, Ordering};

/// The id of the next pool made.
static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(0);

/// What a pool's rows hold: the activations' float dtype, or fp8 e4m3 with one scale per pool.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum PoolStorage {
    Float(DType),
    Fp8 { k_scale: f32, v_scale: f32 },
}

impl PoolStorage {
    /// The bytes of an element as stored.
    fn dtype(self) -> DType {
        match self {
            PoolStorage::Float(dtype) => dtype,
            PoolStorage::Fp8 { .. } => DType::U8,
        }
    }
}

/// The KV pools of one or more attention layers — `k`/`v` of `[rows, num_kv_heads, head_dim]`
/// per layer (float, or fp8: [`KvPool::try_new_fp8`]) — and the allocator of their rows, one row
/// per token of a running sequence, shared by every layer.
///
/// A step runs in three moves: [`KvPool::plan_step`] checks the ragged batch and allocates its
/// rows; each layer calls [`KvPool::write`] (the fused op: RoPE, then k/v into the rows) and
/// [`KvPool::attend`] (`pool_attention` over each sequence's rows); [`KvPool::release`] frees a
/// finished sequence.
#[derive(Debug)]
pub struct KvPool {
    k: Vec<Option<PoolTensor>>,
    v: Vec<Option<PoolTensor>>,
    pub(super) slots: SlotAllocator,
    config: RopePoolConfig,
    rows: usize,
    device: Device,
    #[cfg_attr(not(all(feature = "cube", not(feature = "fusion"))), allow(dead_code))]
    /// This pool among every pool of the process, and how many times its layers' buffers may
    /// have been replaced (a write while a caller held a clone of a layer's pool copies it):
    /// a graph captured over the pool replays only on the same buffers.
    id: u64,
    generation: u64,
    /// Alive while the pool is: what a graph captured over it watches (it drops with the pool).
    alive: std::sync::Arc<()>,
}

const PRESENT: &str = "pool tensors are present between calls";

impl KvPool {
    /// An empty one-layer pool of `rows` rows for geometry `config`, zero-filled in `dtype`;
    /// refused before anything is allocated past i32 slots or past what the device can hold
    /// ([`memory_limit`](crate::pool::memory_limit)).
    pub fn try_new(
        config: RopePoolConfig,
        rows: usize,
        device: &Device,
        dtype: DType,
    ) -> Result<Self, KvPoolError> {
        Self::with_layers(config, 1, rows, device, PoolStorage::Float(dtype), None)
    }

    /// [`Self::try_new`] with fp8 e4m3 pools of these scales ([`PoolTensor::Fp8`]: one byte an
    /// element); refused before anything is allocated unless `head_dim` and `rotary_dim / 2` are
    /// multiples of 4 and the scales are in `2^-100..=2^100`.
    pub fn try_new_fp8(
        config: RopePoolConfig,
        rows: usize,
        device: &Device,
        k_scale: f32,
        v_scale: f32,
    ) -> Result<Self, KvPoolError> {
        let storage = PoolStorage::Fp8 { k_scale, v_scale };
        Self::with_layers(config, 1, rows, device, storage, None)
    }

    /// The bytes of `layers` layers' pools of `rows` rows (`None` past `u64::MAX`).
    pub(crate) fn bytes(
        config: &RopePoolConfig,
        layers: usize,
        rows: usize,
        storage: PoolStorage,
    ) -> Option<u64> {
        let (heads, dim) = (config.num_kv_heads, config.head_dim);
        pool_bytes(rows, heads, dim, storage.dtype(), 2 * layers)
    }

    /// Zeroed pools for `layers` layers, checked first (fp8 settings, i32 slots, the device's
    /// memory and the caller's `limit` in bytes).
    pub(crate) fn with_layers(
        config: RopePoolConfig,
        layers: usize,
        rows: usize,
        device: &Device,
        storage: PoolStorage,
        limit: Option<u64>,
    ) -> Result<Self, KvPoolError> {
        if let PoolStorage::Fp8 { k_scale, v_scale } = storage {
            let rotary_dim = Some(config.rotary_dim());
            check_fp8_settings(config.head_dim, rotary_dim, [k_scale, v_scale])
                .map_err(|e| KvPoolError::Op(e.into()))?;
        }
        let bytes = Self::bytes(&config, layers, rows, storage);
        check_pool_memory(device, rows, bytes, 2 * layers as u64, limit)?;
        let slots = SlotAllocator::try_new(rows)?;
        let shape = [rows, config.num_kv_heads, config.head_dim];
        let zeros = |fp8_scale: Option<f32>| {
            Some(match (storage, fp8_scale) {
                (_, Some(scale)) => PoolTensor::fp8_zeros(shape, scale, device),
                (storage, None) => Tensor::<3>::zeros(shape, (device, storage.dtype())).into(),
            })
        };
        let (k_scale, v_scale) = match storage {
            PoolStorage::Fp8 { k_scale, v_scale } => (Some(k_scale), Some(v_scale)),
            PoolStorage::Float(_) => (None, None),
        };
        Ok(Self {
            k: (0..layers).map(|_| zeros(k_scale)).collect(),
            v: (0..layers).map(|_| zeros(v_scale)).collect(),
            slots,
            config,
            rows,
            device: device.clone(),
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
            generation: 0,
            alive: std::sync::Arc::new(()),
        })
    }

    #[cfg_attr(not(all(feature = "cube", not(feature = "fusion"))), allow(dead_code))]
    /// Which buffers hold the pools: the same value only while every layer's pool stays in the
    /// buffers it had (see the `id` and `generation` fields).
    pub(crate) fn buffers_key(&self) -> (u64, u64) {
        (self.id, self.generation)
    }

    /// A handle that stops upgrading once this pool is dropped.
    #[cfg_attr(not(all(feature = "cube", not(feature = "fusion"))), allow(dead_code))]
    pub(crate) fn alive(&self) -> std::sync::Weak<()> {
        std::sync::Arc::downgrade(&self.alive)
    }

    #[cfg_attr(not(all(feature = "cube", not(feature = "fusion"))), allow(dead_code))]
    /// Whether every layer's pools are held by this pool alone (see [`Self::in_place`]): a
    /// captured step, which writes them in place, replays only then.
    pub(crate) fn sole_holder(&self) -> bool {
        (0..self.k.len()).all(|layer| self.in_place(layer))
    }

    /// Whether layer `layer`'s pools are held by this pool alone, so that a write updates them
    /// in place (known on CubeCL devices without Burn's fusion stream; `false` elsewhere).
    fn in_place(&self, layer: usize) -> bool {
        #[cfg(all(feature = "cube", not(feature = "fusion")))]
        {
            let sole = |p: &Option<PoolTensor>| {
                p.as_ref()
                    .and_then(|p| crate::common::cube::cube_tensor(p.stored()))
                    .is_some_and(|t| t.handle.can_mut())
            };
            sole(&self.k[layer]) && sole(&self.v[layer])
        }
        #[cfg(not(all(feature = "cube", not(feature = "fusion"))))]
        {
            let _ = layer;
            false
        }
    }

    /// The op's parameters for this pool.
    pub fn config(&self) -> &RopePoolConfig {
        &self.config
    }

    /// The device the pools live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Layers (pairs of k/v pools).
    pub fn layers(&self) -> usize {
        self.k.len()
    }

    /// Rows of each pool.
    pub fn pool_rows(&self) -> usize {
        self.rows
    }

    /// Free rows.
    pub fn available(&self) -> usize {
        self.slots.available()
    }

    /// Every row `seq` holds, in position order (`None`: it holds none).
    pub fn rows(&self, seq: SeqId) -> Option<&[i32]> {
        self.slots.rows(seq)
    }

    /// Frees every row of a finished sequence for reuse; returns how many.
    pub fn release(&mut self, seq: SeqId) -> Result<usize, KvPoolError> {
        self.slots.release(seq)
    }

    /// Layer `layer`'s key pool.
    ///
    /// # Panics
    /// If `layer` is not below [`Self::layers`].
    pub fn k(&self, layer: usize) -> &PoolTensor {
        self.k[layer].as_ref().expect(PRESENT)
    }

    /// Layer `layer`'s value pool.
    ///
    /// # Panics
    /// If `layer` is not below [`Self::layers`].
    pub fn v(&self, layer: usize) -> &PoolTensor {
        self.v[layer].as_ref().expect(PRESENT)
    }

    fn check_layer(&self, layer: usize) -> Result<(), KvPoolError> {
        match layer < self.layers() {
            true => Ok(()),
            false => Err(KvPoolError::Layer {
                layer,
                layers: self.layers(),
            }),
        }
    }

    /// Layer `layer`'s write of a planned step: rotates `q`/`k` (`[T, heads, head_dim]`, batch
    /// order) at the step's positions and stores the rotated `k` and `v` at its rows, in one
    /// `rope_pool_fused` call; `qk_norm` (q and k weights of `[head_dim]`) applies Qwen3's
    /// per-head RMSNorm first. Returns `(q_rot, k_rot)` (`k_rot` empty when the config has
    /// `k_rot` off). A refused call leaves the pools as they were.
    pub fn write(
        &mut self,
        layer: usize,
        step: &StepPlan,
        q: Tensor<3>,
        k: Tensor<3>,
        v: Tensor<3>,
        qk_norm: Option<(Tensor<1>, Tensor<1>)>,
    ) -> Result<(Tensor<3>, Tensor<3>), KvPoolError> {
        self.write_using(layer, step, q, k, v, qk_norm, try_rope_pool_fused)
    }

    /// [`Self::write`] through `op` (the fused op, or an oracle of it).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_using(
        &mut self,
        layer: usize,
        step: &StepPlan,
        q: Tensor<3>,
        k: Tensor<3>,
        v: Tensor<3>,
        qk_norm: Option<(Tensor<1>, Tensor<1>)>,
        op: impl FnOnce(RopePoolInputs, &RopePoolConfig) -> Result<RopePoolOutputs, RefusedCall>,
    ) -> Result<(Tensor<3>, Tensor<3>), KvPoolError> {
        self.check_layer(layer)?;
        if !self.in_place(layer) {
            // The op may copy the pools into new buffers.
            self.generation += 1;
        }
        // M-RoPE takes three position rows; a text token has the same position in each.
        let positions = match self.config.mrope {
            Some(_) => {
                let t = step.tokens();
                let rows = step.positions.clone().reshape([1, t]).expand([3, t]);
                rows.into_dispatch()
            }
            None => step.positions.clone().into_dispatch(),
        };
        let mut inputs = RopePoolInputs {
            q: q.into_dispatch(),
            k: k.into_dispatch(),
            v: v.into_dispatch(),
            positions,
            slots: step.slots.clone().into_dispatch(),
            k_pool: self.k[layer].take().expect(PRESENT),
            v_pool: self.v[layer].take().expect(PRESENT),
            qk_norm: QkNorm::None,
        };
        if let Some((q_weight, k_weight)) = qk_norm {
            inputs = inputs.with_qk_norm(q_weight, k_weight);
        }
        // The pools go in as their only handles (updated in place) and come back either way.
        match op(inputs, &self.config) {
            Ok(out) => {
                (self.k[layer], self.v[layer]) = (Some(out.k_pool), Some(out.v_pool));
                Ok((out.q_rot, out.k_rot))
            }
            Err(RefusedCall { error, inputs }) => {
                (self.k[layer], self.v[layer]) = (Some(inputs.k_pool), Some(inputs.v_pool));
                Err(error.into())
            }
        }
    }

    /// Layer `layer`'s attention of a planned step: `q_rot` (`[T, num_qo_heads, head_dim]`,
    /// batch order, as [`Self::write`] returns it) over every row each token's sequence holds,
    /// through [`pool_attention`] with `config`. Returns `[T, num_qo_heads, head_dim]` in batch
    /// order.
    pub fn attend(
        &self,
        layer: usize,
        step: &StepPlan,
        q_rot: Tensor<3>,
        config: &PoolAttentionConfig,
    ) -> Result<Tensor<3>, KvPoolError> {
        self.check_layer(layer)?;
        // Attention takes each sequence's tokens as one run of rows.
        let q_rot = match &step.order {
            Some((grouped, _)) => q_rot.select(0, grouped.clone()),
            None => q_rot,
        };
        let inputs = PoolAttentionInputs::new(q_rot, self.k(layer).clone(), self.v(layer).clone());
        let out = pool_attention(inputs, &step.attention, config)?.out;
        Ok(match &step.order {
            Some((_, back)) => out.select(0, back.clone()),
            None => out,
        })
    }
}
