//! A key or value pool as the op writes it and `pool_attention` reads it: in the activations'
//! float dtype, or fp8 e4m3 with one scale, four codes packed into each `u32` (WGSL has neither
//! an fp8 nor an 8-bit type, so every backend stores the same words and the kernels encode and
//! decode the bits themselves).

use burn::backend::{
    Backend, Dispatch, DispatchTensor, ExtensionType, TensorMetadata,
    tensor::{FloatTensor, IntTensor},
};
use burn::tensor::{DType, Device, Int, Shape, Tensor, TensorData};

/// A key or value pool.
///
/// - [`PoolTensor::Float`]: `[P, Hkv, D]` in the activations' dtype.
/// - [`PoolTensor::Fp8`]: fp8 e4m3 (OCP "E4M3FN": max 448, no infinities), `[P, Hkv, D / 4]`
///   words of dtype `U32`, element `4w + i` of a head row in bits `8i..8i + 8` of word `w` (the
///   bytes of an fp8 `[P, Hkv, D]` tensor on a little-endian machine); an element's value is its
///   code's value times `scale`, and a write stores e4m3(x · (1 / scale)), rounded to nearest
///   even and saturated to ±448 (the vLLM / FlashInfer convention). Half the bytes of an f16
///   pool. Make one with [`PoolTensor::fp8_zeros`]; read it back as floats with
///   [`PoolTensor::into_float`].
///
/// A `Tensor<3>` converts into a float pool (`.into()`).
#[derive(Clone, Debug, ExtensionType)]
#[extension_type(fusion: cfg(all(feature = "cube", feature = "fusion")))]
pub enum PoolTensor<B: Backend = Dispatch> {
    /// A pool in the activations' float dtype, `[P, Hkv, D]`.
    Float(FloatTensor<B>),
    /// An fp8 e4m3 pool: `[P, Hkv, D / 4]` `U32` words of four codes, and the per-tensor scale.
    Fp8 {
        /// The packed codes.
        words: IntTensor<B>,
        /// Value of an element = its code's value × `scale`.
        scale: f32,
    },
}

/// Why a call's pools were refused for their kind: the checks of fp8 pools, shared by
/// `rope_pool_fused` and `pool_attention` (each reports them through its own error type).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Fp8PoolError {
    /// One pool is fp8 and the other is not.
    #[error("k_pool and v_pool must both be float or both be fp8")]
    Kinds,
    /// fp8 pools given to a path that writes float pools only (the unfused tensor-op path).
    #[error("the unfused tensor-op path takes float pools only, not fp8")]
    Unfused,
    /// An fp8 pool's words are not `U32`.
    #[error("fp8 pools are U32 words, got {k_pool:?} and {v_pool:?}")]
    Dtype {
        /// k_pool's words' dtype.
        k_pool: DType,
        /// v_pool's words' dtype.
        v_pool: DType,
    },
    /// `head_dim` is not a multiple of 4 (a head row is whole words).
    #[error("fp8 pools need head_dim to be a multiple of 4, got {head_dim}")]
    HeadDim {
        /// The config's head_dim.
        head_dim: usize,
    },
    /// `rotary_dim / 2` is not a multiple of 4 (`rope_pool_fused` writes a pair's vectors as
    /// whole words).
    #[error("fp8 pools need rotary_dim / 2 to be a multiple of 4, got rotary_dim {rotary_dim}")]
    RotaryDim {
        /// The rotary dimension.
        rotary_dim: usize,
    },
    /// A scale outside `2^-100..=2^100` (NaN included): past it, a scale, its reciprocal or a
    /// code's value times it may leave f32's normal range, which some devices flush.
    #[error("fp8 pool scales must be in 2^-100..=2^100, got {scale}")]
    Scale {
        /// The scale.
        scale: f32,
    },
}

/// Whether the pools are fp8 (`Ok(true)`), float (`Ok(false)`, their dtypes checked by the
/// caller), or refused: mixed kinds, then for fp8 the words' dtype, `head_dim` (and, for the
/// op, `rotary_dim`), the scales.
pub(crate) fn check_pool_kinds<B: Backend>(
    k_pool: &PoolTensor<B>,
    v_pool: &PoolTensor<B>,
    head_dim: usize,
    rotary_dim: Option<usize>,
) -> Result<bool, Fp8PoolError> {
    let scales = match (k_pool.fp8_scale(), v_pool.fp8_scale()) {
        (None, None) => return Ok(false),
        (Some(k), Some(v)) => [k, v],
        _ => return Err(Fp8PoolError::Kinds),
    };
    let [dk, dv] = [k_pool, v_pool].map(|p| p.stored_dtype());
    if dk != DType::U32 || dv != DType::U32 {
        return Err(Fp8PoolError::Dtype {
            k_pool: dk,
            v_pool: dv,
        });
    }
    check_fp8_settings(head_dim, rotary_dim, scales)?;
    Ok(true)
}

/// The checks of fp8 pools that do not need the tensors: `head_dim` (and, for the op,
/// `rotary_dim / 2`) a multiple of 4, scales in `2^-100..=2^100`. Pool constructors run them
/// before they allocate.
pub(crate) fn check_fp8_settings(
    head_dim: usize,
    rotary_dim: Option<usize>,
    scales: [f32; 2],
) -> Result<(), Fp8PoolError> {
    if !head_dim.is_multiple_of(4) {
        return Err(Fp8PoolError::HeadDim { head_dim });
    }
    if let Some(rotary_dim) = rotary_dim.filter(|r| !(r / 2).is_multiple_of(4)) {
        return Err(Fp8PoolError::RotaryDim { rotary_dim });
    }
    let range = 2f32.powi(-100)..=2f32.powi(100);
    if let Some(&scale) = scales.iter().find(|s| !range.contains(s)) {
        return Err(Fp8PoolError::Scale { scale });
    }
    Ok(())
}

impl<B: Backend> PoolTensor<B> {
    /// The stored tensor's shape (`[P, Hkv, D / 4]` words for fp8).
    pub fn stored_shape(&self) -> Shape {
        match self {
            PoolTensor::Float(t) => t.shape(),
            PoolTensor::Fp8 { words, .. } => words.shape(),
        }
    }

    /// The stored tensor's dtype (`U32` for a well-formed fp8 pool).
    pub fn stored_dtype(&self) -> DType {
        match self {
            PoolTensor::Float(t) => t.dtype(),
            PoolTensor::Fp8 { words, .. } => words.dtype(),
        }
    }

    /// The fp8 scale, or `None` for a float pool.
    pub fn fp8_scale(&self) -> Option<f32> {
        match self {
            PoolTensor::Float(_) => None,
            PoolTensor::Fp8 { scale, .. } => Some(*scale),
        }
    }
}

impl<B, T> PoolTensor<B>
where
    B: Backend<FloatTensorPrimitive = T, IntTensorPrimitive = T>,
{
    /// The tensor the pool is stored in and its fp8 scale (`None`: a float pool), on backends
    /// whose float and integer tensors are one type (CubeCL, Flex).
    pub(crate) fn into_stored(self) -> (T, Option<f32>) {
        match self {
            PoolTensor::Float(t) => (t, None),
            PoolTensor::Fp8 { words, scale } => (words, Some(scale)),
        }
    }

    /// [`Self::into_stored`]'s inverse.
    pub(crate) fn from_stored(tensor: T, fp8_scale: Option<f32>) -> Self {
        match fp8_scale {
            Some(scale) => PoolTensor::Fp8 {
                words: tensor,
                scale,
            },
            None => PoolTensor::Float(tensor),
        }
    }
}

impl PoolTensor<Dispatch> {
    /// A float pool.
    pub fn float(tensor: Tensor<3>) -> Self {
        PoolTensor::Float(tensor.into_dispatch())
    }

    /// An fp8 pool from its words (`[P, Hkv, D / 4]`, `U32`) and scale.
    pub fn fp8(words: Tensor<3, Int>, scale: f32) -> Self {
        PoolTensor::Fp8 {
            words: words.into_dispatch(),
            scale,
        }
    }

    /// An fp8 pool of `rows` rows of `heads × head_dim` zeros (`head_dim` a multiple of 4).
    pub fn fp8_zeros([rows, heads, head_dim]: [usize; 3], scale: f32, device: &Device) -> Self {
        let words = Tensor::<3, Int>::zeros([rows, heads, head_dim / 4], (device, DType::U32));
        Self::fp8(words, scale)
    }

    /// The tensor the pool is stored in (the words for fp8).
    pub fn stored(&self) -> &DispatchTensor {
        match self {
            PoolTensor::Float(t) => t,
            PoolTensor::Fp8 { words, .. } => words,
        }
    }

    /// The float pool's tensor, or `None` for an fp8 pool.
    pub fn into_float_tensor(self) -> Option<Tensor<3>> {
        match self {
            PoolTensor::Float(t) => Some(Tensor::from_dispatch(t)),
            PoolTensor::Fp8 { .. } => None,
        }
    }

    /// The pool's values as a float tensor `[P, Hkv, D]`: a float pool as it is, an fp8 pool
    /// decoded to f32 (each code's exact value × scale, by a 256-entry table of the kernels'
    /// host codec and Burn's tensor ops).
    pub fn into_float(self) -> Tensor<3> {
        match self {
            PoolTensor::Float(t) => Tensor::from_dispatch(t),
            PoolTensor::Fp8 { words, scale } => {
                let words = Tensor::<3, Int>::from_dispatch(words);
                let [rows, heads, width] = words.dims();
                let device = words.device();
                let codes: Vec<Tensor<3, Int>> = (0..4)
                    .map(|i| {
                        words
                            .clone()
                            .bitwise_right_shift_scalar(8 * i)
                            .bitwise_and_scalar(0xFF)
                    })
                    .collect();
                let codes = Tensor::stack::<4>(codes, 3)
                    .reshape([rows * heads * width * 4])
                    .cast(DType::I32);
                let table: Vec<f32> = (0..=255u8)
                    .map(rope_pool_kernels::common::fp8::decode_host)
                    .collect();
                let table = Tensor::<1>::from_data(TensorData::new(table, [256]), &device);
                table.select(0, codes).reshape([rows, heads, width * 4]) * scale
            }
        }
    }
}

impl From<Tensor<3>> for PoolTensor<Dispatch> {
    fn from(tensor: Tensor<3>) -> Self {
        Self::float(tensor)
    }
}
