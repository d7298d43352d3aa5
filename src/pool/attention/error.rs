//! The errors of `pool_attention`: one variant per documented message, in the order the checks
//! run (`docs/CONTRACT.md`, checks 16 to 26, then the device and checked-mode checks).

use crate::Dims;
use crate::common::Fp8PoolError;
use burn::tensor::DType;

/// Why a `pool_attention` call was refused. Checked before anything runs, in the order of the
/// variants below; `Display` gives the documented text.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PoolAttentionError {
    /// q, k_pool or v_pool is not 3-D (check 16).
    #[error("pool_attention expects q and the pools to be 3-D")]
    Rank {
        /// q's shape.
        q: Dims,
        /// k_pool's shape.
        k_pool: Dims,
        /// v_pool's shape.
        v_pool: Dims,
    },
    /// An index array is not 1-D (check 17).
    #[error("pool_attention expects qo_indptr, kv_indptr and kv_indices to be 1-D")]
    IndexRank {
        /// qo_indptr's shape.
        qo_indptr: Dims,
        /// kv_indptr's shape.
        kv_indptr: Dims,
        /// kv_indices' shape.
        kv_indices: Dims,
    },
    /// q's head count or head size differs from the config (check 18).
    #[error("q shape must be [num_tokens, num_qo_heads, head_dim], got {q}")]
    QShape {
        /// q's shape.
        q: Dims,
    },
    /// k_pool's head count or head size differs from the config (check 19).
    #[error("k_pool has incompatible shape {k_pool}")]
    KPoolShape {
        /// k_pool's shape.
        k_pool: Dims,
    },
    /// v_pool's shape differs from k_pool's (check 19).
    #[error("v_pool shape must match k_pool shape, got {v_pool} vs {k_pool}")]
    VPoolShape {
        /// v_pool's shape.
        v_pool: Dims,
        /// k_pool's shape.
        k_pool: Dims,
    },
    /// The q heads do not split evenly over the kv heads, or there are none (check 20).
    #[error(
        "num_qo_heads must be a multiple of num_kv_heads, got {num_qo_heads} and {num_kv_heads}"
    )]
    HeadRatio {
        /// The config's query head count.
        num_qo_heads: usize,
        /// The config's kv head count.
        num_kv_heads: usize,
    },
    /// The two indptr arrays do not describe the same number of sequences (check 21).
    #[error("qo_indptr and kv_indptr must both have batch + 1 entries, got {qo} and {kv}")]
    IndptrLen {
        /// Entries of qo_indptr.
        qo: usize,
        /// Entries of kv_indptr.
        kv: usize,
    },
    /// qo_indptr does not start at 0, decreases, or does not end at the token count (check 22).
    #[error("qo_indptr must start at 0, never decrease and end at num_tokens {num_tokens}")]
    QoIndptr {
        /// Rows of q.
        num_tokens: usize,
    },
    /// kv_indptr does not start at 0, decreases, or does not end at `len(kv_indices)` (check
    /// 23).
    #[error("kv_indptr must start at 0, never decrease and end at len(kv_indices) {nnz}")]
    KvIndptr {
        /// Entries of kv_indices.
        nnz: usize,
    },
    /// Causal attention of a sequence with more queries than keys (check 24).
    #[error("sequence {seq} has {queries} queries but {keys} keys")]
    TooFewKeys {
        /// The sequence (its index in the batch).
        seq: usize,
        /// Its queries.
        queries: usize,
        /// Its keys.
        keys: usize,
    },
    /// q and the pools do not share one dtype (check 25).
    #[error("q and pool dtypes must match")]
    Dtype {
        /// q's dtype.
        q: DType,
        /// k_pool's dtype.
        k_pool: DType,
        /// v_pool's dtype.
        v_pool: DType,
    },
    /// `sm_scale` or the soft cap is not positive and finite (in f64, or once rounded to the
    /// f32 the kernels use), the sliding window is 0, or `head_dim` is 0 or above
    /// [`MAX_HEAD_DIM`](crate::pool::MAX_HEAD_DIM) (check 26).
    #[error("invalid attention parameter: {what}")]
    Parameter {
        /// What is wrong.
        what: String,
    },
    /// The pools' kinds or their fp8 settings are refused (check 19, for fp8 pools).
    #[error(transparent)]
    Fp8Pool(#[from] Fp8PoolError),
    /// The float dtype is not one the op computes in.
    #[error("pool_attention supports f32, f16 and bf16 tensors, got {dtype:?}")]
    FloatDtype {
        /// The dtype.
        dtype: DType,
    },
    /// The tensors and the plan are not all on one device.
    #[error("q, the pools and the plan must be on one device")]
    DeviceMismatch,
    /// The tensors live on a backend this build does not implement the op for, or under
    /// Autodiff (the op is inference only).
    #[error("pool_attention is not available on {device}: {why}")]
    UnsupportedBackend {
        /// The device, in its `Debug` form.
        device: String,
        /// Which feature to enable, or that the op has no backward.
        why: String,
    },
    /// The device cannot compute in this dtype (bf16 on WGSL).
    #[error("{dtype:?} is not supported on {device}")]
    DeviceDtype {
        /// The dtype.
        dtype: DType,
        /// The device, in its `Debug` form.
        device: String,
    },
    /// Checked mode: a kv index outside the pool.
    #[error("kv index {index} at kv_indices[{at}] is outside the pool of {pool_size} rows")]
    IndexOutOfPool {
        /// The index.
        index: i64,
        /// Its place in kv_indices.
        at: usize,
        /// Rows of the pool.
        pool_size: usize,
    },
}
