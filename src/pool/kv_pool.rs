//! A layer's KV pool: the k/v pool tensors the op writes, and the allocator of their rows.

use crate::op::{
    PoolTensor, QkNorm, RopePoolConfig, RopePoolInputs, check_fp8_settings, try_rope_pool_fused,
};
use crate::pool::{KvPoolError, SlotAllocator, check_pool_memory, pool_bytes};
use burn::tensor::{DType, Device, Int, Tensor, TensorData};

/// One attention layer's KV pool: `k`/`v` pools of `[pool_size, num_kv_heads, head_dim]` (float,
/// or fp8: [`KvPool::try_new_fp8`]) and the allocator of their rows. [`KvPool::write`] runs the
/// fused op and keeps the updated pools (in place: the pool owns the only handle).
#[derive(Debug)]
pub struct KvPool {
    k: Option<PoolTensor>,
    v: Option<PoolTensor>,
    /// The allocator of the pool's rows.
    pub slots: SlotAllocator,
    config: RopePoolConfig,
}

impl KvPool {
    /// An empty pool of `pool_size` rows for a layer of geometry `config`, zero-filled.
    ///
    /// # Panics
    /// Where [`Self::try_new`] refuses the size.
    pub fn new(config: RopePoolConfig, pool_size: usize, device: &Device, dtype: DType) -> Self {
        Self::try_new(config, pool_size, device, dtype).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Self::new`], refusing before anything is allocated a pool past i32 slots or past what
    /// the device can hold ([`memory_limit`](crate::pool::memory_limit)).
    pub fn try_new(
        config: RopePoolConfig,
        pool_size: usize,
        device: &Device,
        dtype: DType,
    ) -> Result<Self, KvPoolError> {
        Self::allocate(config, pool_size, device, dtype, None)
    }

    /// [`Self::try_new`] with fp8 e4m3 pools of these scales ([`PoolTensor::Fp8`]: one byte an
    /// element); refused before anything is allocated unless `head_dim` and `rotary_dim / 2` are
    /// multiples of 4 and the scales are in `2^-100..=2^100`.
    pub fn try_new_fp8(
        config: RopePoolConfig,
        pool_size: usize,
        device: &Device,
        k_scale: f32,
        v_scale: f32,
    ) -> Result<Self, KvPoolError> {
        let rotary_dim = Some(config.rotary_dim());
        check_fp8_settings(config.head_dim, rotary_dim, [k_scale, v_scale])
            .map_err(|e| KvPoolError::Op(e.into()))?;
        Self::allocate(
            config,
            pool_size,
            device,
            DType::U8,
            Some((k_scale, v_scale)),
        )
    }

    /// Zeroed pools of `dtype`, or fp8 ones (`DType::U8`: one byte an element) with scales.
    fn allocate(
        config: RopePoolConfig,
        pool_size: usize,
        device: &Device,
        dtype: DType,
        fp8: Option<(f32, f32)>,
    ) -> Result<Self, KvPoolError> {
        let shape = [pool_size, config.num_kv_heads, config.head_dim];
        let bytes = pool_bytes(pool_size, config.num_kv_heads, config.head_dim, dtype, 2);
        check_pool_memory(device, pool_size, bytes, 2, None)?;
        let zeros = |scale: Option<f32>| match scale {
            Some(scale) => PoolTensor::fp8_zeros(shape, scale, device),
            None => Tensor::<3>::zeros(shape, (device, dtype)).into(),
        };
        Ok(Self {
            k: Some(zeros(fp8.map(|s| s.0))),
            v: Some(zeros(fp8.map(|s| s.1))),
            slots: SlotAllocator::try_new(pool_size)?,
            config,
        })
    }

    /// The op's parameters for this pool.
    pub fn config(&self) -> &RopePoolConfig {
        &self.config
    }

    /// The key pool.
    pub fn k(&self) -> &PoolTensor {
        self.k
            .as_ref()
            .expect("pool tensors are always present between calls")
    }

    /// The value pool.
    pub fn v(&self) -> &PoolTensor {
        self.v
            .as_ref()
            .expect("pool tensors are always present between calls")
    }

    /// Rotates `q`/`k` at `positions` and stores rotated `k` and `v` at `slots` (host values,
    /// one per token; negative: not stored). Returns `(q_rot, k_rot)` (`k_rot` empty when the
    /// pool's config has `k_rot` off). A refused call leaves the pool as it was.
    pub fn write(
        &mut self,
        q: Tensor<3>,
        k: Tensor<3>,
        v: Tensor<3>,
        positions: &[i64],
        slots: &[i64],
    ) -> Result<(Tensor<3>, Tensor<3>), KvPoolError> {
        let device = q.device();
        let index = |values: &[i64]| {
            Tensor::<1, Int>::from_data(TensorData::new(values.to_vec(), [values.len()]), &device)
        };
        // M-RoPE positions come as three rows, one after the other.
        let positions = match self.config.mrope {
            Some(_) if positions.len().is_multiple_of(3) => index(positions)
                .reshape([3, positions.len() / 3])
                .into_dispatch(),
            _ => index(positions).into_dispatch(),
        };
        let present = "pool tensors are always present between calls";
        let inputs = RopePoolInputs {
            q: q.into_dispatch(),
            k: k.into_dispatch(),
            v: v.into_dispatch(),
            positions,
            slots: index(slots).into_dispatch(),
            k_pool: self.k.take().expect(present),
            v_pool: self.v.take().expect(present),
            qk_norm: QkNorm::None,
        };
        // The pools go in as their only handles (updated in place) and come back either way.
        match try_rope_pool_fused(inputs, &self.config) {
            Ok(out) => {
                (self.k, self.v) = (Some(out.k_pool), Some(out.v_pool));
                Ok((out.q_rot, out.k_rot))
            }
            Err(refused) => {
                let inputs = refused.inputs;
                (self.k, self.v) = (Some(inputs.k_pool), Some(inputs.v_pool));
                Err(refused.error.into())
            }
        }
    }
}
